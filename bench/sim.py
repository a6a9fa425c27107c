"""Benchmark of the local cluster's API server: pod creates per second and watch delivery delay.

In: a URL of a running API server, a running `sim.cluster.Cluster`, or None
to start an in-process Cluster (sharing this process's core with the
client). Out: one dict of figures (`measure`).

Method: a fresh namespace; `watchers` kubernetes-asyncio watches of its pods
opened and proven live (a warm-up pod seen by each); then `creates` pods
created by `concurrency` workers, each pod carrying its send time (wall
clock, epoch seconds) in annotation `bench.kto.dev/sent`. The delay of a
watch event is its receive time minus that send time (so it includes the
create's own round trip up to the store commit). `mode` picks the pods:

- "idle": `spec.nodeName` of a node that does not exist: neither the
  scheduler nor the kubelet does anything, the figures are the server's alone;
- "unschedulable": a nodeSelector matching no node: the scheduler evaluates
  each pod and writes one PodScheduled=False condition (one more MODIFIED
  event per pod on every watch).

`watch_delay_ms` is measured while the creates saturate the server, so it
is mostly the create's queueing (Little's law: concurrency / rate); a second,
paced phase (`PACED_CREATES` pods, one at a time at `PACED_RATE` per second)
gives `paced_watch_delay_ms`, the delivery delay of a server that keeps up.

The client decodes responses as plain JSON (`_preload_content=False`, watch
return type "object") so that kubernetes-asyncio's model classes do not
dominate what is measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client, watch

from sim import cluster as sim_cluster
from sim import settings as sim_settings

SENT_ANNOTATION = "bench.kto.dev/sent"
MODES = ("idle", "unschedulable")

PACED_CREATES = 500
"""Pods of the paced phase (fewer when fewer creates are asked for)."""

PACED_RATE = 100.0
"""Creates per second of the paced phase."""


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of `values` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def pod_body(name: str, mode: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "kto/bench:1", "resources": {"requests": {"cpu": "10m"}}}],
    }
    if mode == "idle":
        spec["nodeName"] = "bench-nowhere"
    else:
        spec["nodeSelector"] = {"bench.kto.dev/nowhere": "true"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {SENT_ANNOTATION: repr(time.time())}},
        "spec": spec,
    }


def _serve_in_child(connection: multiprocessing.connection.Connection) -> None:
    """Body of the server process: run a Cluster, send its URL, stop when the parent says so."""

    async def serve() -> None:
        async with sim_cluster.Cluster(sim_settings.SimSettings()) as cluster:
            connection.send(cluster.url)
            await asyncio.to_thread(connection.recv)

    asyncio.run(serve())


@contextlib.asynccontextmanager
async def _server(url_or_cluster: str | sim_cluster.Cluster | None, separate_process: bool) -> AsyncIterator[str]:
    if isinstance(url_or_cluster, str):
        yield url_or_cluster
    elif url_or_cluster is not None:
        yield url_or_cluster.url
    elif separate_process:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_serve_in_child, args=(child,), name="kto-sim-bench-server", daemon=True)
        process.start()
        try:
            if not await asyncio.to_thread(parent.poll, 60):
                raise RuntimeError("the local cluster process did not start within 60 s")
            yield str(parent.recv())
        finally:
            with contextlib.suppress(OSError):
                parent.send("stop")
            await asyncio.to_thread(process.join, 10)
            if process.is_alive():
                process.terminate()
    else:
        async with sim_cluster.Cluster(sim_settings.SimSettings()) as cluster:
            yield cluster.url


class _Watcher:
    """One watch of the namespace's pods, recording the delay of each ADDED event."""

    def __init__(self, api: Any, namespace: str, version: str) -> None:
        self._api = api
        self._namespace = namespace
        self._version = version
        self.delays: list[float] = []
        """Delays of the saturated phase's pods (`pod-<n>`)."""
        self.paced_delays: list[float] = []
        """Delays of the paced phase's pods (`paced-<n>`)."""
        self.seen: set[str] = set()
        self.events = 0
        self._changed = asyncio.Event()

    async def run(self) -> None:
        stream = watch.Watch(return_type="object")
        async with stream:
            async for event in stream.stream(self._api.list_namespaced_pod, self._namespace, resource_version=self._version):
                received = time.time()
                self.events += 1
                obj = event["raw_object"]
                metadata = obj.get("metadata") or {}
                if event["type"] == "ADDED":
                    sent = (metadata.get("annotations") or {}).get(SENT_ANNOTATION)
                    if sent is not None and metadata["name"].startswith("pod-"):
                        self.delays.append(received - float(sent))
                    elif sent is not None and metadata["name"].startswith("paced-"):
                        self.paced_delays.append(received - float(sent))
                    self.seen.add(metadata["name"])
                    self._changed.set()

    async def wait_for(self, name: str) -> None:
        while name not in self.seen:
            self._changed.clear()
            await self._changed.wait()


