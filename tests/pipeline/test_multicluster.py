"""Many clusters behind one bus (issue 12, item 6), on both tiers.

Three clusters (``kto-1`` … ``kto-3``) run as the local stack runs them
(kto/stack.py: a process per cluster, a watcher per cluster, one reconciler,
one status worker) on the tier's broker, with topics of the test's own. The
same PyTorchJob applied with ``kubectl --context`` to every cluster gets its
children in that cluster only, and ``kto history --cluster`` shows that
cluster's records only. A cluster frozen with SIGSTOP (its API server, and on
the real tier etcd, the controllers and the node agent too: connections stay
open and nothing answers) while the reconciler holds more of its job keys than
it has slots slows no other cluster: their jobs converge while the frozen
cluster's are still pending, and those catch up once it is thawed, with
nothing dead-lettered. Held past ``--release-after``, the frozen cluster's
records are let go and a wake-up record waits in their place, so the commits move on. The figures (all up against one frozen) are in
docs/observability.md, "Many clusters".
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kto import stack
from shared.bus import reading, records
from shared.bus.settings import KafkaSettings
from shared.kube import clients, resources
from tests.fixtures import tiers
from tests.fixtures.broker import topics_of_this_test

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"
PYTORCHJOBS = resources.JOB_TYPES["PyTorchJob"]
RECONCILER_SLOTS = 4
"""The reconciler's concurrency here: fewer slots than the frozen cluster has keys waiting."""
FROZEN_JOBS = 6
RELEASE_AFTER = 3.0
"""Seconds the workers hold the records of a key whose cluster does not answer (60 by default)."""


def job_yaml(name: str) -> str:
    """The manifest applied unchanged to every cluster: Master 1 + Worker 2, pods run 1 s."""
    replica = """
      restartPolicy: OnFailure
      template:
        metadata:
          annotations:
            sim.kto.dev/duration: "1s"
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist-cpu:v1beta1-21320b6
              resources:
                requests:
                  cpu: 10m"""
    return f"""apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: {name}
  namespace: default
spec:
  runPolicy:
    cleanPodPolicy: None
  pytorchReplicaSpecs:
    Master:
      replicas: 1{replica}
    Worker:
      replicas: 2{replica}
"""


@pytest.fixture(params=[pytest.param("sim", id="sim-tansu"), pytest.param("kube", id="kube-kafka")])
def tier_broker(request: pytest.FixtureRequest) -> tuple[str, KafkaSettings]:
    """(control plane, the session's broker of the tier); started outside any event loop."""
    if request.param == "kube":
        tiers.require_real_tier()
        return "kube", request.getfixturevalue("real_kafka")
    return "sim", request.getfixturevalue("broker")


@pytest.fixture
async def three_clusters(tier_broker: tuple[str, KafkaSettings], tmp_path: pathlib.Path) -> AsyncIterator[stack.Stack]:
    control_plane, broker = tier_broker
    bus = await topics_of_this_test(broker)
    settings = stack.StackSettings(
        state_dir=tmp_path / "stack", clusters=3, control_plane=control_plane, kafka=bus, nodes=4,
        pod_duration=1.0, reconciler_concurrency=RECONCILER_SLOTS, worker_args=("--release-after", str(RELEASE_AFTER)),
    )
    async with stack.Stack(settings) as running:
        yield running
        assert running.exits() == [], "a process of the stack died"


async def kubectl(running: stack.Stack, context: str, *args: str, stdin: str | None = None) -> str:
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(running.kubeconfig), "--context", context, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def apply(running: stack.Stack, context: str, *names: str) -> None:
    await kubectl(running, context, "apply", "-f", "-", stdin="---\n".join(job_yaml(n) for n in names))


