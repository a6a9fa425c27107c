"""The pipeline benchmark: PyTorchJobs submitted at a fixed rate through a running kto.

In: a :class:`Target` (a kubeconfig whose contexts are the clusters of a running
kto, each an API server of sim/ with its ``/admin/requests`` log) and
:class:`PipelineSettings` (how many jobs, how fast, how many replicas).
Out: :func:`run` → a :class:`Result` (its ``figures()`` is the JSON printed by
``kto bench``); :func:`measure_create_ceiling` → the raw pod creates per
second one API server accepts from a tight client loop.

How each figure is taken (one clock: this process's ``time.monotonic()``; the
sim's ``creationTimestamp`` has one-second resolution, too coarse for ms):

* ``created_to_all_pods_created_ms`` — per job, from the response to the
  job's POST to the arrival (on this process's pod watch) of the ADDED event
  of its last pod. The watch delivery delay (about a millisecond on
  loopback) makes the figure slightly pessimistic.
* ``pod_phase_to_condition_written_ms`` — per pod transition to Running or
  Succeeded, seen on the pod watch, to the first job object seen on the job
  watch whose ``status.replicaStatuses`` reflect it: the k-th pod of replica
  type R to reach Running is reflected once active+succeeded+failed of R
  reaches k; the k-th to reach Succeeded once succeeded of R reaches k. Both
  events cross the same watch path, so its delay cancels out.
* ``api_writes_per_job`` — from the API servers' request logs over the run:
  create/update/patch/delete/deletecollection requests, minus this
  benchmark's own job creates (kto never creates jobs) and the watchers'
  Lease renewals (periodic, not per job; reported apart) and Events, divided
  by jobs; the goal is 2N+3 for an N-replica job.
* ``api_reads_per_job`` — gets and lists in the same logs (watches and Leases
  apart), divided by jobs: the reads kto makes per job, the ones that confirm an
  act on the API server's word (docs/security.md) among them. The benchmark's
  own few lists (its watches' starts) are in the count on sim/.
* ``event_writes_per_job`` — Event creates and patches (upstream's reasons,
  combined per pass and counted on repeat), divided by jobs; the goal is N+3.
* ``jobs_per_s`` — jobs Succeeded / (last Succeeded seen − first POST): end to
  end, pod run time included, and never above the submission rate.
* ``materialized_jobs_per_s`` — jobs whose pods were all created / (the last
  such moment − first POST): how fast kto turns jobs into pods. Compared with
  the create ceiling (``kto bench`` divides the ceiling by the 2N creates an
  N-replica job needs: N pods and N headless Services) when jobs are
  submitted all at once (``--rate 0``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import pathlib
import time
from typing import Any

from realparts import kube
from shared.kube import clients, resources

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READ_VERBS = frozenset({"get", "list"})
"""Reads counted per job: a worker's look at the API server (hydration, and the reads that confirm an act)."""
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
PYTORCHJOBS = resources.JOB_TYPES["PyTorchJob"]


class BenchError(Exception):
    """The benchmark could not run to the end (jobs did not finish in time, a cluster failed)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """A running kto: one kubeconfig, one context per cluster."""

    kubeconfig: pathlib.Path
    contexts: tuple[str, ...]
    audit_logs: dict[str, pathlib.Path] | None = None
    """context → kube-apiserver audit log, for a real control plane (the sim serves its request log)."""


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    jobs: int = 100
    """PyTorchJobs to submit (spread round-robin over the clusters)."""
    rate: float = 20.0
    """Jobs submitted per second; 0 submits them all at once."""
    replicas: int = 8
    """Pods per job: 1 Master + replicas-1 Workers."""
    pod_duration: str = "1s"
    """How long the sim's kubelet runs each pod (annotation ``sim.kto.dev/duration``)."""
    namespace: str = "default"
    """Namespace of the jobs."""
    timeout: float = 180.0
    """Seconds from the first submission until every job must have Succeeded."""
    settle: float = 1.0
    """Seconds to wait after the last job Succeeded before the request logs are read."""

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.replicas < 1:
            raise BenchError("jobs and replicas must be at least 1")
        if self.rate < 0:
            raise BenchError("rate must not be negative (0 = all at once)")


def job_manifest(name: str, namespace: str, replicas: int, pod_duration: str) -> dict[str, Any]:
    """A PyTorchJob with 1 Master and replicas-1 Workers whose pods run ``pod_duration`` in the sim."""

    def spec(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": {"sim.kto.dev/duration": pod_duration}},
                "spec": {"containers": [{
                    "name": "pytorch", "image": "docker.io/kubeflowkatib/pytorch-mnist-cpu:v1beta1-21320b6",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }]},
            },
        }

    replica_specs = {"Master": spec(1)}
    if replicas > 1:
        replica_specs["Worker"] = spec(replicas - 1)
    return {
        "apiVersion": PYTORCHJOBS.api_version, "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "pytorchReplicaSpecs": replica_specs},
    }


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


