"""The committed CRDs under deploy/crds/ (spec §1.1, §3.5): generated, structural, described."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from shared.api import common, crds, elastic, jobs, jobsets, mpijobs, trainer

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
KINDS = [pytest.param(cls, id=cls.KIND) for cls in jobs.KINDS.values()]
EVERY_KIND = [*KINDS, *(pytest.param(cls, id=cls.KIND) for cls in elastic.KINDS.values()),
              pytest.param(jobsets.JobSet, id="JobSet")]


def schema_of(cls: type[jobs.Job]) -> dict[str, Any]:
    schema: dict[str, Any] = crds.crd(cls)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_exactly_one_committed_file_per_kind() -> None:
    """Every CRD is generated (the et-operator ones from upstream's schemas, tests/deploy/test_et_crds.py)."""
    committed = [*CRD_DIR.glob(f"{jobs.GROUP}_*.yaml"), *CRD_DIR.glob(f"{elastic.GROUP}_*.yaml"),
                 *CRD_DIR.glob(f"{trainer.GROUP}_*.yaml"), *CRD_DIR.glob(f"{jobsets.GROUP}_*.yaml")]
    assert sorted(p.name for p in committed) == sorted(crds.files())


def test_mpijob_is_served_in_v1_and_v2beta1_each_schema_carrying_the_others_fields() -> None:
    crd = crds.crd(jobs.MPIJob)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert (versions["v1"]["storage"], versions["v2beta1"]["storage"]) == (True, False)
    assert versions["v2beta1"]["served"] is True
    specs = {name: v["schema"]["openAPIV3Schema"]["properties"]["spec"] for name, v in versions.items()}
    assert set(specs["v1"]["properties"]) == set(specs["v2beta1"]["properties"])
    assert {"mpiImplementation", "sshAuthMountPath", "launcherCreationPolicy", "runLauncherAsWorker",
            "cleanPodPolicy", "mainContainer"} <= set(specs["v1"]["properties"])
    # The v2beta1 defaults mark what v2beta1 wrote; the v1 schema must not add them.
    assert specs["v2beta1"]["properties"]["mpiImplementation"]["default"] == "OpenMPI"
    assert "default" not in specs["v1"]["properties"]["mpiImplementation"]


@pytest.mark.parametrize("cls", EVERY_KIND)
def test_committed_crd_equals_the_generator_output(cls: Any) -> None:
    path = CRD_DIR / crds.file_name(cls)
    assert path.read_text() == crds.render(cls), "run: python -m shared.api.crds deploy/crds"
    assert yaml.safe_load(path.read_text()) == crds.definition(cls)


@pytest.mark.parametrize("cls", KINDS)
def test_crd_identity(cls: type[jobs.Job]) -> None:
    crd = crds.crd(cls)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{cls.PLURAL}.kubeflow.org"
    spec = crd["spec"]
    assert spec["group"] == "kubeflow.org"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": cls.KIND,
        "listKind": f"{cls.KIND}List",
        "plural": cls.PLURAL,
        "singular": cls.SINGULAR,
    }
    version = spec["versions"][0]  # MPIJob also serves v2beta1 (its own test above)
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)


def bare(node: dict[str, Any]) -> dict[str, Any]:
    """A schema node without its description."""
    return {key: value for key, value in node.items() if key != "description"}


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path or ".", schema)]
    for name, child in schema.get("properties", {}).items():
        nodes += walk(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        nodes += walk(schema["additionalProperties"], f"{path}[*]")
    if "items" in schema:
        nodes += walk(schema["items"], f"{path}[]")
    return nodes


@pytest.mark.parametrize("cls", KINDS)
def test_every_schema_node_is_structural(cls: type[jobs.Job]) -> None:
    for path, node in walk(schema_of(cls)):
        if node.get("x-kubernetes-int-or-string"):
            assert [branch["type"] for branch in node["anyOf"]] == ["integer", "string"], path
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "boolean"}, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node["type"] == "array":
            assert "items" in node, path
        if node["type"] == "integer":
            assert node["format"] in {"int32", "int64"}, path
        for name in node.get("required", []):
            assert name in node["properties"], path


@pytest.mark.parametrize("cls", KINDS)
def test_unknown_fields_are_preserved_only_in_templates_and_metrics(cls: type[jobs.Job]) -> None:
    free = sorted(path for path, node in walk(schema_of(cls)) if node.get("x-kubernetes-preserve-unknown-fields"))
    expected = [f".spec.{cls.REPLICA_FIELD_ALIAS}[*].template"]
    if cls in (jobs.PyTorchJob, jobs.PaddleJob):
        expected.append(".spec.elasticPolicy.metrics[]")
    assert free == sorted(expected)


