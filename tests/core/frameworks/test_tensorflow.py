"""TFJob plugin: TF_CONFIG (§5.2), master role; cases 26–28."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.api import jobs
from shared.core import defaulting, settings
from shared.core.frameworks import tensorflow

OPERATOR = settings.OperatorSettings()


def replica(replicas: int, container: str = "tensorflow") -> dict[str, Any]:
    return {"replicas": replicas, "template": {"spec": {"containers": [{"name": container, "image": "tf"}]}}}


def make_job(name: str = "test-tfjob", namespace: str = "default", **spec: Any) -> jobs.Job:
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return defaulting.set_defaults(jobs.load(document))


def tf_env(job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings = OPERATOR) -> list[Any]:
    return tensorflow.TensorFlow().cluster_env(job, replica_type, index, operator)


def test_case_26_single_worker_gets_no_tf_config() -> None:
    assert tf_env(make_job(tfReplicaSpecs={"Worker": replica(1)}), "Worker", 0) == []


def test_case_26_worker_and_ps_with_cluster_domain() -> None:
    job = make_job(namespace="ns2", tfReplicaSpecs={"Worker": replica(1), "PS": replica(1)})
    operator = settings.OperatorSettings(cluster_domain="tf.training.org")
    assert tf_env(job, "Worker", 0, operator) == [
        {
            "name": "TF_CONFIG",
            "value": '{"cluster":{"ps":["test-tfjob-ps-0.ns2.svc.tf.training.org:2222"],'
            '"worker":["test-tfjob-worker-0.ns2.svc.tf.training.org:2222"]},'
            '"task":{"type":"worker","index":0},"environment":"cloud"}',
        }
    ]


def test_case_26_evaluator_sorts_first() -> None:
    job = make_job(namespace="ns3", tfReplicaSpecs={"Worker": replica(1), "PS": replica(1), "Evaluator": replica(1)})
    assert tensorflow.tf_config(job, "Worker", 0, OPERATOR) == (
        '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],"ps":["test-tfjob-ps-0.ns3.svc:2222"],'
        '"worker":["test-tfjob-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}'
    )


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        pytest.param({"Worker": replica(1)}, False, id="1-worker-0-ps"),
        pytest.param({"Worker": replica(1), "PS": replica(1)}, True, id="1-worker-1-ps"),
        pytest.param({"Worker": replica(0), "PS": replica(1)}, False, id="0-workers-1-ps"),
        pytest.param({"Chief": replica(1), "Worker": replica(1)}, True, id="chief-and-worker"),
    ],
)
def test_case_27_is_distributed(specs: dict[str, Any], expected: bool) -> None:
    assert tensorflow.is_distributed(make_job(tfReplicaSpecs=specs)) is expected


CLUSTER = {"ps": ["ps-0", "ps-1"], "worker": ["w-0", "w-1"]}


@pytest.mark.parametrize(
    ("cluster", "rt", "index", "expected"),
    [
        pytest.param(CLUSTER, "worker", 0, {"worker": {"0": "w-0"}, "ps": ["ps-0", "ps-1"]}, id="case-28-worker-0"),
        pytest.param(CLUSTER, "ps", 0, {"worker": {}, "ps": ["ps-0"]}, id="case-28-ps-0"),
        pytest.param({"worker": ["w-0"]}, "worker", 0, {"worker": {"0": "w-0"}, "ps": None}, id="no-ps-is-null"),
        pytest.param(CLUSTER, "chief", 0, {"worker": {}, "ps": []}, id="other-type"),
    ],
)
def test_case_28_sparse_cluster_spec(
    cluster: dict[str, list[str]], rt: str, index: int, expected: dict[str, Any]
) -> None:
    assert tensorflow.sparse_cluster_spec(cluster, rt, index) == expected


def test_dynamic_worker_tf_config_has_no_environment_and_worker_ps_key_order() -> None:
    job = make_job("dist", tfReplicaSpecs={"Worker": replica(2), "PS": replica(1)}, enableDynamicWorker=True)
    assert tensorflow.tf_config(job, "Worker", 1, OPERATOR) == (
        '{"cluster":{"worker":{"1":"dist-worker-1.default.svc:2222"},"ps":["dist-ps-0.default.svc:2222"]},'
        '"task":{"type":"worker","index":1}}'
    )


def test_custom_port_and_unknown_replica_types_are_in_the_cluster() -> None:
    job = make_job("dist", tfReplicaSpecs={"Worker": replica(2), "Custom": replica(1)})
    assert job.replica_specs is not None
    worker = job.replica_specs["Worker"]
    assert worker is not None
    worker.template["spec"]["containers"][0]["ports"] = [{"name": "tfjob-port", "containerPort": 3333}]
    cluster = json.loads(tensorflow.tf_config(job, "Custom", 0, OPERATOR))["cluster"]
    assert cluster == {
        "custom": ["dist-custom-0.default.svc:2222"],
        "worker": ["dist-worker-0.default.svc:3333", "dist-worker-1.default.svc:3333"],
    }


def test_tf_config_goes_to_the_first_tensorflow_container_only() -> None:
    containers = [{"name": "sidecar"}, {"name": "tensorflow"}, {"name": "tensorflow"}]
    job = make_job(tfReplicaSpecs={"Worker": replica(2)})
    assert tensorflow.TensorFlow().env_containers(job, "Worker", containers) == [1]


@pytest.mark.parametrize(
    ("specs", "replica_type", "index", "expected"),
    [
        pytest.param({"Chief": replica(1), "Worker": replica(2)}, "Chief", 0, True, id="chief"),
        pytest.param({"Master": replica(1), "Worker": replica(2)}, "Master", 0, True, id="master"),
        pytest.param({"Chief": replica(1), "Worker": replica(2)}, "Worker", 0, False, id="worker-0-with-chief"),
        pytest.param({"PS": replica(1), "Worker": replica(2)}, "Worker", 0, True, id="worker-0-without-chief"),
        pytest.param({"PS": replica(1), "Worker": replica(2)}, "PS", 0, False, id="ps"),
    ],
)
def test_master_role(specs: dict[str, Any], replica_type: str, index: int, expected: bool) -> None:
    assert tensorflow.TensorFlow().is_master_role(make_job(tfReplicaSpecs=specs), replica_type, index) is expected
