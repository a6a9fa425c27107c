"""Provenance of records: Ed25519 signatures over every record kto writes to the jobs topic.

In: a keyring — one or more JSON files (``KTO_SIGNING_KEYS``, paths separated by commas),
each ``{"keys": [{"id", "role", "public", "private"?, "state"?}, ...], "digest_key"?}`` —
and a record's Kafka key, value and ``kto-type`` header. ``digest_key`` (base64, 32 bytes,
the same in every file that has one) is what every service digests literal values under
on the wire (:func:`shared.bus.records.digest`), so digests of one value agree across
services and ``kto replay`` compares plans without the values.
Out: for a writer, the two headers that sign a record (:data:`KEY_ID_HEADER`,
:data:`SIGNATURE_HEADER`), made with the active private key of the writer's role
(:class:`Signer`); for a reader, a :class:`Verdict` per record: authentic, or why not
(unsigned, unknown key, retired key, bad signature, or a role that may not write what
the record is).

The signature covers the Kafka key (the job key), the type header and the value, each
length-prefixed, so a signed record can be neither moved to another job nor retyped nor
cut. Each service signs with a key of its own role; a reader knows which role a key
belongs to and what each role may write (:data:`ROLES`): only the watcher observes, so a
stolen reconciler key cannot forge a pod's phase. Several keys may be trusted at once, so
keys are rotated without a pause: add a key (``state: trusted``: verified, not yet used
to sign), make it ``active`` (the writer signs with it; the old one becomes ``trusted``),
then mark the old one ``retired`` once the records it signed are read (a record signed with a retired key is no longer acted on, but
``kto history --verify`` still says who signed it). The files are read again when they
change (a mounted Secret is updated in place), at most every :data:`RELOAD_EVERY` seconds.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
import os
import pathlib
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from shared.bus import errors, records

log = logging.getLogger("kto.bus.signing")

ENV = "KTO_SIGNING_KEYS"
"""The environment variable naming the keyring files (comma-separated paths)."""
KEY_ID_HEADER = "kto-kid"
SIGNATURE_HEADER = "kto-sig"
RELOAD_EVERY = 5.0
"""Seconds between looks at the keyring files' modification times."""

State = Literal["trusted", "active", "retired"]
STATES: tuple[State, ...] = ("trusted", "active", "retired")

ROLES: dict[str, str] = {
    "watcher": "observations of job objects and their children",
    "reconciler": "decisions, and the DELETED observation of a job gone while no watcher ran",
    "status": "decisions",
}
"""The roles a key may have (a service's name) and what records each role may write."""

_DOMAIN = b"kto-record-signature-v1\x00"


class KeyringError(errors.BusError):
    """A keyring file that cannot be used: says the file and the field. Not retriable."""


@dataclasses.dataclass(frozen=True)
class Key:
    id: str
    role: str
    public: ed25519.Ed25519PublicKey
    private: ed25519.Ed25519PrivateKey | None
    state: State
    source: str
    """The file the key came from (for messages)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether one record is authentic, and if not why."""

    authentic: bool
    reason: str = ""
    """Why it is not (empty when it is)."""
    code: str = ""
    """The reason in one word, for metrics: unsigned, unknown_key, bad_signature, retired_key, role."""
    key_id: str = ""
    role: str = ""
    """The role of the key that signed it, when the signature is good."""
    retired: bool = False
    """Signed (well) by a key now retired: authentic when written, not acted on today."""


def _b64(raw: str, where: str, size: int) -> bytes:
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise KeyringError(f"{where}: not base64") from None
    if len(data) != size:
        raise KeyringError(f"{where}: {len(data)} bytes, {size} expected")
    return data


