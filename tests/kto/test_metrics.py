"""The metrics of one service process: the dashboard charts only what kto exposes, the endpoint serves
each service's own registry, and a bad ``--metrics-port`` is one line."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import parser

from shared import metrics
from shared.api import common
from shared.bus import events

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kto-dashboard.json"

KTO_METRICS = {
    metrics.JOBS_CREATED, metrics.JOBS_DELETED, metrics.JOBS_SUCCESSFUL, metrics.JOBS_FAILED, metrics.JOBS_RESTARTED,
    metrics.RECONCILE_TOTAL, metrics.RECONCILE_ERRORS, metrics.RECONCILE_TIME, metrics.REST_REQUESTS,
    metrics.REST_DURATION, metrics.CONSUMER_LAG, metrics.RECORDS_CONSUMED, metrics.RECORDS_PUBLISHED,
    metrics.RECORDS_DEAD_LETTERED, metrics.STATUS_WRITES, metrics.STATUS_WRITES_SKIPPED,
}
"""What issue 12 asked for; each must be on the dashboard."""

METRIC_NAME = re.compile(r"\b(?:training_operator|controller_runtime|rest_client|kto)_[a-z_]+\b")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and variable queries."""
    found = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    return found + [variable["query"]["query"] for variable in board["templating"]["list"]
                    if variable["type"] == "query"]


