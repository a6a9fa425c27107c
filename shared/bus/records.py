"""The versioned envelope of every record on ``kto.jobs``: pure pydantic, no I/O.

In: records built by services (observations of Kubernetes objects, decisions of
the reconciler and status workers), or the bytes of a Kafka record value.
Out: :func:`encode` → JSON bytes for the wire, never more than
:data:`MAX_RECORD_BYTES`, with no literal value from a spec (env values, commands
and args, Secret values, ``kubectl apply``'s copy of the object) nor a command's
output beyond a masked tail (:func:`redact`: keyed digests, so equal values stay
comparable) and an object too large or too deep to carry replaced by a
stand-in (:func:`fit`); :func:`decode` → a typed :data:`Record` (an
:class:`Observation` or a :class:`Decision`), or :class:`MalformedRecord`
saying why the bytes are not a valid envelope — whatever the bytes are.

Every record carries the job key it is about; the key is also the Kafka record
key, so all records of one job land in one partition, in order.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeAlias

import pydantic

from shared.api import limits

SCHEMA_VERSION: Literal[1] = 1
"""The envelope version this code writes and reads. A reader rejects any other."""

MAX_RECORD_BYTES = 1_000_000
"""Largest record value kto writes or reads. Kafka's default ``message.max.bytes``
(and aiokafka's ``max_request_size``) is 1 MiB; this leaves room for headers and
batch framing. :func:`decode` refuses a larger value without parsing it."""

MAX_RECORD_DEPTH = 200
"""Deepest nesting :func:`decode` accepts: below pydantic's serialisation limit (255),
so anything decoded can be written again, and far below Python's json limit."""

MAX_DECISION_MESSAGE = 16 * 1024
"""Characters of a Decision's message kept when the record would be too large."""

REDACTED = "<redacted by kto>"
"""What a literal value from a spec is replaced with on the wire when no digest key is
configured (:func:`digest`)."""

DIGEST_PREFIX = "kto-digest:"
"""How a digest on the wire begins (:func:`digest`)."""

DIGEST_HEX = 24
"""Hex digits of HMAC-SHA256 a digest keeps (96 bits: equal values match, none collide by chance)."""

DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
"""Annotations never written: ``kubectl apply``'s copy of the object, literal values and all."""

COMMAND_MESSAGES: frozenset[tuple[str, str | None]] = frozenset({
    ("launcher_exec", None),  # the message is the command run in the launcher
    ("step", "script-run"),  # the message is a scaler's script, its env values exported
})
"""(action, reason) of Decisions whose message is a command: digested, as :data:`DIGESTED_DETAIL`
(``None``: whatever the reason)."""

OUTPUT_MESSAGES = frozenset({"step"})
"""Actions whose message may embed a command's output (a step that failed says why with the
launcher's stderr): :func:`scrub_message` ed. Every other Decision's message is :func:`mask` ed."""

DIGESTED_DETAIL = ("script", "command")
"""Keys, at any depth of a Decision's detail, whose string (or strings) are digested."""

OUTPUT_DETAIL = ("output", "stdout", "stderr")
"""Keys, at any depth of a Decision's detail, whose string is a command's output: only its
masked :func:`tail` is written."""

OUTPUT_TAIL = 256
"""Characters of a command's output a Decision keeps (its end: where a failure says why)."""

MESSAGE_KEEP = 1024
"""Characters of a message that may embed a command's output (:data:`OUTPUT_MESSAGES`, and
``message`` keys inside a Decision's detail: the conditions of a status it plans) kept whole;
a longer one is cut in the middle (:func:`scrub_message`)."""

MASK = "<masked>"
"""What :func:`mask` writes in place of what looks like a secret in free text."""

_COMMAND_FIELDS = ("command", "args")
_DIGEST = re.compile(re.escape(DIGEST_PREFIX) + f"[0-9a-f]{{{DIGEST_HEX}}}")
_ASSIGNMENT = re.compile(r"(?<![\w.])([A-Za-z_][\w.-]*)=(\"(?:[^\"\\]|\\.)*\"?|'[^']*'?|[^\s'\"]+)")
_SCHEME = re.compile(r"\b(Bearer|Basic|bearer|basic|BEARER|BASIC)\s+[^\s'\"]+")
_TOKEN = re.compile(r"[A-Za-z0-9+/_-]{20,}=*")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
_CUT = re.compile(r"\[kto: \d+ characters cut\] ")
_DROP = object()
"""An edit that removes the key (:func:`_replaced`)."""

_OBJECT_KEYS = frozenset({"kind", "metadata", "managedFields", "env", *_COMMAND_FIELDS})
"""Keys of an object's node that :func:`_redacted` looks at (``managedFields``: a metadata's, dropped
whole, never walked into); a node without any is only walked through."""
_DETAIL_KEYS = _OBJECT_KEYS | {*DIGESTED_DETAIL, *OUTPUT_DETAIL, "message"}
"""The same in a Decision's detail."""

_STAND_IN_METADATA = (
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "labels", "ownerReferences", "finalizers",
)

_ID_NAMESPACE = uuid.UUID("6f0c4b8e-3c1e-4c55-9a3a-6b1f0d1c2a77")


class InvalidJobKey(ValueError):
    """A string is not a ``cluster/namespace/kind/name`` job key. Not retriable."""


class MalformedRecord(ValueError):
    """Bytes that are not a valid kto envelope (bad JSON, unknown schema_version,
    missing or wrong field). Not retriable: the record goes to the dead-letter topic."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class JobKey(pydantic.BaseModel):
    """Identity of a training job across clusters: ``cluster/namespace/kind/name``."""

    model_config = pydantic.ConfigDict(frozen=True)

    cluster: str
    """Name of the cluster the job lives in (as configured for its watcher)."""
    namespace: str
    kind: str
    """Job kind, e.g. ``PyTorchJob``."""
    name: str

    @pydantic.field_validator("cluster", "namespace", "kind", "name")
    @classmethod
    def _one_segment(cls, value: str) -> str:
        if not value or "/" in value or value != value.strip():
            raise ValueError(f"{value!r} must be non-empty, without '/' or surrounding spaces")
        return value

    @classmethod
    def parse(cls, text: str) -> JobKey:
        """Parse ``cluster/namespace/kind/name``; :class:`InvalidJobKey` if it is not one."""
        parts = text.split("/")
        if len(parts) != 4 or not all(parts) or any(p != p.strip() for p in parts):
            raise InvalidJobKey(
                f"job key {text!r} is not cluster/namespace/kind/name (4 non-empty parts)"
            )
        cluster, namespace, kind, name = parts
        return cls(cluster=cluster, namespace=namespace, kind=kind, name=name)

    def __str__(self) -> str:
        return f"{self.cluster}/{self.namespace}/{self.kind}/{self.name}"


def deterministic_id(*parts: str) -> str:
    """A record id derived from ``parts`` (uuid5 hex), for a producer that may
    publish the same fact twice and wants the copies removed as duplicates."""
    return uuid.uuid5(_ID_NAMESPACE, "\x1f".join(parts)).hex


def _new_id() -> str:
    return uuid.uuid4().hex


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class _Envelope(pydantic.BaseModel):
    """Fields every record carries, whatever its type."""

    # Unknown fields are ignored so a newer writer can add optional fields
    # within one schema_version; a breaking change bumps schema_version.
    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = SCHEMA_VERSION
    """Envelope version; readers reject versions they do not know."""
    id: str = pydantic.Field(default_factory=_new_id, min_length=1)
    """Unique record id: uuid4 hex, or :func:`deterministic_id` when the producer
    wants repeats of one fact to be deduplicated."""
    key: str
    """The job key ``cluster/namespace/kind/name``; also the Kafka record key."""
    resource_version: str = ""
    """Kubernetes resourceVersion of the object observed (or acted on); "" if none."""
    observed_at: datetime.datetime = pydantic.Field(default_factory=_now)
    """When the fact was observed or decided; RFC3339 UTC on the wire."""
    source: str = ""
    """Service that produced the record (watcher, reconciler, status…); stamped by
    the publisher when left empty."""
    instance: str = ""
    """Process instance id of the producer; stamped by the publisher when left empty."""

    @pydantic.field_validator("key")
    @classmethod
    def _valid_key(cls, value: str) -> str:
        JobKey.parse(value)
        value.encode()  # a lone surrogate could not be a Kafka key again
        return value

    @pydantic.field_validator("observed_at")
    @classmethod
    def _utc(cls, value: datetime.datetime) -> datetime.datetime:
        if value.tzinfo is None:
            raise ValueError("observed_at needs a time zone (RFC3339)")
        return value.astimezone(datetime.UTC)

    @pydantic.field_serializer("observed_at")
    def _rfc3339(self, value: datetime.datetime) -> str:
        return value.astimezone(datetime.UTC).isoformat(timespec="microseconds").replace(
            "+00:00", "Z"
        )

    @property
    def job_key(self) -> JobKey:
        return JobKey.parse(self.key)


ObservationEvent: TypeAlias = Literal["ADDED", "MODIFIED", "DELETED", "RESYNCED"]


class Observation(_Envelope):
    """A Kubernetes object related to the job was added, modified, deleted, or
    re-sent by a periodic resync (RESYNCED), with the object as seen."""

    type: Literal["observation"] = "observation"
    object_kind: str
    """Kind of the object: PyTorchJob, TFJob…, Pod, Service, ConfigMap, PodGroup…"""
    event: ObservationEvent
    object: dict[str, Any]
    """The object as returned by the API server (lossless JSON), but for what
    :attr:`redacted` and :attr:`omitted` say."""
    redacted: list[str] = pydantic.Field(default_factory=list)
    """Field paths replaced (by a digest or :data:`REDACTED`) or dropped when written: literal
    env values, command and args strings, a Secret's values, ``metadata.managedFields`` and
    :data:`DROPPED_ANNOTATIONS` (see :func:`redact_object`). A worker that needs them reads
    the object from the API server."""
    omitted: str = ""
    """Non-empty when the object was too large or too deep for a record: why. The
    ``object`` is then a stand-in holding only apiVersion, kind, metadata (without
    annotations) and status; the whole object is on the API server."""
    projection: int = 0
    """0: the object as the API server returned it (but for :attr:`redacted` and :attr:`omitted`);
    N: its kind's projection, version N of :mod:`shared.api.projections` (only the fields kto
    reads: a pod without its containers' specs, say). Written only when not 0, so a record
    of a kind kept whole, and every record written before projections, reads as whole."""


WAKE_ACTION = "cluster_wait_released"
"""The record a worker leaves on a job's key when it lets go of the key's records after
waiting for its cluster (:func:`shared.workers.waiting_for_clusters`): taken in again, it
settles the key anew, in the group of the service that wrote it (``source``)."""


WELL_KNOWN_ACTIONS: tuple[str, ...] = (
    "child_created",
    "child_deleted",
    "child_create_failed",
    "child_delete_failed",
    "replica_restarted",
    "job_created",
    "job_running",
    "job_restarting",
    "job_failed",
    "job_succeeded",
    "job_suspended",
    "job_resumed",
    "job_validation_failed",
    "status_written",
    "job_deleted_ttl",
    "timer_fired",
    "job_check_due",
    "child_updated",
    WAKE_ACTION,
)
"""Actions the services publish today. ``Decision.action`` stays an open string so
a newer service can add one without breaking older readers."""


class Decision(_Envelope):
    """Something a kto worker decided or did about the job (an audit-log entry)."""

    type: Literal["decision"] = "decision"
    action: str = pydantic.Field(min_length=1)
    """What was decided; one of :data:`WELL_KNOWN_ACTIONS` or a newer value."""
    child_kind: str | None = None
    """Kind of the child acted on (Pod, Service, ConfigMap, PodGroup), if any."""
    child_name: str | None = None
    """Name of the child acted on, if any."""
    reason: str = ""
    """CamelCase machine reason, as in Kubernetes conditions (e.g. BackoffLimitExceeded)."""
    message: str = ""
    """Human-readable explanation."""
    detail: dict[str, Any] = pydantic.Field(default_factory=dict)
    """Action-specific data (replica type and index, exit code, API error…)."""


Record: TypeAlias = Annotated[Observation | Decision, pydantic.Field(discriminator="type")]
"""Any record on the jobs topic, discriminated by ``type``."""

_RECORD: pydantic.TypeAdapter[Observation | Decision] = pydantic.TypeAdapter(Record)


TYPE_HEADER = "kto-type"
"""Kafka header naming what a record is, so a consumer can pass over records it
does not need without decoding them: ``observation:<object kind>`` or
``decision:<action>`` (see :func:`type_tag`)."""


def type_tag(record: Observation | Decision) -> str:
    """The :data:`TYPE_HEADER` value of ``record``."""
    if isinstance(record, Observation):
        return f"observation:{record.object_kind}"
    return f"decision:{record.action}"


def type_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The :data:`TYPE_HEADER` value among Kafka headers, if there is one."""
    for name, value in headers or ():
        if name == TYPE_HEADER and value is not None:
            return value.decode(errors="replace")
    return None


def encode(record: Observation | Decision, digest_key: bytes = b"") -> bytes:
    """The record as compact UTF-8 JSON, redacted (:func:`redact`, values replaced by
    their digest under ``digest_key``, or by :data:`REDACTED` without one) and made to
    fit (:func:`fit`): at most :data:`MAX_RECORD_BYTES`. Never raises for a record
    built from JSON-shaped values."""
    return fit(redact(record, digest_key))


def _dump(record: Observation | Decision) -> bytes:
    if isinstance(record, Observation):
        empty = {name for name in ("redacted", "omitted", "projection") if not getattr(record, name)}
        if empty:
            return record.model_dump_json(exclude=empty).encode()
    return record.model_dump_json().encode()


# --- what never reaches the log ---------------------------------------------------------


def digest(value: str, digest_key: bytes = b"") -> str:
    """What a literal ``value`` becomes on the wire: :data:`DIGEST_PREFIX` and the first
    :data:`DIGEST_HEX` hex digits of HMAC-SHA256(``digest_key``, value), so equal values
    stay equal (``kto replay``, a reader comparing two versions) and none can be read back
    or guessed without the key; :data:`REDACTED` when no key is configured."""
    if not digest_key:
        return REDACTED
    mac = hmac.new(digest_key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return DIGEST_PREFIX + mac.hexdigest()[:DIGEST_HEX]


def is_replaced(value: Any) -> bool:
    """Whether ``value`` is already what :func:`digest` writes (a digest or :data:`REDACTED`)."""
    return isinstance(value, str) and (value == REDACTED or _DIGEST.fullmatch(value) is not None)


def forget_digests(value: Any) -> Any:
    """``value`` (JSON-shaped) with every digest read as :data:`REDACTED`: what a reader without
    the digest key compares (``kto replay``), whichever key wrote it."""
    if isinstance(value, str):
        return REDACTED if _DIGEST.fullmatch(value) else value
    if isinstance(value, dict):
        return {k: forget_digests(v) for k, v in value.items()}
    if isinstance(value, list):
        return [forget_digests(v) for v in value]
    return value


def mask(text: str) -> str:
    """``text`` with whatever looks like a secret masked as :data:`MASK`: the value of every
    ``NAME=value`` (quoted or not), what follows ``Bearer`` / ``Basic``, and every long
    token (mixed-case letters with digits, as base64 and JWTs are; or 32+ hex digits).
    Kubernetes names (lower case) and kto's own words stay. Masking twice changes nothing."""
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={MASK}", text)
    text = _SCHEME.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return _TOKEN.sub(lambda m: MASK if _looks_like_token(m.group(0)) else m.group(0), text)


def _looks_like_token(word: str) -> bool:
    if _HEX.fullmatch(word):
        return True
    return (any(c.isupper() for c in word) and any(c.islower() for c in word)
            and any(c.isdigit() for c in word))


def tail(output: str) -> str:
    """What a command's ``output`` becomes on the wire: :func:`mask` ed, and only its last
    :data:`OUTPUT_TAIL` characters, after a mark saying how many came before. Idempotent."""
    masked = mask(output)
    cut = _CUT.match(masked)
    if cut is not None and len(masked) - cut.end() <= OUTPUT_TAIL:
        return masked
    if len(masked) <= OUTPUT_TAIL:
        return masked
    return f"[kto: {len(masked) - OUTPUT_TAIL} characters cut] {masked[-OUTPUT_TAIL:]}"


def was_cut(output: Any) -> bool:
    """Whether an output on the wire is a :func:`tail` that lost its beginning."""
    return isinstance(output, str) and _CUT.match(output) is not None


def scrub_message(message: str) -> str:
    """A message on the wire: :func:`mask` ed; one longer than :data:`MESSAGE_KEEP` (a command's
    output embedded in it) keeps its first half and its last :data:`OUTPUT_TAIL` characters.
    Idempotent."""
    masked = mask(message)
    if len(masked) <= MESSAGE_KEEP:
        return masked
    head = masked[:MESSAGE_KEEP // 2]
    return f"{head} [kto: {len(masked) - len(head) - OUTPUT_TAIL} characters cut] {masked[-OUTPUT_TAIL:]}"


def redact(record: Observation | Decision, digest_key: bytes = b"") -> Observation | Decision:
    """``record`` as it may be written (:func:`redact_object` for what each rule replaces):
    an Observation's object with the paths replaced or dropped listed in ``redacted`` (a
    worker that needs them reads the object from the API server); a Decision's detail —
    the objects its basis carries, its plan, the commands and outputs it names — and its
    message. The record given is left alone (only the containers on the way to a replaced
    value are copied)."""
    if isinstance(record, Decision):
        return _redact_decision(record, digest_key)
    obj, paths = redact_object(record.object, digest_key)
    if not paths:
        return record
    return record.model_copy(update={"object": obj, "redacted": sorted({*record.redacted, *paths})})


def _redact_decision(record: Decision, digest_key: bytes) -> Decision:
    update: dict[str, Any] = {}
    detail, paths = _redacted(record.detail, digest_key, decision=True)
    if paths:
        update["detail"] = detail
    if (record.action, None) in COMMAND_MESSAGES or (record.action, record.reason) in COMMAND_MESSAGES:
        message = record.message if is_replaced(record.message) or not record.message else digest(
            record.message, digest_key)
    elif record.action in OUTPUT_MESSAGES:
        message = scrub_message(record.message)
    else:
        message = mask(record.message)
    if message != record.message:
        update["message"] = message
    return record.model_copy(update=update) if update else record


def redact_detail(detail: dict[str, Any], digest_key: bytes = b"") -> dict[str, Any]:
    """A Decision's ``detail`` as it may be written (see :func:`redact`)."""
    return _redacted(detail, digest_key, decision=True)[0]


def same_command(recorded: Sequence[str], asked: Sequence[str]) -> bool:
    """Whether a command as the log holds it (its strings digested) can be ``asked``: as long,
    each string equal or replaced (without the digest key any replaced string may be any)."""
    return len(recorded) == len(asked) and all(r == a or is_replaced(r) for r, a in zip(recorded, asked))


def redact_object(obj: dict[str, Any], digest_key: bytes = b"") -> tuple[dict[str, Any], list[str]]:
    """``obj`` as it may be written, and the field paths replaced or dropped:

    * ``metadata.managedFields`` and the annotation :data:`DROPPED_ANNOTATIONS` (``kubectl
      apply``'s copy of the object as applied, env values and all) are dropped;
    * the literal ``value`` of every env var (whatever its name; ``valueFrom`` stays), and
      every string of a ``command`` or ``args`` (containers, init and ephemeral containers,
      probes and hooks, at any depth: pod templates inside jobs, pods) are replaced by
      :func:`digest`;
    * so is every value of a Secret's ``data`` and ``stringData`` (its keys stay, which is
      all a decision looks at).

    Empty strings stay (they say nothing), and so do values already replaced."""
    return _redacted(obj, digest_key, decision=False)


def _redacted(obj: dict[str, Any], digest_key: bytes, *, decision: bool) -> tuple[dict[str, Any], list[str]]:
    """The walk behind :func:`redact_object`; ``decision``: ``obj`` is a Decision's detail,
    whose keys :data:`DIGESTED_DETAIL`, :data:`OUTPUT_DETAIL` and ``message`` are redacted
    too, but for the objects it carries (under ``object``: a basis's), which are objects.
    A node is reached by its keys alone; the field path is spelled only for what is changed."""
    edits: list[tuple[list[str | int], Any]] = []
    """(keys, new value or _DROP) of every change."""

    def replace(keys: list[str | int], value: Any) -> None:
        if isinstance(value, str) and value and not is_replaced(value):
            edits.append((keys, digest(value, digest_key)))

    stack: list[tuple[Any, list[str | int], bool]] = [(obj, [], decision)]
    while stack:
        node, keys, in_detail = stack.pop()
        if isinstance(node, list):
            for index, child in enumerate(node):
                if isinstance(child, (dict, list)):
                    stack.append((child, [*keys, index], in_detail))
            continue
        if not isinstance(node, dict):
            continue
        if node.keys().isdisjoint(_DETAIL_KEYS if in_detail else _OBJECT_KEYS):
            # Nothing here to replace (most nodes): only what it holds is looked into.
            for key, child in node.items():
                if isinstance(child, (dict, list)):
                    stack.append((child, [*keys, key], in_detail and key != "object"))
            continue
        handled: set[str] = set()
        if node.get("kind") == "Secret":
            for field in ("data", "stringData"):
                values = node.get(field)
                if isinstance(values, dict):
                    handled.add(field)
                    for name, value in values.items():
                        replace([*keys, field, name], value)
        metadata = node.get("metadata")
        if isinstance(metadata, dict):
            if "managedFields" in metadata:
                edits.append(([*keys, "metadata", "managedFields"], _DROP))
            annotations = metadata.get("annotations")
            if isinstance(annotations, dict):
                for name in DROPPED_ANNOTATIONS:
                    if name in annotations:
                        edits.append(([*keys, "metadata", "annotations", name], _DROP))
        env = node.get("env")
        if isinstance(env, list):
            handled.add("env")
            for index, item in enumerate(env):
                if isinstance(item, dict):
                    replace([*keys, "env", index, "value"], item.get("value"))
                    if isinstance(item.get("valueFrom"), (dict, list)):
                        stack.append((item["valueFrom"], [*keys, "env", index, "valueFrom"], in_detail))
        for field in dict.fromkeys((*_COMMAND_FIELDS, *(DIGESTED_DETAIL if in_detail else ()))):
            value = node.get(field)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                handled.add(field)
                for index, item in enumerate(value):
                    replace([*keys, field, index], item)
            elif isinstance(value, str):
                handled.add(field)
                replace([*keys, field], value)
        if in_detail:
            for field in OUTPUT_DETAIL:
                value = node.get(field)
                if isinstance(value, str) and tail(value) != value:
                    edits.append(([*keys, field], tail(value)))
            value = node.get("message")
            if isinstance(value, str) and scrub_message(value) != value:
                edits.append(([*keys, "message"], scrub_message(value)))
        for key, child in node.items():
            if key in handled or not isinstance(child, (dict, list)):
                continue
            if key == "managedFields" and keys and keys[-1] == "metadata":
                continue  # dropped whole
            # The objects a basis carries (``object``) are redacted as objects, not as detail.
            stack.append((child, [*keys, key], in_detail and key != "object"))
    if not edits:
        return obj, []
    paths: dict[tuple[str | int, ...], str] = {(): ""}
    return _replaced(obj, edits), [_path(tuple(edit_keys), paths) for edit_keys, _ in edits]


def _path(keys: tuple[str | int, ...], paths: dict[tuple[str | int, ...], str]) -> str:
    """The field path of ``keys`` (:func:`shared.api.limits.segment`: ``a.b[0]``; an index is an
    ``int``, any other key is named by its text), its parents' kept in ``paths`` for the next."""
    known = len(keys)
    while keys[:known] not in paths:
        known -= 1
    path = paths[keys[:known]]
    for end in range(known + 1, len(keys) + 1):
        key = keys[end - 1]
        path = paths[keys[:end]] = limits.segment(path, key if type(key) is int else str(key))
    return path


def _replaced(node: dict[str, Any], edits: list[tuple[list[str | int], Any]]) -> dict[str, Any]:
    """A copy of ``node`` with each edit's value at its keys (removed for ``_DROP``), in order;
    each container on the way to an edit is copied once, those off the way are shared."""
    top = node.copy()
    copies = {id(top)}
    for keys, value in edits:
        current: Any = top
        for key in keys[:-1]:
            child = current[key]
            if id(child) not in copies:
                child = current[key] = child.copy()
                copies.add(id(child))
            current = child
        if value is _DROP:
            del current[keys[-1]]
        else:
            current[keys[-1]] = value
    return top


def fit(record: Observation | Decision) -> bytes:
    """``record`` encoded; one too large or too deep to encode loses its bulk instead:
    an Observation carries a stand-in of its object (see :attr:`Observation.omitted`),
    a Decision a shortened message and no detail."""
    failure: Exception | None = None
    try:
        data = _dump(record)
    except Exception as exc:  # e.g. a value pydantic cannot serialise, or nested past its limit
        data, failure = b"", exc
    # The walk that would find an object too deep or an integer too long for decode runs
    # only when the bytes leave room for one (two C scans of the bytes, against a walk of
    # every value: most of what encoding cost).
    why = _unreadable(record.object if isinstance(record, Observation) else record.detail) if (
        failure is not None or not _few_containers(data) or _LONG_DIGITS.search(data)) else ""
    if not why and failure is not None:
        why = f"the object cannot be encoded ({_short(failure)})"
    if not why:
        if len(data) <= MAX_RECORD_BYTES:
            return data
        why = f"the record would be {len(data)} bytes, more than the limit of {MAX_RECORD_BYTES}"
    if isinstance(record, Decision):
        message = record.message if len(record.message) <= MAX_DECISION_MESSAGE else (
            record.message[:MAX_DECISION_MESSAGE] + "…")
        smaller = record.model_copy(update={"message": message, "detail": {"omitted": why}})
        data = smaller.model_dump_json().encode()
        if len(data) <= MAX_RECORD_BYTES:
            return data
        return smaller.model_copy(update={"message": message[:1024]}).model_dump_json().encode()
    obj = record.object
    found_meta = obj.get("metadata")
    meta: dict[str, Any] = found_meta if isinstance(found_meta, dict) else {}
    stand_in: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind") if isinstance(obj.get(k), str)}
    stand_in["metadata"] = {k: meta[k] for k in _STAND_IN_METADATA if k in meta}
    if isinstance(obj.get("status"), dict):
        stand_in["status"] = obj["status"]
    reason = f"{why}; the object is on the API server"
    for attempt in (stand_in, {**stand_in, "status": {}, "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if isinstance(meta.get(k), str)}}):
        if _unreadable(attempt):
            continue
        try:
            data = record.model_copy(
                update={"object": attempt, "omitted": reason, "redacted": []}).model_dump_json().encode()
        except Exception:
            continue
        if len(data) <= MAX_RECORD_BYTES:
            return data
    bare = {k: v for k, v in stand_in.items() if k in ("apiVersion", "kind")}
    return record.model_copy(update={"object": bare, "omitted": reason, "redacted": []}).model_dump_json().encode()


_MAX_INT_BITS = 14_000
"""Integers longer than this (about 4,200 digits) could not be read back (Python's
limit on converting digits is 4,300)."""

_LONG_DIGITS = re.compile(rb"[0-9]{4200}")
"""A run of digits as long as the shortest integer of more than :data:`_MAX_INT_BITS` bits
(4,215 digits) has, with room to spare: JSON bytes without one hold no such integer."""


def _few_containers(data: bytes) -> bool:
    """Whether the JSON ``data`` opens at most :data:`MAX_RECORD_DEPTH` objects and arrays (a
    bracket inside a string counts too): then nothing in it can be nested deeper than the
    limit, and the walk that measures depth is not needed. A C scan of the bytes; a pod's
    record has about a hundred."""
    return data.count(b"{") + data.count(b"[") <= MAX_RECORD_DEPTH


def _unreadable(value: Any) -> str:
    """Why :func:`decode` would refuse ``value`` inside a record (too deep, an integer
    too long), or "". Iterative: any depth is measured."""
    stack: list[tuple[Any, int]] = [(value, 1)]  # the object is one level below the record
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            if isinstance(node, int) and node.bit_length() > _MAX_INT_BITS:
                return "the object holds an integer of more than 4,200 digits"
            continue
        if depth > MAX_RECORD_DEPTH:
            return f"the object is nested more than {MAX_RECORD_DEPTH} levels deep"
        stack.extend((child, depth + 1) for child in children)
    return ""


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:300] + "…"


def decode(data: bytes | None) -> Observation | Decision:
    """Parse a record value; :class:`MalformedRecord` with the reason if it is not
    a valid envelope of a known schema_version."""
    if data is None:
        raise MalformedRecord("empty value (tombstone), not a kto record")
    if len(data) > MAX_RECORD_BYTES:
        raise MalformedRecord(f"{len(data)} bytes, more than the limit of {MAX_RECORD_BYTES}; not parsed")
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedRecord(f"not JSON: {exc}") from None
    except RecursionError:
        raise MalformedRecord("not JSON this reader can parse: nested too deep") from None
    except Exception as exc:  # e.g. an integer of more than 4,300 digits (ValueError)
        raise MalformedRecord(f"not JSON this reader can parse: {_short(exc)}") from None
    deep = None if _few_containers(data) else limits.too_deep(raw, MAX_RECORD_DEPTH)
    if deep is not None:
        raise MalformedRecord(
            f"nested {deep[1]} levels deep at {limits.shorten(deep[0]) or '<record>'}, "
            f"more than the limit of {MAX_RECORD_DEPTH}"
        )
    if not isinstance(raw, dict):
        raise MalformedRecord(f"not a JSON object but {type(raw).__name__}")
    if "schema_version" not in raw:
        raise MalformedRecord("missing schema_version")
    version = raw["schema_version"]
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise MalformedRecord(
            f"unknown schema_version {version!r} (this reader knows {SCHEMA_VERSION})"
        )
    try:
        return _RECORD.validate_python(raw)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<record>'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise MalformedRecord(f"invalid envelope: {problems[:2000]}") from None
    except Exception as exc:
        raise MalformedRecord(f"invalid envelope: {_short(exc)}") from None


def is_wake(record: Observation | Decision, service: str) -> bool:
    """A :data:`WAKE_ACTION` record of ``service``'s workers (the other group passes over it)."""
    return isinstance(record, Decision) and record.action == WAKE_ACTION and record.source == service
