"""Publishing records to the bus.

In: :data:`~shared.bus.records.Record` values from a service (or raw bytes for
the dead-letter topic), optional Kafka headers, the current trace context.
Out: Kafka records keyed by job key (so a job's records share one partition
and keep their order), with W3C ``traceparent`` headers and a ``kto-type``
header (``observation:<kind>`` / ``decision:<action>``), ``acks=all``.

Sending never drops a record silently: retriable failures (broker away, leader
moving, batch expired) are retried with capped backoff for as long as it takes,
and each failed attempt is reported to the hooks (``send.error``,
``broker.unreachable``). Errors no retry can fix raise
:class:`~shared.bus.errors.PublishError`.

The producer is idempotent where the broker grants it a producer id (real
Kafka): a retried send is not written twice within one producer session.
Tansu refuses InitProducerId, so there the producer runs without (a retry may
write a record twice): ``settings.idempotence`` false says so up front; unset,
the refusal at start says so, and the publisher goes on without and logs one
line; true makes the refusal a :class:`~shared.bus.errors.PublishError`.
Either way consumers drop copies by record id (a new producer after a
restart may still repeat a record whose acknowledgement it never saw).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors
from opentelemetry import trace

from shared import tracing
from shared import lifecycle
from shared.bus import errors, events, records, retrying, signing, spans
from shared.bus.settings import KafkaSettings, client_options, compression_type

_tracer = trace.get_tracer("kto.bus")
log = logging.getLogger("kto.bus")

_NO_PRODUCER_IDS: tuple[type[kafka_errors.KafkaError], ...] = (
    kafka_errors.UnknownError,  # Tansu: lists InitProducerId among its ApiVersions, answers UNKNOWN_SERVER_ERROR
    kafka_errors.UnsupportedVersionError,
    kafka_errors.IncompatibleBrokerVersion,  # aiokafka: the broker does not list InitProducerId (API key 22)
)
"""What ``AIOKafkaProducer.start()`` raises when the broker has no InitProducerId to answer
an idempotent producer with. ApiVersions alone cannot tell: Tansu lists the API and refuses it."""


class _RefusedProducerIdsReported(logging.Filter):
    """aiokafka logs an InitProducerId answered with an error at ERROR and then raises it;
    the publisher reports that refusal itself (one line, or a PublishError), so its line is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Unexpected error during InitProducerIdRequest")


logging.getLogger("aiokafka.producer.sender").addFilter(_RefusedProducerIdsReported())


@dataclasses.dataclass(frozen=True)
class Sent:
    """Where a record was written."""

    topic: str
    partition: int
    offset: int


