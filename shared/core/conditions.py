"""Job condition bookkeeping, exactly as upstream's ``pkg/util/status.go`` (spec §7.1).

In: a JobStatus, the condition to set, and ``now``. Out: the same status,
changed in place. The rules: Failed is terminal; same type+status+reason is a
no-op; same status keeps lastTransitionTime; Running and Restarting replace
each other; Succeeded/Failed flip a kept Running to False; the new condition
goes to the end, so the last element is the latest transition.
"""

from __future__ import annotations

import datetime as dt

from shared.api import common

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
SUSPENDED = "Suspended"
FAILED = "Failed"


def find(status: common.JobStatus, type_: str) -> common.JobCondition | None:
    for condition in status.conditions or []:
        if condition.type == type_:
            return condition
    return None


def is_true(status: common.JobStatus | None, type_: str) -> bool:
    if status is None:
        return False
    condition = find(status, type_)
    return condition is not None and condition.status == "True"


def is_finished(status: common.JobStatus | None) -> bool:
    return is_true(status, SUCCEEDED) or is_true(status, FAILED)


def set_condition(
    status: common.JobStatus,
    type_: str,
    status_value: common.ConditionStatus,
    reason: str,
    message: str,
    now: dt.datetime,
) -> bool:
    """Set one condition by upstream's rules; return whether anything changed."""
    if is_true(status, FAILED):
        return False
    current = find(status, type_)
    transition = now
    if current is not None and current.status == status_value:
        if current.reason == reason:
            return False
        transition = current.last_transition_time or now
    kept: list[common.JobCondition] = []
    for condition in status.conditions or []:
        if condition.type == type_:
            continue
        if type_ == RESTARTING and condition.type == RUNNING:
            continue
        if type_ == RUNNING and condition.type == RESTARTING:
            continue
        if type_ in (FAILED, SUCCEEDED) and condition.type == RUNNING and condition.status != "False":
            condition = condition.model_copy(update={"status": "False"})
        kept.append(condition)
    kept.append(
        common.JobCondition(
            type=type_,
            status=status_value,
            reason=reason,
            message=message,
            last_update_time=now,
            last_transition_time=transition,
        )
    )
    status.conditions = kept
    return True
