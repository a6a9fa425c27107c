"""Issue 19: a record is a signal, never a licence. Each shape a security review forged, written to the
topic while real jobs run, changes nothing in the cluster, and the good jobs keep completing — on both
tiers. Each is sent twice: unsigned (refused by the signature check, dead-lettered with its reason) and
signed with a service's own key, as a thief of the key could (past the signature check, the API server's
word decides: a pass that would act on a record's word reads the job and its children first)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from bench import chaos
from shared.bus import producing, reading, records
from shared.kube import resources
from tests.bus.test_consuming import read_topic
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_pipeline import job
from tests.pipeline.test_run_policy import annotate, condition
from tests.pipeline.test_training_job import JOB as TRAINING_JOB
from tests.pipeline.test_training_job import phase_is, training_job

SENDERS = [pytest.param(None, id="unsigned"), pytest.param("stolen", id="stolen-key")]


def publisher(pipeline: Pipeline, sender: str | None, role: str) -> producing.Publisher:
    if sender is None:
        return producing.Publisher(pipeline.kafka, role, "forger")
    return pipeline.thief(role)


def pytorchjob(name: str, duration: str = "10s") -> dict[str, Any]:
    """A PyTorchJob whose pods run ``duration``; 10 s by default, where the forging and the checks made while
    they run end 6 s at the most after the submission, under load."""
    manifest = job("PyTorchJob", name, {"Master": (1, "Never"), "Worker": (1, "Never")}, "pytorch")
    for replica in ("Master", "Worker"):
        annotate(manifest, replica, duration=duration)
    return manifest


async def running(pipeline: Pipeline, name: str) -> dict[str, Any]:
    created = await pipeline.submit(pytorchjob(name))
    await pipeline.wait_for("PyTorchJob", name, "Running", timeout=60)
    return {**created, **await pipeline.job("PyTorchJob", name)}


def as_seen(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """A copy of an object as the watcher publishes it, one resourceVersion ahead (a forger's best claim)."""
    seen = copy.deepcopy(obj)
    seen["apiVersion"], seen["kind"] = api_version, kind
    if seen["metadata"].get("resourceVersion"):
        seen["metadata"]["resourceVersion"] = str(int(seen["metadata"]["resourceVersion"]) + 1)
    return seen


def modified(pipeline: Pipeline, kind: str, name: str, obj: dict[str, Any]) -> records.Observation:
    """A MODIFIED observation of ``obj`` (the job, or a child: its own kind) on the key of job ``kind/name``."""
    return records.Observation(key=pipeline.key(kind, name), resource_version=obj["metadata"]["resourceVersion"],
                               object_kind=obj["kind"], event="MODIFIED", object=obj, source="watcher")


async def forge(pipeline: Pipeline, sender: str | None, role: str, *forged: records.Record) -> None:
    async with publisher(pipeline, sender, role) as out:
        for record in forged:
            await out.publish(record)


def creates(pipeline: Pipeline) -> list[dict[str, Any]]:
    return [r for r in pipeline.requests() if r["verb"] == "create"]


def deletes(pipeline: Pipeline) -> list[dict[str, Any]]:
    return [r for r in pipeline.requests() if r["verb"] == "delete"]


async def no_dead_letters_but_forgeries(pipeline: Pipeline, sender: str | None, forged: int) -> None:
    dead = await read_topic(pipeline.kafka, pipeline.kafka.dlq_topic)
    if sender is None:  # each worker group that reads the record type refuses it once
        assert dead and all(dict(m.headers)["kto-error"].startswith(b"NotAuthentic (unsigned)")  # type: ignore[attr-defined]
                            for m in dead), dead
        assert len(dead) <= 2 * forged
    else:
        assert dead == [], "a record signed with a service's key is authentic: it is judged by the API server"


async def forged(pipeline: Pipeline, name: str) -> tuple[dict[str, Any], list[records.Record]]:
    """A running job of this test, and what ``kto chaos`` forges about it: the job with one more replica of
    each type of an attacker's image on the host network; the job Succeeded with a TTL of 0 and
    cleanPodPolicy All; each of its pods Succeeded."""
    live = await running(pipeline, name)
    return live, chaos.forged_records(live, await pipeline.pods(name), pipeline.key("PyTorchJob", name))


@pytest.mark.parametrize("sender", SENDERS)
async def test_a_forged_job_with_more_workers_another_image_and_host_network_makes_no_pod(
    pipeline: Pipeline, sender: str | None,
) -> None:
    name = "bigger"
    _, [bigger, *_] = await forged(pipeline, name)
    assert isinstance(bigger, records.Observation) and bigger.object["spec"]["pytorchReplicaSpecs"]["Worker"][
        "template"]["spec"]["hostNetwork"] is True
    before = len(creates(pipeline))
    for _ in range(3):  # an attacker re-sends
        await forge(pipeline, sender, "watcher", bigger)
        await asyncio.sleep(1.0)
    made = [r for r in creates(pipeline)[before:] if r["resource"] == "pods"]
    assert made == [], made
    pods = await pipeline.pods(name)
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{name}-master-0", f"{name}-worker-0"]
    assert all(not p["spec"].get("hostNetwork") and chaos.ATTACKER_IMAGE not in str(p["spec"]) for p in pods)
    await pipeline.wait_for("PyTorchJob", name, "Succeeded", timeout=90)
    await no_dead_letters_but_forgeries(pipeline, sender, 3)


@pytest.mark.parametrize("sender", SENDERS)
async def test_a_forged_success_with_ttl_zero_and_clean_all_deletes_neither_the_job_nor_its_pods(
    pipeline: Pipeline, sender: str | None,
) -> None:
    name = "kept"
    live, [_, done, *_] = await forged(pipeline, name)
    before = len(deletes(pipeline))
    await forge(pipeline, sender, "watcher", done)
    await asyncio.sleep(2.0)
    assert deletes(pipeline)[before:] == []
    still = await pipeline.job("PyTorchJob", name)
    assert condition(still, "Succeeded") is None, "nothing succeeded yet"
    assert len(await pipeline.pods(name)) == 2
    finished = await pipeline.wait_for("PyTorchJob", name, "Succeeded", timeout=90)
    assert finished["metadata"]["uid"] == live["metadata"]["uid"]
    await no_dead_letters_but_forgeries(pipeline, sender, 1)


@pytest.mark.parametrize("sender", SENDERS)
async def test_forged_pod_phases_never_make_a_running_job_succeed(pipeline: Pipeline, sender: str | None) -> None:
    name = "phases"
    _, [_, _, *pods] = await forged(pipeline, name)
    assert len(pods) == 2
    await forge(pipeline, sender, "watcher", *pods)
    await asyncio.sleep(3.0)
    now = await pipeline.job("PyTorchJob", name)
    assert condition(now, "Succeeded") is None, now.get("status")
    assert {p["status"].get("phase") for p in await pipeline.pods(name)} == {"Running"}
    await pipeline.wait_for("PyTorchJob", name, "Succeeded", timeout=90)
    await no_dead_letters_but_forgeries(pipeline, sender, len(pods))


@pytest.mark.parametrize("sender", SENDERS)
async def test_a_forged_job_that_does_not_exist_makes_nothing(pipeline: Pipeline, sender: str | None) -> None:
    ghost = pytorchjob("ghost")
    ghost["metadata"].update(namespace=pipeline.namespace, uid="00000000-0000-0000-0000-00000000beef",
                             resourceVersion="99999999", creationTimestamp="2026-01-01T00:00:00Z")
    ghost["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = chaos.ATTACKER_IMAGE
    await forge(pipeline, sender, "watcher", records.Observation(
        key=pipeline.key("PyTorchJob", "ghost"), resource_version="99999999", object_kind="PyTorchJob",
        event="ADDED", object=as_seen(ghost, "kubeflow.org/v1", "PyTorchJob"), source="watcher"))
    await pipeline.submit(pytorchjob("real", duration="1s"))
    await pipeline.wait_for("PyTorchJob", "real", "Succeeded", timeout=90)
    assert await pipeline.pods("ghost") == []
    assert [r for r in creates(pipeline) if (r.get("name") or "").startswith("ghost")] == []


async def test_a_forged_training_job_naming_another_namespace_execs_only_in_its_own(pipeline: Pipeline) -> None:
    """The exec target namespace comes from the job key, never from the record's object."""
    await pipeline.submit(training_job(workers=2))
    live = await phase_is(pipeline, "Running")
    forged = as_seen(live, "kai.alibabacloud.com/v1alpha1", "TrainingJob")
    forged["metadata"]["namespace"] = "kube-system"
    forged["spec"]["etReplicaSpecs"]["worker"]["replicas"] = 3
    await forge(pipeline, "stolen", "watcher", modified(pipeline, "TrainingJob", TRAINING_JOB, forged))
    await asyncio.sleep(3.0)
    every = pipeline.cluster.requests if pipeline.tier == "sim" else pipeline.cluster.requests()
    elsewhere = [r for r in every if r.get("namespace") == "kube-system" and r["verb"] != "get"
                 and r["verb"] not in ("list", "watch")]
    assert elsewhere == [], elsewhere
    pods = [p["metadata"]["name"] for p in (await pipeline.client.list(resources.PODS, pipeline.namespace))[0]]
    assert f"{TRAINING_JOB}-worker-2" not in pods


async def test_a_finished_jobs_own_authentic_records_replayed_in_reverse_order_change_nothing(
    pipeline: Pipeline,
) -> None:
    """Old authentic records sent again (a replay), newest first (reordered): each passes the signature check,
    and none leads to an act, since an act rests on what the API server says now."""
    name = "replayed"
    await pipeline.submit(pytorchjob(name, duration="1s"))
    done = await pipeline.wait_for("PyTorchJob", name, "Succeeded", timeout=90)
    key = pipeline.key("PyTorchJob", name)
    await asyncio.sleep(2.0)  # the last status records on the log
    trail = [raw async for raw in reading.scan(pipeline.kafka, accept=lambda k: k == key, key=key)]
    assert len(trail) > 5
    before = len(pipeline.requests())
    async with producing.Publisher(pipeline.kafka, "replayer", "replayer") as out:
        for raw in reversed(trail):
            await out.send_raw(pipeline.kafka.jobs_topic, raw.value, key=raw.key.encode(), headers=list(raw.signature))
    await asyncio.sleep(4.0)
    acts = [r for r in pipeline.requests()[before:] if r["verb"] in ("create", "delete", "update", "patch")
            and r["resource"].split(".")[0] not in ("leases", "events")]
    assert acts == [], acts
    after = await pipeline.job("PyTorchJob", name)
    assert after["status"] == done["status"]
    assert await read_topic(pipeline.kafka, pipeline.kafka.dlq_topic) == []
