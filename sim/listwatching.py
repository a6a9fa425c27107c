"""List+watch of one resource of an API server, for the scheduler, the Job controller and the kubelet.

In: a :class:`Source` — the in-process store (sim/apiserver/store.py) or the node side's API
(sim/node/apis.py, over HTTP in the node agent) — and a resource key. Out: calls of a
synchronous handler `handler(event_type, obj)` with ADDED / MODIFIED /
DELETED, in resourceVersion order. After a 410 Gone or a watch that ends, it
lists again and reports the difference against what it had seen (objects
that vanished meanwhile come as DELETED), as client-go's reflector does.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Callable
from typing import Any, Protocol

from sim import errors, objects

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], None]
"""Called with ("ADDED" | "MODIFIED" | "DELETED", object); must not block, and must not
change the object: it may be the store's own (never mutated) version."""

RETRY_DELAY = 0.2
"""Seconds before listing again after an error other than 410 Gone."""


class WatchEvent(Protocol):
    """One event of a watch: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, with its object."""

    @property
    def type(self) -> str: ...

    @property
    def object(self) -> dict[str, Any]: ...


class Watch(Protocol):
    """An open watch: events until it ends; ``aclose()`` lets the API server forget it."""

    def __aiter__(self) -> Watch: ...

    async def __anext__(self) -> WatchEvent: ...

    async def aclose(self) -> None: ...


class Source(Protocol):
    """What an informer lists and watches; failures are :class:`sim.errors.ApiError` (410: list again)."""

    async def list(self, resource: str, namespace: str | None = None) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every object of ``resource`` and the resourceVersion of the list."""
        ...

    def watch_shared(self, resource: str, resource_version: str) -> Watch:
        """A watch of every object of ``resource`` after ``resource_version``, with bookmarks. Its objects
        may be the API server's own (never mutated): the informer's handlers only read them, and a copy of
        every pod event for each in-process controller would cost more than the event."""
        ...


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = objects.metadata(obj)
    return metadata.get("namespace") or "", metadata.get("name") or ""


class Informer:
    """Keeps `handler` up to date with every object of `resource`; `run()` until cancelled."""

    def __init__(self, source: Source, resource: str, handler: Handler, *, name: str) -> None:
        self._source = source
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
        items, version = await self._source.list(self.resource)
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
            rv = objects.metadata(obj).get("resourceVersion") or ""
            if kind == "MODIFIED" and self._seen[key] == rv:
                continue
            self._seen[key] = rv
            self._dispatch(kind, obj)
        self.synced.set()
        return str(version)

    async def _watch(self, version: str) -> None:
        watch = self._source.watch_shared(self.resource, version)
        try:
            await self._consume(watch)
        finally:
            # Shielded: the API server must forget the watch even when we are being cancelled twice.
            await asyncio.shield(watch.aclose())

    async def _consume(self, watch: Watch) -> None:
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
                self._seen[key] = objects.metadata(obj).get("resourceVersion") or ""
            self._dispatch(kind, obj)

    def _dispatch(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            self._handler(kind, obj)
        except Exception:
            # One bad object must not stop the stream for every other one.
            log.exception("%s: handling %s of %s/%s failed", self.name, kind, *object_key(obj))
