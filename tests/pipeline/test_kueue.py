"""kto under the real Kueue v0.17.0 on one cluster (issue 23), on the real tier: Kueue's webhook
creates a LocalQueue-labelled job suspended, Kueue admits it when its ClusterQueue has quota and
writes its flavour's node labels and tolerations into each replica's template as it unsuspends it,
and kto's pods carry them; a job without quota waits with no pod; a preempted job loses its pods,
keeps itself, and says so as upstream does (Suspended, Running False, active 0, a new startTime on
resume), then runs again once re-admitted; two teams' ClusterQueues in one cohort lend and reclaim
GPUs; and a job Kueue cannot admit (no such LocalQueue, no flavour for ``nvidia.com/gpu``) gets
Kueue's reason as an Event and never a pod, even across a reconciler's restart.

Each test makes its own ResourceFlavor, ClusterQueues (selecting the test's namespace only) and
LocalQueues, named after its namespace; one Kueue serves the module (tests/fixtures/kueue.py)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shared.api import kueue
from shared.kube import clients, resources
from tests.fixtures.pipeline import Pipeline
from tests.pipeline import test_admission, test_trainjobs

pytestmark = [pytest.mark.parametrize("tier", ["kube"], indirect=True), pytest.mark.usefixtures("real_kueue")]

GROUP, VERSION = kueue.GROUP, kueue.VERSION
FLAVORS = resources.ResourceType(GROUP, VERSION, "resourceflavors", "ResourceFlavor", namespaced=False)
CLUSTER_QUEUES = resources.ResourceType(GROUP, VERSION, "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = resources.ResourceType(GROUP, VERSION, "localqueues", "LocalQueue")
COHORTS = resources.ResourceType(GROUP, VERSION, "cohorts", "Cohort", namespaced=False)
PRIORITY_CLASSES = resources.ResourceType(GROUP, VERSION, "workloadpriorityclasses", "WorkloadPriorityClass",
                                          namespaced=False)
WORKLOADS = resources.WORKLOADS
QUEUE_NAME = kueue.QUEUE_NAME_LABEL
PRIORITY_CLASS = kueue.PRIORITY_CLASS_LABEL
PODSET = f"{GROUP}/podset"
GPU = "nvidia.com/gpu"
NODE_LABELS = {"node.kubernetes.io/instance-type": "sim"}
"""What every node of the real tier carries: the flavour's node labels Kueue writes into the templates."""
TOLERATION = {"key": "kto.dev/queue", "operator": "Exists", "effect": "NoSchedule"}
"""The flavour's toleration (no node has the taint: the pods run wherever; they must carry it)."""
TIMEOUT = 90.0


def template(container: str, duration: str, gpus: int = 1) -> dict[str, Any]:
    """A pod template asking for ``gpus`` GPUs that runs ``duration`` on the real tier's nodes."""
    return {"metadata": {"annotations": {"sim.kto.dev/duration": duration}},
            "spec": {"containers": [{"name": container, "image": "busybox",
                                     "resources": {"limits": {GPU: str(gpus)}}}]}}


def queued(job: dict[str, Any], queue: str, priority: str | None = None) -> dict[str, Any]:
    labels = {QUEUE_NAME: queue, **({PRIORITY_CLASS: priority} if priority else {})}
    return {**job, "metadata": {**job["metadata"], "labels": labels}}


def pytorchjob(name: str, duration: str = "3s", workers: int = 1) -> dict[str, Any]:
    replica = {"restartPolicy": "Never", "template": template("pytorch", duration)}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, **replica},
                                             "Worker": {"replicas": workers, **copy.deepcopy(replica)}}}}


def tfjob(name: str, duration: str = "3s") -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": {
                "Chief": {"replicas": 1, "restartPolicy": "Never", "template": template("tensorflow", duration)},
                "Worker": {"replicas": 1, "restartPolicy": "Never", "template": template("tensorflow", duration)}}}}


