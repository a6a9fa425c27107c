"""Projections (shared/api/projections.py): a pod keeps what kto reads and loses the rest, every
other kind stays whole, and every family decides the same on full objects and on their
projections, over a corpus of the examples' jobs and realistic children in many states."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from shared import keygen
from shared.api import projections
from shared.core import effects, events, families, settings
from shared.core.elastic import settings as elastic_settings
from tests.api import kueue_objects

NOW = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def full_pod() -> dict[str, Any]:
    """A pod as a real API server returns it, with much no decision reads."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "pt-worker-0", "namespace": "ns", "uid": "p-1", "resourceVersion": "42", "generation": 1,
            "creationTimestamp": "2024-01-02T03:00:00Z", "labels": {"training.kubeflow.org/job-name": "pt"},
            "annotations": {"kto.dev/traceparent": "00-1-2-01"}, "finalizers": ["x"],
            "ownerReferences": [{"uid": "job-1", "controller": True, "kind": "PyTorchJob", "name": "pt"}],
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {
            "nodeName": "node-1", "restartPolicy": "OnFailure", "schedulerName": "default-scheduler",
            "containers": [{"name": "pytorch", "image": "img", "env": [{"name": "A", "value": "b"}],
                            "resources": {"limits": {"cpu": "1"}}, "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
            "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
            "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"key": "k", "operator": "Exists"}],
            "serviceAccountName": "default", "dnsPolicy": "ClusterFirst",
        },
        "status": {
            "phase": "Running", "reason": "R", "message": "M", "startTime": "2024-01-02T03:00:01Z",
            "podIP": "10.0.0.1", "hostIP": "10.1.0.1", "podIPs": [{"ip": "10.0.0.1"}], "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": "2024-01-02T03:00:02Z"}],
            "containerStatuses": [{"name": "pytorch", "ready": True, "started": True, "restartCount": 2,
                                   "image": "img", "imageID": "sha", "containerID": "c://1",
                                   "state": {"running": {"startedAt": "2024-01-02T03:00:02Z"}},
                                   "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        },
    }


def test_a_pod_keeps_what_kto_reads_and_loses_the_rest() -> None:
    projected = projections.project(full_pod())
    assert projected["metadata"] == {k: v for k, v in full_pod()["metadata"].items()
                                     if k not in ("managedFields", "generation")}
    assert projected["spec"] == {"nodeName": "node-1", "containers": [{"name": "pytorch"}]}
    assert projected["status"] == {
        "phase": "Running", "reason": "R", "message": "M", "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "pytorch", "restartCount": 2,
                               "state": {"running": {"startedAt": "2024-01-02T03:00:02Z"}}}]}


def test_projecting_is_idempotent_and_leaves_the_object_given_alone() -> None:
    pod = full_pod()
    once = projections.project(pod)
    assert projections.project(once) == once
    assert pod == full_pod()


def test_a_kueue_workload_keeps_its_queue_admission_and_conditions_and_loses_its_pod_templates() -> None:
    full = kueue_objects.manager_run()[2]
    projected = projections.project(full)
    assert projections.project(projected) == projected
    assert projected["metadata"] == {k: v for k, v in full["metadata"].items()
                                     if k not in ("managedFields", "generation")}
    assert projected["spec"] == {"active": True, "priority": 0, "queueName": "user-queue",
                                 "podSets": [{"count": 1, "name": "master"}, {"count": 2, "name": "worker"}]}
    assert projected["status"]["admission"] == {"clusterQueue": "cluster-queue", "podSetAssignments": [
        {"count": 1, "flavors": {"cpu": "default-flavor"}, "name": "master"},
        {"count": 2, "flavors": {"cpu": "default-flavor"}, "name": "worker"}]}
    assert projected["status"]["clusterName"] == "worker1"
    assert projected["status"]["admissionChecks"] == full["status"]["admissionChecks"]
    assert [c["type"] for c in projected["status"]["conditions"]] == ["QuotaReserved", "Admitted"]
    assert "observedGeneration" not in projected["status"]["conditions"][0]
    assert "resourceRequests" not in projected["status"]
    assert "do-not-publish" not in repr(projected), "a pod set's template (its env) is never kept"


