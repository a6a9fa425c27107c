"""Consuming the jobs topic: one serial worker per job key, gapless commits.

In: Kafka records of the subscribed topics (by default the jobs topic), as a
member of a consumer group.
Out: calls of ``handler(record, trace_context)``, inside a ``process <topic>``
CONSUMER span whose parent is the producer's span (:mod:`shared.bus.spans`), with

* **per-key order** — records of one job key are handled strictly in order by
  one worker task (a queue per key; a worker exits when its queue is empty);
  different keys run concurrently, at most ``concurrency_limit`` at once;
* **gapless commits** — an offset is committed only when every earlier record
  of its partition is done (periodically, on partition revoke and on stop), so
  a crash or rebalance re-delivers but never skips;
* **drain on revoke** — records of revoked partitions are no longer taken in;
  those already taken in are finished and committed before the rebalance
  goes on; once the new assignment is known, ``on_revoked`` is told the job
  keys of the partitions lost, so the worker drops what it kept for them;
* **duplicates dropped** — a record id seen recently (bounded LRU) is skipped;
* **records not wanted passed over** (optional ``accept``) — by their
  ``kto-type`` header, without decoding them;
* **act once per burst** (optional ``settle``) — the handler only takes each
  record in (e.g. into a job's view); ``settle(key, ...)`` then acts once for
  all records of the key that arrived together, and may ask to be called
  again after a delay (new records of the key are taken in meanwhile, and
  their offsets, like those before, are committed only once a settle is
  done). Level-triggered workers do the expensive part once per burst instead
  of once per record. A settle runs in a span of its own, a child of the last
  record's ``process`` span, linked to the producer span of every record of the
  burst;
* **lanes** (optional ``lane``) — the settles of one lane's keys (for the
  workers, a job key's cluster) hold at most ``lane_limit`` handler slots at
  once, and a key takes its lane's slot before a handler slot, so keys whose
  settles hang (a cluster that stopped answering) cannot take every slot
  from the other lanes;
* **commits only as a member** — a member the coordinator no longer knows
  (rejoining after its session expired, or after the broker restarted empty)
  commits nothing: such a commit would land outside the group's generations,
  e.g. an offset of the lost log in the new one, and skip its records;
* **no stalls** — a record that does not decode, or whose handler keeps
  failing, is written to the dead-letter topic with ``kto-error``,
  ``kto-source-topic``, ``kto-source-partition``, ``kto-source-offset``
  headers, and its partition moves on. Retriable handler errors are retried
  with the shared policy first (:mod:`shared.bus.retrying`).

Broker outages are waited out: clients reconnect and retry; ``run()`` does not
return until ``stop()`` is called.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.abc import ConsumerRebalanceListener
from opentelemetry import context as otel_context
from opentelemetry import trace

from shared import lifecycle, tracing
from shared.bus import errors, events, records, retrying, signing, spans
from shared.bus.producing import Publisher
from shared.bus.settings import KafkaSettings, client_options

log = logging.getLogger("kto.bus.consumer")
_tracer = trace.get_tracer("kto.bus")

Handler = Callable[[records.Record, otel_context.Context], Awaitable[bool | None]]
"""Handles one record; gets the trace context the record carried (the handler
itself runs inside the consumer's span, a child of that context). With a
``settle``, returning False says the record changed nothing worth settling."""

Settle = Callable[[str, otel_context.Context, bool], Awaitable[float | None]]
"""``settle(key, trace_context, flush)``: act on what the handler took in for
``key`` (``trace_context``: the last record's ``process`` span). Returns None
when done, or seconds after which to be called again (sooner if more records
of the key arrive). ``flush`` (stopping, partition revoked) means act now: a
returned delay is then ignored."""

MAX_COALESCED = 256
"""Records of one key taken in before its settle runs, however fast they come."""

LOG_CHECK_INTERVAL = 1.0
"""Seconds between checks that no position lies past its partition's log end."""

MAX_ERROR_HEADER = 4000
"""Bytes of the error text kept in the ``kto-error`` header."""


@dataclasses.dataclass(eq=False)
class _Partition:
    """Offsets of one assigned partition taken in but not yet committed."""

    tp: TopicPartition
    pending: collections.deque[int] = dataclasses.field(default_factory=collections.deque)
    """Offsets taken in and not yet part of the committable prefix, ascending."""
    done: set[int] = dataclasses.field(default_factory=set)
    high: int = -1
    """Highest offset taken in; a lower or equal one is a re-fetch and is skipped."""
    next_offset: int | None = None
    """Offset to commit: one past the last record with nothing unfinished before it."""
    committed: int | None = None
    position: int | None = None
    """The consumer's position when the log ends were last checked (for :meth:`KeyedConsumer.lags`)."""
    revoked: bool = False
    idle: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def take(self, offset: int) -> bool:
        if offset <= self.high:
            return False
        self.high = offset
        self.pending.append(offset)
        self.idle.clear()
        return True

    def finish(self, offset: int) -> None:
        self.done.add(offset)
        while self.pending and self.pending[0] in self.done:
            first = self.pending.popleft()
            self.done.discard(first)
            self.next_offset = first + 1
        if not self.pending:
            self.idle.set()

    def to_commit(self) -> int | None:
        if self.next_offset is None or self.next_offset == self.committed:
            return None
        return self.next_offset


@dataclasses.dataclass(frozen=True)
class _Taken:
    """A record the handler took in, as its settle sees it."""

    context: otel_context.Context
    """The record's ``process`` span: the parent of the settle that acts on it."""
    producer: trace.SpanContext
    """The span that published the record (invalid if it came without one): linked from the settle."""


def _header_bytes(headers: Sequence[tuple[str, bytes]] | None, name: str) -> bytes | None:
    for header, value in headers or ():
        if header == name:
            return value
    return None


def _header(headers: Sequence[tuple[str, bytes]] | None, name: str) -> str | None:
    raw = _header_bytes(headers, name)
    return None if raw is None else raw.decode(errors="replace")


class _LaneSlot:
    """A slot of the key's lane, then a handler slot; released in reverse."""

    __slots__ = ("_lane", "_slots")

    def __init__(self, lane: asyncio.Semaphore, slots: asyncio.Semaphore) -> None:
        self._lane = lane
        self._slots = slots

    async def __aenter__(self) -> None:
        await self._lane.acquire()
        try:
            await self._slots.acquire()
        except BaseException:
            self._lane.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._slots.release()
        self._lane.release()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: KeyedConsumer) -> None:
        self._owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._owner._on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._owner._on_assigned(list(assigned))


@dataclasses.dataclass(frozen=True)
class ConsumerSettings:
    """How a :class:`KeyedConsumer` consumes: its group, topics, concurrency and timing."""

    group_id: str
    """The consumer group it joins (``kto-reconciler``, ``kto-status`` …)."""

    topics: tuple[str, ...] = ()
    """Topics to subscribe to; empty: the jobs topic of the Kafka settings."""

    concurrency_limit: int = 32
    """Job keys handled at the same time."""

    dedupe_capacity: int = 10_000
    """Record ids remembered to drop duplicates."""

    policy: retrying.RetryPolicy = retrying.RetryPolicy()
    """Backoff and attempts, shared with the publisher (of the dead-letter topic)."""

    span_name: str = "reconcile"
    """Name of the span a settle runs in (each record is handled in a ``process <topic>`` span)."""

    commit_interval: float = 1.0
    """Seconds between periodic commits."""

    max_buffered: int | None = None
    """Records taken in but unfinished before fetching pauses; None: ``8 * concurrency_limit``."""

    drain_timeout: float = 60.0
    """Seconds a revoke or stop waits for records taken in."""

    instance: str | None = None
    """Process instance id, stamped on dead-letter headers; None: the Kafka settings' ``client_id``."""

    lane_limit: int | None = None
    """Handler slots the settles of one lane hold at most (see the module doc); None:
    ``concurrency_limit`` (and never more than it)."""

    def __post_init__(self) -> None:
        if self.concurrency_limit < 1 or self.dedupe_capacity < 0:
            raise ValueError("concurrency_limit must be ≥ 1 and dedupe_capacity ≥ 0")


class KeyedConsumer(lifecycle.Started):
    """A consumer-group member that hands records to ``handler`` per job key.

    Use as ``async with KeyedConsumer(...) as consumer: await consumer.run()``;
    ``stop()`` (from another task, or on leaving the ``async with``) finishes
    the records taken in, commits, and leaves the group. Safe to call twice.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: ConsumerSettings,
        handler: Handler,
        *,
        settle: Settle | None = None,
        accept: Callable[[str], bool] | None = None,
        lane: Callable[[str], str] | None = None,
        on_revoked: Callable[[set[str]], None] | None = None,
        retriable: Callable[[BaseException], bool] | None = None,
        on_event: Iterable[events.Hook] = (),
        keyring: signing.Keyring | None = None,
    ) -> None:
        """
        Args:
            kafka: how to reach the broker, and the jobs and dead-letter topics.
            settings: the group, topics, concurrency and timing (:class:`ConsumerSettings`).
            handler: takes each record in (see the module doc).
            settle: act once per burst of a key's records (see the module doc);
                its failures are retried like the handler's and dead-letter
                the burst's last record.
            accept: given a record's ``kto-type`` header
                (:func:`~shared.bus.records.type_tag`), whether the handler
                wants it; records it refuses are passed over undecoded (their
                offsets still count as done). Records without the header are
                always handled.
            lane: a key's lane (see the module doc); settles of one lane hold at
                most ``settings.lane_limit`` slots at once.
            on_revoked: told, after a rebalance, the job keys of the partitions
                this member lost (revoked and not given back): whatever it keeps
                per key must go, since another member handles those keys now and
                this one's copy would be stale if they came back.
            retriable: extra test for handler errors worth retrying, besides
                :class:`~shared.bus.errors.Retriable` and errors flagged retriable.
            on_event: observability hooks (see :mod:`shared.bus.events`).
            keyring: when given, only authentic records reach the handler: signed by a
                trusted key whose role may write what the record is
                (:mod:`shared.bus.signing`); any other is dead-lettered with the reason.
        """
        concurrency_limit = settings.concurrency_limit
        self._settings = kafka
        self._group_id = settings.group_id
        self._handler = handler
        self._topics = settings.topics or (kafka.jobs_topic,)
        self._handler_slots = asyncio.Semaphore(concurrency_limit)
        self._lane = lane
        self._lane_limit = min(settings.lane_limit or concurrency_limit, concurrency_limit)
        self._lanes: dict[str, asyncio.Semaphore] = {}
        """Lane → its slots (one per cluster for the workers: a handful to a few hundred)."""
        self._capacity = asyncio.Semaphore(settings.max_buffered or 8 * concurrency_limit)
        self._dedupe_capacity = settings.dedupe_capacity
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._emit = events.Emitter(on_event)
        self._retriable = retriable
        self._policy = settings.policy
        self._settle = settle
        self._accept = accept
        self._revoked_hook = on_revoked
        self._settle_span_name = settings.span_name
        self._commit_interval = settings.commit_interval
        self._drain_timeout = settings.drain_timeout
        self._instance = settings.instance or kafka.client_id
        self._on_event = tuple(on_event)
        self._keyring = keyring

        self._consumer: Any = None
        self._dlq: Publisher | None = None
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._queues: dict[str, collections.deque[tuple[Any, _Partition]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._keys: dict[TopicPartition, set[str]] = {}
        """Job keys taken in from each assigned partition (told to ``on_revoked``)."""
        self._revoked_keys: dict[TopicPartition, set[str]] = {}
        """Keys of partitions revoked in the rebalance under way, until the new assignment."""
        self._wakeups: dict[str, asyncio.Event] = {}
        """Per key whose settle asked for a delay: set when a record of it arrives or on stop/revoke."""
        self._group: asyncio.TaskGroup | None = None
        self._next_log_check = 0.0
        self._stopping = asyncio.Event()
        self._commits_done = asyncio.Event()
        self._run_finished = asyncio.Event()
        self._running = False
        self._closed = False

    # -- lifecycle ---------------------------------------------------------

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """Partitions this member holds now."""
        return frozenset(tp for tp, p in self._partitions.items() if not p.revoked)

    async def start(self) -> None:
        """Connect and join the group, retrying while the broker is unreachable."""
        if self._consumer is not None:
            return
        self._dlq = Publisher(
            self._settings, self._group_id, self._instance, on_event=self._on_event,
            policy=self._policy,
        )
        await self._dlq.start()
        async for attempt in retrying.transport(self._policy, on_retry=self._unreachable):
            with attempt:
                consumer = AIOKafkaConsumer(
                    **client_options(self._settings),
                    group_id=self._group_id,
                    enable_auto_commit=False,
                    auto_offset_reset="earliest",
                    fetch_max_wait_ms=self._settings.fetch_max_wait_ms,
                    session_timeout_ms=self._settings.session_timeout_ms,
                    heartbeat_interval_ms=self._settings.heartbeat_interval_ms,
                )
                consumer.subscribe(self._topics, listener=_Listener(self))
                try:
                    await consumer.start()
                except BaseException:
                    await asyncio.shield(consumer.stop())
                    raise
                self._consumer = consumer

    async def stop(self) -> None:
        """Stop taking records, finish and commit those taken in, leave the group.
        Safe to call twice and from any task."""
        self._stopping.set()
        self._wake_all()
        if self._running:
            await self._run_finished.wait()
        if self._closed:
            return
        self._closed = True
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()
        if self._dlq is not None:
            await self._dlq.stop()

    async def run(self) -> None:
        """Consume until ``stop()``; then drain and commit. Never returns on a
        broker outage (it waits and retries)."""
        if self._running:
            raise RuntimeError("run() is already running")
        if self._stopping.is_set():
            return  # stopped before it ran: nothing to start, nothing to leave open
        await self.start()
        self._running = True
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self._commit_loop(), name=f"kto-bus-commit:{self._group_id}")
                await self._fetch_loop()
                await self._drain(list(self._partitions.values()))
                for task in list(self._workers.values()):
                    task.cancel()  # only those stuck past drain_timeout remain
                await self._commit(list(self._partitions.values()))
                self._commits_done.set()
        except asyncio.CancelledError:
            # Keep what is already done; a second cancellation cannot cut this short.
            await asyncio.shield(self._commit(list(self._partitions.values())))
            raise
        finally:
            self._group = None
            self._running = False
            self._run_finished.set()

    # -- fetching ------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        while not self._stopping.is_set():
            batch: dict[TopicPartition, list[Any]] = {}
            async for attempt in retrying.transport(self._policy, on_retry=self._unreachable):
                with attempt:
                    batch = await self._consumer.getmany(timeout_ms=200, max_records=500)
            await self._check_log_ends()
            for messages in batch.values():
                for message in messages:
                    if self._stopping.is_set():
                        return
                    await self._take(message)

    async def _check_log_ends(self) -> None:
        """A position past the partition's log end (the high watermark the last fetch
        reported) means the broker lost the log: Tansu restarted empty, and the offset
        this member or the group committed points into the old one. Fetching from there
        would skip every record the new log gets below it, so the partition is read
        again from the new log's beginning, and ``on_revoked`` is told its keys: what
        the worker kept for them came from the lost log and is read afresh from the
        cluster. A durable broker never shows this."""
        now = asyncio.get_running_loop().time()
        if now < self._next_log_check:
            return
        self._next_log_check = now + LOG_CHECK_INTERVAL
        for tp, partition in list(self._partitions.items()):
            if partition.revoked:
                continue
            highwater = self._consumer.highwater(tp)
            if highwater is None:
                continue
            try:
                position = await self._consumer.position(tp)
            except kafka_errors.KafkaError:
                continue  # a rebalance or outage under way: checked again later
            partition.position = position
            if position <= highwater or self._partitions.get(tp) is not partition:
                continue
            log.warning("%s/%s: position %s is past the log end %s; the broker lost the log: "
                        "reading the partition from its new beginning", tp.topic, tp.partition, position, highwater)
            self._emit(events.LOG_LOST, topic=tp.topic, partition=tp.partition, position=position,
                       log_end=highwater, group=self._group_id)
            self._partitions[tp] = _Partition(tp)
            self._consumer.seek(tp, 0)
            lost = self._keys.pop(tp, set())
            if lost and self._revoked_hook is not None:
                try:
                    self._revoked_hook(lost)
                except Exception:
                    log.exception("on_revoked failed for %d keys", len(lost))

    async def _take(self, message: Any) -> None:
        tp = TopicPartition(message.topic, message.partition)
        partition = self._partitions.get(tp)
        if partition is None or partition.revoked:
            return  # not ours (any more): the next owner fetches it from the commit
        await self._capacity.acquire()
        if self._partitions.get(tp) is not partition or partition.revoked:
            self._capacity.release()
            return
        if not partition.take(message.offset):
            self._capacity.release()
            return
        key = message.key.decode(errors="replace") if message.key else f"<{tp.topic}/{tp.partition}>"
        self._emit(events.MESSAGE_IN, topic=tp.topic, partition=tp.partition,
                   offset=message.offset, key=key, group=self._group_id, type=records.type_of(message.headers))
        self._keys.setdefault(tp, set()).add(key)
        queue = self._queues.get(key)
        if queue is None:
            assert self._group is not None
            queue = collections.deque()
            self._queues[key] = queue
            self._workers[key] = self._group.create_task(
                self._work(key, queue), name=f"kto-bus-key:{key}"
            )
        queue.append((message, partition))
        wakeup = self._wakeups.get(key)
        if wakeup is not None:
            wakeup.set()

    def lags(self) -> dict[tuple[str, int], int]:
        """Per partition held: records not finished yet, from the first offset not done
        (or the position, when all are) to the log end the last fetch reported."""
        found: dict[tuple[str, int], int] = {}
        for tp, partition in list(self._partitions.items()):
            end = self._consumer.highwater(tp) if self._consumer is not None and not partition.revoked else None
            if partition.pending:
                first: int | None = partition.pending[0]
            elif partition.high >= 0 or partition.position is not None:
                first = max(partition.high + 1, partition.position or 0)
            else:
                first = None
            if end is not None and first is not None:
                found[(tp.topic, tp.partition)] = max(end - first, 0)
        return found

    def backlog(self, key: str) -> int:
        """Records of ``key`` taken in and not yet handled (besides the one being handled)."""
        queue = self._queues.get(key)
        return max(len(queue) - 1, 0) if queue else 0

    async def _work(self, key: str, queue: collections.deque[tuple[Any, _Partition]]) -> None:
        """The serial worker of one key: handles its queue in order, then exits."""
        try:
            if self._settle is None:
                while queue:
                    message, partition = queue[0]
                    await self._process(message)
                    queue.popleft()
                    partition.finish(message.offset)
                    self._capacity.release()
            else:
                await self._work_settling(key, queue)
        finally:
            # No await between the empty check and this: the fetch loop cannot
            # append to a queue whose worker has decided to exit.
            if self._queues.get(key) is queue:
                del self._queues[key]
                self._workers.pop(key, None)
            self._wakeups.pop(key, None)

    async def _work_settling(self, key: str, queue: collections.deque[tuple[Any, _Partition]]) -> None:
        """Take in every queued record of the key, settle once, repeat; offsets are
        finished only after a settle that is done (so a crash re-delivers them)."""
        assert self._settle is not None
        held: list[tuple[Any, _Partition]] = []
        parent: otel_context.Context | None = None
        producers: dict[tuple[int, int], trace.SpanContext] = {}
        """The producer spans of the records taken in (in order, once each): the settle's links."""
        while True:
            while queue and len(held) < MAX_COALESCED:
                message, partition = queue.popleft()
                self._capacity.release()  # taken in: only its offset is held now
                held.append((message, partition))
                taken = await self._process(message)
                if taken is not None:
                    parent = taken.context
                    if taken.producer.is_valid:
                        producers[taken.producer.trace_id, taken.producer.span_id] = taken.producer
            if held and parent is not None:
                flush = self._stopping.is_set() or any(p.revoked for _, p in held)
                delay = await self._settle_key(key, parent, held, flush, [trace.Link(c) for c in producers.values()])
                if delay is not None and not flush:
                    wakeup = self._wakeups.setdefault(key, asyncio.Event())
                    wakeup.clear()
                    if not queue:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(wakeup.wait(), max(delay, 0.0))
                    continue  # take in what arrived and settle again
            for message, partition in held:
                partition.finish(message.offset)
            held.clear()
            parent = None
            producers.clear()
            if not queue:
                return

    async def _settle_key(
        self, key: str, parent: otel_context.Context, held: list[tuple[Any, _Partition]], flush: bool,
        links: list[trace.Link],
    ) -> float | None:
        """Run ``settle`` with retries; a settle that fails for good dead-letters the last record held."""
        settle = self._settle
        assert settle is not None
        last = held[-1][0]
        where = dict(topic=last.topic, partition=last.partition, offset=last.offset, group=self._group_id)

        def on_retry(attempt: int, exc: BaseException, wait: float) -> None:
            self._emit(events.HANDLER_RETRY, key=key, attempt=attempt, error=repr(exc), retry_in=wait,
                       **where)

        with _tracer.start_as_current_span(
            self._settle_span_name, context=parent, links=links,
            attributes={"kto.job_key": key, "messaging.consumer.group.name": self._group_id,
                        "messaging.batch.message_count": len(held), "kto.settle.flush": flush},
        ) as span:
            async with self._slot(key):
                try:
                    delay = await retrying.handle(
                        self._policy, lambda: settle(key, parent, flush),
                        retriable=self._retriable, on_retry=on_retry,
                    )
                except Exception as exc:  # CancelledError is not an Exception: it propagates
                    span.record_exception(exc)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, repr(exc)))
                    kind = "retriable" if self._is_retriable(exc) else "non-retriable"
                    log.warning("settle failed (%s) on %s: %r", kind, key, exc)
                    await self._dead_letter(last, f"{type(exc).__name__} ({kind}): {exc}")
                    return None
            if delay is not None:
                span.set_attribute("kto.settle.again_in", delay)
            return delay

    # -- handling ------------------------------------------------------------

    async def _process(self, message: Any) -> _Taken | None:
        """Decode, drop duplicates, run the handler in the record's ``process`` span;
        that span and the producer's if the handler took the record in (and, with a
        settle, said it changed something)."""
        if self._accept is not None:
            tag = _header(message.headers, records.TYPE_HEADER)
            if tag is not None and not self._accept(tag):
                self._emit(events.MESSAGE_SKIPPED, topic=message.topic, partition=message.partition,
                           offset=message.offset, group=self._group_id, type=tag)
                return None
        parent = tracing.extract(message.headers)
        where = dict(topic=message.topic, partition=message.partition, offset=message.offset,
                     group=self._group_id)
        with _tracer.start_as_current_span(
            spans.process_name(message.topic), context=parent, kind=trace.SpanKind.CONSUMER,
            attributes=spans.processing(message, self._group_id),
        ) as span:
            verdict = None
            if self._keyring is not None:
                verdict = self._keyring.verify(message.key, message.value, message.headers)
                if not verdict.authentic:
                    await self._reject(message, span, verdict.code, verdict.reason)
                    return None
            try:
                record = records.decode(message.value)
            except Exception as exc:  # decode raises MalformedRecord; whatever else must not stall either
                reason = exc.reason if isinstance(exc, records.MalformedRecord) else f"{type(exc).__name__}: {exc}"
                span.set_status(trace.Status(trace.StatusCode.ERROR, reason[:MAX_ERROR_HEADER]))
                log.warning("record %s/%s@%s is not a kto record, dead-lettered: %s", message.topic,
                            message.partition, message.offset, reason[:500])
                await self._dead_letter(message, f"MalformedRecord: {reason}")
                return None
            span.set_attributes(spans.decoded(record))
            if verdict is not None:
                why = signing.permits(verdict.role, record, _header_bytes(message.headers, records.TYPE_HEADER))
                if why:
                    await self._reject(message, span, "role", f"key {verdict.key_id!r}: {why}")
                    return None
            if record.id in self._seen:
                self._seen.move_to_end(record.id)
                self._emit(events.DUPLICATE, key=record.key, record_id=record.id, **where)
                return None
            failure, changed = await self._handle(record, parent, span, where)
            if failure is not None:
                await self._dead_letter(message, failure)
            self._remember(record.id)
            if failure is not None:
                return None
            self._emit(events.MESSAGE_DONE, key=record.key, **where)
            if not changed:
                return None
            return _Taken(trace.set_span_in_context(span, parent), trace.get_current_span(parent).get_span_context())

    async def _handle(
        self,
        record: records.Record,
        parent: otel_context.Context,
        span: trace.Span,
        where: dict[str, Any],
    ) -> tuple[str | None, bool]:
        """Run the handler with retries: (the error text if it failed for good,
        whether the record changed anything)."""

        def on_retry(attempt: int, exc: BaseException, wait: float) -> None:
            self._emit(events.HANDLER_RETRY, key=record.key, attempt=attempt,
                       error=repr(exc), retry_in=wait, **where)

        async with self._handler_slots:
            try:
                result = await retrying.handle(
                    self._policy, lambda: self._handler(record, parent),
                    retriable=self._retriable, on_retry=on_retry,
                )
            except Exception as exc:  # CancelledError is not an Exception: it propagates
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, repr(exc)))
                kind = "retriable" if self._is_retriable(exc) else "non-retriable"
                log.warning("handler failed (%s) on %s: %r", kind, record.key, exc)
                return f"{type(exc).__name__} ({kind}): {exc}", False
        return None, result is not False

    def _slot(self, key: str) -> asyncio.Semaphore | _LaneSlot:
        """What a settle of ``key`` holds while it runs: a handler slot, after one of its lane's."""
        if self._lane is None:
            return self._handler_slots
        lane = self._lane(key)
        slots = self._lanes.get(lane)
        if slots is None:
            slots = self._lanes[lane] = asyncio.Semaphore(self._lane_limit)
        return _LaneSlot(slots, self._handler_slots)

    def _is_retriable(self, exc: BaseException) -> bool:
        if errors.is_retriable(exc):
            return True
        return self._retriable is not None and self._retriable(exc)

    def _remember(self, record_id: str) -> None:
        if self._dedupe_capacity == 0:
            return
        self._seen[record_id] = None
        self._seen.move_to_end(record_id)
        while len(self._seen) > self._dedupe_capacity:
            self._seen.popitem(last=False)

    async def _reject(self, message: Any, span: trace.Span, code: str, reason: str) -> None:
        """A record that is not authentic: never handled, dead-lettered with the reason."""
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"not authentic: {reason}"[:MAX_ERROR_HEADER]))
        log.warning("record %s/%s@%s is not authentic, dead-lettered: %s", message.topic, message.partition,
                    message.offset, reason[:500])
        self._emit(events.REJECTED, topic=message.topic, partition=message.partition, offset=message.offset,
                   group=self._group_id, reason=code)
        await self._dead_letter(message, f"NotAuthentic ({code}): {reason}")

    async def _dead_letter(self, message: Any, error: str) -> None:
        headers = list(message.headers or ()) + [
            ("kto-error", error.encode(errors="replace")[:MAX_ERROR_HEADER]),
            ("kto-source-topic", message.topic.encode()),
            ("kto-source-partition", str(message.partition).encode()),
            ("kto-source-offset", str(message.offset).encode()),
            ("kto-group", self._group_id.encode()),
        ]
        assert self._dlq is not None
        try:
            sent = await self._dlq.send_raw(
                self._settings.dlq_topic, message.value, key=message.key, headers=headers
            )
        except errors.PublishError as exc:
            # The dead-letter topic refused it for good (e.g. too large): say so
            # loudly, but do not stall the partition on it.
            log.error("record %s/%s@%s could not be dead-lettered: %r",
                      message.topic, message.partition, message.offset, exc)
            return
        self._emit(events.DEAD_LETTERED, topic=message.topic, partition=message.partition,
                   offset=message.offset, group=self._group_id, error=error, type=records.type_of(message.headers),
                   dlq_topic=sent.topic, dlq_partition=sent.partition, dlq_offset=sent.offset)

    # -- committing and rebalancing -------------------------------------------

    async def _commit_loop(self) -> None:
        while not self._commits_done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._commits_done.wait(), self._commit_interval)
            if not self._commits_done.is_set():
                await self._commit([p for p in self._partitions.values() if not p.revoked])

    async def _commit(self, partitions: Sequence[_Partition]) -> None:
        offsets = {p.tp: o for p in partitions if (o := p.to_commit()) is not None}
        if not offsets or self._consumer is None:
            return
        if not self._member():
            # The coordinator forgot this member (its session expired, or the broker
            # restarted empty) and it is rejoining: a commit now would go in without a
            # generation, as if from outside the group, possibly into a new log it was
            # never made against. Whoever gets the partitions re-reads from the last
            # commit made as a member; records handled since are handled again.
            self._emit(events.COMMIT_ERROR, group=self._group_id,
                       error="not a member of the group (rejoining): nothing committed",
                       partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in offsets))
            return
        try:
            await self._consumer.commit(offsets)
        except kafka_errors.KafkaError as exc:
            # A rebalance or outage: the next periodic or revoke commit covers it.
            self._emit(events.COMMIT_ERROR, group=self._group_id, error=repr(exc),
                       partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in offsets))
            return
        for partition in partitions:
            if partition.tp in offsets:
                partition.committed = offsets[partition.tp]
                self._emit(events.COMMIT_DONE, topic=partition.tp.topic,
                           partition=partition.tp.partition, offset=offsets[partition.tp],
                           group=self._group_id)

    def _member(self) -> bool:
        """Whether the group coordinator knows this member now (aiokafka resets the
        generation to -1 when it answers that the member id is unknown)."""
        coordinator = getattr(self._consumer, "_coordinator", None)
        return coordinator is None or getattr(coordinator, "generation", 0) != -1

    async def _drain(self, partitions: Sequence[_Partition]) -> None:
        waits = [p.idle.wait() for p in partitions if not p.idle.is_set()]
        if not waits:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*waits), self._drain_timeout)
        except TimeoutError:
            log.warning("records of %s still unfinished after %ss; committing what is done",
                        [f"{p.tp.topic}/{p.tp.partition}" for p in partitions if
                         not p.idle.is_set()], self._drain_timeout)

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        partitions = [p for tp in revoked if (p := self._partitions.get(tp)) is not None]
        for partition in partitions:
            partition.revoked = True
        self._wake_all()
        self._emit(events.PARTITIONS_REVOKED, group=self._group_id,
                   partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in revoked))
        await self._drain(partitions)
        await self._commit(partitions)
        for partition in partitions:
            if self._partitions.get(partition.tp) is partition:
                del self._partitions[partition.tp]
        # Which keys are lost is known once the new assignment is (an eager
        # rebalance revokes everything, then gives most of it back).
        for tp in revoked:
            self._revoked_keys.setdefault(tp, set()).update(self._keys.pop(tp, set()))

    def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        if self._closed:
            return  # a late callback while leaving the group: nothing will be taken in
        for tp in assigned:
            current = self._partitions.get(tp)
            if current is None or current.revoked:
                self._partitions[tp] = _Partition(tp)
            kept = self._revoked_keys.pop(tp, None)
            if kept:
                self._keys.setdefault(tp, set()).update(kept)
        lost = set().union(*self._revoked_keys.values())
        self._revoked_keys.clear()
        if lost and self._revoked_hook is not None:
            try:
                self._revoked_hook(lost)
            except Exception:
                log.exception("on_revoked failed for %d keys", len(lost))
        self._emit(events.PARTITIONS_ASSIGNED, group=self._group_id,
                   partitions=sorted(f"{tp.topic}/{tp.partition}" for tp in assigned))

    def _wake_all(self) -> None:
        """Cut every settle delay short (stopping, revoke): held records are settled now."""
        for wakeup in self._wakeups.values():
            wakeup.set()

    def _unreachable(self, attempt: int, exc: BaseException, wait: float) -> None:
        self._emit(events.BROKER_UNREACHABLE, bootstrap=self._settings.bootstrap,
                   group=self._group_id, attempt=attempt, error=repr(exc), retry_in=wait)
