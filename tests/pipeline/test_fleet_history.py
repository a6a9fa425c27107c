"""One job across a MultiKueue fleet as one timeline and one trace (issue 23, item 4), on the real tier:
the three-cluster stack of tests/pipeline/test_multikueue.py (``kto up --clusters 3 --control-plane kube
--multikueue``: manager ``kto-1``, workers ``kto-2`` and ``kto-3``, the real Kueue v0.17.0 in each, kto
serving all three from one bus), every kto process writing its spans to one file (``KTO_TRACES``).
A job submitted once to the manager: ``kto history`` of the manager's job shows the manager's lines and
the worker's (its dispatch, both admissions, the worker's pods, the finish) in one timeline, each with its
cluster, and every span kto made of it, in either cluster, is in one trace."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace

from services.watcher import watching
from tests.pipeline import test_multikueue as multikueue
from tests.pipeline.test_multikueue import MANAGER, NAMESPACE, WORKERS, Fleet, fleet

__all__ = ["fleet"]  # the module's stack, as test_multikueue.py starts it

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def spans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """Where every process of the module's stack appends its spans (set before the stack starts)."""
    path = tmp_path_factory.mktemp("spans") / "spans.jsonl"
    before = os.environ.get("KTO_TRACES")
    os.environ["KTO_TRACES"] = f"file:{path}"
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("KTO_TRACES", None)
        else:
            os.environ["KTO_TRACES"] = before


async def history(fleet: Fleet, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kto", "history", *args, env={**os.environ, **fleet.running.kafka.to_env()},
        cwd=str(ROOT), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def spans_of(path: pathlib.Path, keys: set[str]) -> list[dict[str, Any]]:
    """The spans in ``path`` whose ``kto.job_key`` (or Kafka message key) is one of ``keys``."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            span = json.loads(line)
        except ValueError:
            continue  # two processes' lines interleaved: not this test's business
        attributes = span.get("attributes") or {}
        if attributes.get("kto.job_key") in keys or attributes.get("messaging.kafka.message.key") in keys:
            found.append(span)
    return found


async def test_history_of_a_job_submitted_to_the_manager_is_one_timeline_and_one_trace(
    fleet: Fleet, spans: pathlib.Path,
) -> None:
    job = multikueue.pytorchjob("fleet-timeline")
    await fleet.submit(job)
    await fleet.succeeded_on_manager(job, 240.0)
    where = ("--cluster", MANAGER, "-n", NAMESPACE, "pytorchjob/fleet-timeline")

    async def joined() -> dict[str, Any] | None:
        code, out, _ = await history(fleet, *where, "-o", "json")
        document: dict[str, Any] = json.loads(out) if code == 0 else {}
        steps = [(m["cluster"], m["event"]) for m in document.get("kueue", [])]
        return document if (MANAGER, "finished") in steps and any(
            c in WORKERS and e == "finished" for c, e in steps) else None

    document = await fleet.eventually(joined, "the manager's and the worker's Workloads finished in kto history",
                                      120.0)
    keys = {r["key"] for r in document["records"]}
    manager_key = f"{MANAGER}/{NAMESPACE}/PyTorchJob/fleet-timeline"
    (worker_key,) = keys - {manager_key}
    worker = worker_key.split("/")[0]
    assert worker in WORKERS
    steps = [(m["cluster"], m["event"]) for m in document["kueue"]]
    for step in ((MANAGER, "quota-reserved"), (MANAGER, "dispatched"), (worker, "admitted"), (MANAGER, "admitted"),
                 (worker, "finished"), (MANAGER, "finished")):
        assert step in steps, (step, steps)
    assert steps.index((MANAGER, "dispatched")) < steps.index((worker, "finished")) < len(steps)
    (dispatched,) = [m for m in document["kueue"] if m["event"] == "dispatched"]
    assert dispatched["detail"] == f"to worker cluster {worker} (MultiKueue)"

    (workload,) = {m["workload"] for m in document["kueue"]}
    expected = format(trace.get_current_span(watching.workload_trace(NAMESPACE, workload))
                      .get_span_context().trace_id, "032x")
    others = [(r["key"].split("/")[0], r["record"].get("source"), r["record"].get("object_kind") or
               r["record"].get("action"), r["record"].get("event", "")) for r in document["records"]
              if r["trace_id"] != expected]
    assert not others, f"every record, manager's and worker's, in the Workload's trace; not: {others}"

    code, table, err = await history(fleet, *where, "--timeline")
    assert code == 0, err
    lines = table.splitlines()
    records = lines[1:lines.index("")]
    assert {line.split()[0] for line in records} == {manager_key, worker_key}, "each line says its cluster"
    assert any(line.split()[1:4:2] == [worker, "admitted"] for line in lines), "the worker's admission, said"
    pods = lines[len(lines) - lines[::-1].index(""):]
    assert pods[0].split()[-1] == "CLUSTER" and len(pods) > 1
    assert {line.split()[-1] for line in pods[1:]} == {worker}, "the pods ran in the worker only"

    async def traced() -> list[dict[str, Any]] | None:
        found = spans_of(spans, {manager_key, worker_key})
        clusters = {s["attributes"].get("kto.cluster") for s in found}
        return found if {MANAGER, worker} <= clusters else None

    found = await fleet.eventually(traced, "spans of the job from both clusters' watchers", 60.0)
    assert {s["context"]["trace_id"].removeprefix("0x") for s in found} == {expected}, \
        "every span kto made of the job, in the manager and in the worker, is in one trace"
