"""What the service layer must do for one TrainingJob now, and how it reports it.

In: nothing (data only). Out: ``Decision`` and the records it holds. The
contract with the service layer:

1. ``decide`` may answer with ``execs`` only: commands to run in the
   launcher's first container (``/bin/sh -c``). Run them in order, stopping at
   the first failure, and call ``decide`` again with every result so far in
   ``executed``. A command is asked for at most once per chain, so a chain
   ends (at most two commands: a hostfile rewrite or script, then the
   ``ps`` probe of a scale-in).
2. Otherwise apply, in this order: scaler ownerReferences (metadata
   writes), ``creates`` (409 AlreadyExists = done), ``updates`` (a PUT of the
   object as observed, its resourceVersion kept: 409 = decide again; 404 =
   done), ``deletes`` (grace period 0; 404 = done), scaler statuses, then the
   job's ``status``; then record
   ``events`` and publish ``steps``. Children go before statuses so that a
   status never claims what is not done; anything that must be recorded
   before a child is touched (the workers a scale-in removes, those a
   scale-out adds) is decided in an earlier pass that only writes it.
3. Look again after ``requeue_after`` seconds when it is set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shared.api import common, elastic
from shared.core.events import Event
from shared.core.reconciling import ChildRef

Manifest = common.Manifest

STEP_WORKER_ADDED = "worker-added"
STEP_WORKER_REMOVED = "worker-removed"
STEP_HOSTFILE_REWRITTEN = "hostfile-rewritten"
STEP_SCRIPT_RUN = "script-run"
STEP_SCALER_PHASE = "scaler-phase"
STEP_SCALER_BOUND = "scaler-bound"
STEP_SCALER_WAITING = "scaler-waiting"
STEP_SCALER_TARGETS = "scaler-targets"
STEP_JOB_PHASE = "job-phase"
STEP_CHILD_CREATED = "child-created"
STEP_WAITING = "waiting"
STEP_BELOW_MINIMUM = "workers-below-minimum"
STEP_ROLE_FOLLOWS = "launcher-role-follows"


@dataclasses.dataclass(frozen=True)
class Step:
    """One human-readable thing the decision does or waits for, for the record on the bus."""

    kind: str
    """``worker-added``, ``worker-removed``, ``hostfile-rewritten``, ``scaler-phase`` …"""
    subject: str
    """The object it is about: a worker's name, ``ScaleIn:<ns>/<name>``, the job's name."""
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class Exec:
    """A command to run in a container of a pod (the pod exec API, stdout and stderr captured)."""

    namespace: str
    pod: str
    container: str
    command: tuple[str, ...]
    purpose: str
    """``hostfile`` (rewrite /etc/edl/hostfile), ``script`` (a scaler's custom script) or
    ``probe`` (list the launcher's ssh / kubexec processes before removing workers)."""

    @property
    def script(self) -> str:
        return self.command[-1]


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """What running an ``Exec`` gave: fed back to ``decide`` in ``executed``."""

    exec: Exec
    ok: bool
    output: str = ""
    """stdout on success; the error text (stderr or the API error) on failure."""


@dataclasses.dataclass
class ScalerUpdate:
    """A write to one ScaleIn or ScaleOut: its controller ownerReference and/or its status."""

    kind: str
    namespace: str
    name: str
    owner_reference: dict[str, Any] | None = None
    """Add this controller ownerReference (a metadata write, before any status write)."""
    status: elastic.ScaleInStatus | elastic.ScaleOutStatus | None = None
    """Write this status (the whole subresource) when set."""


@dataclasses.dataclass
class Decision:
    execs: list[Exec] = dataclasses.field(default_factory=list)
    creates: list[Manifest] = dataclasses.field(default_factory=list)
    updates: list[Manifest] = dataclasses.field(default_factory=list)
    """Children whose content must follow the job: the launcher's Role, whose ``pods/exec``
    rule names the job's workers (kto's own: upstream never updates a child)."""
    deletes: list[ChildRef] = dataclasses.field(default_factory=list)
    scalers: list[ScalerUpdate] = dataclasses.field(default_factory=list)
    status: elastic.TrainingJobStatus | None = None
    """The job's status to write; None when it did not change."""
    events: list[Event] = dataclasses.field(default_factory=list)
    steps: list[Step] = dataclasses.field(default_factory=list)
    requeue_after: float | None = None

    def step(self, kind: str, subject: str, detail: str) -> None:
        self.steps.append(Step(kind, subject, detail))

    def scaler(self, scaler: elastic.Scaler) -> ScalerUpdate:
        """The update of ``scaler`` in this decision, added when there is none yet."""
        for update in self.scalers:
            if (update.kind, update.namespace, update.name) == (scaler.KIND, scaler.namespace, scaler.name):
                return update
        update = ScalerUpdate(scaler.KIND, scaler.namespace, scaler.name)
        self.scalers.append(update)
        return update

    @property
    def empty(self) -> bool:
        return not (self.execs or self.creates or self.updates or self.deletes or self.scalers
                    or self.status is not None)
