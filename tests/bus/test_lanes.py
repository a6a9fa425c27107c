"""Lanes of the keyed consumer (one per cluster in the workers): the settles of one lane
hold at most ``lane_limit`` slots, so a lane whose settles hang leaves the others theirs.
Against the real (Tansu) broker."""

from __future__ import annotations

import asyncio

from opentelemetry import context as otel_context

from shared.bus import producing, records
from shared.bus.settings import KafkaSettings
from tests.bus.test_consuming import Running, decision, publisher, start, until

__all__ = ["publisher"]  # the fixture, used by name


def job_key(cluster: str, n: int) -> str:
    return f"{cluster}/ns/PyTorchJob/job-{n}"


class Frozen:
    """Settles that hang for the keys of cluster ``frozen`` until released; the others return at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.hanging: set[str] = set()
        self.settled: list[str] = []

    async def handle(self, record: records.Record, _: otel_context.Context) -> bool:
        return True

    async def settle(self, key: str, _: otel_context.Context, flush: bool) -> None:
        if key.startswith("frozen/"):
            self.hanging.add(key)
            await self.release.wait()
        self.settled.append(key)

    def others(self) -> list[str]:
        return [k for k in self.settled if not k.startswith("frozen/")]

    async def start(self, bus: KafkaSettings, publisher: producing.Publisher, group: str, **lanes: object) -> Running:
        await publisher.publish_many([decision(job_key("frozen", n), 0) for n in range(6)])
        return await start(bus, self.handle, group=group, settle=self.settle, concurrency_limit=4, **lanes)


async def test_keys_of_a_lane_whose_settles_hang_leave_the_other_lanes_their_slots(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    frozen = Frozen()
    running = await frozen.start(bus, publisher, "lanes", lane=lambda key: key.split("/", 1)[0], lane_limit=2)
    try:
        await until(lambda: len(frozen.hanging) == 2)
        await publisher.publish_many([decision(job_key(c, n), 0) for c in ("a", "b") for n in range(5)])
        await until(lambda: len(frozen.others()) == 10)
        assert len(frozen.hanging) == 2, "a lane took more than its slots"
        frozen.release.set()
        await until(lambda: len(frozen.settled) == 16)
    finally:
        frozen.release.set()
        await running.stop()
    assert len(frozen.hanging) == 6 and len(set(frozen.settled)) == 16


async def test_without_lanes_hung_settles_can_take_every_slot(
    bus: KafkaSettings, publisher: producing.Publisher,
) -> None:
    """What lanes are for: the same run with none stalls the other keys."""
    frozen = Frozen()
    running = await frozen.start(bus, publisher, "no-lanes")
    try:
        await until(lambda: len(frozen.hanging) == 4)
        await publisher.publish(decision(job_key("a", 0), 0))
        await asyncio.sleep(1.0)
        assert frozen.others() == [], "a free slot was left"
        frozen.release.set()
        await until(lambda: job_key("a", 0) in frozen.settled)
    finally:
        frozen.release.set()
        await running.stop()
