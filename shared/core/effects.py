"""What a reconcile pass must do, the same shape for every job family.

In: nothing (data only). Out: :class:`Effects`, which every family's ``decide``
returns and the reconciler's one applier carries out, and :class:`Context`,
what a family decides with beyond the job and its children (the clock, the
operator settings, the previous version of the job, the results of commands
run so far, key makers). Pure: no I/O, no clock, no randomness.

The applier's contract, in its order of work:

1. ``execs`` alone: commands to run in a pod's container (``/bin/sh -c``), in
   order, stopping at the first failure; the family decides again with every
   result so far in ``Context.executed`` (a chain ends: each command is asked
   for at most once).
2. When the pass :attr:`~Effects.acts`, its plan goes to the topic first
   (write-ahead), then: ``verdict`` recorded on the job (the failure
   annotation) and said, or ``announce`` said; ``error`` said; ``warnings``
   recorded once per job and process; controller ownerReferences of
   ``child_writes``; ``creates`` (409 AlreadyExists = done); child statuses
   written ``before_update``; ``updates`` (409 = read afresh and decide again;
   404 = done); ``restarts`` counted on the job; ``deletes``; the job itself
   (``delete_job``); the other child statuses; the job's ``status`` and
   ``events`` (only where the reconciler writes the family's status; when a create
   was refused, the status of the family's decision given ``Context.refused``); each of
   the ``steps`` as a record.
3. Look again after ``requeue_after`` seconds when it is set.

A child written twice in one pass (an ownerReference, then its status) is
written the second time on the resourceVersion the first write returned.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from shared.api import common, objects
from shared.core import outcomes, plans
from shared.core.events import Event

Manifest = common.Manifest
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class ChildRef:
    """A child to delete, and why."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str | None
    reason: str
    """Why: ``scale-down``, ``restart``, ``clean-pod-policy``, ``suspend``, ``failed``, ``finished``."""

    @classmethod
    def of(cls, manifest: Manifest, reason: str) -> ChildRef:
        return cls(
            str(manifest.get("apiVersion", "")), str(manifest.get("kind", "")), objects.namespace_of(manifest),
            objects.name_of(manifest), objects.uid_of(manifest), reason,
        )


@dataclasses.dataclass(frozen=True)
class Step:
    """One human-readable thing a pass does or waits for, said on the topic after its acts."""

    kind: str
    """``create``, ``wait``, ``stop``, ``worker-added``, ``hostfile-rewritten``, ``scaler-phase`` …"""
    subject: str
    """The object it is about: ``Pod ns/name``, a worker's name, ``ScaleIn:<ns>/<name>``, the job's name."""
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
    """What running an :class:`Exec` gave: fed back to the family in ``Context.executed``."""

    exec: Exec
    ok: bool
    output: str = ""
    """stdout on success; the error text (stderr or the API error) on failure."""

    def dump(self) -> dict[str, Any]:
        """As a pass's basis records it (``kto replay`` answers the chain from it)."""
        command = self.exec
        return {"namespace": command.namespace, "pod": command.pod, "container": command.container,
                "command": list(command.command), "purpose": command.purpose, "ok": self.ok, "output": self.output}

    @classmethod
    def load(cls, raw: Mapping[str, Any]) -> ExecResult:
        """Read back what :meth:`dump` wrote (``KeyError`` / ``TypeError`` on another shape)."""
        command = Exec(str(raw["namespace"]), str(raw["pod"]), str(raw["container"]),
                       tuple(str(c) for c in raw["command"]), str(raw["purpose"]))
        return cls(command, bool(raw["ok"]), str(raw.get("output", "")))


class Dumpable(Protocol):
    """A status as the pure core types it: written as ``dump()`` gives it."""

    def dump(self) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class RawStatus:
    """A status given as the object to write (for a job that does not load as its type)."""

    value: dict[str, Any]

    def dump(self) -> dict[str, Any]:
        return dict(self.value)


