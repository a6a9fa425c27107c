"""The status worker (services/status/aggregating.py) against the sim API server and the real
broker: a job's record and its pods' records are taken into the key's view, settled into one
status write on the API server, a record that claims more than the API server says is read
back before a terminal status, and a key whose job is gone is forgotten."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry import context as otel_context

from services.status import aggregating
from services.status.settings import StatusSettings
from shared import metrics
from shared.api import jobs
from shared.bus import producing, records
from shared.bus.settings import KafkaSettings
from shared.kube import clients, connecting, resources
from sim import cluster as sim_cluster_module
from tests.services.reconciler.test_applying import NAME, NAMESPACE, PYTORCHJOBS, decisions, pytorchjob


@pytest.fixture
async def aggregator(sim_cluster: sim_cluster_module.Cluster,
                     bus: KafkaSettings) -> AsyncIterator[aggregating.StatusAggregator]:
    settings = StatusSettings(kubeconfig=sim_cluster.kubeconfig, instance="s", write_interval=0.0, record_events=False)
    clusters = connecting.ClusterClients(sim_cluster.kubeconfig)
    async with producing.Publisher(bus, "status", "s") as publisher:
        worker = aggregating.StatusAggregator(settings, clusters, publisher, metrics.ServiceMetrics("status"))
        yield worker
        worker.close()
    await clusters.close()


def key(cluster: str) -> str:
    return f"{cluster}/{NAMESPACE}/PyTorchJob/{NAME}"


def observed(cluster: str, kind: str, obj: dict[str, Any], event: str = "ADDED") -> records.Observation:
    return records.Observation(key=key(cluster), resource_version=str(obj["metadata"].get("resourceVersion", "1")),
                               object_kind=kind, event=event, object=obj, source="watcher")


async def master_pod(client: clients.KubeClient, job: dict[str, Any], duration: str = "600",
                     phase: str = "Running") -> dict[str, Any]:
    """The job's master pod as its reconciler would make it, once the sim's kubelet has it in
    ``phase`` (run for ten minutes by default: it is Running whatever a record says)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{NAME}-master-0", "namespace": NAMESPACE, "annotations": {"sim.kto.dev/duration": duration},
        "labels": {"training.kubeflow.org/job-name": NAME, "training.kubeflow.org/replica-type": "master",
                   "training.kubeflow.org/replica-index": "0",
                   "training.kubeflow.org/operator-name": "pytorchjob-controller"},
        "ownerReferences": [{"apiVersion": jobs.API_VERSION, "kind": "PyTorchJob", "name": NAME,
                             "uid": job["metadata"]["uid"], "controller": True}]},
        "spec": {"containers": [{"name": "pytorch", "image": "pytorch:latest"}], "restartPolicy": "Never"}}
    await client.create(resources.PODS, NAMESPACE, pod)
    for _ in range(200):
        running = await client.get(resources.PODS, NAMESPACE, pod["metadata"]["name"])
        if (running.get("status") or {}).get("phase") == phase:
            return {**running, "apiVersion": "v1", "kind": "Pod"}
        await asyncio.sleep(0.05)
    raise AssertionError(f"the sim's kubelet did not run the pod: {running.get('status')}")


async def settled_with_its_master_pod(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, aggregator: aggregating.StatusAggregator,
    phase: str,
) -> tuple[str, dict[str, Any], float | None]:
    """A job made and its master pod run to ``phase`` (Running: for ten minutes; Succeeded: it
    ends at once), both taken in as records and settled: the cluster, the pod, and what settle
    returned."""
    cluster = sim_cluster.settings.context
    job = {**await client.create(PYTORCHJOBS, NAMESPACE, pytorchjob()), "apiVersion": jobs.API_VERSION,
           "kind": "PyTorchJob"}
    pod = await master_pod(client, job, *(("0.3", phase) if phase != "Running" else ()))
    assert await aggregator.handle(observed(cluster, "PyTorchJob", job), otel_context.get_current())
    assert await aggregator.handle(observed(cluster, "Pod", pod), otel_context.get_current())
    return cluster, pod, await aggregator.settle(key(cluster), otel_context.get_current(), flush=True)


async def test_a_job_and_its_running_pod_are_settled_into_one_status_write(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, aggregator: aggregating.StatusAggregator,
    bus: KafkaSettings,
) -> None:
    assert (await settled_with_its_master_pod(sim_cluster, client, aggregator, "Running"))[2] is None

    written = await client.get(PYTORCHJOBS, NAMESPACE, NAME)
    conditions = {c["type"]: c["status"] for c in written["status"]["conditions"]}
    assert conditions == {"Created": "True", "Running": "True"}
    assert written["status"]["replicaStatuses"]["Master"]["active"] == 1
    assert [d.action for d in await decisions(bus)] == ["status_written"]


