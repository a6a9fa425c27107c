"""Record batches compressed by the producer (``KTO_KAFKA_COMPRESSION``, zstd by default) are
stored by the broker and read back by any consumer as they were written."""

from __future__ import annotations

import dataclasses

import pytest

from shared.bus import producing, records
from shared.bus.settings import COMPRESSIONS, KafkaSettings
from tests.bus.test_consuming import read_topic


def test_the_producer_compresses_with_zstd_unless_told_otherwise() -> None:
    assert KafkaSettings().compression == "zstd"
    assert KafkaSettings.from_env({"KTO_KAFKA_COMPRESSION": "none"}).compression == "none"


@pytest.mark.parametrize("compression", COMPRESSIONS)
async def test_each_compression_is_published_and_read_back_as_written(bus: KafkaSettings, compression: str) -> None:
    settings = dataclasses.replace(bus, compression=compression)
    decision = records.Decision(key="kto-1/ns/PyTorchJob/p", action="child_created", child_kind="Pod",
                                child_name="p-worker-0", message="x" * 20_000, source="reconciler", instance="r")
    async with producing.Publisher(settings, "reconciler", "r") as publisher:
        await publisher.publish(decision)
    read = [records.decode(getattr(m, "value")) for m in await read_topic(bus, bus.jobs_topic)]
    assert [(r.id, r.message) for r in read if isinstance(r, records.Decision)] == [(decision.id, decision.message)]
