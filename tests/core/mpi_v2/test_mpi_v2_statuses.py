"""Status of an MPIJob v2beta1 (A.12): acceptance cases 18–20, the condition helper, failure reasons."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from shared.api import common
from shared.core import conditions
from shared.core.mpi_v2 import statuses

import mpi_v2_builders as b


def compute(job_kwargs: dict[str, Any], status: dict[str, Any], launcher: dict[str, Any] | None,
            launcher_pods: Sequence[dict[str, Any]] = (), workers: Sequence[dict[str, Any]] = ()) -> Any:
    job = b.defaulted("test", **job_kwargs)
    return statuses.compute(job, common.JobStatus.model_validate(status), launcher, list(launcher_pods),
                            list(workers), b.NOW)


def created() -> dict[str, Any]:
    return {"conditions": [b.condition("Created", reason="MPIJobCreated")]}


def test_case_18_a_completed_launcher_succeeds_the_job_and_backfills_running() -> None:
    job = b.job("test")
    outcome = compute({}, created(), b.launcher(job, b.condition("Complete"), completionTime="2024-01-02T00:00:00Z"))
    status = outcome.status.dump()
    assert b.reasons(status) == [("Created", "True", "MPIJobCreated"), ("Succeeded", "True", "MPIJobSucceeded"),
                                 ("Running", "False", "MPIJobRunning")]
    assert status["conditions"][1]["message"] == "MPIJob default/test successfully completed."
    assert status["conditions"][2]["message"] == "MPIJob default/test is finished but Running condition was never set."
    assert status["conditions"][2]["lastTransitionTime"] == status["completionTime"] == "2024-01-02T00:00:00Z"
    assert status["replicaStatuses"] == {"Launcher": {"succeeded": 1}, "Worker": {}}
    assert [(e.type, e.reason) for e in outcome.events] == [("Normal", "MPIJobSucceeded")]


def test_case_19_success_while_running_turns_running_false_and_comes_last() -> None:
    job = b.job("test")
    status = created()
    status["conditions"].append(b.condition("Running", reason="MPIJobRunning"))
    outcome = compute({}, status, b.launcher(job, b.condition("Complete")), [b.launcher_pod("l", "Running")])
    assert b.reasons(outcome.status.dump()) == [("Created", "True", "MPIJobCreated"),
                                                ("Running", "False", "MPIJobRunning"),
                                                ("Succeeded", "True", "MPIJobSucceeded")]


@pytest.mark.parametrize(
    ("condition", "pods", "reason", "message"),
    [
        pytest.param(
            b.condition("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit"),
            [b.launcher_pod("l-1", "Failed", created="2024-01-01T00:00:00Z", reason="FailedReason1", message="first message"),
             b.launcher_pod("l-2", "Failed", created="2024-01-01T00:01:00Z", reason="FailedReason2", message="second message"),
             b.launcher_pod("l-3", "Running", created="2024-01-01T00:02:00Z")],
            "BackoffLimitExceeded/FailedReason2", "Job has reached the specified backoff limit: second message",
            id="case-20-backoff-limit-names-the-newest-failed-pod"),
        pytest.param(b.condition("Failed", reason="DeadlineExceeded", message="Job was active longer"), [],
                     "DeadlineExceeded", "Job was active longer", id="other-reasons-as-given"),
        pytest.param(b.condition("Failed"), [], "MPIJobFailed", "MPIJob default/test has failed", id="defaults"),
    ],
)
def test_case_20_a_failed_launcher_fails_the_job_with_a_composed_reason(
    condition: dict[str, Any], pods: list[dict[str, Any]], reason: str, message: str
) -> None:
    outcome = compute({}, created(), b.launcher(b.job("test"), condition, failed=2), pods)
    status = outcome.status.dump()
    assert status["conditions"][1]["type"] == "Failed"
    assert (status["conditions"][1]["reason"], status["conditions"][1]["message"]) == (reason, message)
    assert status["replicaStatuses"]["Launcher"] == {"failed": 2}
    assert status["completionTime"] == "2024-01-02T03:04:05Z"
    assert [(e.type, e.reason, e.message) for e in outcome.events] == [("Warning", reason, message)]


def test_a_long_backoff_message_is_cut_to_1024_characters() -> None:
    pod = b.launcher_pod("l", "Failed", reason="OOMKilled", message="x" * 2000)
    condition = b.condition("Failed", reason="BackoffLimitExceeded", message="limit")
    reason, message = statuses.failure(b.defaulted("test"), b.launcher(b.job("test"), condition), [pod])
    assert reason == "BackoffLimitExceeded/OOMKilled" and len(message) == 1024 and message.endswith("...")


def test_evicted_workers_fail_the_job_without_a_completion_time() -> None:
    job = b.job("test", workers=3)
    workers = [b.worker(job, 0, "Failed", reason="Evicted"), b.worker(job, 1), b.worker(job, 2, "Succeeded")]
    outcome = compute({"workers": 3}, created(), b.launcher(job), [b.launcher_pod("l", "Running")], workers)
    status = outcome.status.dump()
    assert ("Failed", "True", "MPIJobEvicted") in b.reasons(status)
    assert status["conditions"][1]["message"] == "1/3 workers are evicted"
    assert "completionTime" not in status
    assert status["replicaStatuses"]["Worker"] == {"active": 1, "succeeded": 1, "failed": 1}
    assert ("Warning", "MPIJobEvicted") in [(e.type, e.reason) for e in outcome.events]


def test_running_is_not_reported_before_the_launcher_runs() -> None:
    job = b.job("test", workers=1)
    outcome = compute({"workers": 1}, created(), b.launcher(job), [b.launcher_pod("l", "Pending")], [b.worker(job, 0)])
    assert b.reasons(outcome.status.dump()) == [("Created", "True", "MPIJobCreated")]


def cond(type_: str, value: str, reason: str) -> common.JobCondition:
    return common.JobCondition.model_validate(b.condition(type_, value, reason))


@pytest.mark.parametrize(
    ("before", "new", "changed", "after"),
    [
        pytest.param([("Running", "True", "R")], ("Running", "True", "R"), False, [("Running", "True", "R")],
                     id="same-status-and-reason-is-no-change"),
        pytest.param([("Running", "True", "R")], ("Restarting", "True", "X"), True, [("Restarting", "True", "X")],
                     id="restarting-replaces-running"),
        pytest.param([("Running", "True", "R"), ("Failed", "True", "F")], ("Succeeded", "True", "S"), True,
                     [("Running", "False", "R"), ("Failed", "False", "F"), ("Succeeded", "True", "S")],
                     id="success-turns-running-and-failed-false"),
        pytest.param([("Failed", "True", "F"), ("Created", "True", "C")], ("Failed", "True", "G"), True,
                     [("Created", "True", "C"), ("Failed", "True", "G")], id="failed-is-not-terminal-and-goes-last"),
    ],
)
def test_the_condition_helper_follows_mpi_operator(
    before: list[tuple[str, str, str]], new: tuple[str, str, str], changed: bool, after: list[tuple[str, str, str]]
) -> None:
    status = common.JobStatus(conditions=[cond(*c) for c in before])
    type_, value, reason = new
    assert conditions.set_condition(status, type_, value, reason, "m", b.NOW, conditions.MPI_OPERATOR) is changed  # type: ignore[arg-type]
    assert [(c.type, c.status, c.reason) for c in status.conditions or []] == after


def test_a_new_reason_with_the_same_status_keeps_the_transition_time() -> None:
    status = common.JobStatus(conditions=[cond("Running", "True", "A")])
    conditions.set_condition(status, "Running", "True", "B", "m", b.NOW, conditions.MPI_OPERATOR)
    [running] = status.conditions or []
    assert running.last_transition_time != b.NOW and running.last_update_time == b.NOW
