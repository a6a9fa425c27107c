"""Hostile shapes shared by the tests of limits, record decoding and the pipeline."""

from __future__ import annotations

from typing import Any


def nested(levels: int) -> dict[str, Any]:
    """``{"a": {"a": ... {}}}``, ``levels`` deep, built without recursion."""
    top: dict[str, Any] = {}
    current = top
    for _ in range(levels):
        current["a"] = {}
        current = current["a"]
    return top
