"""Status of an MPIJob v2beta1 (spec A.12): conditions, replica statuses, failure reasons.

In: a defaulted MPIJob, its status as far as this sync got (Created and
startTime already set by ``deciding``), the launcher Job (observed or just
planned), the launcher Job's pods, the worker pods of this sync (empty when
the launcher is done or the job suspended) and ``now``. Out: the new status
and the Events its transitions call for. Pure: no I/O.

Conditions are set by mpi-operator's own rules (A.12.1,
``conditions.MPI_OPERATOR``): a Failed condition is not terminal for it, and a
new Failed or Succeeded turns an existing Running *and* Failed to False.

Where kto differs from upstream: Events are produced for transitions only
(upstream records ``MPIJobRunning`` and ``MPIJobSucceeded`` on every sync
that finds the job so; they would flood the bus), and a launcher Job that
completed without ``status.completionTime`` gives the MPIJob ``now`` as its
completionTime (upstream copies the nil and never stops syncing the job).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from shared.api import common, mpijobs, objects
from shared.core import computations, conditions, events, outcomes
from shared.core.mpi_v2 import validating

Manifest = common.Manifest
Event = events.Event

CREATED_REASON = "MPIJobCreated"
RUNNING_REASON = "MPIJobRunning"
SUCCEEDED_REASON = "MPIJobSucceeded"
SUSPENDED_REASON = "MPIJobSuspended"
RESUMED_REASON = "MPIJobResumed"
FAILED_REASON = "MPIJobFailed"
EVICTED_REASON = "MPIJobEvicted"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"


def created(job: mpijobs.MPIJob, status: common.JobStatus, now: dt.datetime) -> list[Event]:
    """A.7 step 5: a status without conditions gets ``Created=True``."""
    if status.conditions:
        return []
    message = f"MPIJob {job.namespace}/{job.name} is created."
    conditions.set_condition(status, conditions.CREATED, "True", CREATED_REASON, message, now, conditions.MPI_OPERATOR)
    return [Event("Normal", CREATED_REASON, message)]


def _job_condition(launcher: Manifest, type_: str) -> Manifest | None:
    for condition in (launcher.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return None


def launcher_succeeded(launcher: Manifest | None) -> bool:
    condition = None if launcher is None else _job_condition(launcher, "Complete")
    return condition is not None and condition.get("status") == "True"


def launcher_failed(launcher: Manifest | None) -> bool:
    condition = None if launcher is None else _job_condition(launcher, "Failed")
    return condition is not None and condition.get("status") == "True"


def launcher_done(launcher: Manifest | None) -> bool:
    """The launcher Job is Complete or Failed: the sync creates nothing more."""
    return launcher_succeeded(launcher) or launcher_failed(launcher)


def _created_at(pod: Manifest) -> dt.datetime:
    raw = objects.creation_timestamp_of(pod)
    return common.parse_time(raw) if raw is not None else dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def failure(job: mpijobs.MPIJob, launcher: Manifest, launcher_pods: Sequence[Manifest]) -> tuple[str, str]:
    """A.12.3: reason and message of a failed launcher Job; after ``BackoffLimitExceeded``, the
    newest Failed launcher pod's reason and message are appended."""
    condition = _job_condition(launcher, "Failed") or {}
    reason = str(condition.get("reason") or FAILED_REASON)
    message = str(condition.get("message") or f"MPIJob {job.namespace}/{job.name} has failed")
    if reason == BACKOFF_LIMIT_EXCEEDED:
        last: Manifest | None = None
        for pod in launcher_pods:
            if objects.phase_of(pod) == "Failed" and (last is None or _created_at(last) < _created_at(pod)):
                last = pod
        if last is not None:
            pod_status = last.get("status") or {}
            reason += "/" + str(pod_status.get("reason") or "")
            message = validating.truncate(message + ": " + str(pod_status.get("message") or ""))
    return reason, message


