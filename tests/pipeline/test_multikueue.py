"""MultiKueue across clusters (issue 23, item 3) on the real tier, with the real Kueue v0.17.0.

One three-cluster stack for the module, as ``kto up --clusters 3 --control-plane kube
--multikueue`` runs it (kto/stack.py): ``kto-1`` is MultiKueue's manager, ``kto-2`` and ``kto-3``
its workers, each cluster a real control plane with its own Kueue, and kto serving all three from
one bus (Apache Kafka). The queues are applied as docs/fleets.md says, its commands run as written:
each worker's ClusterQueue holds one job's GPUs at a time, the manager's both workers' worth.

* Jobs submitted once to the manager (PyTorchJob and MPIJob v2beta1) run on both workers; the
  manager's copies, ``managedBy: kueue.x-k8s.io/multikueue`` from Kueue's webhook, reach
  Succeeded with the workers' replica statuses mirrored, never get a pod (kto's reconciler skips
  them, its status worker writes nothing for them: ``kto history``), and the workers' copies and
  Workloads are removed once they finish.
* A worker frozen mid-run (SIGSTOP of its whole control plane): after ``workerLostTimeout`` Kueue
  evicts the manager's Workload ("Reserving remote lost"), dispatches it again to the other
  worker, where kto runs it to Succeeded; once the frozen worker is thawed MultiKueue removes the
  stale copy left there.
* A worker whose kubeconfig Secret is wrong: its MultiKueueCluster is ``Active: False`` with
  Kueue's reason, the AdmissionCheck names it inactive, and a job goes to the other worker only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
import yaml

from kto import cli, stack
from realparts import controllerruntime
from realparts import kueue as real_kueue
from shared.api import kueue as kueue_api
from shared.bus.settings import KafkaSettings
from shared.kube import clients, resources
from tests.fixtures import tiers
from tests.fixtures.broker import topics_of_this_test

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"
MANAGER, WORKERS = "kto-1", ("kto-2", "kto-3")
NAMESPACE = "default"
QUEUE = "user-queue"
MOVE_TIMEOUT = 120.0
"""Seconds the frozen worker's job is given to be dispatched to the other worker."""
WORKER_LOST_TIMEOUT = 15.0
"""MultiKueue's workerLostTimeout here (15 minutes by default): seconds a Workload stays admitted
on a worker the manager cannot reach."""
PYTORCHJOBS = resources.JOB_TYPES["PyTorchJob"]
MPIJOBS = resources.MPIJOBS_V2BETA1
GPUS_PER_POD = 3
"""Two such pods a job: a worker's ClusterQueue (8 GPUs, deploy/overlays/kueue/queues) admits one job at a time."""


def doc_blocks(section: str) -> list[str]:
    """The fenced ``sh`` blocks of docs/fleets.md's section (### heading) that begins ``section``."""
    text = (ROOT / "docs" / "fleets.md").read_text()
    found = text[text.index(f"### {section}"):]
    found = found[:found.index("\n## ", 1)] if "\n## " in found[1:] else found
    found = found[:found.index("\n### ", 1)] if "\n### " in found[1:] else found
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", found, re.S)
    return blocks


def doc_block(marker: str, section: str = "On your machine") -> str:
    found = [block for block in doc_blocks(section) if marker in block]
    assert len(found) == 1, f"{len(found)} blocks of docs/fleets.md's {section!r} hold {marker!r}"
    return found[0]