@dataclasses.dataclass
class ChildWrite:
    """A write to one child other than its content: its controller ownerReference (a metadata
    patch, before anything else) and/or its ``/status`` (the whole subresource)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    owner_reference: dict[str, Any] | None = None
    status: dict[str, Any] | Dumpable | None = None
    before_update: bool = False
    """Write the status before the pass's updates (mpi-operator clears a resumed launcher
    Job's startTime before it unsuspends it); otherwise after every child is written, so
    that a status never claims what is not done."""

    def status_value(self) -> dict[str, Any] | None:
        """The status to write, as an object."""
        if self.status is None or isinstance(self.status, dict):
            return self.status
        return self.status.dump()


@dataclasses.dataclass
class Effects:
    """What one pass must do (see the module for the order it is carried out in)."""

    execs: list[Exec] = dataclasses.field(default_factory=list)
    creates: list[Manifest] = dataclasses.field(default_factory=list)
    updates: list[Manifest] = dataclasses.field(default_factory=list)
    """Children whose content follows the job: PUT as observed, their resourceVersion kept."""
    deletes: list[ChildRef] = dataclasses.field(default_factory=list)
    child_writes: list[ChildWrite] = dataclasses.field(default_factory=list)
    verdict: outcomes.Verdict | None = None
    """A failure newly reached: recorded on the job (:data:`outcomes.FAILURE_ANNOTATION`)
    before it is announced and before any delete goes out."""
    announce: outcomes.Verdict | None = None
    """A verdict already reached (recorded on the job by a predecessor that may have died
    before saying it, or a job that does not load): said on the topic, once per process."""
    restarts: int | None = None
    """When set, the job's restart-count annotation must say this before the ``restart``
    deletes go out (a job with a backoffLimit counts them)."""
    counted: tuple[str, ...] = ()
    """With :attr:`restarts`: the pods it counts that are still there (written with the count)."""
    delete_job: bool = False
    status: Dumpable | None = None
    """The job's new status; None when it is unchanged. The reconciler writes what its
    family's ``decide`` leaves here: a family whose status the status service writes leaves
    it None (and its ``events`` empty)."""
    events: list[Event] = dataclasses.field(default_factory=list)
    """Events on the job, recorded by whoever writes its status."""
    warnings: list[Event] = dataclasses.field(default_factory=list)
    """Warning Events on the job, recorded by the reconciler once per job and process."""
    error: str | None = None
    """Why the pass could not do all it should (the children could not be planned, a foreign
    object is in the way); what comes before it is still done."""
    error_reason: str = ""
    """The ``child_create_failed`` record's reason for :attr:`error`."""
    steps: list[Step] = dataclasses.field(default_factory=list)
    requeue_after: float | None = None
    """Seconds until the decision may change by time alone (a deadline, a TTL, a wait)."""
    regarding: Any = None
    """The job as loaded, which Events are recorded on (None: it did not load)."""
    child_events: bool = False
    """Record upstream's Events for each child created or deleted (training-operator does)."""
    problems: list[str] = dataclasses.field(default_factory=list)
    """Objects left out of the decision (they do not load), for the log."""
    previous: Manifest | None = None
    """The job as the last pass decided on it, when this decision compared the two (recorded
    in the pass's basis, for ``kto replay``)."""
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The settings decided with, as the pass's basis records them."""

    @property
    def acts(self) -> bool:
        """Whether the pass writes anything to the cluster (commands to run are asked for
        apart, in :attr:`execs`; warnings, announcements and steps alone are not an act: a
        pass that only waits says nothing, or it would say it again on every look)."""
        return bool(self.creates or self.updates or self.deletes or self.child_writes or self.verdict
                    or self.restarts is not None or self.delete_job or self.status is not None
                    or self.error is not None)

    @property
    def empty(self) -> bool:
        """Nothing to create, update, delete or write."""
        return not (self.creates or self.updates or self.deletes or self.child_writes or self.verdict
                    or self.delete_job or self.status is not None)

    def step(self, kind: str, subject: str, detail: str) -> None:
        self.steps.append(Step(kind, subject, detail))

    def create(self, manifest: Manifest, why: str) -> None:
        """Create ``manifest``, saying why."""
        self.creates.append(manifest)
        self.step("create", subject_of(manifest), why)

    def update(self, manifest: Manifest, why: str) -> None:
        """Write ``manifest`` over the child as observed, saying why."""
        self.updates.append(manifest)
        self.step("update", subject_of(manifest), why)

    def delete(self, manifest: Manifest, reason: str, why: str) -> None:
        """Delete ``manifest`` (``reason``: the delete record's), saying why."""
        self.deletes.append(ChildRef.of(manifest, reason))
        self.step("delete", subject_of(manifest), why)

    def stop(self, subject: str, message: str, event: Event | None = None) -> Effects:
        """The pass stops here, on ``message`` (about ``subject``), with ``event`` on the job:
        what comes before is still carried out."""
        if event is not None:
            self.events.append(event)
        self.error, self.error_reason = message, event.reason if event is not None else ""
        self.step("stop", subject, message)
        return self

    def child(self, api_version: str, kind: str, namespace: str, name: str) -> ChildWrite:
        """The write to that child in this pass, added when there is none yet."""
        for write in self.child_writes:
            if (write.kind, write.namespace, write.name) == (kind, namespace, name):
                return write
        write = ChildWrite(api_version, kind, namespace, name)
        self.child_writes.append(write)
        return write

    def plan(self) -> dict[str, Any]:
        """The pass's plan, as the ``reconcile_pass`` record carries it and ``kto replay``
        compares it: what it creates, updates, deletes and writes, by name (fields with
        nothing in them left out)."""
        plan = {
            "creates": plans.named(self.creates), "updates": plans.named(self.updates),
            "deletes": plans.deleted(self.deletes),
            "child_writes": [f"{w.kind}/{w.name}" + (":owner" if w.owner_reference is not None else "")
                             + (":status" if w.status is not None else "") for w in self.child_writes],
            "verdict": self.verdict.reason if self.verdict is not None else None,
            "restarts": self.restarts, "delete_job": self.delete_job,
            "status": self.status.dump() if self.status is not None else None,
            "error": self.error, "warnings": [w.reason for w in self.warnings],
            "steps": [f"{s.kind}:{s.subject}" for s in self.steps],
        }
        return {field: value for field, value in plan.items() if value is not None and value is not False
                and value != []}


