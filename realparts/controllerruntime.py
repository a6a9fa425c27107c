"""What kto reads of a controller-runtime manager's output: the training-operator and the JobSet
controller both are one, logging in zap's development format (one line per entry, its fields a
JSON object after the message)."""

from __future__ import annotations

import json
import pathlib

READY_LINE = "Starting workers"
"""What controller-runtime logs once a controller runs (after its caches have synced)."""


def workers_started(log: str, controller: str) -> bool:
    """Whether ``controller``'s :data:`READY_LINE` is in ``log``."""
    for line in log.splitlines():
        if READY_LINE not in line or "{" not in line:
            continue
        try:
            fields = json.loads(line[line.index("{"):])
        except ValueError:
            continue
        if isinstance(fields, dict) and fields.get("controller") == controller:
            return True
    return False


def log_text(path: pathlib.Path) -> str:
    """The log so far; empty before the process has written it."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
