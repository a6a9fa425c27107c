"""The v2beta1 version entry of the MPIJob CRD (shared/api/crds_mpijob_v2beta1.yaml) matches the models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from shared.api import common, mpijobs

FRAGMENT = Path(mpijobs.__file__).with_name("crds_mpijob_v2beta1.yaml")


def version() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(FRAGMENT.read_text())
    return loaded


def aliases(model: type[pydantic.BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_the_fragment_is_a_served_non_storage_version_with_a_status_subresource() -> None:
    entry = version()
    assert (entry["name"], entry["served"], entry["storage"]) == ("v2beta1", True, False)
    assert entry["subresources"] == {"status": {}} and "additionalPrinterColumns" not in entry


@pytest.mark.parametrize(
    ("model", "path"),
    [
        pytest.param(mpijobs.MPIJobSpec, ["spec"], id="spec"),
        pytest.param(mpijobs.RunPolicy, ["spec", "runPolicy"], id="run-policy"),
        pytest.param(common.SchedulingPolicy, ["spec", "runPolicy", "schedulingPolicy"], id="scheduling-policy"),
        pytest.param(mpijobs.ReplicaSpec, ["spec", "mpiReplicaSpecs", "*"], id="replica-spec"),
        pytest.param(common.JobStatus, ["status"], id="status"),
    ],
)
def test_every_model_field_is_in_the_schema_so_none_is_pruned(model: type[pydantic.BaseModel], path: list[str]) -> None:
    schema = version()["schema"]["openAPIV3Schema"]
    for step in path:
        schema = schema["additionalProperties"] if step == "*" else schema["properties"][step]
    assert set(schema["properties"]) == aliases(model)


def test_the_schema_defaults_are_those_of_defaulting() -> None:
    spec = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    defaults = {name: value["default"] for name, value in spec.items() if "default" in value}
    assert defaults == {"launcherCreationPolicy": "AtStartup", "mpiImplementation": "OpenMPI",
                        "runLauncherAsWorker": False, "slotsPerWorker": 1, "sshAuthMountPath": "/root/.ssh"}
