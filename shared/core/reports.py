"""Kubernetes field errors, as every job family's validation reports them.

In: what a family's validation found wrong with a document (a field path, an
error type, a detail, the offending value). Out: :class:`FieldError` and
:class:`Report` (a Kubernetes ``field.ErrorList`` and the warnings to show
anyway), written as apimachinery writes them: one condition's reason
(:func:`describe`), a webhook's denial (:func:`aggregate`), values quoted and
numbers printed as its error bodies show them, and the DNS-1035 label check
names are held to. No I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Literal

from shared.api import limits

ErrorType = Literal["Required", "Invalid", "Forbidden", "NotSupported", "Duplicate"]

TYPE_TEXT: dict[ErrorType, str] = {
    "Required": "Required value",
    "Invalid": "Invalid value",
    "Forbidden": "Forbidden",
    "NotSupported": "Unsupported value",
    "Duplicate": "Duplicate value",
}
"""How Kubernetes writes each error type in a message (apimachinery ``field.ErrorType.String``)."""


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One entry of a Kubernetes field.ErrorList.

    ``value`` is the offending value, quoted, for the types whose Kubernetes
    message carries it (Invalid, NotSupported, Duplicate); it goes between
    the type and the detail: ``metadata.name: Invalid value: "0-test": should match: …``.
    """

    path: str
    type: ErrorType
    detail: str
    value: str | None = None

    @property
    def message(self) -> str:
        """The error without its field path, as apimachinery's ``field.Error.ErrorBody``
        writes it: ``<type text>: [<value>: ]<detail>`` (``Required value: must be specified``)."""
        parts: list[str] = [TYPE_TEXT[self.type]]
        if self.value is not None:
            parts.append(self.value)
        if self.detail:
            parts.append(self.detail)
        return ": ".join(parts)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass
class Report:
    """Everything wrong with one document, and the warnings to show anyway."""

    errors: list[FieldError] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def describe(report: Report) -> str:
    """The errors joined with ``, `` (the reason of a ``<Kind>FailedValidation`` condition)."""
    return ", ".join(str(error) for error in report.errors)


def aggregate(errors: Sequence[FieldError | str]) -> str:
    """The errors as Kubernetes' ``ErrorList.ToAggregate().Error()`` writes them, which is
    what an upstream webhook's denial says: repeats dropped, one error as it is, several
    in brackets joined with ``, ``."""
    messages = list(dict.fromkeys(str(error) for error in errors))
    return messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"


_DNS1035_MAX = 63
_DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character "
    "(e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def quote(value: object) -> str:
    """A value quoted as Go's %q / Kubernetes error bodies show it."""
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return str(value)


def dns1035_errors(name: str) -> list[str]:
    """apimachinery IsDNS1035Label: length first, then the pattern."""
    errors = []
    if len(name) > _DNS1035_MAX:
        errors.append(f"must be no more than {_DNS1035_MAX} characters")
    if not _DNS1035_RE.match(name):
        errors.append(_DNS1035_MESSAGE)
    return errors


def supported(values: tuple[str, ...] | list[str]) -> str:
    """The detail of a NotSupported error: ``supported values: "a", "b"``."""
    return "supported values: " + ", ".join(quote(v) for v in values)


def number(value: int) -> str:
    """An integer as text; one too long to print (Python refuses over 4,300 digits) by its length."""
    if value.bit_length() > 64:
        return f"<a number of about {limits.json_size(value)} digits>"
    return str(value)
