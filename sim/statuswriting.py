"""Read-change-write of an object's status, through any API server with ``get`` and ``update``.

In: an :class:`Objects` — the in-process store (sim/apiserver/store.py) or the node side's
:class:`sim.node.apis.NodeApi` — and a change to make. Out: the status subresource written, read
again and redone on 409 Conflict. Used by the scheduler (a pod's nomination) and the kubelet (an
eviction of a pod it does not run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sim import errors

Obj = dict[str, Any]


class Objects(Protocol):
    """Objects read and written by resource (plural) and name; failures are :class:`sim.errors.ApiError`."""

    async def get(self, resource: str, namespace: str | None, name: str) -> Obj:
        """The object; 404 when there is none."""
        ...

    async def update(self, resource: str, obj: Obj, subresource: str | None = None) -> Obj:
        """Write ``obj`` (its ``status`` with ``subresource="status"``), guarded by its resourceVersion (409)."""
        ...

    async def update_shared(self, resource: str, obj: Obj, subresource: str | None = None) -> Obj:
        """``update``, answered with an object that may be the API server's own (never mutated): a caller
        that only reads the answer spares the in-process store a copy of the whole object per write."""
        ...


async def change_status(
    api: Objects, resource: str, namespace: str | None, name: str, change: Callable[[Obj], bool], attempts: int,
) -> bool:
    """Read the object, let ``change`` edit it, write its status subresource; on 409 read it again and redo.
    ``change`` returning False means nothing to write. False only when every attempt met a conflict; a 404
    is raised."""
    for _ in range(attempts):
        obj = await api.get(resource, namespace, name)
        if not change(obj):
            return True
        try:
            await api.update_shared(resource, obj, subresource="status")
            return True
        except errors.ApiError as exc:
            if exc.code != 409:
                raise
    return False
