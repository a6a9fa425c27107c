"""PaddleJob plugin: env (§5.4) in collective and PS mode; case 30."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import jobs
from shared.core import defaulting, settings
from shared.core.frameworks import paddle

OPERATOR = settings.OperatorSettings()
POD_IP = {"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def replica(replicas: int, port: int | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "paddle", "image": "paddle"}
    if port is not None:
        container["ports"] = [{"name": "master", "containerPort": port}]
    return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}


def make_job(specs: dict[str, Any]) -> jobs.Job:
    document = {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": {"name": "pd"},
                "spec": {"paddleReplicaSpecs": specs}}
    return defaulting.set_defaults(jobs.load(document))


def env_of(job: jobs.Job, replica_type: str, index: int) -> list[dict[str, Any]]:
    return paddle.Paddle().cluster_env(job, replica_type, index, OPERATOR)


COMMON_3 = [
    {"name": "PYTHONUNBUFFERED", "value": "1"},
    {"name": "PADDLE_JOB_ID", "value": "pd"},
    {"name": "PADDLE_NNODES", "value": "3"},
]
PS_MODE = {"Master": replica(1, 8080), "Worker": replica(2, 8080)}


@pytest.mark.parametrize(
    ("specs", "replica_type", "index", "tail"),
    [
        pytest.param(
            PS_MODE, "Master", 0,
            [POD_IP, {"name": "PADDLE_MASTER", "value": "$(POD_IP_DUMMY):8080"},
             {"name": "PADDLE_SERVER_NUM", "value": "1"}],
            id="case-30-ps-mode-master-0",
        ),
        pytest.param(
            PS_MODE, "Worker", 0,
            [{"name": "PADDLE_MASTER", "value": "pd-master-0:8080"}, {"name": "PADDLE_TRAINER_NUM", "value": "1"}],
            id="ps-mode-worker",
        ),
        pytest.param(
            {"Worker": replica(3)}, "Worker", 0,
            [POD_IP, {"name": "PADDLE_MASTER", "value": "$(POD_IP_DUMMY):36543"}],
            id="collective-worker-0",
        ),
        pytest.param(
            {"Worker": replica(3)}, "Worker", 2,
            [{"name": "PADDLE_MASTER", "value": "pd-worker-0:36543"}],
            id="collective-worker-2",
        ),
    ],
)
def test_env(specs: dict[str, Any], replica_type: str, index: int, tail: list[dict[str, Any]]) -> None:
    assert env_of(make_job(specs), replica_type, index) == COMMON_3 + tail


def test_collective_worker_0_has_no_master_role() -> None:
    assert paddle.Paddle().is_master_role(make_job({"Worker": replica(3)}), "Worker", 0) is False
