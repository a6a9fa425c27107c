"""Live jobs: N PyTorchJobs whose pods keep running, submitted at once and held, and what they cost.

In: a running kto (:class:`costs.Running`, a :class:`kto.stack.Stack`) and
:class:`LiveSettings` (how many jobs, pods per job, how long to wait and hold).
Out: :func:`run` → the figures of ``kto bench --live-jobs`` (a dict, printed as
JSON) and :func:`table`, the same as lines for a reader; :class:`pipeline.BenchError`
when not every job materialised in time (how many did is in its message).

How each figure is taken (one clock: this process's ``time.monotonic()``):

* the jobs (those of bench/pipeline.py, their pods annotated to run
  ``sim.kto.dev/duration`` = :data:`FOREVER`, far longer than any run, so
  they stay Running) are POSTed round-robin over the clusters by
  :data:`SUBMITTERS` concurrent clients per cluster, each sending the next as
  soon as the API server answered the last: the create ceiling of the
  submission itself, with no rate;
* ``first_submit_to_all_pods_created_s`` — from the first POST to the ADDED
  event, on this process's pod watch, of the last of the N × replicas pods;
  ``first_submit_to_all_running_s`` — to the last job seen on the job watch
  with its ``Running`` condition True;
* after every job is Running and every pod exists, the stack is held
  ``hold`` seconds, then measured: ``rss_mb`` — resident memory (VmRSS, from
  /proc) of each process of the stack and what it started (each watcher,
  reconciler and status worker, the broker, each cluster: a sim, or a real
  control plane's etcd, kube-apiserver, controllers and node agent together),
  before the first POST and after the hold; ``rss_kb_per_live_job`` — each
  process's growth divided by the live jobs; ``rss_kb_per_object`` — the
  same divided by the objects the jobs put in the clusters (each job, its
  pods and its headless Services: 2 × replicas + 1);
* ``cpu_ms_per_job`` — CPU time (user + system, /proc) each process used from
  the first POST to the end of the hold, divided by the jobs, and summed per
  service in ``cpu_ms_per_job_by_service``;
* ``topic`` — the records on the jobs topic from the first POST (read back
  from the broker: bench/costs.py): their count and payload bytes (key, value,
  headers) per job; on Kafka also, in its ``log.dirs``, ``segment_bytes``: the
  size of the topic's segment files (the records as stored, with Kafka's batch
  framing), and ``disk_bytes``: the blocks its partition directories take
  (segments and indexes; an index file is preallocated, 10 MiB, but sparse);
  Tansu keeps its log in memory, in the broker's ``rss_mb``;
* ``costs`` — bench/costs.py's figures over the same span (records by type,
  API requests per job per cluster …).

Every 10 s a progress line says how many jobs are submitted, have every pod and are
Running, and each process's resident memory then; a run that times out says the same in
its error, with each process's memory and CPU seconds at that moment, so that a run too
large for the machine still shows how far it got and what held the memory.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import pathlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from bench import costs, pipeline
from shared.kube import clients, resources

FOREVER = "24h"
"""How long each pod of a live job runs: far longer than any run, so every pod stays Running."""

SUBMITTERS = 16
"""Concurrent clients POSTing the jobs to each cluster (as many as the create ceiling is measured with)."""

PODS_PER_NODE = 100
"""Pods put on one simulated node when the node count is chosen for the jobs: a node takes 110
(kube's default ``max-pods``, sim/node/nodes.py), and the scheduler spreads them unevenly."""


class Running(costs.Running, Protocol):
    """What the live run reads of a running ``kto.stack.Stack`` beyond what bench/costs.py does."""

    @property
    def kubeconfig(self) -> pathlib.Path: ...

    @property
    def state_dir(self) -> pathlib.Path: ...

    def cpu_seconds(self) -> dict[str, float]: ...


@dataclasses.dataclass(frozen=True)
class LiveSettings:
    jobs: int = 1000
    """PyTorchJobs to submit and keep running (spread round-robin over the clusters)."""
    replicas: int = 8
    """Pods per job: 1 Master + replicas-1 Workers."""
    namespace: str = "default"
    """Namespace of the jobs."""
    timeout: float = 600.0
    """Seconds from the first submission until every job must be Running with all its pods created."""
    hold: float = 5.0
    """Seconds the stack is held with every job live before it is measured."""

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise pipeline.BenchError("--live-jobs must be at least 1")
        if self.replicas < 1:
            raise pipeline.BenchError("--replicas must be at least 1")
        if self.timeout <= 0 or self.hold < 0:
            raise pipeline.BenchError("the timeout must be positive and the hold not negative")

    @property
    def objects_per_job(self) -> int:
        """Objects one live job keeps in its cluster: itself, a pod and a headless Service per replica."""
        return 2 * self.replicas + 1


def nodes_for(settings: LiveSettings, clusters: int) -> int:
    """Simulated nodes per cluster that hold every pod of the jobs (at least the bench's usual 8)."""
    pods = math.ceil(settings.jobs / clusters) * settings.replicas
    return max(8, math.ceil(pods / PODS_PER_NODE))


@dataclasses.dataclass
class _Progress:
    """What the submitters and the watches saw of the jobs so far."""

    wanted: int
    submitted: int = 0
    pods: dict[tuple[str, str], set[str]] = dataclasses.field(default_factory=lambda: collections.defaultdict(set))
    """(context, job name) → names of its pods seen."""
    complete: int = 0
    """Jobs with every pod seen."""
    all_pods_at: float | None = None
    running: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    """(context, job name) → when it was first seen with Running True."""
    everything: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set once every job is Running with every pod seen."""

    def check(self) -> None:
        if self.complete == self.wanted and len(self.running) == self.wanted:
            self.everything.set()

    def line(self, started: float) -> str:
        return (f"{time.monotonic() - started:.0f}s: {self.submitted} of {self.wanted} submitted, "
                f"{self.complete} with every pod, {len(self.running)} Running")


def _rss_line(running: Running) -> str:
    """Each process's resident memory now, in MB, for a progress line."""
    return "RSS MB " + ", ".join(f"{name} {rss / 2**20:.0f}" for name, rss in sorted(costs.memory(running).items()))


async def run(running: Running, settings: LiveSettings, progress: Callable[[str], None]) -> dict[str, Any]:
    """Submit the jobs, wait until every one is Running with its pods, hold, measure."""
    names = [(running.contexts[i % len(running.contexts)], f"live-{i:05d}") for i in range(settings.jobs)]
    wanted = set(names)
    seen = _Progress(len(wanted))

    def on_pod(context: str) -> Any:
        def handle(kind: str, pod: dict[str, Any]) -> None:
            meta = pod.get("metadata") or {}
            key = (context, str((meta.get("labels") or {}).get(pipeline.JOB_NAME_LABEL)))
            if kind == "DELETED" or key not in wanted:
                return
            pods = seen.pods[key]
            before = len(pods)
            pods.add(str(meta.get("name")))
            if before < settings.replicas <= len(pods):
                seen.complete += 1
                if seen.complete == seen.wanted:
                    seen.all_pods_at = time.monotonic()
                seen.check()
        return handle

    def on_job(context: str) -> Any:
        def handle(kind: str, obj: dict[str, Any]) -> None:
            key = (context, str((obj.get("metadata") or {}).get("name")))
            if kind == "DELETED" or key not in wanted or key in seen.running:
                return
            if any(c.get("type") == "Running" and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or []):
                seen.running[key] = time.monotonic()
                seen.check()
        return handle

    kube = {c: await clients.KubeClient.connect(running.kubeconfig, c) for c in running.contexts}
    stop = asyncio.Event()
    try:
        before = await costs.mark(running)
        cpu_before = running.cpu_seconds()
        try:
            async with asyncio.TaskGroup() as group:
                watches = [group.create_task(pipeline.watching(client, rt, settings.namespace, handle(context), stop),
                                             name=f"bench-live-watch-{rt.plural}-{context}")
                           for context, client in kube.items()
                           for rt, handle in ((resources.PODS, on_pod), (pipeline.PYTORCHJOBS, on_job))]
                await asyncio.sleep(0.3)  # let the watches start before the first job
                started = time.monotonic()
                submitting = group.create_task(_submitting(kube, names, settings, seen), name="bench-live-submit")
                reporting = group.create_task(_reporting(running, seen, started, progress),
                                              name="bench-live-progress")
                timed_out = False
                try:
                    await asyncio.wait_for(seen.everything.wait(), settings.timeout)
                except TimeoutError:
                    timed_out = True
                    submitting.cancel()
                submitted_at = None if timed_out else await submitting
                reporting.cancel()
                if not timed_out:
                    progress(f"every job Running with its pods after {time.monotonic() - started:.1f}s; "
                             f"holding {settings.hold:g}s")
                    await asyncio.sleep(settings.hold)
                stop.set()
                for watch in watches:
                    watch.cancel()
        except* clients.ApiError as failed:
            raise pipeline.BenchError(f"the live-jobs run's API calls failed: {failed.exceptions[0]}") from None
        if timed_out:
            used_s = {name: round(seconds - cpu_before.get(name, 0.0), 1)
                      for name, seconds in sorted(running.cpu_seconds().items())}
            raise pipeline.BenchError(
                f"only {min(seen.complete, len(seen.running))} of {settings.jobs} jobs materialised within "
                f"{settings.timeout:g}s ({seen.submitted} submitted, {seen.complete} with every pod created, "
                f"{len(seen.running)} Running); {_rss_line(running)}; CPU s since the first POST {used_s}")
        cpu_after = running.cpu_seconds()
        rss_after = costs.memory(running)
    finally:
        for client in kube.values():
            await asyncio.shield(client.close())
    assert submitted_at is not None and seen.all_pods_at is not None
    progress("reading back the run's records and request logs")
    used = {name: cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0) for name in cpu_after}
    jobs_by_cluster = dict(collections.Counter(context for context, _ in names))
    run_costs = await costs.measure(running, before, used, jobs_by_cluster, settings.objects_per_job,
                                    settings.namespace)
    n, objects = settings.jobs, settings.jobs * settings.objects_per_job

    def growth_kb(name: str, per: int) -> float:
        return round((rss_after.get(name, 0) - before.rss.get(name, 0)) / 1024 / per, 2)

    by_service: dict[str, float] = collections.defaultdict(float)
    for name, seconds in used.items():
        by_service[costs.service_of(name, running.contexts)] += seconds
    segments, disk = _topic_disk_bytes(running) or (None, None)
    return {
        "live_jobs": n,
        "live_pods": n * settings.replicas,
        "objects": objects,
        "first_submit_to_all_submitted_s": round(submitted_at - started, 2),
        "first_submit_to_all_pods_created_s": round(seen.all_pods_at - started, 2),
        "first_submit_to_all_running_s": round(max(seen.running.values()) - started, 2),
        "submitted_jobs_per_s": round(n / (submitted_at - started), 1),
        "pods_created_per_s": round(n * settings.replicas / (seen.all_pods_at - started), 1),
        "rss_mb": {name: round(rss / 2**20, 1) for name, rss in sorted(rss_after.items())},
        "rss_mb_before": {name: round(before.rss.get(name, 0) / 2**20, 1) for name in sorted(rss_after)},
        "rss_mb_total": round(sum(rss_after.values()) / 2**20, 1),
        "rss_kb_per_live_job": {name: growth_kb(name, n) for name in sorted(rss_after)},
        "rss_kb_per_object": {name: growth_kb(name, objects) for name in sorted(rss_after)},
        "topic": {
            "records": run_costs["records"],
            "records_per_job": run_costs["records_per_job"],
            "bytes_per_job": run_costs["broker_bytes_per_job"],
            "segment_bytes": segments,
            "segment_bytes_per_job": round(segments / n) if segments is not None else None,
            "disk_bytes": disk,
            "disk_bytes_per_job": round(disk / n) if disk is not None else None,
        },
        "cpu_ms_per_job": {name: round(seconds * 1000 / n, 2) for name, seconds in sorted(used.items())},
        "cpu_ms_per_job_by_service": {name: round(seconds * 1000 / n, 2)
                                      for name, seconds in sorted(by_service.items())},
        "cpu_s_total": round(sum(used.values()), 1),
        "costs": run_costs,
    }


