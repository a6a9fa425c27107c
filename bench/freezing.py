"""One cluster frozen, the others timed: ``kto bench --clusters N --freeze SECONDS``.

In: a running kto (:class:`bench.costs.Running`, a ``kto.stack.Stack``) of two clusters or more and
:class:`FreezeSettings`. Out: :func:`run` → the ``freeze`` figures of ``kto
bench``: how long jobs of the healthy clusters take from their POST to all
their pods Running and to Succeeded, with every cluster up and while the last
cluster is frozen, and how long the frozen cluster's jobs take to catch up
once it is thawed.

The run (one clock: this process's ``time.monotonic()``, job states polled
every 50 ms, so figures are ±50 ms):

1. **all up** — ``jobs`` jobs on each healthy cluster;
2. the reconcilers are paused (SIGSTOP), ``frozen_jobs`` jobs are POSTed to the
   last cluster and their ADDED observations read back from the jobs topic, the
   cluster is frozen (SIGSTOP of its API server and whatever its process
   started: nothing answers, connections stay open) and the reconcilers thawed:
   they now hold more of its job keys than they have slots, each settle waiting
   on a request nothing answers;
3. **frozen, unanswered** — ``jobs`` jobs on each healthy cluster at once (the
   frozen cluster's requests still wait for an answer);
4. **frozen, backing off** — the same once the workers have given up on those
   requests (:class:`~shared.kube.reaching.ReachSettings` ``request_timeout``
   plus 2 s after the freeze): the frozen cluster's keys wait and probe;
5. after ``seconds`` in all the cluster is thawed (SIGCONT, same state and
   port): **catch-up** of the frozen cluster's jobs, timed from the thaw;
6. the records dead-lettered meanwhile are counted (none expected).
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from typing import Any

from bench import costs, pipeline
from shared.bus import reading, records
from shared.kube import clients, reaching, resources

POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class FreezeSettings:
    seconds: float = 30.0
    """How long the last cluster stays frozen."""
    jobs: int = 2
    """Jobs per healthy cluster in each timed window."""
    frozen_jobs: int = 34
    """Jobs of the frozen cluster taken in just before it freezes: more than a reconciler's slots."""
    replicas: int = 8
    pod_duration: str = "1s"
    namespace: str = "default"
    timeout: float = 120.0
    """Seconds a window waits for its jobs (those not done by then are reported as such)."""


@dataclasses.dataclass
class _Timed:
    context: str
    name: str
    started: float
    running: float | None = None
    succeeded: float | None = None


def _summary(timed: list[_Timed]) -> dict[str, Any]:
    def spread(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}

    return {
        "jobs": len(timed),
        "succeeded": sum(1 for t in timed if t.succeeded is not None),
        "to_all_pods_running_s": spread([t.running - t.started for t in timed if t.running is not None]),
        "to_succeeded_s": spread([t.succeeded - t.started for t in timed if t.succeeded is not None]),
    }


async def _submit(kube: dict[str, clients.KubeClient], jobs: list[tuple[str, str]], s: FreezeSettings) -> list[_Timed]:
    timed = []
    for context, name in jobs:
        manifest = pipeline.job_manifest(name, s.namespace, s.replicas, s.pod_duration)
        await kube[context].create(pipeline.PYTORCHJOBS, s.namespace, manifest)
        timed.append(_Timed(context, name, time.monotonic()))
    return timed


