"""Trainer v2's kinds load and dump back upstream's own files (shared/api/trainer.py, realparts/trainer.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from realparts import trainer as upstream
from shared.api import trainer

MODULE = upstream.ensure_module(quiet=True)
RUNTIMES = [(path, document) for path in upstream.runtime_files() for document in upstream.documents(path)]
EXAMPLES = [(path, document) for path in upstream.example_files() for document in upstream.documents(path)]


def params(found: list[tuple[Path, dict[str, Any]]]) -> list[Any]:
    return [pytest.param(document, id=f"{path.relative_to(MODULE)}:{document['kind']}/{document['metadata']['name']}")
            for path, document in found]


def test_upstream_ships_nine_runtimes_and_five_examples() -> None:
    assert len(RUNTIMES) == 9
    assert {document["kind"] for _, document in RUNTIMES} == {"ClusterTrainingRuntime"}
    assert len([document for _, document in EXAMPLES if document["kind"] == "TrainJob"]) >= 5


@pytest.mark.parametrize("document", params(RUNTIMES + EXAMPLES))
def test_an_upstream_document_loads_and_dumps_unchanged(document: dict[str, Any]) -> None:
    if document["kind"] not in trainer.KINDS:
        pytest.skip(f"{document['kind']} is not a trainer kind")
    loaded = trainer.load(document)
    assert loaded.kind == document["kind"]
    assert loaded.dump() == document


@pytest.mark.parametrize("document", params(RUNTIMES))
def test_a_runtime_names_its_framework_and_its_replicated_jobs(document: dict[str, Any]) -> None:
    runtime = trainer.load_runtime(document)
    assert runtime.framework
    assert runtime.spec.template.replicated_jobs
    assert runtime.spec.ml_policy is not None and len(runtime.spec.ml_policy.policies) <= 1


def test_unknown_fields_survive_a_round_trip() -> None:
    document = copy.deepcopy(RUNTIMES[0][1])
    document["futureTopLevel"] = {"kept": True}
    document["spec"]["futureSpecField"] = [1]
    document["spec"]["mlPolicy"]["futurePolicy"] = "x"
    assert trainer.load(document).dump() == document


def test_unset_fields_read_as_upstreams_defaults_without_being_dumped() -> None:
    document = {"apiVersion": trainer.API_VERSION, "kind": "TrainJob", "metadata": {"name": "j"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}}}
    job = trainer.load_trainjob(document)
    assert (job.spec.runtime_ref.kind, job.spec.runtime_ref.api_group) == ("ClusterTrainingRuntime", trainer.GROUP)
    assert (job.spec.suspend, job.managed_by) == (False, trainer.MANAGED_BY_TRAINER)
    assert job.dump() == document
    runtime = trainer.load_runtime({"apiVersion": trainer.API_VERSION, "kind": "TrainingRuntime",
                                    "metadata": {"name": "r"}, "spec": {"mlPolicy": {"mpi": {}}}})
    assert runtime.spec.ml_policy is not None and runtime.spec.ml_policy.mpi is not None
    mpi = runtime.spec.ml_policy.mpi
    assert (mpi.num_proc_per_node, mpi.mpi_implementation, mpi.ssh_auth_mount_path, mpi.run_launcher_as_node) == (
        1, "OpenMPI", "/root/.ssh", False)


def test_status_round_trips_with_jobs_status_and_trainer_status() -> None:
    status = {
        "conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done",
                        "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": 1}],
        "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}],
        "trainerStatus": {"progressPercentage": 100, "estimatedRemainingSeconds": 0,
                          "metrics": [{"name": "loss", "value": "0.1"}], "lastUpdatedTime": "2026-01-02T03:04:00Z"},
    }
    document = {"apiVersion": trainer.API_VERSION, "kind": "TrainJob", "metadata": {"name": "j"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}}, "status": status}
    job = trainer.load_trainjob(document)
    assert job.status is not None and job.status.condition("Complete") is not None
    assert job.dump() == document


@pytest.mark.parametrize("document, path", [
    pytest.param({"apiVersion": "trainer.kubeflow.org/v1", "kind": "TrainJob", "spec": {}}, "apiVersion", id="version"),
    pytest.param({"apiVersion": trainer.API_VERSION, "kind": "TrainJob", "spec": {}}, "spec.runtimeRef",
                 id="runtimeRef-missing"),
    pytest.param({"apiVersion": trainer.API_VERSION, "kind": "TrainJob", "spec": {"runtimeRef": {}}},
                 "spec.runtimeRef.name", id="runtimeRef-name-missing"),
])
def test_a_bad_document_is_a_load_error_naming_the_field(document: dict[str, Any], path: str) -> None:
    with pytest.raises(trainer.LoadError) as caught:
        trainer.load(document)
    assert path in [error_path for error_path, _ in caught.value.errors]