class Publisher(lifecycle.Started):
    """An ``async with`` producer of kto records; ``stop()`` is safe to call twice.

    ``source`` and ``instance`` are stamped on records that leave them empty.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        source: str,
        instance: str,
        *,
        on_event: Iterable[events.Hook] = (),
        policy: retrying.RetryPolicy = retrying.RetryPolicy(),
        signer: signing.Signer | None = None,
        digest_key: bytes = b"",
    ) -> None:
        """``signer``: signs every record written with :meth:`publish`, :meth:`submit` or
        :meth:`publish_many` (:mod:`shared.bus.signing`); :meth:`send_raw` writes bytes as given.
        ``digest_key``: literal values are replaced by their digest under it (:func:`records.encode`)."""
        self._settings = settings
        self._source = source
        self._signer = signer
        self._digest_key = digest_key
        self._instance = instance
        self._emit = events.Emitter(on_event)
        self._policy = policy
        self._producer: AIOKafkaProducer | None = None
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._resending: set[asyncio.Task[None]] = set()

    @property
    def settings(self) -> KafkaSettings:
        """The settings, ``idempotence`` resolved to the producer's mode once it started (an unset
        one becomes false on a broker that refused a producer id): hand these to the process's
        other clients, so they do not ask the broker again."""
        return self._settings

    async def start(self) -> None:
        """Connect, retrying while the broker is unreachable."""
        await self._ready()

    async def stop(self) -> None:
        """Flush pending records and close; safe to call twice."""
        self._closed = True
        for task in list(self._resending):
            task.cancel()
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def _ready(self) -> Any:
        if self._producer is not None:
            return self._producer
        if self._closed:
            raise errors.PublishError("the publisher is stopped")
        async with self._start_lock:
            if self._producer is not None:
                return self._producer
            wanted = self._settings.idempotence
            try:
                await self._connect(idempotent=wanted is not False)
            except kafka_errors.KafkaError as exc:
                if wanted is False:
                    raise
                if wanted is True or not isinstance(exc, _NO_PRODUCER_IDS):
                    raise errors.PublishError(_refused(self._settings.bootstrap, exc, wanted)) from exc
                log.warning(
                    "the broker at %s grants no producer id (InitProducerId answered %s): publishing without "
                    "idempotence, as kto up does on Tansu; a retried send may write a record twice, and consumers "
                    "drop the copy by its record id (KTO_KAFKA_IDEMPOTENCE=false starts so at once, =true makes "
                    "this an error)", self._settings.bootstrap, type(exc).__name__)
                await self._connect(idempotent=False)
            return self._producer

    async def _connect(self, idempotent: bool) -> None:
        async for attempt in retrying.transport(self._policy, on_retry=self._unreachable, retriable=_starting_retriable):
            with attempt:
                producer = AIOKafkaProducer(
                    **client_options(self._settings),
                    # Off where the broker has no InitProducerId (Tansu; KafkaSettings.idempotence).
                    enable_idempotence=idempotent,
                    acks="all",
                    linger_ms=self._settings.linger_ms,
                    compression_type=compression_type(self._settings),
                )
                try:
                    await producer.start()
                except BaseException:
                    await asyncio.shield(producer.stop())
                    raise
                self._producer = producer
                self._settings = dataclasses.replace(self._settings, idempotence=idempotent)

    async def ping(self) -> None:
        """One metadata request to the brokers (a readiness probe's question, shared with the
        producer's own metadata refresh); :class:`~shared.bus.errors.BusError` when not
        connected yet or no broker answered. Callers bound the wait."""
        producer = self._producer
        if producer is None:
            raise errors.BusError(f"not connected to {self._settings.bootstrap} yet")
        if not await producer.client.force_metadata_update():
            raise errors.BusError(f"no broker of {self._settings.bootstrap} answered a metadata request")

    def _unreachable(self, attempt: int, exc: BaseException, wait: float) -> None:
        self._emit(
            events.BROKER_UNREACHABLE,
            bootstrap=self._settings.bootstrap,
            attempt=attempt,
            error=repr(exc),
            retry_in=wait,
        )

    def _stamp(self, record: records.Record) -> records.Record:
        update: dict[str, str] = {}
        if not record.source:
            update["source"] = self._source
        if not record.instance:
            update["instance"] = self._instance
        return record.model_copy(update=update) if update else record

    async def publish(
        self,
        record: records.Record,
        headers: Sequence[tuple[str, bytes]] | None = None,
        *,
        topic: str | None = None,
    ) -> Sent:
        """Write one record (to the jobs topic unless ``topic`` is given), keyed by
        its job key, with the current trace context in its headers."""
        record = self._stamp(record)
        topic = topic or self._settings.jobs_topic
        value = records.encode(record, self._digest_key)
        with _tracer.start_as_current_span(
            spans.publish_name(topic), kind=trace.SpanKind.PRODUCER,
            attributes=spans.publishing(topic, record, size=len(value)),
        ) as span:
            key = record.key.encode()
            sent = await self.send_raw(topic, value, key=key, headers=self._headers(tracing.inject(headers), record,
                                                                                  key, value))
            span.set_attributes(spans.written(sent.partition, sent.offset))
            return sent

    async def submit(
        self,
        record: records.Record,
        headers: Sequence[tuple[str, bytes]] | None = None,
        *,
        topic: str | None = None,
    ) -> asyncio.Future[Sent]:
        """Hand one record to the producer and return without waiting for the broker:
        the future resolves to where it was written, or fails with
        :class:`~shared.bus.errors.PublishError` if the broker refused it for good.

        Records submitted one after another go out in that order (the producer
        keeps one batch per partition in flight). A send that fails retriably is
        sent again, with retries, for as long as it takes; the copy may then land
        after records submitted later, so consumers must not depend on the order
        of such a record (the watcher's observations carry resourceVersions).
        The producer span lasts until the broker acknowledges the record.
        """
        record = self._stamp(record)
        topic = topic or self._settings.jobs_topic
        value, key = records.encode(record, self._digest_key), record.key.encode()
        span = _tracer.start_span(
            spans.publish_name(topic), kind=trace.SpanKind.PRODUCER,
            attributes=spans.publishing(topic, record, size=len(value)),
        )
        kafka_headers = self._headers(tracing.inject(headers, context=trace.set_span_in_context(span)), record,
                                      key, value)
        result: asyncio.Future[Sent] = asyncio.get_running_loop().create_future()

        def finish(sent: Sent | None, error: BaseException | None) -> None:
            if sent is not None:
                span.set_attributes(spans.written(sent.partition, sent.offset))
            elif error is not None:
                span.record_exception(error)
                span.set_status(trace.Status(trace.StatusCode.ERROR, repr(error)))
            span.end()
            if result.done():
                return
            if error is not None:
                result.set_exception(error)
            elif sent is not None:
                result.set_result(sent)

        async def resend(first: BaseException) -> None:
            self._emit(events.SEND_ERROR, topic=topic, partition=None, key=record.key,
                       error=repr(first), attempt=1)
            try:
                sent = await self.send_raw(topic, value, key=key, headers=kafka_headers)
            except errors.PublishError as exc:
                finish(None, exc)
            except asyncio.CancelledError:
                finish(None, errors.PublishError(f"{topic}: the publisher stopped before the record was sent"))
                raise
            else:
                finish(sent, None)

        def retry_or_fail(error: BaseException) -> None:
            if not errors.is_retriable(error):
                self._emit(events.SEND_ERROR, topic=topic, partition=None, key=record.key, error=repr(error))
                finish(None, errors.PublishError(f"{topic} refused a record: {error!r}"))
                return
            task = asyncio.get_running_loop().create_task(resend(error), name=f"resend {record.id}")
            self._resending.add(task)
            task.add_done_callback(self._resending.discard)

        def acknowledged(future: asyncio.Future[Any]) -> None:
            if future.cancelled():
                retry_or_fail(kafka_errors.KafkaTimeoutError("the send was cancelled"))
                return
            error = future.exception()
            if error is not None:
                retry_or_fail(error)
                return
            metadata = future.result()
            sent = Sent(topic, metadata.partition, metadata.offset)
            self._emit(events.SEND_DONE, topic=topic, partition=sent.partition, offset=sent.offset,
                       key=record.key, type=records.type_tag(record))
            finish(sent, None)

        try:
            producer = await self._ready()
            sending = await producer.send(topic, value, key=key, headers=kafka_headers)
        except kafka_errors.KafkaError as exc:
            retry_or_fail(exc)
        else:
            sending.add_done_callback(acknowledged)
        return result

    async def publish_many(
        self,
        batch: Iterable[records.Record],
        headers: Sequence[tuple[str, bytes]] | None = None,
        *,
        topic: str | None = None,
    ) -> list[Sent]:
        """Write several records, batched; results in the order given.

        Records of one key keep their order. A record whose send failed with a
        retriable error is sent again (in order, with retries); a record no retry
        can fix raises :class:`PublishError` after the others are written.
        """
        topic = topic or self._settings.jobs_topic
        stamped = [self._stamp(r) for r in batch]
        if not stamped:
            return []
        producer = await self._ready()
        keys = {r.key for r in stamped}
        with _tracer.start_as_current_span(
            spans.publish_name(topic), kind=trace.SpanKind.PRODUCER,
            attributes=spans.publishing(topic, count=len(stamped), key=keys.pop() if len(keys) == 1 else None),
        ):
            trace_headers = tracing.inject(headers)
            futures: list[asyncio.Future[Any] | BaseException] = []
            wires = []
            for record in stamped:
                value, key = records.encode(record, self._digest_key), record.key.encode()
                wires.append((value, key, self._headers(trace_headers, record, key, value)))
                try:
                    futures.append(await producer.send(topic, value, key=key, headers=wires[-1][2]))
                except kafka_errors.KafkaError as exc:
                    futures.append(exc)
            results: list[Sent | None] = []
            failures: list[tuple[int, BaseException]] = []
            for index, future in enumerate(futures):
                try:
                    if isinstance(future, BaseException):
                        raise future
                    metadata = await future
                except kafka_errors.KafkaError as exc:
                    results.append(None)
                    failures.append((index, exc))
                    self._emit(events.SEND_ERROR, topic=topic, partition=None,
                               key=stamped[index].key, error=repr(exc), attempt=1)
                    continue
                sent = Sent(topic, metadata.partition, metadata.offset)
                results.append(sent)
                self._emit(events.SEND_DONE, topic=topic, partition=sent.partition,
                           offset=sent.offset, key=stamped[index].key, type=records.type_tag(stamped[index]))
            permanent: list[BaseException] = []
            for index, failure in failures:
                if not errors.is_retriable(failure):
                    permanent.append(failure)
                    continue
                value, key, signed = wires[index]
                results[index] = await self.send_raw(topic, value, key=key, headers=signed)
            if permanent:
                raise errors.PublishError(
                    f"{len(permanent)} of {len(stamped)} records refused by {topic}: "
                    f"{permanent[0]!r}"
                ) from permanent[0]
            return [r for r in results if r is not None]

    def _headers(
        self, headers: list[tuple[str, bytes]], record: records.Record, key: bytes, value: bytes,
    ) -> list[tuple[str, bytes]]:
        """The record's Kafka headers: the trace context, its type, and its signature (with a signer)."""
        tag = records.type_tag(record).encode()
        typed = [*headers, (records.TYPE_HEADER, tag)]
        if self._signer is None:
            return typed
        return typed + self._signer.headers(key, tag, value)

    async def send_raw(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> Sent:
        """Write bytes as they are (used for dead-lettering), retrying retriable
        errors until the broker takes them."""

        def on_retry(attempt: int, exc: BaseException, wait: float) -> None:
            self._emit(events.SEND_ERROR, topic=topic, partition=None,
                       key=key.decode(errors="replace") if key else None,
                       error=repr(exc), attempt=attempt, retry_in=wait)
            if isinstance(exc, (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError)):
                self._unreachable(attempt, exc, wait)

        try:
            async for attempt in retrying.transport(self._policy, on_retry=on_retry):
                with attempt:
                    producer = await self._ready()
                    metadata = await producer.send_and_wait(
                        topic, value, key=key, headers=list(headers or ())
                    )
        except kafka_errors.KafkaError as exc:
            self._emit(events.SEND_ERROR, topic=topic, partition=None,
                       key=key.decode(errors="replace") if key else None, error=repr(exc))
            raise errors.PublishError(f"{topic} refused a record: {exc!r}") from exc
        sent = Sent(topic, metadata.partition, metadata.offset)
        self._emit(events.SEND_DONE, topic=topic, partition=sent.partition, offset=sent.offset,
                   key=key.decode(errors="replace") if key else None, type=records.type_of(headers))
        return sent


def _starting_retriable(exc: BaseException) -> bool:
    """Retriable while starting a producer: not UNKNOWN_SERVER_ERROR, which a broker without
    InitProducerId (Tansu) answers an idempotent producer with for good, though a produce
    answered it is tried again (:data:`shared.bus.errors._TRANSIENT`)."""
    return errors.is_retriable(exc) and not isinstance(exc, kafka_errors.UnknownError)


def _refused(bootstrap: str, exc: kafka_errors.KafkaError, wanted: bool | None) -> str:
    """The one line on an idempotent producer the broker would not start, with the fix."""
    answer = f"InitProducerId answered {type(exc).__name__}"
    if wanted and isinstance(exc, _NO_PRODUCER_IDS):
        return (f"cannot start an idempotent producer on {bootstrap}: the broker grants no producer id ({answer}), "
                f"and KTO_KAFKA_IDEMPOTENCE=true asks for one; on a broker without InitProducerId, such as Tansu, "
                f"set KTO_KAFKA_IDEMPOTENCE=false or leave it unset")
    return (f"cannot start an idempotent producer on {bootstrap}: {answer} ({exc}); KTO_KAFKA_IDEMPOTENCE=false "
            f"starts one that asks for no producer id")