async def _follow(
    kube: dict[str, clients.KubeClient], timed: list[_Timed], s: FreezeSettings, since: float | None = None,
) -> list[_Timed]:
    """Poll until every job Succeeded (or the time limit); ``since`` restarts their clocks (a thaw)."""
    if since is not None:
        for t in timed:
            t.started = since
    deadline = time.monotonic() + s.timeout
    while any(t.succeeded is None for t in timed) and time.monotonic() < deadline:
        for t in timed:
            client = kube[t.context]
            if t.running is None:
                pods, _ = await client.list(resources.PODS, s.namespace,
                                            label_selector=f"{pipeline.JOB_NAME_LABEL}={t.name}")
                if len(pods) == s.replicas and all(
                        (p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods):
                    t.running = time.monotonic()
            if t.succeeded is None:
                job = await client.get(pipeline.PYTORCHJOBS, s.namespace, t.name)
                if any(c.get("type") == "Succeeded" and c.get("status") == "True"
                       for c in (job.get("status") or {}).get("conditions") or []):
                    t.succeeded = time.monotonic()
        await asyncio.sleep(POLL_S)
    return timed


async def _window(
    kube: dict[str, clients.KubeClient], healthy: list[str], label: str, s: FreezeSettings,
) -> dict[str, Any]:
    names = [(c, f"{label}-{i}") for c in healthy for i in range(s.jobs)]
    return _summary(await _follow(kube, await _submit(kube, names, s), s))


async def _until_observed(bus: Any, keys: set[str], timeout: float) -> None:
    """Return once the ADDED observation of every job key is on the jobs topic."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while seen != keys:
        async for raw in reading.scan(bus, accept=lambda key: key in keys and key not in seen):
            record = raw.decoded().record
            if isinstance(record, records.Observation) and record.event == "ADDED" and record.object_kind == "PyTorchJob":
                seen.add(raw.key)
        if time.monotonic() > deadline:
            raise pipeline.BenchError(f"{len(keys - seen)} jobs of the cluster to freeze never reached the topic")
        await asyncio.sleep(0.1)


async def run(running: costs.Running, s: FreezeSettings) -> dict[str, Any]:
    if len(running.contexts) < 2:
        raise pipeline.BenchError("--freeze needs two clusters or more (--clusters)")
    frozen, healthy = running.contexts[-1], list(running.contexts[:-1])
    # The cluster's own process: ``sim-kto-N`` or ``control-plane-kto-N`` (not its watcher).
    part = next(c.name for c in running.children
                if c.name.endswith(f"-{frozen}") and not c.name.startswith("watcher-"))
    workers = [c.name for c in running.children if c.name.startswith("reconciler-")]
    began_ms = int(time.time() * 1000)
    kube = {context: await running.client(context) for context in running.contexts}
    try:
        all_up = await _window(kube, healthy, "up", s)
        names = [f"frozen-{i}" for i in range(s.frozen_jobs)]
        for worker in workers:
            running.pause(worker)
        try:
            held = await _submit(kube, [(frozen, n) for n in names], s)
            await _until_observed(running.kafka, {f"{frozen}/{s.namespace}/PyTorchJob/{n}" for n in names}, s.timeout)
            running.pause(part)
        finally:
            for worker in workers:
                running.resume(worker)
        frozen_at = time.monotonic()
        try:
            await asyncio.sleep(1.0)  # the workers take the frozen cluster's keys in and wait on it
            unanswered = await _window(kube, healthy, "unanswered", s)
            give_up = frozen_at + reaching.ReachSettings().request_timeout + 2.0
            await asyncio.sleep(max(0.0, give_up - time.monotonic()))
            backing_off = await _window(kube, healthy, "backoff", s)
            await asyncio.sleep(max(0.0, frozen_at + s.seconds - time.monotonic()))
        finally:
            running.resume(part)
        thawed = time.monotonic()
        catch_up = _summary(await _follow(kube, held, s, since=thawed))
    finally:
        for client in kube.values():
            await asyncio.shield(client.close())
    dead = [raw async for raw in reading.scan(running.kafka, accept=lambda key: True, since_ms=began_ms,
                                              topic=running.kafka.dlq_topic)]
    return {
        "frozen_cluster": frozen, "frozen_s": round(thawed - frozen_at, 1), "frozen_jobs": s.frozen_jobs,
        "all_up": all_up, "frozen_unanswered": unanswered, "frozen_backing_off": backing_off,
        "catch_up_after_thaw": catch_up, "dead_letters": len(dead),
    }
