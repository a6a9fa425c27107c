"""Job status from the job and its observed pods (spec §6.3, §6.4, §6.11, §7).

In: a defaulted job (with its stored status), the job's pods, ``now``, and
optionally a failure verdict the reconciler reached (backoff limit, deadline,
validation). Out: the new status and the Events its transitions call for.
The status service writes the result; the reconciler uses the same function
to know whether a job has finished. Pure: no I/O, the clock is an argument.

Where kto differs from upstream (docs/pipeline.md):
* replica types are visited in a fixed order (the kind's canonical order), not
  Go's random map order, so the outcome of a pass is deterministic;
* the ExitCode "permanent failure" path sets ``completionTime`` (upstream
  leaves it nil, which breaks ttlSecondsAfterFinished);
* a TFJob that succeeded in a pass is not also marked Failed in that pass.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, Literal

from shared.api import common, jobs
from shared.core import conditions, naming

Pod = dict[str, Any]

EXIT_CODE_UNKNOWN = 0xBEEF
"""Upstream's sentinel exit code when the default container has not terminated."""



@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to record on the job."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A failure the reconciler decided (backoff limit, deadline, validation)."""

    reason: str
    message: str


@dataclasses.dataclass
class Outcome:
    status: common.JobStatus
    events: list[Event]

    @property
    def finished(self) -> bool:
        return conditions.is_finished(self.status)


def is_retryable_exit_code(code: int) -> bool:
    """Upstream ``IsRetryableExitCode``: 128 and above (signals, the unknown sentinel)."""
    return code >= 128


def default_exit_code(pod: Pod, container_name: str) -> int:
    """Exit code of the default container's terminated state, else the 0xbeef sentinel."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container_name:
            terminated = (status.get("state") or {}).get("terminated")
            if terminated is not None and "exitCode" in terminated:
                return int(terminated["exitCode"])
    return EXIT_CODE_UNKNOWN


def restart_action(job: jobs.Job, replica_type: str, pod: Pod) -> Literal["restart", "fail", None]:
    """What a Failed pod of a generic kind calls for (§6.4 c).

    "restart": delete it so the reconciler recreates it; "fail": the job failed
    for good (ExitCode with a code below 128); None: the kind's status rules decide.
    MPIJob never restarts pods (§6.13).
    """
    if phase(pod) != "Failed" or isinstance(job, jobs.MPIJob):
        return None
    spec = job.specs().get(replica_type)
    policy = spec.restart_policy if spec is not None else None
    if policy in ("OnFailure", "Always"):
        return "restart"
    if policy == "ExitCode":
        code = default_exit_code(pod, job.DEFAULT_CONTAINER)
        return "restart" if is_retryable_exit_code(code) else "fail"
    return None


def phase(pod: Pod) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_deleting(pod: Pod) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def replica_pods(job: jobs.Job, pods: Sequence[Pod], replica_type: str) -> dict[int, Pod]:
    """The job's pods of one replica type by index; indexes held by several pods are dropped (§6.4)."""
    buckets: dict[int, list[Pod]] = {}
    rt = replica_type.lower()
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
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


@dataclasses.dataclass
class Counts:
    active: int = 0
    succeeded: int = 0
    failed: int = 0

    def to_status(self, selector: str | None) -> common.ReplicaStatus:
        values: dict[str, Any] = {
            name: value
            for name, value in (("active", self.active), ("succeeded", self.succeeded), ("failed", self.failed))
            if value
        }
        if selector is not None:
            values["selector"] = selector
        return common.ReplicaStatus(**values)


def count(pod: Pod, counts: Counts) -> None:
    """§6.4 d: Running → active (being deleted → failed), Succeeded, Failed; Pending not counted."""
    current = phase(pod)
    if current == "Running":
        if is_deleting(pod):
            counts.failed += 1
        else:
            counts.active += 1
    elif current == "Succeeded":
        counts.succeeded += 1
    elif current == "Failed":
        counts.failed += 1


def replica_order(job: jobs.Job) -> list[str]:
    """Replica types in the kind's canonical order, then any others sorted (kto: deterministic)."""
    specs = job.specs()
    known = [rt for rt in job.REPLICA_TYPES if rt in specs]
    return known + sorted(rt for rt in specs if rt not in job.REPLICA_TYPES)


def selector(job: jobs.Job, replica_type: str) -> str:
    """§4.4: the scale subresource's label selector, keys sorted."""
    return (
        f"{naming.LABEL_JOB_NAME}={job.name},"
        f"{naming.LABEL_OPERATOR_NAME}={job.CONTROLLER_NAME},"
        f"{naming.LABEL_REPLICA_TYPE}={replica_type.lower()}"
    )


