"""One reconcile of a TrainJob, as Trainer v2.3's TrainJob controller does it, as a pure decision.

In: the TrainJob (a dict, as stored), every object observed for it — its JobSet, its
PodGroup, the MPI SSH Secret ``<job>-mpi-ssh-auth`` and hostfile ConfigMap
``<job>-mpi-hostfile``, the runtime snapshot ConfigMap ``<job>-runtime-snapshot``, and
the TrainingRuntime or ClusterTrainingRuntime its ``runtimeRef`` names, read from the
API server by the reconciler's hydration (absent: no such runtime) — ``now`` and a
source of SSH key pairs (called only when the Secret must be made). Out: its
:class:`~shared.core.effects.Effects`: the objects to create or update, the JobSet to
delete past the deadline, the new status and the Events.

Upstream's order: nothing for a job another controller manages (``managedBy``) or one
being deleted; ``Failed`` taken off when a pass decides it afresh
(:func:`statuses.without_failure`); an unsupported
``runtimeRef`` kind fails the job (``TrainingRuntimeNotSupported``); an unfinished
job's objects are made from the runtime (the snapshot's, once there is one), each
created when missing and, for the JobSet and PodGroup, brought to the plan only while
the job or the JobSet is suspended (a running JobSet is never changed); then the
Suspended condition, the JobSet's Complete, Failed and jobsStatus, and the deadline.

Where kto differs: a job that got past admission although the webhook would refuse it
(:func:`judge`: the checks of :mod:`shared.core.trainer.validating`, its fields named),
and a plan that cannot be made because of the job or its runtime (the runtime missing,
two ML policies, a patch naming a container the runtime does not have) are a ``Failed`` condition with reason ``TrainJobResourcesCreationFailed`` and the
message naming the field, beside upstream's Warning Event of that reason; upstream
only records the Event and retries. Like upstream's other Failed conditions it is
decided afresh on every pass, so a runtime created later lets the job run.
A create the API server refuses (a JobSet its webhook or a quota refuses) is the same
``Failed`` condition with the API's message: the reconciler decides the pass again with the
refusal and writes that status; the next look, 30 s on, tries again.
Level-triggered and pure: the same inputs give the same decision.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shared.api import jobs, jobsets, objects, trainer
from shared.core import effects, errors, events, owners, reports
from shared.core.trainer import planning, podsets, sshkeys, statuses, validating

Manifest = dict[str, Any]

HPA_KIND = "HorizontalPodAutoscaler"


INPUT_REFUSALS = frozenset({"Invalid", "BadRequest"})
"""Reasons of an API server's refusal that are the job's or its runtime's fault (a name or a
template it does not accept): such a job fails, as one refused at admission would have been;
any other refusal (a quota, a forbidden create, …) is only ``ResourcesCreated`` False, and the
job is looked at again."""
RETRY_AFTER = 10.0
"""Seconds before a job whose objects could not be made because of its input is looked at again:
runtimes are not watched, so a runtime created or fixed later is found by this look (upstream
retries with the controller's backoff)."""


@dataclasses.dataclass
class Observed:
    """The objects of one TrainJob found among those observed for it."""

    jobset: Manifest | None = None
    pod_group: Manifest | None = None
    secret: Manifest | None = None
    hostfile: Manifest | None = None
    snapshot: Manifest | None = None
    runtime: Manifest | None = None
    hpa: Manifest | None = None


def observe(job: Mapping[str, Any], children: Sequence[Manifest]) -> Observed:
    name, namespace = objects.name_of(job), objects.namespace_of(job)
    group, kind, runtime_name = planning.runtime_ref(job)
    wanted = {
        (podsets.JOBSET_KIND, name): "jobset", ("PodGroup", name): "pod_group",
        ("Secret", planning.secret_name(job)): "secret", ("ConfigMap", planning.hostfile_name(job)): "hostfile",
        ("ConfigMap", planning.snapshot_name(job)): "snapshot", (HPA_KIND, name): "hpa",
    }
    found = Observed()
    for child in children:
        child_kind, child_name = str(child.get("kind") or ""), objects.name_of(child)
        if (child_kind, child_name) == (kind, runtime_name) and str(child.get("apiVersion", "")).startswith(group + "/"):
            if kind == podsets.CLUSTER_TRAINING_RUNTIME or objects.namespace_of(child) == namespace:
                found.runtime = child
            continue
        if (objects.namespace_of(child) or namespace) != namespace:
            continue
        field = wanted.get((child_kind, child_name))
        if field is not None:
            setattr(found, field, child)
    return found


def _subject(job: Mapping[str, Any]) -> str:
    return f"{podsets.KIND} {objects.namespace_of(job)}/{objects.name_of(job)}"


def _ours(job: Mapping[str, Any], child: Mapping[str, Any]) -> bool:
    return owners.is_controlled_by(child, podsets.KIND, objects.name_of(job), objects.uid_of(job))


def covers(current: Any, desired: Any) -> bool:
    """Whether ``current`` already holds everything ``desired`` says (the API server's
    defaults may add to it): objects key by key, lists item by item."""
    if isinstance(desired, Mapping):
        return isinstance(current, Mapping) and all(covers(current.get(k), v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(current, list) and len(current) == len(desired) and all(
            covers(c, d) for c, d in zip(current, desired, strict=True))
    return bool(current == desired)


def _applied(current: Manifest, desired: Manifest, *fields: str, differs: bool = False) -> Manifest | None:
    """``current`` with ``desired``'s labels, annotations and ``fields`` (as a server-side
    apply by one manager leaves it), or None when it already holds them (and not ``differs``:
    what a field left out of ``desired`` changes, which :func:`covers` cannot see)."""
    meta, want = objects.meta(current), objects.meta(desired)
    labels = {**objects.labels_of(current), **(want.get("labels") or {})}
    annotations = {**objects.annotations_of(current), **(want.get("annotations") or {})}
    if (not differs and labels == objects.labels_of(current) and annotations == objects.annotations_of(current)
            and all(covers(current.get(f), desired.get(f)) for f in fields)):
        return None
    metadata = {**meta, "labels": labels, "annotations": annotations}
    return {**current, "metadata": {k: v for k, v in metadata.items() if v != {} or k not in ("labels", "annotations")},
            **{f: desired[f] for f in fields if f in desired}}


class Stop(Exception):
    """The objects cannot be made: ``message`` says why (upstream's words), ``by_input``
    whether the job or its runtime is the cause (then kto fails the job too)."""

    def __init__(self, message: str, by_input: bool) -> None:
        super().__init__(message)
        self.message = message
        self.by_input = by_input


def unreadable(exc: Exception) -> Stop:
    """The runtime's template is free-form (a JobSet spec the CRD does not check): a value of the
    wrong shape there is the runtime's fault, said as such, never a crash of the pass."""
    return Stop(f"spec.template: the runtime's JobSet template cannot be read: {exc!r}", True)


def runtime_of(job: Mapping[str, Any], found: Observed) -> tuple[Manifest, bool]:
    """The runtime to build from (the snapshot's, else the live one) and whether its
    snapshot must be made; :class:`Stop` when there is none."""
    _, kind, name = planning.runtime_ref(job)
    cluster = kind == podsets.CLUSTER_TRAINING_RUNTIME
    if found.snapshot is not None:
        try:
            return planning.from_snapshot(job, found.snapshot), False
        except errors.PlanError as exc:
            raise Stop(("getting runtime snapshot: " if cluster else "unable to get runtime snapshot: ")
                       + exc.message, True) from None
    if found.runtime is None:
        if cluster:
            raise Stop(f'not found ClusterTrainingRuntime specified in TrainJob: '
                       f'clustertrainingruntimes.trainer.kubeflow.org "{name}" not found', True)
        raise Stop(f'TrainingRuntime specified in TrainJob is not found: '
                   f'trainingruntimes.trainer.kubeflow.org "{name}" not found', True)
    return found.runtime, True


def judge(job: Manifest, runtime: Manifest) -> None:
    """What the admission webhook would have said of the job and its runtime, for one that got past
    it (made before the webhook ran, or with it off): :class:`Stop` naming the fields."""
    try:
        loaded, loaded_runtime = trainer.load_trainjob(job), trainer.load_runtime(runtime)
    except jobs.LoadError as exc:
        raise Stop("; ".join(f"{path or '<document>'}: {message}" for path, message in exc.errors), True) from None
    try:
        report = validating.check_schema_rules(loaded)
        for more in (validating.check_runtime(loaded_runtime),
                     validating.check_against_runtime(loaded, loaded_runtime)):
            report.errors += more.errors
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise unreadable(exc) from None
    if not report.ok:
        raise Stop(reports.describe(report), True)


def _create_or_sync(decision: effects.Effects, job: Mapping[str, Any], current: Manifest | None, desired: Manifest,
                    sync: bool, *fields: str, differs: bool = False) -> None:
    """Create ``desired`` when missing; when ``sync``, bring the current one to it (``differs``:
    even where it seems to hold it all)."""
    if current is None:
        decision.create(desired, "missing")
        return
    if not _ours(job, current):
        raise Stop(f'{desired["kind"]} "{objects.name_of(desired)}" already exists and is not managed by '
                   f"TrainJob {objects.name_of(job)}", False)
    if sync:
        updated = _applied(current, desired, *fields, differs=differs)
        if updated is not None:
            decision.update(updated, "differs from the runtime's plan")


def reconcile_objects(decision: effects.Effects, job: Manifest, found: Observed,
                      new_ssh_key: Callable[[], sshkeys.KeyPair]) -> planning.Plan:
    """The runtime's objects, made or brought to the plan (:class:`Stop` when they cannot be)."""
    runtime, unsnapped = runtime_of(job, found)
    judge(job, runtime)
    try:
        plan = planning.build(job, runtime)
    except validating.OutOfRange as exc:
        # kto's elastic TrainJob: a scale past the runtime's bounds leaves a running JobSet as it is.
        raise Stop(str(exc), found.jobset is None) from None
    except errors.PlanError as exc:
        raise Stop(str(exc), True) from None
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise unreadable(exc) from None
    if unsnapped:
        decision.create(planning.snapshot(job, runtime), "the runtime as this job first uses it (KEP 2599)")
    suspended = bool(objects.spec_of(job).get("suspend"))
    if plan.mpi and found.secret is None:
        decision.create(planning.ssh_secret(job, new_ssh_key()), "missing")
    if plan.hostfile is not None:
        _create_or_sync(decision, job, found.hostfile, plan.hostfile, True, "data")
    if plan.pod_group is not None:
        _create_or_sync(decision, job, found.pod_group, plan.pod_group, suspended, "spec")
    jobset_suspended = bool(objects.spec_of(found.jobset or {}).get("suspend"))
    if plan.hpa is not None:
        _create_or_sync(decision, job, found.hpa, plan.hpa, True, "spec")
    elif found.hpa is not None and _ours(job, found.hpa) and not objects.is_deleting(found.hpa):
        # Suspended (or its metrics gone): the HPA would scale a job that does not run, as PyTorchJob's.
        decision.delete(found.hpa, "suspend" if suspended else "no-metrics", "no HPA in the plan")
    if plan.elastic and not (suspended or jobset_suspended):
        _scale(decision, job, found.jobset, plan.jobset)
    # A TrainJob whose suspend is taken away (not set false) resumes too: its JobSet spec leaves
    # suspend out, as upstream's apply drops the field it owned.
    _create_or_sync(decision, job, found.jobset, plan.jobset, suspended or jobset_suspended, "spec",
                    differs=jobset_suspended != suspended)
    return plan


def _scale(decision: effects.Effects, job: Manifest, current: Manifest | None, desired: Manifest) -> None:
    """kto's elastic TrainJob: a running JobSet of this job whose node count is not the plan's gets the
    plan's ``parallelism`` and ``completions`` (JobSet's ElasticJobSet scales the Indexed Jobs in place);
    a finished JobSet is left alone (JobSet's webhook refuses the change)."""
    if current is None or not _ours(job, current) or statuses.jobset_finished(current):
        return
    updated = planning.scaled(current, desired)
    if updated is not None:
        decision.update(updated, "numNodes changed: the elastic node job scaled in place")


def decide(job: Manifest, children: Sequence[Manifest], now: dt.datetime,
           new_ssh_key: Callable[[], sshkeys.KeyPair], refused: Sequence[effects.Refusal] = ()) -> effects.Effects:
    """The decision of one reconcile of ``job`` (see the module); ``refused``: creates of this
    pass the API server refused (a ``Failed`` condition with its message, looked at again)."""
    managed_by = objects.spec_of(job).get("managedBy")
    skipped = effects.left_alone(_subject(job), None if managed_by is None else str(managed_by),
                                 trainer.MANAGED_BY_TRAINER, objects.is_deleting(job))
    if skipped is not None:
        return skipped
    decision = effects.Effects()
    found = observe(job, children)
    old = statuses.of(job)
    status = statuses.of(job)
    statuses.without_failure(status)
    group, kind, _ = planning.runtime_ref(job)
    if group != podsets.GROUP or kind not in (podsets.TRAINING_RUNTIME, podsets.CLUSTER_TRAINING_RUNTIME):
        group_kind = f"{kind}.{group}" if group else kind
        status.fail(statuses.RUNTIME_NOT_SUPPORTED_REASON, f"unsupported runtime: {group_kind}", now)
    elif not status.finished:
        failure: str | None = None
        try:
            plan = reconcile_objects(decision, job, found, new_ssh_key)
            if plan.elastic:
                statuses.set_scale(status, objects.name_of(job), found.jobset)
        except Stop as stop:
            decision.creates, decision.updates = [], []
            decision.stop(_subject(job), stop.message, events.trainjob_creation_failed(stop.message))
            failure = stop.message
            if stop.by_input:
                status.fail(statuses.CREATION_FAILED_REASON, stop.message, now)
                decision.requeue_after = RETRY_AFTER
        if refused and not decision.error:
            refusal = refused[0]
            failure = f"{refusal.kind} {refusal.name}: {refusal.message}"
            if refusal.reason in INPUT_REFUSALS:  # the job's or runtime's fault: it fails, as bad input does
                status.fail(statuses.CREATION_FAILED_REASON, failure, now)
            decision.requeue_after = RETRY_AFTER
        made = any(c.get("kind") == jobsets.KIND for c in decision.creates)
        statuses.set_created(status, found.jobset is not None or made, failure, now)
    statuses.set_suspended(job, status, now)
    statuses.from_jobset(status, found.jobset, now)
    ends = statuses.deadline(job, status, now)
    if ends is not None and now > ends:
        status.fail(statuses.DEADLINE_EXCEEDED_REASON, statuses.DEADLINE_EXCEEDED_MESSAGE, now)
        decision.creates, decision.updates = [], []
        if found.jobset is not None and _ours(job, found.jobset) and not objects.is_deleting(found.jobset):
            decision.delete(found.jobset, "failed", "activeDeadlineSeconds exceeded")
    elif ends is not None:
        decision.requeue_after = max((ends - now).total_seconds(), 1.0)
    statuses.set_running(job, status, found.jobset if found.jobset is not None and _ours(job, found.jobset) else None,
                         now)
    if status.value != old.value:
        decision.status = status
        decision.events += [e for e in statuses.transitions(old, status)
                            if e.reason != statuses.CREATION_FAILED_REASON]  # said as upstream's Event already
    return decision
