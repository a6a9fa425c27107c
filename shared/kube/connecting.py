"""One KubeClient per cluster, opened on first use.

In: a cluster name (the first part of a job key). Out: a client for it: the
kubeconfig context of that name, or the in-cluster config for the one cluster
served that way, each telling ``on_request`` of its requests. ``close()`` closes
them all and is safe twice. Each client's requests run under its cluster's
:class:`~shared.kube.reaching.Reachability`: a cluster that stops answering
fails its requests fast (:class:`~shared.kube.clients.ClusterUnreachable`)
instead of holding the worker, and is probed until it answers again.
"""

from __future__ import annotations

import asyncio
import os
import pathlib

import yaml

from shared.kube import clients, reaching


def context_names(kubeconfig: pathlib.Path) -> list[str]:
    """The context names of ``kubeconfig`` (a job key's cluster is one of them; maybe none);
    ValueError naming the file when it cannot be read or is not a YAML mapping."""
    try:
        document = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the kubeconfig {kubeconfig}: {' '.join(str(exc).split())}") from None
    if not isinstance(document, dict):
        raise ValueError(f"cannot read the kubeconfig {kubeconfig}: not a YAML mapping")
    contexts = document.get("contexts")
    return [str(c["name"]) for c in contexts if isinstance(c, dict) and c.get("name")] if isinstance(
        contexts, list) else []


class UnknownCluster(Exception):
    """A job key names a cluster this worker has no credentials for (not retriable)."""


class ClusterClients:
    def __init__(
        self, kubeconfig: pathlib.Path | None, in_cluster_name: str = "in-cluster",
        on_request: clients.RequestHook | None = None, reach: reaching.ReachSettings = reaching.ReachSettings(),
    ) -> None:
        self._kubeconfig = kubeconfig
        self._in_cluster_name = in_cluster_name
        self._on_request = on_request
        self._reach = reach
        self._clients: dict[str, clients.KubeClient] = {}
        self._lock = asyncio.Lock()

    async def get(self, cluster: str) -> clients.KubeClient:
        client = self._clients.get(cluster)
        if client is not None:
            return client
        async with self._lock:
            client = self._clients.get(cluster)
            if client is None:
                client = await self._connect(cluster)
                self._clients[cluster] = client
            return client

    async def _connect(self, cluster: str) -> clients.KubeClient:
        if self._kubeconfig is None:
            if cluster != self._in_cluster_name or not os.environ.get("KUBERNETES_SERVICE_HOST"):
                raise UnknownCluster(f"no kubeconfig, and cluster {cluster!r} is not the in-cluster one")
            return await clients.KubeClient.connect(
                on_request=self._on_request, guard=reaching.Reachability(cluster, self._reach))
        try:
            return await clients.KubeClient.connect(
                self._kubeconfig, context=cluster, on_request=self._on_request,
                guard=reaching.Reachability(cluster, self._reach))
        except Exception as exc:  # kubernetes-asyncio raises ConfigException for an unknown context
            raise UnknownCluster(f"cluster {cluster!r}: no usable context in {self._kubeconfig}: {exc}") from exc

    async def close(self) -> None:
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()
