"""``async with`` for what kto starts and stops (bus clients, brokers, control planes, the
local stack, the webhook server): start on entry, stop (shielded) on exit.

In: a class with ``async start()`` and ``async stop()`` (safe to call twice, and after a
start that failed part way). Out: :class:`Started`, the mixin that gives it
``__aenter__`` / ``__aexit__``.
"""

from __future__ import annotations

import abc
import asyncio
from types import TracebackType
from typing import Self


class Started(abc.ABC):
    """Entering starts it; leaving stops it, even when the block is cancelled. A start that
    fails (or is cancelled) is stopped before the error goes on, so what it had started
    (a process, a connection) is not left behind."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await asyncio.shield(self.stop())
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.stop())
