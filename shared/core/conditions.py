"""Job condition bookkeeping by each upstream project's own rules (spec §7.1, A.12.1, B.3).

In: a JobStatus, the condition to set, ``now`` and the :class:`Rules` of the
project whose status it is. Out: the same status, changed in place. What every
project does: same type+status+reason is a no-op; same status keeps
lastTransitionTime; the new condition goes to the end, so the last element is
the latest transition. What differs sits in a rule table, one per project:
:data:`KUBEFLOW_V1` (``pkg/util/status.go``: Failed is terminal; Running and
Restarting replace each other; Succeeded/Failed flip a kept Running to False),
:data:`MPI_OPERATOR` (a Failed condition is not terminal; Succeeded/Failed also
flip a kept Failed to False) and :data:`ET_OPERATOR` (a changed message alone
is a change; nothing replaces Running).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from shared.api import common

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
SUSPENDED = "Suspended"
FAILED = "Failed"


@dataclasses.dataclass(frozen=True)
class Rules:
    """What one upstream project's condition helper does beyond the common rules."""

    failed_is_terminal: bool
    """Once ``Failed=True`` is present, nothing changes any more."""
    message_counts: bool
    """A condition of the same status and reason but another message is written again."""
    replace_each_other: frozenset[str]
    """Types of which a new one removes the others (Running and Restarting)."""
    finished_switches_off: frozenset[str]
    """Types a new Succeeded or Failed sets to False (kept in place)."""


KUBEFLOW_V1 = Rules(
    failed_is_terminal=True, message_counts=False,
    replace_each_other=frozenset({RUNNING, RESTARTING}), finished_switches_off=frozenset({RUNNING}),
)
"""training-operator's ``pkg/util/status.go`` (kubeflow.org/v1)."""

MPI_OPERATOR = Rules(
    failed_is_terminal=False, message_counts=False,
    replace_each_other=frozenset({RUNNING, RESTARTING}), finished_switches_off=frozenset({RUNNING, FAILED}),
)
"""mpi-operator's ``updateMPIJobConditions`` (kubeflow.org/v2beta1, A.12.1)."""

ET_OPERATOR = Rules(
    failed_is_terminal=True, message_counts=True,
    replace_each_other=frozenset(), finished_switches_off=frozenset({RUNNING}),
)
"""et-operator's ``updateJobConditions`` (kai.alibabacloud.com, B.3)."""


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
    rules: Rules = KUBEFLOW_V1,
) -> bool:
    """Set one condition by ``rules`` (kubeflow.org/v1's by default); return whether anything changed."""
    if rules.failed_is_terminal and is_true(status, FAILED):
        return False
    current = find(status, type_)
    transition = now
    if current is not None and current.status == status_value:
        if current.reason == reason and (not rules.message_counts or current.message == message):
            return False
        transition = current.last_transition_time or now
    replaced = rules.replace_each_other if type_ in rules.replace_each_other else frozenset()
    switched_off = rules.finished_switches_off if type_ in (FAILED, SUCCEEDED) else frozenset()
    kept: list[common.JobCondition] = []
    for condition in status.conditions or []:
        if condition.type == type_ or condition.type in replaced:
            continue
        if condition.type in switched_off and condition.status != "False":
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
