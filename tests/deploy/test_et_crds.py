"""The et-operator CRDs under deploy/crds/ (spec B.1–B.4): their schemas follow the models,
are structural, and the local cluster serves the three kinds with them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import aiohttp
import pydantic
import pytest
import yaml

from shared.api import common, elastic
from sim import cluster as sim_cluster
from tests.deploy.test_crds import bare, walk

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
KINDS = [pytest.param(cls, id=cls.KIND) for cls in (elastic.TrainingJob, elastic.ScaleIn, elastic.ScaleOut)]
Schema = dict[str, Any]


def crd_of(cls: type[elastic.TrainingJob] | type[elastic.ScaleIn] | type[elastic.ScaleOut]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CRD_DIR / f"{elastic.GROUP}_{cls.PLURAL}.yaml").read_text())
    return loaded


def schema_of(cls: Any) -> Schema:
    schema: Schema = crd_of(cls)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("cls", KINDS)
def test_each_kind_has_a_namespaced_crd_with_a_status_subresource(cls: Any) -> None:
    crd = crd_of(cls)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{cls.PLURAL}.kai.alibabacloud.com"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == ("kai.alibabacloud.com", "Namespaced")
    assert spec["names"] == {"kind": cls.KIND, "listKind": f"{cls.KIND}List", "plural": cls.PLURAL,
                             "singular": cls.SINGULAR}
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("cls", "phase_path"),
    [
        pytest.param(elastic.TrainingJob, ".status.phase", id="TrainingJob-shows-its-phase"),
        pytest.param(elastic.ScaleIn, ".status.conditions[-1:].type", id="ScaleIn-shows-its-last-condition"),
        pytest.param(elastic.ScaleOut, ".status.conditions[-1:].type", id="ScaleOut-shows-its-last-condition"),
    ],
)
def test_printer_columns_are_upstreams(cls: Any, phase_path: str) -> None:
    columns = crd_of(cls)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert columns == [
        {"jsonPath": phase_path, "name": "Phase", "type": "string"},
        {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
    ]


@pytest.mark.parametrize("cls", KINDS)
def test_every_schema_node_is_structural(cls: Any) -> None:
    for path, node in walk(schema_of(cls)):
        assert node.get("type") in {"object", "array", "string", "integer", "boolean"}, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node["type"] == "array":
            assert "items" in node, path
        for name in node.get("required", []):
            assert name in node["properties"], path


@pytest.mark.parametrize("cls", KINDS)
def test_unknown_fields_are_kept_only_in_pod_templates_and_the_replica_spec_map(cls: Any) -> None:
    free = sorted(path for path, node in walk(schema_of(cls)) if node.get("x-kubernetes-preserve-unknown-fields"))
    expected = {
        elastic.TrainingJob: [".spec.etReplicaSpecs", ".spec.etReplicaSpecs.launcher.template",
                              ".spec.etReplicaSpecs.worker.template"],
    }.get(cls, [])
    assert free == expected


def _aliases(model: type[pydantic.BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize(
    ("cls", "path", "model"),
    [
        pytest.param(elastic.TrainingJob, ".spec", elastic.TrainingJobSpec, id="TrainingJob-spec"),
        pytest.param(elastic.TrainingJob, ".spec.etReplicaSpecs.worker", elastic.ETWorkerSpec, id="worker-spec"),
        pytest.param(elastic.TrainingJob, ".spec.etReplicaSpecs.launcher", elastic.ETReplicaSpec, id="launcher-spec"),
        pytest.param(elastic.TrainingJob, ".status", elastic.TrainingJobStatus, id="TrainingJob-status"),
        pytest.param(elastic.ScaleIn, ".spec", elastic.ScaleInSpec, id="ScaleIn-spec"),
        pytest.param(elastic.ScaleIn, ".status", elastic.ScaleInStatus, id="ScaleIn-status"),
        pytest.param(elastic.ScaleOut, ".spec", elastic.ScaleOutSpec, id="ScaleOut-spec"),
        pytest.param(elastic.ScaleOut, ".status", elastic.ScaleOutStatus, id="ScaleOut-status"),
    ],
)
def test_the_schema_and_the_model_have_the_same_fields(cls: Any, path: str, model: type[pydantic.BaseModel]) -> None:
    node = dict(walk(schema_of(cls)))[path]
    # The kubeflow ReplicaStatus fields (labelSelector, selector) are not et-operator's.
    expected = _aliases(model)
    assert set(node["properties"]) == expected


def test_replica_statuses_have_only_upstreams_three_counts() -> None:
    node = dict(walk(schema_of(elastic.TrainingJob)))[".status.replicaStatuses[*]"]
    assert set(node["properties"]) == {"active", "succeeded", "failed"}
    assert set(node["properties"]) <= _aliases(common.ReplicaStatus)


def test_schema_defaults_and_bounds_from_the_spec() -> None:
    nodes = dict(walk(schema_of(elastic.TrainingJob)))
    assert nodes[".spec"]["required"] == ["etReplicaSpecs"]
    assert nodes[".spec.etReplicaSpecs"]["required"] == ["launcher", "worker"]
    assert bare(nodes[".spec.backoffLimit"]) == {"type": "integer", "format": "int32", "default": 6, "minimum": 0}
    assert bare(nodes[".spec.restartPolicy"]) == {"type": "string", "enum": ["Never", "OnFailure"], "default": "Never"}
    assert bare(nodes[".spec.etReplicaSpecs.launcher.replicas"]) == {"type": "integer", "format": "int32",
                                                                     "minimum": 1, "maximum": 1}
    for field in ("replicas", "minReplicas", "maxReplicas"):
        assert nodes[f".spec.etReplicaSpecs.worker.{field}"]["minimum"] == 1
    assert nodes[".status"]["required"] == ["conditions", "replicaStatuses", "restartCount"]


# ---------------------------------------------------------------------------
# Served by the local cluster
# ---------------------------------------------------------------------------

BASE = "/apis/kai.alibabacloud.com/v1alpha1/namespaces/default"

JOB: dict[str, Any] = {
    "apiVersion": "kai.alibabacloud.com/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "elastic-training"},
    "spec": {
        "etReplicaSpecs": {
            "launcher": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "main", "image": "horovod", "futureField": {"kept": True}}]}}},
            "worker": {"replicas": 2, "minReplicas": 1, "maxReplicas": 9,
                       "template": {"spec": {"containers": [{"name": "main", "image": "horovod"}]}}},
        },
    },
}


async def call(cluster: sim_cluster.Cluster, method: str, path: str, body: Any = None,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, cluster.url + path, json=body, headers=headers or {}) as response:
            text = await response.text()
            return response.status, json.loads(text) if text else None


async def install(cluster: sim_cluster.Cluster) -> None:
    for cls in (elastic.TrainingJob, elastic.ScaleIn, elastic.ScaleOut):
        code, body = await call(cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd_of(cls))
        assert code == 201, body


async def test_the_cluster_serves_the_three_kinds(sim_cluster: sim_cluster.Cluster) -> None:
    await install(sim_cluster)
    _, group = await call(sim_cluster, "GET", "/apis/kai.alibabacloud.com/v1alpha1")
    assert {r["name"] for r in group["resources"]} == {
        "trainingjobs", "trainingjobs/status", "scaleins", "scaleins/status", "scaleouts", "scaleouts/status"}


async def test_a_training_job_is_defaulted_and_keeps_its_template_as_given(sim_cluster: sim_cluster.Cluster) -> None:
    await install(sim_cluster)
    code, stored = await call(sim_cluster, "POST", f"{BASE}/trainingjobs", JOB)
    assert code == 201, stored
    assert (stored["spec"]["backoffLimit"], stored["spec"]["restartPolicy"]) == (6, "Never")
    container = stored["spec"]["etReplicaSpecs"]["launcher"]["template"]["spec"]["containers"][0]
    assert container["futureField"] == {"kept": True}
    job = elastic.load_training_job(stored)
    assert job.worker.max_replicas == 9


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param(("spec", "etReplicaSpecs", "worker", "replicas"), 0, id="no-workers"),
        pytest.param(("spec", "etReplicaSpecs", "launcher", "replicas"), 2, id="two-launchers"),
        pytest.param(("spec", "restartPolicy"), "Always", id="an-unknown-job-restart-policy"),
        pytest.param(("spec", "backoffLimit"), -1, id="a-negative-backoff-limit"),
    ],
)
async def test_the_cluster_refuses_what_the_schema_forbids(
    sim_cluster: sim_cluster.Cluster, path: tuple[str, ...], value: Any
) -> None:
    await install(sim_cluster)
    job = copy.deepcopy(JOB)
    node = job
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    code, status = await call(sim_cluster, "POST", f"{BASE}/trainingjobs", job)
    assert code == 422, status
    assert ".".join(path) in status["message"]


async def test_status_is_written_through_the_subresource_with_the_required_fields(
    sim_cluster: sim_cluster.Cluster,
) -> None:
    await install(sim_cluster)
    _, stored = await call(sim_cluster, "POST", f"{BASE}/trainingjobs", JOB)
    stored["status"] = {"phase": "Created", "conditions": [], "replicaStatuses": {"Launcher": {}, "Worker": {}},
                        "restartCount": 0, "targetWorkers": ["elastic-training-worker-0"]}
    code, written = await call(sim_cluster, "PUT", f"{BASE}/trainingjobs/elastic-training/status", stored)
    assert code == 200, written
    assert written["status"]["targetWorkers"] == ["elastic-training-worker-0"]
    code, table = await call(sim_cluster, "GET", f"{BASE}/trainingjobs",
                             headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Phase", "Age"]
    assert table["rows"][0]["cells"][:2] == ["elastic-training", "Created"]


@pytest.mark.parametrize(
    ("plural", "spec"),
    [
        pytest.param("scaleins", {"selector": {"name": "elastic-training"}, "toDelete": {"count": 1}}, id="ScaleIn"),
        pytest.param("scaleouts", {"selector": {"name": "elastic-training"}, "toAdd": {"count": 2}, "timeout": 300},
                     id="ScaleOut"),
    ],
)
async def test_scalers_are_stored_as_given_and_load(sim_cluster: sim_cluster.Cluster, plural: str,
                                                    spec: dict[str, Any]) -> None:
    await install(sim_cluster)
    kind = "ScaleIn" if plural == "scaleins" else "ScaleOut"
    body = {"apiVersion": elastic.API_VERSION, "kind": kind, "metadata": {"name": "s"}, "spec": spec}
    code, stored = await call(sim_cluster, "POST", f"{BASE}/{plural}", body)
    assert code == 201, stored
    assert stored["spec"] == spec
    scaler = elastic.load_scaler(stored)
    assert scaler.target_name == "elastic-training"
