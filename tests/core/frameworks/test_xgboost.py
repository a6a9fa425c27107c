"""XGBoostJob plugin: env (§5.3), master role, port errors."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import jobs
from shared.core import defaulting, errors, settings
from shared.core.frameworks import xgboost

OPERATOR = settings.OperatorSettings()


def replica(replicas: int, port_name: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "xgboost", "image": "xgb"}
    if port_name is not None:
        container["ports"] = [{"name": port_name, "containerPort": 1}]
    return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}


def make_job(specs: dict[str, Any], name: str = "xgb", defaults: bool = True) -> jobs.Job:
    job = jobs.load({"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": {"name": name},
                     "spec": {"xgbReplicaSpecs": specs}})
    return defaulting.set_defaults(job) if defaults else job


def env_of(job: jobs.Job, replica_type: str, index: int) -> list[tuple[str, str]]:
    return [(v["name"], v["value"]) for v in xgboost.XGBoost().cluster_env(job, replica_type, index, OPERATOR)]


@pytest.mark.parametrize(
    ("replica_type", "index", "rank"),
    [pytest.param("Master", 0, "0", id="master"), pytest.param("Worker", 1, "2", id="worker-1")],
)
def test_env_of_the_xgb_example(replica_type: str, index: int, rank: str) -> None:
    job = make_job({"Master": replica(1), "Worker": replica(2)})
    assert env_of(job, replica_type, index) == [
        ("MASTER_PORT", "9999"),
        ("MASTER_ADDR", "xgb-master-0"),
        ("WORLD_SIZE", "3"),
        ("RANK", rank),
        ("PYTHONUNBUFFERED", "1"),
        ("WORKER_PORT", "9999"),
        ("WORKER_ADDRS", "xgb-worker-0,xgb-worker-1"),
    ]


def test_single_master_has_no_worker_vars() -> None:
    assert [name for name, _ in env_of(make_job({"Master": replica(1)}), "Master", 0)] == [
        "MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED",
    ]


@pytest.mark.parametrize(
    ("specs", "field"),
    [
        pytest.param({"Master": replica(1, "other")}, "spec.xgbReplicaSpecs[Master].template.spec.containers",
                     id="master-port-missing"),
        pytest.param({"Master": replica(1, "xgboostjob-port"), "Worker": replica(1, "other")},
                     "spec.xgbReplicaSpecs[Worker].template.spec.containers", id="worker-port-missing"),
    ],
)
def test_missing_port_fails_with_upstreams_message(specs: dict[str, Any], field: str) -> None:
    with pytest.raises(errors.PlanError, match="failed to found the port") as caught:
        xgboost.XGBoost().cluster_env(make_job(specs, defaults=False), "Master", 0, OPERATOR)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("replica_type", "expected"), [pytest.param("Master", True, id="master"), pytest.param("Worker", False, id="worker")]
)
def test_master_role_is_the_master_only(replica_type: str, expected: bool) -> None:
    job = make_job({"Master": replica(1), "Worker": replica(2)})
    assert xgboost.XGBoost().is_master_role(job, replica_type, 0) is expected
