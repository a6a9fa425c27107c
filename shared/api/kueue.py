"""Kueue's API as kto reads it: its labels on jobs, its Workloads, and what a Workload's changes mean.

In: a job or a ``kueue.x-k8s.io/v1beta2`` Workload as a plain dict (as the API server returns it, or
as a record carries its projection). Out: the names Kueue gives things (each constant checked
against Kueue v0.17.0's source, cited beside it), the queue a job is in, the name of the Workload
Kueue makes (or made, on the manager cluster) for a job, a Workload read into a
:class:`Workload`, and the :class:`Moment` s of a Workload's history (:func:`moments`): queued,
quota reserved, admitted, dispatched to a worker cluster, evicted, preempted, re-admitted,
finished. Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from shared.api import objects

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
WORKLOAD_KIND = "Workload"
WORKLOAD_PLURAL = "workloads"

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
"""The LocalQueue a job is submitted to (pkg/controller/constants: ``QueueLabel``)."""
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
"""A job's WorkloadPriorityClass (pkg/controller/constants: ``WorkloadPriorityClassLabel``)."""
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
"""The Workload a job is to use instead of one of its own (pkg/controller/constants:
``PrebuiltWorkloadLabel``). MultiKueue sets it on a job's copy in a worker cluster to the name of
the manager's Workload (``SyncJob`` of jobs/kubeflow/kubeflowjob and jobs/mpijob), and creates the
worker's Workload under that same name."""
MULTIKUEUE_ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
"""On a worker's copies (job and Workload): the manager that made them (apis/kueue/v1beta2:
``MultiKueueOriginLabel``; the value is the manager's ``multiKueue.origin`` setting)."""
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""On a Workload: the uid of the job that owns it (pkg/controller/constants: ``JobUIDLabel``)."""
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
"""A job's ``spec.managedBy`` (``runPolicy.managedBy`` of a kubeflow.org/v1 job) under MultiKueue, and
the AdmissionCheck controller's name (apis/kueue/v1beta2: ``MultiKueueControllerName``)."""

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
FINISHED = "Finished"
CONDITIONS = (QUOTA_RESERVED, ADMITTED, EVICTED, PREEMPTED, REQUEUED, PODS_READY, FINISHED)
"""The Workload conditions kto reads (apis/kueue/v1beta2/workload_types.go), in the order a run meets them."""

_HASH_LENGTH = 5
_MAX_NAME = 253
"""Kueue's longest Workload name; its ``ShortWorkloadNames`` gate (alpha, off in v0.17.0) makes it 63."""


def queue_of(job: object) -> str:
    """The LocalQueue ``job`` is submitted to ("" when none)."""
    return objects.labels_of(job).get(QUEUE_NAME_LABEL, "")


def workload_name(kind: str, group: str, name: str, uid: str) -> str:
    """The name Kueue gives the Workload of a job (jobframework's ``GetWorkloadNameForOwnerWithGVK``):
    ``<kind>-<name>`` lowercased and cut to fit, ``-``, then five hex digits of the SHA-1 of kind,
    group, name and uid."""
    digest = hashlib.sha1("\n".join((kind, group, name, uid)).encode()).hexdigest()
    prefix = f"{kind.lower()}-{name}"[:_MAX_NAME - 1 - _HASH_LENGTH]
    return f"{prefix}-{digest[:_HASH_LENGTH]}"


def workload_of(job: object) -> str:
    """The name of the Workload a job is admitted through, shared by a MultiKueue job's copies: a
    worker's copy names it (:data:`PREBUILT_WORKLOAD_LABEL`), the manager's (or a single cluster's) job
    has it made by Kueue from its own kind, name and uid when it carries :data:`QUEUE_NAME_LABEL`.
    "" for a job Kueue does not manage (or a job without a uid yet)."""
    labels = objects.labels_of(job)
    if labels.get(PREBUILT_WORKLOAD_LABEL):
        return labels[PREBUILT_WORKLOAD_LABEL]
    uid = objects.uid_of(job)
    if not labels.get(QUEUE_NAME_LABEL) or uid is None or not isinstance(job, Mapping):
        return ""
    group = str(job.get("apiVersion") or "").rpartition("/")[0]
    return workload_name(str(job.get("kind") or ""), group, objects.name_of(job), uid)