def _encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def public_bytes(key: ed25519.Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_bytes(key: ed25519.Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


DIGEST_KEY_BYTES = 32
"""Size of the key literal values are digested under on the wire (:func:`shared.bus.records.digest`)."""


def _parse(path: pathlib.Path, text: str) -> tuple[list[Key], bytes | None]:
    """The keys of one file, and its ``digest_key`` if it has one."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise KeyringError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise KeyringError(f"{path}: must be an object with a list 'keys'")
    digest_key = None
    if document.get("digest_key") is not None:
        if not isinstance(document["digest_key"], str):
            raise KeyringError(f"{path}: digest_key: must be base64 of {DIGEST_KEY_BYTES} bytes")
        digest_key = _b64(document["digest_key"], f"{path}: digest_key", DIGEST_KEY_BYTES)
    found: list[Key] = []
    for index, entry in enumerate(document["keys"]):
        where = f"{path}: keys[{index}]"
        if not isinstance(entry, dict):
            raise KeyringError(f"{where}: must be an object")
        kid, role, state = entry.get("id"), entry.get("role"), entry.get("state", "active")
        if not isinstance(kid, str) or not kid or not kid.isascii() or not kid.isprintable() or len(kid) > 128:
            raise KeyringError(f"{where}.id: must be printable ASCII, 1 to 128 characters")
        if role not in ROLES:
            raise KeyringError(f"{where}.role: {role!r} is not one of {', '.join(ROLES)}")
        if state not in STATES:
            raise KeyringError(f"{where}.state: {state!r} is not one of {', '.join(STATES)}")
        if not isinstance(entry.get("public"), str):
            raise KeyringError(f"{where}.public: required (base64 of the 32-byte Ed25519 public key)")
        public = ed25519.Ed25519PublicKey.from_public_bytes(_b64(entry["public"], f"{where}.public", 32))
        private = None
        if entry.get("private") is not None:
            if not isinstance(entry["private"], str):
                raise KeyringError(f"{where}.private: must be base64 of the 32-byte Ed25519 private key")
            private = ed25519.Ed25519PrivateKey.from_private_bytes(_b64(entry["private"], f"{where}.private", 32))
            if public_bytes(private.public_key()) != public_bytes(public):
                raise KeyringError(f"{where}.private: does not belong to the public key given")
        found.append(Key(kid, role, public, private, state, str(path)))
    return found, digest_key


def _merge(keys: Sequence[Key]) -> dict[str, Key]:
    merged: dict[str, Key] = {}
    for key in keys:
        known = merged.get(key.id)
        if known is not None:
            if public_bytes(known.public) != public_bytes(key.public) or known.role != key.role:
                raise KeyringError(f"{key.source}: key {key.id!r} is also in {known.source} with another "
                                   f"public key or role")
            # The same key in a public file and a private one: keep the private part, the later state.
            key = dataclasses.replace(key, private=key.private or known.private)
        merged[key.id] = key
    return merged


def signed_bytes(job_key: bytes, type_tag: bytes, value: bytes) -> bytes:
    """What a signature covers: the job key, the type header and the value, length-prefixed."""
    return b"".join((_DOMAIN, struct.pack(">I", len(job_key)), job_key, struct.pack(">I", len(type_tag)),
                     type_tag, value))


def _header(headers: Sequence[tuple[str, bytes]] | None, name: str) -> bytes | None:
    for header, value in headers or ():
        if header == name:
            return value
    return None


class Keyring:
    """The trusted keys (and private keys this process may sign with), read from files."""

    def __init__(self, paths: Sequence[pathlib.Path]) -> None:
        if not paths:
            raise KeyringError(f"{ENV}: no keyring file named")
        self._paths = tuple(paths)
        self._stamps = self._stat()
        self._keys, self._digest_key = self._read()
        self._checked = time.monotonic()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Keyring | None:
        """The keyring ``KTO_SIGNING_KEYS`` names, or None when it is unset or empty."""
        raw = (os.environ if environ is None else environ).get(ENV, "").strip()
        if not raw:
            return None
        return cls([pathlib.Path(part.strip()) for part in raw.split(",") if part.strip()])

    @property
    def paths(self) -> tuple[pathlib.Path, ...]:
        return self._paths

    def _stat(self) -> tuple[tuple[int, int], ...]:
        stamps = []
        for path in self._paths:
            try:
                st = path.stat()
            except OSError as exc:
                raise KeyringError(f"keyring {path}: {exc.strerror or exc}") from None
            stamps.append((st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def _read(self) -> tuple[dict[str, Key], bytes]:
        keys: list[Key] = []
        digests: dict[bytes, pathlib.Path] = {}
        for path in self._paths:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise KeyringError(f"keyring {path}: {getattr(exc, 'strerror', None) or exc}") from None
            found, digest_key = _parse(path, text)
            keys.extend(found)
            if digest_key is not None:
                digests.setdefault(digest_key, path)
        if len(digests) > 1:
            raise KeyringError(f"{' and '.join(str(p) for p in digests.values())}: different digest_key values; "
                               f"every service must digest alike")
        return _merge(keys), next(iter(digests), b"")

    def refresh(self) -> None:
        """Read the files again if they changed (at most every :data:`RELOAD_EVERY` s). A file
        that became unreadable or invalid leaves the keys as they were, and says so."""
        now = time.monotonic()
        if now - self._checked < RELOAD_EVERY:
            return
        self._checked = now
        try:
            stamps = self._stat()
            if stamps == self._stamps:
                return
            keys, digest_key = self._read()
        except KeyringError as exc:
            log.error("keyring not reloaded, the keys read before stay in use: %s", exc)
            return
        if digest_key != self._digest_key:
            log.error("keyring %s: its digest_key changed; the one read at start stays in use (restart the "
                      "service to take the new one, or digests on the log stop matching)", self._paths[0])
        self._stamps, self._keys = stamps, keys
        log.info("keyring reloaded: %d keys", len(keys))

    def keys(self) -> dict[str, Key]:
        return dict(self._keys)

    @property
    def digest_key(self) -> bytes:
        """The key literal values are digested under on the wire (b"" when no file has one: they
        are then replaced by a plain marker)."""
        return self._digest_key

    def signer(self, role: str) -> Signer:
        """The signer of a service of ``role``: the role's active key with a private part;
        :class:`KeyringError` when there is none, or more than one."""
        return Signer(self, role)

    def active_private(self, role: str) -> Key:
        active = [k for k in self._keys.values() if k.role == role and k.state == "active" and k.private]
        if len(active) != 1:
            files = ", ".join(str(p) for p in self._paths)
            what = "no" if not active else f"{len(active)}"
            raise KeyringError(f"{ENV} ({files}): {what} active key with a private part for role {role!r}; "
                               f"a {role} signs with exactly one")
        return active[0]

    def verify(self, job_key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes]] | None) -> Verdict:
        """Whether the record's signature is good and its key trusted (not what the key's role may write:
        see :func:`permits`)."""
        self.refresh()
        kid_raw, signature = _header(headers, KEY_ID_HEADER), _header(headers, SIGNATURE_HEADER)
        if kid_raw is None or signature is None:
            return Verdict(False, "unsigned: no kto-kid / kto-sig header", "unsigned")
        kid = kid_raw.decode(errors="replace")
        key = self._keys.get(kid)
        if key is None:
            return Verdict(False, f"signed with an unknown key {kid[:128]!r}", "unknown_key", kid[:128])
        type_tag = _header(headers, "kto-type") or b""
        try:
            key.public.verify(signature, signed_bytes(job_key or b"", type_tag, value or b""))
        except InvalidSignature:
            return Verdict(False, f"bad signature (key {kid!r}): the record was altered, cut or forged", "bad_signature",
                           kid)
        if key.state == "retired":
            return Verdict(False, f"signed with the retired key {kid!r}", "retired_key", kid, key.role, retired=True)
        return Verdict(True, "", "", kid, key.role)


class Signer:
    """Signs records with the active key of one role (the key is looked up at each signature,
    so an activated key is used once the files are read again)."""

    def __init__(self, keyring: Keyring, role: str) -> None:
        if role not in ROLES:
            raise KeyringError(f"no signing role {role!r}: one of {', '.join(ROLES)}")
        self._keyring = keyring
        self._role = role
        keyring.active_private(role)  # fail at start, not at the first record

    @property
    def role(self) -> str:
        return self._role

    def headers(self, job_key: bytes, type_tag: bytes, value: bytes) -> list[tuple[str, bytes]]:
        self._keyring.refresh()
        key = self._keyring.active_private(self._role)
        assert key.private is not None
        signature = key.private.sign(signed_bytes(job_key, type_tag, value))
        return [(KEY_ID_HEADER, key.id.encode()), (SIGNATURE_HEADER, signature)]


def permits(role: str, record: records.Record, type_tag: bytes | None) -> str:
    """Why a key of ``role`` may not have written ``record`` (a decoded
    :class:`~shared.bus.records.Observation` or ``Decision``), or "" when it may."""
    if type_tag is not None and type_tag.decode(errors="replace") != records.type_tag(record):
        return "the kto-type header does not match the record"
    if record.source != role:
        return f"a {role} key signed a record whose source is {record.source[:64]!r}"
    if isinstance(record, records.Observation):
        if role == "watcher" or role == "reconciler" and record.event == "DELETED":
            return ""
        return f"a {role} may not write observations ({ROLES[role]} only)"
    if role == "watcher":
        return "a watcher may not write decisions (observations only)"
    return ""


def new_key(kid: str, role: str, state: State = "active") -> dict[str, str]:
    """A new keyring entry: an Ed25519 key pair of ``role``."""
    if role not in ROLES:
        raise KeyringError(f"no role {role!r}: one of {', '.join(ROLES)}")
    private = ed25519.Ed25519PrivateKey.generate()
    return {"id": kid, "role": role, "state": state, "public": _encode(public_bytes(private.public_key())),
            "private": _encode(private_bytes(private))}


def write_keyring(path: pathlib.Path, entries: Sequence[Mapping[str, Any]], digest_key: str | None = None) -> None:
    """Write a keyring file (``digest_key``: base64, kept as given), readable by its owner only (it holds
    private keys, or the digest key)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    document: dict[str, Any] = {"keys": list(entries)}
    if digest_key is not None:
        document["digest_key"] = digest_key
    text = json.dumps(document, indent=2) + "\n"
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(partial, path)


def new_keyring(path: pathlib.Path, stamp: str) -> None:
    """A keyring with one active key per role (``<role>-<stamp>``) and a digest key."""
    write_keyring(path, [new_key(f"{role}-{stamp}", role) for role in ROLES],
                  _encode(os.urandom(DIGEST_KEY_BYTES)))
