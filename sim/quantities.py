"""Kubernetes resource quantities as exact numbers.

In: quantity strings as they appear in pod specs and node capacity (`100m`,
`2`, `1.5`, `512Mi`, `1Gi`, `5G`, `1e3`), or resource lists
(`{"cpu": "500m", "nvidia.com/gpu": "1"}`).
Out: `fractions.Fraction` values (exact: `100m` is 1/10, `1Ki` is 1024) and
resource totals as `dict[str, Fraction]`.

Grammar (apimachinery `resource.Quantity`): an optionally signed decimal
number followed by a binary-SI suffix (Ki … Ei), a decimal-SI suffix
(n u m "" k M G T P E) or a decimal exponent (`e3`, `E-2`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fractions import Fraction

_BINARY = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"""^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))
        (?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)
          |[eE](?P<exponent>[+-]?\d+)
          |(?P<decimal>[numkMGTPE]?))$""",
    re.VERBOSE,
)

Resources = dict[str, Fraction]
"""A resource list with parsed values: resource name → exact amount."""


def parse(quantity: str | int | float) -> Fraction:
    """Parse one quantity into an exact Fraction; ValueError names a malformed one.

    Integers are taken as they are (JSON numbers sometimes appear in
    hand-written manifests); floats go through their shortest repr.
    """
    if isinstance(quantity, bool):
        raise ValueError(f"invalid quantity {quantity!r}: not a number")
    if isinstance(quantity, int):
        return Fraction(quantity)
    if isinstance(quantity, float):
        return Fraction(repr(quantity))
    if not isinstance(quantity, str):
        raise ValueError(f"invalid quantity {quantity!r}: expected a string")
    match = _QUANTITY.match(quantity.strip())
    if match is None:
        raise ValueError(
            f"invalid quantity {quantity!r}: expected a number with an optional "
            "suffix such as 100m, 512Mi, 5G or 1e3"
        )
    number = Fraction(match["number"])
    if match["binary"]:
        return number * _BINARY[match["binary"]]
    if match["exponent"] is not None:
        return number * Fraction(10) ** int(match["exponent"])
    return number * _DECIMAL[match["decimal"] or ""]


def parse_list(resources: Mapping[str, str | int | float] | None) -> Resources:
    """Parse a resource list (`requests`, `limits`, `capacity`); ValueError names the bad entry."""
    parsed: Resources = {}
    for name, value in (resources or {}).items():
        try:
            parsed[name] = parse(value)
        except ValueError as exc:
            raise ValueError(f"resource {name}: {exc}") from None
    return parsed


def add(*lists: Mapping[str, Fraction]) -> Resources:
    """Sum parsed resource lists name by name."""
    total: Resources = {}
    for resources in lists:
        for name, value in resources.items():
            total[name] = total.get(name, Fraction(0)) + value
    return total


def sum_lists(lists: Iterable[Mapping[str, str | int | float] | None]) -> Resources:
    """Parse and sum unparsed resource lists."""
    return add(*(parse_list(resources) for resources in lists))


def maximum(*lists: Mapping[str, Fraction]) -> Resources:
    """The name-by-name maximum of parsed resource lists."""
    result: Resources = {}
    for resources in lists:
        for name, value in resources.items():
            if name not in result or value > result[name]:
                result[name] = value
    return result


def container_requests(container: Mapping[str, object]) -> Resources:
    """What a container requests: its requests, defaulting each to its limit when only a limit is set."""
    spec = container.get("resources") or {}
    assert isinstance(spec, Mapping)
    limits = parse_list(spec.get("limits"))
    requests = parse_list(spec.get("requests"))
    return {**limits, **requests}


def pod_requests(pod: Mapping[str, object]) -> Resources:
    """A pod's effective request, as the kube scheduler computes it.

    max(sum over containers, each init container) per resource, plus
    `spec.overhead`.
    """
    spec = pod.get("spec") or {}
    assert isinstance(spec, Mapping)
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    total = add(*(container_requests(c) for c in containers))
    effective = maximum(total, *(container_requests(c) for c in init_containers))
    return add(effective, parse_list(spec.get("overhead")))


def format_quantity(value: Fraction) -> str:
    """A compact rendering for messages: `2`, `500m`, `1.5`."""
    if value.denominator == 1:
        return str(value.numerator)
    millis = value * 1000
    if millis.denominator == 1:
        return f"{millis.numerator}m"
    return str(float(value))
