"""Server-side apply: field ownership in ``metadata.managedFields``, conflicts, force, removal of dropped fields.

In: the stored object (or None), an applied configuration, a field manager and ``force``;
for other writes with an explicit ``fieldManager``, the old and new object. Out: the
object to store, with ``managedFields`` (FieldsV1) updated, or a 409 Conflict naming
every conflicting field and manager, as kube-apiserver answers.

Simplification (docs/sim.md): maps are merged field by field, every list is atomic
(owned and replaced whole, as ``x-kubernetes-list-type: atomic``); writes without a
``fieldManager`` query parameter record no ownership.
"""

from __future__ import annotations

import datetime
from typing import Any

from sim import errors, objects
from sim.apiserver import patching

Obj = dict[str, Any]
Path = tuple[str, ...]
_META_TRACKED = ("labels", "annotations", "finalizers", "ownerReferences")
_MISSING = object()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def leaves(obj: Obj, status_subresource: bool, subresource: str | None = None) -> set[Path]:
    """The field paths a configuration sets: maps field by field, scalars and lists as wholes."""
    found: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata":
            if isinstance(value, dict):
                for field in _META_TRACKED:
                    if field in value:
                        _walk(value[field], ("metadata", field), found)
            continue
        if status_subresource and (key == "status") != (subresource == "status"):
            continue
        _walk(value, (key,), found)
    return found


def _walk(value: Any, path: Path, found: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _walk(item, (*path, key), found)
    else:
        found.add(path)


def _value(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _delete(obj: Obj, path: Path) -> None:
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)


def to_fields_v1(paths: set[Path]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    found: set[Path] = set()
    if not isinstance(tree, dict):
        return found
    for key, sub in tree.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        if isinstance(sub, dict) and any(k.startswith("f:") for k in sub):
            found |= from_fields_v1(sub, path)
        else:
            found.add(path)
    return found


def _entries(obj: Obj | None) -> list[Obj]:
    return [dict(e) for e in objects.metadata(obj or {}).get("managedFields") or [] if isinstance(e, dict)]


def _set_entry(entries: list[Obj], manager: str, operation: str, api_version: str, paths: set[Path],
               subresource: str | None) -> list[Obj]:
    kept = [e for e in entries if not (e.get("manager") == manager and e.get("operation") == operation
                                        and e.get("subresource") == subresource)]
    if paths:
        entry: Obj = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": _now(),
                      "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(paths)}
        if subresource:
            entry["subresource"] = subresource
        kept.append(entry)
    return [e for e in kept if from_fields_v1(e.get("fieldsV1"))]


def _merge(base: Any, applied: Any) -> Any:
    if isinstance(base, dict) and isinstance(applied, dict):
        out = dict(base)
        for key, value in applied.items():
            out[key] = _merge(base.get(key), value)
        return out
    return patching.deep_copy(applied)


def apply(old: Obj | None, config: Obj, manager: str, force: bool, status_subresource: bool,
          subresource: str | None) -> Obj:
    """The object after applying ``config`` as ``manager``; raises 409 on conflicts unless ``force``."""
    applied = leaves(config, status_subresource, subresource)
    entries = _entries(old)
    conflicts: list[tuple[Obj, Path]] = []
    for entry in entries:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            continue
        if entry.get("subresource") != subresource:
            continue
        for path in sorted(applied & from_fields_v1(entry.get("fieldsV1"))):
            if _value(old, path) != _value(config, path):
                conflicts.append((entry, path))
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for entry, path in conflicts:
        entry["fieldsV1"] = to_fields_v1(from_fields_v1(entry.get("fieldsV1")) - {path})
    mine = next((e for e in entries if e.get("manager") == manager and e.get("operation") == "Apply"
                 and e.get("subresource") == subresource), None)
    previous = from_fields_v1(mine.get("fieldsV1")) if mine else set()
    others: set[Path] = set()
    for entry in entries:
        if entry is not mine:
            others |= from_fields_v1(entry.get("fieldsV1"))
    new = patching.deep_copy(old) if old is not None else {}
    for path in previous - applied - others:
        _delete(new, path)
    body = {k: v for k, v in config.items() if k != "metadata"}
    meta = dict(objects.metadata(new))
    for field in _META_TRACKED:
        if field in objects.metadata(config):
            meta[field] = _merge(meta.get(field), config["metadata"][field])
    if old is None:
        for field in ("name", "namespace", "generateName"):
            if field in objects.metadata(config):
                meta[field] = config["metadata"][field]
    merged: Obj = _merge(new, body)
    new = merged
    meta["managedFields"] = _set_entry(entries, manager, "Apply", str(config.get("apiVersion")), applied,
                                       subresource)
    new["metadata"] = meta
    return new


def record_update(old: Obj | None, new: Obj, manager: str, status_subresource: bool,
                  subresource: str | None) -> None:
    """Give ``manager`` (an Update operation) the fields the write changed; take them from the others."""
    before = leaves(old, status_subresource, subresource) if old is not None else set()
    after = leaves(new, status_subresource, subresource)
    changed = {p for p in after if _value(old, p) != _value(new, p)} if old is not None else after
    removed = before - after
    entries = _entries(old)
    for entry in entries:
        if entry.get("subresource") == subresource:
            entry["fieldsV1"] = to_fields_v1(from_fields_v1(entry.get("fieldsV1")) - changed - removed)
    mine = next((e for e in entries if e.get("manager") == manager and e.get("operation") == "Update"
                 and e.get("subresource") == subresource), None)
    owned = (from_fields_v1(mine.get("fieldsV1")) if mine else set()) | changed
    meta = new["metadata"] = dict(objects.metadata(new))
    meta["managedFields"] = _set_entry(entries, manager, "Update", str(new.get("apiVersion")), owned - removed,
                                       subresource)
    if not meta["managedFields"]:
        del meta["managedFields"]


def _conflict_error(conflicts: list[tuple[Obj, Path]]) -> errors.ApiError:
    def who(entry: Obj) -> str:
        text = f'conflict with "{entry.get("manager")}"'
        if entry.get("operation") == "Update":
            text += f" using {entry.get('apiVersion')}"
        return text

    causes = [{"reason": "FieldManagerConflict", "message": who(e), "field": "." + ".".join(p)}
              for e, p in conflicts]
    if len(causes) == 1:
        message = f"Apply failed with 1 conflict: {causes[0]['message']}: {causes[0]['field']}"
    else:
        by_manager: dict[str, list[str]] = {}
        for cause in causes:
            by_manager.setdefault(cause["message"].replace("conflict with", "conflicts with", 1), []).append(
                cause["field"])
        lines = [f"{m}:\n" + "\n".join(f"- {f}" for f in fields) for m, fields in by_manager.items()]
        message = f"Apply failed with {len(causes)} conflicts: " + "\n".join(lines)
    return errors.ApiError(409, "Conflict", message, causes, details={})
