"""What a reconcile pass plans, said the same way for every family, and the words
``kto replay`` and ``kto history`` read it by.

In: a family's plan (JSON-shaped: kind/name of what is created, updated and
deleted, what is counted and decided). Out: the action names of the pass record
and of the acts that must appear in its plan (:data:`PASS_ACTION`, :data:`ACTS`),
the one-line :func:`summary`, and the helpers each family's plan is written with
(:func:`named`, :func:`deleted`, :func:`settings_from`); what ``kto plan``
shows for a document (:class:`DryRun`) and the steps of objects waiting for a job
that does not exist (:class:`Unbound`). A plan names objects, never
the manifests' bodies, which hold generated SSH keys and env values the log carries
redacted. No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Manifest = dict[str, Any]

PASS_ACTION = "reconcile_pass"
"""The decision record of one acting reconcile pass: its plan and its basis."""

ACTS = {
    "child_created": "creates", "child_create_failed": "creates", "child_deleted": "deletes",
    "replica_restarted": "deletes", "child_updated": "updates", "job_deleted_ttl": "delete_job",
}
"""A reconciler's act → the field of its pass's plan that must hold it. Each act names its
pass in ``detail.pass`` (the ``reconcile_pass`` record's id)."""

SameCommand = Callable[[Sequence[str], Sequence[str]], bool]
"""Whether a command as recorded (its strings possibly replaced on the log) is the one asked for."""


class Unreplayable(ValueError):
    """A basis whose decision cannot be made again (a job that no longer loads, settings
    of another shape)."""


def same(recorded: Sequence[str], asked: Sequence[str]) -> bool:
    """The default :data:`SameCommand`: the command as recorded is the one asked for, word for word."""
    return tuple(recorded) == tuple(asked)


def named(manifests: Sequence[Manifest]) -> list[str]:
    """``Kind/name`` of each manifest."""
    return [f"{m.get('kind')}/{(m.get('metadata') or {}).get('name')}" for m in manifests]


def deleted(refs: Sequence[Any]) -> list[str]:
    """``Kind/name[:reason]`` of each child reference to delete."""
    return [f"{r.kind}/{r.name}" + (f":{r.reason}" if getattr(r, "reason", "") else "") for r in refs]


def settings_from(cls: Any, raw: Any) -> Any:
    """Settings of dataclass ``cls`` as a pass recorded them (defaults when none were);
    :class:`Unreplayable` when they do not fit."""
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise Unreplayable(f"settings {raw!r} are not an object")
    known = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in known})
    except TypeError as exc:
        raise Unreplayable(f"settings do not fit {cls.__name__}: {exc}") from None


def summary(plan: Mapping[str, Any]) -> str:
    """One line for ``kto history``: what the pass does."""
    parts = []
    for field in ("creates", "updates", "deletes", "child_writes"):
        if plan.get(field):
            parts.append(f"{field.replace('_', ' ')} {', '.join(plan[field])}")
    for field in ("verdict", "error"):
        if plan.get(field):
            parts.append(f"{field.replace('_', ' ')} {plan[field]}")
    if plan.get("restarts") is not None:
        parts.append(f"restarts counted {plan['restarts']}")
    if plan.get("delete_job"):
        parts.append("delete the job")
    if plan.get("steps") and not parts:
        parts.append(f"{len(plan['steps'])} steps")
    text = "; ".join(parts) or "status"
    return text if len(text) <= 2000 else text[:2000] + "…"


@dataclasses.dataclass
class DryRun:
    """What ``kto plan`` shows for one document: the children the operator would
    create, or why it would create none (one line each, without the document's name)."""

    children: list[Manifest] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def unloadable(cls, exc: Any) -> DryRun:
        """A document that does not load: one error per field path of the loader's ``exc.errors``."""
        return cls(errors=[f"{path or '<document>'}: {message}" for path, message in exc.errors])


@dataclasses.dataclass(frozen=True)
class Unbound:
    """A step said about an object waiting for a job that does not exist (a scaler naming
    a TrainingJob not there): published once per object by the reconciler."""

    kind: str
    name: str
    uid: str
    reason: str
    message: str
