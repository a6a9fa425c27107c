"""Kafka connection and topic settings for every kto service.

In: the process environment (``KTO_KAFKA_*``), read once at start-up by a command.
Out: one frozen :class:`KafkaSettings` passed down explicitly to publishers,
consumers, readers and :func:`shared.bus.topics.ensure_topics`, plus
:func:`client_options`, the aiokafka keyword arguments those clients share.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aiokafka.helpers import create_ssl_context

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Values accepted for ``security_protocol`` (Kafka's names)."""

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""SASL mechanisms that authenticate with a user name and password."""

ENV_PREFIX = "KTO_KAFKA_"


class SettingsError(ValueError):
    """A setting (or the ``KTO_KAFKA_*`` variable behind it) holds a value kto cannot use.

    Not retriable: the message names the field or the variable to fix.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        self.message = message
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


@dataclasses.dataclass(frozen=True)
class KafkaSettings:
    """Where the bus is and how to talk to it. Each field has the env var that sets it."""

    bootstrap: str = "localhost:9092"
    """``KTO_KAFKA_BOOTSTRAP``: comma-separated ``host:port`` list of brokers to bootstrap from."""

    security_protocol: str = "PLAINTEXT"
    """``KTO_KAFKA_SECURITY_PROTOCOL``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""

    sasl_mechanism: str = "PLAIN"
    """``KTO_KAFKA_SASL_MECHANISM``: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* protocols only)."""

    sasl_username: str | None = None
    """``KTO_KAFKA_SASL_USERNAME``: SASL user; required with SASL_PLAINTEXT / SASL_SSL."""

    sasl_password: str | None = dataclasses.field(default=None, repr=False)
    """``KTO_KAFKA_SASL_PASSWORD``: SASL password; with SASL_PLAINTEXT / SASL_SSL this or
    ``sasl_password_file`` is required."""

    sasl_password_file: str | None = None
    """``KTO_KAFKA_SASL_PASSWORD_FILE``: a file holding the SASL password (a mounted Secret's
    key, such as the ``password`` of a Strimzi KafkaUser's Secret; one trailing newline is
    dropped). Read again each time a client is made, so a rotated Secret is used by the next
    connection; never copied into a child's environment. Not with ``sasl_password``."""

    ssl_cafile: str | None = None
    """``KTO_KAFKA_SSL_CAFILE``: PEM bundle of CAs that sign the brokers' certificates
    (SSL / SASL_SSL; unset → the system trust store)."""

    ssl_certfile: str | None = None
    """``KTO_KAFKA_SSL_CERTFILE``: PEM client certificate for mutual TLS (SSL / SASL_SSL; its
    subject is the client's principal, e.g. ``CN=kto-watcher``); may hold the key too."""

    ssl_keyfile: str | None = None
    """``KTO_KAFKA_SSL_KEYFILE``: PEM private key of ``ssl_certfile``, unencrypted (a Strimzi
    KafkaUser's ``user.key``)."""

    jobs_topic: str = "kto.jobs"
    """``KTO_KAFKA_JOBS_TOPIC``: the one typed topic keyed by job key."""

    dlq_topic: str = "kto.dlq"
    """``KTO_KAFKA_DLQ_TOPIC``: dead-letter topic for records that cannot be processed."""

    partitions: int = 16
    """``KTO_KAFKA_PARTITIONS``: partitions of the topics kto creates (the most
    consumers of one group that can work at once)."""

    replication_factor: int = 1
    """``KTO_KAFKA_REPLICATION_FACTOR``: replication of the topics kto creates
    (use 3 on a production cluster)."""

    retention_ms: int = 90 * 24 * 3600 * 1000
    """``KTO_KAFKA_RETENTION_MS``: how long the topics kto creates keep records — the
    audit log's horizon (``kto history``, ``kto replay``); default 90 days, ``-1`` keeps
    them for ever. Records are deleted, never compacted: compaction would keep only
    the last record of each job key. Archive older windows with ``kto export``."""

    segment_ms: int = 24 * 3600 * 1000
    """``KTO_KAFKA_SEGMENT_MS``: how often a partition rolls a new segment (retention
    deletes whole segments, so records live up to this much longer than the retention)."""

    client_id: str = "kto"
    """``KTO_KAFKA_CLIENT_ID``: client id sent to the broker (shows in its logs and quotas)."""

    session_timeout_ms: int = 10_000
    """``KTO_KAFKA_SESSION_TIMEOUT_MS``: a consumer silent this long is dropped from its group."""

    heartbeat_interval_ms: int = 3_000
    """``KTO_KAFKA_HEARTBEAT_INTERVAL_MS``: how often a consumer heartbeats; also how
    soon it notices a rebalance. Must be below ``session_timeout_ms``."""

    linger_ms: int = 0
    """``KTO_KAFKA_LINGER_MS``: how long the producer waits to batch records. 0 by
    default: every service awaits its sends one by one per job key, so a linger
    is paid on each of them (5 ms capped the watcher at ~150 records/s);
    records sent while a request is in flight are batched anyway."""

    compression: str = "zstd"
    """``KTO_KAFKA_COMPRESSION``: how the producer compresses its record batches: ``zstd``
    (default: JSON records shrink several-fold, and both Apache Kafka and Tansu store and serve
    zstd batches as they are), ``lz4``, ``gzip`` or ``none``. Consumers read any of them."""

    fetch_max_wait_ms: int = 500
    """``KTO_KAFKA_FETCH_MAX_WAIT_MS``: how long a consumer's fetch may wait at the broker
    for records. Kafka answers a waiting fetch as soon as records arrive, so the wait costs
    no latency there, and a short one only costs idle fetches (20 ms: about 35 ms of CPU a
    second per idle worker, and the broker's). Tansu does not answer a waiting fetch when
    records arrive: a record waits about a quarter of this there, so :func:`for_tansu`
    makes it :data:`TANSU_FETCH_MAX_WAIT_MS` unless it is set."""

    request_timeout_ms: int = 15_000
    """``KTO_KAFKA_REQUEST_TIMEOUT_MS``: a request unanswered this long fails and is
    retried (how soon a restarted broker is noticed)."""

    idempotence: bool | None = None
    """``KTO_KAFKA_IDEMPOTENCE``: true/false (also 1/0, yes/no), or unset (None). True: the
    producer is idempotent (``acks=all``, a producer id and sequence numbers), so a retried
    send is never written twice, and a broker that grants no producer id fails its start.
    False: it never asks for one. Unset: idempotent where the broker grants a producer id;
    where it refuses InitProducerId (Tansu) the producer runs without, as with false, and
    logs one line saying so. The embedded broker hands out settings with this false, and
    ``kto up`` sets it to false for its children on Tansu."""

    def __post_init__(self) -> None:
        _check(self)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KafkaSettings:
        """Settings from ``KTO_KAFKA_*`` variables; unset ones keep their defaults.

        Raises :class:`SettingsError` naming the variable for a value kto cannot use.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            var = ENV_PREFIX + field.name.upper()
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                continue
            raw = raw.strip()
            if field.type in ("int", int):
                least = {"linger_ms": 0, "retention_ms": -1}.get(field.name, 1)
                values[field.name] = _parse(var, raw, _int_at_least(least))
            elif field.type in ("bool", "bool | None", bool):
                values[field.name] = _parse(var, raw, _boolean)
            elif field.name in ("security_protocol", "sasl_mechanism"):
                values[field.name] = raw.upper()
            else:
                values[field.name] = raw
        try:
            settings = cls(**values)
            _check_unused(settings)
            return settings
        except SettingsError as exc:
            if exc.field is None:
                raise
            raise SettingsError(f"{ENV_PREFIX}{exc.field.upper()}: {exc.message}") from None


    def to_env(self) -> dict[str, str]:
        """The ``KTO_KAFKA_*`` variables that make :meth:`from_env` give these settings back
        (for a child process; unset fields are left out)."""
        env: dict[str, str] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            env[ENV_PREFIX + field.name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
        return env


_T = TypeVar("_T")


def _parse(var: str, raw: str, parse: Callable[[str], _T]) -> _T:
    try:
        return parse(raw)
    except ValueError as exc:
        raise SettingsError(f"{var}={raw!r}: {exc}") from None


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError("not an integer") from None
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    return parse


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _boolean(raw: str) -> bool:
    value = raw.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"not a boolean (use one of {', '.join(_TRUE + _FALSE)})")


def _check(s: KafkaSettings) -> None:
    """Validate a settings value; errors carry (message, field name)."""
    if not s.bootstrap.strip():
        raise SettingsError("must name at least one host:port", "bootstrap")
    for server in s.bootstrap.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SettingsError(f"{server.strip()!r} is not host:port", "bootstrap")
    if s.security_protocol not in SECURITY_PROTOCOLS:
        raise SettingsError(
            f"{s.security_protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}",
            "security_protocol",
        )
    if s.sasl_mechanism not in SASL_MECHANISMS:
        raise SettingsError(
            f"{s.sasl_mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}", "sasl_mechanism"
        )
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "sasl_password_file"):
        path = getattr(s, name)
        if path is not None and not os.path.isfile(path):
            raise SettingsError(f"{path!r} is not a readable file", name)
    if s.sasl_password is not None and s.sasl_password_file is not None:
        raise SettingsError(f"set it or {ENV_PREFIX}SASL_PASSWORD, not both", "sasl_password_file")
    sasl = s.security_protocol.startswith("SASL_")
    if sasl:
        if not s.sasl_username:
            raise SettingsError(f"required with {s.security_protocol}", "sasl_username")
        if s.sasl_password is None and s.sasl_password_file is None:
            raise SettingsError(
                f"required with {s.security_protocol} (or {ENV_PREFIX}SASL_PASSWORD_FILE naming a file that holds it)",
                "sasl_password")
        if s.sasl_password_file is not None:
            sasl_password(s)  # an unreadable or empty file is named now, not at the first connection
    if s.ssl_keyfile and not s.ssl_certfile:
        raise SettingsError("a key needs its certificate (ssl_certfile)", "ssl_keyfile")
    if s.security_protocol.endswith("SSL"):
        ssl_context(s)  # a key that does not fit its certificate is named now, not in a client's start
    for name in ("jobs_topic", "dlq_topic", "client_id"):
        if not getattr(s, name):
            raise SettingsError("must not be empty", name)
    if s.jobs_topic == s.dlq_topic:
        raise SettingsError("must differ from the jobs topic", "dlq_topic")
    for name in ("partitions", "replication_factor", "session_timeout_ms", "heartbeat_interval_ms",
                 "fetch_max_wait_ms", "request_timeout_ms"):
        if getattr(s, name) < 1:
            raise SettingsError("must be at least 1", name)
    if s.linger_ms < 0:
        raise SettingsError("must not be negative", "linger_ms")
    if s.compression not in COMPRESSIONS:
        raise SettingsError(f"must be one of {', '.join(COMPRESSIONS)}", "compression")
    if s.retention_ms != -1 and s.retention_ms < 3_600_000:
        raise SettingsError("must be -1 (for ever) or at least an hour (3600000)", "retention_ms")
    if s.segment_ms < 60_000:
        raise SettingsError("must be at least a minute (60000)", "segment_ms")
    if s.heartbeat_interval_ms >= s.session_timeout_ms:
        raise SettingsError("must be below the session timeout", "heartbeat_interval_ms")
    if s.idempotence is not None and not isinstance(s.idempotence, bool):
        raise SettingsError("must be true, false or unset", "idempotence")


COMPRESSIONS = ("zstd", "lz4", "gzip", "none")
"""The values of ``KafkaSettings.compression``."""


def compression_type(s: KafkaSettings) -> str | None:
    """The producer's ``compression_type`` for the settings (None: uncompressed)."""
    return None if s.compression == "none" else s.compression