def mpijob(name: str, duration: str = "3s", workers: int = 1) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                     "mpiReplicaSpecs": {
                         "Launcher": {"replicas": 1, "template": template("mpi-launcher", duration)},
                         "Worker": {"replicas": workers, "template": template("mpi-worker", "600s")}}}}


def trainjob(name: str, duration: str = "6s") -> dict[str, Any]:
    (example,) = test_trainjobs._example("01-multi-node.yaml")
    job = test_trainjobs.quick(example, **{"sim.kto.dev/duration": duration})
    job["metadata"]["name"] = name
    job["spec"]["trainer"]["numNodes"] = 2
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {GPU: "1"}}
    return job


@dataclasses.dataclass(frozen=True)
class Kind:
    """How a test reads one job kind: its API, what ends it and which pods are its."""

    rt: resources.ResourceType
    done: str
    """The condition it ends with."""
    pod_label: str
    """The label its pods carry with the job's name."""
    podsets: tuple[str, ...]
    """Kueue's podSets in its order: the replica types of its ordered list that the job has, lower-cased
    (kubeflowjob's ``OrderedReplicaTypes``, mpijob's ``orderedReplicaTypes``), or the JobSet's replicated
    jobs (a TrainJob)."""

    def suspended(self, job: dict[str, Any]) -> bool:
        spec = job.get("spec") or {}
        return bool(spec.get("suspend") if self.rt.kind == "TrainJob" else (spec.get("runPolicy") or {}).get("suspend"))


TRAINING = "training.kubeflow.org/job-name"
KINDS = {
    "PyTorchJob": Kind(resources.JOB_TYPES["PyTorchJob"], "Succeeded", TRAINING, ("master", "worker")),
    "TFJob": Kind(resources.JOB_TYPES["TFJob"], "Succeeded", TRAINING, ("chief", "worker")),
    "MPIJob": Kind(resources.MPIJOBS_V2BETA1, "Succeeded", TRAINING, ("launcher", "worker")),
    "TrainJob": Kind(resources.TRAINJOBS, "Complete", "jobset.sigs.k8s.io/jobset-name", ("node",)),
}


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def is_true(obj: dict[str, Any], condition: str) -> bool:
    return conditions(obj).get(condition, {}).get("status") == "True"


def resource_groups(flavor: str, quota: dict[str, int], borrowing: int | None = None) -> list[dict[str, Any]]:
    """One resource group: ``quota`` of ``flavor`` (each resource's ``borrowingLimit`` ``borrowing``)."""
    return [{"coveredResources": list(quota), "flavors": [{"name": flavor, "resources": [
        {"name": resource, "nominalQuota": str(n),
         **({"borrowingLimit": str(borrowing)} if borrowing is not None else {})}
        for resource, n in quota.items()]}]}]