@pytest.mark.parametrize("cls", KINDS)
def test_schema_rules_from_the_spec(cls: type[jobs.Job]) -> None:
    nodes = dict(walk(schema_of(cls)))
    replicas = f".spec.{cls.REPLICA_FIELD_ALIAS}"
    assert cls.REPLICA_FIELD_ALIAS in nodes[".spec"]["required"]
    assert "additionalProperties" in nodes[replicas]
    assert nodes[f"{replicas}[*].restartPolicy"]["enum"] == ["Always", "OnFailure", "Never", "ExitCode"]
    assert set(nodes[".spec.runPolicy.cleanPodPolicy"]["enum"]) >= {"All", "Running", "None"}
    assert bare(nodes[".spec.runPolicy.suspend"]) == {"type": "boolean", "default": False}
    assert nodes[".spec.runPolicy.activeDeadlineSeconds"]["format"] == "int64"
    assert nodes[".spec.runPolicy.backoffLimit"]["format"] == "int32"
    assert nodes[".spec.runPolicy.schedulingPolicy.queue"]["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "spec.runPolicy.schedulingPolicy.queue is immutable"}
    ]
    assert nodes[".status.conditions[]"]["required"] == ["status", "type"]
    assert "Worker" not in nodes[replicas].get("properties", {})


def test_mpijob_has_its_deprecated_clean_pod_policy() -> None:
    nodes = dict(walk(schema_of(jobs.MPIJob)))
    assert set(nodes[".spec.cleanPodPolicy"]["enum"]) >= {"All", "Running", "None"}
    assert bare(nodes[".spec.slotsPerWorker"]) == {"type": "integer", "format": "int32"}


