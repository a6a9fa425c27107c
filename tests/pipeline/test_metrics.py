"""Each service's /metrics, scraped over HTTP while the pipeline runs jobs, counts what happened.

The three services are restarted with metrics ports before any job is submitted,
so every count below belongs to this test's run: one PyTorchJob that succeeds,
one whose worker keeps failing retryably until backoffLimit fails it, a record
that is not a kto record, and the first job's deletion. The counts are checked
against the job's history on the topic (the decisions each service published)
and against what the API server was asked.
"""

from __future__ import annotations

import dataclasses
import socket
import urllib.parse
from collections.abc import Iterable

import aiohttp
from prometheus_client import parser

from shared.bus import producing, reading, records
from shared.kube import resources
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_pipeline import job

SERVICES = ("watcher", "reconciler", "status")


def free_ports(count: int) -> list[int]:
    """Ports free on this machine now (held open together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclasses.dataclass(frozen=True)
class Scrape:
    """One scrape of a /metrics endpoint: samples by (name, labels)."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]
    families: set[str]
    """Names of the metric families exposed (with or without samples)."""

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= ls)

    def labels(self, name: str) -> list[dict[str, str]]:
        return [dict(ls) for (n, ls) in self.samples if n == name]


async def scrape(port: int) -> Scrape:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200, await response.text()
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
    families = list(parser.text_string_to_metric_families(text))
    samples = {(sample.name, frozenset(sample.labels.items())): sample.value
               for family in families for sample in family.samples}
    return Scrape(samples, {family.name for family in families})


async def restart_with_metrics(pipeline: Pipeline) -> dict[str, int]:
    """The fixture's three services stopped and started again, each serving /metrics."""
    ports = dict(zip(SERVICES, free_ports(len(SERVICES))))
    for name in SERVICES:
        await pipeline.stop(name)
    pipeline.start_watcher(metrics_port=ports["watcher"])
    pipeline.start_reconciler(metrics_port=ports["reconciler"])
    pipeline.start_status(metrics_port=ports["status"])
    return ports


def decisions(history: Iterable[records.Record], action: str) -> int:
    return sum(1 for r in history if isinstance(r, records.Decision) and r.action == action)


