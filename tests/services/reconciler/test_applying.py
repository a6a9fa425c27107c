"""The reconciler's applier (services/reconciler/applying.py) against the sim API server and
the real broker: a pass's plan goes on the topic before its acts, each act names it, a
created child is on the cluster, a deleted one counts as going away in the key's memory."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.reconciler import applying, memories
from services.reconciler.settings import ReconcilerSettings
from shared.api import jobs
from shared.bus import producing, records
from shared.bus.settings import KafkaSettings
from shared.core import effects, kubeflow_v1
from shared.kube import clients, connecting, resources
from sim import cluster as sim_cluster_module
from tests.bus.test_consuming import read_topic
from tests.fixtures.pipeline import apply_crds

NAMESPACE = "default"
NAME = "applied"
PYTORCHJOBS = resources.JOB_TYPES["PyTorchJob"]


def pytorchjob() -> dict[str, Any]:
    container = {"name": "pytorch", "image": "pytorch:latest"}
    replica = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
    return {"apiVersion": jobs.API_VERSION, "kind": "PyTorchJob", "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"pytorchReplicaSpecs": {"Master": replica}}}


@dataclasses.dataclass
class World:
    applier: applying.Applier
    client: clients.KubeClient
    memory: memories.KeyMemory
    key: records.JobKey
    bus: KafkaSettings
    looks: list[float | None]


@pytest.fixture
async def world(sim_cluster: sim_cluster_module.Cluster, bus: KafkaSettings,
                tmp_path: pathlib.Path) -> AsyncIterator[World]:
    settings = ReconcilerSettings(kubeconfig=sim_cluster.kubeconfig, instance="r")
    clusters = connecting.ClusterClients(sim_cluster.kubeconfig)
    client = await clusters.get(sim_cluster.settings.context)
    await apply_crds(client)
    looks: list[float | None] = []
    async with producing.Publisher(bus, "reconciler", "r") as publisher:
        applier = applying.Applier(settings, clusters, publisher, lambda key, memory, after: looks.append(after))
        created = await client.create(PYTORCHJOBS, NAMESPACE, pytorchjob())
        memory = memories.Memories(delete_grace=300.0, confirm_after=5.0).of("job")
        memory.view.replace_job({**created, "apiVersion": jobs.API_VERSION, "kind": "PyTorchJob"})
        key = records.JobKey(cluster=sim_cluster.settings.context, namespace=NAMESPACE, kind="PyTorchJob", name=NAME)
        yield World(applier, client, memory, key, bus, looks)
    await clusters.close()


async def decisions(bus: KafkaSettings) -> list[records.Decision]:
    said = [records.decode(getattr(m, "value")) for m in await read_topic(bus, bus.jobs_topic)]
    return [r for r in said if isinstance(r, records.Decision)]


def decided(world: World, decision: effects.Effects, children: list[dict[str, Any]]) -> applying.Decided:
    """A pass of the world's job by its family, with ``decision`` as its effects."""
    assert world.memory.view.job is not None
    context = effects.Context(dt.datetime.now(dt.UTC), (ReconcilerSettings(kubeconfig=None).operator,))
    return applying.Decided(kubeflow_v1.FAMILY, world.memory.view.job, applying.Seen(children), context, decision)


async def test_a_pass_is_on_the_topic_before_its_creates_and_each_create_names_it(world: World) -> None:
    assert world.memory.view.job is not None
    context = effects.Context(dt.datetime.now(dt.UTC), (ReconcilerSettings(kubeconfig=None).operator,))
    decision = kubeflow_v1.FAMILY.decide(world.memory.view.job, [], context)
    assert decision.creates
    await world.applier.apply(world.key, world.memory, decided(world, decision, []))

    pods, _ = await world.client.list(resources.PODS, NAMESPACE)
    assert {p["metadata"]["name"] for p in pods} == {f"{NAME}-master-0"}
    said = await decisions(world.bus)
    assert [d.action for d in said][:2] == ["reconcile_pass", "child_created"]
    assert world.memory.last_pass == said[0].id
    assert all(d.detail.get("pass") == said[0].id for d in said if d.action == "child_created")
    assert world.memory.decided_on is world.memory.view.job
    assert world.looks == [decision.requeue_after]


async def test_a_deleted_child_counts_as_going_away_until_its_deleted_comes(world: World) -> None:
    assert world.memory.view.job is not None
    pod = await world.client.create(resources.PODS, NAMESPACE, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{NAME}-master-0", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "pytorch", "image": "pytorch:latest"}]}})
    pod = {**pod, "apiVersion": "v1", "kind": "Pod"}
    world.memory.view.observe_child(pod, deleted=False)
    decision = effects.Effects(deletes=[effects.ChildRef.of(pod, "restart")])
    await world.applier.apply(world.key, world.memory, decided(world, decision, [pod]))

    child = ("Pod", f"{NAME}-master-0")
    assert world.memory.expected.going(child, pod, now=asyncio.get_running_loop().time())
    with pytest.raises(clients.ApiError) as gone:
        await world.client.get(resources.PODS, NAMESPACE, f"{NAME}-master-0")
    assert gone.value.not_found
    said = await decisions(world.bus)
    assert [d.action for d in said] == ["reconcile_pass", "replica_restarted"]
    assert world.memory.expected.observed_deleted(child, pod)



async def test_a_child_the_api_server_refuses_is_in_the_status_the_family_decides_knowing_it(world: World) -> None:
    """A TrainJob's JobSet refused (here: a name the API server does not accept) → the pass's status
    is the TrainJob family's decision given the refusal: Failed, with the API's message."""
    from shared.core.trainer import family as trainer_family
    from tests.core.trainer import trainer_builders

    job = trainer_builders.train_job("refused")
    created = await world.client.create(resources.TRAINJOBS, NAMESPACE, job)
    memory = memories.Memories(delete_grace=300.0, confirm_after=5.0).of("trainjob")
    memory.view.replace_job({**created, "apiVersion": job["apiVersion"], "kind": "TrainJob"})
    key = records.JobKey(cluster=world.key.cluster, namespace=NAMESPACE, kind="TrainJob", name="refused")
    runtime = trainer_builders.runtime("torch-distributed")
    context = effects.Context(dt.datetime.now(dt.UTC), (), {trainer_family.sshkeys.KeyPair: lambda: trainer_builders.KEYS})
    decision = trainer_family.FAMILY.decide(memory.view.job or {}, [runtime], context)
    decision.creates[-1]["metadata"]["name"] = "Not_A_Name"
    await world.applier.apply(key, memory, applying.Decided(trainer_family.FAMILY, memory.view.job or {},
                                                            applying.Seen([runtime]), context, decision))

    stored = await world.client.get(resources.TRAINJOBS, NAMESPACE, "refused")
    (condition,) = stored["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("Failed", "TrainJobResourcesCreationFailed")
    assert condition["message"].startswith("JobSet Not_A_Name: ")
    said = await decisions(world.bus)
    assert "child_create_failed" in [d.action for d in said]
    assert world.looks[-1] == trainer_family.deciding.RETRY_AFTER, "looked at again"