def compute(
    job: mpijobs.MPIJob,
    status: common.JobStatus,
    launcher: Manifest | None,
    launcher_pods: Sequence[Manifest],
    workers: Sequence[Manifest],
    now: dt.datetime,
) -> outcomes.Outcome:
    """A.12.2 on a copy of ``status``."""
    status = status.model_copy(deep=True)
    events: list[Event] = []
    ns_name = f"{job.namespace}/{job.name}"
    if job.suspended:
        if conditions.set_condition(
            status, conditions.SUSPENDED, "True", SUSPENDED_REASON, "MPIJob suspended", now,
            conditions.MPI_OPERATOR,
        ):
            events.append(Event("Normal", SUSPENDED_REASON, "MPIJob suspended"))
    elif conditions.find(status, conditions.SUSPENDED) is not None:
        if conditions.set_condition(
            status, conditions.SUSPENDED, "False", RESUMED_REASON, "MPIJob resumed", now,
            conditions.MPI_OPERATOR,
        ):
            events.append(Event("Normal", RESUMED_REASON, "MPIJob resumed"))
            status.start_time = now

    replica_statuses = dict(status.replica_statuses or {})
    running_launchers = 0
    if launcher is not None:
        running_launchers = sum(1 for pod in launcher_pods if objects.phase_of(pod) == "Running")
        counts = computations.Counts(failed=int((launcher.get("status") or {}).get("failed") or 0))
        if launcher_succeeded(launcher):
            counts.succeeded = 1
            message = f"MPIJob {ns_name} successfully completed."
            if status.completion_time is None:
                raw = (launcher.get("status") or {}).get("completionTime")
                status.completion_time = common.parse_time(raw) if isinstance(raw, str) else now
            if conditions.set_condition(
                status, conditions.SUCCEEDED, "True", SUCCEEDED_REASON, message, now,
                conditions.MPI_OPERATOR,
            ):
                events.append(Event("Normal", SUCCEEDED_REASON, message))
        elif launcher_failed(launcher):
            reason, message = failure(job, launcher, launcher_pods)
            if status.completion_time is None:
                status.completion_time = now
            if conditions.set_condition(
                status, conditions.FAILED, "True", reason, message, now,
                conditions.MPI_OPERATOR,
            ):
                events.append(Event("Warning", reason, message))
        else:
            counts.active = running_launchers
        replica_statuses[mpijobs.LAUNCHER] = counts.to_status(None)

    worker_counts = computations.Counts()
    evicted = 0
    for pod in workers:
        phase = objects.phase_of(pod)
        if phase == "Failed":
            worker_counts.failed += 1
            evicted += (pod.get("status") or {}).get("reason") == "Evicted"
        elif phase == "Succeeded":
            worker_counts.succeeded += 1
        elif phase == "Running":
            worker_counts.active += 1
    replica_statuses[mpijobs.WORKER] = worker_counts.to_status(None)
    status.replica_statuses = replica_statuses
    if evicted:
        # Upstream sets no completionTime here (mpi-operator#647); kept for compatibility.
        message = f"{evicted}/{len(workers)} workers are evicted"
        if conditions.set_condition(
            status, conditions.FAILED, "True", EVICTED_REASON, message, now,
            conditions.MPI_OPERATOR,
        ):
            events.append(Event("Warning", EVICTED_REASON, message))

    if job.suspended:
        conditions.set_condition(
            status, conditions.RUNNING, "False", SUSPENDED_REASON, f"MPIJob {ns_name} is suspended.", now,
            conditions.MPI_OPERATOR,
        )
    elif conditions.is_finished(status):
        if conditions.find(status, conditions.RUNNING) is None:
            at = status.completion_time or now
            status.conditions = [*(status.conditions or []), common.JobCondition(
                type=conditions.RUNNING, status="False", reason=RUNNING_REASON,
                message=f"MPIJob {ns_name} is finished but Running condition was never set.",
                last_update_time=at, last_transition_time=at,
            )]
    elif launcher is not None and running_launchers >= 1 and worker_counts.active == len(workers):
        message = f"MPIJob {ns_name} is running."
        if conditions.set_condition(
            status, conditions.RUNNING, "True", RUNNING_REASON, message, now,
            conditions.MPI_OPERATOR,
        ):
            events.append(Event("Normal", RUNNING_REASON, f"MPIJob {ns_name} is running"))
    return outcomes.Outcome(status, events)
