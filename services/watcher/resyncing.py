"""Periodic resync: every live job re-published, so a lost record heals.

In: a :class:`~services.watcher.watching.Watcher` (its inventory of live jobs,
kept current by its watches) and the resync interval.
Out: one RESYNCED observation per live job every interval, under the job key,
with the job as last seen. Consumers are level-triggered, so a RESYNCED record
makes them reconcile from the current object even if an earlier record was
lost (e.g. by a broker that restarted empty).
"""

from __future__ import annotations

import asyncio
import logging

from services.watcher import watching

log = logging.getLogger("kto.watcher.resync")


async def resync_once(watcher: watching.Watcher) -> int:
    """Publish RESYNCED for every live job the watcher knows; how many were published."""
    count = 0
    for known in watcher.inventory.jobs():
        if known.key is None:
            continue
        obj = known.object  # unpacked once (the inventory holds it packed)
        await watcher.publish("RESYNCED", str(obj.get("kind") or known.key.kind), obj, known.key)
        count += 1
    return count


async def resync_forever(watcher: watching.Watcher, interval: float) -> None:
    """Every ``interval`` seconds, :func:`resync_once`. A failed round is logged and
    the next one runs on time; cancellation ends the loop."""
    loop = asyncio.get_running_loop()
    next_at = loop.time() + interval
    while True:
        await asyncio.sleep(max(0.0, next_at - loop.time()))
        next_at = loop.time() + interval
        try:
            count = await resync_once(watcher)
        except Exception:
            log.exception("resync of cluster %s failed; next one in %.0fs", watcher.settings.cluster, interval)
            continue
        log.debug("resync of cluster %s: %d jobs", watcher.settings.cluster, count)
