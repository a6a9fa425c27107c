"""Label and field selectors: parsed once into predicates over objects.

In: the selector strings of a list or watch (``app=x,tier in (a,b),!legacy``,
``status.phase!=Running``). Out: ``Selector`` predicates; a string that does not parse
raises ``ApiError`` 400, worded like kube-apiserver.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sim import errors, objects

Requirement = Callable[[dict[str, Any]], bool]

_KEY = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$")
_VALUE = re.compile(r"^([a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?$")


class Selector:
    """A conjunction of label requirements and field requirements."""

    __slots__ = ("labels", "fields", "equalities")

    def __init__(self, labels: list[Requirement], fields: list[Requirement],
                 equalities: tuple[tuple[str, str], ...] = ()) -> None:
        self.labels = labels
        self.fields = fields
        self.equalities = equalities
        """The (label key, value) pairs every match has (``key=value``, ``key in (value)``): what a
        store's label index can narrow a list to before ``matches`` is asked."""

    def __bool__(self) -> bool:
        return bool(self.labels or self.fields)

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.labels:
            lbls = objects.metadata(obj).get("labels") or {}
            if not all(r(lbls) for r in self.labels):
                return False
        return all(r(obj) for r in self.fields)


def parse(label_selector: str | None, field_selector: str | None) -> Selector:
    labels, equalities = _parse_labels(label_selector or "")
    return Selector(labels, parse_fields(field_selector or ""), equalities)


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def valid_key(key: str) -> bool:
    return bool(_KEY.match(key)) and len(key.rpartition("/")[2]) <= 63


def valid_value(value: str) -> bool:
    return bool(_VALUE.match(value)) and len(value) <= 63


def _bad_label(text: str, why: str) -> errors.ApiError:
    return errors.bad_request(f'unable to parse requirement: {why}: "{text}"')


def _check_key(key: str, whole: str) -> str:
    if not _KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise _bad_label(whole, f"invalid label key {key!r}")
    return key


def _check_value(value: str, whole: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise _bad_label(whole, f"invalid label value: {value!r}")
    return value


_SET = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")
_CMP = re.compile(r"^([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*)$")


def parse_labels(text: str) -> list[Requirement]:
    return _parse_labels(text)[0]


def _parse_labels(text: str) -> tuple[list[Requirement], tuple[tuple[str, str], ...]]:
    """The requirements of a label selector, and the (key, value) pairs it requires outright."""
    text = text.strip()
    if not text:
        return [], ()
    reqs: list[Requirement] = []
    equalities: list[tuple[str, str]] = []
    for part in _split_top(text):
        if not part:
            raise errors.bad_request(f"unable to parse requirement: found '', expected: identifier in {text!r}")
        if m := _SET.match(part):
            key = _check_key(m.group(1), part)
            values = frozenset(_check_value(v.strip(), part) for v in m.group(3).split(","))
            reqs.append(_in(key, values, m.group(2) == "in"))
            if m.group(2) == "in" and len(values) == 1:
                equalities.append((key, next(iter(values))))
        elif m := _CMP.match(part):
            key = _check_key(m.group(1), part)
            op, raw = m.group(2), m.group(3).strip()
            if op in (">", "<"):
                try:
                    bound = int(raw)
                except ValueError:
                    raise _bad_label(part, f"for 'Gt', 'Lt' operators, the value must be an integer") from None
                reqs.append(_compare(key, bound, op == ">"))
                continue
            value = _check_value(raw, part)
            reqs.append(_equals(key, value, op != "!="))
            if op != "!=":
                equalities.append((key, value))
        elif part.startswith("!"):
            reqs.append(_exists(_check_key(part[1:].strip(), part), False))
        else:
            reqs.append(_exists(_check_key(part, part), True))
    return reqs, tuple(equalities)


def _in(key: str, values: frozenset[str], inside: bool) -> Requirement:
    return lambda labels: (labels.get(key) in values) == inside


def _equals(key: str, value: str, equal: bool) -> Requirement:
    return lambda labels: (labels.get(key) == value) == equal


def _exists(key: str, exists: bool) -> Requirement:
    return lambda labels: (key in labels) == exists


def _compare(key: str, bound: int, greater: bool) -> Requirement:
    def check(labels: dict[str, Any]) -> bool:
        number = _int_or_none(labels.get(key))
        if number is None:
            return False
        return number > bound if greater else number < bound

    return check


def _field(path: str, value: str, equal: bool) -> Requirement:
    return lambda obj: (field_value(obj, path) == value) == equal


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string value at a dotted path ("" when absent), as field selectors compare it."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
        if node is None:
            return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return node if isinstance(node, str) else str(node)


_FIELD = re.compile(r"^([A-Za-z0-9_.\-]+)\s*(==|=|!=)\s*(.*)$")


def parse_fields(text: str) -> list[Requirement]:
    text = text.strip()
    if not text:
        return []
    reqs: list[Requirement] = []
    for part in text.split(","):
        part = part.strip()
        m = _FIELD.match(part)
        if not m:
            raise errors.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.group(1), m.group(2), m.group(3).strip()
        reqs.append(_field(path, value, op != "!="))
    return reqs
