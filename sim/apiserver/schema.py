"""Structural schemas of CRDs: pruning, defaulting and validation of custom resources, as kube-apiserver does.

In: a version's ``openAPIV3Schema`` and an object (or its status). Out: the object with
unknown fields pruned (unless ``x-kubernetes-preserve-unknown-fields``) and ``default``
values filled in, and a list of field causes for what violates the schema (types, enum,
minimum/maximum, lengths, pattern, item counts, required). The subset of OpenAPI
kube-apiserver's structural schemas use; no CEL rules (``x-kubernetes-validations``),
no formats beyond what the type says.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sim.apiserver import patching

Obj = dict[str, Any]
_META_KEYS = ("apiVersion", "kind", "metadata")


def prune_and_default(schema: Obj | None, obj: Obj, defaults: bool = True) -> Obj:
    """A copy of ``obj`` pruned and defaulted by ``schema`` (apiVersion, kind, metadata untouched);
    ``defaults=False`` only prunes (what kube-apiserver does converting a stored object to another version)."""
    if not schema:
        return obj
    out = {k: obj[k] for k in _META_KEYS if k in obj}
    rest = {k: v for k, v in obj.items() if k not in _META_KEYS}
    shaped = _walk(schema, patching.deep_copy(rest), top=True, defaults=defaults)
    out.update(shaped)
    return out


def pruning_shape(schema: Obj | None) -> Any:
    """What of ``schema`` pruning depends on (fields, item and map schemas, preserve-unknown-fields,
    nullable): two versions with equal shapes prune any object alike."""
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    return (
        tuple(sorted((k, pruning_shape(v)) for k, v in props.items())),
        pruning_shape(extra) if isinstance(extra, dict) else extra is True,
        pruning_shape(schema.get("items")),
        schema.get("x-kubernetes-preserve-unknown-fields") is True,
        bool(schema.get("nullable")),
        schema.get("type"),
    )


def _walk(schema: Obj, value: Any, top: bool = False, defaults: bool = True) -> Any:
    if isinstance(value, dict) and (schema.get("type") == "object" or top or "properties" in schema):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        out: Obj = {}
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if item is None and isinstance(sub, dict) and not sub.get("nullable"):
                continue  # kube-apiserver drops a null of a non-nullable field (its default then applies)
            if key in props:
                out[key] = _walk(props[key], item, defaults=defaults)
            elif isinstance(extra, dict):
                out[key] = _walk(extra, item, defaults=defaults)
            elif preserve or extra is True:
                out[key] = item
        if defaults:
            for key, sub in props.items():
                if key not in out and "default" in sub:
                    out[key] = _walk(sub, patching.deep_copy(sub["default"]))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_walk(schema["items"], item, defaults=defaults) for item in value]
    return value


_NO_OLD: Any = object()


def validate(schema: Obj | None, obj: Obj, only: tuple[str, ...] | None = None, old: Obj | None = None) -> list[Obj]:
    """Field causes for ``obj`` against ``schema``; ``only`` limits the check to these top-level fields.

    ``old``: the object an update replaces. kube-apiserver ratchets validation on update: a value
    equal to the old one at the same path (fields and map entries correlate; list items do not)
    is not checked, so an object written valid through one version stays writable through
    another whose schema refuses a field the write leaves alone."""
    if not schema:
        return []
    causes: list[Obj] = []
    props = schema.get("properties") or {}
    for key in schema.get("required") or []:
        if key in _META_KEYS or (only is not None and key not in only):
            continue
        if obj.get(key) is None:
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": key})
    for key in sorted(props):
        if key in _META_KEYS or (only is not None and key not in only) or key not in obj:
            continue
        # Messages name the path below the top-level field for /status writes ("ready in body").
        before = old.get(key, _NO_OLD) if old is not None else _NO_OLD
        _check(props[key], obj[key], key, causes, "" if only == ("status",) else key, before)
    if causes and "x-kubernetes-validations" in json.dumps(schema):
        causes.append({"reason": "FieldValueInvalid", "field": "<nil>", "message": "Invalid value: null: some "
                       "validation rules were not checked because the object was invalid; correct the existing "
                       "errors to complete validation"})
    return causes


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _go(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _check(schema: Obj, value: Any, path: str, causes: list[Obj], label: str | None = None,
           old: Any = _NO_OLD) -> None:
    """Causes for ``value`` at field ``path``; ``label`` is the path the messages name (default ``path``);
    ``old`` the value an update replaces (unchanged values ratchet: not checked)."""
    if old is not _NO_OLD and old == value:
        return
    label = path if label is None else label
    kind = schema.get("type")
    actual = _type_of(value)
    if value is None:
        if not schema.get("nullable"):
            if kind:
                causes.append({"reason": "FieldValueTypeInvalid", "field": path,
                               "message": f'Invalid value: "null": {label} in body must be of type {kind}: "null"'})
        return
    if kind and not (actual == kind or (kind == "number" and actual == "integer")):
        causes.append({"reason": "FieldValueTypeInvalid", "field": path,
                       "message": f'Invalid value: "{actual}": {label} in body must be of type {kind}: "{actual}"'})
        if kind == "integer" and actual == "number":
            causes.append({"reason": "FieldValueInvalid", "field": "<nil>", "message":
                           f'Invalid value: "": Checked value must be of type integer (default format) in {label}'})
        return
    first = len(causes)
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        supported = ", ".join(_go(v) for v in enum)
        causes.append({"reason": "FieldValueNotSupported", "field": path,
                       "message": f"Unsupported value: {_go(value)}: supported values: {supported}"})
    if actual in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append({"reason": "FieldValueInvalid", "field": path, "message":
                           f"Invalid value: {_go(value)}: {label} in body should be greater than or equal to "
                           f"{_num(schema['minimum'])}"})
        if "maximum" in schema and value > schema["maximum"]:
            causes.append({"reason": "FieldValueInvalid", "field": path, "message":
                           f"Invalid value: {_go(value)}: {label} in body should be less than or equal to "
                           f"{_num(schema['maximum'])}"})
    if actual == "string":
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append({"reason": "FieldValueTooLong", "field": path,
                           "message": f"Too long: may not be more than {schema['maxLength']} bytes"})
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append({"reason": "FieldValueInvalid", "field": path, "message":
                           f"Invalid value: {_go(value)}: {label} in body should be at least "
                           f"{schema['minLength']} chars long"})
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append({"reason": "FieldValueInvalid", "field": path, "message":
                           f"Invalid value: {_go(value)}: {label} in body should match '{schema['pattern']}'"})
    if len(causes) > first + 1:
        # One failure per value, as kube-openapi's validator stops at the first.
        del causes[first + 1:]
    if actual == "array":
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append({"reason": "FieldValueTooMany", "field": path,
                           "message": f"Too many: {len(value)}: must have at most {schema['maxItems']} items"})
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append({"reason": "FieldValueInvalid", "field": path, "message":
                           f"Invalid value: {len(value)}: {label} in body should have at least "
                           f"{schema['minItems']} items"})
        items = schema.get("items")
        if isinstance(items, dict):
            for n, item in enumerate(value):
                _check(items, item, f"{path}[{n}]", causes, f"{label}[{n}]" if label else f"[{n}]")
    if actual == "object":
        props = schema.get("properties") or {}
        for key in schema.get("required") or []:
            if value.get(key) is None:
                causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": f"{path}.{key}"})
        extra = schema.get("additionalProperties")
        base = f"{label}." if label else ""
        olds = old if isinstance(old, dict) else {}
        for key in sorted(value):
            item = value[key]
            if key in props:
                _check(props[key], item, f"{path}.{key}", causes, base + key, olds.get(key, _NO_OLD))
            elif isinstance(extra, dict):
                _check(extra, item, f"{path}.{key}", causes, base + key, olds.get(key, _NO_OLD))