def run_doc_block(running: stack.Stack, marker: str, cwd: pathlib.Path, section: str = "On your machine",
                  kubeconfig: pathlib.Path | None = None) -> str:
    """A block of docs/fleets.md run as written by bash, in ``cwd`` (where ``.kto`` is the stack's
    state directory and ``deploy`` the repository's), kto's venv first on PATH, ``KUBECONFIG``
    ``kubeconfig`` if given; its output."""
    env = {**os.environ, "PATH": f"{KUBECTL.parent}:{os.environ['PATH']}"}
    env.pop("KUBECONFIG", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run(["bash", "-euc", doc_block(marker, section)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"docs/fleets.md's block with {marker!r} failed:\n{done.stderr}{done.stdout}"
    return done.stdout


def replica(container: str, run: str, gpus: int, command: list[str] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus} if gpus else {}
    spec: dict[str, Any] = {"name": container, "image": "docker.io/kubeflowkatib/pytorch-mnist-cpu:v1beta1-21320b6",
                            "resources": {"requests": {"cpu": "100m", **limits}, "limits": limits}}
    if command:
        spec["command"] = command
    return {"metadata": {"annotations": {"sim.kto.dev/duration": run}}, "spec": {"containers": [spec]}}


def pytorchjob(name: str, run: str = "2s") -> dict[str, Any]:
    """Master 1 + Worker 1, each pod GPUS_PER_POD GPUs, in the LocalQueue of docs/fleets.md."""
    specs = {rt: {"replicas": 1, "restartPolicy": "OnFailure", "template": replica("pytorch", run, GPUS_PER_POD)}
             for rt in ("Master", "Worker")}
    return {"apiVersion": PYTORCHJOBS.api_version, "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {kueue_api.QUEUE_NAME_LABEL: QUEUE}},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "pytorchReplicaSpecs": specs}}


def mpijob(name: str, run: str = "2s") -> dict[str, Any]:
    """Launcher 1 (no GPU) + Worker 2 of GPUS_PER_POD GPUs each, in the same LocalQueue."""
    return {"apiVersion": MPIJOBS.api_version, "kind": "MPIJob",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {kueue_api.QUEUE_NAME_LABEL: QUEUE}},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                     "sshAuthMountPath": "/home/mpiuser/.ssh",
                     "mpiReplicaSpecs": {
                         "Launcher": {"replicas": 1, "template": replica("mpi-launcher", run, 0,
                                                                         ["mpirun", "-n", "2", "/home/mpiuser/pi"])},
                         "Worker": {"replicas": 2, "template": replica("mpi-worker", "600s", GPUS_PER_POD,
                                                                       ["/usr/sbin/sshd", "-De"])}}}}


def type_of(job: dict[str, Any]) -> resources.ResourceType:
    return MPIJOBS if job["kind"] == "MPIJob" else PYTORCHJOBS


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind and found.get("status") == "True":
            return dict(found)
    return None


class Fleet:
    """The module's stack and a client per cluster."""

    def __init__(self, running: stack.Stack, kube: dict[str, clients.KubeClient], cwd: pathlib.Path) -> None:
        self.running = running
        self.kube = kube
        self.cwd = cwd
        """Where docs/fleets.md's blocks run: ``.kto`` is the stack's state directory, ``deploy`` the
        repository's."""

    async def get(self, context: str, rt: resources.ResourceType, name: str,
                  namespace: str | None = NAMESPACE) -> dict[str, Any] | None:
        try:
            return await self.kube[context].get(rt, namespace if rt.namespaced else None, name)
        except clients.ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def workload_of(self, context: str, job: dict[str, Any]) -> dict[str, Any] | None:
        """The Workload Kueue made for ``job`` in ``context`` (owned by it, same kind and name)."""
        found, _ = await self.kube[context].list(resources.WORKLOADS, NAMESPACE)
        for workload in found:
            owners = workload["metadata"].get("ownerReferences") or []
            if any(o["kind"] == job["kind"] and o["name"] == job["metadata"]["name"] for o in owners):
                return dict(workload)
        return None

    async def eventually(self, check: Callable[[], Awaitable[Any]], what: str, timeout: float) -> Any:
        """``check()``'s first truthy value within ``timeout`` seconds; fails naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            found = await check()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:g}s")
            await asyncio.sleep(0.3)

    async def submit(self, *jobs: dict[str, Any]) -> None:
        for job in jobs:
            await self.kube[MANAGER].create(type_of(job), NAMESPACE, job)

    async def succeeded_on_manager(self, job: dict[str, Any], timeout: float) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            got = await self.get(MANAGER, type_of(job), job["metadata"]["name"])
            return got if got is not None and condition(got, "Succeeded") else None

        found: dict[str, Any] = await self.eventually(check, f"{job['kind']} {job['metadata']['name']} Succeeded "
                                                            f"on the manager", timeout)
        return found

    async def gone_from_workers(self, job: dict[str, Any], timeout: float,
                                workers: tuple[str, ...] = WORKERS) -> None:
        """Neither the job's copy nor its Workload left in any of ``workers``."""
        name = job["metadata"]["name"]

        async def check() -> bool:
            for worker in workers:
                if await self.get(worker, type_of(job), name) is not None:
                    return False
                if await self.workload_of(worker, job) is not None:
                    return False
            return True

        await self.eventually(check, f"{job['kind']} {name} and its Workload removed from {', '.join(workers)}",
                              timeout)

    async def history(self, *args: str) -> list[dict[str, Any]]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kto", "history", *args, "-o", "json",
            env={**os.environ, **self.running.kafka.to_env()}, cwd=str(ROOT),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, err.decode()
        records: list[dict[str, Any]] = json.loads(out)["records"]
        return records


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fleet(real_kafka: KafkaSettings, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fleet]:
    tiers.require_real_tier()
    bus = await topics_of_this_test(real_kafka)
    cwd = tmp_path_factory.mktemp("multikueue")
    settings = stack.StackSettings(
        state_dir=cwd / ".kto", clusters=3, control_plane="kube", multikueue=True, kafka=bus, nodes=2,
        multikueue_worker_lost_timeout=WORKER_LOST_TIMEOUT, start_timeout=180.0,
    )
    (cwd / "deploy").symlink_to(ROOT / "deploy")
    async with stack.Stack(settings) as running:
        kube = {context: await running.client(context) for context in running.contexts}
        try:
            fleet = Fleet(running, kube, cwd)
            run_doc_block(running, "apply -k deploy/overlays/multikueue/manager/queues", cwd)
            yield fleet
        finally:
            for client in kube.values():
                await client.close()
        assert running.exits() == [], "a process of the stack died"


async def test_the_documented_kto_up_line_is_the_stack_this_module_runs() -> None:
    line = doc_block("kto up").strip()
    assert line == "kto up --clusters 3 --control-plane kube --multikueue"
    args = cli.build_parser().parse_args(shlex.split(line)[1:])
    assert (args.clusters, args.control_plane, args.multikueue) == (3, "kube", True)


async def test_the_manager_connects_both_workers_and_holds_the_documented_queues(fleet: Fleet) -> None:
    for worker in WORKERS:
        cluster = await fleet.get(MANAGER, real_kueue.MULTIKUEUE_CLUSTERS, worker, None)
        assert cluster is not None and condition(cluster, "Active") is not None, cluster
    check = await fleet.get(MANAGER, real_kueue.ADMISSION_CHECKS, "multikueue", None)
    assert check is not None and condition(check, "Active") is not None, check
    for context in fleet.running.contexts:
        queue = await fleet.get(context, resources.ResourceType(real_kueue.GROUP, "v1beta2", "localqueues",
                                                                "LocalQueue"), QUEUE)
        assert queue is not None and queue["spec"]["clusterQueue"] == "cluster-queue", context


async def test_the_documented_job_runs_on_a_worker_and_its_manager_copy_says_so(fleet: Fleet) -> None:
    out = run_doc_block(fleet.running, "name: fleet-mnist", fleet.cwd).splitlines()
    assert out[:2] == ["pytorchjob.kubeflow.org/fleet-mnist created",
                       "pytorchjob.kubeflow.org/fleet-mnist condition met"]
    assert out[2].split() == ["JOB", "WORKER"]
    assert [line.split()[0] for line in out[3:-1]] == ["fleet-mnist"] and out[3].split()[1] in WORKERS, out
    assert out[-1] == kueue_api.MANAGED_BY_MULTIKUEUE


async def test_jobs_submitted_to_the_manager_run_on_both_workers_and_finish_there_mirrored(fleet: Fleet) -> None:
    jobs = [pytorchjob("mk-pt-1"), mpijob("mk-mpi-1"), pytorchjob("mk-pt-2"), mpijob("mk-mpi-2")]
    await fleet.submit(*jobs)
    seen_on: dict[str, set[str]] = {job["metadata"]["name"]: set() for job in jobs}
    worker_status: dict[str, dict[str, Any]] = {}

    async def watch_workers() -> None:
        """Which worker holds each job's copy, and each copy's last status, while they run."""
        while True:
            for worker in WORKERS:
                for job in jobs:
                    copy = await fleet.get(worker, type_of(job), job["metadata"]["name"])
                    if copy is not None and (copy["metadata"].get("labels") or {}).get(
                            kueue_api.PREBUILT_WORKLOAD_LABEL):
                        assert "managedBy" not in (copy["spec"].get("runPolicy") or {}), copy["spec"]["runPolicy"]
                        if condition(copy, "Running") or condition(copy, "Succeeded"):
                            seen_on[job["metadata"]["name"]].add(worker)
                            worker_status[job["metadata"]["name"]] = copy.get("status") or {}
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch_workers())
    try:
        done = [await fleet.succeeded_on_manager(job, 300) for job in jobs]
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    assert all(len(where) == 1 for where in seen_on.values()), seen_on
    assert {w for where in seen_on.values() for w in where} == set(WORKERS), seen_on
    for job, manager_copy in zip(jobs, done, strict=True):
        name = job["metadata"]["name"]
        assert manager_copy["spec"]["runPolicy"]["managedBy"] == kueue_api.MANAGED_BY_MULTIKUEUE
        workload = await fleet.workload_of(MANAGER, job)
        assert workload is not None and workload["status"]["clusterName"] in seen_on[name], workload
        assert condition(workload, "Finished") is not None, workload["status"]
        # The manager's status is the worker's: kto wrote none there, yet it has kto's reasons and counts.
        succeeded = condition(manager_copy, "Succeeded")
        assert succeeded is not None and succeeded["reason"] == f"{job['kind']}Succeeded", manager_copy["status"]
        assert manager_copy["status"]["replicaStatuses"].keys() == worker_status[name]["replicaStatuses"].keys()
    for job in jobs:
        await fleet.gone_from_workers(job, 120)
    # The manager never got a pod of them, and kto decided only to leave its copies alone.
    pods, _ = await fleet.kube[MANAGER].list(resources.PODS, NAMESPACE)
    assert not [p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("mk-")]
    for job in jobs:
        name = job["metadata"]["name"]
        records = await fleet.history("--cluster", MANAGER, "-n", NAMESPACE, f"{job['kind'].lower()}/{name}")
        here = [r["record"] for r in records if r["key"] == f"{MANAGER}/{NAMESPACE}/{job['kind']}/{name}"]
        assert any(r["type"] == "observation" for r in here)
        assert not [d for d in here if d.get("action") in ("child_created", "status_written")], here
        # kto history joins the worker's copy to the manager's job: its children were made there.
        (worker,) = seen_on[name]
        there = [r["record"] for r in records if r["key"] == f"{worker}/{NAMESPACE}/{job['kind']}/{name}"]
        assert any(d.get("action") == "child_created" for d in there), sorted({r["key"] for r in records})


async def test_a_frozen_worker_loses_its_job_to_the_other_after_the_worker_lost_timeout(fleet: Fleet) -> None:
    job = pytorchjob("mk-frozen", run="20s")
    await fleet.submit(job)

    async def running_on() -> str | None:
        workload = await fleet.workload_of(MANAGER, job)
        worker = ((workload or {}).get("status") or {}).get("clusterName")
        if worker is None:
            return None
        copy = await fleet.get(worker, PYTORCHJOBS, "mk-frozen")
        return str(worker) if copy is not None and condition(copy, "Running") else None

    frozen: str = await fleet.eventually(running_on, "mk-frozen Running on a worker", 120)
    other = next(w for w in WORKERS if w != frozen)
    began = time.monotonic()
    fleet.running.pause(f"control-plane-{frozen}")
    moved_to: str | None = None
    try:
        async def moved() -> str | None:
            workload = await fleet.workload_of(MANAGER, job)
            worker = ((workload or {}).get("status") or {}).get("clusterName")
            return str(worker) if worker == other else None

        try:
            moved_to = await fleet.eventually(moved, f"mk-frozen dispatched again to {other}", MOVE_TIMEOUT)
        except AssertionError:
            # Kueue v0.17.0's race (docs/fleets.md, "A lost worker"): its webhook refuses the manager's
            # move of status.clusterName to a worker not among the Workload's nominatedClusterNames, and
            # MultiKueue retries that patch without evicting, so the job stays with the lost worker.
            log = controllerruntime.log_text(fleet.running.kueues[MANAGER].log)
            assert "when setting clusterName it must be one of the nominatedClusterNames" in log, \
                f"mk-frozen was neither dispatched again to {other} nor held by Kueue's known race"
        if moved_to is not None:
            moved_after = time.monotonic() - began
            assert moved_after >= WORKER_LOST_TIMEOUT - 1, moved_after
            done = await fleet.succeeded_on_manager(job, 180)
            assert condition(done, "Succeeded") is not None
            # Kueue's account, on the manager's Workload: evicted by its admission check (MultiKueue set
            # it to Retry, "Reserving remote lost"; once, or twice when the first retry still saw the lost
            # worker), reserved again and dispatched to the other worker.
            workload = await fleet.workload_of(MANAGER, job)
            assert workload is not None
            evictions = workload["status"]["schedulingStats"]["evictions"]
            assert [e["reason"] for e in evictions] == ["AdmissionCheck"] and evictions[0]["count"] >= 1, evictions
            events, _ = await fleet.kube[MANAGER].list(resources.EVENTS, NAMESPACE)
            said = [e.get("message") or "" for e in events
                    if (e.get("involvedObject") or {}).get("name") == workload["metadata"]["name"]]
            for message in ("At least one admission check is false", f'The workload got reservation on "{frozen}"',
                            f'The workload got reservation on "{other}"'):
                assert message in said, said
    finally:
        fleet.running.resume(f"control-plane-{frozen}")
        # The frozen worker's own Kueue (not frozen) could not renew its lease there and exited, as
        # upstream's does ("leader election lost"); in a cluster its Deployment would start it again.
        controller = fleet.running.kueues[frozen]
        lost = "leader election lost" in controllerruntime.log_text(controller.log)
        await controller.stop()
        await controller.start()
        await real_kueue.wait_clusters_active(fleet.running.kubeconfig, MANAGER, list(WORKERS), timeout=240)
    assert lost, f"the frozen worker {frozen}'s Kueue kept its lease"
    if moved_to is None:
        # Held by the race: once the worker answers again, the job ends there, its status mirrored.
        done = await fleet.succeeded_on_manager(job, 240)
        assert condition(done, "Succeeded") is not None
    await fleet.gone_from_workers(job, 300, (frozen, other))


WRONG_SECRETS = [
    pytest.param(lambda config: {"kubeconfig": re.sub(r"(token|client-key-data): \S+", r"\1: d3Jvbmc=", config)},
                 "ClientConnectionFailed", "the server has asked for the client to provide credentials",
                 id="wrong-credentials"),
    pytest.param(lambda config: {}, "BadKubeConfig", 'key "kubeconfig" not found', id="no-kubeconfig-key"),
    pytest.param(lambda config: {"kubeconfig": config.replace("certificate-authority-data:", "certificate-authority: "
                                                              "/etc/ca.crt\n    x-was-data:")},
                 "InsecureKubeConfig", "certificate-authority file paths are not allowed", id="ca-as-a-file-path"),
]


async def absent(fleet: Fleet, rt: resources.ResourceType, name: str) -> bool:
    return await fleet.get(MANAGER, rt, name, None) is None


@pytest.mark.parametrize(("wrong", "reason", "message"), WRONG_SECRETS)
async def test_a_worker_whose_kubeconfig_secret_is_wrong_is_inactive_with_kueues_reason_and_gets_no_job(
    fleet: Fleet, wrong: Callable[[str], dict[str, str]], reason: str, message: str,
) -> None:
    broken = WORKERS[-1]
    secret_name = real_kueue.secret_name(broken)
    secret = await fleet.get(MANAGER, resources.SECRETS, secret_name, real_kueue.NAMESPACE)
    assert secret is not None
    right = base64.b64decode(secret["data"]["kubeconfig"]).decode()
    given = {key: base64.b64encode(value.encode()).decode() for key, value in wrong(right).items()}

    def stored(data: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "type": secret["type"],
                "metadata": {"name": secret_name, "namespace": real_kueue.NAMESPACE}, "data": data}

    # The worker set up with the wrong Secret: its MultiKueueCluster made again after it. (Changed under
    # a connected cluster, Kueue v0.17.0 says ClientConnectionFailed for one retry interval at most,
    # then Active again while its client cannot list: a failed watch start does not mark the client
    # as reconnecting. docs/fleets.md.)
    cluster = await fleet.get(MANAGER, real_kueue.MULTIKUEUE_CLUSTERS, broken, None)
    assert cluster is not None
    await fleet.kube[MANAGER].delete(real_kueue.MULTIKUEUE_CLUSTERS, None, broken)
    await fleet.eventually(lambda: absent(fleet, real_kueue.MULTIKUEUE_CLUSTERS, broken), f"{broken} deleted", 30)
    await fleet.kube[MANAGER].put(resources.SECRETS, real_kueue.NAMESPACE, stored(given))
    await fleet.kube[MANAGER].create(real_kueue.MULTIKUEUE_CLUSTERS, None, {
        "apiVersion": cluster["apiVersion"], "kind": cluster["kind"], "metadata": {"name": broken},
        "spec": cluster["spec"]})
    try:
        async def inactive() -> dict[str, Any] | None:
            cluster = await fleet.get(MANAGER, real_kueue.MULTIKUEUE_CLUSTERS, broken, None)
            for found in ((cluster or {}).get("status") or {}).get("conditions") or []:
                if found["type"] == "Active" and found["status"] == "False" and found["reason"] == reason:
                    return dict(found)
            return None

        said = await fleet.eventually(inactive, f"{broken} Active=False ({reason})", 60)
        assert message in said["message"], said
        assert right not in said["message"] and "d3Jvbmc=" not in said["message"]
        async def partly_active() -> dict[str, Any] | None:
            check = await fleet.get(MANAGER, real_kueue.ADMISSION_CHECKS, "multikueue", None)
            active = condition(check or {}, "Active")
            return active if active is not None and active["reason"] == "SomeActiveClusters" else None

        active = await fleet.eventually(partly_active, "the AdmissionCheck SomeActiveClusters", 60)
        assert active["message"] == f"Inactive clusters: [{broken}]"
        job = pytorchjob(f"mk-wrong-{reason.lower()}")
        await fleet.submit(job)
        await fleet.succeeded_on_manager(job, 180)
        workload = await fleet.workload_of(MANAGER, job)
        assert workload is not None and workload["status"]["clusterName"] == WORKERS[0]
        assert await fleet.get(broken, PYTORCHJOBS, job["metadata"]["name"]) is None
    finally:
        await fleet.kube[MANAGER].put(resources.SECRETS, real_kueue.NAMESPACE, stored(secret["data"]))
    await real_kueue.wait_clusters_active(fleet.running.kubeconfig, MANAGER, list(WORKERS), timeout=120)


async def test_the_documented_deploy_steps_connect_the_workers_as_multikueue_sa(fleet: Fleet) -> None:
    """docs/fleets.md's "On real clusters" steps run as written, last (they put kto's deploy/ in
    every cluster, its webhook configurations with no webhook behind them among it): contexts
    ``manager``, ``worker-1`` and ``worker-2`` name kto-1, kto-2 and kto-3; the manager's Kueue
    then reaches each worker as ``multikueue-sa``, through the Secret kubeconfig.sh made."""
    config = yaml.safe_load(fleet.running.kubeconfig.read_text())
    renamed = {MANAGER: "manager", WORKERS[0]: "worker-1", WORKERS[1]: "worker-2"}
    for context in config["contexts"]:
        context["name"] = renamed[context["name"]]
    kubeconfig = fleet.cwd / "fleet.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    section = "On real clusters"
    applied = run_doc_block(fleet.running, "apply -k deploy/overlays/multikueue/worker", fleet.cwd, section,
                            kubeconfig)
    assert "clusterrole.rbac.authorization.k8s.io/multikueue-worker created" in applied
    made = run_doc_block(fleet.running, "kubeconfig.sh", fleet.cwd, section, kubeconfig)
    assert made.splitlines() == [line for w in ("worker-1", "worker-2") for line in (
        f"./{w}.kubeconfig: context {w}, user multikueue-sa", f"secret/{w} created")], made
    shown = run_doc_block(fleet.running, "apply -k deploy/overlays/multikueue/manager", fleet.cwd, section,
                          kubeconfig)
    assert "multikueueconfig.kueue.x-k8s.io/multikueue configured" in shown, shown
    await real_kueue.wait_clusters_active(fleet.running.kubeconfig, MANAGER, ["worker-1", "worker-2"], timeout=120)
    for worker in ("worker-1", "worker-2"):
        secret = await fleet.get(MANAGER, resources.SECRETS, worker, real_kueue.NAMESPACE)
        assert secret is not None
        user = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))["users"][0]
        assert user["name"] == "multikueue-sa" and set(user["user"]) == {"token"}