@pytest.mark.parametrize("obj", [
    pytest.param({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                  "spec": {"clusterIP": "None", "ports": [{"port": 23456}]}, "status": {}}, id="service"),
    pytest.param({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
                  "spec": {"pytorchReplicaSpecs": {}}, "status": {"conditions": []}}, id="job"),
    pytest.param({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "l"}, "spec": {"suspend": True}},
                 id="launcher-job"),
    pytest.param({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}, id="unknown-kind"),
])
def test_every_other_kind_is_kept_whole(obj: dict[str, Any]) -> None:
    assert projections.project(obj) is obj
    assert not projections.projects(obj["kind"])


def test_the_kind_of_a_list_item_without_one_is_given() -> None:
    pod = full_pod()
    del pod["kind"]
    assert projections.project(pod, "Pod")["spec"] == {"nodeName": "node-1", "containers": [{"name": "pytorch"}]}


# --- the same decisions on projections ------------------------------------------------------


def _jobs() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        for index, doc in enumerate(documents):
            if isinstance(doc, dict) and families.REGISTRY.is_job(str(doc.get("apiVersion")), str(doc.get("kind"))):
                yield f"{path.relative_to(EXAMPLES)}#{index}", doc


JOBS = list(_jobs())

_KEYS = {kind: maker() for kind, maker in keygen.MAKERS.items()}
CONTEXT = effects.Context(NOW, (settings.OperatorSettings(), elastic_settings.ElasticSettings()),
                          {kind: (lambda made=made: made) for kind, made in _KEYS.items()})


def _made(manifest: dict[str, Any], index: int, job_uid: str) -> dict[str, Any]:
    """A child as the API server returns it once made: identity, versions, defaults and fields no decision reads."""
    obj = copy.deepcopy(manifest)
    meta = obj.setdefault("metadata", {})
    meta.update(uid=f"c-{index}", resourceVersion=str(100 + index), creationTimestamp="2024-01-02T03:00:00Z",
                managedFields=[{"manager": "kube-controller-manager", "operation": "Update"}])
    meta.setdefault("namespace", "ns")
    meta.setdefault("ownerReferences", [{"uid": job_uid, "controller": True}])
    if obj.get("kind") == "Pod":
        spec = obj.setdefault("spec", {})
        spec.update(nodeName=f"node-{index}", dnsPolicy="ClusterFirst", serviceAccountName="default",
                    tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
                    volumes=[*spec.get("volumes", []), {"name": "kube-api-access", "projected": {"sources": []}}])
        for container in spec.get("containers") or []:
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("volumeMounts", []).append({"name": "kube-api-access", "mountPath": "/var/run"})
    return obj


def _container(name: str, **state: Any) -> dict[str, Any]:
    return {"name": name, "image": "img", "imageID": "sha", "containerID": "c://x", "ready": "running" in state,
            "started": "running" in state, "restartCount": state.pop("restarts", 0), "state": state,
            "lastState": {}}