async def _submitting(
    kube: dict[str, clients.KubeClient], names: list[tuple[str, str]], settings: LiveSettings, seen: _Progress,
) -> float:
    """POST every job, :data:`SUBMITTERS` at a time per cluster, each as soon as the last was answered;
    when the last was answered."""
    queues: dict[str, asyncio.Queue[str]] = {context: asyncio.Queue() for context in kube}
    for context, name in names:
        queues[context].put_nowait(name)

    async def submitter(context: str) -> None:
        client, queue = kube[context], queues[context]
        while not queue.empty():
            name = queue.get_nowait()
            manifest = pipeline.job_manifest(name, settings.namespace, settings.replicas, FOREVER)
            while True:
                try:
                    await client.create(pipeline.PYTORCHJOBS, settings.namespace, manifest)
                except clients.ApiError as exc:
                    if exc.already_exists:  # an earlier try that timed out did land
                        break
                    if not exc.retriable:
                        raise
                    await asyncio.sleep(0.1)
                    continue
                break
            seen.submitted += 1

    async with asyncio.TaskGroup() as group:
        for context in kube:
            for i in range(SUBMITTERS):
                group.create_task(submitter(context), name=f"bench-live-submitter-{context}-{i}")
    return time.monotonic()


async def _reporting(running: Running, seen: _Progress, started: float, progress: Callable[[str], None]) -> None:
    """A progress line, with each process's memory, every 10 s until cancelled."""
    while True:
        await asyncio.sleep(10)
        progress(f"{seen.line(started)}; {_rss_line(running)}")


