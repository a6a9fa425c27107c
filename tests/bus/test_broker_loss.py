"""A broker that comes back without its log (Tansu keeps everything in memory): the consumer
notices a committed or fetch position past the new log end, reads the partition again from the
new log's beginning (a member that kept keys of it is told to read them afresh), and skips
nothing published after the restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry import context as otel_context

from realparts import tansu
from shared.bus import consuming, events, producing, records
from shared.bus.settings import KafkaSettings


def key(n: int) -> str:
    return f"test/ns/PyTorchJob/job-{n}"


async def until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


async def commit(kafka: KafkaSettings, group: str, offset: int) -> None:
    """What a worker still running across the restart does on its next commit or revoke."""
    tp = TopicPartition(kafka.jobs_topic, 0)
    client = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group, enable_auto_commit=False)
    await client.start()
    try:
        client.assign([tp])
        await client.commit({tp: offset})
    finally:
        await client.stop()


async def test_offsets_past_the_end_of_a_log_the_broker_lost_are_reset_and_nothing_later_is_skipped() -> None:
    base = KafkaSettings(partitions=1, client_id="kto-loss-test", linger_ms=1, session_timeout_ms=6000,
                         heartbeat_interval_ms=300)
    embedded = tansu.EmbeddedBroker(settings=base)
    await embedded.start()
    kafka = embedded.settings
    port = int(kafka.bootstrap.rsplit(":", 1)[1])
    seen: list[int] = []
    lost: list[events.BusEvent] = []

    async def handle(record: records.Record, parent: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        seen.append(int(record.detail["seq"]))

    def on_event(event: events.BusEvent) -> None:
        if event.name == events.LOG_LOST:
            lost.append(event)

    try:
        async with producing.Publisher(kafka, "test", "t-1") as pub:
            for seq in range(30):
                await pub.publish(records.Decision(key=key(seq % 3), action="x", detail={"seq": seq}))
        await embedded.stop()
        embedded = tansu.EmbeddedBroker(port, settings=base)
        await embedded.start()  # empty: the log, the group and its offsets are gone
        await commit(kafka, "g", 30)
        async with producing.Publisher(kafka, "test", "t-2") as pub:
            for seq in range(100, 105):
                await pub.publish(records.Decision(key=key(seq % 3), action="x", detail={"seq": seq}))
        consumer = consuming.KeyedConsumer(kafka, consuming.ConsumerSettings("g"), handle, on_event=[on_event])
        task = asyncio.create_task(consumer.run())
        try:
            await until(lambda: set(range(100, 105)) <= set(seen), timeout=40)
            assert lost and lost[0].attributes["position"] == 30 and lost[0].attributes["log_end"] == 5
        finally:
            await consumer.stop()
            await task
    finally:
        await embedded.stop()


async def test_a_member_running_across_a_restart_commits_nothing_into_the_new_log() -> None:
    """The broker comes back empty and at once gets more records than the member had read (the
    watcher republished everything). The coordinator no longer knows the member, which rejoins;
    the commit it would make on being revoked carries no generation and, taken by the new
    broker, would point past records of the new log. It commits nothing instead, so the
    partition is read from the new log's beginning and no record of it is skipped."""
    base = KafkaSettings(partitions=1, client_id="kto-loss-test", linger_ms=1, session_timeout_ms=6000,
                         heartbeat_interval_ms=300)
    embedded = tansu.EmbeddedBroker(settings=base)
    await embedded.start()
    kafka = embedded.settings
    port = int(kafka.bootstrap.rsplit(":", 1)[1])
    seen: list[int] = []
    refused: list[events.BusEvent] = []

    async def handle(record: records.Record, parent: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        seen.append(int(record.detail["seq"]))

    def on_event(event: events.BusEvent) -> None:
        if event.name == events.COMMIT_ERROR and "not a member" in event.attributes["error"]:
            refused.append(event)

    # Nothing committed before the restart: the position is committed on the revoke.
    consumer = consuming.KeyedConsumer(kafka, consuming.ConsumerSettings("g", commit_interval=600), handle,
                                       on_event=[on_event])
    task = asyncio.create_task(consumer.run())
    try:
        async with producing.Publisher(kafka, "test", "t-1") as pub:
            for seq in range(30):
                await pub.publish(records.Decision(key=key(seq % 3), action="x", detail={"seq": seq}))
        await until(lambda: set(range(30)) <= set(seen))
        await embedded.stop()
        embedded = tansu.EmbeddedBroker(port, settings=base)
        await embedded.start()
        async with producing.Publisher(kafka, "test", "t-2") as pub:
            for seq in range(100, 140):
                await pub.publish(records.Decision(key=key(seq % 3), action="x", detail={"seq": seq}))
        await until(lambda: set(range(100, 140)) <= set(seen), timeout=40)
        assert refused
    finally:
        await consumer.stop()
        await task
        await embedded.stop()
