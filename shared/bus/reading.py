"""Reading a job's history back from the jobs topic (audit, ``kto replay``).

In: settings and a job key.
Out: every decodable record of that key, in log order. Only the key's
partition is read — computed the way the producer's default partitioner
places keys (murmur2 of the key bytes, as in the Java client) — from its
beginning until the broker has nothing more (at most a few seconds past the
end offset it reports when reading starts, on a busy partition). No consumer group is
used, so nothing is committed and no running group is disturbed.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from shared.bus import records, signing
from shared.bus.errors import BusError
from shared.bus.settings import KafkaSettings, client_options

log = logging.getLogger("kto.bus.reading")

_DRAIN_POLL_MS = 200  # an empty fetch this long means the partition is drained
_DRAIN_LIMIT_S = 5.0  # at most this long past the reported end on a busy partition


def partition_for_key(key: str | records.JobKey, partitions: int) -> int:
    """The partition aiokafka's (and the Java client's) default partitioner
    picks for ``key`` among ``partitions`` partitions."""
    data = str(key).encode()
    return (murmur2(data) & 0x7FFFFFFF) % partitions  # type: ignore[no-any-return]


async def _partitions(consumer: AIOKafkaConsumer, settings: KafkaSettings, topic: str) -> set[int]:
    """The partitions of ``topic``, from a metadata request for every topic.

    The consumer's own metadata covers only what it subscribed to (Tansu
    answers the bootstrap request with every topic, Kafka with none), so ask.
    """
    metadata = await consumer._client.fetch_all_metadata()
    partitions: set[int] | None = metadata.partitions_for_topic(topic)
    if not partitions:
        raise BusError(f"topic {topic} does not exist on {settings.bootstrap}")
    return partitions


async def read_history(
    settings: KafkaSettings, job_key: str | records.JobKey, *, topic: str | None = None
) -> list[records.Record]:
    """All records of ``job_key`` in the jobs topic (or ``topic``), oldest first.

    Malformed records are skipped (they are in the dead-letter topic).
    """
    key = str(records.JobKey.parse(str(job_key)))
    key_bytes = key.encode()
    topic = topic or settings.jobs_topic
    consumer = AIOKafkaConsumer(
        **client_options(settings), group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=settings.fetch_max_wait_ms,
    )
    await consumer.start()
    try:
        partitions = await _partitions(consumer, settings, topic)
        tp = TopicPartition(topic, partition_for_key(key, len(partitions)))
        consumer.assign([tp])
        # Tansu answers ListOffsets with the base offset of the newest produce
        # batch plus one, not the true end, when a batch held several records;
        # so read on past that answer until the broker has nothing more.
        end = (await consumer.end_offsets([tp]))[tp]
        begin = (await consumer.beginning_offsets([tp]))[tp]
        history: list[records.Record] = []
        consumer.seek(tp, begin)
        loop = asyncio.get_running_loop()
        drain_until: float | None = None
        while True:
            batch = await consumer.getmany(tp, timeout_ms=_DRAIN_POLL_MS, max_records=1000)
            messages = batch.get(tp, [])
            for message in messages:
                if message.key != key_bytes:
                    continue
                try:
                    history.append(records.decode(message.value))
                except records.MalformedRecord as exc:
                    log.debug("skipping malformed record %s@%s: %s", tp, message.offset,
                              exc.reason)
            if await consumer.position(tp) < end:
                continue
            if not messages:
                break
            # Past the reported end: the partition may still be growing; stop
            # once it is drained or after a bounded time, whichever comes first.
            drain_until = drain_until or loop.time() + _DRAIN_LIMIT_S
            if loop.time() >= drain_until:
                break
        return history
    finally:
        await consumer.stop()


async def committed_offsets(
    settings: KafkaSettings, group_id: str, *, topic: str | None = None
) -> dict[int, int | None]:
    """The offsets ``group_id`` has committed on each partition of the jobs topic
    (or ``topic``); None where it has committed nothing. For lag checks and tests.

    Asked through a consumer that does not join the group (Tansu does not
    answer the admin client's OffsetFetch).
    """
    topic = topic or settings.jobs_topic
    consumer = AIOKafkaConsumer(
        **client_options(settings), group_id=group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = await _partitions(consumer, settings, topic)
        result: dict[int, int | None] = {}
        for partition in sorted(partitions):
            offset = await consumer.committed(TopicPartition(topic, partition))
            result[partition] = offset
        return result
    finally:
        await consumer.stop()


@dataclasses.dataclass(frozen=True)
class Entry:
    """One record of the jobs topic as ``kto history`` shows it: where it is, when it was
    written, and the record (or, for one that does not decode, why)."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str
    record: records.Record | None
    error: str = ""
    """Why the record does not decode (``record`` is None then)."""
    trace_id: str = ""
    """The W3C trace id of the ``traceparent`` header ("" without one)."""
    verdict: signing.Verdict | None = None
    """Whether the record is authentic (read with a keyring), or None (read without one)."""


@dataclasses.dataclass(frozen=True)
class RawEntry:
    """One record of the jobs topic as it is on the wire (what ``kto export`` archives)."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str
    value: bytes
    trace_id: str = ""
    signature: tuple[tuple[str, bytes], ...] = ()
    """The headers a signature rests on (:data:`SIGNATURE_HEADERS`), as they were on the wire."""

    def decoded(self, keyring: signing.Keyring | None = None) -> Entry:
        """The entry decoded; with a ``keyring``, said authentic or not (:mod:`shared.bus.signing`)."""
        verdict = None if keyring is None else keyring.verify(self.key.encode(), self.value, self.signature)
        try:
            record = records.decode(self.value)
        except records.MalformedRecord as exc:
            return Entry(self.partition, self.offset, self.timestamp_ms, self.key, None, exc.reason, self.trace_id,
                         verdict)
        if verdict is not None and verdict.authentic:
            tag = dict(self.signature).get(records.TYPE_HEADER)
            why = signing.permits(verdict.role, record, tag)
            if why:
                verdict = signing.Verdict(False, f"key {verdict.key_id!r}: {why}", "role", verdict.key_id, verdict.role)
        return Entry(self.partition, self.offset, self.timestamp_ms, self.key, record, "", self.trace_id, verdict)


SIGNATURE_HEADERS = (records.TYPE_HEADER, signing.KEY_ID_HEADER, signing.SIGNATURE_HEADER)
"""The Kafka headers a record's signature covers or carries."""


def signature_headers(headers: Sequence[tuple[str, bytes]] | None) -> tuple[tuple[str, bytes], ...]:
    return tuple((name, value) for name, value in headers or () if name in SIGNATURE_HEADERS and value is not None)


def signature_to_json(signature: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    """The signature headers as JSON (base64 values), as ``kto export`` archives them."""
    return {name: base64.b64encode(value).decode() for name, value in signature}


def signature_from_json(found: object) -> tuple[tuple[str, bytes], ...]:
    """The signature headers of an archived record (:func:`signature_to_json`); ValueError if malformed."""
    if found is None:
        return ()
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        raise ValueError("'signature' must be an object of base64 strings")
    return tuple((str(name), base64.b64decode(value, validate=True)) for name, value in found.items()
                 if name in SIGNATURE_HEADERS)


def _trace_id(headers: Sequence[tuple[str, bytes]] | None) -> str:
    for name, value in headers or ():
        if name == "traceparent":
            parts = value.decode(errors="replace").split("-")
            return parts[1] if len(parts) >= 3 else ""
    return ""


async def scan(
    settings: KafkaSettings,
    *,
    accept: Callable[[str], bool],
    key: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    follow: bool = False,
    topic: str | None = None,
) -> AsyncIterator[RawEntry]:
    """The records (as on the wire; :meth:`RawEntry.decoded` decodes one) of the jobs topic (or ``topic``) whose key ``accept`` takes, partition by
    partition in log order (every partition is read to its end before the next is; with
    ``follow`` they are read together and for ever). ``key``: only its partition is read.
    ``since_ms`` seeks each partition by timestamp instead of reading it from its beginning;
    ``until_ms`` ends a partition at the first record written later."""
    topic = topic or settings.jobs_topic
    consumer = AIOKafkaConsumer(
        **client_options(settings), group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=settings.fetch_max_wait_ms,
    )
    try:
        await consumer.start()
    except KafkaError as exc:
        await consumer.stop()
        raise BusError(f"cannot reach the broker at {settings.bootstrap}: {exc}") from None
    try:
        partitions = sorted(await _partitions(consumer, settings, topic))
        if key is not None:
            partitions = [partition_for_key(key, len(partitions))]
        tps = [TopicPartition(topic, p) for p in partitions]
        groups = [tps] if follow else [[tp] for tp in tps]
        for group in groups:
            consumer.assign(group)
            starts = await consumer.beginning_offsets(group)
            if since_ms is not None:
                found = await consumer.offsets_for_times({tp: since_ms for tp in group})
                for tp in group:
                    hit = found.get(tp)
                    starts[tp] = hit.offset if hit is not None else (await consumer.end_offsets([tp]))[tp]
            for tp in group:
                consumer.seek(tp, starts[tp])
            async for entry in _drain(consumer, group, accept, since_ms, until_ms, follow):
                yield entry
    finally:
        await consumer.stop()


async def _drain(
    consumer: AIOKafkaConsumer, group: list[TopicPartition], accept: Callable[[str], bool],
    since_ms: int | None, until_ms: int | None, follow: bool,
) -> AsyncIterator[RawEntry]:
    """Read ``group`` to its end (see :func:`read_history` on Tansu's end offsets), or for ever.
    Records older than ``since_ms`` are passed over too: Tansu answers a time lookup past
    the last record with offset 0, not with none."""
    ends = await consumer.end_offsets(group)
    done: set[TopicPartition] = set()
    loop = asyncio.get_running_loop()
    drain_until: float | None = None
    while follow or len(done) < len(group):  # ``done``: past ``until_ms``
        batch = await consumer.getmany(*group, timeout_ms=_DRAIN_POLL_MS, max_records=1000)
        for tp, messages in batch.items():
            for message in messages:
                if until_ms is not None and message.timestamp > until_ms:
                    done.add(tp)
                    break
                key = (message.key or b"").decode(errors="replace")
                if since_ms is not None and message.timestamp < since_ms or not accept(key):
                    continue
                yield RawEntry(tp.partition, message.offset, message.timestamp, key, message.value or b"",
                               _trace_id(message.headers), signature_headers(message.headers))
        if follow or any(batch.values()):
            continue
        positions = [await consumer.position(tp) for tp in group]
        if all(position >= ends[tp] for position, tp in zip(positions, group)):
            return
        drain_until = drain_until or loop.time() + _DRAIN_LIMIT_S
        if loop.time() >= drain_until:
            return
