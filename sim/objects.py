"""Typed reads of Kubernetes objects as the local cluster holds them: plain JSON dicts.

In: an object (a Pod, a Node, any kind) as a mapping. Out: its parts with their types — ``metadata``
(the empty mapping when it has none), a Node's readiness and InternalIP. Both sides of sim/ read
objects through here: sim.node and sim.apiserver import it, it imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object's ``metadata``; an empty dict (not stored in the object) when it has none."""
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def is_ready(node: Mapping[str, Any]) -> bool:
    """True when the node's Ready condition is True."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def internal_ip(node: Mapping[str, Any]) -> str | None:
    """The node's InternalIP address, if it has one."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return None
