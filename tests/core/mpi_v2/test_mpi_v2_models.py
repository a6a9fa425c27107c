"""MPIJob v2beta1 models: lossless load, field-path load errors, kto's depth limit (A.1–A.3)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import limits, mpijobs

DOCUMENT: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "metadata": {"name": "pi", "namespace": "default", "labels": {"team": "a"}},
    "spec": {
        "slotsPerWorker": 2,
        "runLauncherAsWorker": True,
        "sshAuthMountPath": "/home/mpiuser/.ssh",
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiImplementation": "Intel",
        "runPolicy": {
            "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 600,
            "backoffLimit": 3, "suspend": False, "managedBy": "kubeflow.org/mpi-operator",
            "schedulingPolicy": {"minAvailable": 2, "queue": "q", "minResources": {"cpu": "2"},
                                 "priorityClass": "high", "scheduleTimeoutSeconds": 30},
        },
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": {
                "metadata": {"annotations": {"a": "b"}},
                "spec": {"containers": [{"name": "l", "image": "i", "futureField": {"x": [1, 2]}}]}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}}},
        },
    },
    "status": {
        "conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "m",
                        "lastUpdateTime": "2024-01-02T03:04:05Z", "lastTransitionTime": "2024-01-02T03:04:05Z"}],
        "replicaStatuses": {"Launcher": {}, "Worker": {"active": 2}},
        "startTime": "2024-01-02T03:04:05Z",
    },
}


def test_a_job_loads_and_dumps_back_unchanged() -> None:
    job = mpijobs.load(DOCUMENT)
    assert job.dump() == DOCUMENT
    assert job.spec.mpi_implementation == "Intel" and job.launcher_as_worker and job.worker_replicas == 2


def test_values_validation_refuses_still_load_so_it_can_name_them() -> None:
    document = {**DOCUMENT, "spec": {**DOCUMENT["spec"], "mpiImplementation": "Unknown",
                                     "runPolicy": {"cleanPodPolicy": "unknown"}}}
    job = mpijobs.load(document)
    assert (job.spec.mpi_implementation, job.run_policy.clean_pod_policy) == ("Unknown", "unknown")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param([], [("", "expected a mapping (a Kubernetes object), got list")], id="not-a-mapping"),
        pytest.param({"kind": "MPIJob", "spec": {}}, [("apiVersion", "Required value")], id="no-api-version"),
        pytest.param({"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "spec": {}},
                     [("apiVersion", "Unsupported value: 'kubeflow.org/v1': supported values: 'kubeflow.org/v2beta1'")],
                     id="v1-is-another-model"),
        pytest.param({"apiVersion": "kubeflow.org/v2beta1", "kind": "TFJob", "spec": {}},
                     [("kind", "Unsupported value: 'TFJob': supported values: 'MPIJob'")], id="other-kind"),
        pytest.param({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob"}, [("spec", "Required value")],
                     id="no-spec"),
    ],
)
def test_a_document_that_is_no_mpijob_is_refused_with_the_field_named(document: Any, expected: list[tuple[str, str]]) -> None:
    with pytest.raises(mpijobs.LoadError) as caught:
        mpijobs.load(document)
    assert caught.value.errors == expected


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        pytest.param({"slotsPerWorker": "many"}, "spec.slotsPerWorker", id="slots"),
        pytest.param({"mpiReplicaSpecs": {"Worker": {"replicas": "two"}}}, "spec.mpiReplicaSpecs[Worker].replicas",
                     id="replicas"),
        pytest.param({"runPolicy": {"suspend": "maybe"}}, "spec.runPolicy.suspend", id="suspend"),
        pytest.param({"runPolicy": {"schedulingPolicy": {"minAvailable": []}}},
                     "spec.runPolicy.schedulingPolicy.minAvailable", id="scheduling"),
    ],
)
def test_a_wrongly_typed_field_is_named_by_its_path(spec: dict[str, Any], path: str) -> None:
    with pytest.raises(mpijobs.LoadError) as caught:
        mpijobs.load({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "spec": spec})
    assert [p for p, _ in caught.value.errors] == [path]


def test_a_job_nested_past_kto_s_limit_is_refused_before_pydantic_sees_it() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(10_000):
        node["x"] = {}
        node = node["x"]
    document = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                "spec": {"mpiReplicaSpecs": {"Launcher": {"template": deep}}}}
    with pytest.raises(mpijobs.LoadError) as caught:
        mpijobs.load(document)
    [(path, message)] = caught.value.errors
    assert path.startswith("spec.mpiReplicaSpecs[Launcher].template.x") and path.endswith("…")
    assert f"kto's limit is {limits.MAX_OBJECT_DEPTH} levels" in message
