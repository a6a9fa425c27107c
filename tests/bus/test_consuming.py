"""The keyed consumer against the real (Tansu) broker."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry import context as otel_context

from shared.bus import consuming, errors, events, producing, reading, records
from shared.bus.settings import KafkaSettings

Handler = Callable[[records.Record, otel_context.Context], Awaitable[None]]


def key(n: int | str) -> str:
    return f"test/ns/PyTorchJob/job-{n}"


def decision(k: str, seq: int, **fields: object) -> records.Decision:
    return records.Decision(key=k, action="child_created", detail={"seq": seq}, **fields)  # type: ignore[arg-type]


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


@pytest.fixture
async def publisher(bus: KafkaSettings) -> AsyncIterator[producing.Publisher]:
    async with producing.Publisher(bus, "test", "t-1") as pub:
        yield pub


class Running:
    """A consumer running in a background task."""

    def __init__(self, consumer: consuming.KeyedConsumer, task: asyncio.Task[None]) -> None:
        self.consumer, self.task = consumer, task

    async def stop(self) -> None:
        await self.consumer.stop()
        await self.task


async def start(bus: KafkaSettings, handler: Handler, group: str = "g", **options: object) -> Running:
    """A consumer of group ``group`` running; ``options`` are :class:`ConsumerSettings` fields and
    the consumer's collaborators (``settle``, ``on_event`` …)."""
    fields = {field.name for field in dataclasses.fields(consuming.ConsumerSettings)}
    settings = consuming.ConsumerSettings(group, **{k: v for k, v in options.items() if k in fields})  # type: ignore[arg-type]
    collaborators = {k: v for k, v in options.items() if k not in fields}
    consumer = consuming.KeyedConsumer(bus, settings, handler, **collaborators)  # type: ignore[arg-type]
    await consumer.start()
    return Running(consumer, asyncio.create_task(consumer.run(), name=f"test-consumer:{group}"))