def is_managed_externally(job: jobs.Job) -> bool:
    """§6.10: managedBy set to anything but kubeflow.org/training-operator (JAXJob ignores it)."""
    if isinstance(job, jobs.JAXJob):
        return False
    managed_by = job.run_policy.managed_by
    return managed_by is not None and managed_by != common.MANAGED_BY_KUBEFLOW


@dataclasses.dataclass
class Pass:
    """The working state of one status computation, handed to the kind's rules."""

    job: jobs.Job
    status: common.JobStatus
    counts: dict[str, Counts]
    pods: dict[str, dict[int, Pod]]
    now: dt.datetime
    events: list[Event]

    def reason(self, word: str) -> str:
        return f"{self.job.KIND}{word}"

    def set(self, type_: str, reason_word: str, message: str, value: common.ConditionStatus = "True") -> bool:
        return conditions.set_condition(self.status, type_, value, self.reason(reason_word), message, self.now)

    def running(self, message: str) -> None:
        self.set(conditions.RUNNING, "Running", message)

    def succeeded(self, message: str) -> None:
        if self.status.completion_time is None:
            self.status.completion_time = self.now
        self.events.append(Event("Normal", self.reason("Succeeded"), message))
        self.set(conditions.SUCCEEDED, "Succeeded", message)

    def failed(self, message: str, reason_word: str = "Failed", event_type: Literal["Normal", "Warning"] = "Normal") -> None:
        if self.status.completion_time is None:
            self.status.completion_time = self.now
        if self.set(conditions.FAILED, reason_word, message):
            self.events.append(Event(event_type, self.reason(reason_word), message))

    def restarting(self, message: str) -> None:
        if self.set(conditions.RESTARTING, "Restarting", message):
            self.events.append(Event("Warning", self.reason("Restarting"), message))

    def replicas(self, replica_type: str) -> int:
        spec = self.job.specs().get(replica_type)
        return 1 if spec is None or spec.replicas is None else spec.replicas

    def policy(self, replica_type: str) -> str | None:
        spec = self.job.specs().get(replica_type)
        return spec.restart_policy if spec is not None else None


Rules = Callable[[Pass], None]


def _master_or_worker_rules(
    master_types: tuple[str, ...],
    master_messages: tuple[str, str],
    worker_messages: tuple[str, str],
    elastic_shortcut: bool,
) -> Rules:
    """PyTorch / Paddle / JAX (§7.2, §7.5, §7.6): a Master decides if there is one, else the Worker.

    Messages are format strings over ``kind``, ``name`` and ``ns``: (running, succeeded).
    """

    def rules(p: Pass) -> None:
        job = p.job
        names = {"kind": job.KIND, "name": job.name, "ns": job.namespace}
        has_master = any(rt in job.specs() for rt in master_types)
        for rt in replica_order(job):
            c = p.counts[rt]
            expected = p.replicas(rt) - c.succeeded
            if has_master and rt in master_types:
                if c.active > 0:
                    p.running(master_messages[0].format(**names))
                if expected == 0:
                    p.succeeded(master_messages[1].format(**names))
                    return
            elif not has_master and rt == "Worker":
                elastic = elastic_shortcut and getattr(job.spec, "elastic_policy", None) is not None
                if expected == 0 or (elastic and c.succeeded > 0):
                    p.succeeded(worker_messages[1].format(**names))
                elif c.active > 0:
                    p.running(worker_messages[0].format(**names))
            if c.failed > 0 and p.replicas(rt) > c.succeeded + c.active:
                if p.policy(rt) != "Never":
                    p.restarting(f"{job.KIND} {job.name} is restarting because {c.failed} {rt} replica(s) failed.")
                else:
                    p.failed(f"{job.KIND} {job.name} is failed because {c.failed} {rt} replica(s) failed.")

    return rules


def _worker0_completed(p: Pass) -> bool:
    if "Worker" not in p.job.specs():
        return True
    pod = p.pods.get("Worker", {}).get(0)
    if pod is None or phase(pod) != "Succeeded":
        return False
    return default_exit_code(pod, p.job.DEFAULT_CONTAINER) == 0


