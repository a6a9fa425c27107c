"""Job status from pods, per kind (spec §6.4, §6.11, §7; cases 58–67, 70–71)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.api import jobs, objects
from shared.core import conditions, naming, outcomes, statuses
from shared.core.events import Event

NOW = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)


def make_job(kind: str, replicas: dict[str, tuple[int, str]], **spec: Any) -> jobs.Job:
    cls = jobs.KINDS[kind]
    specs = {
        rt: {
            "replicas": n,
            "restartPolicy": policy,
            "template": {"spec": {"containers": [{"name": cls.DEFAULT_CONTAINER, "image": "img"}]}},
        }
        for rt, (n, policy) in replicas.items()
    }
    return jobs.load(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": kind,
            "metadata": {"name": "test-job", "namespace": "ns", "uid": "u1"},
            "spec": {cls.REPLICA_FIELD_ALIAS: specs, **spec},
        }
    )


def make_pod(
    job: jobs.Job, rt: str, index: int, phase: str, exit_code: int | None = None, deleting: bool = False
) -> dict[str, Any]:
    labels = {
        naming.LABEL_REPLICA_TYPE: rt.lower(),
        naming.LABEL_JOB_NAME: job.name,
        naming.LABEL_OPERATOR_NAME: job.CONTROLLER_NAME,
    }
    if not (isinstance(job, jobs.MPIJob) and rt == "Launcher"):
        labels[naming.LABEL_REPLICA_INDEX] = str(index)
    metadata: dict[str, Any] = {"name": f"{job.name}-{rt.lower()}-{index}", "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2024-01-01T11:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": job.DEFAULT_CONTAINER, "state": {"terminated": {"exitCode": exit_code}}}
        ]
    return {"metadata": metadata, "status": status}


def pods_of(job: jobs.Job, spec: dict[str, list[str]]) -> list[dict[str, Any]]:
    return [make_pod(job, rt, i, phase) for rt, phases in spec.items() for i, phase in enumerate(phases)]


def true_conditions(outcome: outcomes.Outcome) -> set[str]:
    return {c.type for c in outcome.status.conditions or [] if c.status == "True"}


def replica(outcome: outcomes.Outcome, rt: str) -> tuple[int, int, int]:
    rs = (outcome.status.replica_statuses or {})[rt]
    return (rs.active or 0, rs.succeeded or 0, rs.failed or 0)


def test_replica_counting_treats_a_running_pod_being_deleted_as_failed() -> None:
    job = make_job("TFJob", {"Worker": (7, "Never")})
    pods = [
        make_pod(job, "Worker", 0, "Failed"),
        make_pod(job, "Worker", 1, "Failed"),
        make_pod(job, "Worker", 2, "Succeeded"),
        make_pod(job, "Worker", 3, "Succeeded"),
        make_pod(job, "Worker", 4, "Succeeded"),
        make_pod(job, "Worker", 5, "Running"),
        make_pod(job, "Worker", 6, "Running", deleting=True),
    ]
    outcome = statuses.compute(job, pods, NOW)
    assert replica(outcome, "Worker") == (1, 3, 3)


TF_CASES = [
    pytest.param({"Chief": (1, "Never"), "Worker": (1, "Never")}, {"Chief": ["Succeeded"], "Worker": ["Running"]}, "Succeeded", id="chief-succeeded-job-succeeds"),
    pytest.param({"Chief": (1, "Never"), "Worker": (1, "Never")}, {"Chief": ["Running"], "Worker": ["Running"]}, "Running", id="chief-running-job-runs"),
    pytest.param({"Chief": (1, "Never"), "Worker": (1, "Never")}, {"Chief": ["Failed"], "Worker": ["Running"]}, "Failed", id="chief-failed-job-fails"),
    pytest.param({"Worker": (1, "Never")}, {"Worker": ["Failed"]}, "Failed", id="single-worker-failed"),
    pytest.param({"Worker": (1, "Never")}, {"Worker": ["Succeeded"]}, "Succeeded", id="single-worker-succeeded"),
    pytest.param({"Worker": (1, "Never")}, {"Worker": ["Running"]}, "Running", id="single-worker-running"),
    pytest.param({"Worker": (4, "Never"), "PS": (2, "Never")}, {"Worker": ["Succeeded", "Succeeded", "Running", "Running"], "PS": ["Running", "Running"]}, "Running", id="two-of-four-workers-done-without-exit-code"),
    pytest.param({"Worker": (4, "Never"), "PS": (2, "Never")}, {"Worker": ["Running", "Running", "Failed", "Failed"], "PS": ["Running", "Running"]}, "Failed", id="two-workers-failed"),
    pytest.param({"Chief": (1, "Never"), "Worker": (4, "Never"), "PS": (2, "Never")}, {"Chief": ["Running"], "Worker": ["Running"] * 4, "PS": ["Running", "Failed"]}, "Failed", id="chief-running-ps-failed"),
    pytest.param({"Chief": (1, "Never"), "Worker": (4, "Never"), "PS": (2, "Never")}, {"Chief": ["Failed"], "Worker": ["Succeeded"] * 4, "PS": ["Running"] * 2}, "Failed", id="chief-failed-workers-succeeded"),
]


@pytest.mark.parametrize(("replicas", "phases", "expected"), TF_CASES)
def test_tfjob_conditions_follow_the_chief_or_the_workers(
    replicas: dict[str, tuple[int, str]], phases: dict[str, list[str]], expected: str
) -> None:
    job = make_job("TFJob", replicas)
    outcome = statuses.compute(job, pods_of(job, phases), NOW)
    assert expected in true_conditions(outcome)
    finished = {"Succeeded", "Failed"} & true_conditions(outcome)
    assert not (finished and "Running" in true_conditions(outcome))


def test_tfjob_worker0_exit_zero_succeeds_unless_all_workers_policy() -> None:
    job = make_job("TFJob", {"Worker": (4, "Never")})
    pods = [make_pod(job, "Worker", 0, "Succeeded", exit_code=0)] + [
        make_pod(job, "Worker", i, "Running") for i in (1, 2, 3)
    ]
    assert "Succeeded" in true_conditions(statuses.compute(job, pods, NOW))
    all_workers = make_job("TFJob", {"Worker": (4, "Never")}, successPolicy="AllWorkers")
    assert true_conditions(statuses.compute(all_workers, pods, NOW)) == {"Created", "Running"}


def test_tfjob_chief_succeeded_with_failed_workers_is_not_also_failed() -> None:
    job = make_job("TFJob", {"Chief": (1, "Never"), "Worker": (4, "Never")})
    pods = pods_of(job, {"Chief": ["Succeeded"], "Worker": ["Failed"] * 4})
    assert true_conditions(statuses.compute(job, pods, NOW)) == {"Created", "Succeeded"}


def test_tfjob_exit_code_policy_with_signal_exit_restarts() -> None:
    job = make_job("TFJob", {"Chief": (1, "ExitCode"), "Worker": (4, "ExitCode")})
    pods = [make_pod(job, "Chief", 0, "Failed", exit_code=130)] + [
        make_pod(job, "Worker", i, "Failed", exit_code=130) for i in range(4)
    ]
    outcome = statuses.compute(job, pods, NOW)
    assert "Restarting" in true_conditions(outcome)
    assert "Failed" not in true_conditions(outcome)


def test_exit_code_below_128_fails_the_job_with_the_upstream_message_and_a_completion_time() -> None:
    job = make_job("TFJob", {"Worker": (1, "ExitCode")})
    job.metadata.name = "test-noretry-exit-code"
    outcome = statuses.compute(job, [make_pod(job, "Worker", 0, "Failed", exit_code=1)], NOW)
    failed = conditions.find(outcome.status, "Failed")
    assert failed is not None and failed.reason == "TFJobFailed"
    assert failed.message == 'job "test-noretry-exit-code" is failing because "Worker" replica(s) failed.'
    assert outcome.status.completion_time == NOW


@pytest.mark.parametrize(
    ("code", "retryable"),
    [pytest.param(c, c >= 128, id=str(c)) for c in (1, 2, 3, 130, 138)],
)
def test_retryable_exit_codes(code: int, retryable: bool) -> None:
    assert objects.is_retryable_exit_code(code) is retryable


def test_pytorch_master_decides_and_sets_the_scale_selector() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")})
    running = statuses.compute(job, pods_of(job, {"Master": ["Running"], "Worker": ["Running", "Pending"]}), NOW)
    cond = conditions.find(running.status, "Running")
    assert cond is not None and (cond.reason, cond.message) == ("PyTorchJobRunning", "PyTorchJob test-job is running.")
    assert (running.status.replica_statuses or {})["Worker"].selector == (
        "training.kubeflow.org/job-name=test-job,training.kubeflow.org/operator-name=pytorchjob-controller,"
        "training.kubeflow.org/replica-type=worker"
    )
    assert running.status.start_time == NOW
    done = statuses.compute(job, pods_of(job, {"Master": ["Succeeded"], "Worker": ["Running", "Running"]}), NOW)
    succeeded = conditions.find(done.status, "Succeeded")
    assert succeeded is not None and succeeded.message == "PyTorchJob test-job is successfully completed."
    assert done.status.completion_time == NOW
    assert replica(done, "Worker") == (0, 2, 0)


def test_pytorch_worker_failed_under_never_fails_the_job() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "Never"), "Worker": (2, "Never")})
    outcome = statuses.compute(job, pods_of(job, {"Master": ["Running"], "Worker": ["Running", "Failed"]}), NOW)
    failed = conditions.find(outcome.status, "Failed")
    assert failed is not None
    assert (failed.reason, failed.message) == ("PyTorchJobFailed", "PyTorchJob test-job is failed because 1 Worker replica(s) failed.")


def test_elastic_pytorch_succeeds_when_one_worker_succeeds() -> None:
    job = make_job("PyTorchJob", {"Worker": (1, "OnFailure")}, elasticPolicy={"minReplicas": 1, "maxReplicas": 3})
    outcome = statuses.compute(job, pods_of(job, {"Worker": ["Succeeded"]}), NOW)
    assert replica(outcome, "Worker") == (0, 1, 0)
    assert "Succeeded" in true_conditions(outcome)


@pytest.mark.parametrize(
    ("kind", "replicas", "phases", "message"),
    [
        pytest.param("JAXJob", {"Worker": (2, "Never")}, {"Worker": ["Running", "Running"]}, "JAXJob ns/test-job is running.", id="jax"),
        pytest.param("PaddleJob", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")}, {"Master": ["Running"]}, "PaddleJob test-job is running.", id="paddle"),
        pytest.param("XGBoostJob", {"Master": (1, "Never"), "Worker": (2, "ExitCode")}, {"Master": ["Running"]}, "XGBoostJob test-job is running.", id="xgboost"),
        pytest.param("MPIJob", {"Launcher": (1, "Never"), "Worker": (2, "Never")}, {"Launcher": ["Running"]}, "MPIJob test-job is running.", id="mpi"),
    ],
)
def test_running_messages_per_kind(kind: str, replicas: dict[str, tuple[int, str]], phases: dict[str, list[str]], message: str) -> None:
    job = make_job(kind, replicas)
    running = conditions.find(statuses.compute(job, pods_of(job, phases), NOW).status, "Running")
    assert running is not None and running.message == message and running.reason == f"{kind}Running"


def test_xgboost_failed_pod_under_on_failure_fails_the_job() -> None:
    job = make_job("XGBoostJob", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")})
    outcome = statuses.compute(job, pods_of(job, {"Master": ["Running"], "Worker": ["Failed", "Running"]}), NOW)
    assert "Failed" in true_conditions(outcome)


@pytest.mark.parametrize(
    ("launcher", "workers", "expected"),
    [
        pytest.param("Succeeded", ["Running"] * 4, {"Launcher": (0, 1, 0), "Worker": (0, 0, 0)}, id="launcher-succeeded"),
        pytest.param("Failed", ["Running"] * 4, {"Launcher": (0, 0, 1), "Worker": (0, 0, 0)}, id="launcher-failed"),
        pytest.param("Running", ["Pending"] * 8, {"Launcher": (1, 0, 0), "Worker": (0, 0, 0)}, id="workers-pending"),
        pytest.param("Running", ["Running"] * 8, {"Launcher": (1, 0, 0), "Worker": (8, 0, 0)}, id="workers-running"),
        pytest.param("Pending", ["Running"] * 16, {"Launcher": (0, 0, 0), "Worker": (16, 0, 0)}, id="launcher-pending"),
    ],
)
def test_mpi_replica_statuses(launcher: str, workers: list[str], expected: dict[str, tuple[int, int, int]]) -> None:
    job = make_job("MPIJob", {"Launcher": (1, "Never"), "Worker": (len(workers), "Never")})
    pods = [make_pod(job, "Launcher", 0, launcher)] + [make_pod(job, "Worker", i, p) for i, p in enumerate(workers)]
    outcome = statuses.compute(job, pods, NOW)
    assert {rt: replica(outcome, rt) for rt in ("Launcher", "Worker")} == expected
    if launcher == "Failed":
        failed = conditions.find(outcome.status, "Failed")
        assert failed is not None and failed.reason == "MPIJobMPIJobFailed"


def test_created_suspended_job_has_created_and_suspended_and_no_start_time() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "OnFailure")}, runPolicy={"suspend": True})
    outcome = statuses.compute(job, [], NOW)
    assert [(c.type, c.status, c.reason, c.message) for c in outcome.status.conditions or []] == [
        ("Created", "True", "PyTorchJobCreated", "PyTorchJob test-job is created."),
        ("Suspended", "True", "PyTorchJobSuspended", "PyTorchJob test-job is suspended."),
    ]
    assert outcome.status.start_time is None


def test_suspend_then_resume_keeps_then_resets_start_time() -> None:
    job = make_job("TFJob", {"Chief": (1, "Never"), "Worker": (1, "Never")})
    running = statuses.compute(job, pods_of(job, {"Chief": ["Running"], "Worker": ["Running"]}), NOW)
    job.status = running.status
    job.run_policy.suspend = True
    later = NOW + dt.timedelta(minutes=1)
    suspended = statuses.compute(job, [], later)
    assert suspended.status.start_time == NOW
    assert [(c.type, c.status, c.reason) for c in suspended.status.conditions or []] == [
        ("Created", "True", "TFJobCreated"),
        ("Running", "False", "TFJobSuspended"),
        ("Suspended", "True", "TFJobSuspended"),
    ]
    assert replica(suspended, "Chief") == (0, 0, 0)
    job.status = suspended.status
    job.run_policy.suspend = False
    resumed_at = later + dt.timedelta(minutes=1)
    resumed = statuses.compute(job, pods_of(job, {"Chief": ["Running"], "Worker": ["Running"]}), resumed_at)
    assert [(c.type, c.status, c.reason, c.message) for c in resumed.status.conditions or []] == [
        ("Created", "True", "TFJobCreated", "TFJob test-job is created."),
        ("Suspended", "False", "TFJobResumed", "TFJob test-job is resumed."),
        ("Running", "True", "TFJobRunning", "TFJob ns/test-job is running."),
    ]
    assert resumed.status.start_time == resumed_at


def test_externally_managed_job_never_gets_conditions() -> None:
    job = make_job("TFJob", {"Worker": (1, "Never")}, runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    assert statuses.compute(job, pods_of(job, {"Worker": ["Running"]}), NOW).status.conditions is None


def test_a_reconciler_verdict_fails_the_job_without_recounting() -> None:
    job = make_job("TFJob", {"Worker": (1, "OnFailure")}, runPolicy={"backoffLimit": 1})
    verdict = outcomes.Verdict("TFJobFailed", "Job test-job has failed because it has reached the specified backoff limit")
    outcome = statuses.compute(job, pods_of(job, {"Worker": ["Running"]}), NOW, verdict)
    failed = conditions.find(outcome.status, "Failed")
    assert failed is not None and failed.message == verdict.message
    assert outcome.status.completion_time == NOW
    assert outcome.events == [Event("Normal", "TFJobFailed", verdict.message)]


def test_nothing_changes_when_nothing_happened() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")})
    pods = pods_of(job, {"Master": ["Running"], "Worker": ["Running", "Running"]})
    first = statuses.compute(job, pods, NOW)
    job.status = first.status
    second = statuses.compute(job, pods, NOW + dt.timedelta(seconds=30))
    assert not outcomes.differs(job.status, second.status)
    assert second.events == []
