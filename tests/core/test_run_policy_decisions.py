"""Run-policy decisions that the pipeline tests (tests/pipeline/test_run_policy.py) rest on:
an update validated against the old job, and the order of cleanup deletes."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.api import common, jobs
from shared.core import reconciling
from shared.core.settings import OperatorSettings
from tests.core.test_backoff import owned
from tests.core.test_statuses import make_job, make_pod

NOW = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)
KUEUE = "kueue.x-k8s.io/multikueue"


def service_of(job: jobs.Job, pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": pod["metadata"]["name"], "uid": "s-" + pod["metadata"]["name"],
        "ownerReferences": [{"kind": job.KIND, "uid": job.metadata.uid, "controller": True}]}}


def tf_job(**run_policy: Any) -> jobs.Job:
    return make_job("TFJob", {"Worker": (2, "Never")}, runPolicy=run_policy)


@pytest.mark.parametrize(("old_policy", "new_policy", "invalid"), [
    pytest.param({}, {"managedBy": KUEUE}, "spec.runPolicy.managedBy", id="managed-by-handed-over"),
    pytest.param({"managedBy": KUEUE}, {}, "spec.runPolicy.managedBy", id="managed-by-taken-back"),
    pytest.param({"schedulingPolicy": {"queue": "a"}}, {"schedulingPolicy": {"queue": "b"}},
                 "spec.runPolicy.schedulingPolicy.queue is immutable", id="queue-changed"),
    pytest.param({"managedBy": KUEUE}, {"managedBy": ""}, None, id="between-other-controllers-left-alone"),
    pytest.param({}, {"suspend": True}, None, id="suspend-is-mutable"),
])
def test_an_update_is_validated_against_the_old_job(
    old_policy: dict[str, Any], new_policy: dict[str, Any], invalid: str | None,
) -> None:
    old, new = tf_job(**old_policy), tf_job(**new_policy)
    pods = owned(new, [make_pod(new, "Worker", i, "Running") for i in range(2)])
    decision = reconciling.decide(new, pods + [service_of(new, p) for p in pods], NOW, OperatorSettings(), old=old)
    if invalid is None:
        assert decision.verdict is None or not decision.verdict.reason.endswith("FailedValidation")
        return
    assert decision.verdict is not None and decision.verdict.reason == "TFJobFailedValidation"
    assert invalid in decision.verdict.message
    assert {(d.kind, d.name) for d in decision.deletes} == {
        (k, f"test-job-worker-{i}") for k in ("Pod", "Service") for i in range(2)}


def test_a_replicas_service_is_deleted_before_its_pod() -> None:
    job = tf_job(suspend=True)
    pods = owned(job, [make_pod(job, "Worker", i, "Running") for i in range(2)])
    decision = reconciling.decide(job, pods + [service_of(job, p) for p in pods], NOW, OperatorSettings())
    assert [(d.kind, d.name) for d in decision.deletes] == [
        ("Service", "test-job-worker-0"), ("Pod", "test-job-worker-0"),
        ("Service", "test-job-worker-1"), ("Pod", "test-job-worker-1"),
    ]


@pytest.mark.parametrize("policy", ["All", "Running"])
def test_a_finished_jobs_service_whose_pod_is_gone_or_going_is_deleted_all_the_same(policy: str) -> None:
    job = make_job("TFJob", {"Worker": (2, "Never")}, runPolicy={"cleanPodPolicy": policy})
    job.status = common.JobStatus(conditions=[common.JobCondition(type="Succeeded", status="True")])
    going = make_pod(job, "Worker", 0, "Running")
    going["metadata"]["deletionTimestamp"] = "2024-01-01T12:00:00Z"
    gone = make_pod(job, "Worker", 1, "Running")
    services = [service_of(job, going), service_of(job, gone)]
    decision = reconciling.decide(job, owned(job, [going]) + services, NOW, OperatorSettings())
    assert sorted((d.kind, d.name) for d in decision.deletes) == [
        ("Service", "test-job-worker-0"), ("Service", "test-job-worker-1")]
