"""A watched object is keyed by the job it is, or belongs to (pure table)."""

from __future__ import annotations

from typing import Any

import pytest

from services.watcher import mapping


def _obj(kind: str, name: str, api_version: str = "v1", labels: dict[str, str] | None = None,
         owners: list[dict[str, Any]] | None = None, namespace: str = "ns1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def _owner(kind: str, name: str, api_version: str = "kubeflow.org/v1", controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u1", "controller": controller}


TRAINER = "trainer.kubeflow.org/v1alpha1"

JOB_LABELS = {"training.kubeflow.org/job-name": "from-label",
              "training.kubeflow.org/operator-name": "tfjob-controller"}


@pytest.mark.parametrize(("obj", "expected"), [
    pytest.param(_obj("PyTorchJob", "mnist", "kubeflow.org/v1"), "c1/ns1/PyTorchJob/mnist", id="a job is its own key"),
    pytest.param(_obj("JAXJob", "j", "kubeflow.org/v1"), "c1/ns1/JAXJob/j", id="every job kind is a job"),
    pytest.param(_obj("PyTorchJob", "mnist", "kubeflow.org/v2"), None, id="another version is not a job"),
    pytest.param(_obj("Pod", "p", owners=[_owner("MPIJob", "m")]), "c1/ns1/MPIJob/m",
                 id="a child by its controller owner"),
    pytest.param(_obj("Workload", "pytorchjob-m-1869f", "kueue.x-k8s.io/v1beta2", owners=[_owner("PyTorchJob", "m")]),
                 "c1/ns1/PyTorchJob/m", id="a kueue workload by the job it admits"),
    pytest.param(_obj("Workload", "pytorchjob-m-1869f", "kueue.x-k8s.io/v1beta2",
                      labels={"kueue.x-k8s.io/multikueue-origin": "multikueue"}),
                 None, id="a multikueue worker's workload before the job's copy adopts it"),
    pytest.param(_obj("Pod", "p", labels=JOB_LABELS, owners=[_owner("XGBoostJob", "x")]),
                 "c1/ns1/XGBoostJob/x", id="the owner wins over labels"),
    pytest.param(_obj("Pod", "p", labels=JOB_LABELS, owners=[_owner("XGBoostJob", "x", controller=False)]),
                 "c1/ns1/TFJob/from-label", id="a non-controller owner is ignored"),
    pytest.param(_obj("Pod", "p", owners=[_owner("ReplicaSet", "rs", "apps/v1")]), None,
                 id="an owner that is not a job"),
    pytest.param(_obj("Service", "s", labels=JOB_LABELS), "c1/ns1/TFJob/from-label",
                 id="a child by job-name and operator-name labels"),
    pytest.param(_obj("ConfigMap", "c", labels={
        "training.kubeflow.org/job-name": "pd", "training.kubeflow.org/operator-name": "paddlejob-controller"}),
        "c1/ns1/PaddleJob/pd", id="operator name maps to the kind"),
    pytest.param(_obj("Pod", "p", labels={"training.kubeflow.org/job-name": "x"}), None,
                 id="job-name without operator-name is unrelated"),
    pytest.param(_obj("Pod", "p", labels={"training.kubeflow.org/job-name": "x",
                                          "training.kubeflow.org/operator-name": "other-controller"}), None,
                 id="an unknown operator is unrelated"),
    pytest.param(_obj("Pod", "p", labels={"app": "web"}), None, id="an unrelated pod"),
    pytest.param(_obj("Pod", "p", labels=JOB_LABELS, namespace=""), None, id="no namespace, no key"),
    pytest.param(_obj("TrainJob", "t", TRAINER), "c1/ns1/TrainJob/t", id="a TrainJob is a job"),
    pytest.param(_obj("PodGroup", "t", "scheduling.x-k8s.io/v1alpha1", owners=[_owner("TrainJob", "t", TRAINER)]),
                 "c1/ns1/TrainJob/t", id="a TrainJob's PodGroup by its controller"),
    pytest.param(_obj("ConfigMap", "t-mpi-hostfile", owners=[_owner("TrainJob", "t", TRAINER)]),
                 "c1/ns1/TrainJob/t", id="a TrainJob's hostfile by its controller"),
    pytest.param(_obj("ClusterTrainingRuntime", "torch-distributed", TRAINER, namespace=""), None,
                 id="a runtime belongs to no job"),
])
def test_an_object_maps_to_its_job_key(obj: dict[str, Any], expected: str | None) -> None:
    key = mapping.job_key("c1", obj)
    assert (str(key) if key is not None else None) == expected


