"""Names, labels, selectors and owner references of a job's children (spec §4)."""

from __future__ import annotations

import pytest

from shared.api import jobs
from shared.core import naming, owners


def make_job(kind: str = "TFJob", name: str = "dist", uid: str | None = "uid-1") -> jobs.Job:
    metadata = {"name": name, "namespace": "kubeflow"}
    if uid is not None:
        metadata["uid"] = uid
    field = jobs.KINDS[kind].REPLICA_FIELD_ALIAS
    return jobs.load(
        {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": metadata, "spec": {field: {"Worker": {}}}}
    )


@pytest.mark.parametrize(
    ("job_name", "replica_type", "index", "expected"),
    [
        pytest.param("1/2/3/4/5", "worker", 1, "1-2-3-4-5-worker-1", id="case-34-lower-type"),
        pytest.param("1/2/3/4/5", "WORKER", 1, "1-2-3-4-5-worker-1", id="case-34-upper-type"),
        pytest.param("mnist", "Master", 0, "mnist-master-0", id="pytorch-master"),
        pytest.param("tf", "PS", 0, "tf-ps-0", id="tf-ps"),
        pytest.param("tf", "Evaluator", 0, "tf-evaluator-0", id="tf-evaluator"),
        pytest.param("test-tfjob", "", 0, "test-tfjob--0", id="case-36-empty-type"),
    ],
)
def test_general_name_lowers_the_type_and_replaces_slashes(
    job_name: str, replica_type: str, index: int, expected: str
) -> None:
    assert naming.general_name(job_name, replica_type, index) == expected


def test_pod_and_service_of_a_replica_share_one_name() -> None:
    job = make_job()
    assert naming.pod_name(job, "Worker", 1) == naming.service_name(job, "Worker", 1) == "dist-worker-1"


def test_mpi_names_use_fixed_suffixes() -> None:
    job = make_job("MPIJob", "pi")
    assert naming.mpi_launcher_name(job) == "pi-launcher"
    assert naming.mpi_worker_name(job, 3) == "pi-worker-3"
    assert naming.mpi_config_name(job) == "pi-config"


def test_job_selector_is_operator_name_and_job_name() -> None:
    assert naming.job_selector(make_job()) == {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/job-name": "dist",
    }


@pytest.mark.parametrize(
    ("master", "expected_role"),
    [pytest.param(True, {"training.kubeflow.org/job-role": "master"}, id="master"), pytest.param(False, {}, id="other")],
)
def test_pod_labels_carry_type_lower_index_and_role_only_on_masters(master: bool, expected_role: dict[str, str]) -> None:
    labels = naming.pod_labels(make_job(), "PS", 2, master_role=master)
    assert labels == {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/job-name": "dist",
        "training.kubeflow.org/replica-type": "ps",
        "training.kubeflow.org/replica-index": "2",
        **expected_role,
    }


def test_service_labels_have_no_role() -> None:
    assert naming.LABEL_JOB_ROLE not in naming.service_labels(make_job(), "Chief", 0)


def test_mpi_launcher_labels_have_role_and_no_index() -> None:
    assert naming.mpi_launcher_labels(make_job("MPIJob", "pi")) == {
        "training.kubeflow.org/operator-name": "mpijob-controller",
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/replica-type": "launcher",
        "training.kubeflow.org/job-role": "master",
    }


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        pytest.param(
            "PyTorchJob",
            "training.kubeflow.org/job-name=dist,training.kubeflow.org/operator-name=pytorchjob-controller,"
            "training.kubeflow.org/replica-type=worker",
            id="pytorch",
        ),
        pytest.param(
            "JAXJob",
            "training.kubeflow.org/job-name=dist,training.kubeflow.org/operator-name=jaxjob-controller,"
            "training.kubeflow.org/replica-type=worker",
            id="jax",
        ),
    ],
)
def test_replica_selector_sorts_keys_and_joins_with_commas(kind: str, expected: str) -> None:
    assert naming.replica_selector(make_job(kind), "Worker") == expected


@pytest.mark.parametrize(
    ("uid", "expected_uid"), [pytest.param("uid-1", "uid-1", id="with-uid"), pytest.param(None, "", id="no-uid")]
)
def test_owner_reference_is_a_blocking_controller_reference(uid: str | None, expected_uid: str) -> None:
    assert owners.reference(make_job("XGBoostJob", "xgb", uid)) == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "XGBoostJob",
        "name": "xgb",
        "uid": expected_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
