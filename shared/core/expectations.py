"""What one worker expects of a job's children after its own deletes: training-operator's
expectations, for deletions.

In: the deletes this worker made (child, uid, when), the DELETED observations and
creates that end them, the children as observed, and the clock, always passed in
(event-loop seconds; never read here). Out: which children still count as going
away (:meth:`Expectations.going`), the children as a decision must see them (those
going away carry a ``deletionTimestamp``, as the API server shows a child being
deleted, so the core does not count or delete them twice), whether a delete waits
too long for its DELETED (then the API server is asked: a watcher that died right
after the delete never publishes it) and when to look next. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import Any

from shared.api import common, objects

Manifest = dict[str, Any]
ChildKey = tuple[str, str]
"""(kind, name) of a child."""


@dataclasses.dataclass(frozen=True)
class _Pending:
    uid: str | None
    at: float


_uid = objects.uid_of


@dataclasses.dataclass
class Expectations:
    """One job's children this worker deleted and has not seen go yet."""

    grace: float
    """Seconds a deleted child counts as going away while its DELETED has not come
    (after that it counts as whatever the view holds)."""
    confirm_after: float
    """Seconds after which an unconfirmed delete sends the worker to the API server."""
    _pending: dict[ChildKey, _Pending] = dataclasses.field(default_factory=dict)

    def deleted(self, child: ChildKey, uid: str | None, at: float) -> None:
        """This worker deleted (or met 404 deleting) the ``uid`` incarnation of ``child`` at ``at``."""
        self._pending[child] = _Pending(uid, at)

    def created(self, child: ChildKey) -> None:
        """This worker created ``child`` again: nothing of it is going away."""
        self._pending.pop(child, None)

    def observed_deleted(self, child: ChildKey, obj: Manifest) -> bool:
        """A DELETED observation of ``obj``: it ends the expectation of the incarnation it
        names only (a late one of a previous incarnation leaves the current one's alone).
        True if this worker deleted that incarnation."""
        pending = self._pending.get(child)
        if pending is not None and self._same(pending, obj):
            del self._pending[child]
            return True
        return False

    def overdue(self, now: float) -> bool:
        """Whether a delete has waited ``confirm_after`` for its DELETED; those are dropped
        (hydration from the API server shows what is left)."""
        stale = [child for child, pending in self._pending.items() if now - pending.at >= self.confirm_after]
        for child in stale:
            del self._pending[child]
        return bool(stale)

    def next_look(self, now: float, requeue_after: float | None) -> float | None:
        """``requeue_after``, or sooner when a delete waits for its confirmation."""
        waits = [pending.at + self.confirm_after - now for pending in self._pending.values()]
        if not waits:
            return requeue_after
        confirm = max(min(waits), 0.0)
        return confirm if requeue_after is None else min(requeue_after, confirm)

    def going(self, child: ChildKey, obj: Manifest, now: float) -> bool:
        """Whether ``obj`` (observed as ``child``) is an incarnation this worker deleted
        within ``grace``."""
        pending = self._pending.get(child)
        return pending is not None and self._same(pending, obj) and now - pending.at < self.grace

    def seen_as(self, children: Iterable[tuple[ChildKey, Manifest]], now: float,
                wall: dt.datetime) -> tuple[list[Manifest], set[ChildKey]]:
        """The children as a decision at ``now`` (``wall`` on the clock) must see them, and
        the ones given a ``deletionTimestamp`` for it (going away, and none of their own)."""
        result: list[Manifest] = []
        marked: set[ChildKey] = set()
        for child, obj in children:
            if self.going(child, obj, now) and not objects.is_deleting(obj):
                obj = {**obj, "metadata": {**objects.meta(obj), "deletionTimestamp": common.format_time(wall)}}
                marked.add(child)
            result.append(obj)
        return result, marked

    @staticmethod
    def _same(pending: _Pending, obj: Manifest) -> bool:
        uid = _uid(obj)
        return pending.uid is None or uid is None or pending.uid == uid