def _check_unused(s: KafkaSettings) -> None:
    """Credentials given for a protocol that does not use them: a variable set and the security
    protocol forgotten, which would otherwise show only as a broker that never answers. Checked
    on what the user gave (:meth:`KafkaSettings.from_env`), not on settings a command fitted to
    a local broker (:func:`for_tansu`)."""
    protocol = s.security_protocol
    unused = [] if protocol.startswith("SASL_") else ["sasl_username", "sasl_password", "sasl_password_file"]
    unused += [] if protocol.endswith("SSL") else ["ssl_cafile", "ssl_certfile", "ssl_keyfile"]
    for name in unused:
        if getattr(s, name) is not None:
            needs = "SSL or SASL_SSL" if name.startswith("ssl_") else "SASL_PLAINTEXT or SASL_SSL"
            raise SettingsError(f"is used only with {needs}, and {ENV_PREFIX}SECURITY_PROTOCOL is {protocol}", name)


TANSU_SESSION_TIMEOUT_MS = 2_000
"""The session timeout of consumers on Tansu when the user set none. Tansu answers a
JoinGroup only once half the session timeout has passed (it checks once a second), so
Kafka's 10 s default held every consumer's first join, and every rejoin, for 5 s."""


TANSU_FETCH_MAX_WAIT_MS = 20
"""The fetch wait of consumers on Tansu when the user set none: a record waits about a quarter
of it per hop there (~5 ms; 500 ms, the default for Kafka, would cost ~200 ms a hop)."""


