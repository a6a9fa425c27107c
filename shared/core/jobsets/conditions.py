"""A JobSet's conditions, by JobSet v0.12.0's ``updateCondition`` and its messages.

In: a :class:`~shared.api.jobsets.JobSetStatus`, a condition to set, ``now``. Out: the
same status changed in place, and the Event upstream records for the change. Upstream's
rule: a condition of the same type is replaced where it stands (a new status moves its
lastTransitionTime, a new reason or message alone keeps it); a False condition that is
not there is not added; StartupPolicyInProgress and StartupPolicyCompleted switch each
other off. Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Literal

from shared.api import jobsets
from shared.core import events

ALL_JOBS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
REACHED_MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAIL_JOBSET_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
RESTART_JOBSET_ACTION = ("RestartJobSetFailurePolicyAction", "applying RestartJobSet failure policy action")
RESTART_IGNORING_MAX_ACTION = ("RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
                               "applying RestartJobSetAndIgnoreMaxRestarts failure policy action")
SUSPENDED = ("SuspendedJobs", "jobset is suspended")
RESUMED = ("ResumeJobs", "jobset is resumed")
IN_ORDER_IN_PROGRESS = ("InOrderStartupPolicyInProgress", "in order startup policy is in progress")
IN_ORDER_COMPLETED = ("InOrderStartupPolicyCompleted", "in order startup policy has completed")
RESTARTING_DEFAULT_POLICY = "DefaultFailurePolicy"
RESTARTING_RULE = "FailurePolicy_{}"
RESTARTING_JOBS_READY = ("JobsReady", "all jobs are ready")
RESTARTING_FAILED = ("JobSetFailed", "jobset failed")
RESTARTING_COMPLETED = "JobSetCompleted"
RESTARTING_SUSPENDED = "JobSetSuspended"
JOB_CREATION_FAILED = "JobCreationFailed"

_EXCLUSIVE = frozenset({jobsets.STARTUP_IN_PROGRESS, jobsets.STARTUP_COMPLETED})


def with_first_failed(message: str, job_name: str) -> str:
    """Upstream's ``messageWithFirstFailedJob``."""
    return f"{message} (first failed job: {job_name})"


@dataclasses.dataclass
class Changes:
    """The status being decided and the Events its changes bring (upstream's statusUpdateOpts)."""

    status: jobsets.JobSetStatus
    now: dt.datetime
    events: list[events.Event] = dataclasses.field(default_factory=list)

    def set(self, type_: str, value: Literal["True", "False"], reason: str, message: str,
            event_type: Literal["Normal", "Warning"] = "Normal") -> bool:
        """Set one condition; an Event (the condition's reason and message) when it changed."""
        changed = False
        found = False
        conditions = list(self.status.conditions or [])
        new = jobsets.Condition(type=type_, status=value, reason=reason, message=message,
                                last_transition_time=self.now)
        for index, current in enumerate(conditions):
            if current.type == type_:
                found = True
                if current.status != value:
                    conditions[index], changed = new, True
                elif current.reason != reason or current.message != message:
                    new.last_transition_time = current.last_transition_time
                    conditions[index], changed = new, True
            elif {current.type, type_} <= _EXCLUSIVE and current.status == "True" and value == "True":
                conditions[index] = current.model_copy(update={"status": "False"})
                changed = True
        if not found and value == "True":
            conditions.append(new)
            changed = True
        if changed:
            self.status.conditions = conditions
            self.events.append(events.Event(event_type, reason, message))
        return changed

    def restarting_off(self, reason: str, message: str) -> None:
        self.set(jobsets.RESTARTING, "False", reason, message)

    def completed(self) -> None:
        self.set(jobsets.COMPLETED, "True", *ALL_JOBS_COMPLETED)
        self.restarting_off(RESTARTING_COMPLETED, ALL_JOBS_COMPLETED[1])
        self.status.terminal_state = jobsets.COMPLETED

    def failed(self, reason: str, message: str) -> None:
        self.set(jobsets.FAILED, "True", reason, message, "Warning")
        self.restarting_off(*RESTARTING_FAILED)
        self.status.terminal_state = jobsets.FAILED

    def suspended(self) -> None:
        self.set(jobsets.SUSPENDED, "True", *SUSPENDED)
        self.restarting_off(RESTARTING_SUSPENDED, SUSPENDED[1])

    def resumed(self) -> None:
        self.set(jobsets.SUSPENDED, "False", *RESUMED)


def is_true(status: jobsets.JobSetStatus | None, type_: str) -> bool:
    return status is not None and any(c.type == type_ and c.status == "True" for c in status.conditions or [])


def finished(status: jobsets.JobSetStatus | None) -> bool:
    """Completed or Failed (upstream's jobSetFinished)."""
    return is_true(status, jobsets.COMPLETED) or is_true(status, jobsets.FAILED)


def finish_time(status: jobsets.JobSetStatus | None) -> dt.datetime | None:
    """When the JobSet finished: its Completed or Failed condition's lastTransitionTime."""
    for condition in (status.conditions or []) if status is not None else []:
        if condition.type in (jobsets.COMPLETED, jobsets.FAILED) and condition.status == "True":
            return condition.last_transition_time
    return None
