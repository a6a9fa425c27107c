"""The working state of one status computation, and the pieces status rules share
(spec §6.4 d, §7).

In: a job, its pods bucketed per replica type, the status being built, the
clock. Out: the replica :class:`Counts` every family's status counts pods into
(MPIJob v2beta1's and TrainingJob's too), and a :class:`Computation` that the
kubeflow.org/v1 engine (``shared.core.statuses.compute``) fills with replica
counts and hands to the kind's ``status_rules`` hook (``shared.core.frameworks``),
which sets conditions and collects Events through it. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any, Literal

from shared.api import common, jobs, objects
from shared.core import conditions
from shared.core.events import Event

Pod = common.Manifest


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
    current = objects.phase_of(pod)
    if current == "Running":
        if objects.is_deleting(pod):
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


@dataclasses.dataclass
class Computation:
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


Rules = Callable[[Computation], None]


def master_or_worker_rules(
    master_types: tuple[str, ...],
    master_messages: tuple[str, str],
    worker_messages: tuple[str, str],
    elastic_shortcut: bool,
) -> Rules:
    """PyTorch / Paddle / JAX (§7.2, §7.5, §7.6): a Master decides if there is one, else the Worker.

    Messages are format strings over ``kind``, ``name`` and ``ns``: (running, succeeded).
    """

    def rules(p: Computation) -> None:
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