def _status(pod: dict[str, Any], scenario: str, index: int) -> dict[str, Any]:
    """The pod's status in ``scenario`` (the first pod is the one that fails, restarts or ends first)."""
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []] or [""]
    running = {"phase": "Running", "startTime": "2024-01-02T03:00:01Z", "podIP": f"10.0.0.{index}",
               "hostIP": "10.1.0.1", "podIPs": [{"ip": f"10.0.0.{index}"}], "qosClass": "BestEffort",
               "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": "2024-01-02T03:00:02Z"}
                              for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
               "containerStatuses": [_container(n, running={"startedAt": "2024-01-02T03:00:02Z"}) for n in names]}
    first = index == 0
    if scenario == "pending":
        return {"phase": "Pending", "qosClass": "BestEffort",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": None}]}
    if scenario == "waiting" and first:
        return {**running, "phase": "Pending", "containerStatuses": [_container(
            n, waiting={"reason": "ImagePullBackOff", "message": "Back-off pulling image"}) for n in names]}
    if scenario in ("failed-137", "failed-1") and first:
        code = 137 if scenario == "failed-137" else 1
        return {**running, "phase": "Failed", "containerStatuses": [_container(
            n, terminated={"exitCode": code, "reason": "Error", "message": "boom"}) for n in names]}
    if scenario == "restarted" and first:
        return {**running, "containerStatuses": [
            {**_container(n, running={"startedAt": "x"}, restarts=3),
             "lastState": {"terminated": {"exitCode": 1}}} for n in names]}
    if scenario == "evicted" and first:
        return {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource"}
    if scenario == "succeeded" or (scenario == "first-succeeded" and first):
        return {**running, "phase": "Succeeded", "containerStatuses": [_container(
            n, terminated={"exitCode": 0, "reason": "Completed"}) for n in names]}
    return running


SCENARIOS = ("none", "pending", "running", "waiting", "failed-137", "failed-1", "restarted", "evicted",
             "first-succeeded", "succeeded", "deleting")


def _world(job: dict[str, Any], scenario: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The job as stored and its children in ``scenario``, made from what the family creates."""
    job = copy.deepcopy(job)
    meta = job.setdefault("metadata", {})
    meta.update(uid="job-1", resourceVersion="7", creationTimestamp="2024-01-02T02:59:00Z")
    meta.setdefault("namespace", "ns")
    family = families.REGISTRY.resolve(str(job["kind"]), job)
    assert family is not None
    if scenario == "none":
        return job, []
    children: list[dict[str, Any]] = []
    for _ in range(3):  # some families make their children in steps (a launcher after its workers)
        made = family.decide(job, children, CONTEXT).creates
        if not made:
            break
        children += [_made(m, len(children) + i, "job-1") for i, m in enumerate(made)]
    pods = [c for c in children if c.get("kind") == "Pod"]
    for index, pod in enumerate(pods):
        pod["status"] = _status(pod, scenario, index)
        if scenario == "deleting" and index == 0:
            pod["metadata"]["deletionTimestamp"] = "2024-01-02T03:04:00Z"
    return job, children


def _comparable(decided: effects.Effects) -> Any:
    status = decided.status.dump() if decided.status is not None else None
    writes = [(w, w.status_value()) for w in decided.child_writes]
    return dataclasses.replace(decided, status=None, child_writes=[]), status, writes


CASES = [pytest.param(job, scenario, id=f"{name}-{scenario}") for name, job in JOBS for scenario in SCENARIOS]


def test_the_corpus_has_every_family() -> None:
    served = {type(families.REGISTRY.resolve(str(j["kind"]), j)) for _, j in JOBS}
    # A TrainJob reads no pod (its JobSet's status says all), and every other kind is kept whole.
    assert len(served) == len(families.REGISTRY.families) - 1
    assert len(JOBS) >= 10


@pytest.mark.parametrize(("job", "scenario"), CASES)
def test_every_family_decides_the_same_on_projections(job: dict[str, Any], scenario: str) -> None:
    document, children = _world(job, scenario)
    projected = [projections.project(c) for c in children]
    assert any("volumes" in c.get("spec", {}) for c in children) == (scenario != "none" and any(
        c.get("kind") == "Pod" for c in children))
    family = families.REGISTRY.resolve(str(document["kind"]), document)
    assert family is not None
    on_full = family.decide(document, children, CONTEXT)
    on_projected = family.decide(document, projected, CONTEXT)
    assert _comparable(on_projected) == _comparable(on_full)
    full_status = families.REGISTRY.status_of(document, children, NOW, unconfirmed=False)
    projected_status = families.REGISTRY.status_of(document, projected, NOW, unconfirmed=False)
    dump = (lambda computed: None if computed is None else computed[1].status.dump())
    assert dump(projected_status) == dump(full_status)
    pods = [c for c in children if c.get("kind") == "Pod"]
    assert events.pod_events([projections.project(p) for p in pods], "pytorch") == events.pod_events(pods, "pytorch")


def test_a_packed_object_unpacks_equal_and_as_a_new_copy_each_time() -> None:
    pod = projections.project(full_pod())
    packed = projections.pack(pod)
    assert isinstance(packed, bytes) and len(packed) < len(repr(pod))
    first = projections.unpack(packed)
    assert first == pod
    first["metadata"]["name"] = "changed"
    assert projections.unpack(packed) == pod


def test_an_object_of_other_than_built_in_types_is_kept_as_it_is() -> None:
    odd = {"metadata": {"name": "n"}, "at": dt.datetime(2024, 1, 1)}
    assert projections.unpack(projections.pack(odd)) is odd