@pytest.mark.parametrize(
    ("cls", "names"),
    [
        *[pytest.param(cls, ["State", "Age"], id=cls.KIND) for cls in jobs.KINDS.values() if cls is not jobs.MPIJob],
        pytest.param(jobs.MPIJob, ["Age", "State"], id="MPIJob-lists-age-first"),
    ],
)
def test_printer_columns(cls: type[jobs.Job], names: list[str]) -> None:
    columns = {c["name"]: c for c in crds.crd(cls)["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert list(columns) == names
    assert columns["State"] == {"jsonPath": ".status.conditions[-1:].type", "name": "State", "type": "string"}
    assert columns["Age"] == {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}


@pytest.mark.parametrize(
    ("cls", "scalable"),
    [pytest.param(cls, cls in (jobs.PyTorchJob, jobs.PaddleJob, jobs.JAXJob), id=cls.KIND) for cls in jobs.KINDS.values()],
)
def test_status_subresource_everywhere_and_scale_for_elastic_kinds(cls: type[jobs.Job], scalable: bool) -> None:
    subresources = crds.crd(cls)["spec"]["versions"][0]["subresources"]
    assert subresources["status"] == {}
    if scalable:
        assert subresources["scale"] == {
            "specReplicasPath": f".spec.{cls.REPLICA_FIELD_ALIAS}.Worker.replicas",
            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
        }
    else:
        assert "scale" not in subresources


@pytest.mark.parametrize("cls", KINDS)
def test_every_model_field_appears_in_the_schema(cls: type[jobs.Job]) -> None:
    spec_model = cls.model_fields["spec"].annotation
    assert spec_model is not None
    properties = schema_of(cls)["properties"]["spec"]["properties"]
    extra = set(properties) - {f.alias or n for n, f in spec_model.model_fields.items()}
    if cls is jobs.MPIJob:  # v2beta1's fields, kept when read in v1 (conversion strategy None)
        extra -= {"mpiImplementation", "sshAuthMountPath", "launcherCreationPolicy", "runLauncherAsWorker"}
    assert not extra
    assert set(properties) >= {f.alias or n for n, f in spec_model.model_fields.items()}


def _schemas(cls: Any) -> list[tuple[str, dict[str, Any]]]:
    """(version, openAPIV3Schema) of every version of a kind's CRD."""
    crd = crds.definition(cls)
    return [(v["name"], v["schema"]["openAPIV3Schema"]) for v in crd["spec"]["versions"]]


def _properties(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every node reached as a named property (what `kubectl explain` lists as a field), at any depth."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, child in schema.get("properties", {}).items():
        found.append((f"{path}.{name}", child))
        found += _properties(child, f"{path}.{name}")
    for key, mark in (("additionalProperties", "[*]"), ("items", "[]")):
        if isinstance(schema.get(key), dict):
            found += _properties(schema[key], path + mark)
    return found


@pytest.mark.parametrize("cls", EVERY_KIND)
def test_every_field_of_every_version_has_a_description(cls: Any) -> None:
    for version, schema in _schemas(cls):
        assert schema.get("description"), version
        missing = [path for path, node in _properties(schema)
                   if not node.get("description") and path not in (".apiVersion", ".kind", ".metadata")]
        assert not missing, (version, missing)


@pytest.mark.parametrize("cls", EVERY_KIND)
def test_descriptions_are_for_users(cls: Any) -> None:
    """Model docstrings that are notes for developers (rst markup, spec references) stay out of the CRDs."""
    for version, schema in _schemas(cls):
        for path, node in walk(schema):
            text = node.get("description", "")
            assert not any(mark in text for mark in ("``", "§", "QUIRK", "upstream's", "spec B.")), (version, path)
            assert text == text.strip() and "\n\n\n" not in text, (version, path)


def _doc(model: type[pydantic.BaseModel], field: str) -> str:
    description = model.model_fields[field].description
    assert description is not None
    return " ".join(description.split())


@pytest.mark.parametrize(
    ("cls", "version", "path", "expected"),
    [
        pytest.param(jobs.PyTorchJob, "v1", ".spec.pytorchReplicaSpecs",
                     _doc(jobs.PyTorchJobSpec, "pytorch_replica_specs"), id="PyTorchJob-replica-map"),
        pytest.param(jobs.PyTorchJob, "v1", ".spec.pytorchReplicaSpecs[*].restartPolicy",
                     _doc(common.ReplicaSpec, "restart_policy"), id="PyTorchJob-replica-restart-policy"),
        pytest.param(jobs.TFJob, "v1", ".spec.runPolicy.suspend", _doc(common.RunPolicy, "suspend"),
                     id="TFJob-run-policy"),
        pytest.param(jobs.MPIJob, "v1", ".spec.mpiImplementation", _doc(mpijobs.MPIJobSpec, "mpi_implementation"),
                     id="MPIJob-v1-carries-v2beta1-fields-described"),
        pytest.param(jobs.MPIJob, "v2beta1", ".spec.runPolicy.backoffLimit", _doc(mpijobs.RunPolicy, "backoff_limit"),
                     id="MPIJob-v2beta1-own-run-policy-text"),
        pytest.param(jobs.MPIJob, "v2beta1", ".spec.runPolicy.suspend", _doc(common.RunPolicy, "suspend"),
                     id="MPIJob-v2beta1-run-policy-falls-back-to-v1-text"),
        pytest.param(jobs.MPIJob, "v2beta1", ".spec.mainContainer", _doc(jobs.MPIJobSpec, "main_container"),
                     id="MPIJob-v2beta1-carries-v1-fields-described"),
        pytest.param(elastic.TrainingJob, "v1alpha1", ".spec.etReplicaSpecs.worker.minReplicas",
                     _doc(elastic.ETWorkerSpec, "min_replicas"), id="TrainingJob-worker"),
        pytest.param(elastic.ScaleIn, "v1alpha1", ".spec.toDelete.podNames", _doc(elastic.ToDeleteSpec, "pod_names"),
                     id="ScaleIn-to-delete"),
        pytest.param(elastic.ScaleOut, "v1alpha1", ".status.conditions", _doc(common.JobStatus, "conditions"),
                     id="ScaleOut-status"),
    ],
)
def test_descriptions_are_the_models_field_docstrings(cls: Any, version: str, path: str, expected: str) -> None:
    schema = dict(_schemas(cls))[version]
    assert dict(_properties(schema))[path]["description"] == expected


def test_map_values_list_items_and_kinds_take_the_class_docstring() -> None:
    nodes = dict(walk(schema_of(jobs.JAXJob)))
    assert nodes["."]["description"].startswith("A distributed JAX training job")
    assert nodes[".spec.jaxReplicaSpecs[*]"]["description"].startswith("One replica type of the job")
    assert nodes[".status.conditions[]"]["description"].startswith("One observed state of the job")


def test_no_short_names_or_categories_as_upstream() -> None:
    """training-operator v1.9.0, mpi-operator v0.8 and et-operator define neither (kubectl resolves the
    singular and the plural only)."""
    every = [crds.crd(cls) for cls in jobs.KINDS.values()] + [crds.et_crd(cls) for cls in elastic.KINDS.values()]
    for crd in every:
        assert "shortNames" not in crd["spec"]["names"] and "categories" not in crd["spec"]["names"]