async def _create(api: Any, namespace: str, body: dict[str, Any]) -> None:
    response = await api.create_namespaced_pod(namespace, body, _preload_content=False)
    payload = await response.read()
    if response.status >= 300:
        raise RuntimeError(f"create failed with {response.status}: {payload[:200]!r}")


async def measure(
    url_or_cluster: str | sim_cluster.Cluster | None,
    creates: int,
    concurrency: int = 32,
    watchers: int = 10,
    mode: str = "idle",
    separate_process: bool = False,
) -> dict[str, Any]:
    """Create `creates` pods at `concurrency`, with `watchers` watches open; the figures as a dict.

    With `url_or_cluster` None a local cluster is started: in this process, or
    with `separate_process` in a child process of its own (its own core, so
    that the client does not compete with the server).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    async with _server(url_or_cluster, separate_process) as url:
        configuration = client.Configuration(host=url)
        configuration.connection_pool_maxsize = concurrency + watchers + 4
        async with client.ApiClient(configuration) as api_client:
            # Any: with _preload_content=False the calls return raw responses, not the typed models.
            api: Any = client.CoreV1Api(api_client)
            namespace = f"bench-{uuid.uuid4().hex[:8]}"
            response = await api.create_namespace(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, _preload_content=False
            )
            payload = await response.read()
            if response.status >= 300:
                raise RuntimeError(f"creating namespace {namespace} failed with {response.status}: {payload[:300]!r}")
            try:
                result = await _run(api, namespace, creates, concurrency, watchers, mode, url)
                result["server_process"] = "separate" if separate_process and url_or_cluster is None else (
                    "given" if url_or_cluster is not None else "in-process"
                )
                return result
            finally:
                response = await api.delete_namespace(namespace, _preload_content=False)
                await response.read()


async def _run(
    api: Any, namespace: str, creates: int, concurrency: int, watchers: int, mode: str, url: str
) -> dict[str, Any]:
    listed = await api.list_namespaced_pod(namespace, _preload_content=False)
    version = json.loads(await listed.read())["metadata"]["resourceVersion"]
    watches = [_Watcher(api, namespace, version) for _ in range(watchers)]
    async with asyncio.TaskGroup() as tasks:
        running = [tasks.create_task(w.run(), name=f"bench-watcher-{i}") for i, w in enumerate(watches)]
        # Prove every watch is live before the clock starts.
        await _create(api, namespace, pod_body("warmup-0", mode))
        async with asyncio.timeout(30):
            await asyncio.gather(*(w.wait_for("warmup-0") for w in watches))

        names = iter(range(creates))

        async def worker() -> None:
            for index in names:
                await _create(api, namespace, pod_body(f"pod-{index}", mode))

        started = time.perf_counter()
        await asyncio.gather(*(tasks.create_task(worker(), name=f"bench-creator-{i}") for i in range(concurrency)))
        elapsed = time.perf_counter() - started
        last = f"pod-{creates - 1}"
        async with asyncio.timeout(60):
            await asyncio.gather(*(w.wait_for(last) for w in watches))
        # ADDED events arrive in order: the last one seen means every one was delivered.
        drained = time.perf_counter() - started

        # Paced phase: one create at a time at PACED_RATE, so that the delay is the
        # watch path's and not the queue of a saturated server.
        paced = min(PACED_CREATES, creates)
        begin = time.perf_counter()
        for index in range(paced):
            await asyncio.sleep(max(0.0, begin + index / PACED_RATE - time.perf_counter()))
            await _create(api, namespace, pod_body(f"paced-{index}", mode))
        async with asyncio.timeout(60):
            await asyncio.gather(*(w.wait_for(f"paced-{paced - 1}") for w in watches))
        for task in running:
            task.cancel()
    delays = [d * 1000 for w in watches for d in w.delays]
    paced_delays = [d * 1000 for w in watches for d in w.paced_delays]
    return {
        "server": url,
        "mode": mode,
        "creates": creates,
        "concurrency": concurrency,
        "watchers": watchers,
        "seconds": round(elapsed, 3),
        "creates_per_s": round(creates / elapsed, 1),
        "all_delivered_s": round(drained, 3),
        "watch_events": sum(w.events for w in watches),
        "watch_delay_ms": _summary(delays),
        "paced_creates": paced,
        "paced_rate_per_s": PACED_RATE,
        "paced_watch_delay_ms": _summary(paced_delays),
    }


def _summary(delays: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(delays, 0.50), 2),
        "p95": round(percentile(delays, 0.95), 2),
        "p99": round(percentile(delays, 0.99), 2),
        "max": round(max(delays, default=0.0), 2),
        "mean": round(statistics.fmean(delays), 2) if delays else 0.0,
    }