async def measure_create_ceiling(
    kubeconfig: pathlib.Path, context: str | None, *, creates: int = 400, concurrency: int = 16, namespace: str = "default",
) -> float:
    """Pods per second one API server creates for ``concurrency`` clients POSTing as fast as they can."""
    body = job_manifest("x", namespace, 1, "3600s")["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(creates):
        queue.put_nowait(i)

    async def creating(client: clients.KubeClient) -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"ceiling-{i}", "namespace": namespace, **body["metadata"]},
                   "spec": body["spec"]}
            await client.create(resources.PODS, namespace, pod)

    async with await clients.KubeClient.connect(kubeconfig, context) as client:
        started = time.monotonic()
        try:
            async with asyncio.TaskGroup() as group:
                for n in range(concurrency):
                    group.create_task(creating(client), name=f"bench-ceiling-{n}")
        except* clients.ApiError as failed:
            raise BenchError(f"measuring the create ceiling: {failed.exceptions[0]}") from None
        return creates / (time.monotonic() - started)


@dataclasses.dataclass
class _Job:
    context: str
    name: str
    submitted: float | None = None
    pods_seen: dict[str, float] = dataclasses.field(default_factory=dict)
    succeeded: float | None = None
    transitions: list[tuple[float, str, str, int]] = dataclasses.field(default_factory=list)
    """(time, replica type (lower case), phase, k): the k-th pod of that type to reach that phase."""
    reached: collections.Counter[tuple[str, str]] = dataclasses.field(default_factory=collections.Counter)
    statuses: list[tuple[float, dict[str, Any]]] = dataclasses.field(default_factory=list)
    """(time seen, replicaStatuses) of each job object seen."""


@dataclasses.dataclass
class Result:
    settings: PipelineSettings
    clusters: int
    started: float
    finished: float
    jobs: dict[tuple[str, str], _Job]
    writes: collections.Counter[str]
    """``verb resource[/subresource]`` → count, the operator's writes only (bench creates, Leases and
    certificate rotation removed)."""
    lease_writes: int
    certificate_writes: int = 0
    """Writes of a webhook certificate's rotation (:func:`_certificate_housekeeping`), no job's."""
    reads: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """``verb resource[/subresource]`` → count of gets and lists (watches and Leases apart)."""

    def figures(self) -> dict[str, Any]:
        s = self.settings
        done = [j for j in self.jobs.values() if j.succeeded is not None]
        to_pods = [
            (max(j.pods_seen.values()) - j.submitted) * 1000
            for j in self.jobs.values() if j.submitted is not None and len(j.pods_seen) >= s.replicas
        ]
        phase_to_status: list[float] = []
        unreflected = 0
        for job in self.jobs.values():
            for at, rtype, phase, k in job.transitions:
                seen = next((t for t, rs in job.statuses if t >= at and _reflects(rs, rtype, phase, k)), None)
                if seen is None:
                    unreflected += 1
                else:
                    phase_to_status.append((seen - at) * 1000)
        elapsed = self.finished - self.started
        event_writes = sum(n for what, n in self.writes.items() if what.split(" ")[1].split(".")[0] == "events")
        total_writes = sum(self.writes.values()) - event_writes
        materialized = [max(j.pods_seen.values()) for j in self.jobs.values() if len(j.pods_seen) >= s.replicas]
        materializing = max(materialized) - self.started if materialized else 0.0
        return {
            "jobs_per_s": round(len(done) / elapsed, 2) if elapsed > 0 else None,
            "jobs_completed": len(done),
            "materialized_jobs_per_s": round(len(materialized) / materializing, 2) if materializing > 0 else None,
            "created_to_all_pods_created_ms": {
                f"p{q}": _ms(percentile(to_pods, q)) for q in (50, 95, 99)
            },
            "pod_phase_to_condition_written_ms": {
                **{f"p{q}": _ms(percentile(phase_to_status, q)) for q in (50, 99)},
                "transitions": len(phase_to_status), "never_reflected": unreflected,
            },
            "api_writes_per_job": round(total_writes / s.jobs, 2),
            "api_writes_goal_per_job": 2 * s.replicas + 3,
            "event_writes_per_job": round(event_writes / s.jobs, 2),
            "event_writes_goal_per_job": s.replicas + 3,
            "api_writes_by_kind": dict(sorted(self.writes.items())),
            "api_reads_per_job": round(sum(self.reads.values()) / s.jobs, 2),
            "api_reads_by_kind": dict(sorted(self.reads.items())),
            "lease_writes": self.lease_writes,
            "certificate_writes": self.certificate_writes,
        }


