"""One reconcile of a TrainJob as Trainer v2.3's controller does it: objects made from the
runtime (or its snapshot), the JobSet changed only while suspended, status and Events."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.core import effects
from shared.core.trainer import deciding, family, planning

from . import trainer_builders as b


def decide(job: dict[str, Any], *children: dict[str, Any], now: dt.datetime = b.NOW) -> effects.Effects:
    return deciding.decide(job, list(children), now, lambda: b.KEYS)


def conditions(decision: effects.Effects) -> list[tuple[str, str, str]]:
    assert decision.status is not None
    return [(c["type"], c["status"], c["reason"]) for c in decision.status.dump().get("conditions", [])]


def running(job: dict[str, Any], runtime: dict[str, Any], **jobset: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JobSet and snapshot of a job that started (as the API server returned them)."""
    return (b.owned(job, planning.build(job, runtime).jobset, **jobset),
            b.owned(job, planning.snapshot(job, runtime)))


def test_a_new_trainjob_gets_its_runtime_snapshot_and_jobset_and_no_status() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    decision = decide(job, runtime)
    assert [(m["kind"], m["metadata"]["name"]) for m in decision.creates] == [
        ("ConfigMap", "job-runtime-snapshot"), ("JobSet", "job")]
    assert decision.status is None and decision.events == []


def test_a_trainingruntime_is_found_in_the_jobs_namespace_only() -> None:
    runtime = b.runtime("torch-distributed") | {"kind": "TrainingRuntime"}
    runtime["metadata"] = {**runtime["metadata"], "namespace": "elsewhere"}
    job = b.train_job(kind="TrainingRuntime")
    assert decide(job, runtime).creates == []
    runtime["metadata"]["namespace"] = "default"
    assert [m["kind"] for m in decide(job, runtime).creates] == ["ConfigMap", "JobSet"]


@pytest.mark.parametrize(("kind", "message"), [
    pytest.param("ClusterTrainingRuntime", 'not found ClusterTrainingRuntime specified in TrainJob: '
                 'clustertrainingruntimes.trainer.kubeflow.org "gone" not found', id="cluster"),
    pytest.param("TrainingRuntime", 'TrainingRuntime specified in TrainJob is not found: '
                 'trainingruntimes.trainer.kubeflow.org "gone" not found', id="namespaced"),
])
def test_a_missing_runtime_is_upstreams_event_and_a_failed_condition_saying_so(kind: str, message: str) -> None:
    decision = decide(b.train_job(runtime_name="gone", kind=kind))
    assert decision.creates == [] and decision.error == message
    assert [(e.type, e.reason, e.message) for e in decision.events] == [
        ("Warning", "TrainJobResourcesCreationFailed", f"TrainJob resources reconciliation failed: {message}")]
    assert conditions(decision) == [("Failed", "True", "TrainJobResourcesCreationFailed")]
    assert decision.requeue_after == deciding.RETRY_AFTER, "runtimes are not watched: look again"


def test_the_failure_of_a_missing_runtime_goes_once_the_runtime_is_there() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    failed = decide(job)
    assert failed.status is not None
    job["status"] = failed.status.dump()
    decision = decide(job, runtime)
    assert [m["kind"] for m in decision.creates] == ["ConfigMap", "JobSet"]
    assert decision.status is not None and decision.status.dump() == {}


def test_an_unsupported_runtime_kind_fails_the_job_with_upstreams_reason() -> None:
    job = b.train_job()
    job["spec"]["runtimeRef"].update(apiGroup="example.com", kind="Runtime")
    decision = decide(job)
    assert conditions(decision) == [("Failed", "True", "TrainingRuntimeNotSupported")]
    assert decision.status is not None
    assert decision.status.dump()["conditions"][0]["message"] == "unsupported runtime: Runtime.example.com"


def test_a_runtime_changed_after_the_start_does_not_change_the_job_the_snapshot_does() -> None:
    job, runtime = b.train_job(suspend=True), b.runtime("torch-distributed")
    jobset, snapshot = running(job, runtime)
    edited = b.runtime("torch-distributed")
    edited["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"] = "other:image"
    decision = decide(job, edited, jobset, snapshot)
    assert decision.creates == [] and decision.updates == []