def for_tansu(s: KafkaSettings) -> KafkaSettings:
    """``s`` fitted to the embedded Tansu broker: PLAINTEXT, no idempotent producer (Tansu has
    no InitProducerId), a 2 s session timeout and a 20 ms fetch wait unless ``s`` names its own."""
    fitted = dataclasses.replace(s, security_protocol="PLAINTEXT", idempotence=False)
    if s.fetch_max_wait_ms == KafkaSettings.fetch_max_wait_ms:
        fitted = dataclasses.replace(fitted, fetch_max_wait_ms=TANSU_FETCH_MAX_WAIT_MS)
    if s.session_timeout_ms == KafkaSettings.session_timeout_ms:
        fitted = dataclasses.replace(fitted, session_timeout_ms=TANSU_SESSION_TIMEOUT_MS, heartbeat_interval_ms=min(
            s.heartbeat_interval_ms, TANSU_SESSION_TIMEOUT_MS // 4))
    return fitted


def ssl_context(settings: KafkaSettings) -> ssl.SSLContext | None:
    """The TLS context for SSL / SASL_SSL (the broker's name checked against its certificate;
    the client certificate presented when ``ssl_certfile`` is set), None for plaintext protocols.

    Raises :class:`SettingsError` naming the file a context cannot be made from.
    """
    if not settings.security_protocol.endswith("SSL"):
        return None
    try:
        context: ssl.SSLContext = create_ssl_context(cafile=settings.ssl_cafile)
    except (ssl.SSLError, OSError) as exc:
        raise SettingsError(f"{settings.ssl_cafile!r} holds no usable PEM certificate ({exc})", "ssl_cafile") from None
    if settings.ssl_certfile is not None:
        try:
            context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
        except (ssl.SSLError, OSError) as exc:
            where = "ssl_keyfile" if settings.ssl_keyfile else "ssl_certfile"
            raise SettingsError(
                f"{settings.ssl_certfile!r} and {settings.ssl_keyfile or 'the key in it'!r} are not a PEM certificate "
                f"and its unencrypted private key ({exc})", where) from None
    return context


def sasl_password(settings: KafkaSettings) -> str | None:
    """The SASL password: ``sasl_password``, or what ``sasl_password_file`` holds now (one
    trailing newline dropped). Raises :class:`SettingsError` naming the file it cannot read."""
    if settings.sasl_password_file is None:
        return settings.sasl_password
    path = settings.sasl_password_file
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read {path!r}: {exc}", "sasl_password_file") from None
    text = text[:-1] if text.endswith("\n") else text
    text = text[:-1] if text.endswith("\r") else text
    if not text:
        raise SettingsError(f"{path!r} is empty", "sasl_password_file")
    return text


def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """Keyword arguments shared by aiokafka's producer, consumer and admin client."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "client_id": settings.client_id,
        "security_protocol": settings.security_protocol,
        "ssl_context": ssl_context(settings),
        "request_timeout_ms": settings.request_timeout_ms,
    }
    if settings.security_protocol.startswith("SASL_"):
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = sasl_password(settings)
    return options
