"""Job status from the job and its observed pods (spec §6.3, §6.4, §6.11, §7).

In: a defaulted job (with its stored status), the job's pods, ``now``, and
optionally a failure verdict the reconciler reached (backoff limit, deadline,
validation: ``outcomes.Verdict``). Out: the new status and the Events its
transitions call for (``outcomes.Outcome``).
The status service writes the result; the reconciler uses the same function
to know whether a job has finished. Pure: no I/O, the clock is an argument.

The engine here is written once for every kind (conditions bookkeeping,
suspension, verdicts, replica counting, startTime, finished jobs); each kind's
Running / Succeeded / Failed / Restarting rules are its framework plugin's
``status_rules`` hook (``shared/core/frameworks/<kind>.py``), working on a
``computations.Computation``.

Where kto differs from upstream (docs/pipeline.md):
* replica types are visited in a fixed order (the kind's canonical order), not
  Go's random map order, so the outcome of a pass is deterministic;
* the ExitCode "permanent failure" path sets ``completionTime`` (upstream
  leaves it nil, which breaks ttlSecondsAfterFinished);
* a TFJob that succeeded in a pass is not also marked Failed in that pass.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Literal

from shared.api import common, jobs, objects
from shared.core import computations, conditions, frameworks, naming, outcomes
from shared.core.events import Event

Pod = common.Manifest


def restart_action(job: jobs.Job, replica_type: str, pod: Pod) -> Literal["restart", "fail", None]:
    """What a Failed pod of a generic kind calls for (§6.4 c).

    "restart": delete it so the reconciler recreates it; "fail": the job failed
    for good (ExitCode with a code below 128); None: the kind's status rules decide.
    MPIJob never restarts pods (§6.13).
    """
    if objects.phase_of(pod) != "Failed" or isinstance(job, jobs.MPIJob):
        return None
    spec = job.specs().get(replica_type)
    policy = spec.restart_policy if spec is not None else None
    if policy in ("OnFailure", "Always"):
        return "restart"
    if policy == "ExitCode":
        code = objects.default_exit_code(pod, job.DEFAULT_CONTAINER)
        return "restart" if objects.is_retryable_exit_code(code) else "fail"
    return None


def replica_pods(job: jobs.Job, pods: Sequence[Pod], replica_type: str) -> dict[int, Pod]:
    """The job's pods of one replica type by index; indexes held by several pods are dropped (§6.4)."""
    buckets: dict[int, list[Pod]] = {}
    rt = replica_type.lower()
    for pod in pods:
        labels = objects.labels_of(pod)
        if labels.get(naming.LABEL_REPLICA_TYPE) != rt:
            continue
        try:
            index = int(labels.get(naming.LABEL_REPLICA_INDEX, ""))
        except ValueError:
            if isinstance(job, jobs.MPIJob) and rt == "launcher":
                index = 0
            else:
                continue
        buckets.setdefault(index, []).append(pod)
    return {index: group[0] for index, group in buckets.items() if len(group) == 1}


def is_managed_externally(job: jobs.Job) -> bool:
    """§6.10: managedBy set to anything but kubeflow.org/training-operator (JAXJob ignores it)."""
    if isinstance(job, jobs.JAXJob):
        return False
    managed_by = job.run_policy.managed_by
    return managed_by is not None and managed_by != common.MANAGED_BY_KUBEFLOW


def _count_generic(p: computations.Computation) -> None:
    job = p.job
    for rt in computations.replica_order(job):
        for _, pod in sorted(p.pods[rt].items()):
            action = restart_action(job, rt, pod)
            if action == "restart":
                p.restarting(f"job {job.name} is restarting because {rt} replica(s) failed.")
            elif action == "fail":
                p.failed(
                    f'job "{job.name}" is failing because "{rt}" replica(s) failed.',
                    event_type="Warning",
                )
            computations.count(pod, p.counts[rt])


def _count_mpi(p: computations.Computation) -> None:
    """§6.13 step 6: the launcher counts as one; workers count only while the launcher is not done."""
    launcher = p.pods.get("Launcher", {}).get(0)
    launcher_done = launcher is not None and objects.phase_of(launcher) in ("Succeeded", "Failed")
    if launcher is not None:
        computations.count(launcher, p.counts["Launcher"])
    if not launcher_done and "Worker" in p.counts:
        for pod in p.pods["Worker"].values():
            current = objects.phase_of(pod)
            if current in ("Running", "Succeeded", "Failed"):
                computations.count(pod, p.counts["Worker"])


