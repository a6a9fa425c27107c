"""Loopback ports for the real parts: a free one to listen on, and whether one is taken."""

from __future__ import annotations

import socket


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
