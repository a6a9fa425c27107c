"""A consumer's lag per partition (read by ``kto_consumer_lag``) against the real (Tansu) broker."""

from __future__ import annotations

import asyncio

from opentelemetry import context as otel_context

from shared.bus import producing, records
from shared.bus.settings import KafkaSettings
from tests.bus.test_consuming import decision, key, start, until


async def test_lag_counts_the_records_not_finished_and_falls_to_zero_once_they_are(bus: KafkaSettings) -> None:
    release = asyncio.Event()
    handled: list[int] = []

    async def handler(record: records.Record, _: otel_context.Context) -> None:
        await release.wait()
        assert isinstance(record, records.Decision)
        handled.append(int(record.detail["seq"]))

    running = await start(bus, handler, group="lag")
    try:
        await until(lambda: len(running.consumer.lags()) == bus.partitions)
        assert sum(running.consumer.lags().values()) == 0, "nothing published yet"
        async with producing.Publisher(bus, "test", "t-1") as publisher:
            for seq in range(5):
                await publisher.publish(decision(key(1), seq))
        # The first record is held by its handler: it and the four behind it are not finished.
        await until(lambda: sum(running.consumer.lags().values()) == 5)
        lagging = [tp for tp, lag in running.consumer.lags().items() if lag]
        assert lagging and all(topic == bus.jobs_topic for topic, _ in lagging) and len(lagging) == 1
        release.set()
        await until(lambda: handled == list(range(5)) and sum(running.consumer.lags().values()) == 0)
    finally:
        release.set()
        await running.stop()
    assert running.consumer.lags() == {}, "a stopped consumer holds no partition"