async def test_a_record_claiming_success_is_read_back_and_the_api_server_overrules_it(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, aggregator: aggregating.StatusAggregator,
) -> None:
    job = {**await client.create(PYTORCHJOBS, NAMESPACE, pytorchjob()), "apiVersion": jobs.API_VERSION,
           "kind": "PyTorchJob"}
    pod = await master_pod(client, job)
    claimed = {**pod, "status": {**pod["status"], "phase": "Succeeded"},
               "metadata": {**pod["metadata"], "resourceVersion": str(int(pod["metadata"]["resourceVersion"]) + 50)}}
    cluster = sim_cluster.settings.context
    await aggregator.handle(observed(cluster, "PyTorchJob", job), otel_context.get_current())
    await aggregator.handle(observed(cluster, "Pod", claimed, "MODIFIED"), otel_context.get_current())
    await aggregator.settle(key(cluster), otel_context.get_current(), flush=True)

    written = await client.get(PYTORCHJOBS, NAMESPACE, NAME)
    conditions = {c["type"]: c["status"] for c in (written.get("status") or {}).get("conditions") or []}
    assert conditions.get("Succeeded") != "True", "a record's word alone never finishes a job"


async def test_a_key_whose_job_is_gone_from_the_api_server_is_forgotten(
    sim_cluster: sim_cluster_module.Cluster, aggregator: aggregating.StatusAggregator,
) -> None:
    never_created = {**pytorchjob(), "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u",
                                                  "resourceVersion": "5"}}
    cluster = sim_cluster.settings.context
    await aggregator.handle(observed(cluster, "PyTorchJob", never_created), otel_context.get_current())
    assert await aggregator.settle(key(cluster), otel_context.get_current(), flush=True) is None
    assert key(cluster) not in aggregator._views


async def test_a_finished_jobs_view_is_released_and_a_later_record_is_read_afresh_without_a_write(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, aggregator: aggregating.StatusAggregator,
    bus: KafkaSettings,
) -> None:
    cluster, pod, _ = await settled_with_its_master_pod(sim_cluster, client, aggregator, "Succeeded")
    written = await client.get(PYTORCHJOBS, NAMESPACE, NAME)
    assert {c["type"]: c["status"] for c in written["status"]["conditions"]}.get("Succeeded") == "True"
    assert key(cluster) not in aggregator._views, "a finished job with nothing to write is released"

    resynced = {**written, "apiVersion": jobs.API_VERSION, "kind": "PyTorchJob"}
    assert not await aggregator.handle(observed(cluster, "PyTorchJob", resynced, "RESYNCED"),
                                       otel_context.get_current()), "the released job as it was is passed over"
    assert key(cluster) not in aggregator._views, "and read from nowhere"

    # A later record (the pod's deletion, say) is taken into a view read afresh: nothing to write.
    assert await aggregator.handle(observed(cluster, "Pod", pod, "DELETED"), otel_context.get_current())
    await aggregator.settle(key(cluster), otel_context.get_current(), flush=True)
    assert [d.action for d in await decisions(bus)] == ["status_written"]
    assert key(cluster) not in aggregator._views


def waiting_workload(owner_uid: str) -> dict[str, Any]:
    """The job's Workload as Kueue writes it when the job names no LocalQueue that exists."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"pytorchjob-{NAME}-1a2b3", "namespace": NAMESPACE, "uid": "u-wl",
                         "resourceVersion": "7",
                         "ownerReferences": [{"apiVersion": jobs.API_VERSION, "kind": "PyTorchJob", "name": NAME,
                                              "uid": owner_uid, "controller": True}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Inadmissible",
                                       "message": "LocalQueue missing doesn't exist"}]}}


@pytest.mark.parametrize("owned, said", [
    pytest.param(True, [("Warning", "Inadmissible", "LocalQueue missing doesn't exist", 1)], id="said-once"),
    pytest.param(False, [], id="a-workload-of-another-job-names-nothing"),
])
async def test_why_kueue_keeps_a_job_waiting_reaches_the_jobs_events_once(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, bus: KafkaSettings, owned: bool,
    said: list[tuple[str, str, str, int]],
) -> None:
    settings = StatusSettings(kubeconfig=sim_cluster.kubeconfig, instance="s", write_interval=0.0)
    cluster = sim_cluster.settings.context
    suspended = pytorchjob()
    suspended["spec"]["runPolicy"] = {"suspend": True}
    job = await client.create(PYTORCHJOBS, NAMESPACE, suspended)
    workload = waiting_workload(job["metadata"]["uid"] if owned else "a-stranger")
    clusters = connecting.ClusterClients(sim_cluster.kubeconfig)
    async with producing.Publisher(bus, "status", "s") as publisher:
        worker = aggregating.StatusAggregator(settings, clusters, publisher, metrics.ServiceMetrics("status"))
        for event in ("ADDED", "MODIFIED"):  # Kueue writes the Workload again and again: said once
            assert await worker.handle(observed(cluster, "Workload", workload, event), otel_context.get_current())
            await worker.settle(key(cluster), otel_context.get_current(), flush=True)
        assert key(cluster) not in worker._views, "a Workload alone makes no view: no status is read or written"
        worker.close()
    await clusters.close()

    listed, _ = await client.list(resources.EVENTS, NAMESPACE)
    assert [(e["type"], e["reason"], e["message"], e.get("count", 1)) for e in listed
            if e["involvedObject"]["name"] == NAME and e["reason"] == "Inadmissible"] == said