def subject_of(manifest: Manifest) -> str:
    """How a step names an object: ``Kind namespace/name``."""
    return f"{manifest.get('kind')} {objects.namespace_of(manifest)}/{objects.name_of(manifest)}"


def left_alone(subject: str, managed_by: str | None, controller: str, deleting: bool) -> Effects | None:
    """A pass that does nothing, saying why: the job's ``managedBy`` names another controller than
    ``controller`` (Kueue's MultiKueue), or the job is being deleted; None otherwise."""
    if managed_by is not None and managed_by != controller:
        return Effects(steps=[Step("skip", subject, f"managed by {managed_by}")])
    if deleting:
        return Effects(steps=[Step("skip", subject, "being deleted")])
    return None


def failed_validation(document: Manifest, problem: object) -> Effects:
    """A job that does not load as its kind: nothing is made for it, and the verdict the
    status service reaches from the job alone is said on the topic (no act)."""
    kind = str(document.get("kind") or "")
    name = objects.name_of(document)
    return Effects(announce=outcomes.Verdict(
        f"{kind}FailedValidation", f"{kind} {name} failed validation because {problem}", "validation"))


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A create the API server refused (not retriable): fed back to the family in
    ``Context.refused`` for the job's status of the pass."""

    kind: str
    name: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Context:
    """What a family decides with beyond the job and its children."""

    now: dt.datetime
    settings: tuple[Any, ...] = ()
    """The settings values of the families (each family takes its own by type)."""
    key_makers: Mapping[type, Callable[[], Any]] = dataclasses.field(default_factory=dict)
    """Key pair type → how one is made (randomness is the edge's: ``shared.keygen``)."""
    previous: Manifest | None = None
    """The job as the last pass of this worker decided on it."""
    executed: tuple[ExecResult, ...] = ()
    """Results of the commands this pass ran so far (see :attr:`Effects.execs`)."""
    refused: tuple[Refusal, ...] = ()
    """Creates of this pass the API server refused: the reconciler decides the pass again
    with them and writes that decision's status (a family whose status says so)."""

    def settings_of(self, kind: type[T]) -> T:
        """The settings of that type (its defaults when none was given)."""
        return next((s for s in self.settings if isinstance(s, kind)), None) or kind()

    def key_pair(self, kind: type[T]) -> Callable[[], T]:
        """How a key pair of that type is made (:class:`LookupError` when no maker was given)."""
        maker = self.key_makers.get(kind)
        if maker is None:
            raise LookupError(f"no maker of {kind.__name__} key pairs was given")
        return maker
