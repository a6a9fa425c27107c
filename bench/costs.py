"""What one record and one job cost, per process and per cluster, over a ``kto bench`` run.

In: a running kto (:class:`Running`: a :class:`kto.stack.Stack`, its processes, clusters and bus), marks taken
just before the jobs are submitted (:func:`mark`), the CPU each process used over the
run and the jobs each cluster got. Out: :func:`measure` → the ``costs`` figures of
``kto bench``, from which docs/scale.md sizes kto for many clusters:

* ``records`` — every record the run put on the jobs topic (read back from the broker
  from the moment of the mark), per job, by source (watcher, reconciler, status …) and
  by ``kto-type`` (``observation:Pod``, ``decision:child_created`` …);
* ``broker_bytes_per_job`` / ``bytes_per_record`` — the records' payload as produced:
  key + value + headers (``kto-type``, and ``traceparent`` when a record carries one);
  Kafka adds its own framing (about 70 bytes per batch and 10–20 per record) on top;
  ``gzip_ratio`` — the values' size over their size gzipped one by one (level 6), what a
  topic with ``compression.type=gzip`` would save at worst (kto sends without linger, so
  a batch often holds one record);
* ``cpu_ms_per_record`` — CPU time each process used over the run divided by those
  records, and the same summed per service (every watcher together …);
* ``api_requests_per_job`` — per cluster, the requests kto made to its API server over the
  run (from the sim's request log: every verb; on a real control plane its audit log, which
  holds kto's writes only), divided by that cluster's jobs, by ``verb resource``. The
  benchmark's own requests are left out (its job creates, and the list and watch of pods and
  PyTorchJobs in the jobs' namespace it follows them with: kto's watchers list and watch every
  namespace, and its workers never watch); the watchers' Lease requests are periodic, not per
  job, and are given as ``lease_requests_per_s`` instead;
* ``rss_mb`` — each process's resident memory before and after the run, and
  ``watcher_kb_per_object``: per cluster, the watcher's growth divided by the objects the run
  left in its cluster (the jobs, their pods and Services, all kept: ``cleanPodPolicy: None``).
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import time
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

from realparts import kube
from shared.bus import reading, records
from shared.bus.settings import KafkaSettings
from shared.kube import clients, resources

TRACEPARENT_HEADER = len("traceparent") + len("00-" + "0" * 32 + "-" + "0" * 16 + "-01")
"""Bytes of a ``traceparent`` header (name and value)."""


class Process(Protocol):
    """One child of the stack (``kto.stack.Child``)."""

    @property
    def name(self) -> str: ...

    def pids(self) -> set[int]: ...


class Running(Protocol):
    """What the benchmark reads of and does to a running ``kto.stack.Stack``."""

    @property
    def contexts(self) -> Sequence[str]: ...

    @property
    def children(self) -> Sequence[Process]: ...

    @property
    def kafka(self) -> KafkaSettings: ...

    @property
    def audit_logs(self) -> dict[str, pathlib.Path] | None: ...

    async def client(self, context: str | None = None) -> clients.KubeClient: ...

    def pause(self, name: str) -> None: ...

    def resume(self, name: str) -> None: ...


@dataclasses.dataclass(frozen=True)
class Mark:
    """Where things stood just before the first job was submitted."""

    wall_ms: int
    monotonic: float
    requests: dict[str, int]
    """context → the request log's next index (sim) or audit entries so far (real control plane)."""
    rss: dict[str, int]
    """process name → resident bytes."""


def service_of(name: str, contexts: Sequence[str]) -> str:
    """The service of a stack child's name: ``watcher-kto-2`` → ``watcher``, ``reconciler-1`` →
    ``reconciler``, ``control-plane-kto-1`` → ``control-plane``."""
    for context in contexts:
        if name.endswith(f"-{context}"):
            return name[: -len(context) - 1]
    head, _, tail = name.rpartition("-")
    return head if head and tail.isdigit() else name


