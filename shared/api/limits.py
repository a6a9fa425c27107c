"""kto's limits on what one job may be, and the pure measures they are checked with.

In: a JSON-shaped value (a job document, or any part of one). Out: its
nesting depth and its size as compact JSON, measured without recursion (a
value nested 100,000 levels deep is measured, not crashed on), and the field
path that holds most of it. Validation (``shared.core.validating``) refuses
a job over a limit with a message naming the field and the limit; the bus
(``shared.bus.records``) has a record-size limit of its own.

The limits are far above what a real training job needs and far below what
would hurt the operator: a job of a million replicas would be planned pod by
pod; a value nested a few hundred levels deep cannot be serialised by
pydantic (255 levels) or parsed by Python's json module (about 1,000).
"""

from __future__ import annotations

import re
from typing import Any

MAX_OBJECT_DEPTH = 64
"""Levels of nested objects and arrays in a job (``spec`` is level 1). A real pod
template reaches about 15 (affinity terms)."""

MAX_OBJECT_BYTES = 512 * 1024
"""Size of a job as compact JSON, without ``status`` and ``metadata.managedFields``
(which kto and the API server write). A real job is a few kilobytes;
kube-apiserver stores objects up to 1.5 MiB."""

MAX_REPLICAS = 10_000
"""Replicas of one replica type, and of all replica types of a job together."""

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")
_SHOWN_SEGMENTS = 12
"""Segments of a very long field path shown before it is cut short with ``…``."""


def segment(parent: str, key: str | int) -> str:
    """``parent`` extended by one object key or array index, Kubernetes style:
    ``a.b``, ``a[0]``, and ``a[some/key]`` for keys that are not identifiers or
    that name a replica type."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if not parent:
        return key
    if _IDENTIFIER.match(key) and not parent.endswith("ReplicaSpecs"):
        return f"{parent}.{key}"
    return f"{parent}[{key}]"


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a Kubernetes field path (``spec.mpiReplicaSpecs[Worker].replicas``)."""
    path = ""
    for part in loc:
        path = segment(path, part)
    return path


def shorten(path: str) -> str:
    """A field path cut after a dozen segments (a path 300 levels deep is not a message)."""
    parts = re.split(r"(?=[.\[])", path)
    if len(parts) <= _SHOWN_SEGMENTS:
        return path
    return "".join(parts[:_SHOWN_SEGMENTS]) + "…"


def depth_error(document: dict[str, Any]) -> tuple[str, str] | None:
    """A loader's refusal of a document (its ``status`` not counted) nested deeper than
    :data:`MAX_OBJECT_DEPTH`: (field path, message); None within the limit."""
    deep = too_deep({key: value for key, value in document.items() if key != "status"})
    if deep is None:
        return None
    path, depth = deep
    return shorten(path), f"nested {depth} levels deep; kto's limit is {MAX_OBJECT_DEPTH} levels"


def _children(value: Any) -> list[tuple[str | int, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, (list, tuple)):
        return list(enumerate(value))
    return []


def too_deep(value: Any, limit: int = MAX_OBJECT_DEPTH, path: str = "") -> tuple[str, int] | None:
    """The path of the first container nested deeper than ``limit`` and how deep it
    goes from there on (counted to ``limit + 1`` at least), or None. Iterative."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        node, where, depth = stack.pop()
        if not isinstance(node, (dict, list, tuple)):
            continue
        if depth > limit:
            return where, depth + _depth(node)
        for key, child in _children(node):
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, segment(where, str(key) if isinstance(node, dict) else key), depth + 1))
    return None


def _depth(value: Any) -> int:
    """Levels of containers below ``value`` (0 for a scalar or an empty one). Iterative."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        for _, child in _children(node):
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, depth + 1))
    return deepest


def _scalar_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + 2
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, int):
        # str(int) of a huge int is refused (sys.int_max_str_digits): estimate its digits.
        return max(1, (value.bit_length() * 30103) // 100000 + 1) + (value < 0)
    return len(repr(value))


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (``separators=(",", ":")``; escapes not
    counted). Iterative, so any depth is measured."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            total += 2 + max(len(node) - 1, 0)
            for key, child in node.items():
                total += _scalar_size(str(key)) + 1
                stack.append(child)
        elif isinstance(node, (list, tuple)):
            total += 2 + max(len(node) - 1, 0)
            stack.extend(node)
        else:
            total += _scalar_size(node)
    return total


def largest_field(value: Any, path: str = "") -> tuple[str, int]:
    """The field holding most of ``value``'s size: from the top, step into the biggest
    child while it holds more than half of its parent. (path, its size)."""
    size = json_size(value)
    while True:
        sized = [(json_size(child), key) for key, child in _children(value)]
        if not sized:
            return path, size
        child_size, key = max(sized, key=lambda pair: pair[0])
        if child_size * 2 <= size:
            return path, size
        path = segment(path, key)
        value = value[key]
        size = child_size
