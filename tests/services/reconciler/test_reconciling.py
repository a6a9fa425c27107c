"""The reconciler worker (services/reconciler/reconciling.py) against the sim API server and
the real broker: a job's record is taken into the key's memory, settled into children on the
cluster after the API server confirmed it, and a key whose job is gone is forgotten whole."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from opentelemetry import context as otel_context

from services.reconciler import reconciling
from services.reconciler.settings import ReconcilerSettings
from shared.api import jobs
from shared.bus import producing, records
from shared.bus.settings import KafkaSettings
from shared.kube import clients, connecting, resources
from sim import cluster as sim_cluster_module
from tests.services.reconciler.test_applying import NAME, NAMESPACE, PYTORCHJOBS, decisions, pytorchjob


@pytest.fixture
async def reconciler(sim_cluster: sim_cluster_module.Cluster, bus: KafkaSettings,
                     tmp_path: pathlib.Path) -> AsyncIterator[reconciling.Reconciler]:
    settings = ReconcilerSettings(kubeconfig=sim_cluster.kubeconfig, instance="r", check_after=0)
    clusters = connecting.ClusterClients(sim_cluster.kubeconfig)
    async with producing.Publisher(bus, "reconciler", "r") as publisher:
        worker = reconciling.Reconciler(settings, clusters, publisher)
        yield worker
        worker.close()
    await clusters.close()


def observed(cluster: str, job: dict[str, object]) -> records.Observation:
    return records.Observation(key=f"{cluster}/{NAMESPACE}/PyTorchJob/{NAME}", resource_version="1",
                               object_kind="PyTorchJob", event="ADDED", object=job, source="watcher")


async def test_a_job_taken_in_is_settled_into_its_children_on_the_api_servers_word(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, reconciler: reconciling.Reconciler,
    bus: KafkaSettings,
) -> None:
    created = await client.create(PYTORCHJOBS, NAMESPACE, pytorchjob())
    record = observed(sim_cluster.settings.context, {**created, "apiVersion": jobs.API_VERSION, "kind": "PyTorchJob"})
    assert await reconciler.handle(record, otel_context.get_current())
    memory = reconciler.memory(record.key)
    assert memory is not None and memory.view.job is not None and memory.job_seen is not None

    assert await reconciler.settle(record.key, otel_context.get_current(), flush=False) is None
    pods, _ = await client.list(resources.PODS, NAMESPACE)
    assert {p["metadata"]["name"] for p in pods} == {f"{NAME}-master-0"}
    assert memory.view.read_back, "the pass acted on what the API server said, not on the record"
    said = await decisions(bus)
    assert said[0].action == "reconcile_pass" and memory.last_pass == said[0].id


async def test_a_key_whose_job_is_gone_from_the_api_server_is_forgotten(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, reconciler: reconciling.Reconciler,
) -> None:
    never_created = {**pytorchjob(), "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "u",
                                                  "resourceVersion": "5"}}
    record = observed(sim_cluster.settings.context, never_created)
    await reconciler.handle(record, otel_context.get_current())
    await reconciler.settle(record.key, otel_context.get_current(), flush=False)
    assert reconciler.memory(record.key) is None
    pods, _ = await client.list(resources.PODS, NAMESPACE)
    assert pods == []


async def test_a_finished_jobs_view_is_released_to_a_tombstone_and_read_afresh_when_a_record_comes(
    sim_cluster: sim_cluster_module.Cluster, client: clients.KubeClient, reconciler: reconciling.Reconciler,
) -> None:
    created = await client.create(PYTORCHJOBS, NAMESPACE, pytorchjob())
    done = "2024-01-02T03:04:05Z"
    finished = await client.request("PUT", PYTORCHJOBS.path(NAMESPACE, NAME, "status"), route="pytorchjobs/status",
                                    body={**created, "status": {
                                        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Done",
                                                        "lastTransitionTime": done, "lastUpdateTime": done}],
                                        "startTime": done, "completionTime": done, "replicaStatuses": {}}})
    record = observed(sim_cluster.settings.context, {**finished, "apiVersion": jobs.API_VERSION, "kind": "PyTorchJob"})
    for _ in range(2):  # the second time, a later record of the job comes to the released key
        await reconciler.handle(record, otel_context.get_current())
        await reconciler.settle(record.key, otel_context.get_current(), flush=False)
        memory = reconciler.memory(record.key)
        assert memory is not None, "a tombstone is kept"
        assert (memory.view.job, len(memory.view.children), memory.view.hydrated, memory.timer) == (None, 0, False, None)
    pods, _ = await client.list(resources.PODS, NAMESPACE)
    assert pods == [], "nothing made for a finished job"