def _tensorflow_rules(p: Pass) -> None:
    """§7.3, visiting Chief, Evaluator, Master, PS, Worker."""
    job = p.job
    assert isinstance(job.spec, jobs.TFJobSpec)
    ns_name = f"{job.namespace}/{job.name}"
    restarting = conditions.find(p.status, conditions.RESTARTING)
    remembered = (restarting.reason, restarting.message) if restarting is not None else None
    specs = job.specs()
    has_chief = "Chief" in specs or "Master" in specs
    worker0_completed = _worker0_completed(p)
    succeeded_now = False
    for rt in ("Chief", "Evaluator", "Master", "PS", "Worker"):
        if rt not in specs:
            continue
        c = p.counts[rt]
        expected = p.replicas(rt) - c.succeeded
        if has_chief and rt in ("Chief", "Master"):
            if c.active > 0:
                p.running(f"TFJob {ns_name} is running.")
            if expected == 0:
                p.succeeded(f"TFJob {ns_name} successfully completed.")
                succeeded_now = True
        elif not has_chief and rt == "Worker":
            all_workers = job.spec.success_policy == "AllWorkers"
            if expected == 0 or (worker0_completed and not all_workers):
                p.succeeded(f"TFJob {ns_name} successfully completed.")
                succeeded_now = True
            elif c.active > 0:
                p.running(f"TFJob {ns_name} is running.")
        if c.failed > 0:
            if remembered is not None:
                if conditions.set_condition(
                    p.status, conditions.RESTARTING, "True", remembered[0] or p.reason("Restarting"),
                    remembered[1] or "", p.now,
                ):
                    p.events.append(Event("Warning", p.reason("Restarting"), remembered[1] or ""))
            elif job.spec.enable_dynamic_worker and rt == "Worker":
                continue
            elif not succeeded_now and not conditions.is_true(p.status, conditions.SUCCEEDED):
                p.failed(f"TFJob {ns_name} has failed because {c.failed} {rt} replica(s) failed.")


def _xgboost_rules(p: Pass) -> None:
    """§7.4: the Master decides success; any failed pod fails the job unless its policy is ExitCode."""
    job = p.job
    running = f"XGBoostJob {job.name} is running."
    for rt in replica_order(job):
        c = p.counts[rt]
        if rt == "Master":
            if c.active > 0:
                p.running(running)
            if p.replicas(rt) - c.succeeded == 0:
                p.running(running)
                p.succeeded(f"XGBoostJob {job.name} is successfully completed.")
                return
        if c.failed > 0:
            p.running(running)
            if p.policy(rt) == "ExitCode":
                p.restarting(f"XGBoostJob {job.name} is restarting because {c.failed} {rt} replica(s) failed.")
            else:
                p.failed(f"XGBoostJob {job.name} is failed because {c.failed} {rt} replica(s) failed.")


def _mpi_rules(p: Pass) -> None:
    """§7.7: only the launcher decides Running and Succeeded; reason MPIJobMPIJobFailed kept (wire-level)."""
    job = p.job
    for rt in replica_order(job):
        c = p.counts[rt]
        if rt == "Launcher":
            if c.active > 0:
                p.running(f"MPIJob {job.name} is running.")
            if p.replicas(rt) - c.succeeded == 0:
                p.succeeded(f"MPIJob {job.name} is successfully completed.")
                return
        if c.failed > 0:
            message = f"MPIJob {job.name} is failed because {c.failed} {rt} replica(s) failed."
            if p.policy(rt) == "ExitCode":
                p.restarting(f"MPIJob {job.name} is restarting because {c.failed} {rt} replica(s) failed.")
            else:
                p.failed(message, reason_word="MPIJobFailed")


RULES: dict[str, Rules] = {
    "PyTorchJob": _master_or_worker_rules(
        ("Master",),
        ("{kind} {name} is running.", "{kind} {name} is successfully completed."),
        ("{kind} {ns}/{name} is running.", "{kind} {ns}/{name} successfully completed."),
        elastic_shortcut=True,
    ),
    "PaddleJob": _master_or_worker_rules(
        ("Master",),
        ("{kind} {name} is running.", "{kind} {name} is successfully completed."),
        ("{kind} {ns}/{name} is running.", "{kind} {ns}/{name} successfully completed."),
        elastic_shortcut=False,
    ),
    "JAXJob": _master_or_worker_rules(
        (),
        ("", ""),
        ("{kind} {ns}/{name} is running.", "{kind} {ns}/{name} successfully completed."),
        elastic_shortcut=False,
    ),
    "TFJob": _tensorflow_rules,
    "XGBoostJob": _xgboost_rules,
    "MPIJob": _mpi_rules,
}
"""Per-kind status rules, keyed by kind (the common engine is ``compute``)."""

SELECTOR_KINDS = frozenset({"PyTorchJob", "PaddleJob", "JAXJob"})