async def read_topic(settings: KafkaSettings, topic: str) -> list[object]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=None,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()] or [
            TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        # Until the broker has nothing more: Tansu's end offsets fall short after
        # a multi-record batch (docs/bus.md).
        out: list[object] = []
        while True:
            batch = await consumer.getmany(*tps, timeout_ms=500)
            if not any(batch.values()):
                return out
            for messages in batch.values():
                out.extend(messages)
    finally:
        await consumer.stop()


async def test_records_of_one_key_are_handled_in_order_and_keys_run_concurrently(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    seen: dict[str, list[int]] = collections.defaultdict(list)
    active: dict[str, int] = collections.defaultdict(int)
    concurrent = 0
    peak = 0

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        nonlocal concurrent, peak
        assert isinstance(record, records.Decision)
        active[record.key] += 1
        assert active[record.key] == 1, "two records of one key at once"
        concurrent += 1
        peak = max(peak, concurrent)
        await asyncio.sleep(random.uniform(0, 0.01))
        seen[record.key].append(record.detail["seq"])
        concurrent -= 1
        active[record.key] -= 1

    await publisher.publish_many([decision(key(k), s) for s in range(25) for k in range(8)])
    running = await start(bus, handle, concurrency_limit=4)
    await until(lambda: sum(map(len, seen.values())) == 200)
    await running.stop()
    assert all(seen[key(k)] == list(range(25)) for k in range(8))
    assert 1 < peak <= 4


def same_partition_keys(partitions: int, count: int) -> list[str]:
    found = [key(n) for n in range(1000) if reading.partition_for_key(key(n), partitions) == 0]
    return found[:count]


async def test_an_offset_is_committed_only_when_every_earlier_record_is_done(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    slow_key, fast_key = same_partition_keys(bus.partitions, 2)
    release = asyncio.Event()
    done: list[int] = []

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        if record.key == slow_key:
            await release.wait()
        done.append(record.detail["seq"])

    first = await publisher.publish(decision(slow_key, 0))
    for seq in (1, 2, 3):
        last = await publisher.publish(decision(fast_key, seq))
    assert first.partition == last.partition == 0
    running = await start(bus, handle, group="gapless", commit_interval=0.1)
    await until(lambda: done == [1, 2, 3])
    await asyncio.sleep(0.5)  # several commit rounds
    committed = await reading.committed_offsets(bus, "gapless")
    assert committed[0] is None or committed[0] <= first.offset
    release.set()
    await until(lambda: len(done) == 4)
    await until(lambda: running.consumer._partitions[TopicPartition(bus.jobs_topic, 0)].committed
                == last.offset + 1)
    assert (await reading.committed_offsets(bus, "gapless"))[0] == last.offset + 1
    await running.stop()


async def test_a_restarted_consumer_resumes_after_the_committed_offset(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    handled: list[int] = []

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        handled.append(record.detail["seq"])

    await publisher.publish_many([decision(key(1), s) for s in range(5)])
    running = await start(bus, handle, group="resume")
    await until(lambda: len(handled) == 5)
    await running.stop()
    await publisher.publish_many([decision(key(1), s) for s in range(5, 8)])
    running = await start(bus, handle, group="resume")
    await until(lambda: len(handled) == 8)
    await asyncio.sleep(0.3)
    await running.stop()
    assert handled == list(range(8))


async def test_two_members_split_partitions_and_rebalance_without_loss_or_disorder(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    order: dict[str, list[int]] = collections.defaultdict(list)
    by_member: dict[str, set[str]] = collections.defaultdict(set)

    def handler(member: str) -> Handler:
        async def handle(record: records.Record, _: otel_context.Context) -> None:
            assert isinstance(record, records.Decision)
            await asyncio.sleep(0.002)
            order[record.key].append(record.detail["seq"])
            by_member[member].add(record.key)
        return handle

    keys = [key(n) for n in range(16)]
    total = 0

    async def produce(rounds: int) -> None:
        nonlocal total
        for _ in range(rounds):
            await publisher.publish_many([decision(k, total) for k in keys])
            total += 1
            await asyncio.sleep(0.02)

    a = await start(bus, handler("a"), group="pair", commit_interval=0.2)
    await produce(20)
    await until(lambda: bool(a.consumer.assignment))
    b = await start(bus, handler("b"), group="pair", commit_interval=0.2)
    await produce(30)
    await until(lambda: len(a.consumer.assignment) + len(b.consumer.assignment) == bus.partitions
                and bool(a.consumer.assignment) and bool(b.consumer.assignment))
    assert not a.consumer.assignment & b.consumer.assignment
    await produce(20)
    await a.stop()  # a leaves: b takes every partition
    await produce(20)
    await until(lambda: all(len(order[k]) >= total and set(order[k]) == set(range(total))
                            for k in keys), timeout=40)
    await until(lambda: len(b.consumer.assignment) == bus.partitions)
    await b.stop()
    for k in keys:
        assert order[k] == list(range(total)), f"{k}: lost, repeated or out of order"
    assert by_member["a"] and by_member["b"]


async def test_a_duplicate_record_is_handled_once(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    handled: list[str] = []

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        handled.append(record.id)

    seen_events: list[events.BusEvent] = []
    twice = decision(key(1), 0, id=records.deterministic_id("created", "pod-0"))
    await publisher.publish(twice)
    await publisher.publish(twice)
    await publisher.publish(decision(key(1), 1))
    running = await start(bus, handle, on_event=[seen_events.append])
    await until(lambda: len(handled) == 2)
    await until(lambda: any(e.name == events.DUPLICATE for e in seen_events))
    await running.stop()
    assert handled[0] == twice.id and handled.count(twice.id) == 1


async def test_a_poison_record_goes_to_the_dead_letter_topic_and_the_partition_moves_on(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    handled: list[int] = []
    attempts: collections.Counter[int] = collections.Counter()

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        attempts[record.detail["seq"]] += 1
        if record.detail["seq"] == 2:
            raise ValueError("cannot handle seq 2")
        handled.append(record.detail["seq"])

    k = key(7)
    await publisher.publish(decision(k, 0))
    poison = await publisher.send_raw(bus.jobs_topic, b"{oops", key=k.encode(),
                                      headers=[("traceparent", b"garbage")])
    await publisher.publish(decision(k, 1))
    await publisher.publish(decision(k, 2))
    await publisher.publish(decision(k, 3))
    running = await start(bus, handle, group="poison")
    await until(lambda: handled == [0, 1, 3])
    await running.stop()
    assert attempts[2] == 1, "a non-retriable error is dead-lettered at once"
    dead = await read_topic(bus, bus.dlq_topic)
    assert len(dead) == 2
    malformed, failed = sorted(dead, key=lambda m: m.offset)  # type: ignore[attr-defined]
    malformed_headers = dict(malformed.headers)  # type: ignore[attr-defined]
    assert malformed.value == b"{oops" and malformed.key == k.encode()  # type: ignore[attr-defined]
    assert b"not JSON" in malformed_headers["kto-error"]
    assert malformed_headers["kto-source-topic"] == bus.jobs_topic.encode()
    assert malformed_headers["kto-source-partition"] == str(poison.partition).encode()
    assert malformed_headers["kto-source-offset"] == str(poison.offset).encode()
    assert b"cannot handle seq 2" in dict(failed.headers)["kto-error"]  # type: ignore[attr-defined]
    committed = await reading.committed_offsets(bus, "poison")
    assert committed[poison.partition] == poison.offset + 4


async def test_a_retriable_error_is_retried_until_the_handler_succeeds(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    calls: collections.Counter[int] = collections.Counter()
    handled: list[int] = []

    class Flaky(Exception):
        pass

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        seq = record.detail["seq"]
        calls[seq] += 1
        if seq == 0 and calls[seq] < 3:
            raise errors.Retriable("API server said 503")
        if seq == 1 and calls[seq] < 2:
            raise Flaky("marked retriable by the handler's predicate")
        handled.append(seq)

    await publisher.publish_many([decision(key(3), 0), decision(key(3), 1)])
    running = await start(bus, handle, group="retry",
                          retriable=lambda exc: isinstance(exc, Flaky))
    await until(lambda: handled == [0, 1])
    await running.stop()
    assert calls == {0: 3, 1: 2}
    assert await read_topic(bus, bus.dlq_topic) == []


async def test_a_record_that_keeps_failing_retriably_is_dead_lettered_after_bounded_attempts(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    calls = 0
    handled: list[int] = []

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        nonlocal calls
        assert isinstance(record, records.Decision)
        if record.detail["seq"] == 0:
            calls += 1
            raise errors.Retriable("still down")
        handled.append(record.detail["seq"])

    await publisher.publish_many([decision(key(4), 0), decision(key(4), 1)])
    running = await start(bus, handle, group="exhaust")
    await until(lambda: handled == [1])
    await running.stop()
    assert calls == 4
    [dead] = await read_topic(bus, bus.dlq_topic)
    assert b"retriable" in dict(dead.headers)["kto-error"]  # type: ignore[attr-defined]


async def test_the_handler_runs_in_a_span_under_the_publisher_trace(
    bus: KafkaSettings, publisher: producing.Publisher
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    got: list[tuple[int, int]] = []

    async def handle(record: records.Record, ctx: otel_context.Context) -> None:
        parent = trace.get_current_span(ctx).get_span_context()
        got.append((parent.trace_id, trace.get_current_span().get_span_context().trace_id))

    with TracerProvider().get_tracer("test").start_as_current_span("watch event") as span:
        await publisher.publish(decision(key(5), 0))
    running = await start(bus, handle, group="trace")
    await until(lambda: len(got) == 1)
    await running.stop()
    parent_trace, _ = got[0]
    assert parent_trace == span.get_span_context().trace_id
