"""What the reconciler must do for one job now (spec §6.2–§6.12, §8).

In: the job as stored (un-defaulted, with the failure verdict already reached
for it in its ``kto.dev/failure`` annotation, if any), every child object
observed for it, ``now`` and the operator settings. Out: its :class:`~shared.core.effects.Effects`:
children to create, update and delete, pods to delete for a restart, a new
failure verdict (to be recorded on the job first), whether to delete the job
(TTL), and when to look again. Pure and level-triggered: the same inputs always give the
same decision, so a repeated record or a restart changes nothing.

Where kto differs from upstream (docs/pipeline.md): activeDeadlineSeconds
and TTL are re-checked on a real timer (``requeue_after``) instead of only when
something else happens; a job that fails validation is marked Failed
(reason ``<Kind>FailedValidation``) instead of being retried forever.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from shared.api import common, jobs, objects
from shared.core import conditions, defaulting, effects, naming, outcomes, owners, planning, reports, statuses
from shared.core import validating
from shared.core.events import Event
from shared.core.settings import OperatorSettings

Manifest = common.Manifest

UPDATABLE_KINDS = frozenset({"ConfigMap", "Role", "PodGroup", "HorizontalPodAutoscaler"})
"""Children whose content follows the job (MPI hostfile, Role rules, PodGroup and HPA spec)."""

REPLICA_CHILD_KINDS = frozenset({"Pod", "Service"})




def _of_kind(children: Sequence[Manifest], kind: str) -> list[Manifest]:
    return [c for c in children if c.get("kind") == kind]


_name = objects.name_of


def _delete_pods_and_services(
    pods: Sequence[Manifest], services: Sequence[Manifest], reason: str, only_phases: tuple[str, ...] | None = None
) -> list[effects.ChildRef]:
    """§6.6: each chosen pod and the Service of the same name; objects already terminating are skipped.

    The Service goes first: a worker killed between the two deletes leaves a pod,
    which its successor chooses again (with its Service), never a Service whose
    pod is gone, which no rule would choose any more."""
    by_name = {_name(s): s for s in services}
    refs: list[effects.ChildRef] = []
    for pod in pods:
        if objects.is_deleting(pod):
            continue
        if only_phases is not None and objects.phase_of(pod) not in only_phases:
            continue
        service = by_name.get(_name(pod))
        if service is not None and not objects.is_deleting(service):
            refs.append(effects.ChildRef.of(service, reason))
        refs.append(effects.ChildRef.of(pod, reason))
    # Level-triggered: a Service whose pod is gone or going (deleted by an earlier
    # pass cut short, by a restart, or by hand) is left over all the same.
    live = {_name(p) for p in pods if not objects.is_deleting(p)}
    refs += [effects.ChildRef.of(s, reason) for s in services if _name(s) not in live and not objects.is_deleting(s)]
    return refs


def _children_to_drop(children: Sequence[Manifest], kinds: frozenset[str], reason: str) -> list[effects.ChildRef]:
    return [effects.ChildRef.of(c, reason) for c in children if c.get("kind") in kinds and not objects.is_deleting(c)]


RESTARTS_ANNOTATION = "kto.dev/replica-restarts"
"""How many failed pods the reconciler has deleted for restart (kto's own record, on the job)."""

COUNTED_ANNOTATION = "kto.dev/restart-counted"
"""The failed pods (uids, comma-separated) already in :data:`RESTARTS_ANNOTATION` that were
still there when it was written. A failed pod is counted before it is deleted; a pass cut
short in between (a worker killed, a delete refused or failed) is made again and finds the
pod here, so it deletes it without counting it again, and a count at the limit does not
fail the job for the failure it already counted."""


def operator_restarts(job: jobs.Job) -> int:
    """The :data:`RESTARTS_ANNOTATION` count (0 when absent or unreadable)."""
    raw = (job.metadata.annotations or {}).get(RESTARTS_ANNOTATION, "0")
    try:
        return max(int(raw), 0)
    except ValueError:
        return 0


def counted_pods(job: jobs.Job) -> frozenset[str]:
    """The :data:`COUNTED_ANNOTATION` pods."""
    raw = (job.metadata.annotations or {}).get(COUNTED_ANNOTATION, "")
    return frozenset(part for part in raw.split(",") if part)


def _pod_id(pod: Manifest) -> str:
    return objects.uid_of(pod) or objects.name_of(pod)


def past_backoff_limit(job: jobs.Job, pods: Sequence[Manifest]) -> bool:
    """§6.7, both rules (rule (a) with upstream's always-zero requeue count), and
    kto's fix of its quirk: a failed pod the reconciler would delete and re-create
    (OnFailure / Always / retryable ExitCode) counts too. Once ``backoffLimit``
    such restarts were made, the next failure fails the job instead of being
    restarted (upstream restarts it for ever)."""
    limit = job.run_policy.backoff_limit
    if limit is None:
        return False
    specs = job.specs()
    counted = counted_pods(job)
    if operator_restarts(job) >= limit and any(
        statuses.restart_action(job, rt, pod) == "restart" and not objects.is_deleting(pod)
        and _pod_id(pod) not in counted
        for rt in specs for pod in statuses.replica_pods(job, pods, rt).values()
    ):
        return True
    total = sum(1 if s.replicas is None else s.replicas for s in specs.values())
    stored = job.status or common.JobStatus()
    previously_failed = sum(r.failed or 0 for r in (stored.replica_statuses or {}).values())
    active = sum(1 for p in pods if objects.phase_of(p) not in ("Succeeded", "Failed") and not objects.is_deleting(p))
    failed = sum(1 for p in pods if objects.phase_of(p) == "Failed")
    if failed > previously_failed and active != total and 1 > limit:
        return True
    restarts = 0
    for rt, spec in specs.items():
        if spec.restart_policy not in ("OnFailure", "Always", "ExitCode"):
            continue
        for pod in statuses.replica_pods(job, pods, rt).values():
            if objects.phase_of(pod) != "Running":
                continue
            status = pod.get("status") or {}
            for container in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
                restarts += int(container.get("restartCount") or 0)
    return restarts > 0 if limit == 0 else restarts >= limit


def _seconds_between(later: dt.datetime, earlier: dt.datetime) -> float:
    return (later - earlier).total_seconds()


def _ttl(job: jobs.Job, now: dt.datetime, decision: effects.Effects) -> None:
    """§6.12: delete the job ``ttlSecondsAfterFinished`` after its completionTime, or look again then."""
    ttl = job.run_policy.ttl_seconds_after_finished
    status = job.status
    if ttl is not None and status is not None and status.completion_time is not None:
        remaining = ttl - _seconds_between(now, status.completion_time)
        if remaining <= 0:
            decision.delete_job = True
        else:
            decision.requeue_after = remaining


def _failed(job: jobs.Job, children: Sequence[Manifest], now: dt.datetime, decision: effects.Effects) -> effects.Effects:
    """A job with a recorded failure verdict: every pod and Service goes whatever
    cleanPodPolicy says (§6.6, backoff / deadline row; a validation failure the
    same), the PodGroup too, then TTL. The job is not defaulted: it may be invalid."""
    owned = owners.owned(job, children)
    decision.deletes += _delete_pods_and_services(_of_kind(owned, "Pod"), _of_kind(owned, "Service"), "failed")
    decision.deletes += _children_to_drop(owned, frozenset({"PodGroup"}), "failed")
    _ttl(job, now, decision)
    return decision


def decide(
    job: jobs.Job,
    children: Sequence[Manifest],
    now: dt.datetime,
    settings: OperatorSettings,
    old: jobs.Job | None = None,
) -> effects.Effects:
    """The reconcile decision for ``job`` given everything observed about it.

    A failure verdict already reached for the job is read from the job itself
    (:data:`outcomes.FAILURE_ANNOTATION`), never from a record: whatever its
    conditions say yet, all its pods and Services go (§6.6, the backoff /
    deadline row), on every pass until none is left, so a successor finishes
    what a worker killed mid-cleanup started. A new verdict comes out as
    ``Effects.verdict``; the caller records it on the job before anything else.

    ``old``: the version of the job the previous decision was made on, when the
    job was updated since; the update is validated against it (§3.2 C7
    ``managedBy`` and §3.5 ``queue`` are immutable). kto's admission webhook
    refuses such an update, but where it is not registered (or does not cover
    the namespace) the update is stored: the job fails validation instead —
    also one that handed the job over to another controller, whose pods would
    otherwise be left running unowned."""
    decision = effects.Effects()
    if job.metadata.deletion_timestamp is not None:
        return decision
    recorded = outcomes.recorded_verdict(job)
    if recorded is not None and not conditions.is_true(job.status, conditions.SUCCEEDED):
        return _failed(job, children, now, decision)
    external = statuses.is_managed_externally(job)
    if external and (old is None or statuses.is_managed_externally(old)):
        return decision
    report = validating.validate(job, old)
    if not report.ok:
        decision.verdict = outcomes.Verdict(
            f"{job.KIND}FailedValidation",
            f"{job.KIND} {job.name} failed validation because {reports.describe(report)}",
            "validation",
        )
        # An update that failed validation (no child exists before a first
        # valid pass): the job fails as by backoff or deadline, all its pods go.
        invalid_owned = owners.owned(job, children)
        decision.deletes += _delete_pods_and_services(
            _of_kind(invalid_owned, "Pod"), _of_kind(invalid_owned, "Service"), "failed")
        decision.deletes += _children_to_drop(invalid_owned, frozenset({"PodGroup"}), "failed")
        return decision
    job = defaulting.set_defaults(job)
    owned = owners.owned(job, children)
    pods, services = _of_kind(owned, "Pod"), _of_kind(owned, "Service")
    podgroups = frozenset({"PodGroup"})
    status = job.status

    if conditions.is_finished(status):
        assert status is not None
        policy = job.run_policy.clean_pod_policy or "None"
        if policy == "All":
            decision.deletes += _delete_pods_and_services(pods, services, "clean-pod-policy")
        elif policy == "Running":
            decision.deletes += _delete_pods_and_services(
                pods, services, "clean-pod-policy", only_phases=("Running", "Pending")
            )
        decision.deletes += _children_to_drop(owned, podgroups, "finished")
        _ttl(job, now, decision)
        return decision

    if job.run_policy.suspend:
        decision.deletes += _delete_pods_and_services(pods, services, "suspend")
        decision.deletes += _children_to_drop(owned, podgroups | {"HorizontalPodAutoscaler"}, "suspend")
        return decision

    if past_backoff_limit(job, pods):
        decision.verdict = outcomes.Verdict(
            f"{job.KIND}Failed", f"Job {job.name} has failed because it has reached the specified backoff limit",
            "backoff",
        )
    deadline = job.run_policy.active_deadline_seconds
    if decision.verdict is None and deadline is not None and status is not None and status.start_time is not None:
        remaining = deadline - _seconds_between(now, status.start_time)
        if remaining <= 0:
            decision.verdict = outcomes.Verdict(
                f"{job.KIND}Failed", f"Job {job.name} has failed because it was active longer than specified deadline",
                "deadline",
            )
        else:
            decision.requeue_after = remaining
    if decision.verdict is not None:
        decision.requeue_after = None
        decision.deletes += _delete_pods_and_services(pods, services, "failed")
        decision.deletes += _children_to_drop(owned, podgroups, "failed")
        return decision

    observed = {(c.get("kind"), _name(c)): c for c in owned}
    desired_keys: set[tuple[Any, str]] = set()
    try:
        # Only missing children and updatable kinds are built: a pod that exists
        # needs no fresh copy of its template.
        for wanted in planning.planned(job, settings, owned):
            desired_keys.add((wanted.kind, wanted.name))
            current = observed.get((wanted.kind, wanted.name))
            if current is None:
                decision.creates.append(wanted.build())
            elif wanted.kind in UPDATABLE_KINDS:
                manifest = wanted.build()
                if _content_differs(manifest, current):
                    decision.updates.append(_updated(current, manifest))
    except planning.PlanError as exc:
        decision.creates, decision.updates = [], []
        decision.error, decision.error_reason = str(exc), "PlanError"
        return decision
    for child in owned:
        key = (child.get("kind"), _name(child))
        if child.get("kind") in REPLICA_CHILD_KINDS and key not in desired_keys and not objects.is_deleting(child):
            decision.deletes.append(effects.ChildRef.of(child, "scale-down"))
    restarting: list[str] = []
    for rt in job.specs():
        for pod in statuses.replica_pods(job, pods, rt).values():
            if statuses.restart_action(job, rt, pod) == "restart" and not objects.is_deleting(pod):
                decision.deletes.append(effects.ChildRef.of(pod, "restart"))
                restarting.append(_pod_id(pod))
    counted = counted_pods(job)
    fresh = [pod for pod in restarting if pod not in counted]
    if fresh and job.run_policy.backoff_limit is not None:
        decision.restarts = operator_restarts(job) + len(fresh)
        decision.counted = tuple(sorted(restarting))
    if any(m.get("kind") == "Pod" for m in decision.creates) or any(r.reason == "scale-down" for r in decision.deletes):
        decision.warnings = [Event("Warning", reason, message) for reason, message in planning.template_warnings(job, settings)]
    return decision


_CONTENT_FIELDS = ("data", "rules", "spec")


def _content_differs(desired: Manifest, current: Manifest) -> bool:
    return any(field in desired and desired[field] != current.get(field) for field in _CONTENT_FIELDS)


def _updated(current: Manifest, desired: Manifest) -> Manifest:
    """The current object with the desired content; resourceVersion kept for optimistic concurrency."""
    updated: dict[str, Any] = dict(current)
    for field in _CONTENT_FIELDS:
        if field in desired:
            updated[field] = desired[field]
    return updated


def job_selector(job: jobs.Job) -> str:
    """The label selector listing a job's children (§4.3)."""
    return ",".join(f"{key}={value}" for key, value in sorted(naming.job_selector(job).items()))
