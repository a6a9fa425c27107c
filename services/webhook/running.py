"""Runs one webhook process: the HTTPS server until cancelled (SIGTERM, Ctrl-C).

In: the webhook's settings. Out: the server listening (``on_ready`` gets its base
URL) until cancelled.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from services.webhook import serving
from services.webhook.settings import WebhookSettings

SWITCH_INTERVAL = 0.0005
"""Seconds a thread may hold the GIL while another waits for it (CPython's default is 0.005).
Reviews are decided in threads; the event loop reading a 3 MiB body over TLS gives the GIL up at
every record it decrypts and waits for it again each time, so at the default a probe answered
meanwhile can take hundreds of milliseconds."""


async def run(settings: WebhookSettings, on_ready: Callable[[str], None] = lambda url: None) -> None:
    """Serve until cancelled; ``on_ready`` gets the base URL once the server listens."""
    sys.setswitchinterval(SWITCH_INTERVAL)
    async with serving.Server(settings) as server:
        on_ready(server.url)
        await asyncio.Event().wait()
