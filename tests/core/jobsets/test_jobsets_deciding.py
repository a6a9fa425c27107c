"""The JobSet family's decide, against what JobSet v0.12.0's controller and its unit tests expect:
the Jobs' names, labels and annotations, the headless Service, dependsOn, the startup, success and
failure policies, suspension, the status and its conditions, the TTL."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import pytest

from shared.api import jobsets
from shared.core import effects, families
from shared.core import settings as operator_settings
from shared.core.jobsets import conditions, deciding, family, planning

Obj = dict[str, Any]
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
UID = "js-uid"


def template(**job_spec: Any) -> Obj:
    return {"spec": {**job_spec, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}


def jobset(*rjobs: Obj, status: Obj | None = None, **spec: Any) -> Obj:
    document: Obj = {"apiVersion": jobsets.API_VERSION, "kind": "JobSet",
                     "metadata": {"name": "js", "namespace": "ns", "uid": UID},
                     "spec": {"replicatedJobs": list(rjobs), **spec}}
    if status is not None:
        document["status"] = status
    return document


def rjob(name: str, replicas: int = 1, **fields: Any) -> Obj:
    return {"name": name, "replicas": replicas, "template": template(parallelism=2, completions=2), **fields}


def decide(document: Obj, children: list[Obj] | None = None, now: dt.datetime = NOW) -> effects.Effects:
    return family.FAMILY.decide(document, children or [], effects.Context(now))


def names(decision: effects.Effects, kind: str = "Job") -> list[str]:
    return [c["metadata"]["name"] for c in decision.creates if c["kind"] == kind]


def made(document: Obj, name: str, *, restarts: int = 0) -> Obj:
    """The Job of that name as decide makes it (from the JobSet at ``restarts``)."""
    stored = jobsets.load({**document, "status": {"restarts": restarts}})
    defaulted = jobsets.set_defaults(stored)
    for spec in defaulted.replicated_jobs:
        for index in range(spec.replicas):
            if planning.job_name(defaulted, spec.name, index) == name:
                return planning.desired_job(defaulted, spec, index)
    raise KeyError(name)


def observed(document: Obj, name: str, state: str = "", *, restarts: int = 0, at: str = "2026-01-01T00:00:00Z",
             reason: str = "BackoffLimitExceeded", message: str = "Job has reached the specified backoff limit",
             **status: Any) -> Obj:
    """The Job as the cluster shows it: ``state`` Complete, Failed, or active ("")."""
    job = made(document, name, restarts=restarts)
    job["status"] = dict(status)
    if state:
        job["status"]["conditions"] = [{"type": state, "status": "True", "lastTransitionTime": at,
                                        "reason": reason, "message": message}]
    return job


def true_conditions(decision: effects.Effects) -> list[tuple[str, str]]:
    status = decision.status.dump() if decision.status is not None else {}
    return [(c["type"], c["reason"]) for c in status.get("conditions") or [] if c["status"] == "True"]


def test_each_replica_of_each_replicated_job_is_an_indexed_job_named_and_labelled_as_upstream() -> None:
    document = jobset(rjob("leader"), rjob("workers", 2, groupName="g"))
    decision = decide(document)
    assert names(decision, "Service") == ["js"]
    assert names(decision) == ["js-leader-0", "js-workers-0", "js-workers-1"]
    job = next(c for c in decision.creates if c["metadata"]["name"] == "js-workers-1")
    expected = {
        jobsets.JOBSET_NAME_LABEL: "js", jobsets.JOBSET_UID_LABEL: UID, jobsets.REPLICATED_JOB_LABEL: "workers",
        jobsets.RESTARTS_KEY: "0", jobsets.REPLICATED_JOB_REPLICAS_LABEL: "2", jobsets.GLOBAL_REPLICAS_LABEL: "3",
        jobsets.JOB_INDEX_LABEL: "1", jobsets.JOB_GLOBAL_INDEX_LABEL: "2",
        jobsets.JOB_KEY_LABEL: hashlib.sha1(b"ns/js-workers-1").hexdigest(),
        jobsets.GROUP_NAME_LABEL: "g", jobsets.GROUP_REPLICAS_LABEL: "2", jobsets.JOB_GROUP_INDEX_LABEL: "1",
    }
    pod_meta = job["spec"]["template"]["metadata"]
    for marks in (job["metadata"]["labels"], job["metadata"]["annotations"], pod_meta["labels"], pod_meta["annotations"]):
        assert marks == expected
    assert job["metadata"]["ownerReferences"] == [{"apiVersion": jobsets.API_VERSION, "kind": "JobSet", "name": "js",
                                                   "uid": UID, "controller": True, "blockOwnerDeletion": True}]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["subdomain"] == "js"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_the_headless_service_selects_the_jobsets_pods_under_the_subdomain() -> None:
    decision = decide(jobset(rjob("w"), network={"subdomain": "net", "publishNotReadyAddresses": False}))
    service = next(c for c in decision.creates if c["kind"] == "Service")
    assert service["metadata"]["name"] == "net"
    assert service["spec"] == {"clusterIP": "None", "selector": {jobsets.JOBSET_NAME_LABEL: "js"},
                               "publishNotReadyAddresses": False}
    assert decide(jobset(rjob("w"), network={"enableDNSHostnames": False})).creates[0]["kind"] == "Job"


def test_the_coordinator_endpoint_labels_every_job() -> None:
    document = jobset(rjob("a"), rjob("b", 2), coordinator={"replicatedJob": "b", "jobIndex": 1, "podIndex": 3})
    for job in (c for c in decide(document).creates if c["kind"] == "Job"):
        assert job["metadata"]["labels"][jobsets.COORDINATOR_KEY] == "js-b-1-3.js"


@pytest.mark.parametrize(("dependency", "observed_a", "created"), [
    pytest.param("Complete", [], ["js-a-0", "js-a-1"], id="complete: nothing of a yet"),
    pytest.param("Complete", [("js-a-0", "Complete"), ("js-a-1", "")], [], id="complete: one of two succeeded"),
    pytest.param("Complete", [("js-a-0", "Complete"), ("js-a-1", "Complete")], ["js-b-0"], id="complete: both"),
    pytest.param("Ready", [("js-a-0", ""), ("js-a-1", "")], [], id="ready: not ready yet"),
    pytest.param("Ready", [("js-a-0", "ready"), ("js-a-1", "ready")], ["js-b-0"], id="ready: every job ready"),
])
def test_a_replicated_job_is_created_once_its_dependencies_reach_their_status(
        dependency: str, observed_a: list[tuple[str, str]], created: list[str]) -> None:
    document = jobset(rjob("a", 2), rjob("b", dependsOn=[{"name": "a", "status": dependency}]))
    children = [observed(document, name, "" if state == "ready" else state,
                         **({"ready": 2, "active": 2} if state == "ready" else {"active": 2} if not state else {}))
                for name, state in observed_a]
    assert names(decide(document, children)) == created


def test_in_order_startup_starts_one_replicated_job_at_a_time() -> None:
    document = jobset(rjob("a"), rjob("b"), startupPolicy={"startupPolicyOrder": "InOrder"})
    first = decide(document)
    assert names(first) == ["js-a-0"]
    assert true_conditions(first) == [(jobsets.STARTUP_IN_PROGRESS, conditions.IN_ORDER_IN_PROGRESS[0])]
    a_ready = [observed(document, "js-a-0", ready=2, active=2)]
    second = decide({**document, "status": first.status.dump()}, a_ready)
    assert names(second) == ["js-b-0"]
    both = [*a_ready, observed(document, "js-b-0", ready=2, active=2)]
    third = decide({**document, "status": second.status.dump()}, both)
    assert true_conditions(third) == [(jobsets.STARTUP_COMPLETED, conditions.IN_ORDER_COMPLETED[0])]
    assert [c.reason for c in third.events] == [conditions.IN_ORDER_COMPLETED[0]]


def test_the_status_counts_the_jobs_of_each_replicated_job() -> None:
    document = jobset(rjob("a", 3), rjob("b", 2))
    children = [observed(document, "js-a-0", ready=2, active=2), observed(document, "js-a-1", active=1),
                observed(document, "js-a-2", "Complete"), observed(document, "js-b-0", "Failed"),
                observed(document, "js-b-1", succeeded=1, ready=1, active=1)]
    status = decide(document, children).status
    assert status is not None
    assert status.dump()["replicatedJobsStatus"] == [
        {"name": "a", "ready": 1, "succeeded": 1, "failed": 0, "active": 2, "suspended": 0},
        {"name": "b", "ready": 1, "succeeded": 0, "failed": 1, "active": 1, "suspended": 0}]


@pytest.mark.parametrize(("policy", "complete", "completed"), [
    pytest.param(None, ["js-a-0", "js-b-0"], False, id="all: one job still running"),
    pytest.param(None, ["js-a-0", "js-b-0", "js-b-1"], True, id="all: every job"),
    pytest.param({"operator": "Any"}, ["js-b-1"], True, id="any: one job"),
    pytest.param({"operator": "All", "targetReplicatedJobs": ["b"]}, ["js-b-0", "js-b-1"], True,
                 id="all of the target"),
    pytest.param({"operator": "Any", "targetReplicatedJobs": ["b"]}, ["js-a-0"], False,
                 id="any of the target: another replicated job's does not count"),
])
def test_the_success_policy_completes_the_jobset(policy: Obj | None, complete: list[str], completed: bool) -> None:
    document = jobset(rjob("a"), rjob("b", 2), **({"successPolicy": policy} if policy else {}))
    children = [observed(document, name, "Complete" if name in complete else "", active=1)
                for name in ("js-a-0", "js-b-0", "js-b-1")]
    decision = decide(document, children)
    assert (true_conditions(decision) == [(jobsets.COMPLETED, "AllJobsCompleted")]) is completed
    if completed:
        assert decision.status is not None and decision.status.dump()["terminalState"] == "Completed"
        assert decision.events[0] == effects.Event("Normal", "AllJobsCompleted", "jobset completed successfully")
        assert not decision.creates


def test_without_a_failure_policy_a_failed_job_fails_the_jobset_naming_the_first_failed_job() -> None:
    document = jobset(rjob("a", 2))
    children = [observed(document, "js-a-0", "Failed", at="2026-01-01T00:00:09Z"),
                observed(document, "js-a-1", "Failed", at="2026-01-01T00:00:03Z")]
    decision = decide(document, children)
    status = decision.status.dump() if decision.status is not None else {}
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == (
        "FailedJobs", "jobset failed due to one or more job failures (first failed job: js-a-1)")
    assert status["terminalState"] == "Failed" and decision.events[0].type == "Warning"


def test_a_failed_job_restarts_the_jobset_up_to_max_restarts_then_fails_it() -> None:
    document = jobset(rjob("a", 2), failurePolicy={"maxRestarts": 1})
    failed = [observed(document, "js-a-0", "Failed"), observed(document, "js-a-1", active=2)]
    restart = decide(document, failed)
    status = restart.status.dump() if restart.status is not None else {}
    assert (status["restarts"], status["restartsCountTowardsMax"]) == (1, 1)
    assert true_conditions(restart) == [(jobsets.RESTARTING, "DefaultFailurePolicy")]
    assert [e.reason for e in restart.events] == ["DefaultFailurePolicy", "RestartJobSetFailurePolicyAction"]
    assert not restart.creates and not restart.deletes

    restarted = {**document, "status": status}
    deleting = decide(restarted, failed)
    assert [(d.name, d.reason) for d in deleting.deletes] == [("js-a-0", "restart"), ("js-a-1", "restart")]
    assert names(deleting) == [], "a Job is made again only once the old one of its name is gone"
    recreate = decide(restarted, [])
    assert names(recreate) == ["js-a-0", "js-a-1"]
    assert recreate.creates[1]["metadata"]["labels"][jobsets.RESTARTS_KEY] == "1"

    again = decide(restarted, [observed(document, "js-a-0", "Failed", restarts=1)])
    final = again.status.dump() if again.status is not None else {}
    assert ("Failed", "ReachedMaxRestarts") in [(c["type"], c["reason"]) for c in final["conditions"]]
    assert next(c["message"] for c in final["conditions"] if c["type"] == "Failed") == (
        "jobset failed due to reaching max number of restarts (first failed job: js-a-0)")


@pytest.mark.parametrize(("rule", "outcome"), [
    pytest.param({"action": "FailJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]},
                 ("Failed", "FailJobSetFailurePolicyAction"), id="FailJobSet on the reason"),
    pytest.param({"action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
                 ("RestartingJobSet", "DefaultFailurePolicy"), id="no rule matches: RestartJobSet"),
    pytest.param({"name": "oom", "action": "RestartJobSetAndIgnoreMaxRestarts", "onJobFailureMessagePatterns": ["limit$"]},
                 ("RestartingJobSet", "FailurePolicy_oom"), id="RestartJobSetAndIgnoreMaxRestarts on the message"),
    pytest.param({"action": "FailJobSet", "targetReplicatedJobs": ["other"]},
                 ("RestartingJobSet", "DefaultFailurePolicy"), id="another replicated job's rule"),
])
def test_failure_policy_rules(rule: Obj, outcome: tuple[str, str]) -> None:
    document = jobset(rjob("a"), failurePolicy={"maxRestarts": 3, "rules": [rule]})
    decision = decide(document, [observed(document, "js-a-0", "Failed")])
    assert outcome in true_conditions(decision)


def test_a_suspended_jobset_makes_suspended_jobs_and_suspends_running_ones() -> None:
    document = jobset(rjob("a", 2), suspend=True)
    running = observed(document, "js-a-0", active=2)
    running["spec"]["suspend"] = False
    decision = decide(document, [running])
    assert names(decision) == ["js-a-1"] and decision.creates[-1]["spec"]["suspend"] is True
    assert [u["metadata"]["name"] for u in decision.updates] == ["js-a-0"]
    assert decision.updates[0]["spec"]["suspend"] is True
    assert true_conditions(decision) == [(jobsets.SUSPENDED, "SuspendedJobs")]


def test_a_resumed_jobset_resumes_its_jobs_with_their_start_time_cleared_first() -> None:
    document = jobset(rjob("a"), status={"restarts": 0, "conditions": [
        {"type": "Suspended", "status": "True", "reason": "SuspendedJobs", "message": "jobset is suspended",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    suspended = observed(document, "js-a-0", startTime="2026-01-01T00:00:00Z")
    suspended["spec"]["suspend"] = True
    decision = decide(document, [suspended])
    assert decision.updates[0]["spec"]["suspend"] is False
    write = decision.child_writes[0]
    assert (write.name, write.before_update, write.status_value()) == ("js-a-0", True, {})
    status = decision.status.dump() if decision.status is not None else {}
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Suspended", "False", "ResumeJobs")]


def test_a_finished_jobset_deletes_its_active_jobs_and_itself_after_its_ttl() -> None:
    finished_at = NOW - dt.timedelta(seconds=30)
    status = {"restarts": 0, "terminalState": "Completed", "conditions": [
        {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed successfully",
         "lastTransitionTime": finished_at.strftime("%Y-%m-%dT%H:%M:%SZ")}]}
    document = jobset(rjob("a", 2), successPolicy={"operator": "Any"}, ttlSecondsAfterFinished=60, status=status)
    children = [observed(document, "js-a-0", "Complete"), observed(document, "js-a-1", active=2)]
    waiting = decide(document, children)
    assert [(d.name, d.reason) for d in waiting.deletes] == [("js-a-1", "finished")]
    assert waiting.requeue_after == 30 and not waiting.delete_job
    assert decide(document, children, NOW + dt.timedelta(seconds=31)).delete_job


def test_a_jobset_managed_by_another_controller_is_left_alone() -> None:
    decision = decide(jobset(rjob("a"), managedBy="kueue.x-k8s.io/multikueue"))
    assert decision.empty and [s.kind for s in decision.steps] == ["skip"]


def test_a_jobset_is_left_to_the_real_controller_when_kto_does_not_serve_jobsets() -> None:
    context = effects.Context(NOW, (operator_settings.OperatorSettings(serve_jobsets=False),))
    decision = family.FAMILY.decide(jobset(rjob("a")), [], context)
    assert decision.empty


def test_jobs_of_another_owner_are_not_the_jobsets() -> None:
    document = jobset(rjob("a"))
    foreign = observed(document, "js-a-0", "Failed")
    foreign["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert deciding.observe(jobsets.load(document), [foreign]).failed == []


def test_the_jobset_family_is_in_the_registry_and_replays_its_pass() -> None:
    document = jobset(rjob("a"))
    assert families.REGISTRY.resolve("JobSet", document) is family.FAMILY
    assert families.REGISTRY.is_job(jobsets.API_VERSION, "JobSet")
    dry = family.FAMILY.dry_run(document, operator_settings.OperatorSettings(), "key", NOW)
    assert [c["metadata"]["name"] for c in dry.children] == ["js", "js-a-0"]