def compute(
    job: jobs.Job,
    pods: Sequence[Pod],
    now: dt.datetime,
    verdict: outcomes.Verdict | None = None,
) -> outcomes.Outcome:
    """The job's next status (§6.3 steps 3–10 as far as status goes) and its Events.

    ``job`` must be defaulted; ``pods`` are the job's pods (controller owner = the job).
    """
    stored = job.status or common.JobStatus()
    kind, name = job.KIND, job.name
    invalid = verdict is not None and verdict.reason == f"{kind}FailedValidation"
    if is_managed_externally(job) and not invalid:
        # A validation verdict still counts: an update that handed the job over
        # to another controller breaks managedBy's immutability (deciding.decide).
        return outcomes.Outcome(stored.model_copy(deep=True), [])
    status = stored.model_copy(deep=True)
    events: list[Event] = []
    if conditions.find(status, conditions.CREATED) is None:
        conditions.set_condition(
            status, conditions.CREATED, "True", f"{kind}Created", f"{kind} {name} is created.", now
        )
    if verdict is not None and invalid:
        if status.completion_time is None:
            status.completion_time = now
        if conditions.set_condition(status, conditions.FAILED, "True", verdict.reason, verdict.message, now):
            events.append(Event("Warning", verdict.reason, verdict.message))
        return outcomes.Outcome(status, events)

    if conditions.is_finished(status):
        if conditions.is_true(status, conditions.SUCCEEDED):
            for replica in (status.replica_statuses or {}).values():
                if replica.active:
                    replica.succeeded = (replica.succeeded or 0) + replica.active
                    _clear_active(replica)
        return outcomes.Outcome(status, events)

    if job.run_policy.suspend:
        for replica in (status.replica_statuses or {}).values():
            if replica.active:
                _clear_active(replica)
        message = f"{kind} {name} is suspended."
        if conditions.is_true(status, conditions.RUNNING):
            conditions.set_condition(status, conditions.RUNNING, "False", f"{kind}Suspended", message, now)
        if not conditions.is_true(status, conditions.SUSPENDED):
            conditions.set_condition(status, conditions.SUSPENDED, "True", f"{kind}Suspended", message, now)
            events.append(Event("Normal", f"{kind}Suspended", message))
        return outcomes.Outcome(status, events)

    if conditions.is_true(status, conditions.SUSPENDED):
        message = f"{kind} {name} is resumed."
        conditions.set_condition(status, conditions.SUSPENDED, "False", f"{kind}Resumed", message, now)
        status.start_time = now
        events.append(Event("Normal", f"{kind}Resumed", message))

    p = computations.Computation(
        job=job,
        status=status,
        counts={rt: computations.Counts() for rt in computations.replica_order(job)},
        pods={rt: replica_pods(job, pods, rt) for rt in computations.replica_order(job)},
        now=now,
        events=events,
    )
    if verdict is not None:
        if status.completion_time is None:
            status.completion_time = now
        if conditions.set_condition(status, conditions.FAILED, "True", verdict.reason, verdict.message, now):
            events.append(Event("Normal", verdict.reason, verdict.message))
        return outcomes.Outcome(status, events)

    if isinstance(job, jobs.MPIJob):
        _count_mpi(p)
    else:
        _count_generic(p)
    if status.start_time is None:
        status.start_time = now
    framework = frameworks.for_job(job)
    framework.status_rules(p)
    status.replica_statuses = {
        rt: p.counts[rt].to_status(naming.replica_selector(job, rt) if framework.status_selector else None)
        for rt in computations.replica_order(job)
    }
    if conditions.is_true(status, conditions.SUCCEEDED):
        for replica in status.replica_statuses.values():
            if replica.active:
                replica.succeeded = (replica.succeeded or 0) + replica.active
                _clear_active(replica)
    return outcomes.Outcome(status, events)


def _clear_active(replica: common.ReplicaStatus) -> None:
    """``active`` back to absent (upstream's 0 with ``omitempty``): set to None it
    would be written as ``null``, which the CRD schema rejects (integer)."""
    replica.active = None
    replica.model_fields_set.discard("active")
