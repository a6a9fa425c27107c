"""kto's JobSets against the real JobSet controller v0.12.0 (issue 22): the same JobSets (a table:
plain, dependsOn, suspend then resume, a failing Job under ``failurePolicy.maxRestarts``,
``successPolicy`` Any) run on the real tier, first all under the real controller, each in a
namespace of its own (started for them and stopped before kto's runs: it has no namespace option
and would serve kto's too), then each under kto's pipeline in the test's namespace, and what each
made is compared, normalised (uids, times, resource versions and kube-apiserver's allocations out;
a Job's ``job-key``, the SHA-1 of its namespace and name, checked and named): the Jobs (names,
labels, annotations, owner, spec with the pod template the controller fills in), the headless
Service and the JobSet's status (conditions with reasons and messages, replicatedJobsStatus,
restarts, terminalState). Not the JobSet as stored: upstream's mutating webhook writes its
defaults into it, and the pipeline runs no admission webhook.
Differences kto makes on purpose are in :data:`DELIBERATE` (and docs/trainer-v2.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
import time
from typing import Any

import pytest
import yaml

from realparts import jobset
from shared.kube import clients, resources
from tests.fixtures import jobset as jobset_fixtures
from tests.fixtures import tiers
from tests.fixtures.pipeline import Pipeline

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSETS = resources.ResourceType("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
TIMEOUT = 120.0
"""Seconds a JobSet may take to end (pods run 1 s on the real tier's nodes)."""


def _job(name: str, replicas: int = 1, parallelism: int = 1, annotations: dict[str, str] | None = None,
         **fields: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"spec": {"restartPolicy": "Never", "containers": [{"name": name, "image": "busybox"}]}}
    if annotations:
        pod["metadata"] = {"annotations": annotations}
    return {"name": name, "replicas": replicas, **fields, "template": {"spec": {
        "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0, "template": pod}}}


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    spec: dict[str, Any]
    """The JobSet's spec."""
    ends: str
    """The condition it ends with: ``Completed`` or ``Failed``."""
    resume: bool = False
    """Made suspended, resumed once its Suspended condition is True."""


CASES = [
    Case("plain", {"replicatedJobs": [_job("leader"), _job("workers", replicas=2, parallelism=2)]}, "Completed"),
    Case("depends-on", {"replicatedJobs": [
        _job("initializer"),
        _job("trainer", replicas=2, parallelism=2, dependsOn=[{"name": "initializer", "status": "Complete"}])]},
        "Completed"),
    Case("suspend-resume", {"suspend": True, "replicatedJobs": [_job("workers", replicas=2)]}, "Completed",
         resume=True),
    # One Job where the end deletes the others: which of two ends first is a race, on either side.
    Case("max-restarts", {"failurePolicy": {"maxRestarts": 1}, "replicatedJobs": [
        _job("workers", annotations={"sim.kto.dev/exit-code": "1"})]}, "Failed"),
    Case("success-any", {"successPolicy": {"operator": "Any", "targetReplicatedJobs": ["workers"]}, "replicatedJobs": [
        _job("driver", annotations={"sim.kto.dev/duration": "600s"}), _job("workers")]}, "Completed"),
]

DROPPED = {"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "lastTransitionTime",
           "lastUpdateTime", "startTime", "completionTime", "clusterIP", "clusterIPs", "observedGeneration"}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def normalised(value: Any, named: dict[str, str]) -> Any:
    """``value`` without :data:`DROPPED` keys, every uid in a string replaced by ``<uid>`` and every
    string that is a key of ``named`` by what it names."""
    if isinstance(value, dict):
        return {k: normalised(v, named) for k, v in value.items() if k not in DROPPED}
    if isinstance(value, list):
        return [normalised(v, named) for v in value]
    if isinstance(value, str):
        return named.get(value, UUID.sub("<uid>", value))
    return value


def _owned(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
            "owners": [{k: o.get(k) for k in ("apiVersion", "kind", "name", "controller", "blockOwnerDeletion")}
                       for o in meta.get("ownerReferences") or []]}


def snapshot(jobset: dict[str, Any], jobs: list[dict[str, Any]], services: list[dict[str, Any]]) -> dict[str, Any]:
    """What is compared of one run; a Job's ``job-key`` (the SHA-1 of ``<namespace>/<job name>``)
    checked and written as ``sha1(<namespace>/<job name>)``, the namespaces of two runs differing."""
    status = jobset.get("status") or {}
    namespace = jobset["metadata"]["namespace"]
    keys = {hashlib.sha1(f"{namespace}/{j['metadata']['name']}".encode()).hexdigest():
            f"sha1(<namespace>/{j['metadata']['name']})" for j in jobs}
    made: dict[str, Any] = normalised({
        "conditions": sorted(({k: c.get(k) for k in ("type", "status", "reason", "message")}
                              for c in status.get("conditions") or []), key=lambda c: c["type"]),
        "replicatedJobsStatus": sorted(status.get("replicatedJobsStatus") or [], key=lambda r: r["name"]),
        "restarts": status.get("restarts", 0), "restartsCountTowardsMax": status.get("restartsCountTowardsMax", 0),
        "terminalState": status.get("terminalState"),
        # Not a Job being deleted: upstream deletes in the foreground, kto with the default propagation.
        "jobs": {j["metadata"]["name"]: {**_owned(j), "spec": j["spec"]} for j in jobs
                 if not j["metadata"].get("deletionTimestamp")},
        "services": {s["metadata"]["name"]: {**_owned(s), "spec": s["spec"]} for s in services},
    }, keys)
    return made


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


async def _until(client: clients.KubeClient, namespace: str, name: str, condition: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        jobset = await client.get(JOBSETS, namespace, name)
        if _condition(jobset, condition):
            return jobset
        if time.monotonic() > deadline:
            raise AssertionError(f"JobSet {namespace}/{name} not {condition} after {TIMEOUT:g}s: "
                                 + yaml.safe_dump(jobset.get("status")))
        await asyncio.sleep(0.2)


async def run(client: clients.KubeClient, namespace: str, case: Case, name: str = "js") -> dict[str, Any]:
    """Make the case's JobSet in ``namespace`` (there, with its default ServiceAccount), resume it if
    the case says so, wait for its end, settle, and take its :func:`snapshot`."""
    await client.create(JOBSETS, namespace, {"apiVersion": JOBSETS.api_version, "kind": "JobSet",
                                             "metadata": {"name": name}, "spec": case.spec})
    if case.resume:
        await _until(client, namespace, name, "Suspended")
        await client.patch(JOBSETS, namespace, name, {"spec": {"suspend": False}}, patch_type="merge")
    await _until(client, namespace, name, case.ends)
    await asyncio.sleep(2.0)  # what a controller does after the end (deleting Jobs, a last status write)
    jobset = await client.get(JOBSETS, namespace, name)
    selector = f"{JOBSET_NAME_LABEL}={name}"
    jobs, _ = await client.list(resources.BATCH_JOBS, namespace, label_selector=selector)
    services, _ = await client.list(resources.SERVICES, namespace)
    return snapshot(jobset, jobs, [s for s in services if s["metadata"]["name"] != "kubernetes"])


def differences(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """Where two snapshots differ, one line per leaf: ``path: kto <value> / upstream <value>``."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [line for key in sorted(set(ours) | set(theirs), key=str)
                for line in differences(ours.get(key, "<absent>"), theirs.get(key, "<absent>"), f"{path}/{key}")]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [line for i, (a, b) in enumerate(zip(ours, theirs)) for line in differences(a, b, f"{path}/{i}")]
    return [] if ours == theirs else [f"{path}: kto {ours!r} / upstream {theirs!r}"]


DELIBERATE: dict[str, str] = {}
"""Path in the snapshot (``/jobs/js-workers-0/labels/...``) → why kto differs there on purpose; left
out of the comparison. None so far: on every case, everything compared is the same."""


@pytest.fixture(scope="module")
def upstream_runs(real_cluster: tiers.RealCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's snapshot under the real JobSet controller, all run at once."""

    async def run_all() -> list[dict[str, Any]]:
        directory = tmp_path_factory.mktemp("jobset-upstream")
        async with jobset.JobSetController(real_cluster.kubeconfig, tiers.CONTEXT, directory):
            async with await clients.KubeClient.connect(real_cluster.kubeconfig, tiers.CONTEXT) as client:
                return await asyncio.gather(*(_run_alone(client, case) for case in CASES))

    try:
        runs = asyncio.run(run_all())
    finally:
        asyncio.run(jobset_fixtures.restore_kto_crd(real_cluster))
    return {case.id: run for case, run in zip(CASES, runs)}


async def _run_alone(client: clients.KubeClient, case: Case) -> dict[str, Any]:
    namespace = f"upstream-{case.id}"
    await client.create(resources.NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": namespace}})
    for _ in range(300):  # kube-apiserver admits no pod before the namespace's default ServiceAccount
        try:
            await client.get(resources.SERVICEACCOUNTS, namespace, "default")
            break
        except clients.ApiError as exc:
            if not exc.not_found:
                raise
            await asyncio.sleep(0.05)
    try:
        return await run(client, namespace, case)
    finally:
        await client.delete(resources.NAMESPACES, None, namespace)


@pytest.mark.parametrize("tier", ["kube"], indirect=True)
@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
async def test_kto_makes_what_the_real_jobset_controller_makes(
    upstream_runs: dict[str, Any], pipeline: Pipeline, case: Case,
) -> None:
    theirs = upstream_runs[case.id]
    assert theirs["jobs"] and list(theirs["services"]) == ["js"], theirs  # a comparison of something
    ours = await run(pipeline.client, pipeline.namespace, case)
    differing = [line for line in differences(ours, theirs) if line.split(":", 1)[0] not in DELIBERATE]
    assert not differing, "kto's JobSet differs from the real controller's:\n" + "\n".join(differing)
