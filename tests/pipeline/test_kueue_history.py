"""``kto history`` of a job the real Kueue v0.17.0 queued, admitted and saw finish (real tier only: the
sim has no Kueue): its Kueue steps (queued with Kueue's reason, admitted by the ClusterQueue with its
flavour, finished) from the Workload records the watcher published under the job's key, and all of
the job's records in the one trace its Workload's name gives."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry import trace

from realparts import kueue as kueue_part
from services.watcher import watching
from shared.api import kueue
from shared.kube import resources
from tests.fixtures.pipeline import Pipeline, Tier
from tests.fixtures import tiers
from tests.pipeline.test_pipeline import job

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER_QUEUES = resources.ResourceType(kueue.GROUP, kueue.VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = resources.ResourceType(kueue.GROUP, kueue.VERSION, "localqueues", "LocalQueue")
QUEUE = "team"


@pytest.fixture
def tier(real_kafka: Any, real_cluster: tiers.RealCluster, real_kueue: kueue_part.KueueController) -> Tier:
    """The kube tier only, with the real Kueue serving its cluster."""
    return Tier("kube", real_kafka, real_cluster)


async def make_queues(pipeline: Pipeline, cpu: str) -> str:
    """A ResourceFlavor and a ClusterQueue of ``cpu`` for this test's namespace, and its LocalQueue
    :data:`QUEUE`; the ClusterQueue's name (the namespace's)."""
    name = pipeline.namespace
    await pipeline.client.create(kueue_part.RESOURCE_FLAVORS, None, {
        "apiVersion": kueue.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}})
    await pipeline.client.create(CLUSTER_QUEUES, None, {
        "apiVersion": kueue.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
                 "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                     {"name": name, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}})
    await pipeline.client.create(LOCAL_QUEUES, name, {
        "apiVersion": kueue.API_VERSION, "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": name},
        "spec": {"clusterQueue": name}})
    return name


def queued_job(name: str, seconds: int) -> dict[str, Any]:
    """A PyTorchJob of three pods of 100m CPU each, running ``seconds``, in :data:`QUEUE`."""
    found = job("PyTorchJob", name, {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")}, "pytorch")
    found["metadata"]["labels"] = {kueue.QUEUE_NAME_LABEL: QUEUE}
    for spec in found["spec"]["pytorchReplicaSpecs"].values():
        template = spec["template"]
        template["metadata"]["annotations"]["sim.kto.dev/duration"] = f"{seconds}s"
        template["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    return found


async def kto_history(pipeline: Pipeline, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **pipeline.kafka.to_env(), "PYTHONPATH": str(ROOT), "KTO_SIGNING_KEYS": ""}

    def call() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kto", "history", *args], capture_output=True, text=True,
                              cwd=pipeline.kubeconfig.parent, env=env, timeout=120, check=False)

    return await asyncio.get_running_loop().run_in_executor(None, call)


async def test_history_shows_a_job_queued_admitted_and_finished_by_kueue_in_one_trace(pipeline: Pipeline) -> None:
    cluster_queue = await make_queues(pipeline, cpu="300m")
    await pipeline.submit(queued_job("first", seconds=4))

    async def admitted(name: str) -> bool:
        found = await pipeline.job("PyTorchJob", name)
        return found["spec"].get("runPolicy", {}).get("suspend") is False

    await pipeline.eventually(lambda: admitted("first"), 60.0, "the first job admitted by Kueue")
    second = await pipeline.submit(queued_job("second", seconds=1))
    assert second["spec"]["runPolicy"]["suspend"] is True, "Kueue's webhook suspends a queued job"
    await pipeline.wait_for("PyTorchJob", "second", "Succeeded", timeout=180.0)

    where = ("--cluster", "kto-1", "-n", pipeline.namespace, "pytorchjob/second")
    document: dict[str, Any] = {}

    async def kueue_finished() -> bool:
        nonlocal document
        shown = await kto_history(pipeline, *where, "-o", "json")
        document = json.loads(shown.stdout) if shown.returncode == 0 else {}
        return any(m["event"] == "finished" for m in document.get("kueue", []))

    await pipeline.eventually(kueue_finished, 60.0, "the Workload's Finished published")
    events = [m["event"] for m in document["kueue"]]
    assert events.index("queued") < events.index("admitted") < events.index("finished"), events
    queued = next(m for m in document["kueue"] if m["event"] == "queued")
    assert "insufficient unused quota for cpu" in queued["detail"], queued
    admitted_step = next(m for m in document["kueue"] if m["event"] == "admitted")
    assert admitted_step["detail"].startswith(f"by ClusterQueue {cluster_queue} with flavours")
    assert {m["cluster"] for m in document["kueue"]} == {"kto-1"}

    (workload,) = {m["workload"] for m in document["kueue"]}
    expected = format(trace.get_current_span(watching.workload_trace(pipeline.namespace, workload))
                      .get_span_context().trace_id, "032x")
    assert {r["trace_id"] for r in document["records"] if r["record"]["type"] == "observation"} == {expected}, \
        "every observation of the job in its Workload's trace"
    decided = {r["trace_id"] for r in document["records"] if r["record"]["type"] == "decision"}
    assert decided == {expected}, "and every decision taken on them"

    table = await kto_history(pipeline, *where)
    assert table.returncode == 0, table.stderr
    assert "KUEUE TIME" in table.stdout and "queued" in table.stdout and "finished" in table.stdout