def _ms(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def _reflects(replica_statuses: dict[str, Any], rtype: str, phase: str, k: int) -> bool:
    status = next((v for key, v in replica_statuses.items() if key.lower() == rtype), None) or {}
    succeeded = int(status.get("succeeded") or 0)
    if phase == "Succeeded":
        return succeeded >= k
    return int(status.get("active") or 0) + succeeded + int(status.get("failed") or 0) >= k


async def watching(
    client: clients.KubeClient, rt: resources.ResourceType, namespace: str, handle: Any, stop: asyncio.Event,
) -> None:
    """List then watch ``rt`` until ``stop``; relist on 410, reconnect when a watch ends."""
    version = ""
    while not stop.is_set():
        if not version:
            items, version = await client.list(rt, namespace)
            for item in items:
                handle("ADDED", item)
        try:
            async for event in client.watch(rt, namespace, resource_version=version, timeout_seconds=60):
                meta = event.object.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if event.type != "BOOKMARK":
                    handle(event.type, event.object)
        except clients.ApiError as exc:
            if exc.gone:
                version = ""
            elif not exc.retriable:
                raise
            await asyncio.sleep(0.1)


async def _request_log(
    client: clients.KubeClient, since: int, audit_log: pathlib.Path | None,
) -> tuple[list[dict[str, Any]], int]:
    """kto's requests from index ``since`` on, and the index to read on from: the sim's request log,
    or a real API server's audit log (kto's user only)."""
    if audit_log is not None:
        entries = kube.read_audit_log(audit_log)
        return entries[since:], len(entries)
    page = await client.request("GET", "/admin/requests", {"since": since})
    return list(page.get("items") or []), int(page.get("next") or since)


async def run(target: Target, settings: PipelineSettings) -> Result:
    """Submit the jobs at the set rate, follow them to Succeeded, read the request logs."""
    jobs: dict[tuple[str, str], _Job] = {}
    for i in range(settings.jobs):
        context = target.contexts[i % len(target.contexts)]
        jobs[(context, f"bench-{i:05d}")] = _Job(context, f"bench-{i:05d}")
    remaining = {key for key in jobs}
    all_done = asyncio.Event()
    stop = asyncio.Event()

    def on_pod(context: str) -> Any:
        def handle(kind: str, pod: dict[str, Any]) -> None:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            job = jobs.get((context, str(labels.get(JOB_NAME_LABEL))))
            if job is None or kind == "DELETED":
                return
            now = time.monotonic()
            name = str(meta.get("name"))
            job.pods_seen.setdefault(name, now)
            phase = str((pod.get("status") or {}).get("phase") or "Pending")
            rtype = str(labels.get(REPLICA_TYPE_LABEL, "")).lower()
            for target_phase in ("Running", "Succeeded"):
                # Each pod reaches a phase once; a pod seen Succeeded first also passed Running.
                mark = (name, target_phase)
                if mark in job.reached or not _at_least(phase, target_phase):
                    continue
                job.reached[mark] = 1
                job.reached[(rtype, target_phase)] += 1
                job.transitions.append((now, rtype, target_phase, job.reached[(rtype, target_phase)]))
        return handle

    def on_job(context: str) -> Any:
        def handle(kind: str, obj: dict[str, Any]) -> None:
            key = (context, str((obj.get("metadata") or {}).get("name")))
            job = jobs.get(key)
            if job is None or kind == "DELETED":
                return
            now = time.monotonic()
            status = obj.get("status") or {}
            job.statuses.append((now, dict(status.get("replicaStatuses") or {})))
            succeeded = any(c.get("type") == "Succeeded" and c.get("status") == "True"
                            for c in status.get("conditions") or [])
            if succeeded and job.succeeded is None:
                job.succeeded = now
                remaining.discard(key)
                if not remaining:
                    all_done.set()
        return handle

    kube = {c: await clients.KubeClient.connect(target.kubeconfig, c) for c in target.contexts}
    try:
        audit = target.audit_logs or {}
        log_start = {c: (await _request_log(kube[c], 1 << 62, audit.get(c)))[1] for c in target.contexts}
        try:
            started, timed_out = await _follow(kube, jobs, settings, on_pod, on_job, all_done, stop)
        except* clients.ApiError as failed:
            raise BenchError(f"the benchmark's API calls failed: {failed.exceptions[0]}") from None
        if timed_out:
            stuck = sorted(f"{c}/{n}" for c, n in remaining)
            raise BenchError(f"{len(remaining)} of {settings.jobs} jobs did not succeed within "
                             f"{settings.timeout:g}s: {', '.join(stuck[:5])}{' …' if len(stuck) > 5 else ''}")
        finished = max(j.succeeded for j in jobs.values() if j.succeeded is not None)
        writes: collections.Counter[str] = collections.Counter()
        reads: collections.Counter[str] = collections.Counter()
        lease_writes = certificate_writes = 0
        for context, client in kube.items():
            entries, _ = await _request_log(client, log_start[context], audit.get(context))
            for entry in entries:
                verb, resource = entry.get("verb"), str(entry.get("resource") or "")
                plural = resource.split(".")[0]  # the sim logs "plural.group" for grouped kinds
                if verb in READ_VERBS and plural != resources.LEASES.plural:
                    sub = entry.get("subresource")
                    reads[f"{verb} {resource}{'/' + sub if sub else ''}"] += 1
                if verb not in WRITE_VERBS:
                    continue
                if plural == PYTORCHJOBS.plural and verb == "create" and not entry.get("subresource"):
                    continue  # the benchmark's own submissions
                if plural == resources.LEASES.plural:
                    lease_writes += 1
                    continue
                if _certificate_housekeeping(plural, str(entry.get("name") or "")):
                    certificate_writes += 1
                    continue
                sub = entry.get("subresource")
                writes[f"{verb} {resource}{'/' + sub if sub else ''}"] += 1
    finally:
        for client in kube.values():
            await asyncio.shield(client.close())
    return Result(settings, len(target.contexts), started, finished, jobs, writes, lease_writes, certificate_writes,
                  reads)


def _certificate_housekeeping(plural: str, name: str) -> bool:
    """A write of a webhook certificate's rotation (the training-operator's Secret and the CA it
    injects into its webhook configuration): periodic, no job's."""
    return plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations") or (
        plural == resources.SECRETS.plural and name.endswith("-webhook-cert"))


