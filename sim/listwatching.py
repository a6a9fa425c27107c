"""List+watch of one resource of the in-process store, for the scheduler and the kubelet.

In: a store (sim/apiserver/store.py contract) and a resource key. Out: calls of a
synchronous handler `handler(event_type, obj)` with ADDED / MODIFIED /
DELETED, in resourceVersion order. After a 410 Gone or a watch that ends, it
lists again and reports the difference against what it had seen (objects
that vanished meanwhile come as DELETED), as client-go's reflector does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from sim import errors

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], None]
"""Called with ("ADDED" | "MODIFIED" | "DELETED", object); must not block, and must not
change the object: it may be the store's own (never mutated) version."""

RETRY_DELAY = 0.2
"""Seconds before listing again after an error other than 410 Gone."""


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name") or ""


class Informer:
    """Keeps `handler` up to date with every object of `resource`; `run()` until cancelled."""

    def __init__(self, store: Any, resource: str, handler: Handler, *, name: str) -> None:
        self._store = store
        self.resource = resource
        self._handler = handler
        self.name = name
        self._seen: dict[tuple[str, str], str] = {}
        self.synced = asyncio.Event()
        """Set once the first list has been handed to the handler."""

    async def run(self) -> None:
        while True:
            try:
                version = await self._relist()
                await self._watch(version)
            except asyncio.CancelledError:
                raise
            except errors.ApiError as exc:
                if exc.code != 410:
                    log.warning("%s: %s; listing again in %.1fs", self.name, exc, RETRY_DELAY)
                    await asyncio.sleep(RETRY_DELAY)
            except Exception:
                log.exception("%s: list/watch failed; listing again in %.1fs", self.name, RETRY_DELAY)
                await asyncio.sleep(RETRY_DELAY)

    async def _relist(self) -> str:
        items, version = await self._store.list(self.resource)
        present = {}
        for obj in items:
            key = object_key(obj)
            present[key] = obj
        for key in list(self._seen):
            if key not in present:
                del self._seen[key]
                namespace, name = key
                self._dispatch("DELETED", {"metadata": {"namespace": namespace, "name": name}})
        for key, obj in present.items():
            kind = "MODIFIED" if key in self._seen else "ADDED"
            rv = (obj.get("metadata") or {}).get("resourceVersion") or ""
            if kind == "MODIFIED" and self._seen[key] == rv:
                continue
            self._seen[key] = rv
            self._dispatch(kind, obj)
        self.synced.set()
        return str(version)

    async def _watch(self, version: str) -> None:
        open_watch = getattr(self._store, "open_watch", None)
        if open_watch is not None:
            # The stored objects themselves, not copies: handlers only read them, and a copy of
            # every pod event for each in-process controller would cost more than the event.
            watch = open_watch(self.resource, None, version, None, None, True, copies=False)
        else:
            watch = self._store.watch(self.resource, resource_version=version, bookmarks=True)
        try:
            await self._consume(watch)
        finally:
            # Shielded: the store must forget the watch even when we are being cancelled twice.
            aclose = getattr(watch, "aclose", None)
            if aclose is not None:
                await asyncio.shield(aclose())

    async def _consume(self, watch: AsyncIterator[Any]) -> None:
        task = asyncio.current_task()
        async for event in watch:
            if task is not None and task.cancelling():
                # Python 3.11's asyncio.wait_for (inside the store's watch) can swallow a
                # cancellation that races with an arriving event; honour it here.
                raise asyncio.CancelledError
            kind = event.type
            obj = event.object
            if kind == "BOOKMARK":
                continue
            if kind == "ERROR":
                code = (obj or {}).get("code")
                if code != 410:
                    log.warning("%s: watch error %s; listing again", self.name, obj)
                return
            key = object_key(obj)
            if kind == "DELETED":
                self._seen.pop(key, None)
            else:
                self._seen[key] = (obj.get("metadata") or {}).get("resourceVersion") or ""
            self._dispatch(kind, obj)

    def _dispatch(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            self._handler(kind, obj)
        except Exception:
            # One bad object must not stop the stream for every other one.
            log.exception("%s: handling %s of %s/%s failed", self.name, kind, *object_key(obj))
