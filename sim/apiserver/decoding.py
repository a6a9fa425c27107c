"""How deep a request may nest: kube-apiserver's refusal of a body nested too deep, at the local cluster's depth.

In: the raw body of a create, update, patch or delete, and how the server reads it (JSON,
or YAML for ``application/yaml`` and server-side apply); or an object a patch made.
Out: None when it nests at most :data:`MAX_DEPTH` levels, else the message kube-apiserver
gives a body past its own limit (10,000 levels: Go's JSON scanner and go-yaml stop there),
worded for the request at hand. Every measure here is iterative: a body deeper than
Python's recursion limit is measured, not parsed, so it is refused with a ``metav1.Status``
instead of a ``RecursionError`` (the sim's decoders, copies and merges recurse once or
twice a level; they pass 480 levels, not 500).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_DEPTH = 400
"""Levels of objects and arrays a body or a stored object may nest (the outermost counts
one). kube-apiserver's limit is 10,000; the sim's code handles about 480. Deeper than
any Kubernetes object, and deep enough for a job kto itself refuses (kto's limit is 64
levels) to reach kto, as it would on a real cluster."""

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(rb"[\[\]{}]")
_YAML_INDICATORS = (b"{", b"[", b":", b"-", b"?")
"""Every YAML collection starts with one of these (a flow bracket, a block key or entry)."""


def object_refusal(raw: bytes, as_yaml: bool, kind: str, limit: int = MAX_DEPTH) -> str | None:
    """Why a create or update body of ``kind`` is refused, or None: kube-apiserver's 400 for
    a body its decoder cannot read (``transformDecodeError``)."""
    if as_yaml:
        why = _yaml_too_deep(raw, limit)
    else:
        bracket = _json_too_deep(raw, limit)
        why = f"couldn't get version/kind; json parse error: {_exceeded(bracket)}" if bracket else None
    if why is None:
        return None
    return f"the object provided is unrecognized (must be of type {kind}): {why} ({_summary(raw, 30)})"


def patch_refusal(raw: bytes, patch_type: str, limit: int = MAX_DEPTH) -> str | None:
    """Why a patch body is refused, or None. A JSON, merge or strategic merge patch is not
    valid JSON to kube-apiserver (``json.Valid``); an apply patch is YAML, converted to
    JSON as it is (``error encoding patch``) unless it is JSON already, which then fails
    to decode."""
    if patch_type != "apply":
        return "invalid JSON patch" if _json_too_deep(raw, limit) else None
    why = _yaml_too_deep(raw, limit)
    if why is None:
        return None
    if raw.lstrip().startswith(b"{"):
        return f"error decoding patch: error converting YAML to JSON: {why}"
    return f"error encoding patch: {why}"


def options_refusal(raw: bytes, limit: int = MAX_DEPTH) -> str | None:
    """Why the DeleteOptions body of a delete is refused, or None."""
    bracket = _json_too_deep(raw, limit)
    return f"couldn't get version/kind; json parse error: {_exceeded(bracket)}" if bracket else None


def result_refusal(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Why an object a patch made cannot be stored, or None: a JSON patch adds a value, or
    copies a subtree, below a path of any depth, so a shallow patch can make a deep object.
    kube-apiserver stores one past its limit and can then neither read, list nor delete it
    (``StorageError: corrupt object``, ``object not decodable``); the sim stores nothing."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return f"object not decodable: {_exceeded('{' if isinstance(node, dict) else '[')}"
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return None


def _exceeded(bracket: str) -> str:
    """Go's JSON scanner's words for the bracket that opens one level too many."""
    return f"invalid character '{bracket}' exceeded max depth"


def _json_too_deep(raw: bytes, limit: int) -> str | None:
    """The bracket that opens level ``limit + 1`` of JSON text ``raw`` (brackets inside
    strings do not count), or None. Malformed JSON is the parser's business."""
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return None
    depth = 0
    brackets: list[bytes] = _BRACKET.findall(_JSON_STRING.sub(b'""', raw))
    for bracket in brackets:
        if bracket in (b"{", b"["):
            depth += 1
            if depth > limit:
                return bracket.decode()
        else:
            depth -= 1
    return None


def _yaml_too_deep(raw: bytes, limit: int) -> str | None:
    """go-yaml's words for a YAML (or JSON) document that opens level ``limit + 1``
    (``yaml: line 4: exceeded max depth of 10000``; no line on the first), or None.
    Measured on PyYAML's events, which its parser makes without recursion (its composer,
    which builds the nodes, recurses); a document that does not parse is left to the loader."""
    if sum(raw.count(indicator) for indicator in _YAML_INDICATORS) <= limit:
        return None
    depth = 0
    try:
        for event in yaml.parse(raw, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limit:
                    line = event.start_mark.line if event.start_mark is not None else 0
                    return f"yaml: {f'line {line + 1}: ' if line else ''}exceeded max depth of {limit}"
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return None
    return None


def _summary(raw: bytes, length: int) -> str:
    """apimachinery's summarizeData: the first ``length`` bytes of a JSON object as text,
    of anything else in hex, `` ...`` when there is more."""
    if not raw:
        return "<empty>"
    head = raw[:length]
    text = head.decode(errors="replace") if raw.startswith(b"{") else head.hex()
    return f"{text} ..." if len(raw) > length else text
