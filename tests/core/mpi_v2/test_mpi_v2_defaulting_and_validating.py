"""Defaulting (A.4) and validation (A.5) of MPIJob v2beta1: acceptance cases 1–9."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import mpijobs
from shared.core.mpi_v2 import defaulting, validating

import mpi_v2_builders as b


def bare(spec: dict[str, Any], name: str = "foo") -> mpijobs.MPIJob:
    metadata = {"name": name} if name else {}
    return mpijobs.load({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": metadata, "spec": spec})


def test_case_1_an_empty_spec_gets_the_base_defaults_and_nothing_else() -> None:
    job = defaulting.set_defaults(bare({}))
    assert job.spec.dump() == {
        "slotsPerWorker": 1, "sshAuthMountPath": "/root/.ssh", "mpiImplementation": "OpenMPI",
        "launcherCreationPolicy": "AtStartup", "runPolicy": {"cleanPodPolicy": "None"},
    }


@pytest.mark.parametrize(
    ("replica_type", "expected"),
    [
        pytest.param("Launcher", {"replicas": 1, "restartPolicy": "OnFailure"}, id="launcher"),
        pytest.param("Worker", {"replicas": 0, "restartPolicy": "Never"}, id="worker"),
    ],
)
def test_case_2_replica_specs_get_their_replicas_and_restart_policy(replica_type: str, expected: dict[str, Any]) -> None:
    job = defaulting.set_defaults(bare({"mpiReplicaSpecs": {replica_type: {}}}))
    assert job.spec.dump()["mpiReplicaSpecs"][replica_type] == expected


@pytest.mark.parametrize("implementation", ["Intel", "MPICH"])
def test_case_3_user_values_are_kept(implementation: str) -> None:
    spec = {"slotsPerWorker": 10, "sshAuthMountPath": "/home/mpiuser/.ssh", "mpiImplementation": implementation,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 2, "activeDeadlineSeconds": 3,
                          "backoffLimit": 4}}
    assert defaulting.set_defaults(bare(spec)).spec.dump() == spec


def test_defaulting_works_on_a_copy() -> None:
    job = bare({})
    defaulting.set_defaults(job)
    assert job.spec.dump() == {}


def errors(job: mpijobs.MPIJob) -> list[tuple[str, str]]:
    return [(error.path, error.type) for error in validating.validate(job).errors]


CONTAINERS = {"spec": {"containers": [{"name": "c", "image": "i"}]}}


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        pytest.param(bare({}, name=""), [
            ("metadata.name", "Invalid"), ("spec.mpiReplicaSpecs", "Required"), ("spec.slotsPerWorker", "Required"),
            ("spec.runPolicy.cleanPodPolicy", "Required"), ("spec.sshAuthMountPath", "Required"),
            ("spec.mpiImplementation", "NotSupported"),
        ], id="case-4-empty-job"),
        pytest.param(bare({
            "slotsPerWorker": 1, "sshAuthMountPath": "/root/.ssh", "mpiImplementation": "Unknown",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": CONTAINERS},
                "Worker": {"replicas": 1000, "restartPolicy": "Never", "template": CONTAINERS}},
            "runPolicy": {"cleanPodPolicy": "unknown", "ttlSecondsAfterFinished": -1, "activeDeadlineSeconds": -1,
                          "backoffLimit": -1, "managedBy": "invalid.com/controller"},
        }, name="this-name-is-waaaaaaaay-too-long-for-a-worker-hostname"), [
            ("metadata.name", "Invalid"), ("spec.runPolicy.cleanPodPolicy", "NotSupported"),
            ("spec.runPolicy.ttlSecondsAfterFinished", "Invalid"), ("spec.runPolicy.activeDeadlineSeconds", "Invalid"),
            ("spec.runPolicy.backoffLimit", "Invalid"), ("spec.runPolicy.managedBy", "NotSupported"),
            ("spec.mpiImplementation", "NotSupported"),
        ], id="case-5-invalid-fields"),
        pytest.param(defaulting.set_defaults(bare({"mpiReplicaSpecs": {}})), [
            ("spec.mpiReplicaSpecs[Launcher]", "Required"),
        ], id="case-6-empty-replica-specs"),
        pytest.param(bare({
            "slotsPerWorker": 1, "sshAuthMountPath": "/root/.ssh", "mpiImplementation": "OpenMPI",
            "runPolicy": {"cleanPodPolicy": "None"}, "mpiReplicaSpecs": {"Launcher": {}, "Worker": {}},
        }), [
            ("spec.mpiReplicaSpecs[Launcher].replicas", "Required"),
            ("spec.mpiReplicaSpecs[Launcher].restartPolicy", "NotSupported"),
            ("spec.mpiReplicaSpecs[Launcher].template.spec.containers", "Required"),
            ("spec.mpiReplicaSpecs[Worker].replicas", "Required"),
            ("spec.mpiReplicaSpecs[Worker].restartPolicy", "NotSupported"),
            ("spec.mpiReplicaSpecs[Worker].template.spec.containers", "Required"),
        ], id="case-7-replica-specs-without-fields"),
        pytest.param(defaulting.set_defaults(bare({"mpiReplicaSpecs": {
            "Launcher": {"replicas": 2, "restartPolicy": "Always", "template": CONTAINERS},
            "Worker": {"replicas": 0, "restartPolicy": "Invalid", "template": CONTAINERS},
        }})), [
            ("spec.mpiReplicaSpecs[Launcher].restartPolicy", "NotSupported"),
            ("spec.mpiReplicaSpecs[Launcher].replicas", "Invalid"),
            ("spec.mpiReplicaSpecs[Worker].restartPolicy", "NotSupported"),
            ("spec.mpiReplicaSpecs[Worker].replicas", "Invalid"),
        ], id="case-8-bad-replica-values"),
        pytest.param(b.defaulted("1-foo"), [("metadata.name", "Invalid")], id="case-9-name"),
        pytest.param(b.defaulted(workers=None), [], id="a-job-without-workers-is-valid"),
        pytest.param(defaulting.set_defaults(bare({"mpiReplicaSpecs": {
            "Launcher": {"template": CONTAINERS}, "Worker": {"template": CONTAINERS}}})),
            [("spec.mpiReplicaSpecs[Worker].replicas", "Invalid")], id="a-worker-without-replicas-defaults-to-0"),
        pytest.param(b.defaulted(workers=20_000),
                     [("spec.mpiReplicaSpecs[Worker].replicas", "Invalid")], id="kto-replica-limit"),
    ],
)
def test_validation_reports_upstream_errors_in_upstream_order(job: mpijobs.MPIJob, expected: list[tuple[str, str]]) -> None:
    assert errors(job) == expected


def test_errors_carry_upstream_details() -> None:
    report = validating.validate(bare({"mpiImplementation": "Unknown"}, name="1-foo"))
    messages = [str(error) for error in report.errors]
    assert messages[0].startswith(
        'metadata.name: Invalid value: "1-foo": will not able to create pod and service with invalid DNS label "1-foo-worker-0": '
    )
    assert messages[-1] == 'spec.mpiImplementation: Unsupported value: "Unknown": supported values: "Intel", "MPICH", "OpenMPI"'


def test_case_10_the_validation_event_aggregates_and_truncates() -> None:
    one = validating.event(validating.validate(b.defaulted("1-foo")))
    assert (one.type, one.reason) == ("Warning", "ValidationError")
    assert one.message.startswith('Found validation errors: metadata.name: Invalid value: "1-foo"')
    many = validating.event(validating.validate(bare({}, name="x" * 2000)))
    assert many.message.startswith("Found validation errors: [metadata.name: Invalid value")
    assert len(many.message) == 1024 and many.message.endswith("...")
