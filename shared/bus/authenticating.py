"""Whether the broker lets this client in: asked once when a service starts, before its clients.

In: :class:`~shared.bus.settings.KafkaSettings` of an SSL, SASL_SSL or SASL_PLAINTEXT client.
Out: :func:`check_access`, which returns when the first broker that answers accepts the
client's TLS certificate (mutual TLS) and SASL login and lets its principal describe the jobs
topic, or when no broker answers at all (the clients' own retries then wait for one, as for
any outage); and raises :class:`AccessRefused`, one line naming the setting to fix, when the
broker refuses the client. PLAINTEXT settings are not checked.

Why: aiokafka reports a refused login, a refused client certificate or a broker certificate it
does not trust only as "Unable to bootstrap", a retriable error, so a worker with a wrong
password would wait for ever as if the broker were down.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct

from aiokafka import errors as kafka_errors
from aiokafka.conn import create_conn
from aiokafka.protocol.metadata import MetadataRequest

from shared.bus import errors
from shared.bus.settings import ENV_PREFIX, KafkaSettings, client_options

_TOPIC_AUTHORIZATION_FAILED = 29
_API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 3) + b"kto"
"""An ApiVersions v0 request (api key, version, correlation id, client id): the first bytes the broker
answers, which is when it has checked the client's certificate."""


class AccessRefused(errors.BusError):
    """The broker refused this client: its certificate, its login or its principal's ACLs. Not retriable."""


async def check_access(settings: KafkaSettings) -> None:
    """Return once a broker of ``settings.bootstrap`` lets this client in, or none answers;
    :class:`AccessRefused` when one refuses it (module docstring)."""
    if settings.security_protocol == "PLAINTEXT":
        return
    timeout = settings.request_timeout_ms / 1000
    for server in settings.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            async with asyncio.timeout(timeout):
                if settings.security_protocol.endswith("SSL"):
                    await _shake_hands(settings, host, int(port))
                await _describe_jobs_topic(settings, host, int(port))
        except (OSError, EOFError, TimeoutError, kafka_errors.KafkaConnectionError):
            continue  # this one does not answer (an SSL error that says more is raised as AccessRefused)
        return


async def _shake_hands(settings: KafkaSettings, host: str, port: int) -> None:
    """A TLS handshake and one request: the broker's certificate checked against ``ssl_cafile``, and
    the client's checked by the broker, whose alert aiokafka would report as a closed connection."""
    context = client_options(settings)["ssl_context"]
    where = f"{host}:{port}"
    try:
        reader, writer = await asyncio.open_connection(host, port, ssl=context)
    except ssl.SSLCertVerificationError as exc:
        trusted = f"{ENV_PREFIX}SSL_CAFILE={settings.ssl_cafile}" if settings.ssl_cafile else \
            f"the system's CAs ({ENV_PREFIX}SSL_CAFILE is unset)"
        raise AccessRefused(f"the certificate of the broker at {where} does not verify against {trusted}: "
                            f"{exc.verify_message}") from None
    except ssl.SSLError as exc:
        raise AccessRefused(f"no TLS with the broker at {where} ({exc.reason}): is {ENV_PREFIX}BOOTSTRAP the "
                            f"port of a {settings.security_protocol} listener?") from None
    try:
        writer.write(len(_API_VERSIONS_V0).to_bytes(4, "big") + _API_VERSIONS_V0)
        await writer.drain()
        await reader.readexactly(4)
    except ssl.SSLError as exc:
        if settings.ssl_certfile is None:
            raise AccessRefused(
                f"the broker at {where} refused the TLS connection ({exc.reason}): it may ask for a client "
                f"certificate (mutual TLS): set {ENV_PREFIX}SSL_CERTFILE and {ENV_PREFIX}SSL_KEYFILE") from None
        raise AccessRefused(
            f"the broker at {where} refused this client's certificate {ENV_PREFIX}SSL_CERTFILE="
            f"{settings.ssl_certfile} ({exc.reason}): it must be signed by a CA the broker trusts") from None
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


async def _describe_jobs_topic(settings: KafkaSettings, host: str, port: int) -> None:
    """Log in (SASL) and ask for the jobs topic's metadata: what every kto principal may do."""
    options = client_options(settings)
    where = f"{host}:{port}"
    try:
        connection = await create_conn(
            host, port, client_id=settings.client_id, request_timeout_ms=settings.request_timeout_ms,
            ssl_context=options["ssl_context"], security_protocol=settings.security_protocol,
            sasl_mechanism=options.get("sasl_mechanism"), sasl_plain_username=options.get("sasl_plain_username"),
            sasl_plain_password=options.get("sasl_plain_password"),
        )
    except (kafka_errors.SaslAuthenticationFailed, kafka_errors.AuthenticationFailedError) as exc:
        password = f"{ENV_PREFIX}SASL_PASSWORD" + ("_FILE" if settings.sasl_password_file else "")
        raise AccessRefused(
            f"the broker at {where} refused the {settings.sasl_mechanism} login of {settings.sasl_username!r} "
            f"({_text(exc)}): check {ENV_PREFIX}SASL_USERNAME and {password}") from None
    except kafka_errors.UnsupportedSaslMechanismError as exc:
        raise AccessRefused(f"the broker at {where} does not offer {ENV_PREFIX}SASL_MECHANISM="
                            f"{settings.sasl_mechanism} ({_text(exc)})") from None
    try:
        response = await connection.send(MetadataRequest([settings.jobs_topic], allow_auto_topic_creation=False))
    finally:
        connection.close()
    for code, topic, *_ in response.topics:
        if code == _TOPIC_AUTHORIZATION_FAILED:
            who = repr(settings.sasl_username) if settings.security_protocol.startswith("SASL_") else \
                f"the certificate {settings.ssl_certfile}"
            raise AccessRefused(
                f"the broker at {where} does not let {who} describe topic {topic} (TopicAuthorizationFailed): its "
                f"principal needs kto's ACLs (docs/bus.md, Kafka with SCRAM or mTLS)")


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())
