"""Fake GPU nodes for any API server: the sim's kubelet as a client.

In: a kubeconfig (any conformant API server: kube-apiserver of the real
tier, or a sim) and :class:`~sim.settings.SimSettings` (node count, GPUs,
default pod duration). Out: nodes ``sim-node-<i>`` registered with
``nvidia.com/gpu`` capacity, kept Ready by renewing their Leases in
``kube-node-lease`` (so kube-controller-manager's node lifecycle controller
leaves them alone), and the pods the scheduler binds to them run exactly as
in sim/ (sim/node/kubelet.py): running for ``sim.kto.dev/duration``, exiting with
``sim.kto.dev/exit-code``, failing ``sim.kto.dev/fail-times`` times, and
removed once deleted — or, on nodes labelled ``sim.kto.dev/runtime: process``
(``SimSettings.runtime``), as real local processes (sim/node/processes.py). One test
suite thus drives both tiers.

The kubelet is written against :class:`sim.node.apis.NodeApi`; :class:`ClientApi`
is that API over a KubeClient, raising the protocol's errors (``sim.errors.ApiError``
with the API server's code) for the client's. The agent also
serves the kubelet API of all its nodes on one HTTPS port
(sim/node/kubeletserving.py: ``kubectl logs`` and ``kubectl exec`` through
kube-apiserver) and registers the nodes with that endpoint.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import pathlib
import builtins
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from shared.kube import clients
from shared.kube.resources import CONFIGMAPS, LEASES, PODS, SECRETS, SERVICES, ResourceType
from sim import errors, objects
from sim import settings as sim_settings
from sim.node import kubelet, kubeletserving, nodes

log = logging.getLogger(__name__)

NODES = ResourceType("", "v1", "nodes", "Node", namespaced=False)
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
RENEW_EVERY = 10.0
"""Seconds between Lease renewals (the kubelet's default; the node lifecycle controller waits 50 s)."""

_TYPES: dict[str, ResourceType] = {"pods": PODS, "nodes": NODES, "configmaps": CONFIGMAPS, "secrets": SECRETS,
                                   "services": SERVICES}


T = TypeVar("T")


def _protocol_error(exc: clients.ApiError) -> errors.ApiError:
    """The NodeApi protocol's error for a client's: the same code (503 when the request got no answer)."""
    return errors.ApiError(exc.code or 503, exc.reason, exc.message)


class _Event:
    def __init__(self, kind: str, obj: dict[str, Any]) -> None:
        self.type = kind
        self.object = obj


class _Watch:
    """An API server watch as the protocol's (sim/listwatching.py): events, ``aclose``."""

    def __init__(self, stream: AsyncIterator[clients.WatchEvent]) -> None:
        self._stream = stream

    def __aiter__(self) -> _Watch:
        return self

    async def __anext__(self) -> _Event:
        try:
            event = await self._stream.__anext__()
        except clients.ApiError as exc:
            raise _protocol_error(exc) from exc
        return _Event(event.type, event.object)

    async def aclose(self) -> None:
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


class ClientApi:
    """:class:`sim.node.apis.NodeApi` over a KubeClient, for any API server."""

    def __init__(self, client: clients.KubeClient) -> None:
        self._client = client
        self.kubelet_endpoint: tuple[str, int] | None = None
        """Where the kubelet API is served; nodes registered (or found registered) are pointed there."""

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except clients.ApiError as exc:
            raise _protocol_error(exc) from exc

    async def create(self, resource: str, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        rt = _TYPES[resource]
        ns = namespace or objects.metadata(obj).get("namespace")
        if resource == "nodes" and self.kubelet_endpoint is not None:
            kubeletserving.advertise(obj, *self.kubelet_endpoint)
            try:
                return await self._call(lambda: self._client.create(rt, ns, obj))
            except errors.ApiError as exc:
                if exc.code == 409:
                    # Registered by an earlier agent: its kubelet endpoint has moved to ours.
                    status = {k: obj["status"][k] for k in ("addresses", "daemonEndpoints", "declaredFeatures")}
                    await self._call(lambda: self._client.patch(rt, None, obj["metadata"]["name"], {"status": status},
                                                                subresource="status"))
                raise
        return await self._call(lambda: self._client.create(rt, ns, obj))

    async def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any]:
        return await self._call(lambda: self._client.get(_TYPES[resource], namespace, name))

    async def list(
        self, resource: str, namespace: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        return await self._call(lambda: self._client.list(_TYPES[resource], namespace))

    async def update(self, resource: str, obj: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        rt = _TYPES[resource]
        metadata = objects.metadata(obj)
        path = rt.path(metadata.get("namespace"), metadata["name"], subresource)
        if subresource == "status" and resource == "pods":
            # The kubelet's own way: a merge patch of status, guarded by the resourceVersion seen.
            body = {"metadata": {"resourceVersion": metadata.get("resourceVersion")}, "status": obj.get("status")}
            return await self._call(lambda: self._client.request(
                "PATCH", path, body=body, content_type="application/merge-patch+json", route="pods/status",
            ))
        return await self._call(lambda: self._client.request("PUT", path, body=obj, route=rt.plural))

    async def update_shared(self, resource: str, obj: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        return await self.update(resource, obj, subresource)

    async def delete(
        self, resource: str, namespace: str | None, name: str, propagation: str = "Background",
        preconditions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        if preconditions:
            body["preconditions"] = preconditions
        rt = _TYPES[resource]
        return await self._call(
            lambda: self._client.request("DELETE", rt.path(namespace, name), body=body, route=rt.plural)
        )

    def watch_shared(self, resource: str, resource_version: str) -> _Watch:
        return _Watch(self._client.watch(_TYPES[resource], None, resource_version).__aiter__())


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    """Registers the nodes, keeps them Ready and runs their pods; ``run()`` until cancelled."""

    def __init__(self, client: clients.KubeClient, settings: sim_settings.SimSettings) -> None:
        self._client = client
        self._settings = settings
        self._api = ClientApi(client)
        self.kubelet = kubelet.Kubelet(self._api, settings)
        self.server = kubeletserving.KubeletServer(self.kubelet)

    async def run(self) -> None:
        port = await self.server.start()
        self._api.kubelet_endpoint = (self.server.host, port)
        try:
            await self._run()
        finally:
            await asyncio.shield(self.server.stop())

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.kubelet.run(), name="nodeagent-kubelet")
            tasks.create_task(self._renew_forever(), name="nodeagent-leases")

    async def _renew_forever(self) -> None:
        while True:
            for index in range(self._settings.nodes):
                try:
                    await self._renew(nodes.node_name(index))
                except clients.ApiError as exc:
                    log.warning("node agent: renewing the lease of %s failed: %s", nodes.node_name(index), exc)
            await asyncio.sleep(RENEW_EVERY)

    async def _renew(self, name: str) -> None:
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _now()}
        try:
            await self._client.patch(LEASES, LEASE_NAMESPACE, name, {"spec": spec})
        except clients.ApiError as exc:
            if not exc.not_found:
                raise
            node = await self._client.get(NODES, None, name)
            lease = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"],
                }]},
                "spec": spec,
            }
            await self._client.create(LEASES, LEASE_NAMESPACE, lease)


async def run(kubeconfig: pathlib.Path, context: str | None, settings: sim_settings.SimSettings) -> None:
    """Run the node agent against one cluster until cancelled."""
    async with await clients.KubeClient.connect(kubeconfig, context) as client:
        await NodeAgent(client, settings).run()


async def wait_ready(
    kubeconfig: pathlib.Path, context: str | None, count: int, agent: asyncio.Task[None], timeout: float = 60.0,
) -> None:
    """Return once ``count`` nodes ``sim-node-*`` are registered and Ready; raise if the agent dies first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with await clients.KubeClient.connect(kubeconfig, context) as client:
        while True:
            if agent.done():
                agent.result()
                raise RuntimeError("the node agent stopped before its nodes were Ready")
            items, _ = await client.list(NODES)
            ready = [n for n in items if nodes.node_index(n["metadata"]["name"]) is not None and objects.is_ready(n)]
            if len(ready) >= count:
                return
            if loop.time() > deadline:
                raise RuntimeError(f"only {len(ready)} of {count} nodes were Ready after {timeout:g}s")
            await asyncio.sleep(0.2)
