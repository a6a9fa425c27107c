"""A TrainJob's status, as Trainer v2.3's controller writes it (pkg/controller/
trainjob_controller.go and the JobSet plugin's ``Status``).

In: the TrainJob's status as stored (a dict), its JobSet as observed, the clock. Out:
the new status (:class:`Status`, what the reconciler writes), changed only by these
rules:

* ``Failed`` for an unsupported runtime or a plan that cannot be made is taken off at
  the start of every pass (:func:`without_failure`) and set again if the pass finds it
  still so; the JobSet's and the deadline's stay;
* ``Suspended``: True (``Suspended``, "TrainJob is suspended") while ``spec.suspend``,
  then False (``Resumed``, "TrainJob is resumed") once it was True;
* ``Complete`` and ``Failed`` copied from the JobSet's ``Completed`` and ``Failed``
  (reason, message and lastTransitionTime kept), and ``jobsStatus[]`` from its
  ``replicatedJobsStatus`` (ready, succeeded, failed, active, suspended);
* ``DeadlineExceeded`` ("TrainJob exceeded its active deadline") once
  ``activeDeadlineSeconds`` have passed since creation or the last resume.

Conditions are ``metav1.Condition``: ``meta.SetStatusCondition`` keeps a condition's
lastTransitionTime while its status stays. No ``Running`` condition (see
docs/trainer-v2.md: the SDK reads any condition list as "no longer running"). Pure.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any, Literal

from shared.api import common, objects, trainer
from shared.core.events import Event

Manifest = dict[str, Any]

COMPLETE = trainer.COMPLETE
FAILED = trainer.FAILED
SUSPENDED = trainer.SUSPENDED
SUSPENDED_REASON = trainer.SUSPENDED_REASON
RESUMED_REASON = trainer.RESUMED_REASON
SUSPENDED_MESSAGE = "TrainJob is suspended"
RESUMED_MESSAGE = "TrainJob is resumed"
RUNTIME_NOT_SUPPORTED_REASON = trainer.RUNTIME_NOT_SUPPORTED_REASON
DEADLINE_EXCEEDED_REASON = trainer.DEADLINE_EXCEEDED_REASON
DEADLINE_EXCEEDED_MESSAGE = "TrainJob exceeded its active deadline"
CREATION_FAILED_REASON = "TrainJobResourcesCreationFailed"
"""Upstream's Warning Event when the children cannot be made; kto also puts it on a
``Failed`` condition when the cause is the job or its runtime (it will not go away by itself)."""
JOBSET_COMPLETED = "Completed"
JOBSET_FAILED = trainer.FAILED
JOB_COUNTS = ("ready", "succeeded", "failed", "active", "suspended")


@dataclasses.dataclass
class Status:
    """A TrainJob's ``status``, as an object."""

    value: Manifest

    def dump(self) -> Manifest:
        return copy.deepcopy(self.value)

    @property
    def conditions(self) -> list[Manifest]:
        listed = self.value.get("conditions")
        return listed if isinstance(listed, list) else []

    def find(self, type_: str) -> Manifest | None:
        return next((c for c in self.conditions if isinstance(c, dict) and c.get("type") == type_), None)

    def is_true(self, type_: str) -> bool:
        found = self.find(type_)
        return found is not None and found.get("status") == "True"

    @property
    def finished(self) -> bool:
        """Complete or Failed (upstream's IsTrainJobFinished)."""
        return self.is_true(COMPLETE) or self.is_true(FAILED)

    def set(self, type_: str, status: str, reason: str, message: str, now: dt.datetime,
            since: str | None = None) -> None:
        """``meta.SetStatusCondition``: ``since`` (else ``now``) is the lastTransitionTime of a
        new condition or of one whose status changes."""
        stamp = since or common.format_time(now)
        found = self.find(type_)
        if found is None:
            self.value["conditions"] = [*self.conditions, {"type": type_, "status": status, "reason": reason,
                                                           "message": message, "lastTransitionTime": stamp}]
            return
        if found.get("status") != status:
            found["status"], found["lastTransitionTime"] = status, stamp
        found["reason"], found["message"] = reason, message

    def remove(self, type_: str) -> None:
        if self.find(type_) is not None:
            self.value["conditions"] = [c for c in self.conditions if not (isinstance(c, dict)
                                                                           and c.get("type") == type_)]
        if not self.value.get("conditions"):
            self.value.pop("conditions", None)

    def fail(self, reason: str, message: str, now: dt.datetime) -> None:
        self.set(FAILED, "True", reason, message, now)


