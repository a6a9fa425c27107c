"""Decoding of the Kubernetes protobuf bodies kubectl's typed clients send, for a few kinds.

In: a request body in ``application/vnd.kubernetes.protobuf`` (the ``k8s\\0`` envelope
around a ``runtime.Unknown``), as ``kubectl create configmap|secret|namespace|serviceaccount``
send. Out: the same object as a JSON dict. Other kinds raise ``ApiError`` 415, naming
the kind, so the caller knows to send JSON.
"""

from __future__ import annotations

import base64
from typing import Any

from sim import errors

MAGIC = b"k8s\x00"

# A schema maps field number → (json name, type); type is "string", "bytes", "bool", "int",
# "time", "strings" (repeated string), "map" (string→string), "bytesmap" (string→base64),
# or a nested schema dict; ("list", schema) for repeated messages.
Schema = dict[int, tuple[str, Any]]

TIME: Schema = {1: ("seconds", "int"), 2: ("nanos", "int")}
OWNER_REFERENCE: Schema = {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
                           5: ("apiVersion", "string"), 6: ("controller", "bool"),
                           7: ("blockOwnerDeletion", "bool")}
OBJECT_META: Schema = {
    1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
    5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
    11: ("labels", "map"), 12: ("annotations", "map"), 13: ("ownerReferences", ("list", OWNER_REFERENCE)),
    14: ("finalizers", "strings"),
}
OBJECT_REFERENCE: Schema = {1: ("kind", "string"), 2: ("namespace", "string"), 3: ("name", "string"),
                            4: ("uid", "string"), 5: ("apiVersion", "string")}
LOCAL_REFERENCE: Schema = {1: ("name", "string")}

KINDS: dict[str, Schema] = {
    "ConfigMap": {1: ("metadata", OBJECT_META), 2: ("data", "map"), 3: ("binaryData", "bytesmap"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", OBJECT_META), 2: ("data", "bytesmap"), 3: ("type", "string"),
               4: ("stringData", "map"), 5: ("immutable", "bool")},
    "Namespace": {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", "strings")})},
    "ServiceAccount": {1: ("metadata", OBJECT_META), 2: ("secrets", ("list", OBJECT_REFERENCE)),
                       3: ("imagePullSecrets", ("list", LOCAL_REFERENCE)),
                       4: ("automountServiceAccountToken", "bool")},
}
UNKNOWN: Schema = {1: ("typeMeta", {1: ("apiVersion", "string"), 2: ("kind", "string")}), 2: ("raw", "bytes"),
                   3: ("contentEncoding", "string"), 4: ("contentType", "string")}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos:pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if kind == "string":
            obj[name] = bytes(value).decode() if isinstance(value, bytes) else str(value)
        elif kind == "bytes":
            obj[name] = value
        elif kind == "bool":
            obj[name] = bool(value)
        elif kind == "int":
            obj[name] = int(value) if isinstance(value, int) else 0
        elif kind == "strings":
            obj.setdefault(name, []).append(bytes(value).decode())
        elif kind in ("map", "bytesmap"):
            entry = dict(_fields(value)) if isinstance(value, bytes) else {}
            key = bytes(entry.get(1, b"")).decode()
            raw = bytes(entry.get(2, b""))
            obj.setdefault(name, {})[key] = base64.b64encode(raw).decode() if kind == "bytesmap" else raw.decode()
        elif isinstance(kind, tuple):
            obj.setdefault(name, []).append(_message(value, kind[1]))  # type: ignore[arg-type]
        elif isinstance(kind, dict):
            obj[name] = _message(value, kind)  # type: ignore[arg-type]
    return obj


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object of a supported kind."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("the protobuf body lacks the k8s\\0 envelope")
    try:
        unknown = _message(body[len(MAGIC):], UNKNOWN)
        type_meta = unknown.get("typeMeta") or {}
        kind = type_meta.get("kind", "")
        schema = KINDS.get(kind)
        if schema is None:
            raise errors.unsupported_media_type(
                f"the kto local cluster decodes protobuf only for {', '.join(sorted(KINDS))}, not {kind or 'this kind'}; "
                "send application/json"
            )
        obj = _message(unknown.get("raw", b""), schema)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"the protobuf body could not be decoded: {exc}") from None
    obj["apiVersion"] = type_meta.get("apiVersion", "v1")
    obj["kind"] = kind
    return obj
