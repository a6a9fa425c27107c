"""backoffLimit (spec §6.7) and kto's fix of its quirk: restarts the reconciler makes count too."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.api import jobs
from shared.core import reconciling
from shared.core.settings import OperatorSettings
from tests.core.test_statuses import make_job, make_pod

NOW = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)


def with_restarts(job: jobs.Job, count: int) -> jobs.Job:
    return job.model_copy(update={"metadata": job.metadata.model_copy(
        update={"annotations": {reconciling.RESTARTS_ANNOTATION: str(count)}})})


def owned(job: jobs.Job, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for pod in pods:
        pod["kind"] = "Pod"
        pod["metadata"]["ownerReferences"] = [{"kind": job.KIND, "uid": job.metadata.uid, "controller": True}]
    return pods


def exit_code_job(limit: int) -> jobs.Job:
    return make_job("PyTorchJob", {"Master": (1, "ExitCode"), "Worker": (1, "ExitCode")},
                    runPolicy={"backoffLimit": limit})


@pytest.mark.parametrize(
    ("limit", "made", "past"),
    [
        pytest.param(2, 0, False, id="first-failure-restarts"),
        pytest.param(2, 1, False, id="second-failure-restarts"),
        pytest.param(2, 2, True, id="third-failure-fails-the-job"),
        pytest.param(0, 0, True, id="limit-0-never-restarts"),
    ],
)
def test_a_retryable_failure_is_restarted_until_the_limit_then_fails_the_job(limit: int, made: int, past: bool) -> None:
    job = with_restarts(exit_code_job(limit), made)
    pods = [make_pod(job, "Master", 0, "Running"), make_pod(job, "Worker", 0, "Failed", exit_code=137)]
    assert reconciling.past_backoff_limit(job, pods) is past


def test_without_a_failed_pod_the_count_alone_fails_nothing() -> None:
    job = with_restarts(exit_code_job(1), 5)
    pods = [make_pod(job, "Master", 0, "Running"), make_pod(job, "Worker", 0, "Running")]
    assert reconciling.past_backoff_limit(job, pods) is False


def test_a_restart_decision_says_what_the_count_must_become() -> None:
    job = with_restarts(exit_code_job(3), 1)
    pods = owned(job, [make_pod(job, "Master", 0, "Running"), make_pod(job, "Worker", 0, "Failed", exit_code=137)])
    decision = reconciling.decide(job, pods, NOW, OperatorSettings())
    assert [ref.reason for ref in decision.deletes] == ["restart"]
    assert decision.restarts == 2


def test_without_a_backoff_limit_restarts_are_not_counted() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "ExitCode"), "Worker": (1, "ExitCode")})
    pods = owned(job, [make_pod(job, "Master", 0, "Running"), make_pod(job, "Worker", 0, "Failed", exit_code=137)])
    decision = reconciling.decide(job, pods, NOW, OperatorSettings())
    assert [ref.reason for ref in decision.deletes] == ["restart"]
    assert decision.restarts is None