def of(job: Mapping[str, Any]) -> Status:
    """The job's stored status, copied (an empty one when it has none)."""
    status = job.get("status")
    return Status(copy.deepcopy(status) if isinstance(status, dict) else {})


PER_PASS_FAILURES = frozenset({RUNTIME_NOT_SUPPORTED_REASON, CREATION_FAILED_REASON})
"""Failed reasons a pass decides afresh (the runtime reference and the plan)."""


def without_failure(status: Status) -> None:
    """Upstream's removeFailedCondition, for the failures a pass decides afresh. Upstream
    takes off every Failed but the deadline's, the JobSet's too, and copies that back from
    the JobSet; kto keeps the JobSet's, so that a failed job whose JobSet is gone (its TTL)
    is not given a new one."""
    found = status.find(FAILED)
    if found is not None and found.get("reason") in PER_PASS_FAILURES:
        status.remove(FAILED)


def set_suspended(job: Mapping[str, Any], status: Status, now: dt.datetime) -> None:
    if objects.spec_of(job).get("suspend"):
        status.set(SUSPENDED, "True", SUSPENDED_REASON, SUSPENDED_MESSAGE, now)
    elif status.is_true(SUSPENDED):
        status.set(SUSPENDED, "False", RESUMED_REASON, RESUMED_MESSAGE, now)


def from_jobset(status: Status, jobset: Mapping[str, Any] | None, now: dt.datetime) -> None:
    """The JobSet plugin's Status: Complete and Failed copied, jobsStatus rebuilt (nothing
    without a JobSet, as upstream when a finished job's JobSet is gone)."""
    if jobset is None:
        return
    raw = jobset.get("status")
    observed: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    for condition in observed.get("conditions") or []:
        if not isinstance(condition, dict) or condition.get("status") != "True":
            continue
        type_ = {JOBSET_COMPLETED: COMPLETE, JOBSET_FAILED: FAILED}.get(str(condition.get("type")))
        if type_ is not None:
            status.set(type_, "True", str(condition.get("reason") or ""), str(condition.get("message") or ""), now,
                       since=condition.get("lastTransitionTime"))
    jobs = [{"name": str(rjob.get("name") or ""), **{k: int(rjob.get(k) or 0) for k in JOB_COUNTS}}
            for rjob in observed.get("replicatedJobsStatus") or [] if isinstance(rjob, dict)]
    if jobs:
        status.value["jobsStatus"] = jobs
    else:
        status.value.pop("jobsStatus", None)


def deadline(job: Mapping[str, Any], status: Status, now: dt.datetime) -> dt.datetime | None:
    """When ``activeDeadlineSeconds`` runs out (None: no deadline runs now): from the job's
    creation, or from its resume (the Suspended=False condition's time)."""
    seconds = objects.spec_of(job).get("activeDeadlineSeconds")
    if not isinstance(seconds, int) or seconds <= 0 or status.finished or objects.spec_of(job).get("suspend"):
        return None  # none, or not a number (admission says so; the pass does not)
    start = objects.creation_timestamp_of(job)
    resumed = status.find(SUSPENDED)
    if resumed is not None and resumed.get("status") == "False" and resumed.get("lastTransitionTime"):
        start = str(resumed["lastTransitionTime"])
    if not start:
        return None
    return common.parse_time(start) + dt.timedelta(seconds=int(seconds))


def transitions(old: Status, new: Status) -> list[Event]:
    """kto's Events for the conditions a pass changed (upstream's TrainJob controller records
    none): each condition newly set, or whose status or reason changed, with its reason and
    message; a Warning for Failed, Normal for the others."""
    said = []
    for condition in new.conditions:
        before = old.find(str(condition.get("type")))
        if before is not None and (before.get("status"), before.get("reason")) == (condition.get("status"),
                                                                                   condition.get("reason")):
            continue
        kind: Literal["Normal", "Warning"] = "Warning" if condition.get("type") == FAILED else "Normal"
        said.append(Event(kind, str(condition.get("reason") or condition.get("type")),
                          str(condition.get("message") or "")))
    return said
