"""History reads, key placement, the embedded broker and `kto broker`."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys

from realparts import tansu
from shared.bus import producing, reading, records, topics
from shared.bus.settings import KafkaSettings


async def test_read_history_returns_one_keys_records_in_order(bus: KafkaSettings) -> None:
    mine = "east/ml/TFJob/resnet"
    async with producing.Publisher(bus, "test", "t-1") as publisher:
        for seq in range(6):
            await publisher.publish(records.Decision(key=mine, action="child_created",
                                                     detail={"seq": seq}))
            await publisher.publish(records.Decision(key=f"east/ml/TFJob/other-{seq}",
                                                     action="child_created"))
        await publisher.publish(records.Observation(
            key=mine, object_kind="TFJob", event="DELETED", object={"kind": "TFJob"}))
    history = await reading.read_history(bus, records.JobKey.parse(mine))
    assert [r.key for r in history] == [mine] * 7
    assert [r.detail["seq"] for r in history[:6] if isinstance(r, records.Decision)] == list(range(6))
    assert isinstance(history[-1], records.Observation) and history[-1].source == "test"
    assert await reading.read_history(bus, "east/ml/TFJob/never") == []


async def test_keys_land_where_partition_for_key_says(bus: KafkaSettings) -> None:
    async with producing.Publisher(bus, "test", "t-1") as publisher:
        sent = await publisher.publish_many(
            [records.Decision(key=f"c/ns/MPIJob/j{n}", action="x") for n in range(40)])
    assert [s.partition for s in sent] == [
        reading.partition_for_key(f"c/ns/MPIJob/j{n}", bus.partitions) for n in range(40)]
    assert len({s.partition for s in sent}) == bus.partitions


async def test_ensure_topics_leaves_existing_topics_alone(bus: KafkaSettings) -> None:
    await topics.ensure_topics(bus)
    await topics.ensure_topics(dataclasses.replace(bus, partitions=bus.partitions + 1))
    assert len(await reading.committed_offsets(bus, "nobody")) == bus.partitions


async def test_an_embedded_broker_starts_serves_and_stops_twice() -> None:
    settings = KafkaSettings(partitions=2, jobs_topic="j", dlq_topic="d")
    async with tansu.EmbeddedBroker(settings=settings) as embedded:
        assert embedded.bootstrap.startswith("127.0.0.1:")
        async with producing.Publisher(embedded.settings, "test", "t") as publisher:
            await publisher.publish(records.Decision(key="a/b/C/d", action="x"))
        assert len(await reading.read_history(embedded.settings, "a/b/C/d")) == 1
        await embedded.stop()
    await embedded.stop()


# The command module run the way kto.cli runs it, without importing every other
# command (one missing or broken command must not fail this test).
RUN_BROKER_COMMAND = """
import argparse, sys
from kto import cli
from kto.commands import broker
parser = argparse.ArgumentParser(prog="kto broker")
broker.add_arguments(parser)
sys.exit(broker.run(parser.parse_args(sys.argv[1:])))
"""


def test_kto_broker_is_registered() -> None:
    from kto import cli

    assert cli.COMMANDS["broker"] == "kto.commands.broker"


def test_kto_broker_prints_ready_and_stops_on_sigterm() -> None:
    env = {**os.environ, "KTO_KAFKA_JOBS_TOPIC": "cli.jobs"}
    process = subprocess.Popen(
        [sys.executable, "-c", RUN_BROKER_COMMAND, "--partitions", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ready 127.0.0.1:"), line
        bootstrap = line.split()[1]
        settings = KafkaSettings(bootstrap=bootstrap, jobs_topic="cli.jobs", partitions=3)
        offsets = asyncio.run(reading.committed_offsets(settings, "g"))
        assert sorted(offsets) == [0, 1, 2]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert process.stdout.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
