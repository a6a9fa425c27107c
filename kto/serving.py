"""Running a long-lived service command until SIGTERM or Ctrl-C.

In: a coroutine function (the service). Out: an exit code; on a signal the
service task is cancelled, so its ``async with`` blocks drain and close.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable


def configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("KTO_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def announce(line: str) -> None:
    """The one stdout line a parent process waits for (``ready …``)."""
    print(line, flush=True)


def serve(service: Callable[[], Awaitable[None]]) -> int:
    """Run ``service`` until it returns or a SIGTERM/SIGINT arrives; 0 on a clean stop."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(service())
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    configure_logging()
    asyncio.run(main())
    return 0