def _topic_disk_bytes(running: Running) -> tuple[int, int] | None:
    """The size of the jobs topic's segment files and the bytes of disk its partition directories take,
    in the stack's own Kafka's ``log.dirs`` (realparts/kafka.py: ``<state-dir>/kafka/data``); None for
    Tansu (in memory) or a broker elsewhere."""
    data = running.state_dir / "kafka" / "data"
    if not data.is_dir():
        return None
    topic = running.kafka.jobs_topic
    partitions = [d for d in data.iterdir() if d.is_dir() and d.name.rpartition("-")[0] == topic
                  and d.name.rpartition("-")[2].isdigit()]
    files = [(f.suffix, f.stat()) for d in partitions for f in d.iterdir() if f.is_file()]
    return (sum(stat.st_size for suffix, stat in files if suffix == ".log"),
            sum(stat.st_blocks * 512 for _, stat in files))


def table(figures: dict[str, Any]) -> list[str]:
    """The figures as lines for a reader: the times, then one row per process."""
    n = figures["live_jobs"]
    topic = figures["topic"]
    disk = (f", {topic['segment_bytes_per_job']:,} in Kafka's segments, {topic['disk_bytes_per_job']:,} of disk"
            if topic["disk_bytes"] is not None else "")
    lines = [
        f"{n:,} live jobs, {figures['live_pods']:,} pods, {figures['objects']:,} objects",
        f"first submit -> all submitted {figures['first_submit_to_all_submitted_s']:.1f}s "
        f"({figures['submitted_jobs_per_s']:,} jobs/s), all pods created "
        f"{figures['first_submit_to_all_pods_created_s']:.1f}s ({figures['pods_created_per_s']:,} pods/s), "
        f"all Running {figures['first_submit_to_all_running_s']:.1f}s",
        f"kto.jobs: {topic['records']:,} records ({topic['records_per_job']} per job), "
        f"{topic['bytes_per_job']:,} bytes per job{disk}",
        f"{'process':<22} {'RSS MB':>8} {'before':>8} {'KB/job':>8} {'KB/object':>9} {'CPU ms/job':>10}",
    ]
    for name, mb in figures["rss_mb"].items():
        lines.append(f"{name:<22} {mb:>8.1f} {figures['rss_mb_before'][name]:>8.1f} "
                     f"{figures['rss_kb_per_live_job'][name]:>8.2f} {figures['rss_kb_per_object'][name]:>9.3f} "
                     f"{figures['cpu_ms_per_job'].get(name, 0.0):>10.2f}")
    lines.append(f"{'total':<22} {figures['rss_mb_total']:>8.1f} {'':>8} {'':>8} {'':>9} "
                 f"{sum(figures['cpu_ms_per_job'].values()):>10.2f}")
    return lines
