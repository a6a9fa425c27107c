"""What a decision was made from, named so that it can be made again (``kto replay``).

In: the job and children a worker's pure decision looked at, the clock it used,
and which versions of them the worker read from the log. Out: a *basis* — a
JSON-shaped dict to put on the decision record — and, back from a basis and the
log, the same inputs again (:func:`rebuild`).

A basis names each object by kind, name, uid and resourceVersion. An object whose
version the worker did not take from a record (read from the API server by a
hydration, or the answer to its own write) may never be on the log (a watcher
that restarts lists only the newest version of each object), so it travels in
the basis whole. A child the worker deleted and still counts as going away (given
a ``deletionTimestamp`` for the decision by :mod:`shared.core.expectations`) is
flagged ``terminating`` and carried without it; rebuilt, it gets one again (the
basis's ``now``). Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from shared.api import objects
from shared.core import views

Manifest = dict[str, Any]
Version = tuple[str, str, str]
"""(kind, name, resourceVersion) of one object version."""

def version_of(obj: Manifest) -> Version:
    return (str(obj.get("kind", "")), objects.name_of(obj), objects.resource_version_of(obj))


def _ref(obj: Manifest, logged: Callable[[Version], bool], terminating: bool = False) -> dict[str, Any]:
    kind, name, version = version_of(obj)
    ref: dict[str, Any] = {"kind": kind, "name": name, "rv": version, "uid": objects.uid_of(obj) or ""}
    if terminating:
        ref["terminating"] = True
        meta = {k: v for k, v in objects.meta(obj).items() if k != "deletionTimestamp"}
        obj = {**obj, "metadata": meta}
    if not version or not logged((kind, name, version)):
        ref["object"] = obj
    return ref


def describe(
    job: Manifest, children: Sequence[Manifest], now: dt.datetime, *, logged: Callable[[Version], bool],
    old: Manifest | None = None, terminating: Collection[views.ChildKey] = (), **extra: Any,
) -> dict[str, Any]:
    """The basis of a decision made from ``job`` and ``children`` at ``now``; ``logged``
    says whether a version was taken from a record; ``terminating``: the children the
    decision saw going away because the worker deleted them; ``extra`` (JSON-shaped) is
    kept as given."""
    basis: dict[str, Any] = {
        "now": now.astimezone(dt.UTC).isoformat(timespec="microseconds"),
        "job": _ref(job, logged),
        "children": [_ref(child, logged, views.child_key(child) in terminating) for child in children],
    }
    if old is not None:
        basis["old"] = _ref(old, logged)
    basis.update(extra)
    return basis


class Unresolved(LookupError):
    """A basis names an object version that is neither in it nor on the log."""


@dataclasses.dataclass(frozen=True)
class Inputs:
    """A decision's inputs as rebuilt from its basis."""

    now: dt.datetime
    job: Manifest
    children: list[Manifest]
    old: Manifest | None
    extra: dict[str, Any]


def rebuild(basis: Mapping[str, Any], lookup: Callable[[Version], Manifest | None]) -> Inputs:
    """The inputs ``basis`` names, objects not carried in it taken from ``lookup`` (the log's
    observations by version); :class:`Unresolved` naming the first one found nowhere,
    ``ValueError`` for a basis that is not one."""

    def resolve(ref: Any) -> Manifest:
        if not isinstance(ref, Mapping):
            raise ValueError(f"basis entry {ref!r} is not an object")
        obj = ref.get("object")
        if not isinstance(obj, dict):
            key = (str(ref.get("kind", "")), str(ref.get("name", "")), str(ref.get("rv", "")))
            found = lookup(key)
            if found is None:
                raise Unresolved(f"{key[0]} {key[1]} at resourceVersion {key[2]} is not on the log")
            obj = found
        if ref.get("terminating"):
            obj = {**obj, "metadata": {**objects.meta(obj), "deletionTimestamp": stamp}}
        return obj

    stamp = str(basis.get("now") or "")
    try:
        now = dt.datetime.fromisoformat(str(basis["now"]))
        children = basis.get("children") or []
        if not isinstance(children, list):
            raise ValueError("children is not a list")
        return Inputs(
            now=now, job=resolve(basis["job"]), children=[resolve(c) for c in children],
            old=resolve(basis["old"]) if basis.get("old") is not None else None,
            extra={k: v for k, v in basis.items() if k not in ("now", "job", "children", "old")},
        )
    except KeyError as exc:
        raise ValueError(f"basis lacks {exc}") from None


def logged_in(view: views.JobView) -> Callable[[Version], bool]:
    """Whether a version was taken into ``view`` from a record (see :attr:`views.JobView.logged`)."""
    return lambda version: version in view.logged
