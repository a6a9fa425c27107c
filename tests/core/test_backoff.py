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


def failed_pod(job: jobs.Job, rt: str, index: int, phase: str, exit_code: int | None = None) -> dict[str, Any]:
    """A pod of the job as the API server has it, uid and all (counted pods are known by uid)."""
    pod = make_pod(job, rt, index, phase, exit_code)
    pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
    return pod


def counted(job: jobs.Job, count: int, pods: list[dict[str, Any]]) -> jobs.Job:
    """The job as a pass left it that counted ``pods`` and was cut short before deleting them."""
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": {
        reconciling.RESTARTS_ANNOTATION: str(count),
        reconciling.COUNTED_ANNOTATION: ",".join(p["metadata"]["uid"] for p in pods)}})})


def test_a_failed_pod_counted_by_a_pass_cut_short_is_deleted_again_without_counting_it_again() -> None:
    job = exit_code_job(3)
    master, worker = failed_pod(job, "Master", 0, "Running"), failed_pod(job, "Worker", 0, "Failed", exit_code=137)
    first = reconciling.decide(job, owned(job, [master, worker]), NOW, OperatorSettings())
    assert first.restarts == 1 and first.counted == (worker["metadata"]["uid"],)
    again = reconciling.decide(counted(job, 1, [worker]), owned(job, [master, worker]), NOW, OperatorSettings())
    assert [(ref.name, ref.reason) for ref in again.deletes] == [(worker["metadata"]["name"], "restart")]
    assert again.restarts is None


def test_a_count_at_the_limit_does_not_fail_the_job_for_the_failure_it_already_counted() -> None:
    job = exit_code_job(2)
    master = failed_pod(job, "Master", 0, "Failed", exit_code=130)
    worker = failed_pod(job, "Worker", 0, "Running")
    cut_short = counted(job, 2, [master])
    assert reconciling.past_backoff_limit(cut_short, [master, worker]) is False
    decision = reconciling.decide(cut_short, owned(cut_short, [master, worker]), NOW, OperatorSettings())
    assert decision.verdict is None
    assert [ref.reason for ref in decision.deletes] == ["restart"]


def test_a_new_failure_beside_a_counted_one_is_counted_alone() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "ExitCode"), "Worker": (2, "ExitCode")}, runPolicy={"backoffLimit": 5})
    master = failed_pod(job, "Master", 0, "Running")
    first, second = (failed_pod(job, "Worker", i, "Failed", exit_code=137) for i in (0, 1))
    decision = reconciling.decide(counted(job, 1, [first]), owned(job, [master, first, second]), NOW,
                                  OperatorSettings())
    assert decision.restarts == 2
    assert set(decision.counted) == {first["metadata"]["uid"], second["metadata"]["uid"]}
