"""Defaulting (spec §2, acceptance cases 1–7)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.api import jobs
from shared.core import defaulting


def container(name: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **extra}


def replica(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": list(containers)}}, **extra}


def document(kind: str, replicas: dict[str, Any], **spec: Any) -> dict[str, Any]:
    field = jobs.KINDS[kind].REPLICA_FIELD_ALIAS
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": "test-job"},
        "spec": {field: replicas, **spec},
    }


def defaulted(doc: dict[str, Any]) -> dict[str, Any]:
    return defaulting.set_defaults(jobs.load(doc)).dump()


@pytest.mark.parametrize(
    ("elastic", "expected"),
    [
        pytest.param({}, {"minReplicas": 1, "maxReplicas": 1}, id="neither-set-takes-worker-replicas"),
        pytest.param({"maxReplicas": 1}, {"minReplicas": 1, "maxReplicas": 1}, id="only-max-copies-to-min"),
        pytest.param({"minReplicas": 1}, {"minReplicas": 1, "maxReplicas": 1}, id="only-min-copies-to-max"),
        pytest.param({"minReplicas": 1, "maxReplicas": 3}, {"minReplicas": 1, "maxReplicas": 3}, id="both-set-unchanged"),
    ],
)
def test_pytorch_elastic_bounds_are_defaulted(elastic: dict[str, Any], expected: dict[str, int]) -> None:
    doc = document("PyTorchJob", {"Worker": replica(container("pytorch"), replicas=1)}, elasticPolicy=elastic)
    policy = defaulted(doc)["spec"]["elasticPolicy"]
    assert {k: policy[k] for k in expected} == expected


def test_paddle_elastic_bounds_follow_worker_replicas() -> None:
    doc = document("PaddleJob", {"Worker": replica(container("paddle"), replicas=3)}, elasticPolicy={})
    assert defaulted(doc)["spec"]["elasticPolicy"] == {"minReplicas": 3, "maxReplicas": 3}


def test_elastic_bounds_without_worker_stay_unset() -> None:
    doc = document("PaddleJob", {"Master": replica(container("paddle"))}, elasticPolicy={})
    assert defaulted(doc)["spec"]["elasticPolicy"] == {}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"elasticPolicy": {}}, "auto", id="elastic-without-nproc"),
        pytest.param({}, "auto", id="no-elastic-policy"),
        pytest.param({"nprocPerNode": "2"}, "2", id="explicit-kept"),
        pytest.param({"elasticPolicy": {"nProcPerNode": 4}}, None, id="deprecated-field-leaves-it-unset"),
    ],
)
def test_pytorch_nproc_per_node_defaults_to_auto(spec: dict[str, Any], expected: str | None) -> None:
    doc = document("PyTorchJob", {"Worker": replica(container("pytorch"))}, **spec)
    assert defaulted(doc)["spec"].get("nprocPerNode") == expected


@pytest.mark.parametrize(
    ("kind", "key", "canonical"),
    [
        pytest.param("TFJob", "WORKER", "Worker", id="tf-upper"),
        pytest.param("TFJob", "ps", "PS", id="tf-ps-lower"),
        pytest.param("PyTorchJob", "master", "Master", id="pytorch-lower"),
        pytest.param("JAXJob", "wOrKeR", "Worker", id="jax-mixed"),
    ],
)
def test_replica_type_keys_are_camel_cased(kind: str, key: str, canonical: str) -> None:
    default_container = jobs.KINDS[kind].DEFAULT_CONTAINER
    doc = document(kind, {"Other": replica(container(default_container)), key: replica(container(default_container))})
    specs = defaulted(doc)["spec"][jobs.KINDS[kind].REPLICA_FIELD_ALIAS]
    assert list(specs) == ["Other", canonical]


def test_mpi_replica_type_keys_are_not_camel_cased() -> None:
    doc = document("MPIJob", {"launcher": replica(container("mpi"))})
    assert list(defaulted(doc)["spec"]["mpiReplicaSpecs"]) == ["launcher"]


def test_tf_worker_gets_every_default_and_keeps_its_own_port() -> None:
    doc = document(
        "TFJob",
        {"Worker": replica(container("tensorflow", ports=[{"name": "customPort", "containerPort": 1234}]))},
    )
    spec = defaulted(doc)["spec"]
    worker = spec["tfReplicaSpecs"]["Worker"]
    assert worker["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "customPort", "containerPort": 1234},
        {"name": "tfjob-port", "containerPort": 2222},
    ]
    assert worker["restartPolicy"] == "Never"
    assert worker["replicas"] == 1
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    assert spec["successPolicy"] == ""


def test_explicit_clean_pod_policy_is_kept() -> None:
    doc = document("TFJob", {"Worker": replica(container("tensorflow"))}, runPolicy={"cleanPodPolicy": "All"})
    assert defaulted(doc)["spec"]["runPolicy"]["cleanPodPolicy"] == "All"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(
            replica(container("xgboost")),
            {"replicas": 1, "restartPolicy": "Never", "ports": [{"name": "xgboostjob-port", "containerPort": 9999}]},
            id="minimal",
        ),
        pytest.param(
            replica(container("xgboost", ports=[{"name": "xgboostjob-port", "containerPort": 9999}]), replicas=3, restartPolicy="OnFailure"),
            {"replicas": 3, "restartPolicy": "OnFailure", "ports": [{"name": "xgboostjob-port", "containerPort": 9999}]},
            id="explicit-values-kept-and-port-not-duplicated",
        ),
    ],
)
def test_xgboost_replica_defaults(given: dict[str, Any], expected: dict[str, Any]) -> None:
    master = defaulted(document("XGBoostJob", {"Master": given}))["spec"]["xgbReplicaSpecs"]["Master"]
    assert master["replicas"] == expected["replicas"]
    assert master["restartPolicy"] == expected["restartPolicy"]
    assert master["template"]["spec"]["containers"][0]["ports"] == expected["ports"]


@pytest.mark.parametrize(
    ("containers", "index"),
    [
        pytest.param([container("sidecar"), container("pytorch")], 1, id="default-named-container"),
        pytest.param([container("first"), container("second")], 0, id="falls-back-to-container-0"),
    ],
)
def test_default_port_goes_to_the_default_container_or_the_first(containers: list[dict[str, Any]], index: int) -> None:
    doc = document("PyTorchJob", {"Master": replica(*containers, replicas=1)})
    result = defaulted(doc)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert result[index]["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert "ports" not in result[1 - index]


@pytest.mark.parametrize(
    ("kind", "port_name", "port", "restart_policy"),
    [
        pytest.param("PyTorchJob", "pytorchjob-port", 23456, "OnFailure", id="pytorch"),
        pytest.param("TFJob", "tfjob-port", 2222, "Never", id="tensorflow"),
        pytest.param("XGBoostJob", "xgboostjob-port", 9999, "Never", id="xgboost"),
        pytest.param("PaddleJob", "master", 36543, "OnFailure", id="paddle"),
        pytest.param("JAXJob", "jaxjob-port", 6666, "Never", id="jax"),
    ],
)
def test_each_kind_gets_its_own_port_and_restart_policy(kind: str, port_name: str, port: int, restart_policy: str) -> None:
    doc = document(kind, {"Worker": replica(container(jobs.KINDS[kind].DEFAULT_CONTAINER))})
    worker = defaulted(doc)["spec"][jobs.KINDS[kind].REPLICA_FIELD_ALIAS]["Worker"]
    assert worker["restartPolicy"] == restart_policy
    assert worker["template"]["spec"]["containers"][0]["ports"] == [{"name": port_name, "containerPort": port}]


@pytest.mark.parametrize(
    ("spec", "expected_top", "expected_run"),
    [
        pytest.param({}, "None", "None", id="neither-set-both-none"),
        pytest.param({"cleanPodPolicy": "Running", "runPolicy": {"cleanPodPolicy": "Running"}}, "Running", "Running", id="both-set-kept"),
        pytest.param({"cleanPodPolicy": "Running"}, "Running", "Running", id="deprecated-copied-to-run-policy"),
        pytest.param({"runPolicy": {"cleanPodPolicy": "All"}}, "All", "All", id="run-policy-copied-to-deprecated"),
        pytest.param({"cleanPodPolicy": "Running", "runPolicy": {"cleanPodPolicy": "All"}}, "All", "All", id="run-policy-wins"),
    ],
)
def test_mpi_clean_pod_policies_are_defaulted_and_synced(spec: dict[str, Any], expected_top: str, expected_run: str) -> None:
    doc = document("MPIJob", {"Launcher": replica(container("mpi"))}, **spec)
    result = defaulted(doc)["spec"]
    assert result["cleanPodPolicy"] == expected_top
    assert result["runPolicy"]["cleanPodPolicy"] == expected_run


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param({}, {"Launcher": (1, "Never"), "Worker": (0, "Never")}, id="defaults"),
        pytest.param(
            {"replicas": 2, "restartPolicy": "Always"},
            {"Launcher": (2, "Always"), "Worker": (2, "Always")},
            id="explicit-kept",
        ),
    ],
)
def test_mpi_launcher_and_worker_defaults(given: dict[str, Any], expected: dict[str, tuple[int, str]]) -> None:
    doc = document("MPIJob", {"Launcher": replica(container("l"), **given), "Worker": replica(container("w"), **given)})
    specs = defaulted(doc)["spec"]["mpiReplicaSpecs"]
    assert {rt: (s["replicas"], s["restartPolicy"]) for rt, s in specs.items()} == expected
    assert "ports" not in specs["Launcher"]["template"]["spec"]["containers"][0]


def test_input_is_untouched_and_templates_are_not_aliased() -> None:
    doc = document("PyTorchJob", {"Worker": replica(container("pytorch"))}, elasticPolicy={})
    job = jobs.load(doc)
    before = copy.deepcopy(job.dump())
    result = defaulting.set_defaults(job)
    assert job.dump() == before
    result_template = result.specs()["Worker"].template
    assert result_template is not job.specs()["Worker"].template
    result_template["spec"]["containers"][0]["image"] = "changed"
    assert job.specs()["Worker"].template["spec"]["containers"][0]["image"] == "busybox"


def test_defaulting_twice_changes_nothing_more() -> None:
    doc = document("TFJob", {"worker": replica(container("tensorflow")), "PS": replica(container("tensorflow"))})
    once = defaulting.set_defaults(jobs.load(doc))
    assert defaulting.set_defaults(once).dump() == once.dump()


def test_null_replica_spec_and_empty_template_do_not_crash() -> None:
    doc = document("PyTorchJob", {"Master": None, "Worker": {"template": {}}})
    specs = defaulted(doc)["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"] is None
    assert specs["Worker"] == {"replicas": 1, "template": {}, "restartPolicy": "OnFailure"}
