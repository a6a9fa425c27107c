"""What the node side needs from an API server: the protocol the kubelet and its runtimes are written against.

In: an implementation — the local cluster's in-process store (sim/apiserver/store.py, structurally), or
:class:`sim.node.nodeagent.ClientApi` over HTTP for any API server. Out, to the kubelet: its nodes, pods
and Services listed and watched (an informer's :class:`sim.listwatching.Source`), nodes registered and
updated, pod statuses written, ConfigMaps and Secrets read for volumes and env, pods deleted once done.

Every operation fails with :class:`sim.errors.ApiError` carrying the API server's HTTP code (404, 409,
410 …): the store raises it as it is, ClientApi turns a client error into it, and the kubelet decides
on the code alone.
"""

from __future__ import annotations

from typing import Any, Protocol

from sim import listwatching, statuswriting

Obj = dict[str, Any]


class NodeApi(listwatching.Source, statuswriting.Objects, Protocol):
    """The API server as the node side sees it; resources by plural (``pods``, ``nodes``, ``configmaps`` …)."""

    async def create(self, resource: str, obj: Obj, namespace: str | None = None) -> Obj:
        """Create ``obj``; 409 when it exists."""
        ...

    async def delete(
        self, resource: str, namespace: str | None, name: str, propagation: str = "Background",
        preconditions: dict[str, Any] | None = None,
    ) -> Obj:
        """Delete the object, if ``preconditions`` (a uid) still hold (409 otherwise)."""
        ...