def rss_bytes(pid: int) -> int:
    """Resident memory of a live process (0 if it is gone), from /proc."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory(running: Running) -> dict[str, int]:
    """Resident bytes of each child of the stack and what it started, by child name."""
    return {child.name: sum(rss_bytes(pid) for pid in child.pids()) for child in running.children}


async def _requests(
    running: Running, context: str, since: int,
) -> tuple[list[dict[str, Any]], int]:
    audits = running.audit_logs
    if audits is not None:
        entries = kube.read_audit_log(audits[context])
        return entries[since:], len(entries)
    async with await running.client(context) as client:
        page = await client.request("GET", "/admin/requests", {"since": since})
    return list(page.get("items") or []), int(page.get("next") or since)


async def mark(running: Running) -> Mark:
    marks = {context: (await _requests(running, context, 1 << 62))[1] for context in running.contexts}
    return Mark(int(time.time() * 1000), time.monotonic(), marks, memory(running))


def _kto_requests(entries: list[dict[str, Any]], namespace: str) -> tuple[collections.Counter[str], int]:
    """kto's requests among a cluster's logged ones, by ``verb resource[/sub]``, and its Lease
    requests apart (see the module doc for what is left out)."""
    counted: collections.Counter[str] = collections.Counter()
    leases = 0
    own_lists = {"pods": 1, "pytorchjobs": 1}  # the benchmark lists each once before watching it
    for entry in entries:
        verb, resource = str(entry.get("verb")), str(entry.get("resource") or "")
        plural = resource.split(".")[0]
        if plural == resources.LEASES.plural:
            leases += 1
            continue
        if plural in own_lists and entry.get("namespace") == namespace:
            if verb == "watch":
                continue
            if verb == "list" and own_lists[plural] > 0:
                own_lists[plural] -= 1
                continue
        if plural == "pytorchjobs" and verb == "create" and not entry.get("subresource"):
            continue  # the benchmark's submissions
        sub = entry.get("subresource")
        counted[f"{verb} {resource}{'/' + sub if sub else ''}"] += 1
    return counted, leases


@dataclasses.dataclass
class _Log:
    """The run's records on the jobs topic, counted."""

    count: int = 0
    size: int = 0
    """Payload bytes: key, value and headers."""
    values: int = 0
    gzipped: int = 0
    by_source: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    by_type: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    bytes_by_type: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


async def _log_figures(bus: Any, since_ms: int) -> _Log:
    """The records of the jobs topic from ``since_ms``, counted."""
    log = _Log()
    async for raw in reading.scan(bus, accept=lambda key: True, since_ms=since_ms):
        record = raw.decoded().record
        log.count += 1
        size = len(raw.key.encode()) + len(raw.value) + (TRACEPARENT_HEADER if raw.trace_id else 0)
        log.values += len(raw.value)
        log.gzipped += len(zlib.compress(raw.value, 6))
        if record is None:
            log.size += size
            log.by_source["undecodable"] += 1
            continue
        tag = records.type_tag(record)
        size += len(records.TYPE_HEADER) + len(tag)
        log.size += size
        log.by_source[record.source] += 1
        log.by_type[tag] += 1
        log.bytes_by_type[tag] += size
    return log


async def measure(
    running: Running, before: Mark, cpu: dict[str, float], jobs_by_cluster: dict[str, int],
    objects_per_job: int, namespace: str,
) -> dict[str, Any]:
    """The ``costs`` figures of a run that began at ``before`` (``cpu``: seconds each process used)."""
    jobs = sum(jobs_by_cluster.values())
    elapsed = time.monotonic() - before.monotonic
    log = await _log_figures(running.kafka, before.wall_ms)
    count = log.count
    after = memory(running)
    per_service: dict[str, float] = collections.defaultdict(float)
    for name, seconds in cpu.items():
        per_service[service_of(name, running.contexts)] += seconds
    requests: dict[str, Any] = {}
    lease_rates: dict[str, float] = {}
    for context in running.contexts:
        entries, _ = await _requests(running, context, before.requests[context])
        counted, leases = _kto_requests(entries, namespace)
        share = max(jobs_by_cluster.get(context, 0), 1)
        requests[context] = {
            "total": round(sum(counted.values()) / share, 2),
            "by_kind": {what: round(n / share, 2) for what, n in sorted(counted.items())},
        }
        lease_rates[context] = round(leases / elapsed, 2) if elapsed > 0 else 0.0
    watcher_kb: dict[str, float] = {}
    for context in running.contexts:
        name = f"watcher-{context}"
        objects = jobs_by_cluster.get(context, 0) * objects_per_job
        if objects:
            watcher_kb[context] = round((after.get(name, 0) - before.rss.get(name, 0)) / 1024 / objects, 2)
    return {
        "records": count,
        "records_per_job": round(count / jobs, 2),
        "records_by_source_per_job": {s: round(n / jobs, 2) for s, n in sorted(log.by_source.items())},
        "records_by_type_per_job": {t: round(n / jobs, 2) for t, n in sorted(log.by_type.items())},
        "bytes_per_record_by_type": {t: round(log.bytes_by_type[t] / n) for t, n in sorted(log.by_type.items())},
        "broker_bytes_per_job": round(log.size / jobs),
        "bytes_per_record": round(log.size / count) if count else None,
        "gzip_ratio": round(log.values / log.gzipped, 2) if log.gzipped else None,
        "cpu_ms_per_record": {name: round(seconds * 1000 / count, 3) for name, seconds in sorted(cpu.items())}
        if count else {},
        "cpu_ms_per_record_by_service": {name: round(seconds * 1000 / count, 3)
                                         for name, seconds in sorted(per_service.items())} if count else {},
        "api_requests_per_job": requests,
        "lease_requests_per_s": lease_rates,
        "rss_mb": {name: [round(before.rss.get(name, 0) / 2**20, 1), round(after.get(name, 0) / 2**20, 1)]
                   for name in sorted(after)},
        "watcher_kb_per_object": watcher_kb,
    }
