"""Loopback ports for the real parts: a free one to listen on, whether one is taken, whether one
accepts connections."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable


def free() -> int:
    """A port on 127.0.0.1 nobody listens on now (it may be taken before it is used)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def in_use(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port``. Connections in TIME_WAIT do not count:
    etcd, kube-apiserver and Kafka bind with SO_REUSEADDR, so this does too."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


async def accepts(port: int) -> bool:
    """Whether 127.0.0.1:``port`` accepts a TCP connection now (the connection is closed at once)."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def until_accepts(port: int, deadline: float, alive: Callable[[], bool], interval: float) -> bool:
    """Wait until 127.0.0.1:``port`` accepts connections (True) or ``alive()`` turns False (False:
    what was to listen has ended); TimeoutError once ``time.monotonic()`` passes ``deadline``."""
    while True:
        if not alive():
            return False
        if await accepts(port):
            return True
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing accepts connections on 127.0.0.1:{port}")
        await asyncio.sleep(interval)