@dataclasses.dataclass
class Queues:
    """One test's Kueue objects; ``lq(name)`` is a LocalQueue's name in the test's namespace."""

    pipeline: Pipeline
    made: list[tuple[resources.ResourceType, str]] = dataclasses.field(default_factory=list)

    @property
    def prefix(self) -> str:
        return self.pipeline.namespace

    async def flavor(self, name: str = "gpu") -> str:
        full = f"{self.prefix}-{name}"
        await self._create(FLAVORS, {"metadata": {"name": full},
                                     "spec": {"nodeLabels": NODE_LABELS, "tolerations": [TOLERATION]}})
        return full

    async def cluster_queue(self, name: str, flavor: str, quota: dict[str, int], *, cohort: str | None = None,
                            preemption: dict[str, Any] | None = None, borrowing: int | None = None) -> str:
        full = f"{self.prefix}-{name}"
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.prefix}},
            "resourceGroups": resource_groups(flavor, quota, borrowing),
        }
        if cohort:
            spec["cohortName"] = f"{self.prefix}-{cohort}"
        if preemption:
            spec["preemption"] = preemption
        await self._create(CLUSTER_QUEUES, {"metadata": {"name": full}, "spec": spec})
        return full

    async def cohort(self, name: str, flavor: str, quota: dict[str, int]) -> str:
        """A Cohort holding ``quota`` of ``flavor`` itself, for its ClusterQueues to borrow."""
        full = f"{self.prefix}-{name}"
        await self._create(COHORTS, {"metadata": {"name": full},
                                     "spec": {"resourceGroups": resource_groups(flavor, quota)}})
        return full

    async def local_queue(self, name: str, cluster_queue: str) -> str:
        await self._create(LOCAL_QUEUES, {"metadata": {"name": name, "namespace": self.prefix},
                                          "spec": {"clusterQueue": cluster_queue}})
        return name

    async def priority(self, name: str, value: int) -> str:
        full = f"{self.prefix}-{name}"
        await self._create(PRIORITY_CLASSES, {"metadata": {"name": full}, "value": value})
        return full

    async def active(self, name: str) -> None:
        """Wait for a ClusterQueue to be Active (its flavours known to Kueue)."""
        async def check() -> bool:
            return is_true(await self.pipeline.client.get(CLUSTER_QUEUES, None, name), "Active")
        await self.pipeline.eventually(check, timeout=30, what=f"ClusterQueue {name} Active")

    async def _create(self, rt: resources.ResourceType, body: dict[str, Any]) -> None:
        body = {"apiVersion": rt.api_version, "kind": rt.kind, **body}
        namespace = self.prefix if rt.namespaced else None
        await self.pipeline.client.create(rt, namespace, body)
        if not rt.namespaced:
            self.made.append((rt, body["metadata"]["name"]))

    async def remove(self) -> None:
        """The cluster-scoped objects deleted (Kueue lets them go once their Workloads are)."""
        for rt, name in reversed(self.made):
            with contextlib.suppress(clients.ApiError):
                await self.pipeline.client.delete(rt, None, name)


@contextlib.asynccontextmanager
async def queues(pipeline: Pipeline) -> AsyncIterator[Queues]:
    made = Queues(pipeline)
    try:
        yield made
    finally:
        await made.remove()


async def submit(pipeline: Pipeline, job: dict[str, Any]) -> dict[str, Any]:
    """Create the job: Kueue's webhook has made it suspended when the API server answers."""
    created = await pipeline.submit(job)
    kind = KINDS[job["kind"]]
    assert kind.suspended(created), f"{job['kind']} {job['metadata']['name']} not suspended by Kueue's webhook"
    return created


async def get(pipeline: Pipeline, kind: str, name: str) -> dict[str, Any]:
    return await pipeline.client.get(KINDS[kind].rt, pipeline.namespace, name)


async def pods(pipeline: Pipeline, kind: str, name: str) -> list[dict[str, Any]]:
    items, _ = await pipeline.client.list(resources.PODS, pipeline.namespace, f"{KINDS[kind].pod_label}={name}")
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


async def until(pipeline: Pipeline, kind: str, name: str, condition: str, timeout: float = TIMEOUT,
                status: str = "True") -> dict[str, Any]:
    """The job once ``condition`` has ``status``; fails with the last status seen."""
    seen: dict[str, dict[str, Any]] = {}

    async def check() -> bool:
        seen["job"] = await get(pipeline, kind, name)
        return conditions(seen["job"]).get(condition, {}).get("status") == status
    try:
        await pipeline.eventually(check, timeout=timeout, what=f"{kind} {name} {condition}={status}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: status {(seen.get('job') or {}).get('status')}") from None
    return seen["job"]