def test_a_running_jobset_is_never_changed_a_suspended_one_follows_the_plan() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    jobset, snapshot = running(job, runtime)
    job["spec"]["trainer"] = {"numNodes": 4}
    assert decide(job, jobset, snapshot).updates == []
    job["spec"]["suspend"] = True
    updated = decide(job, jobset, snapshot).updates
    assert [u["kind"] for u in updated] == ["JobSet"]
    assert updated[0]["spec"]["suspend"] is True and updated[0]["metadata"]["resourceVersion"] == "7"
    assert updated[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 4


def test_suspend_then_resume_says_suspended_then_resumed_and_unsuspends_the_jobset() -> None:
    job, runtime = b.train_job(suspend=True), b.runtime("torch-distributed")
    first = decide(job, runtime)
    assert first.creates[-1]["spec"]["suspend"] is True
    assert conditions(first) == [("Suspended", "True", "Suspended")]
    assert [(e.type, e.reason, e.message) for e in first.events] == [("Normal", "Suspended", "TrainJob is suspended")]
    assert first.status is not None
    jobset, snapshot = running(job, runtime)
    job["status"], job["spec"]["suspend"] = first.status.dump(), False
    resumed = decide(job, jobset, snapshot)
    assert [(u["kind"], u["spec"]["suspend"]) for u in resumed.updates] == [("JobSet", False)]
    assert conditions(resumed) == [("Suspended", "False", "Resumed")]
    assert [(e.type, e.reason) for e in resumed.events] == [("Normal", "Resumed")], "kto's Event of each change"
    assert resumed.status is not None
    assert resumed.status.dump()["conditions"][0]["message"] == "TrainJob is resumed"


def test_the_jobsets_completion_and_job_counts_become_the_trainjobs() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    jobset, snapshot = running(job, runtime, status=b.jobset_status(
        ("Completed", "AllJobsCompleted", "jobset completed successfully"),
        node={"ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}))
    decision = decide(job, jobset, snapshot)
    assert decision.status is not None
    status = decision.status.dump()
    assert status["conditions"] == [{"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
                                     "message": "jobset completed successfully",
                                     "lastTransitionTime": "2026-01-02T03:03:00Z"}]
    assert status["jobsStatus"] == [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0,
                                     "suspended": 0}]
    job["status"] = status
    assert decide(job, jobset, snapshot).status is None, "written once"


def test_a_failed_jobset_fails_the_trainjob_with_its_reason_and_nothing_is_made_after() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    jobset, snapshot = running(job, runtime, status=b.jobset_status(
        ("Failed", "FailedJobs", "jobset failed due to one or more job failures")))
    decision = decide(job, jobset, snapshot)
    assert conditions(decision) == [("Failed", "True", "FailedJobs")]
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "FailedJobs")]
    assert decision.status is not None
    job["status"] = decision.status.dump()
    again = decide(job, runtime)
    assert again.creates == [] and again.status is None


def test_past_the_active_deadline_the_job_fails_and_its_jobset_is_deleted() -> None:
    job, runtime = b.train_job(activeDeadlineSeconds=60), b.runtime("torch-distributed")
    jobset, snapshot = running(job, runtime)
    early = decide(job, jobset, snapshot, now=dt.datetime(2026, 1, 2, 3, 0, 30, tzinfo=dt.UTC))
    assert early.requeue_after == 30.0 and early.deletes == []
    late = decide(job, jobset, snapshot)
    assert conditions(late) == [("Failed", "True", "DeadlineExceeded")]
    assert [(d.kind, d.name) for d in late.deletes] == [("JobSet", "job")]


def test_a_job_managed_by_multikueue_is_left_alone() -> None:
    decision = decide(b.train_job(managedBy="kueue.x-k8s.io/multikueue"), b.runtime("torch-distributed"))
    assert decision.empty and [s.kind for s in decision.steps] == ["skip"]


def test_mpi_makes_its_ssh_secret_once_and_keeps_the_hostfile_in_step() -> None:
    job, runtime = b.train_job("ds", "deepspeed-distributed", trainer={"numNodes": 2}), b.runtime("deepspeed-distributed")
    first = decide(job, runtime)
    assert [(m["kind"], m["metadata"]["name"]) for m in first.creates] == [
        ("ConfigMap", "ds-runtime-snapshot"), ("Secret", "ds-mpi-ssh-auth"), ("ConfigMap", "ds-mpi-hostfile"),
        ("JobSet", "ds")]
    made = {m["metadata"]["name"]: b.owned(job, m) for m in first.creates}
    made["ds-mpi-hostfile"]["data"] = {"hostfile": "stale\n"}
    again = decide(job, *made.values())
    assert again.creates == [] and [(u["kind"], u["data"]["hostfile"]) for u in again.updates] == [
        ("ConfigMap", "ds-node-0-0.ds slots=1\nds-launcher-0-0.ds slots=1\n")]


def test_a_foreign_jobset_of_the_same_name_stops_the_pass() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    foreign = b.owned(job, planning.build(job, runtime).jobset)
    foreign["metadata"]["ownerReferences"] = []
    decision = decide(job, runtime, foreign)
    assert decision.creates == [] and decision.error is not None and "not managed by TrainJob" in decision.error
    assert decision.status is None


def test_replay_of_a_pass_decides_it_again_from_its_inputs() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    context = effects.Context(b.NOW, (), {family.sshkeys.KeyPair: lambda: b.KEYS})
    decided = family.FAMILY.decide(job, [runtime], context)
    assert decided.regarding.name == "job" and decided.regarding.KIND == "TrainJob"
    from shared.core import basis
    inputs = basis.Inputs(b.NOW, job, [runtime], None, {})
    assert family.FAMILY.replan(inputs, lambda a, c: True) == decided.plan()


def test_kto_plan_of_a_trainjob_takes_its_runtime_from_the_documents_beside_it() -> None:
    from shared.core import settings

    runtime, job = b.example("05-multi-step.yaml")
    planned = family.FAMILY.dry_run(job, settings.OperatorSettings(), "<key>", b.NOW, [runtime, job])
    assert planned.errors == [] and [c["kind"] for c in planned.children] == ["JobSet"]
    assert family.FAMILY.dry_run(runtime, settings.OperatorSettings(), "<key>", b.NOW, [runtime, job]).children == []
    alone = family.FAMILY.dry_run(job, settings.OperatorSettings(), "<key>", b.NOW, [job])
    assert alone.errors == ["spec.runtimeRef: TrainingRuntime 'torch-with-dataset-init' is not among the "
                            "documents given"]


@pytest.mark.parametrize(("spec", "field"), [
    pytest.param({"trainer": {"env": [{"name": "PET_NNODES", "value": "9"}]}}, "spec.trainer.env",
                 id="a-reserved-torch-env"),
    pytest.param({"runtimePatches": [{"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "ghost"}]}}}}}]}}}}]}, "spec.runtimePatches", id="a-patch-to-a-missing-container"),
    pytest.param({"initializer": {"dataset": {"storageUri": "hf://x"}}}, "spec.runtimeRef",
                 id="an-initializer-the-runtime-lacks"),
])
def test_a_job_that_got_past_admission_fails_naming_the_field(spec: dict[str, Any], field: str) -> None:
    decision = decide(b.train_job(**spec), b.runtime("torch-distributed"))
    assert decision.creates == [] and decision.error is not None and decision.error.startswith(field)
    assert conditions(decision) == [("Failed", "True", "TrainJobResourcesCreationFailed")]


def test_a_jobset_the_api_server_refuses_fails_the_job_with_its_message_until_a_later_look() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    refusal = effects.Refusal("JobSet", "job", "Forbidden", 'exceeded quota: compute, requested: pods=3')
    decision = deciding.decide(job, [runtime], b.NOW, lambda: b.KEYS, [refusal])
    assert conditions(decision) == [("Failed", "True", "TrainJobResourcesCreationFailed")]
    assert decision.status is not None
    assert decision.status.dump()["conditions"][0]["message"] == (
        "JobSet job: exceeded quota: compute, requested: pods=3")
    assert decision.requeue_after == deciding.RETRY_AFTER
    job["status"] = decision.status.dump()
    jobset, snapshot = running(job, runtime)
    later = decide(job, jobset, snapshot)
    assert later.status is not None and later.status.dump() == {}, "made at last: the failure goes"


def test_a_trainjob_whose_suspend_is_taken_away_resumes_its_jobset() -> None:
    job, runtime = b.train_job(suspend=True), b.runtime("torch-distributed")
    jobset, snapshot = running(job, runtime)
    del job["spec"]["suspend"]
    (updated,) = decide(job, jobset, snapshot).updates
    assert "suspend" not in updated["spec"]


@pytest.mark.parametrize("change", [
    pytest.param(lambda t: t["replicatedJobs"][0]["template"]["spec"].update(parallelism="many"), id="parallelism"),
    pytest.param(lambda t: t["replicatedJobs"][0].update(template=[]), id="template-a-list"),
    pytest.param(lambda t: t["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(containers="node"),
                 id="containers-a-string"),
    pytest.param(lambda t: t.update(replicatedJobs=[None]), id="a-null-replicated-job"),
    pytest.param(lambda t: t.update(network="flat"), id="network-a-string"),
])
def test_a_runtime_template_of_the_wrong_shape_fails_the_job_without_crashing_the_pass(change: Any) -> None:
    runtime = b.runtime("torch-distributed")
    change(runtime["spec"]["template"]["spec"])
    decision = decide(b.train_job(trainer={"numNodes": 2}), runtime)
    assert decision.creates == [] and decision.error is not None
    assert conditions(decision) == [("Failed", "True", "TrainJobResourcesCreationFailed")]