async def _follow(
    kube: dict[str, clients.KubeClient], jobs: dict[tuple[str, str], _Job], settings: PipelineSettings,
    on_pod: Any, on_job: Any, all_done: asyncio.Event, stop: asyncio.Event,
) -> tuple[float, bool]:
    """Watch pods and jobs of every cluster, submit the jobs, wait for all to succeed.

    Returns when the first job was submitted and whether time ran out.
    """
    async with asyncio.TaskGroup() as group:
        watches = []
        for context, client in kube.items():
            watches.append(group.create_task(
                watching(client, resources.PODS, settings.namespace, on_pod(context), stop),
                name=f"bench-watch-pods-{context}"))
            watches.append(group.create_task(
                watching(client, PYTORCHJOBS, settings.namespace, on_job(context), stop),
                name=f"bench-watch-jobs-{context}"))
        await asyncio.sleep(0.3)  # let the watches start before the first job
        started = time.monotonic()
        submitting = group.create_task(_submitting(kube, jobs, settings, started), name="bench-submit")
        timed_out = False
        try:
            await asyncio.wait_for(all_done.wait(), settings.timeout)
        except TimeoutError:
            timed_out = True
            submitting.cancel()
        else:
            await submitting
            await asyncio.sleep(settings.settle)
        stop.set()
        for watch in watches:
            watch.cancel()
    return started, timed_out


def _at_least(phase: str, wanted: str) -> bool:
    order = {"Pending": 0, "Running": 1, "Succeeded": 2}
    return order.get(phase, -1) >= order[wanted]


async def _submitting(
    kube: dict[str, clients.KubeClient], jobs: dict[tuple[str, str], _Job], settings: PipelineSettings,
    started: float,
) -> None:
    """POST every job at its slot (i / rate seconds after ``started``); each POST is a task of its own."""
    async with asyncio.TaskGroup() as group:
        for i, job in enumerate(jobs.values()):
            if settings.rate > 0:
                delay = started + i / settings.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            group.create_task(_submit(kube[job.context], job, settings), name=f"bench-submit-{job.name}")


async def _submit(client: clients.KubeClient, job: _Job, settings: PipelineSettings) -> None:
    manifest = job_manifest(job.name, settings.namespace, settings.replicas, settings.pod_duration)
    await client.create(PYTORCHJOBS, settings.namespace, manifest)
    job.submitted = time.monotonic()