def test_the_dashboard_is_a_grafana_dashboard_with_the_datasource_as_a_variable() -> None:
    board = dashboard()
    assert board["title"] and board["uid"] and isinstance(board["schemaVersion"], int) and board["id"] is None
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        taken = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not taken & cells, f"{panel['title']} overlaps another panel"
        cells |= taken
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["refId"] and target["datasource"] == panel["datasource"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_metric_the_dashboard_queries_is_one_kto_exposes_and_each_is_charted() -> None:
    exposed = metrics.ServiceMetrics().names()
    expressions = queries(dashboard())
    for expr in expressions:
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
    charted = {name for expr in expressions for name in METRIC_NAME.findall(expr)}
    assert charted <= exposed, f"not exposed by kto: {sorted(charted - exposed)}"
    bases = {re.sub(r"_(bucket|count|sum)$", "", name) for name in charted}
    assert KTO_METRICS <= bases, f"not on the dashboard: {sorted(KTO_METRICS - bases)}"


def test_record_types_stay_bounded() -> None:
    service = metrics.ServiceMetrics()
    for i in range(metrics.MAX_RECORD_TYPES + 10):
        service.on_bus_event(events.BusEvent(events.MESSAGE_IN, {"type": f"decision:made_up_{i}"}))
    service.on_bus_event(events.BusEvent(events.MESSAGE_IN, {"type": "not a tag\n"}))
    service.on_bus_event(events.BusEvent(events.MESSAGE_IN, {}))
    labels = {sample.labels["type"] for family in service.registry.collect()
              if family.name == "kto_records_consumed" for sample in family.samples}
    assert len(labels) == metrics.MAX_RECORD_TYPES + 2 and {"other", "none"} <= labels


@pytest.mark.parametrize(("old", "new", "counted"), [
    pytest.param(None, ["Created"], {"created"}, id="first-write"),
    pytest.param(["Created"], ["Created", "Running"], set(), id="running"),
    pytest.param(["Created", "Running"], ["Created", "Running", "Succeeded"], {"successful"}, id="succeeded"),
    pytest.param(["Created", "Failed"], ["Created", "Failed"], set(), id="rewritten-failed"),
    pytest.param(None, ["Created", "Failed"], {"created", "failed"}, id="failed-at-once"),
])
def test_job_counters_count_conditions_a_status_write_made_true(
    old: list[str] | None, new: list[str], counted: set[str],
) -> None:
    def status(types: list[str] | None) -> common.JobStatus | None:
        if types is None:
            return None
        return common.JobStatus(conditions=[common.JobCondition(type=t, status="True") for t in types])

    service = metrics.ServiceMetrics()
    new_status = status(new)
    assert new_status is not None
    service.status_written("kto-1/team-a/PyTorchJob/train", status(old), new_status, "gpus")
    service.status_written("kto-1/team-a/TrainingJob/elastic", status(old), new_status, "")  # not a training-operator kind
    values = {name: service.registry.get_sample_value(f"training_operator_jobs_{name}_total",
                                                      {"job_namespace": "team-a", "framework": "pytorch",
                                                       "queue": "gpus", "cluster": "kto-1"}) or 0
              for name in ("created", "successful", "failed")}
    assert {name for name, value in values.items() if value} == counted
    assert all(value in (0, 1) for value in values.values())
    assert service.registry.get_sample_value("kto_status_writes_total", {"kind": "PyTorchJob"}) == 1


def test_job_counters_label_each_job_with_its_queue_and_cluster() -> None:
    service = metrics.ServiceMetrics()
    service.job_queue("worker-1/team-a/PyTorchJob/train", "gpus")
    service.on_bus_event(events.BusEvent(events.SEND_DONE, {"type": metrics.RESTART_TYPE,
                                                            "key": "worker-1/team-a/PyTorchJob/train"}))
    service.on_bus_event(events.BusEvent(events.SEND_DONE, {"type": metrics.RESTART_TYPE,
                                                            "key": "worker-1/team-a/PyTorchJob/unqueued"}))
    service.job_observed("DELETED", "PyTorchJob", "manager/team-a/PyTorchJob/train", "gpus")
    service.job_queue("worker-1/team-a/PyTorchJob/train", "", gone=True)
    service.on_bus_event(events.BusEvent(events.SEND_DONE, {"type": metrics.RESTART_TYPE,
                                                            "key": "worker-1/team-a/PyTorchJob/train"}))

    def value(name: str, queue: str, cluster: str) -> float:
        return service.registry.get_sample_value(f"training_operator_jobs_{name}_total", {
            "job_namespace": "team-a", "framework": "pytorch", "queue": queue, "cluster": cluster}) or 0

    assert value("restarted", "gpus", "worker-1") == 1
    assert value("restarted", "", "worker-1") == 2  # a job in no queue, and one forgotten when deleted
    assert value("deleted", "gpus", "manager") == 1


def test_queue_label_values_are_bounded_in_number_and_shape() -> None:
    service = metrics.ServiceMetrics()
    for n in range(metrics.MAX_QUEUES + 5):
        service.job_observed("DELETED", "PyTorchJob", f"kto-1/team-a/PyTorchJob/j{n}", f"made-up-{n}")
    service.job_observed("DELETED", "PyTorchJob", "kto-1/team-a/PyTorchJob/odd", "not a label value\n")
    queues = {sample.labels["queue"] for family in service.registry.collect()
              if family.name == "training_operator_jobs_deleted" for sample in family.samples}
    assert len(queues) == metrics.MAX_QUEUES + 1 and "other" in queues


async def test_two_services_in_one_process_serve_their_own_metrics() -> None:
    first, second = metrics.ServiceMetrics(), metrics.ServiceMetrics()
    first.on_request("POST", "127.0.0.1:6443", 201, 0.01)
    second.on_request("GET", "127.0.0.1:6443", None, 0.2)
    ports = [free_port(), free_port()]
    async with metrics.serving(first, ports[0]), metrics.serving(second, ports[1]):
        async with aiohttp.ClientSession() as session:
            texts = []
            for port in ports:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    assert response.status == 200
                    texts.append(await response.text())
            async with session.get(f"http://127.0.0.1:{ports[0]}/metrics",
                                   headers={"Accept": "application/openmetrics-text; version=1.0.0"}) as response:
                assert response.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await response.text()).rstrip().endswith("# EOF")
    samples = [{(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in parser.text_string_to_metric_families(text) for s in family.samples}
               for text in texts]
    post = ("rest_client_requests_total", (("code", "201"), ("host", "127.0.0.1:6443"), ("method", "POST")))
    error = ("rest_client_requests_total", (("code", "<error>"), ("host", "127.0.0.1:6443"), ("method", "GET")))
    assert samples[0].get(post) == 1 and error not in samples[0]
    assert samples[1].get(error) == 1 and post not in samples[1]
    assert not any(name.endswith("_created") for name, _ in samples[0])


async def test_a_taken_port_is_a_metrics_port_error() -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(metrics.MetricsPortError, match=f"--metrics-port {port}"):
            async with metrics.serving(metrics.ServiceMetrics(), port):
                pass


def kto(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kto", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60, check=False, env={"PATH": "", **(env or {})})


@pytest.mark.parametrize(("args", "env", "named"), [
    pytest.param(["reconciler", "--metrics-port", "http"], {}, "--metrics-port 'http'", id="not-a-number"),
    pytest.param(["status-service", "--metrics-port", "70000"], {}, "--metrics-port '70000'", id="too-large"),
    pytest.param(["watcher", "--cluster", "c", "--metrics-port", "-1"], {}, "--metrics-port '-1'", id="negative"),
    pytest.param(["reconciler"], {"KTO_METRICS_PORT": "x"}, "KTO_METRICS_PORT 'x'", id="environment"),
])
def test_a_bad_metrics_port_is_named_in_one_line(args: list[str], env: dict[str, str], named: str) -> None:
    result = kto(*args, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in result.stderr, lines


def test_a_metrics_port_in_use_is_named_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = kto("status-service", "--metrics-port", str(port), env={"KTO_LOG_LEVEL": "WARNING"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--metrics-port {port}" in lines[0] and "Traceback" not in result.stderr, lines
