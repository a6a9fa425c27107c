"""Runs one webhook process: the HTTPS server until cancelled (SIGTERM, Ctrl-C)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.webhook import serving
from services.webhook.settings import WebhookSettings


async def run(settings: WebhookSettings, on_ready: Callable[[str], None] = lambda url: None) -> None:
    """Serve until cancelled; ``on_ready`` gets the base URL once the server listens."""
    async with serving.Server(settings) as server:
        on_ready(server.url)
        await asyncio.Event().wait()