def is_workload(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == WORKLOAD_KIND and str(obj.get("apiVersion") or "").startswith(f"{GROUP}/")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


@dataclasses.dataclass(frozen=True)
class Condition:
    status: str
    reason: str
    message: str
    time: str
    """``lastTransitionTime``."""


@dataclasses.dataclass(frozen=True)
class Workload:
    """What kto reads of one Workload."""

    name: str
    uid: str
    queue: str
    """``spec.queueName``: the LocalQueue."""
    cluster_queue: str
    """``status.admission.clusterQueue`` ("" while not holding quota)."""
    flavors: tuple[tuple[str, str], ...]
    """Per pod set of the admission: (pod set name, ``resource=flavor`` joined by commas)."""
    cluster_name: str
    """``status.clusterName``: the MultiKueueCluster a manager's Workload was dispatched to."""
    conditions: Mapping[str, Condition]
    checks: tuple[tuple[str, str, str, str], ...]
    """``status.admissionChecks``: (name, state, message, lastTransitionTime)."""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Workload:
        spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
        admission = _mapping(status.get("admission"))
        flavors = tuple(
            (str(a.get("name") or ""), ",".join(f"{r}={f}" for r, f in sorted(_mapping(a.get("flavors")).items())))
            for a in _list(admission.get("podSetAssignments")))
        conditions = {str(c.get("type")): Condition(str(c.get("status") or ""), str(c.get("reason") or ""),
                                                    str(c.get("message") or ""), str(c.get("lastTransitionTime") or ""))
                      for c in _list(status.get("conditions")) if c.get("type") in CONDITIONS}
        checks = tuple((str(c.get("name") or ""), str(c.get("state") or ""), str(c.get("message") or ""),
                        str(c.get("lastTransitionTime") or "")) for c in _list(status.get("admissionChecks")))
        return cls(objects.name_of(obj), objects.uid_of(obj) or "", str(spec.get("queueName") or ""),
                   str(admission.get("clusterQueue") or ""), flavors, str(status.get("clusterName") or ""),
                   conditions, checks)

    def holds(self, condition: str) -> bool:
        found = self.conditions.get(condition)
        return found is not None and found.status == "True"

    def flavor_text(self) -> str:
        return "; ".join(f"{podset}: {flavors}" for podset, flavors in self.flavors if flavors)


@dataclasses.dataclass(frozen=True)
class Moment:
    """One step of a Workload's history."""

    time: str
    """When: the condition's ``lastTransitionTime`` when it says, else when kto saw it."""
    cluster: str
    """The cluster (kubeconfig context) whose Workload it is."""
    workload: str
    event: str
    """``queued``, ``quota-reserved``, ``admitted``, ``re-admitted``, ``check``, ``dispatched``,
    ``evicted``, ``preempted``, ``requeued``, ``pods-ready``, ``finished`` or ``deleted``."""
    detail: str


@dataclasses.dataclass(frozen=True)
class Seen:
    """One observation of a Workload: as a record carried it, when and where."""

    time: str
    """When kto saw it (the record's time, ISO)."""
    cluster: str
    event: str
    """The observation's event: ADDED, MODIFIED, RESYNCED or DELETED."""
    workload: Mapping[str, Any]


def _changes(before: Workload | None, after: Workload, cluster: str, seen_at: str,
             admitted_before: bool) -> Iterable[Moment]:
    def moment(event: str, detail: str, condition: str = "", time: str = "") -> Moment:
        found = after.conditions.get(condition)
        return Moment(time or (found.time if found is not None and found.time else seen_at), cluster, after.name,
                      event, detail)

    def changed(condition: str) -> Condition | None:
        """The condition, if it is new or its status or reason changed."""
        now = after.conditions.get(condition)
        then = before.conditions.get(condition) if before is not None else None
        if now is None or then is not None and (then.status, then.reason) == (now.status, now.reason):
            return None
        return now

    def said(reason: str, message: str) -> str:
        return ": ".join(part for part in (reason, message) if part)

    reserved = changed(QUOTA_RESERVED)
    if reserved is not None:
        if reserved.status == "True":
            yield moment("quota-reserved", f"in ClusterQueue {after.cluster_queue}", QUOTA_RESERVED)
        else:
            yield moment("queued", f"in LocalQueue {after.queue}: {said(reserved.reason, reserved.message)}",
                         QUOTA_RESERVED)
    then_checks = {name: state for name, state, _, _ in before.checks} if before is not None else {}
    for name, state, message, time in after.checks:
        if then_checks.get(name) != state:
            yield moment("check", f"admission check {name} {state}" + (f": {message}" if message else ""), time=time)
    if after.cluster_name and (before is None or before.cluster_name != after.cluster_name):
        # Set with the MultiKueue check's Ready state, in the same write.
        when = max((time for _, state, _, time in after.checks if state == "Ready"), key=_instant, default="")
        yield moment("dispatched", f"to worker cluster {after.cluster_name} (MultiKueue)", time=when)
    for condition, event in ((EVICTED, "evicted"), (PREEMPTED, "preempted"), (REQUEUED, "requeued")):
        found = changed(condition)
        if found is not None and found.status == "True":
            yield moment(event, said(found.reason, found.message), condition)
    admitted = changed(ADMITTED)
    if admitted is not None and admitted.status == "True":
        flavors = after.flavor_text()
        yield moment("re-admitted" if admitted_before else "admitted",
                     f"by ClusterQueue {after.cluster_queue}" + (f" with flavours {flavors}" if flavors else ""),
                     ADMITTED)
    ready = changed(PODS_READY)
    if ready is not None and ready.status == "True":
        yield moment("pods-ready", said(ready.reason, ready.message), PODS_READY)
    finished = changed(FINISHED)
    if finished is not None and finished.status == "True":
        yield moment("finished", said(finished.reason, finished.message), FINISHED)


def _instant(text: str) -> dt.datetime:
    try:
        found = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return found if found.tzinfo is not None else found.replace(tzinfo=dt.UTC)


def moments(seen: Iterable[Seen]) -> list[Moment]:
    """The history of the Workloads in ``seen`` (observations in log order, of one or more clusters),
    in time order: each Workload's first observation says every step its status already shows (a
    worker's Workload is seen only once its job owns it), each later one what changed since."""
    last: dict[tuple[str, str], Workload] = {}
    admitted: set[tuple[str, str]] = set()
    found: list[Moment] = []
    for observation in seen:
        workload = Workload.of(observation.workload)
        ident = (observation.cluster, workload.uid or workload.name)
        if observation.event == "DELETED":
            if last.pop(ident, None) is not None:
                found.append(Moment(observation.time, observation.cluster, workload.name, "deleted", ""))
            continue
        steps = list(_changes(last.get(ident), workload, observation.cluster, observation.time, ident in admitted))
        found.extend(steps)
        if any(step.event in ("admitted", "re-admitted") for step in steps):
            admitted.add(ident)
        last[ident] = workload
    return sorted(found, key=lambda m: _instant(m.time))
