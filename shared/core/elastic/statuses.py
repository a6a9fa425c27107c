"""Status bookkeeping of et-operator's three kinds (spec B.3, B.12, B.16).

In: an ``ETStatus`` (a TrainingJob's or a scaler's), a condition to set and
``now``; worker pods. Out: the status changed in place, and replica counts.

The condition rules are et-operator's (``conditions.ET_OPERATOR``): nothing
changes once ``Failed=True`` is present; a condition is unchanged only when
status, reason **and** message are the same; adding ``Failed`` or
``Succeeded`` forces only ``Running`` to False; every condition is ``True``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from shared.api import common, elastic, objects
from shared.core import computations, conditions

CREATED = conditions.CREATED
RUNNING = conditions.RUNNING
SUCCEEDED = conditions.SUCCEEDED
FAILED = conditions.FAILED
SUSPENDED = conditions.SUSPENDED
WORKERS_CREATED = "WorkersCreated"
WORKERS_READY = "WorkersReady"
LAUNCHER_CREATED = "LauncherCreated"
SCALING = "Scaling"
SCRIPT_EXECUTED = "ScriptExecuted"
SCALE_SUCCEEDED = "ScaleSucceeded"
SCALE_FAILED = "ScaleFailed"

REASON_CREATED = "TrainingJobCreated"
REASON_RUNNING = "TrainingJobRunning"
REASON_SUCCEEDED = "TrainingJobSucceeded"
REASON_FAILED = "TrainingJobFailed"
REASON_EVICTED = "TrainingJobEvicted"
REASON_WORKER_FAILED = "TrainingJobWorkerFailed"
REASON_WORKER_CREATED = "TrainingJobWorkerCreated"
REASON_SUSPENDED = "WaitingResourceTimeout"
REASON_SCALING_START = "ScalingStart"
REASON_FAILED_VALIDATION = "TrainingJobFailedValidation"
REASON_BELOW_MINIMUM = "TrainingJobWorkersBelowMinimum"

LAUNCHER = "Launcher"
WORKER = "Worker"


def set_condition(status: elastic.ETStatus, type_: str, reason: str, message: str, now: dt.datetime) -> bool:
    """Set condition ``type_`` to True (every et-operator condition is) by upstream's rules
    (``conditions.ET_OPERATOR``); whether anything changed."""
    return conditions.set_condition(status, type_, "True", reason, message, now, conditions.ET_OPERATOR)


def update(status: elastic.ETStatus, type_: str, reason: str, message: str, now: dt.datetime) -> None:
    """Upstream updateStatus: the condition, and the phase named after it (the phase
    changes even when the condition write is refused after ``Failed``)."""
    set_condition(status, type_, reason, message, now)
    status.phase = type_


def has(status: elastic.ETStatus | None, type_: str) -> bool:
    return conditions.is_true(status, type_)


def is_finished(status: elastic.ETStatus | None) -> bool:
    return has(status, SUCCEEDED) or has(status, FAILED)


def is_scale_finished(status: elastic.ETStatus | None) -> bool:
    return has(status, SCALE_SUCCEEDED) or has(status, SCALE_FAILED)


def is_evicted(status: elastic.ETStatus) -> bool:
    condition = conditions.find(status, FAILED)
    return condition is not None and condition.status == "True" and condition.reason == REASON_EVICTED


def scaling_started(status: elastic.ETStatus | None) -> dt.datetime | None:
    """When the scaler was selected: its ``Scaling`` condition (reason ``ScalingStart``)."""
    for condition in (status.conditions or []) if status is not None else []:
        if condition.type == SCALING and condition.reason == REASON_SCALING_START:
            return condition.last_transition_time
    return None


def initialized(status: elastic.ETStatus) -> None:
    """Upstream initializeJobStatus: an empty conditions list and replicaStatuses map, and
    the restart count: the three fields the CRD requires in every status."""
    if status.replica_statuses is None:
        status.replica_statuses = {}
    if status.conditions is None:
        status.conditions = []
    if status.restart_count is None:
        status.restart_count = 0


def replica(status: elastic.ETStatus, replica_type: str) -> common.ReplicaStatus:
    """``replicaStatuses[replica_type]``, created empty when missing."""
    initialized(status)
    assert status.replica_statuses is not None
    return status.replica_statuses.setdefault(replica_type, common.ReplicaStatus())


def worker_counts(pods: Iterable[common.Manifest]) -> common.ReplicaStatus:
    """Upstream workerReplicaStatuses: Running → active, Succeeded, Failed (zeros left out,
    as Go's ``omitempty`` does)."""
    counts = computations.Counts()
    for pod in pods:
        phase = objects.phase_of(pod)
        if phase == "Running":
            counts.active += 1
        elif phase == "Succeeded":
            counts.succeeded += 1
        elif phase == "Failed":
            counts.failed += 1
    return counts.to_status(None)


def fresh(status: elastic.ETStatus) -> None:
    """Upstream initializeJobStatuses for both replica types: empty Launcher and Worker counts."""
    initialized(status)
    status.replica_statuses = {LAUNCHER: common.ReplicaStatus(), WORKER: common.ReplicaStatus()}


def differs(old: elastic.ETStatus | None, new: elastic.ETStatus) -> bool:
    """Whether writing ``new`` over ``old`` changes anything (upstream DeepEqual)."""
    if old is None:
        return True
    return old.model_dump(mode="json", exclude_none=True) != new.model_dump(mode="json", exclude_none=True)


def names(values: Sequence[str] | None) -> list[str]:
    return list(values or [])
