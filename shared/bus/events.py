"""Observability hooks of the bus: one event type, many callbacks.

In: what happens inside publishers and consumers (a record sent, a send
failed, a record taken in, passed over by type, handled, retried, dead-lettered, an offset
committed, partitions assigned or revoked, the broker unreachable).
Out: :class:`BusEvent` values passed to every registered :data:`Hook`. Topic,
partition, offset and job key are attributes, never part of the event name, so
a metrics hook can label by them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("kto.bus")

SEND_DONE = "send.done"
SEND_ERROR = "send.error"
BROKER_UNREACHABLE = "broker.unreachable"
MESSAGE_IN = "message.in"
MESSAGE_DONE = "message.done"
DUPLICATE = "message.duplicate"
MESSAGE_SKIPPED = "message.skipped"
HANDLER_RETRY = "handler.retry"
DEAD_LETTERED = "message.dead_lettered"
REJECTED = "message.rejected"
"""A record that is not authentic (unsigned, unknown or retired key, bad signature, wrong role): ``reason``."""
COMMIT_DONE = "commit.done"
COMMIT_ERROR = "commit.error"
PARTITIONS_ASSIGNED = "partitions.assigned"
PARTITIONS_REVOKED = "partitions.revoked"
LOG_LOST = "partition.log_lost"
"""A partition's log ends below this member's position: the broker lost it (Tansu restarted)."""


@dataclasses.dataclass(frozen=True)
class BusEvent:
    """One thing that happened on the bus."""

    name: str
    """One of the module constants (``send.done``, ``commit.done``…)."""
    attributes: Mapping[str, Any]
    """``topic``, ``partition``, ``offset``, ``key``, ``group``, ``error``, ``attempt``…
    whichever apply."""


Hook = Callable[[BusEvent], None]
"""A callback told about every event. It must be quick and must not block."""


class Emitter:
    """Fans an event out to hooks; a failing hook is logged, never propagated."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        self._hooks = tuple(hooks)

    def __call__(self, name: str, **attributes: Any) -> None:
        event = BusEvent(name, attributes)
        level = logging.WARNING if name in (SEND_ERROR, BROKER_UNREACHABLE, COMMIT_ERROR,
                                            DEAD_LETTERED) else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "%s %s", name, attributes)
        for hook in self._hooks:
            try:
                hook(event)
            except Exception:
                log.exception("bus hook %r failed on %s", hook, name)