async def workload_of(pipeline: Pipeline, kind: str, name: str) -> dict[str, Any]:
    """The job's Workload (Kueue's, controlled by the job)."""
    found: dict[str, dict[str, Any]] = {}

    async def check() -> bool:
        items, _ = await pipeline.client.list(WORKLOADS, pipeline.namespace)
        for item in items:
            owners = item["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == kind and o.get("name") == name and o.get("controller") for o in owners):
                found["workload"] = item
                return True
        return False
    await pipeline.eventually(check, timeout=30, what=f"the Workload of {kind} {name}")
    return found["workload"]


async def running_pods(pipeline: Pipeline, kind: str, name: str, count: int) -> list[dict[str, Any]]:
    """The job's pods once ``count`` of them exist (caught while they run)."""
    seen: dict[str, list[dict[str, Any]]] = {}

    async def check() -> bool:
        seen["pods"] = await pods(pipeline, kind, name)
        return len(seen["pods"]) >= count
    await pipeline.eventually(check, timeout=TIMEOUT, what=f"{count} pods of {kind} {name}")
    return seen["pods"]


def assert_placed_by_kueue(kind: str, made: list[dict[str, Any]]) -> None:
    """Every pod carries the flavour's node labels and toleration and its podSet's label, as Kueue
    wrote them into the job's templates when it admitted it."""
    for pod in made:
        name, spec = pod["metadata"]["name"], pod["spec"]
        assert NODE_LABELS.items() <= (spec.get("nodeSelector") or {}).items(), (kind, name, spec.get("nodeSelector"))
        assert TOLERATION in (spec.get("tolerations") or []), (kind, name, spec.get("tolerations"))
        assert pod["metadata"]["labels"].get(PODSET) in KINDS[kind].podsets, (kind, name, pod["metadata"]["labels"])


async def no_pods_while_suspended(pipeline: Pipeline, kind: str, name: str, seconds: float) -> None:
    """For ``seconds``, the job stays suspended and has no pod."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        assert KINDS[kind].suspended(await get(pipeline, kind, name)), f"{kind} {name} was unsuspended"
        assert not await pods(pipeline, kind, name), f"{kind} {name} has pods while Kueue has not admitted it"
        await asyncio.sleep(0.5)


async def events_of(pipeline: Pipeline, name: str) -> list[tuple[str, str, str]]:
    listed, _ = await pipeline.client.list(resources.EVENTS, pipeline.namespace)
    return [(e["type"], e["reason"], e["message"]) for e in listed if e["involvedObject"]["name"] == name]


# --- admission -------------------------------------------------------------------------------------


async def test_jobs_kueue_admits_run_with_the_flavour_kueue_wrote_into_their_templates(pipeline: Pipeline) -> None:
    await test_trainjobs.install(pipeline, test_trainjobs._builtin("torch-distributed"))
    async with queues(pipeline) as q:
        cq = await q.cluster_queue("main", await q.flavor(), {GPU: 16})
        await q.active(cq)
        lq = await q.local_queue("main", cq)
        made = {"PyTorchJob": (pytorchjob("pt", "6s"), 2), "TFJob": (tfjob("tf", "6s"), 2),
                "MPIJob": (mpijob("mpi", "6s"), 2), "TrainJob": (trainjob("train"), 2)}
        for job, _ in made.values():
            await submit(pipeline, queued(job, lq))
        for kind, (job, count) in made.items():
            name = job["metadata"]["name"]
            workload = await workload_of(pipeline, kind, name)
            assert tuple(p["name"] for p in workload["spec"]["podSets"]) == KINDS[kind].podsets, workload["spec"]
            assert_placed_by_kueue(kind, await running_pods(pipeline, kind, name, count))
        for kind, (job, _) in made.items():
            name = job["metadata"]["name"]
            done = await until(pipeline, kind, name, KINDS[kind].done)
            assert not KINDS[kind].suspended(done)
            await until_workload(pipeline, kind, name, "Finished")


async def until_workload(pipeline: Pipeline, kind: str, name: str, condition: str) -> None:
    async def check() -> bool:
        return is_true(await workload_of(pipeline, kind, name), condition)
    await pipeline.eventually(check, timeout=30, what=f"the Workload of {kind} {name} {condition}")


# --- queueing --------------------------------------------------------------------------------------


async def test_a_job_without_quota_waits_suspended_without_pods_until_the_first_finishes(pipeline: Pipeline) -> None:
    async with queues(pipeline) as q:
        cq = await q.cluster_queue("main", await q.flavor(), {GPU: 2})
        await q.active(cq)
        lq = await q.local_queue("main", cq)
        await submit(pipeline, queued(pytorchjob("first", duration="5s"), lq))
        await running_pods(pipeline, "PyTorchJob", "first", 2)
        await submit(pipeline, queued(pytorchjob("second", duration="2s"), lq))
        await no_pods_while_suspended(pipeline, "PyTorchJob", "second", 2.0)
        waiting = conditions(await workload_of(pipeline, "PyTorchJob", "second")).get("QuotaReserved", {})
        assert (waiting.get("status"), waiting.get("reason")) == ("False", "Pending"), waiting

        async def told() -> bool:
            return any(reason == "Pending" for _, reason, _ in await events_of(pipeline, "second"))
        await pipeline.eventually(told, timeout=30, what="Kueue's Pending reason as an Event on the waiting job")
        first = await until(pipeline, "PyTorchJob", "first", "Succeeded")
        second = await until(pipeline, "PyTorchJob", "second", "Succeeded")
        assert second["status"]["startTime"] >= first["status"]["completionTime"], "it ran once the first was done"


# --- preemption ------------------------------------------------------------------------------------


PREEMPTED = [
    pytest.param("PyTorchJob", pytorchjob, "PyTorchJobSuspended", "PyTorchJobResumed", id="pytorchjob"),
    pytest.param("MPIJob", mpijob, "MPIJobSuspended", "MPIJobResumed", id="mpijob-v2beta1"),
]


async def preempting(q: Queues) -> tuple[str, str, str]:
    """A ClusterQueue of 2 GPUs that preempts its lower priorities, ready: its LocalQueue and the
    WorkloadPriorityClasses low (100) and high (1000)."""
    cq = await q.cluster_queue("main", await q.flavor(), {GPU: 2}, preemption={"withinClusterQueue": "LowerPriority"})
    await q.active(cq)
    return await q.local_queue("main", cq), await q.priority("low", 100), await q.priority("high", 1000)


@pytest.mark.parametrize("kind, make, suspended_reason, resumed_reason", PREEMPTED)
async def test_a_preempted_job_loses_its_pods_keeps_itself_and_runs_again_when_readmitted(
    pipeline: Pipeline, kind: str, make: Any, suspended_reason: str, resumed_reason: str,
) -> None:
    async with queues(pipeline) as q:
        lq, low, high = await preempting(q)
        await submit(pipeline, queued(make("low", duration="8s"), lq, low))
        started = await until(pipeline, kind, "low", "Running")
        await submit(pipeline, queued(make("high", duration="2s"), lq, high))

        preempted = await until(pipeline, kind, "low", "Suspended")
        assert KINDS[kind].suspended(preempted), "Kueue suspended it"
        found = conditions(preempted)
        assert (found["Suspended"]["reason"], found["Running"]["status"], found["Running"]["reason"]) == (
            suspended_reason, "False", suspended_reason)
        # Kueue gives the quota back once the job is not active (replicaStatuses[*].active all 0):
        # training-operator says so at once, mpi-operator once the pods are gone.

        async def inactive() -> bool:
            status = (await get(pipeline, kind, "low")).get("status") or {}
            return all(not r.get("active") for r in (status.get("replicaStatuses") or {}).values())
        await pipeline.eventually(inactive, timeout=30, what=f"no replica of the preempted {kind} active")
        evicted = conditions(await workload_of(pipeline, kind, "low")).get("Evicted", {})
        assert evicted.get("reason") == "Preempted", evicted

        await until(pipeline, kind, "high", "Succeeded")
        resumed = await until(pipeline, kind, "low", "Suspended", status="False")
        assert conditions(resumed)["Suspended"]["reason"] == resumed_reason
        assert resumed["status"]["startTime"] > started["status"]["startTime"], "startTime is reset on resume"
        await until(pipeline, kind, "low", "Succeeded")


async def test_a_preempted_trainjob_suspends_its_jobset_and_completes_once_readmitted(pipeline: Pipeline) -> None:
    await test_trainjobs.install(pipeline, test_trainjobs._builtin("torch-distributed"))
    async with queues(pipeline) as q:
        lq, low, high = await preempting(q)
        await submit(pipeline, queued(trainjob("low", duration="8s"), lq, low))
        await running_pods(pipeline, "TrainJob", "low", 2)
        await submit(pipeline, queued(pytorchjob("high", duration="2s"), lq, high))

        preempted = await until(pipeline, "TrainJob", "low", "Suspended")
        assert conditions(preempted)["Suspended"]["reason"] == "Suspended"
        jobset = await pipeline.client.get(resources.JOBSETS, pipeline.namespace, "low")
        assert jobset["spec"]["suspend"] is True, "the TrainJob's JobSet is suspended with it"
        # Kueue's TrainJob Stop waits until no Job is active (jobsStatus) before it puts the templates back.

        async def inactive() -> bool:
            status = (await get(pipeline, "TrainJob", "low")).get("status") or {}
            return all(not j.get("active") for j in status.get("jobsStatus") or [])
        await pipeline.eventually(inactive, timeout=30, what="no Job of the preempted TrainJob active")
        evicted = conditions(await workload_of(pipeline, "TrainJob", "low")).get("Evicted", {})
        assert evicted.get("reason") == "Preempted", evicted

        await until(pipeline, "PyTorchJob", "high", "Succeeded")
        resumed = await until(pipeline, "TrainJob", "low", "Suspended", status="False")
        assert conditions(resumed)["Suspended"]["reason"] == "Resumed"
        await until(pipeline, "TrainJob", "low", "Complete")
        assert_placed_by_kueue("TrainJob", await pods(pipeline, "TrainJob", "low"))


admission = test_admission.admission
"""kto's admission webhook, registered for the test's namespace as ``kto up`` registers it."""


async def test_kueues_patches_pass_ktos_own_admission_webhook(pipeline: Pipeline,
                                                            admission: test_admission.Admission) -> None:
    """Beside Kueue's webhook, kto's (as ``kto up`` and deploy/ run it) defaults the job at creation and
    admits Kueue's two updates: its flavour written into the templates with ``suspend: false``, and
    the templates put back with ``suspend: true`` when it preempts."""
    async with queues(pipeline) as q:
        lq, low, high = await preempting(q)
        created = await submit(pipeline, queued(pytorchjob("low", duration="6s"), lq, low))
        assert created["spec"]["runPolicy"].get("cleanPodPolicy"), "kto's webhook defaulted it"
        assert_placed_by_kueue("PyTorchJob", await running_pods(pipeline, "PyTorchJob", "low", 2))
        await submit(pipeline, queued(pytorchjob("high", duration="2s"), lq, high))
        await until(pipeline, "PyTorchJob", "low", "Suspended")
        await until(pipeline, "PyTorchJob", "high", "Succeeded")
        await until(pipeline, "PyTorchJob", "low", "Succeeded")


# --- fair sharing in a cohort ----------------------------------------------------------------------


async def test_two_teams_share_gpus_in_a_cohort_borrowing_then_reclaiming(pipeline: Pipeline) -> None:
    async with queues(pipeline) as q:
        flavor = await q.flavor()
        reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
        team_a = await q.cluster_queue("team-a", flavor, {GPU: 2}, cohort="gpus", preemption=reclaim)
        team_b = await q.cluster_queue("team-b", flavor, {GPU: 2}, cohort="gpus", preemption=reclaim)
        for cq in (team_a, team_b):
            await q.active(cq)
        lq_a, lq_b = await q.local_queue("team-a", team_a), await q.local_queue("team-b", team_b)

        # Team B is idle: team A borrows its 2 GPUs and runs two jobs.
        await submit(pipeline, queued(pytorchjob("a-1", duration="60s"), lq_a))
        await running_pods(pipeline, "PyTorchJob", "a-1", 2)
        await submit(pipeline, queued(pytorchjob("a-2", duration="60s"), lq_a))
        await running_pods(pipeline, "PyTorchJob", "a-2", 2)
        # Team B wants its quota back: Kueue reclaims it from the borrower, and team B's job runs.
        await submit(pipeline, queued(pytorchjob("b-1", duration="3s"), lq_b))
        await running_pods(pipeline, "PyTorchJob", "b-1", 2)
        held = {name: KINDS["PyTorchJob"].suspended(await get(pipeline, "PyTorchJob", name)) for name in ("a-1", "a-2")}
        assert sorted(held.values()) == [False, True], f"one of team A's jobs gives the borrowed GPUs back: {held}"
        reclaimed = next(name for name, suspended in held.items() if suspended)
        evicted = conditions(await workload_of(pipeline, "PyTorchJob", reclaimed)).get("Evicted", {})
        assert evicted.get("reason") == "Preempted", evicted

        async def gone() -> bool:
            return not await pods(pipeline, "PyTorchJob", reclaimed)
        await pipeline.eventually(gone, timeout=30, what=f"the pods of {reclaimed} deleted")
        await until(pipeline, "PyTorchJob", "b-1", "Succeeded")


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [pytest.param("PyTorchJob", id="pytorchjob"), pytest.param("TrainJob", id="trainjob")])
async def test_a_job_naming_no_existing_local_queue_says_kueues_reason_and_never_runs(
    pipeline: Pipeline, kind: str,
) -> None:
    if kind == "TrainJob":
        await test_trainjobs.install(pipeline, test_trainjobs._builtin("torch-distributed"))
    await submit(pipeline, queued(pytorchjob("lost") if kind == "PyTorchJob" else trainjob("lost"), "missing"))
    message = "LocalQueue missing doesn't exist"
    await pipeline.eventually(lambda: _said(pipeline, "lost", ("Warning", "Inadmissible", message)), timeout=30,
                              what=f"the Event {message!r} on the job")
    await no_pods_while_suspended(pipeline, kind, "lost", 2.0)


async def test_a_queue_without_a_gpu_flavour_says_kueues_reason_and_no_pod_is_made_across_a_restart(
    pipeline: Pipeline,
) -> None:
    async with queues(pipeline) as q:
        cq = await q.cluster_queue("cpu-only", await q.flavor("cpu"), {"cpu": 8})
        await q.active(cq)
        lq = await q.local_queue("cpu-only", cq)
        await submit(pipeline, queued(pytorchjob("no-gpus"), lq))
        workload = await workload_of(pipeline, "PyTorchJob", "no-gpus")

        async def pending() -> bool:
            nonlocal workload
            workload = await workload_of(pipeline, "PyTorchJob", "no-gpus")
            return bool(conditions(workload).get("QuotaReserved", {}).get("message"))
        await pipeline.eventually(pending, timeout=30, what="Kueue's reason on the Workload")
        reason = conditions(workload)["QuotaReserved"]
        assert GPU in reason["message"], reason
        await pipeline.eventually(
            lambda: _said(pipeline, "no-gpus", ("Warning", reason["reason"], reason["message"])), timeout=30,
            what="Kueue's reason as an Event on the job")
        await pipeline.stop("reconciler")
        pipeline.start_reconciler("reconciler-again")
        await no_pods_while_suspended(pipeline, "PyTorchJob", "no-gpus", 3.0)


async def _said(pipeline: Pipeline, name: str, event: tuple[str, str, str]) -> bool:
    return event in await events_of(pipeline, name)
