"""Kubernetes strategic merge patch, for the shapes a TrainJob's ``runtimePatches`` and
``resourcesPerNode`` patch: a JobSet spec and a container's resources.

In: the original object and a patch, both JSON-shaped dicts. Out: the merged
object (new dicts; neither input is changed). Upstream merges with
apimachinery's ``strategicpatch.StrategicMergePatch`` against the Go types' tags;
here the tags that matter are a table of list fields merged by a key
(:data:`MERGE_KEYS`): a list whose field has no key is replaced whole, a map is
merged key by key, and ``null`` deletes a key. The ``$patch`` / ``$retainKeys``
directives are honoured for ``$patch: delete`` of a list item and ``$patch:
replace`` of a map, the two a hand-written patch uses. Pure: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

MERGE_KEYS: Mapping[str, str] = {
    "replicatedJobs": "name",          # JobSetSpec (patchMergeKey name)
    "dependsOn": "name",               # ReplicatedJob
    "containers": "name",              # PodSpec
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "hostAliases": "ip",
    "env": "name",                     # Container
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
}
"""List field → the key its items are merged by (``patchStrategy:"merge"`` in the Go
types of JobSet and core/v1); every other list is replaced by the patch's."""

DIRECTIVE = "$patch"


def merge(original: Any, patch: Any) -> Any:
    """``original`` with ``patch`` merged into it (see the module)."""
    return _merge_value(None, copy.deepcopy(original), patch)


def _merge_value(field: str | None, original: Any, patch: Any) -> Any:
    if isinstance(patch, Mapping):
        if patch.get(DIRECTIVE) == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != DIRECTIVE}
        if not isinstance(original, dict):
            original = {}
        for key, value in patch.items():
            if key == DIRECTIVE:
                continue
            if value is None:
                original.pop(key, None)
            else:
                original[key] = _merge_value(key, original.get(key), value)
        return original
    if isinstance(patch, list) and field is not None and field in MERGE_KEYS and isinstance(original, list):
        return _merge_list(MERGE_KEYS[field], original, patch)
    return copy.deepcopy(patch)


def _merge_list(key: str, original: list[Any], patch: list[Any]) -> list[Any]:
    """Items of ``patch`` merged into the ``original`` item of the same ``key`` (or added
    at the end, in the patch's order); ``$patch: delete`` removes one."""
    merged = list(original)
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            merged.append(copy.deepcopy(item))
            continue
        index = next((i for i, o in enumerate(merged) if isinstance(o, Mapping) and o.get(key) == item[key]), None)
        if item.get(DIRECTIVE) == "delete":
            if index is not None:
                del merged[index]
            continue
        if index is None:
            merged.append(_merge_value(None, {}, item))
        else:
            merged[index] = _merge_value(None, merged[index], item)
    return merged
