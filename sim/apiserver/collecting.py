"""The ownerReference garbage collector of the local cluster.

In: the store's ``gc_queue`` — ("gone", uid) when an owner was removed, ("foreground", uid)
when an owner entered foreground deletion, ("recheck", uid) when a dependent of ``uid``
was removed. Out: deletions of dependents whose owners are all gone (background),
removal of dangling ownerReferences when other owners remain, deletion of an owner's
dependents and then of its ``foregroundDeletion`` finalizer (foreground).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sim import errors
from sim.apiserver import store as sim_store

log = logging.getLogger(__name__)


class GarbageCollector:
    def __init__(self, store: sim_store.Store) -> None:
        self._store = store

    async def run(self) -> None:
        queue = self._store.gc_queue
        while True:
            kind, uid = await queue.get()
            try:
                if kind == "gone":
                    await self._owner_gone(uid)
                else:
                    await self._foreground(uid)
            except asyncio.CancelledError:
                raise
            except errors.ApiError as exc:
                # The object changed or went meanwhile; the next event about it retries.
                log.debug("garbage collection of %s %s: %s", kind, uid, exc)
            except Exception:
                log.exception("garbage collection of %s %s failed", kind, uid)

    async def _owner_gone(self, uid: str) -> None:
        store = self._store
        for resource, namespace, name in store.dependents(uid):
            dep = store.peek(resource, namespace, name)
            if dep is None:
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            alive = [r for r in refs if store.by_uid(r.get("uid", "")) is not None]
            if alive:
                await self._drop_refs(resource, dep, {r.get("uid") for r in refs} - {r.get("uid") for r in alive})
            elif not dep["metadata"].get("deletionTimestamp"):
                await store.delete(resource, namespace, name, propagation="Background")

    async def _drop_refs(self, resource: str, dep: dict[str, Any], gone: set[Any]) -> None:
        refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") not in gone]
        patch = {"metadata": {"ownerReferences": refs, "resourceVersion": dep["metadata"]["resourceVersion"]}}
        await self._store.patch(resource, dep["metadata"].get("namespace"), dep["metadata"]["name"], patch, "merge")

    async def _foreground(self, uid: str) -> None:
        store = self._store
        owner = store.by_uid(uid)
        if owner is None:
            await self._owner_gone(uid)
            return
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or "foregroundDeletion" not in (meta.get("finalizers") or ()):
            return
        blocking = False
        for resource, namespace, name in store.dependents(uid):
            dep = store.peek(resource, namespace, name)
            if dep is None:
                continue
            refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") == uid]
            if any(r.get("blockOwnerDeletion") for r in refs):
                blocking = True
            if not dep["metadata"].get("deletionTimestamp"):
                await store.delete(resource, namespace, name, propagation="Foreground")
        if blocking:
            # Still waiting for a blocking dependent; its removal queues ("recheck", uid).
            still = [d for d in store.dependents(uid) if store.peek(*d) is not None]
            if any(
                r.get("uid") == uid and r.get("blockOwnerDeletion")
                for d in still
                for r in (store.peek(*d) or {}).get("metadata", {}).get("ownerReferences") or []
            ):
                return
        owner = store.by_uid(uid)
        if owner is None:
            return
        where = store.locate(uid)
        if where is None:
            return
        resource = where[0]
        finalizers = [f for f in owner["metadata"].get("finalizers") or [] if f != "foregroundDeletion"]
        patch = {"metadata": {"finalizers": finalizers or None,
                              "resourceVersion": owner["metadata"]["resourceVersion"]}}
        await store.patch(resource, owner["metadata"].get("namespace"), owner["metadata"]["name"], patch, "merge")