def test_every_job_kind_has_a_controller_name() -> None:
    """mpi-operator's pods (an MPIJob v2beta1's launcher Job's) name the MPIJob too."""
    assert sorted(mapping.KIND_BY_CONTROLLER.values()) == sorted(
        ["PyTorchJob", "TFJob", "XGBoostJob", "MPIJob", "PaddleJob", "JAXJob", "MPIJob"])
    assert mapping.KIND_BY_CONTROLLER["mpi-operator"] == "MPIJob"


def test_a_trainjobs_jobset_is_a_job_of_its_own_and_reaches_its_trainjob_too() -> None:
    jobset = _obj("JobSet", "t", "jobset.x-k8s.io/v1alpha2", owners=[_owner("TrainJob", "t", TRAINER)])
    assert str(mapping.job_key("c1", jobset)) == "c1/ns1/JobSet/t"
    assert str(mapping.owner_key("c1", jobset)) == "c1/ns1/TrainJob/t"


JOBSET = "jobset.x-k8s.io/v1alpha2"


@pytest.mark.parametrize(("obj", "unserved", "expected"), [
    pytest.param(_obj("JobSet", "js", JOBSET), frozenset(), "c1/ns1/JobSet/js", id="a JobSet is its own key"),
    pytest.param(_obj("Job", "js-w-0", "batch/v1", owners=[_owner("JobSet", "js", JOBSET)]), frozenset(),
                 "c1/ns1/JobSet/js", id="a JobSet's Job by its controller"),
    pytest.param(_obj("Job", "m-launcher", "batch/v1", owners=[_owner("MPIJob", "m", "kubeflow.org/v2beta1")]),
                 frozenset(), "c1/ns1/MPIJob/m", id="an MPIJob's launcher Job as before"),
    pytest.param(_obj("Pod", "js-w-0-0-x", labels={"jobset.sigs.k8s.io/jobset-name": "js"},
                      owners=[_owner("Job", "js-w-0", "batch/v1")]), frozenset(), "c1/ns1/JobSet/js",
                 id="a JobSet's pod by its jobset-name label"),
    pytest.param(_obj("JobSet", "js", JOBSET), frozenset({"JobSet"}), None,
                 id="a JobSet another controller serves has no key of its own"),
    pytest.param(_obj("Job", "js-w-0", "batch/v1", owners=[_owner("JobSet", "js", JOBSET)]), frozenset({"JobSet"}),
                 None, id="nor have its Jobs"),
])
def test_jobsets_and_their_jobs_and_pods_map_to_the_jobset(obj: dict[str, Any], unserved: frozenset[str],
                                                           expected: str | None) -> None:
    key = mapping.job_key("c1", obj, unserved)
    assert (str(key) if key is not None else None) == expected


def test_a_job_controlled_by_a_job_is_also_published_under_its_owners_key() -> None:
    owned = _obj("JobSet", "js", JOBSET, owners=[_owner("PyTorchJob", "p")])
    assert str(mapping.owner_key("c1", owned)) == "c1/ns1/PyTorchJob/p"
    assert mapping.owner_key("c1", _obj("JobSet", "js", JOBSET)) is None
    assert mapping.owner_key("c1", _obj("Pod", "p", owners=[_owner("MPIJob", "m")])) is None, "a child is not a job"