def succeeded(job: dict[str, Any]) -> bool:
    return any(c.get("type") == "Succeeded" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


async def until_succeeded(
    kube: dict[str, clients.KubeClient], jobs: list[tuple[str, str]], timeout: float,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each (context, name) job once Succeeded; fails naming those that are not."""
    done: dict[tuple[str, str], dict[str, Any]] = {}
    deadline = asyncio.get_running_loop().time() + timeout
    while len(done) < len(jobs):
        for context, name in jobs:
            if (context, name) not in done:
                job = await kube[context].get(PYTORCHJOBS, "default", name)
                if succeeded(job):
                    done[(context, name)] = job
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not Succeeded within {timeout:g}s: {sorted(set(jobs) - set(done))}")
        await asyncio.sleep(0.1)
    return done


async def history(running: stack.Stack, *args: str) -> list[dict[str, Any]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kto", "history", *args, "-o", "json",
        env={**os.environ, **running.kafka.to_env()}, cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    found: list[dict[str, Any]] = json.loads(out)["records"]
    return found


async def clients_of(running: stack.Stack) -> dict[str, clients.KubeClient]:
    return {context: await running.client(context) for context in running.contexts}


async def test_the_same_job_in_every_cluster_gets_its_children_and_its_history_in_that_cluster_only(
    three_clusters: stack.Stack,
) -> None:
    running = three_clusters
    for context in running.contexts:
        await apply(running, context, "same")
    kube = await clients_of(running)
    try:
        jobs = await until_succeeded(kube, [(c, "same") for c in running.contexts], 120)
        uid = {context: jobs[(context, "same")]["metadata"]["uid"] for context in running.contexts}
        assert len(set(uid.values())) == 3
        children: dict[str, set[str]] = {}
        for context, client in kube.items():
            selector = "training.kubeflow.org/job-name=same"
            pods, _ = await client.list(resources.PODS, "default", label_selector=selector)
            services, _ = await client.list(resources.SERVICES, "default", label_selector=selector)
            names = ["same-master-0", "same-worker-0", "same-worker-1"]
            assert sorted(p["metadata"]["name"] for p in pods) == names
            assert sorted(s["metadata"]["name"] for s in services) == names
            for child in pods + services:
                owners = child["metadata"].get("ownerReferences") or []
                assert [o["uid"] for o in owners] == [uid[context]], f"{context}: {child['metadata']['name']}"
            children[context] = {p["metadata"]["uid"] for p in pods}
            statuses = jobs[(context, "same")]["status"]["replicaStatuses"]
            assert statuses["Master"]["succeeded"] == 1 and statuses["Worker"]["succeeded"] == 2
    finally:
        for client in kube.values():
            await client.close()

    key = "kto-2/default/PyTorchJob/same"
    of_kto2 = await history(running, "--cluster", "kto-2", "-n", "default", "pytorchjob/same")
    assert {r["key"] for r in of_kto2} == {key}
    wire = [r["record"] for r in of_kto2]
    created = {(d["child_kind"], d["child_name"]) for d in wire if d.get("action") == "child_created"}
    assert created == {(kind, f"same-{r}") for kind in ("Pod", "Service")
                       for r in ("master-0", "worker-0", "worker-1")}
    seen = [o["object"] for o in wire if o["type"] == "observation"]
    assert {o["metadata"]["uid"] for o in seen if o["kind"] == "Pod"} == children["kto-2"]
    assert {o["metadata"]["uid"] for o in seen if o["kind"] == "PyTorchJob"} == {uid["kto-2"]}
    assert any(d.get("action") == "status_written" and d.get("reason") == "PyTorchJobSucceeded" for d in wire)

    everywhere = await history(running, "-n", "default", "pytorchjob/same")
    assert {r["key"] for r in everywhere} == {f"{c}/default/PyTorchJob/same" for c in running.contexts}
    assert sorted(json.dumps(r) for r in everywhere if r["key"] == key) == sorted(json.dumps(r) for r in of_kto2)


async def on_the_bus(bus: KafkaSettings, key: str) -> bool:
    """Whether the job's ADDED observation is on the jobs topic."""
    async for entry in reading.scan(bus, accept=lambda k: k == key, key=key):
        record = entry.decoded().record
        if isinstance(record, records.Observation) and record.event == "ADDED" and record.object_kind == "PyTorchJob":
            return True
    return False


async def released_past(bus: KafkaSettings, keys: list[str]) -> bool:
    """Whether the reconcilers let go of each key's records after waiting for its cluster: a
    wake-up record of theirs is on the key, and their group's commit has passed the job's ADDED."""
    committed = await reading.committed_offsets(bus, "kto-reconciler")
    for key in keys:
        added, woken = None, False
        async for entry in reading.scan(bus, accept=lambda k: k == key, key=key):
            record = entry.decoded().record
            if isinstance(record, records.Observation) and record.event == "ADDED" and added is None:
                added = entry
            woken = woken or (record is not None and records.is_wake(record, "reconciler"))
        if added is None or not woken or (committed.get(added.partition) or 0) <= added.offset:
            return False
    return True


async def test_a_frozen_cluster_slows_no_other_and_its_jobs_catch_up_when_it_thaws(three_clusters: stack.Stack) -> None:
    running = three_clusters
    cluster = f"{'control-plane' if running.settings.control_plane == 'kube' else 'sim'}-kto-2"
    kube = await clients_of(running)
    try:
        healthy = [(c, f"before-{i}") for c in ("kto-1", "kto-3") for i in range(2)]
        for context in ("kto-1", "kto-3"):
            await apply(running, context, "before-0", "before-1")
        await until_succeeded(kube, healthy, 120)

        # The reconciler takes in the ADDED records of more kto-2 jobs than it has slots,
        # right after kto-2 froze: each of their settles sends a request nothing answers.
        frozen = [f"frozen-{i}" for i in range(FROZEN_JOBS)]
        running.pause("reconciler-1")
        try:
            await apply(running, "kto-2", *frozen)
            for name in frozen:
                while not await on_the_bus(running.kafka, f"kto-2/default/PyTorchJob/{name}"):
                    await asyncio.sleep(0.1)
            running.pause(cluster)
        finally:
            running.resume("reconciler-1")
        try:
            await asyncio.sleep(1.0)  # the settles of kto-2's keys are under way and hang
            during = [(c, f"during-{i}") for c in ("kto-1", "kto-3") for i in range(2)]
            for context in ("kto-1", "kto-3"):
                await apply(running, context, "during-0", "during-1")
            await until_succeeded(kube, during, 90)  # old code: held by kto-2's keys for minutes
            log = (running.log_dir / "reconciler-1.log").read_text()
            # Converged before the reconciler even gave up waiting on kto-2's requests: its keys
            # held no more than their half of the slots (the lanes).
            assert "cluster kto-2 is not answering" not in log
            while "cluster kto-2 is not answering" not in (running.log_dir / "reconciler-1.log").read_text():
                await asyncio.sleep(0.2)
            later = [("kto-1", "later"), ("kto-3", "later")]
            for context in ("kto-1", "kto-3"):
                await apply(running, context, "later")
            await until_succeeded(kube, later, 90)  # while kto-2's keys wait, back off and probe
            # After --release-after, kto-2's keys let their records go (the commits move on, so a
            # restarted worker would not read the outage again); a wake-up record waits instead.
            keys = [f"kto-2/default/PyTorchJob/{name}" for name in frozen]
            deadline = asyncio.get_running_loop().time() + 60
            while not await released_past(running.kafka, keys):
                assert asyncio.get_running_loop().time() < deadline, "kto-2's records still held after 60s"
                await asyncio.sleep(0.5)
        finally:
            running.resume(cluster)
        await until_succeeded(kube, [("kto-2", n) for n in frozen], 120)
    finally:
        for client in kube.values():
            await client.close()
    assert "answers again" in (running.log_dir / "reconciler-1.log").read_text()
    dead = [entry async for entry in reading.scan(running.kafka, accept=lambda k: True, topic=running.kafka.dlq_topic)]
    assert dead == [], "a record of the frozen cluster was dead-lettered"
