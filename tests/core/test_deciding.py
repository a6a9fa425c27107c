"""shared/core/deciding.py: the decisions of one kubeflow.org/v1 reconcile pass.

* backoffLimit (spec §6.7) and kto's fix of its quirk: restarts the reconciler makes count too.
* Run-policy decisions that the pipeline tests (tests/pipeline/test_run_policy.py) rest on:
  an update validated against the old job, and the order of cleanup deletes.
* Issue 10: a failure verdict lives on the job (``kto.dev/failure``), never in a record alone.
  The reconciler records a verdict it reaches on the job before acting on it; a job carrying one
  loses every pod and Service whatever its conditions and cleanPodPolicy say (§6.6, backoff /
  deadline row), so a successor finishes a cleanup its predecessor was killed in; the status
  worker writes Failed from it with upstream's reason and message; an annotation that is not one
  the reconciler writes counts for nothing; a verdict that came in a record only is unconfirmed.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from shared.api import common, jobs
from shared.core import conditions, defaulting, outcomes, deciding, statuses, views
from shared.core.settings import OperatorSettings
from tests.core.test_statuses import make_job, make_pod

NOW = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc)


def with_restarts(job: jobs.Job, count: int) -> jobs.Job:
    return job.model_copy(update={"metadata": job.metadata.model_copy(
        update={"annotations": {deciding.RESTARTS_ANNOTATION: str(count)}})})


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
    assert deciding.past_backoff_limit(job, pods) is past


def test_without_a_failed_pod_the_count_alone_fails_nothing() -> None:
    job = with_restarts(exit_code_job(1), 5)
    pods = [make_pod(job, "Master", 0, "Running"), make_pod(job, "Worker", 0, "Running")]
    assert deciding.past_backoff_limit(job, pods) is False


def test_a_restart_decision_says_what_the_count_must_become() -> None:
    job = with_restarts(exit_code_job(3), 1)
    pods = owned(job, [make_pod(job, "Master", 0, "Running"), make_pod(job, "Worker", 0, "Failed", exit_code=137)])
    decision = deciding.decide(job, pods, NOW, OperatorSettings())
    assert [ref.reason for ref in decision.deletes] == ["restart"]
    assert decision.restarts == 2


def test_without_a_backoff_limit_restarts_are_not_counted() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "ExitCode"), "Worker": (1, "ExitCode")})
    pods = owned(job, [make_pod(job, "Master", 0, "Running"), make_pod(job, "Worker", 0, "Failed", exit_code=137)])
    decision = deciding.decide(job, pods, NOW, OperatorSettings())
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
        deciding.RESTARTS_ANNOTATION: str(count),
        deciding.COUNTED_ANNOTATION: ",".join(p["metadata"]["uid"] for p in pods)}})})


def test_a_failed_pod_counted_by_a_pass_cut_short_is_deleted_again_without_counting_it_again() -> None:
    job = exit_code_job(3)
    master, worker = failed_pod(job, "Master", 0, "Running"), failed_pod(job, "Worker", 0, "Failed", exit_code=137)
    first = deciding.decide(job, owned(job, [master, worker]), NOW, OperatorSettings())
    assert first.restarts == 1 and first.counted == (worker["metadata"]["uid"],)
    again = deciding.decide(counted(job, 1, [worker]), owned(job, [master, worker]), NOW, OperatorSettings())
    assert [(ref.name, ref.reason) for ref in again.deletes] == [(worker["metadata"]["name"], "restart")]
    assert again.restarts is None


def test_a_count_at_the_limit_does_not_fail_the_job_for_the_failure_it_already_counted() -> None:
    job = exit_code_job(2)
    master = failed_pod(job, "Master", 0, "Failed", exit_code=130)
    worker = failed_pod(job, "Worker", 0, "Running")
    cut_short = counted(job, 2, [master])
    assert deciding.past_backoff_limit(cut_short, [master, worker]) is False
    decision = deciding.decide(cut_short, owned(cut_short, [master, worker]), NOW, OperatorSettings())
    assert decision.verdict is None
    assert [ref.reason for ref in decision.deletes] == ["restart"]


def test_a_new_failure_beside_a_counted_one_is_counted_alone() -> None:
    job = make_job("PyTorchJob", {"Master": (1, "ExitCode"), "Worker": (2, "ExitCode")}, runPolicy={"backoffLimit": 5})
    master = failed_pod(job, "Master", 0, "Running")
    first, second = (failed_pod(job, "Worker", i, "Failed", exit_code=137) for i in (0, 1))
    decision = deciding.decide(counted(job, 1, [first]), owned(job, [master, first, second]), NOW,
                                  OperatorSettings())
    assert decision.restarts == 2
    assert set(decision.counted) == {first["metadata"]["uid"], second["metadata"]["uid"]}


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
    decision = deciding.decide(new, pods + [service_of(new, p) for p in pods], NOW, OperatorSettings(), old=old)
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
    decision = deciding.decide(job, pods + [service_of(job, p) for p in pods], NOW, OperatorSettings())
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
    decision = deciding.decide(job, owned(job, [going]) + services, NOW, OperatorSettings())
    assert sorted((d.kind, d.name) for d in decision.deletes) == [
        ("Service", "test-job-worker-0"), ("Service", "test-job-worker-1")]


DEADLINE = outcomes.Verdict(
    "PyTorchJobFailed", "Job test-job has failed because it was active longer than specified deadline", "deadline")


def pytorch_job(**run_policy: Any) -> jobs.Job:
    return make_job("PyTorchJob", {"Master": (1, "Never"), "Worker": (2, "Never")}, runPolicy=run_policy)


def with_annotation(job: jobs.Job, value: str) -> jobs.Job:
    job.metadata.annotations = {**(job.metadata.annotations or {}), outcomes.FAILURE_ANNOTATION: value}
    return job


def children(job: jobs.Job) -> list[dict[str, Any]]:
    pods = owned(job, [make_pod(job, "Master", 0, "Running")] + [make_pod(job, "Worker", i, "Running") for i in range(2)])
    return pods + [service_of(job, p) for p in pods]


ALL_CHILDREN = {(k, n) for k in ("Pod", "Service") for n in ("test-job-master-0", "test-job-worker-0", "test-job-worker-1")}


def failed_status(verdict: outcomes.Verdict) -> common.JobStatus:
    return common.JobStatus(
        conditions=[common.JobCondition(type="Failed", status="True", reason=verdict.reason, message=verdict.message)],
        start_time=NOW - dt.timedelta(seconds=10), completion_time=NOW - dt.timedelta(seconds=1))


@pytest.mark.parametrize(("run_policy", "verdict"), [
    pytest.param({"activeDeadlineSeconds": 3}, DEADLINE, id="deadline"),
    pytest.param({"backoffLimit": 0}, outcomes.Verdict(
        "PyTorchJobFailed", "Job test-job has failed because it has reached the specified backoff limit", "backoff"),
        id="backoff"),
])
@pytest.mark.parametrize("status", ["not-yet-failed", "failed"])
def test_a_job_with_a_recorded_verdict_loses_every_pod_and_service_whatever_its_clean_pod_policy(
    run_policy: dict[str, Any], verdict: outcomes.Verdict, status: str,
) -> None:
    """A reconciler killed after recording the verdict (and the status worker writing Failed
    from it) leaves pods; its successor deletes them all, not by cleanPodPolicy None."""
    job = with_annotation(pytorch_job(cleanPodPolicy="None", **run_policy), outcomes.failure_annotation(verdict, NOW))
    job.status = failed_status(verdict) if status == "failed" else common.JobStatus(start_time=NOW)
    decision = deciding.decide(job, children(job), NOW, OperatorSettings())
    assert {(d.kind, d.name) for d in decision.deletes} == ALL_CHILDREN
    assert {d.reason for d in decision.deletes} == {"failed"}
    assert decision.verdict is None, "already recorded: not decided again"
    assert decision.creates == []


def test_a_recorded_verdict_leaves_only_what_is_still_there_to_delete() -> None:
    job = with_annotation(pytorch_job(activeDeadlineSeconds=3), outcomes.failure_annotation(DEADLINE, NOW))
    job.status = failed_status(DEADLINE)
    pods = owned(job, [make_pod(job, "Worker", 1, "Running"), make_pod(job, "Worker", 0, "Running", deleting=True)])
    decision = deciding.decide(job, pods + [service_of(job, pods[0])], NOW, OperatorSettings())
    assert [(d.kind, d.name) for d in decision.deletes] == [
        ("Service", "test-job-worker-1"), ("Pod", "test-job-worker-1")]


def test_a_job_that_failed_otherwise_keeps_its_pods_by_clean_pod_policy_none() -> None:
    """Without the annotation (ExitCode permanent failure), a Failed job is a finished job (§6.6)."""
    job = pytorch_job(cleanPodPolicy="None")
    job.status = failed_status(outcomes.Verdict("PyTorchJobFailed", 'job "test-job" is failing', ""))
    assert deciding.decide(job, children(job), NOW, OperatorSettings()).deletes == []


def test_a_succeeded_job_keeps_clean_pod_policy_even_with_a_verdict_recorded_too_late() -> None:
    job = with_annotation(pytorch_job(cleanPodPolicy="None"), outcomes.failure_annotation(DEADLINE, NOW))
    job.status = common.JobStatus(conditions=[common.JobCondition(type="Succeeded", status="True")])
    assert deciding.decide(job, children(job), NOW, OperatorSettings()).deletes == []


@pytest.mark.parametrize("value", [
    pytest.param("yes", id="not-json"),
    pytest.param(json.dumps(["PyTorchJobFailed"]), id="not-an-object"),
    pytest.param(json.dumps({"reason": "PyTorchJobFailed", "message": "m", "kind": "forged"}), id="unknown-kind"),
    pytest.param(json.dumps({"reason": "TFJobFailed", "message": "m", "kind": "deadline"}), id="another-kinds-reason"),
    pytest.param(json.dumps({"reason": "PyTorchJobFailed", "message": "m", "kind": "validation"}),
                 id="reason-not-matching-kind"),
    pytest.param(json.dumps({"reason": "PyTorchJobFailed", "message": "", "kind": "deadline"}), id="no-message"),
])
def test_an_annotation_the_reconciler_does_not_write_counts_for_nothing(value: str) -> None:
    job = with_annotation(pytorch_job(), value)
    job.status = common.JobStatus(start_time=NOW)
    assert outcomes.recorded_verdict(job) is None
    decision = deciding.decide(job, [], NOW, OperatorSettings())
    assert decision.deletes == [] and decision.verdict is None
    assert len([m for m in decision.creates if m["kind"] == "Pod"]) == 3


@pytest.mark.parametrize(("run_policy", "status", "kind"), [
    pytest.param({"activeDeadlineSeconds": 3}, common.JobStatus(start_time=NOW - dt.timedelta(seconds=5)), "deadline",
                 id="deadline"),
    pytest.param({}, None, "validation", id="validation"),
])
def test_a_new_verdict_says_its_kind_and_round_trips_through_the_annotation(
    run_policy: dict[str, Any], status: common.JobStatus | None, kind: str,
) -> None:
    job = pytorch_job(**run_policy)
    job.status = status
    if kind == "validation":
        job.metadata.name = "Test-Job"  # not a DNS label
    verdict = deciding.decide(job, children(job), NOW, OperatorSettings()).verdict
    assert verdict is not None and verdict.kind == kind
    assert outcomes.recorded_verdict(with_annotation(job, outcomes.failure_annotation(verdict, NOW))) == verdict


def test_the_status_is_failed_with_the_recorded_reason_and_message() -> None:
    job = with_annotation(pytorch_job(activeDeadlineSeconds=3), outcomes.failure_annotation(DEADLINE, NOW))
    job.status = common.JobStatus(start_time=NOW - dt.timedelta(seconds=5))
    verdict = outcomes.recorded_verdict(job)
    outcome = statuses.compute(defaulting.set_defaults(job), children(job)[:3], NOW, verdict)
    failed = conditions.find(outcome.status, conditions.FAILED)
    assert failed is not None and (failed.status, failed.reason, failed.message) == (
        "True", DEADLINE.reason, DEADLINE.message)
    assert outcome.status.completion_time == NOW


def job_manifest(rv: int, annotation: str | None, uid: str = "u1") -> dict[str, Any]:
    annotations = {} if annotation is None else {outcomes.FAILURE_ANNOTATION: annotation}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": uid, "resourceVersion": str(rv),
                         "annotations": annotations}}


def test_a_verdict_that_came_in_a_record_only_is_unconfirmed_until_the_api_server_shows_it() -> None:
    value = outcomes.failure_annotation(DEADLINE, NOW)
    view = views.JobView()
    view.replace_job(job_manifest(5, None))
    assert not view.unconfirmed(outcomes.FAILURE_ANNOTATION)
    view.observe_job(job_manifest(6, value), deleted=False)  # a record: perhaps forged
    assert view.unconfirmed(outcomes.FAILURE_ANNOTATION)
    view.replace_job(job_manifest(6, value))  # the API server says so
    assert not view.unconfirmed(outcomes.FAILURE_ANNOTATION)
    view.observe_job(job_manifest(7, value), deleted=False)  # a later watch event, same verdict
    assert not view.unconfirmed(outcomes.FAILURE_ANNOTATION)
    view.observe_job(job_manifest(9, value, uid="u2"), deleted=False)  # a new job of the same name
    assert view.unconfirmed(outcomes.FAILURE_ANNOTATION)


# Kueue (docs/fleets.md): it creates a job suspended, then, admitting it, writes its flavour into each
# replica's template and unsuspends it in one patch (jobframework's startJob → podset.Merge); on
# preemption it suspends it and puts the templates back (stopJob → RestorePodSetsInfo).

KUEUE_NODE_SELECTOR = {"node.kubernetes.io/instance-type": "a100"}
KUEUE_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


def admitted_by_kueue(job: jobs.Job) -> jobs.Job:
    """``job`` as Kueue's admission patch leaves it: unsuspended, each template with the flavour's node
    labels, its toleration and the podSet label (the replica type, lower-cased)."""
    document = job.model_dump(by_alias=True, exclude_none=True)
    document["spec"]["runPolicy"]["suspend"] = False
    for replica_type, spec in document["spec"]["pytorchReplicaSpecs"].items():
        template = spec["template"]
        template.setdefault("metadata", {}).setdefault("labels", {})["kueue.x-k8s.io/podset"] = replica_type.lower()
        template["spec"]["nodeSelector"] = KUEUE_NODE_SELECTOR
        template["spec"]["tolerations"] = [KUEUE_TOLERATION]
    return jobs.load(document)


def test_a_job_kueue_holds_makes_no_pod_and_once_admitted_its_pods_carry_what_kueue_wrote() -> None:
    held = make_job("PyTorchJob", {"Master": (1, "Never"), "Worker": (2, "Never")}, runPolicy={"suspend": True})
    assert not [c for c in deciding.decide(held, [], NOW, OperatorSettings()).creates if c.get("kind") == "Pod"]

    made = [c for c in deciding.decide(admitted_by_kueue(held), [], NOW, OperatorSettings()).creates
            if c.get("kind") == "Pod"]
    assert sorted(p["metadata"]["name"] for p in made) == [
        f"{held.name}-master-0", f"{held.name}-worker-0", f"{held.name}-worker-1"]
    for pod in made:
        assert pod["spec"]["nodeSelector"] == KUEUE_NODE_SELECTOR
        assert pod["spec"]["tolerations"] == [KUEUE_TOLERATION]
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == pod["metadata"]["labels"][
            "training.kubeflow.org/replica-type"]


def test_a_job_kueue_preempts_loses_every_pod_and_service_and_is_no_longer_active_at_once() -> None:
    running = admitted_by_kueue(make_job("PyTorchJob", {"Master": (1, "Never"), "Worker": (1, "Never")},
                                         runPolicy={"suspend": True}))
    pods = owned(running, [make_pod(running, "Master", 0, "Running"), make_pod(running, "Worker", 0, "Running")])
    stored = statuses.compute(running, pods, NOW).status
    assert {rt: r.active for rt, r in (stored.replica_statuses or {}).items()} == {"Master": 1, "Worker": 1}

    document = running.model_dump(by_alias=True, exclude_none=True)
    document["spec"]["runPolicy"]["suspend"] = True
    document["status"] = stored.dump()
    preempted = jobs.load(document)
    deleted = deciding.decide(preempted, pods, NOW, OperatorSettings()).deletes
    assert sorted((d.kind, d.name, d.reason) for d in deleted) == [
        ("Pod", f"{running.name}-master-0", "suspend"), ("Pod", f"{running.name}-worker-0", "suspend")]
    # Kueue gives the quota back only once the job is not active (jobframework's IsActive: any
    # replicaStatuses[*].active): the pods are still there, the status says 0 already, as upstream's.
    status = statuses.compute(preempted, pods, NOW).status
    assert not any(r.active for r in (status.replica_statuses or {}).values())
    assert [(c.type, c.status, c.reason) for c in status.conditions or [] if c.type in ("Running", "Suspended")] == [
        ("Running", "False", "PyTorchJobSuspended"), ("Suspended", "True", "PyTorchJobSuspended")]
