"""``async with`` for the bus's clients: start on entry, stop (shielded) on exit.

In: a class with ``async start()`` and ``async stop()`` (safe to call twice).
Out: :class:`Started`, the mixin that gives it ``__aenter__`` / ``__aexit__``.
"""

from __future__ import annotations

import abc
import asyncio
from types import TracebackType
from typing import Self


class Started(abc.ABC):
    """Entering starts the client; leaving stops it, even when the block is cancelled."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.stop())
