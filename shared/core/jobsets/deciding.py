"""One reconcile of a JobSet (JobSet v0.12.0's ``JobSetReconciler.reconcile``) as a pure decision.

In: the JobSet as stored, every object observed for it (its batch Jobs, found by their
controller reference, and its headless Service), ``now``. Out: its
:class:`~shared.core.effects.Effects`: Jobs to create, update (suspend, resume) and delete
(a restart's, a finished JobSet's active ones), the Service, the JobSet's new status and
the Events of its condition changes, the JobSet's deletion once its TTL ran out.

Upstream's order of work: replicated job statuses from the Jobs; a finished JobSet deletes
its active Jobs and waits for its TTL; Jobs of an earlier restart attempt are deleted; a
failed Job runs the failure policy (restart everything, up to ``maxRestarts``, or fail); a
succeeded one the success policy; then the headless Service, active Jobs scaled in place to
their replicated job's ``parallelism`` and ``completions`` (the ElasticJobSet feature gate's
``syncJobScaling``, always on in kto: kto's elastic TrainJob scales this way), the Jobs of
each replicated job whose dependencies reached their state (InOrder: one replicated job at a
time), suspension or resumption. Level-triggered, no clock read inside.

Left out (feature gates off by default upstream): RestartJob actions, InPlaceRestart,
volume claim policies.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Sequence

from shared.api import common, jobsets, objects
from shared.core import effects, events, owners
from shared.core.jobsets import conditions, planning

Manifest = common.Manifest


def _subject(jobset: jobsets.JobSet) -> str:
    return f"{jobsets.KIND} {jobset.namespace}/{jobset.name}"


def _job_condition(job: Manifest, type_: str) -> Manifest | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == type_ and condition.get("status") == "True":
            return condition
    return None


def _suspended(job: Manifest) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


@dataclasses.dataclass
class Owned:
    """The JobSet's Jobs by upstream's classes (``getChildJobs``)."""

    active: list[Manifest] = dataclasses.field(default_factory=list)
    successful: list[Manifest] = dataclasses.field(default_factory=list)
    failed: list[Manifest] = dataclasses.field(default_factory=list)
    previous: list[Manifest] = dataclasses.field(default_factory=list)
    """Jobs of an earlier restart attempt: deleted, then made again."""
    service: Manifest | None = None

    @property
    def names(self) -> set[str]:
        return {objects.name_of(j) for j in (*self.active, *self.successful, *self.failed, *self.previous)}


def observe(jobset: jobsets.JobSet, children: Sequence[Manifest]) -> Owned:
    restarts = jobset.status.restarts if jobset.status is not None else 0
    found = Owned()
    for child in children:
        if not owners.controls(jobset, child):
            continue
        if child.get("kind") == "Service" and objects.name_of(child) == jobset.subdomain:
            found.service = child
        if child.get("kind") != "Job":
            continue
        attempt = objects.labels_of(child).get(jobsets.RESTARTS_KEY, "")
        if not attempt.isdigit() or int(attempt) < restarts:
            found.previous.append(child)
        elif _job_condition(child, "Failed") is not None:
            found.failed.append(child)
        elif _job_condition(child, "Complete") is not None:
            found.successful.append(child)
        else:
            found.active.append(child)
    for jobs in (found.active, found.successful, found.failed, found.previous):
        jobs.sort(key=objects.name_of)
    return found


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def replicated_statuses(jobset: jobsets.JobSet, owned: Owned) -> list[jobsets.ReplicatedJobStatus]:
    """``calculateReplicatedJobStatuses``, in the order of the spec."""
    # Every counter written, zero too, as Go writes them (no omitempty).
    counts = {r.name: jobsets.ReplicatedJobStatus(name=r.name, ready=0, succeeded=0, failed=0, active=0, suspended=0)
              for r in jobset.replicated_jobs}

    def of(job: Manifest) -> jobsets.ReplicatedJobStatus | None:
        return counts.get(objects.labels_of(job).get(jobsets.REPLICATED_JOB_LABEL, ""))

    for job in owned.active:
        if (status := of(job)) is None:
            continue
        spec, observed = job.get("spec") or {}, job.get("status") or {}
        pods = _int(spec.get("parallelism", 1))
        if isinstance(spec.get("completions"), int) and spec["completions"] < pods:
            pods = spec["completions"]
        if _int(observed.get("succeeded")) + _int(observed.get("ready")) >= pods:
            status.ready += 1
        if _int(observed.get("active")) > 0:
            status.active += 1
        if _suspended(job):
            status.suspended += 1
    for jobs, field in ((owned.successful, "succeeded"), (owned.failed, "failed")):
        for job in jobs:
            if (status := of(job)) is not None:
                setattr(status, field, getattr(status, field) + 1)
    return list(counts.values())


def _status_of(statuses: list[jobsets.ReplicatedJobStatus], name: str) -> jobsets.ReplicatedJobStatus:
    return next((s for s in statuses if s.name == name), jobsets.ReplicatedJobStatus(name=name))


def dependencies_reached(jobset: jobsets.JobSet, rjob: jobsets.ReplicatedJob,
                         statuses: list[jobsets.ReplicatedJobStatus]) -> bool:
    """``dependencyReachedStatus``: every replicated job depended on is Ready (each Job ready,
    succeeded or failed) or Complete (each Job succeeded)."""
    for dependency in rjob.depends_on or []:
        other = jobset.replicated_job(dependency.name)
        replicas = other.replicas if other is not None else 0
        status = next((s for s in statuses if s.name == dependency.name), None)
        if status is None:
            return False
        if dependency.status == jobsets.COMPLETE and replicas != status.succeeded:
            return False
        if dependency.status == jobsets.READY and replicas != status.failed + status.ready + status.succeeded:
            return False
    return True


def _all_started(rjob: jobsets.ReplicatedJob, status: jobsets.ReplicatedJobStatus) -> bool:
    return rjob.replicas == status.failed + status.ready + status.succeeded


def _failure_time(job: Manifest) -> str:
    condition = _job_condition(job, "Failed") or {}
    return str(condition.get("lastTransitionTime") or "")


def _first_failed(failed: list[Manifest]) -> Manifest:
    return min(failed, key=_failure_time)


def _rule_applies(rule: jobsets.FailurePolicyRule, job: Manifest) -> bool:
    condition = _job_condition(job, "Failed") or {}
    reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
    if rule.on_job_failure_reasons and reason not in rule.on_job_failure_reasons:
        return False
    if rule.on_job_failure_message_patterns and not any(
            _matches(pattern, message) for pattern in rule.on_job_failure_message_patterns):
        return False
    parent = objects.labels_of(job).get(jobsets.REPLICATED_JOB_LABEL)
    if not parent:
        return False
    return not rule.target_replicated_jobs or parent in rule.target_replicated_jobs


def _matches(pattern: str, message: str) -> bool:
    try:
        return re.search(pattern, message) is not None
    except re.error:
        return False  # upstream logs an invalid pattern and goes on


def _failure_policy(decision: effects.Effects, jobset: jobsets.JobSet, owned: Owned,
                    changes: conditions.Changes) -> None:
    """``executeFailurePolicy``."""
    policy = jobset.spec.failure_policy
    status = changes.status
    if policy is None:
        first = objects.name_of(_first_failed(owned.failed))
        changes.failed(conditions.FAILED_JOBS[0], conditions.with_first_failed(conditions.FAILED_JOBS[1], first))
        return
    rule: jobsets.FailurePolicyRule | None = None
    matched: Manifest | None = None
    for candidate in policy.rules or []:
        hits = [job for job in owned.failed if _job_condition(job, "Failed") is not None
                and _rule_applies(candidate, job)]
        if hits:
            rule, matched = candidate, _first_failed(hits)
            break
    action = rule.action if rule is not None else "RestartJobSet"
    failed_job = objects.name_of(matched if matched is not None else _first_failed(owned.failed))
    if action == "FailJobSet":
        reason, message = conditions.FAIL_JOBSET_ACTION
        changes.failed(reason, conditions.with_first_failed(message, failed_job))
        return
    if action not in ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"):
        decision.step("stop", _subject(jobset), f"{action} failure policy action cannot be used when the "
                      "feature gate RestartJob is disabled")
        return
    counts = action == "RestartJobSet"
    if counts and (status.restarts_count_towards_max or 0) >= policy.max_restarts:
        reason, message = conditions.REACHED_MAX_RESTARTS
        changes.failed(reason, conditions.with_first_failed(message, failed_job))
        return
    reason, message = conditions.RESTART_JOBSET_ACTION if counts else conditions.RESTART_IGNORING_MAX_ACTION
    message = conditions.with_first_failed(message, failed_job)
    status.restarts += 1
    if counts:
        status.restarts_count_towards_max = (status.restarts_count_towards_max or 0) + 1
    why = (conditions.RESTARTING_RULE.format(rule.name) if rule is not None
           else conditions.RESTARTING_DEFAULT_POLICY)
    changes.set(jobsets.RESTARTING, "True", why, message, "Warning")
    changes.events.append(events.Event("Warning", reason, message))
    decision.step("restart", _subject(jobset), f"attempt {status.restarts}: {message}")


def _success_policy(jobset: jobsets.JobSet, owned: Owned, changes: conditions.Changes) -> bool:
    """``executeSuccessPolicy``: whether the JobSet completed."""
    policy = jobset.spec.success_policy or jobsets.SuccessPolicy(operator=jobsets.ALL)
    targets = policy.target_replicated_jobs or []

    def counted(name: str) -> bool:
        return not targets or name in targets

    matching = sum(1 for job in owned.successful
                   if counted(objects.labels_of(job).get(jobsets.REPLICATED_JOB_LABEL, "")))
    expected = 1 if policy.operator == jobsets.ANY else sum(
        r.replicas for r in jobset.replicated_jobs if counted(r.name))
    if matching >= expected:
        changes.completed()
        return True
    return False


def _sync_scaling(decision: effects.Effects, jobset: jobsets.JobSet, owned: Owned) -> None:
    """``syncJobScaling`` (ElasticJobSet): an active Job whose ``parallelism`` or ``completions``
    differ from its replicated job's gets them, when the two are equal there (an elastic Indexed
    Job: the Job controller adds the new indexes' pods, or deletes the highest indexes'). Suspended
    Jobs, and all Jobs of a suspended JobSet, wait: the same pass suspends or resumes them, one
    write per Job (they scale in the pass after their resume)."""
    if jobset.suspended:
        return
    wanted = {r.name: (r.template.get("spec") or {}) for r in jobset.replicated_jobs}
    for job in owned.active:
        if _suspended(job):
            continue
        want = wanted.get(objects.labels_of(job).get(jobsets.REPLICATED_JOB_LABEL, ""))
        if want is None or not isinstance(want.get("parallelism"), int) or want.get("parallelism") != want.get(
                "completions"):
            continue  # not elastic: a template that leaves both out has the API server's defaults on its Jobs
        spec = job.get("spec") or {}
        if (spec.get("parallelism"), spec.get("completions")) != (want.get("parallelism"), want.get("completions")):
            decision.update({**job, "spec": {**spec, "parallelism": want.get("parallelism"),
                                             "completions": want.get("completions")}},
                            f"scaled to {want.get('parallelism')} pods (ElasticJobSet)")


def _create_jobs(decision: effects.Effects, jobset: jobsets.JobSet, owned: Owned,
                 statuses: list[jobsets.ReplicatedJobStatus], changes: conditions.Changes) -> None:
    """``reconcileReplicatedJobs``."""
    in_order = (jobset.spec.startup_policy is not None
                and jobset.spec.startup_policy.startup_policy_order == jobsets.IN_ORDER)
    blocking = (jobset.spec.failure_policy is not None
                and jobset.spec.failure_policy.restart_strategy == "BlockingRecreate")
    existing = owned.names
    for rjob in jobset.replicated_jobs:
        if not dependencies_reached(jobset, rjob, statuses):
            decision.step("wait", _subject(jobset), f"replicated job {rjob.name} waits for its dependencies")
            continue
        if not jobset.suspended and in_order and _all_started(rjob, _status_of(statuses, rjob.name)):
            continue
        if not (owned.previous and blocking):
            for index in range(rjob.replicas):
                if planning.job_name(jobset, rjob.name, index) not in existing:
                    decision.create(planning.desired_job(jobset, rjob, index), f"replicated job {rjob.name}")
        if not jobset.suspended and in_order:
            changes.set(jobsets.STARTUP_IN_PROGRESS, "True", *conditions.IN_ORDER_IN_PROGRESS)
            return
    if not jobset.suspended and in_order:
        changes.set(jobsets.STARTUP_COMPLETED, "True", *conditions.IN_ORDER_COMPLETED)


def _resume(decision: effects.Effects, jobset: jobsets.JobSet, owned: Owned,
            statuses: list[jobsets.ReplicatedJobStatus], changes: conditions.Changes) -> None:
    """``resumeJobsIfNecessary``."""
    in_order = (jobset.spec.startup_policy is not None
                and jobset.spec.startup_policy.startup_policy_order == jobsets.IN_ORDER)
    for rjob in jobset.replicated_jobs:
        if not dependencies_reached(jobset, rjob, statuses):
            continue
        if in_order and _all_started(rjob, _status_of(statuses, rjob.name)):
            continue
        for job in owned.active:
            if objects.labels_of(job).get(jobsets.REPLICATED_JOB_LABEL) != rjob.name or not _suspended(job):
                continue
            if (job.get("status") or {}).get("startTime"):
                # A Job's pod template may change only while it has no startTime.
                write = decision.child("batch/v1", "Job", jobset.namespace, objects.name_of(job))
                write.status = {k: v for k, v in job["status"].items() if k != "startTime"}
                write.before_update = True
            decision.update(planning.resumed(job, rjob), "resume")
        if in_order:
            changes.set(jobsets.STARTUP_IN_PROGRESS, "True", *conditions.IN_ORDER_IN_PROGRESS)
            return
    changes.resumed()


def _all_ready(jobset: jobsets.JobSet, statuses: list[jobsets.ReplicatedJobStatus]) -> bool:
    return sum(r.replicas for r in jobset.replicated_jobs) == sum(s.ready + s.succeeded for s in statuses)


def _finished(decision: effects.Effects, jobset: jobsets.JobSet, owned: Owned, now: dt.datetime) -> None:
    """A finished JobSet: its active Jobs deleted; deleted itself once its TTL ran out."""
    for job in owned.active:
        if not objects.is_deleting(job):
            decision.delete(job, "finished", "the JobSet finished")
    ttl = jobset.spec.ttl_seconds_after_finished
    finished_at = conditions.finish_time(jobset.status)
    if ttl is None or finished_at is None:
        return
    left = (finished_at + dt.timedelta(seconds=ttl) - now).total_seconds()
    if left <= 0:
        decision.delete_job = True
        decision.step("delete", _subject(jobset), f"ttlSecondsAfterFinished {ttl} ran out")
    else:
        decision.requeue_after = left


def _sorted(statuses: list[jobsets.ReplicatedJobStatus] | None) -> list[dict[str, object]]:
    return sorted((s.dump() for s in statuses or []), key=lambda s: str(s.get("name")))


def decide(stored: jobsets.JobSet, children: Sequence[Manifest], now: dt.datetime) -> effects.Effects:
    """The decision of one reconcile of ``stored`` given everything observed for it; its
    ``status`` is set when the status changes (the reconciler writes it, as upstream's
    controller does), its ``events`` are those of the condition changes."""
    jobset = jobsets.set_defaults(stored)
    skipped = effects.left_alone(_subject(jobset), jobset.spec.managed_by, jobsets.CONTROLLER_NAME,
                                 jobset.metadata.deletion_timestamp is not None)
    if skipped is not None:
        return skipped
    decision = effects.Effects()
    status = (jobset.status or jobsets.JobSetStatus()).model_copy(deep=True)
    status.restarts = status.restarts  # written even when 0, as Go writes it
    before = status.dump()
    changes = conditions.Changes(status, now)
    owned = observe(jobset, children)
    statuses = replicated_statuses(jobset, owned)
    if _sorted(statuses) != _sorted(status.replicated_jobs_status):
        status.replicated_jobs_status = statuses
    _reconcile(decision, jobset, owned, statuses, changes, now)
    if status.dump() != before:
        decision.status = status
    decision.events = changes.events
    return decision


def _reconcile(decision: effects.Effects, jobset: jobsets.JobSet, owned: Owned,
               statuses: list[jobsets.ReplicatedJobStatus], changes: conditions.Changes, now: dt.datetime) -> None:
    if conditions.finished(jobset.status):
        _finished(decision, jobset, owned, now)
        return
    for job in owned.previous:
        if not objects.is_deleting(job):
            decision.delete(job, "restart", f"restart attempt {changes.status.restarts}")
    if not jobset.suspended and _all_ready(jobset, statuses):
        changes.restarting_off(*conditions.RESTARTING_JOBS_READY)
    if owned.failed:
        _failure_policy(decision, jobset, owned, changes)
        return
    if owned.successful and _success_policy(jobset, owned, changes):
        return
    if jobset.dns_hostnames and owned.service is None:
        decision.create(planning.desired_service(jobset), "headless Service of the subdomain")
    _sync_scaling(decision, jobset, owned)
    _create_jobs(decision, jobset, owned, statuses, changes)
    if jobset.suspended:
        for job in owned.active:
            if not _suspended(job):
                decision.update({**job, "spec": {**(job.get("spec") or {}), "suspend": True}}, "suspend")
        changes.suspended()
    else:
        _resume(decision, jobset, owned, statuses, changes)
