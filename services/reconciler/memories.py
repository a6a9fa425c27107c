"""What the reconciler worker keeps per job key between records, in one place.

In: the keys the worker takes records of. Out: each key's :class:`KeyMemory` (its
view, the deletes it expects to see go, its timer, when its job was last seen,
what it announced and warned, its last pass), made on first use and dropped whole
by :meth:`Memories.forget`, so nothing of a key outlives it by being forgotten in
one dict and not in another. No I/O.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

from shared.core import expectations, views


@dataclasses.dataclass
class KeyMemory:
    """One job key's memory in this worker."""

    view: views.JobView
    """The job and its children as last observed or read."""
    expected: expectations.Expectations
    """Children this worker deleted that count as going away until their DELETED comes."""
    timer: asyncio.TimerHandle | None = None
    """The armed ``timer_fired`` record, when time alone may change the decision."""
    job_seen: float | None = None
    """Loop time the job was last observed (or last checked); None before it was."""
    checking: bool = False
    """Whether its ``job_check_due`` record is on its way."""
    announced: tuple[str | None, str, str] | None = None
    """(uid, reason, message) of the failure verdict this process published."""
    decided_on: dict[str, Any] | None = None
    """The job as its last decision saw it: the old object an update is validated against."""
    last_pass: str | None = None
    """Id of the last ``reconcile_pass`` record this process wrote for it: every act after it
    names it (``detail.pass``), so replay checks the act against that plan."""
    warned: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)
    """(uid, reason, message) of the Warning Events this process recorded."""

    def release(self) -> None:
        """Let go of the view of a finished job that needs nothing more (no act, no timer, no
        delete awaited): what is left is a tombstone (what was announced and warned, the last
        pass), so a record that comes later is taken into an empty view, which is read afresh
        from the API server before anything is decided, and repeats no Event."""
        self.drop()
        self.view = views.JobView()
        self.decided_on = None
        self.job_seen = None  # no check is due for a key that holds no job
        self.checking = False

    def drop(self) -> None:
        """Release what runs on its own (the timer)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@dataclasses.dataclass
class Memories:
    """Every key's memory; a key's deletes count as going away for ``delete_grace``
    seconds and are looked up after ``confirm_after``."""

    delete_grace: float
    confirm_after: float
    _keys: dict[str, KeyMemory] = dataclasses.field(default_factory=dict)

    def of(self, job_key: str) -> KeyMemory:
        """The key's memory, made empty on first use."""
        memory = self._keys.get(job_key)
        if memory is None:
            memory = self._keys[job_key] = KeyMemory(
                views.JobView(), expectations.Expectations(self.delete_grace, self.confirm_after))
        return memory

    def get(self, job_key: str) -> KeyMemory | None:
        return self._keys.get(job_key)

    def forget(self, job_key: str) -> None:
        """Drop everything of the key (a cancelled timer with it)."""
        memory = self._keys.pop(job_key, None)
        if memory is not None:
            memory.drop()

    def items(self) -> Iterator[tuple[str, KeyMemory]]:
        return iter(list(self._keys.items()))

    def due_for_check(self, now: float, check_after: float) -> list[str]:
        """Keys whose job was not seen for ``check_after`` seconds and has no check on its way."""
        return [key for key, memory in self._keys.items()
                if memory.job_seen is not None and now - memory.job_seen >= check_after and not memory.checking]

    def close(self) -> None:
        for memory in self._keys.values():
            memory.drop()
