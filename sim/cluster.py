"""The local cluster in one process: store, API server, garbage collector, scheduler, kubelet, Job controller.

In: ``SimSettings``. Out: ``Cluster``, an async context manager serving the Kubernetes API
on ``.url`` (and writing ``.kubeconfig`` when asked) with the in-process controllers
running as named tasks of one TaskGroup; ``.store`` for direct access, ``.admin`` for
faults, statistics, the request log, node failures and evictions.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
from typing import Any

import yaml

from faulting import faults
from shared import lifecycle
from sim import settings as sim_settings
from sim.apiserver import collecting, jobcontrolling, scheduling, serving
from sim.apiserver import store as sim_store
from sim.node import kubelet, kubeletserving, nodes

log = logging.getLogger(__name__)


def kubeconfig_text(url: str, context: str) -> str:
    """A kubeconfig for ``url``: plain HTTP and a token the sim never checks."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": url}}],
        "users": [{"name": context, "user": {"token": "kto-sim"}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": "default"}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


class Admin:
    """What ``/admin`` offers over HTTP, in-process."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def set_faults(self, spec: str) -> faults.FaultSpec:
        """Replace the fault spec (``faults.FaultSpecError`` if it does not parse); "" turns faults off."""
        return self._cluster.faults.set(spec)

    @property
    def fault_spec(self) -> faults.FaultSpec:
        return self._cluster.faults.spec

    def stats(self) -> dict[str, Any]:
        return self._cluster.server.stats()

    def requests(self, since: int = 0) -> list[dict[str, Any]]:
        return self._cluster.server.requests_since(since)

    async def fail_node(self, name: str) -> None:
        await self._cluster.kubelet.fail_node(name)

    async def recover_node(self, name: str) -> None:
        await self._cluster.kubelet.recover_node(name)

    async def evict(self, namespace: str, name: str) -> None:
        await self._cluster.server.evict(namespace, name)


class Cluster(lifecycle.Started):
    """``async with Cluster(settings) as cluster:`` — a running local cluster."""

    def __init__(self, settings: sim_settings.SimSettings | None = None) -> None:
        self.settings = settings or sim_settings.SimSettings()
        self.store = sim_store.Store(self.settings)
        self.faults = faults.Faults(self.settings.faults)
        self.server = serving.Server(self.store, self.faults, self.settings.host, self.settings.port)
        self.scheduler = scheduling.Scheduler(self.store, self.settings)
        self.kubelet = kubelet.Kubelet(self.store, self.settings)
        self.server.kubelet = kubeletserving.LocalKubelet(self.kubelet)
        self.collector = collecting.GarbageCollector(self.store)
        self.job_controller = jobcontrolling.JobController(self.store, self.settings)
        self.admin = Admin(self)
        self.kubeconfig: pathlib.Path | None = self.settings.kubeconfig
        self._main: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self._failure: BaseException | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The request log: verb, resource, subresource, namespace, name, code, duration, fault."""
        return list(self.server.requests)

    async def start(self) -> None:
        for node in nodes.make_nodes(self.settings, sim_store.now()):
            self.store._create("nodes", node, None)
        await self.server.start()
        if self.kubeconfig is not None:
            self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            self.kubeconfig.write_text(kubeconfig_text(self.url, self.settings.context))
        self._main = asyncio.create_task(self._run(), name="sim-cluster")
        await self._started.wait()

    async def _run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.collector.run(), name="sim-garbage-collector")
                group.create_task(self.scheduler.run(), name="sim-scheduler")
                group.create_task(self.kubelet.run(), name="sim-kubelet")
                group.create_task(self.job_controller.run(), name="sim-job-controller")
                self._started.set()
        except Exception as exc:
            self._failure = exc
            log.exception("the local cluster's controllers failed")
            raise
        finally:
            self._started.set()

    async def wait(self) -> None:
        """Until a controller fails (its exception raised) or the cluster is stopped."""
        assert self._main is not None
        await asyncio.shield(self._main)

    async def stop(self) -> None:
        """Stop controllers and server; safe to call twice. Re-raises a controller's failure."""
        main, self._main = self._main, None
        try:
            if main is not None and not main.done():
                main.cancel()
                # wait() does not raise the task's CancelledError, only our own cancellation.
                await asyncio.wait([main])
        finally:
            await asyncio.shield(self.server.stop())
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
