"""The gang scheduler's PodGroup as every job family writes it, and the resource
quantities its ``minResources`` adds up (spec §6.9, A.17).

In: resource quantities as a pod template writes them (``"500m"``, ``"1Gi"``).
Out: the API versions of Volcano's and scheduler-plugins' PodGroup, the
annotation and label that put a pod in its group, and :class:`Quantity`: just
enough of k8s.io/apimachinery ``resource.Quantity`` to parse, add and print
quantities as Go does. Each family builds its own PodGroup from these. No I/O.
"""

from __future__ import annotations

import decimal
import fractions
import re

from shared.core import errors

VOLCANO_API_VERSION = "scheduling.volcano.sh/v1beta1"
SCHEDULER_PLUGINS_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"
SCHEDULER_PLUGINS_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")


class Quantity:
    """An exact quantity and the format (binary, decimal, exponent) its sum is printed in.

    Like Go's ``Quantity.Add``, a sum keeps the format of its first term.
    """

    def __init__(self, value: fractions.Fraction, form: str) -> None:
        self.value = value
        self.form = form

    @classmethod
    def parse(cls, raw: object) -> Quantity:
        text = str(raw).strip()
        match = _QUANTITY.match(text)
        if match is None:
            raise errors.PlanError("resources", f"quantities must match the regular expression: {text!r}")
        number = fractions.Fraction(decimal.Decimal(match.group(1)))
        suffix = match.group(2)
        if suffix in _BINARY:
            return cls(number * 2 ** _BINARY[suffix], "binary")
        if suffix in _DECIMAL:
            return cls(number * fractions.Fraction(10) ** _DECIMAL[suffix], "decimal")
        if suffix[:1] in ("e", "E") and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
            return cls(number * fractions.Fraction(10) ** int(suffix[1:]), "exponent")
        raise errors.PlanError("resources", f"unable to parse quantity's suffix: {text!r}")

    def add(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.form)

    def format(self) -> str:
        """Go's canonical string: largest suffix that leaves an integer (nano precision, rounded up)."""
        value = self.value
        if self.form == "binary" and abs(value) >= 1024 and value.denominator == 1:
            number = int(value)
            shift = 0
            while shift < 60 and number % 1024 == 0:
                number //= 1024
                shift += 10
            suffix = {0: ""} | {bits: name for name, bits in _BINARY.items()}
            return f"{number}{suffix[shift]}"
        scaled = value * 10**9
        nanos = -((-scaled.numerator) // scaled.denominator)  # round up, as Go does
        exponent = -9
        while exponent < 18 and nanos != 0 and nanos % 1000 == 0:
            nanos //= 1000
            exponent += 3
        if nanos == 0:
            exponent = 0
        if self.form == "exponent":
            return f"{nanos}e{exponent}" if exponent else str(nanos)
        return f"{nanos}{_DECIMAL_SUFFIX[exponent]}"
