"""Typed reads of a Kubernetes object held as a plain dict (``common.Manifest``).

In: any value that should be an object (a child as listed, a watch event's
object, a pod template). Out: its metadata fields and a pod's phase and exit
code, typed, with an empty value wherever the object, its ``metadata`` or the
field is missing or of the wrong shape, so callers never write
``get("metadata") or {}`` and never crash on a malformed object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXIT_CODE_UNKNOWN = 0xBEEF
"""Upstream's sentinel exit code when the default container has not terminated."""

_EMPTY: Mapping[str, Any] = {}


def meta(obj: object) -> Mapping[str, Any]:
    """The object's ``metadata``; empty when the object or its metadata is not a mapping."""
    if not isinstance(obj, Mapping):
        return _EMPTY
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else _EMPTY


def _text(obj: object, field: str) -> str:
    value = meta(obj).get(field)
    return "" if value is None else str(value)


def name_of(obj: object) -> str:
    """``metadata.name``; "" when unset."""
    return _text(obj, "name")


def namespace_of(obj: object) -> str:
    """``metadata.namespace``; "" when unset (a caller picks its own default)."""
    return _text(obj, "namespace")


def resource_version_of(obj: object) -> str:
    """``metadata.resourceVersion``; "" when unset."""
    return _text(obj, "resourceVersion")


def uid_of(obj: object) -> str | None:
    """``metadata.uid``; None when unset or empty."""
    value = meta(obj).get("uid")
    return str(value) if value else None


def _string_map(obj: object, field: str) -> dict[str, str]:
    value = meta(obj).get(field)
    return dict(value) if isinstance(value, Mapping) else {}


def labels_of(obj: object) -> dict[str, str]:
    """A copy of ``metadata.labels``; empty when unset."""
    return _string_map(obj, "labels")


def annotations_of(obj: object) -> dict[str, str]:
    """A copy of ``metadata.annotations``; empty when unset."""
    return _string_map(obj, "annotations")


def owner_refs_of(obj: object) -> list[Mapping[str, Any]]:
    """``metadata.ownerReferences`` (entries that are not mappings left out); empty when unset."""
    value = meta(obj).get("ownerReferences")
    if not isinstance(value, list):
        return []
    return [ref for ref in value if isinstance(ref, Mapping)]


def creation_timestamp_of(obj: object) -> str | None:
    """``metadata.creationTimestamp`` as written (RFC 3339); None when unset."""
    value = meta(obj).get("creationTimestamp")
    return value if isinstance(value, str) else None


def deletion_timestamp_of(obj: object) -> str | None:
    """``metadata.deletionTimestamp`` as written; None when unset or empty."""
    value = meta(obj).get("deletionTimestamp")
    return str(value) if value else None


def is_deleting(obj: object) -> bool:
    """Whether the object carries a ``deletionTimestamp`` (the API server is deleting it)."""
    return deletion_timestamp_of(obj) is not None


def spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object's (or pod template's) ``spec`` itself; a fresh empty dict when it is not a mapping."""
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def phase_of(pod: Mapping[str, Any]) -> str:
    """``status.phase`` of a pod; ``Pending`` when unset."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def default_exit_code(pod: Mapping[str, Any], container_name: str) -> int:
    """Exit code of the named container's terminated state, else :data:`EXIT_CODE_UNKNOWN`."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container_name:
            terminated = (status.get("state") or {}).get("terminated")
            if terminated is not None and "exitCode" in terminated:
                return int(terminated["exitCode"])
    return EXIT_CODE_UNKNOWN


def is_retryable_exit_code(code: int) -> bool:
    """Upstream ``IsRetryableExitCode``: 128 and above (signals, the unknown sentinel)."""
    return code >= 128
