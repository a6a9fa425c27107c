"""Loading and dumping a job gives back the document (shared/api, examples/kubeflow)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.api import jobs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kubeflow"
FILES = sorted(EXAMPLES.rglob("*.yaml"))


def read(path: Path) -> dict[str, Any]:
    [document] = list(yaml.safe_load_all(path.read_text()))
    assert isinstance(document, dict)
    return document


def test_every_upstream_job_example_has_a_kto_example() -> None:
    assert len(FILES) == 27


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(EXAMPLES))) for p in FILES])
def test_example_loads_and_dumps_unchanged(path: Path) -> None:
    document = read(path)
    job = jobs.load(document)
    assert job.KIND == document["kind"]
    assert job.dump() == document


def with_unknown_fields(document: dict[str, Any]) -> dict[str, Any]:
    """The document with unknown fields at every level kto models."""
    result = copy.deepcopy(document)
    result["extraTopLevel"] = {"kept": True}
    result["metadata"]["futureMetadataField"] = "x"
    result["spec"]["futureSpecField"] = [1, 2]
    result["spec"].setdefault("runPolicy", {})["futurePolicy"] = "y"
    field = jobs.KINDS[document["kind"]].REPLICA_FIELD_ALIAS
    for spec in result["spec"][field].values():
        spec["futureReplicaField"] = {"nested": None}
        spec["template"]["metadata"] = {"labels": {"a": "b"}, "annotations": {"c": "d"}}
        spec["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
        spec["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": False}
    return result


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(EXAMPLES))) for p in FILES])
def test_unknown_fields_and_pod_template_fields_survive_a_round_trip(path: Path) -> None:
    document = with_unknown_fields(read(path))
    assert jobs.load(document).dump() == document


def test_status_and_times_round_trip() -> None:
    document: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "t", "namespace": "ns", "creationTimestamp": "2024-01-02T03:04:05Z", "uid": "u"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": []}}}}},
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "m",
                 "lastUpdateTime": "2024-01-02T03:04:05Z", "lastTransitionTime": "2024-01-02T03:04:05Z"},
            ],
            "replicaStatuses": {"Worker": {"active": 1, "selector": "a=b"}},
            "startTime": "2024-01-02T03:04:06Z",
        },
    }
    assert jobs.load(document).dump() == document


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        pytest.param("MPIJob", {"mpiReplicaSpecs": {}, "slotsPerWorker": 2, "cleanPodPolicy": "Running", "mainContainer": "m"}, id="mpi-extras"),
        pytest.param("TFJob", {"tfReplicaSpecs": {}, "successPolicy": "AllWorkers", "enableDynamicWorker": True}, id="tf-extras"),
        pytest.param(
            "PyTorchJob",
            {"pytorchReplicaSpecs": {"Worker": None}, "nprocPerNode": "auto",
             "elasticPolicy": {"rdzvConf": [{"key": "k", "value": "v"}], "standalone": True, "nProcPerNode": 2}},
            id="pytorch-extras-and-null-replica",
        ),
        pytest.param("PaddleJob", {"paddleReplicaSpecs": {}, "elasticPolicy": {"minReplicas": 1, "maxRestarts": 3}}, id="paddle-extras"),
        pytest.param(
            "JAXJob",
            {"jaxReplicaSpecs": {}, "runPolicy": {"schedulingPolicy": {"minAvailable": 2, "minResources": {"cpu": "1", "memory": 2}}}},
            id="scheduling-policy",
        ),
    ],
)
def test_kind_specific_fields_round_trip(kind: str, spec: dict[str, Any]) -> None:
    document = {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    assert jobs.load(document).dump() == document