async def test_each_service_exposes_upstream_and_kto_metrics_that_count_the_run(pipeline: Pipeline) -> None:
    ports = await restart_with_metrics(pipeline)
    # The services reach the cluster through the test's faulting proxy: their requests name its host.
    ns = pipeline.namespace
    host = urllib.parse.urlsplit(pipeline.proxy.url if pipeline.proxy is not None else pipeline.client.host).netloc
    job_labels = {"job_namespace": ns, "framework": "pytorch"}

    await pipeline.submit(job("PyTorchJob", "ok", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")},
                              "pytorch"))
    flaky = job("PyTorchJob", "flaky", {"Master": (1, "ExitCode"), "Worker": (1, "ExitCode")}, "pytorch",
                runPolicy={"backoffLimit": 2})
    specs = flaky["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "60s"
    specs["Worker"]["template"]["metadata"]["annotations"].update(
        {"sim.kto.dev/exit-code": "137", "sim.kto.dev/duration": "0.3s"})
    await pipeline.submit(flaky)
    await pipeline.wait_for("PyTorchJob", "ok", "Succeeded")
    await pipeline.wait_for("PyTorchJob", "flaky", "Failed", timeout=60)

    # A record that is not a kto record: each worker group dead-letters it once.
    async with producing.Publisher(pipeline.kafka, "test", "test") as publisher:
        await publisher.send_raw(pipeline.kafka.jobs_topic, b"{not json", key=pipeline.key("PyTorchJob", "junk").encode(),
                                 headers=[(records.TYPE_HEADER, b"observation:Pod")])
    await pipeline.client.delete(resources.JOB_TYPES["PyTorchJob"], ns, "ok")

    history = [r for name in ("ok", "flaky") for r in await reading.read_history(
        pipeline.kafka, pipeline.key("PyTorchJob", name))]
    restarts = decisions(history, "replica_restarted")
    assert restarts == 2, "backoffLimit 2: the worker restarted twice before the job failed"

    async def settled() -> bool:
        """Every count final: the deletion seen, the junk record dead-lettered by both groups,
        every status_written decision published, every partition read to its end."""
        watcher, reconciler, status = [await scrape(ports[name]) for name in SERVICES]
        history[:] = [r for name in ("ok", "flaky") for r in await reading.read_history(
            pipeline.kafka, pipeline.key("PyTorchJob", name))]
        return (watcher.value("training_operator_jobs_deleted_total", **job_labels) == 1
                and reconciler.value("kto_records_dead_lettered_total") == 1
                and status.value("kto_records_dead_lettered_total") == 1
                and status.value("kto_status_writes_total") == decisions(history, "status_written")
                and reconciler.value("kto_consumer_lag") == 0 and status.value("kto_consumer_lag") == 0)

    await pipeline.eventually(settled, timeout=30, what="the metrics to count the whole run")
    watcher, reconciler, status = [await scrape(ports[name]) for name in SERVICES]

    # training-operator's job counters, labelled as upstream's.
    assert status.value("training_operator_jobs_created_total", **job_labels) == 2
    assert status.value("training_operator_jobs_successful_total", **job_labels) == 1
    assert status.value("training_operator_jobs_failed_total", **job_labels) == 1
    assert reconciler.value("training_operator_jobs_restarted_total", **job_labels) == restarts
    assert watcher.value("training_operator_jobs_deleted_total", **job_labels) == 1

    # controller-runtime's reconcile metrics around each settle pass.
    for scraped, controller in ((reconciler, "pytorchjob-controller"), (status, "pytorchjob-status")):
        passes = scraped.value("controller_runtime_reconcile_total", controller=controller)
        assert passes >= 2 and scraped.value("controller_runtime_reconcile_total", controller=controller,
                                             result="success") >= 1
        assert scraped.value("controller_runtime_reconcile_time_seconds_count", controller=controller) == passes
        assert "controller_runtime_reconcile_errors" in scraped.families
        assert scraped.value("controller_runtime_reconcile_errors_total", controller=controller) == scraped.value(
            "controller_runtime_reconcile_total", controller=controller, result="error")

    # client-go's REST client metrics: the reconciler created the five pods (three, then the flaky job's
    # master and worker) and their services; the watcher listed and watched.
    created_pods = decisions([r for r in history if isinstance(r, records.Decision) and r.child_kind == "Pod"],
                             "child_created")
    assert created_pods >= 5
    assert reconciler.value("rest_client_requests_total", method="POST", code="201", host=host) >= created_pods
    assert reconciler.value("rest_client_request_duration_seconds_count", verb="POST", host=host) >= created_pods
    assert watcher.value("rest_client_requests_total", method="GET", code="200", host=host) >= 1
    assert status.value("rest_client_requests_total", method="PUT", code="200", host=host) == status.value(
        "kto_status_writes_total")

    # kto's bus metrics, by kto-type header.
    for scraped in (reconciler, status):
        assert scraped.value("kto_records_consumed_total", type="observation:Pod") > 0
        assert scraped.value("kto_records_consumed_total", type="observation:PyTorchJob") > 0
        assert scraped.value("kto_records_dead_lettered_total", type="observation:Pod") == 1
        assert scraped.value("kto_records_rejected_total", reason="unsigned") == 1, "the junk is not signed"
    # Acts a record called for, read back from the API server first: the restarts, the terminal statuses.
    assert reconciler.value("kto_confirmations_total", service="reconciler", outcome="same") >= 1
    assert status.value("kto_confirmations_total", service="status", outcome="same") >= 1
    assert watcher.value("kto_records_published_total", type="observation:PyTorchJob") > 0
    assert watcher.value("kto_records_published_total", type="observation:Pod") > 0
    assert reconciler.value("kto_records_published_total", type="decision:child_created") == decisions(
        history, "child_created")
    assert reconciler.value("kto_records_published_total", type="decision:replica_restarted") == restarts
    assert status.value("kto_records_published_total", type="decision:status_written") == decisions(
        history, "status_written")
    topic = pipeline.kafka.jobs_topic
    for scraped, group in ((reconciler, f"kto-reconciler-{topic}"), (status, f"kto-status-{topic}")):
        lags = scraped.labels("kto_consumer_lag")
        assert lags and all(lag["topic"] == topic and lag["group"] == group for lag in lags)
        assert len({lag["partition"] for lag in lags}) == len(lags) == pipeline.kafka.partitions

    # The status service's writes, and the passes that found nothing to write.
    assert status.value("kto_status_writes_total", kind="PyTorchJob") >= 2, "one or more per job"
    assert status.value("kto_status_writes_skipped_total", kind="PyTorchJob") >= 1
