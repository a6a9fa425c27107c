"""Acting once per burst (``settle``), type-filtered consuming and pipelined
sends, against the real (Tansu) broker."""

from __future__ import annotations

import asyncio
import collections

from opentelemetry import context as otel_context

from shared.bus import consuming, producing, reading, records
from shared.bus.settings import KafkaSettings
from tests.bus.test_consuming import decision, key, publisher, read_topic, start, until

__all__ = ["publisher"]  # the fixture, used by name


async def test_a_burst_of_one_key_is_taken_in_record_by_record_and_settled_fewer_times(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    k = key("burst")
    sent = await publisher.publish_many([decision(k, seq) for seq in range(40)])
    taken: list[int] = []
    settled_after: list[int] = []

    async def handle(record: records.Record, _: otel_context.Context) -> bool:
        assert isinstance(record, records.Decision)
        taken.append(record.detail["seq"])
        await asyncio.sleep(0)
        return True

    async def settle(job_key: str, _: otel_context.Context, flush: bool) -> None:
        assert job_key == k
        settled_after.append(len(taken))

    running = await start(bus, handle, group="burst", settle=settle)
    await until(lambda: settled_after and settled_after[-1] == 40)
    await running.stop()
    assert taken == list(range(40)), "every record is taken in, in order"
    assert len(settled_after) < 40, "records that arrived together are settled together"
    committed = await reading.committed_offsets(bus, "burst")
    assert committed[sent[-1].partition] == sent[-1].offset + 1


async def test_a_settle_that_asks_for_time_holds_its_offsets_until_it_is_done(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    k = key("later")
    first = await publisher.publish(decision(k, 0))
    calls: list[tuple[float, bool]] = []
    loop = asyncio.get_running_loop()

    async def handle(record: records.Record, _: otel_context.Context) -> bool:
        return True

    async def settle(job_key: str, _: otel_context.Context, flush: bool) -> float | None:
        calls.append((loop.time(), flush))
        return 1.0 if len(calls) == 1 else None

    running = await start(bus, handle, group="later", settle=settle, commit_interval=0.1)
    await until(lambda: len(calls) == 1)
    await asyncio.sleep(0.4)
    held = await reading.committed_offsets(bus, "later")
    assert held[first.partition] in (None, first.offset), "nothing past a record whose settle is pending"
    await until(lambda: len(calls) == 2)
    assert calls[1][0] - calls[0][0] >= 0.9, "called again after the delay it asked for"
    await running.stop()
    done = await reading.committed_offsets(bus, "later")
    assert done[first.partition] == first.offset + 1


async def test_stopping_flushes_a_pending_settle(bus: KafkaSettings, publisher: producing.Publisher) -> None:
    k = key("flush")
    first = await publisher.publish(decision(k, 0))
    calls: list[bool] = []

    async def handle(record: records.Record, _: otel_context.Context) -> bool:
        return True

    async def settle(job_key: str, _: otel_context.Context, flush: bool) -> float | None:
        calls.append(flush)
        return 60.0  # ignored once flushing

    running = await start(bus, handle, group="flush", settle=settle)
    await until(lambda: len(calls) == 1)
    async with asyncio.timeout(15):
        await running.stop()
    assert calls == [False, True]
    committed = await reading.committed_offsets(bus, "flush")
    assert committed[first.partition] == first.offset + 1


async def test_a_failing_settle_dead_letters_the_last_record_and_the_key_moves_on(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    k = key("settle-fails")
    await publisher.publish(decision(k, 0))
    last = await publisher.publish(decision(k, 1))
    settled: list[int] = []
    taken: list[int] = []

    async def handle(record: records.Record, _: otel_context.Context) -> bool:
        assert isinstance(record, records.Decision)
        taken.append(record.detail["seq"])
        return True

    async def settle(job_key: str, _: otel_context.Context, flush: bool) -> None:
        settled.append(taken[-1])
        if taken[-1] < 2:
            raise ValueError("no good")

    running = await start(bus, handle, group="settle-fails", settle=settle)
    await until(lambda: taken == [0, 1] and len(settled) >= 1)
    await publisher.publish(decision(k, 2))
    await until(lambda: settled and settled[-1] == 2)
    await running.stop()
    dead = await read_topic(bus, bus.dlq_topic)
    assert len(dead) == len([s for s in settled if s < 2]) >= 1
    headers = dict(dead[-1].headers)  # type: ignore[attr-defined]
    assert b"no good" in headers["kto-error"]
    assert headers["kto-source-offset"] == str(last.offset).encode()


async def test_records_the_consumer_does_not_accept_are_passed_over_and_committed(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    k = key("typed")
    wanted = records.Decision(key=k, action="timer_fired")
    await publisher.publish(decision(k, 0))  # child_created: not wanted
    last = await publisher.publish(wanted)
    tags: list[str] = []
    handled: list[str] = []

    def accept(tag: str) -> bool:
        tags.append(tag)
        return tag == "decision:timer_fired"

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        handled.append(record.action)

    running = await start(bus, handle, group="typed", accept=accept)
    await until(lambda: handled == ["timer_fired"])
    await asyncio.sleep(1.2)
    await running.stop()
    assert tags == ["decision:child_created", "decision:timer_fired"]
    committed = await reading.committed_offsets(bus, "typed")
    assert committed[last.partition] == last.offset + 1


async def test_submitted_records_resolve_in_order_and_are_all_read_back(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    """Hundreds of records handed to the producer without waiting go out in
    multi-record batches; every one is stored, in order, and read back in full
    (Tansu reports a short end offset after such batches: reading goes past it)."""
    keys = [key(f"submit-{n}") for n in range(5)]
    futures = [await publisher.submit(decision(keys[seq % 5], seq)) for seq in range(300)]
    sent = await asyncio.gather(*futures)
    by_partition: dict[int, list[int]] = collections.defaultdict(list)
    for where in sent:
        by_partition[where.partition].append(where.offset)
    for offsets in by_partition.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for n, k in enumerate(keys):
        history = await reading.read_history(bus, k)
        assert [r.detail["seq"] for r in history] == list(range(n, 300, 5))  # type: ignore[union-attr]


async def test_a_member_is_told_the_keys_of_the_partitions_it_lost(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    keys = [key(f"moving-{n}") for n in range(16)]
    handled: set[str] = set()
    forgotten: set[str] = set()

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        handled.add(record.key)

    async def ignore(record: records.Record, _: otel_context.Context) -> None:
        return None

    a = await start(bus, handle, group="moving", on_revoked=forgotten.update)
    await publisher.publish_many([decision(k, 0) for k in keys])
    await until(lambda: handled == set(keys))
    b = await start(bus, ignore, group="moving")
    await until(lambda: bool(a.consumer.assignment) and bool(b.consumer.assignment)
                and len(a.consumer.assignment) + len(b.consumer.assignment) == bus.partitions)
    moved = {tp.partition for tp in b.consumer.assignment}
    expected = {k for k in keys if reading.partition_for_key(k, bus.partitions) in moved}
    await until(lambda: expected <= forgotten)  # while a still runs: told at the rebalance
    assert expected, "b took partitions holding some of the keys"
    assert not forgotten - expected, "keys of partitions a kept are kept"
    await b.stop()
    await a.stop()
