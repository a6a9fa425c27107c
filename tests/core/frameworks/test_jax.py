"""JAXJob plugin: env (§5.5), master role; case 29."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import jobs
from shared.core import errors, settings
from shared.core.frameworks import jax

OPERATOR = settings.OperatorSettings()


def make_job(port_name: str = "jaxjob-port", replicas: int = 1) -> jobs.Job:
    container: dict[str, Any] = {"name": "jax", "image": "jax", "ports": [{"name": port_name, "containerPort": 6666}]}
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "JAXJob",
        "metadata": {"name": "test-jaxjob"},
        "spec": {"jaxReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": {"containers": [container]}}}}},
    }
    return jobs.load(document)


def test_case_29_env_exactly() -> None:
    assert jax.JAX().cluster_env(make_job(), "Worker", 0, OPERATOR) == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "COORDINATOR_PORT", "value": "6666"},
        {"name": "COORDINATOR_ADDRESS", "value": "test-jaxjob-worker-0"},
        {"name": "NUM_PROCESSES", "value": "1"},
        {"name": "PROCESS_ID", "value": "0"},
    ]


def test_case_29_wrong_port_name_is_not_exposed() -> None:
    with pytest.raises(errors.PlanError, match="default container port is not exposed") as caught:
        jax.JAX().cluster_env(make_job("wrong-port"), "Worker", 0, OPERATOR)
    assert caught.value.field == "spec.jaxReplicaSpecs[Worker].template.spec.containers"


@pytest.mark.parametrize(
    ("index", "expected"), [pytest.param(0, True, id="worker-0"), pytest.param(1, False, id="worker-1")]
)
def test_master_role_is_index_0(index: int, expected: bool) -> None:
    assert jax.JAX().is_master_role(make_job(replicas=2), "Worker", index) is expected