def _count_generic(p: Pass) -> None:
    job = p.job
    for rt in replica_order(job):
        for _, pod in sorted(p.pods[rt].items()):
            action = restart_action(job, rt, pod)
            if action == "restart":
                p.restarting(f"job {job.name} is restarting because {rt} replica(s) failed.")
            elif action == "fail":
                p.failed(
                    f'job "{job.name}" is failing because "{rt}" replica(s) failed.',
                    event_type="Warning",
                )
            count(pod, p.counts[rt])


def _count_mpi(p: Pass) -> None:
    """§6.13 step 6: the launcher counts as one; workers count only while the launcher is not done."""
    launcher = p.pods.get("Launcher", {}).get(0)
    launcher_done = launcher is not None and phase(launcher) in ("Succeeded", "Failed")
    if launcher is not None:
        count(launcher, p.counts["Launcher"])
    if not launcher_done and "Worker" in p.counts:
        for pod in p.pods["Worker"].values():
            current = phase(pod)
            if current in ("Running", "Succeeded", "Failed"):
                count(pod, p.counts["Worker"])


def compute(
    job: jobs.Job,
    pods: Sequence[Pod],
    now: dt.datetime,
    verdict: Verdict | None = None,
) -> Outcome:
    """The job's next status (§6.3 steps 3–10 as far as status goes) and its Events.

    ``job`` must be defaulted; ``pods`` are the job's pods (controller owner = the job).
    """
    stored = job.status or common.JobStatus()
    if is_managed_externally(job):
        return Outcome(stored.model_copy(deep=True), [])
    status = stored.model_copy(deep=True)
    events: list[Event] = []
    kind, name = job.KIND, job.name
    if conditions.find(status, conditions.CREATED) is None:
        conditions.set_condition(
            status, conditions.CREATED, "True", f"{kind}Created", f"{kind} {name} is created.", now
        )
    if verdict is not None and verdict.reason == f"{kind}FailedValidation":
        if status.completion_time is None:
            status.completion_time = now
        if conditions.set_condition(status, conditions.FAILED, "True", verdict.reason, verdict.message, now):
            events.append(Event("Warning", verdict.reason, verdict.message))
        return Outcome(status, events)

    if conditions.is_finished(status):
        if conditions.is_true(status, conditions.SUCCEEDED):
            for replica in (status.replica_statuses or {}).values():
                if replica.active:
                    replica.succeeded = (replica.succeeded or 0) + replica.active
                    replica.active = None
        return Outcome(status, events)

    if job.run_policy.suspend:
        for replica in (status.replica_statuses or {}).values():
            if replica.active:
                replica.active = None
        message = f"{kind} {name} is suspended."
        if conditions.is_true(status, conditions.RUNNING):
            conditions.set_condition(status, conditions.RUNNING, "False", f"{kind}Suspended", message, now)
        if not conditions.is_true(status, conditions.SUSPENDED):
            conditions.set_condition(status, conditions.SUSPENDED, "True", f"{kind}Suspended", message, now)
            events.append(Event("Normal", f"{kind}Suspended", message))
        return Outcome(status, events)

    if conditions.is_true(status, conditions.SUSPENDED):
        message = f"{kind} {name} is resumed."
        conditions.set_condition(status, conditions.SUSPENDED, "False", f"{kind}Resumed", message, now)
        status.start_time = now
        events.append(Event("Normal", f"{kind}Resumed", message))

    p = Pass(
        job=job,
        status=status,
        counts={rt: Counts() for rt in replica_order(job)},
        pods={rt: replica_pods(job, pods, rt) for rt in replica_order(job)},
        now=now,
        events=events,
    )
    if verdict is not None:
        if status.completion_time is None:
            status.completion_time = now
        if conditions.set_condition(status, conditions.FAILED, "True", verdict.reason, verdict.message, now):
            events.append(Event("Normal", verdict.reason, verdict.message))
        return Outcome(status, events)

    if isinstance(job, jobs.MPIJob):
        _count_mpi(p)
    else:
        _count_generic(p)
    if status.start_time is None:
        status.start_time = now
    RULES[kind](p)
    with_selector = kind in SELECTOR_KINDS
    status.replica_statuses = {
        rt: p.counts[rt].to_status(selector(job, rt) if with_selector else None) for rt in replica_order(job)
    }
    if conditions.is_true(status, conditions.SUCCEEDED):
        for replica in status.replica_statuses.values():
            if replica.active:
                replica.succeeded = (replica.succeeded or 0) + replica.active
                replica.active = None
    return Outcome(status, events)


def differs(old: common.JobStatus | None, new: common.JobStatus) -> bool:
    """Whether writing ``new`` would change the stored status (the write is skipped otherwise)."""
    return (old.dump() if old is not None else {}) != new.dump()
