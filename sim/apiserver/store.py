"""The object store of the local cluster, with kube-apiserver semantics.

In: create / get / list / update / patch / delete / watch calls, from the HTTP server and
from the in-process controllers (scheduler, kubelet, garbage collector). Out: plain JSON
objects (copies) and watch events, with one monotonic resourceVersion counter, uid,
creationTimestamp, generation, optimistic concurrency, status subresource separation,
finalizers, deletion propagation and a bounded watch history (410 Gone beyond it).

Resource keys are ``pods``, ``nodes`` … for the core group and ``<plural>.<group>``
otherwise (``pytorchjobs.kubeflow.org``). Every write is synchronous under the hood, so
it is atomic with respect to the event loop; the ``async`` methods are the contract.

Stored objects are never mutated in place: each write stores a new dict (sharing
unchanged subtrees with the previous version), which lets the server serialise stored
objects directly while in-process callers always get copies.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import builtins
import collections
import datetime
import json
import logging
import random
import re
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NamedTuple

from sim import errors, objects, statuswriting
from sim import settings as sim_settings
from sim.apiserver import applying, patching, resources, schema, selectors

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace or "", name) of an object within one resource."""

CRDS = "customresourcedefinitions.apiextensions.k8s.io"
JOBS = "jobs.batch"
NAMESPACES = "namespaces"
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start "
    "a new list without the continue parameter, or use the continue value from the response."
)


ENCODINGS_KEPT = 10000
"""Changes, the latest, whose wire encodings (shared by every watch) are kept."""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, with its object."""

    __slots__ = ("type", "object", "source")

    def __init__(self, type: str, object: Obj, source: _Change | None = None) -> None:  # noqa: A002
        self.type = type
        self.object = object
        self.source = source
        """The stored change this event reports (None for synthetic events); lets the server encode once."""

    def __repr__(self) -> str:
        meta = objects.metadata(self.object)
        return f"WatchEvent({self.type}, {meta.get('namespace', '')}/{meta.get('name', '')}@{meta.get('resourceVersion')})"


class _Change:
    __slots__ = ("rv", "resource", "type", "obj", "old", "encoded")

    def __init__(self, rv: int, resource: str, type: str, obj: Obj, old: Obj | None) -> None:
        self.rv = rv
        self.resource = resource
        self.type = type
        self.obj = obj
        self.old = old
        self.encoded: dict[str, bytes] = {}
        """Wire encodings of this change by event type, filled by the server and shared by all watches."""


class Watch:
    """An open watch: an async iterator of ``WatchEvent`` fed by the store; ``close()`` ends it.

    ``copies`` False hands out the stored (never mutated) objects; the server uses that to
    serialise without copying. Objects of in-process watches are copies.
    """

    def __init__(
        self,
        store: Store,
        resource: str,
        namespace: str | None,
        selector: selectors.Selector,
        bookmarks: bool,
        copies: bool,
    ) -> None:
        self._store = store
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.bookmarks = bookmarks
        self._copies = copies
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()
        self.closed = False

    def offer(self, change: _Change) -> None:
        """Queue ``change`` if it concerns this watch, turning selector transitions into ADDED / DELETED."""
        obj = change.obj
        if self.namespace and objects.metadata(obj).get("namespace") != self.namespace:
            return
        kind = change.type
        if self.selector:
            now_in = self.selector.matches(obj)
            if kind == "MODIFIED" and change.old is not None:
                was_in = self.selector.matches(change.old)
                if not was_in and not now_in:
                    return
                if was_in and not now_in:
                    kind = "DELETED"
                    # As kube's watch cache: the last state that matched, at the new resourceVersion.
                    obj = dict(change.old, metadata=dict(change.old["metadata"], resourceVersion=str(change.rv)))
                    self.queue.put_nowait(WatchEvent(kind, obj, None))
                    return
                elif now_in and not was_in:
                    kind = "ADDED"
            elif not now_in:
                return
        self.queue.put_nowait(WatchEvent(kind, obj, change))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._store._watchers[self.resource].discard(self)
            self.queue.put_nowait(None)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        if self.closed and self.queue.empty():
            raise StopAsyncIteration
        if self.bookmarks and self.queue.empty():
            try:
                event = await asyncio.wait_for(self.queue.get(), self._store.bookmark_interval)
            except TimeoutError:
                if self.closed:
                    raise StopAsyncIteration from None
                return WatchEvent("BOOKMARK", self._store.bookmark_object(self.resource))
        else:
            event = await self.queue.get()
        if event is None:
            self.closed = True
            raise StopAsyncIteration
        if self._copies and event.type != "BOOKMARK":
            return WatchEvent(event.type, patching.deep_copy(event.object))
        return event

    async def aclose(self) -> None:
        self.close()


class Staged(NamedTuple):
    """A patch or an apply made to an object but not stored: what admission is shown first."""

    res: resources.Resource
    """The kind (its storage version)."""
    written: resources.Resource
    """The version the write comes through."""
    stored: Obj | None
    """The object as stored now (None: an apply that creates it)."""
    new: Obj
    """The object the write makes, before the strategy (status kept, defaults, generation)."""


class Store:
    """All objects of the local cluster, by (resource, namespace, name)."""

    def __init__(self, settings: sim_settings.SimSettings | None = None) -> None:
        self.settings = settings or sim_settings.SimSettings()
        self.bookmark_interval = self.settings.bookmark_interval
        self._rv = 0
        self._resources: dict[str, resources.Resource] = {r.key: r for r in resources.BUILTINS}
        self._objects: dict[str, dict[Key, Obj]] = collections.defaultdict(dict)
        self._labelled: dict[str, dict[str, dict[str, set[Key]]]] = {}
        self._sorted_keys: dict[str, builtins.list[Key]] = {}
        """Resource → its keys in list order, dropped when one is added or removed (``_ordered``)."""
        """Resource → label key → value → the objects with that label: an index of the label keys that
        list selectors have asked for by equality (built on the first such list), so that a list of a
        job's pods reads its pods, not every pod of the cluster."""
        self._by_uid: dict[str, tuple[str, str, str]] = {}
        self._dependents: dict[str, set[tuple[str, str, str]]] = collections.defaultdict(set)
        self._history: collections.deque[_Change] = collections.deque(maxlen=max(1, self.settings.watch_window))
        self._recent: collections.deque[_Change] = collections.deque(maxlen=ENCODINGS_KEPT)
        """The last changes, whose wire encodings are kept; an older change's are dropped (a watch that far
        behind encodes it again), so the history's memory is its objects, not also their JSON."""
        self._watchers: dict[str, set[Watch]] = collections.defaultdict(set)
        self._next_ip = 10
        self.gc_queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        """Work for the garbage collector: ("gone", uid) of removed objects, ("foreground", uid)."""
        self.validate_updates = False
        """Refuse pod updates kube-apiserver refuses (set by the HTTP server: client writes only)."""
        self.registry_version = 0
        """Bumped whenever the set of served kinds changes (CRD created, changed or deleted)."""
        for name in INITIAL_NAMESPACES:
            self._create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, None)

    # --- kinds -----------------------------------------------------------------------------

    def resource(self, key: str) -> resources.Resource:
        try:
            return self._resources[key]
        except KeyError:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource") from None

    def kinds(self) -> list[resources.Resource]:
        return list(self._resources.values())

    def register(self, resource: resources.Resource) -> None:
        self._resources[resource.key] = resource
        self.registry_version += 1

    def unregister(self, key: str) -> None:
        if self._resources.pop(key, None) is not None:
            self.registry_version += 1

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def bookmark_object(self, resource: str) -> Obj:
        res = self._resources.get(resource)
        return {
            "kind": res.kind if res else "",
            "apiVersion": res.api_version() if res else "",
            "metadata": {"resourceVersion": str(self._rv)},
        }

    # --- the contract --------------------------------------------------------------------------

    async def create(self, resource: str, obj: Obj, namespace: str | None = None) -> Obj:
        return patching.deep_copy(self._create(resource, patching.deep_copy(obj), namespace))  # type: ignore[no-any-return]

    async def get(self, resource: str, namespace: str | None, name: str) -> Obj:
        return patching.deep_copy(self._get(resource, namespace, name))  # type: ignore[no-any-return]

    async def list(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[Obj], str]:
        items, rv, _, _ = self.list_page(resource, namespace, label_selector, field_selector)
        return [patching.deep_copy(i) for i in items], rv

    async def update(self, resource: str, obj: Obj, subresource: str | None = None) -> Obj:
        return patching.deep_copy(await self.update_shared(resource, obj, subresource))  # type: ignore[no-any-return]

    async def update_shared(self, resource: str, obj: Obj, subresource: str | None = None) -> Obj:
        """``update``, answered with the stored object itself (do not mutate)."""
        return self._update(resource, patching.deep_copy(obj), subresource)


    async def change_status(
        self, resource: str, namespace: str | None, name: str, change: Callable[[Obj], bool], attempts: int,
    ) -> bool:
        """Read the object, let ``change`` edit it, write its status subresource; on
        409 read it again and redo. ``change`` returning False means nothing to write.
        False only when every attempt met a conflict; a 404 is raised."""
        return await statuswriting.change_status(self, resource, namespace, name, change, attempts)

    async def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: object,
        patch_type: str,
        subresource: str | None = None,
    ) -> Obj:
        return patching.deep_copy(self._patch(resource, namespace, name, patch, patch_type, subresource))  # type: ignore[no-any-return]

    async def delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        propagation: str = "Background",
        preconditions: dict[str, Any] | None = None,
    ) -> Obj:
        return patching.deep_copy(self._delete(resource, namespace, name, propagation, preconditions))  # type: ignore[no-any-return]

    def watch(
        self,
        resource: str,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        bookmarks: bool = False,
    ) -> Watch:
        """Open a watch now; raises ``ApiError`` 410 (Expired) for a resourceVersion older than the window."""
        return self.open_watch(resource, namespace, resource_version, label_selector, field_selector,
                               bookmarks, copies=True)

    def watch_shared(self, resource: str, resource_version: str) -> Watch:
        """An informer's watch (sim/listwatching.py): every object, bookmarks, the stored objects themselves."""
        return self.open_watch(resource, None, resource_version, None, None, True, copies=False)

    def subscribe(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Watch:
        """A watch of the changes from now on (no initial ADDED events), for in-process controllers."""
        return self.open_watch(resource, namespace, self.resource_version, label_selector,
                               field_selector, False, copies=True)

    # --- reads -------------------------------------------------------------------------------

    def _get(self, resource: str, namespace: str | None, name: str) -> Obj:
        res = self.resource(resource)
        obj = self._objects[resource].get((namespace or "" if res.namespaced else "", name))
        if obj is None:
            raise errors.not_found(resource, name)
        return obj

    def peek(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        """The stored object (do not mutate) or None."""
        res = self._resources.get(resource)
        if res is None:
            return None
        return self._objects[resource].get((namespace or "" if res.namespaced else "", name))

    def list_page(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[builtins.list[Obj], str, str | None, int | None]:
        """Stored objects (do not mutate) in (namespace, name) order: items, list rv, continue, remaining."""
        res = self.resource(resource)
        selector = selectors.parse(label_selector, field_selector)
        objects = self._objects[resource]
        list_rv = self._rv
        start: Key | None = None
        if continue_token:
            list_rv, start = self._decode_continue(continue_token)
        candidates = self._indexed(resource, selector.equalities) if selector.equalities else None
        keys = self._ordered(resource) if candidates is None else sorted(candidates)
        # The page is a slice of the sorted keys: a namespace's keys are (namespace, …) and no other
        # namespace sorts between (namespace, "") and (namespace + "\0", ""); a page of a relist of
        # 80,000 pods reads its 500 keys, not all of them.
        lo, hi = 0, len(keys)
        if namespace and res.namespaced:
            lo, hi = bisect.bisect_left(keys, (namespace, "")), bisect.bisect_left(keys, (namespace + "\0", ""))
        if start is not None:
            lo = max(lo, bisect.bisect_right(keys, start))
        items: builtins.list[Obj] = []
        next_token = None
        remaining = None
        for n in range(lo, hi):
            obj = objects[keys[n]]
            if selector and not selector.matches(obj):
                continue
            if limit and len(items) >= limit:
                next_token = self._encode_continue(list_rv, items[-1])
                if not selector:
                    remaining = hi - n
                break
            items.append(obj)
        return items, str(list_rv), next_token, remaining

    def _ordered(self, resource: str) -> builtins.list[Key]:
        """The keys of ``resource`` sorted, kept until an object is added or removed."""
        keys = self._sorted_keys.get(resource)
        if keys is None:
            keys = self._sorted_keys[resource] = sorted(self._objects[resource])
        return keys

    def _indexed(self, resource: str, equalities: tuple[tuple[str, str], ...]) -> set[Key]:
        """The keys of the objects that have every (label, value) of ``equalities`` (a superset of those a
        selector with them matches), from the label index; the label keys not yet indexed are indexed."""
        index = self._labelled.setdefault(resource, {})
        found: set[Key] | None = None
        for label, value in equalities:
            by_value = index.get(label)
            if by_value is None:
                by_value = index[label] = collections.defaultdict(set)
                for key, obj in self._objects[resource].items():
                    have = (obj["metadata"].get("labels") or {}).get(label)
                    if isinstance(have, str):
                        by_value[have].add(key)
            keys = by_value.get(value, set())
            found = keys if found is None or len(keys) < len(found) else found
        return set(found or ())

    def _put(self, resource: str, key: Key, new: Obj) -> None:
        """Store ``new`` under ``key`` (its new parts interned: :func:`_compact`), keeping the label index."""
        objects = self._objects[resource]
        old = objects.get(key)
        if old is None:
            self._sorted_keys.pop(resource, None)
        _compact(new, old)
        index = self._labelled.get(resource)
        if index:
            old_labels = (old["metadata"].get("labels") or {}) if old is not None else {}
            new_labels = new["metadata"].get("labels") or {}
            if old_labels is not new_labels:
                for label, by_value in index.items():
                    was, now_ = old_labels.get(label), new_labels.get(label)
                    if was != now_:
                        if isinstance(was, str):
                            by_value[was].discard(key)
                            if not by_value[was]:
                                del by_value[was]
                        if isinstance(now_, str):
                            by_value[now_].add(key)
        objects[key] = new

    def _drop(self, resource: str, key: Key) -> None:
        """Remove the object under ``key``, keeping the label index."""
        old = self._objects[resource].pop(key)
        self._sorted_keys.pop(resource, None)
        for label, by_value in self._labelled.get(resource, {}).items():
            was = (old["metadata"].get("labels") or {}).get(label)
            if isinstance(was, str):
                by_value[was].discard(key)
                if not by_value[was]:
                    del by_value[was]

    def _encode_continue(self, rv: int, last: Obj) -> str:
        meta = last["metadata"]
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": [meta.get("namespace", ""), meta["name"]]})
        return base64.urlsafe_b64encode(raw.encode()).decode()

    def _decode_continue(self, token: str) -> tuple[int, Key]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            rv, (ns, name) = int(data["rv"]), data["start"]
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.bad_request(f"continue key is not valid: {exc}") from None
        if rv < self._oldest_resumable():
            raise errors.ApiError(410, "Expired", _CONTINUE_EXPIRED)
        return rv, (str(ns), str(name))

    def _oldest_resumable(self) -> int:
        """Smallest resourceVersion a watch can start from: every later change is still in the history."""
        history = self._history
        if len(history) < (history.maxlen or 0) or not history:
            return 0
        return history[0].rv - 1

    def open_watch(
        self,
        resource: str,
        namespace: str | None,
        resource_version: str | None,
        label_selector: str | None,
        field_selector: str | None,
        bookmarks: bool,
        *,
        copies: bool,
    ) -> Watch:
        res = self.resource(resource)
        selector = selectors.parse(label_selector, field_selector)
        ns = namespace if res.namespaced else None
        watch = Watch(self, resource, ns, selector, bookmarks, copies)
        if resource_version in (None, "", "0"):
            for key in sorted(self._objects[resource]):
                obj = self._objects[resource][key]
                if ns and key[0] != ns:
                    continue
                if selector and not selector.matches(obj):
                    continue
                watch.queue.put_nowait(WatchEvent("ADDED", obj))
        else:
            try:
                start = int(resource_version)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {resource_version!r}") from None
            oldest = self._oldest_resumable()
            if start < oldest:
                raise errors.ApiError(410, "Expired", f"too old resource version: {start} ({oldest + 1})")
            if start < self._rv:
                for change in self._history:
                    if change.rv > start and change.resource == resource:
                        watch.offer(change)
        self._watchers[resource].add(watch)
        return watch

    # --- writes --------------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _record(self, change: _Change) -> None:
        self._history.append(change)
        if len(self._recent) == ENCODINGS_KEPT:
            self._recent[0].encoded.clear()
        self._recent.append(change)
        for watch in self._watchers.get(change.resource, ()):
            watch.offer(change)

    def _index(self, resource: str, old: Obj | None, new: Obj | None) -> None:
        old_owners = _owner_uids(old) if old else set()
        new_owners = _owner_uids(new) if new else set()
        if old_owners == new_owners:
            return
        ref_obj = new or old
        assert ref_obj is not None
        meta = ref_obj["metadata"]
        ident = (resource, meta.get("namespace", ""), meta["name"])
        for uid in old_owners - new_owners:
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(ident)
                if not deps:
                    del self._dependents[uid]
        for uid in new_owners - old_owners:
            self._dependents[uid].add(ident)
            if uid not in self._by_uid:
                self.gc_queue.put_nowait(("gone", uid))

    def _namespace_of(self, res: resources.Resource, namespace: str | None, meta: Obj) -> str:
        if not res.namespaced:
            return ""
        given = meta.get("namespace")
        if namespace and given and given != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        ns = namespace or given or ""
        if not ns:
            raise errors.bad_request("an empty namespace may not be set during creation")
        return ns

    def _validate_name(self, res: resources.Resource, name: str, *, generated: bool = False) -> None:
        field = "metadata.generateName" if generated else "metadata.name"
        if res.name_rule == "label":
            ok, msg, limit = _LABEL.match(name), _LABEL_MSG, 63
        else:
            ok, msg, limit = _SUBDOMAIN.match(name), _SUBDOMAIN_MSG, 253
        causes = []
        if not ok:
            causes.append(errors.field_invalid(field, name, msg))
        if len(name) > limit:
            causes.append(errors.field_invalid(field, name, f"must be no more than {limit} characters"))
        if causes:
            raise errors.invalid(res.kind, res.key, name, causes)

    def _create(self, resource: str, obj: Obj, namespace: str | None, version: str | None = None,
                dry_run: bool = False) -> Obj:
        """Store a new object written through ``version`` (None: the one its apiVersion names, else storage).

        ``dry_run``: check and prepare it as for storing (name generated, defaults, validation) and
        return it as validating admission sees it — no resourceVersion — without storing it."""
        res = self.resource(resource)
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        written = _written_as(res, obj, version)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        else:
            meta = dict(meta)
        obj["metadata"] = meta
        check_shape(res, obj, str(meta.get("name") or meta.get("generateName") or ""))
        ns = self._namespace_of(res, namespace, meta)
        name = meta.get("name") or ""
        if not name:
            generate = meta.get("generateName") or ""
            if not generate:
                raise errors.invalid(res.kind, res.key, "", [
                    errors.field_required("metadata.name", "name or generateName is required")
                ])
            name = generate + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            while (ns, name) in self._objects[resource]:
                name = generate + "".join(random.choices(_GENERATE_ALPHABET, k=5))
        self._validate_name(res, name)
        if res.namespaced:
            namespace_obj = self._objects[NAMESPACES].get(("", ns))
            if namespace_obj is None:
                raise errors.not_found(NAMESPACES, ns)
            if namespace_obj["metadata"].get("deletionTimestamp"):
                raise errors.ApiError(
                    403, "Forbidden",
                    f'{res.key} "{name}" is forbidden: unable to create new content in namespace {ns} '
                    "because it is being terminated",
                )
        objects = self._objects[resource]
        if (ns, name) in objects:
            raise errors.already_exists(resource, name)
        obj.setdefault("apiVersion", res.api_version())
        obj.setdefault("kind", res.kind)
        rv = self._rv + 1 if dry_run else self._next_rv()
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        meta["resourceVersion"] = str(rv)
        if res.generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(field, None)
        self._prepare_create(written, obj)
        if written.schema:
            obj = schema.prune_and_default(written.schema, obj)
            _check_schema(written, obj, name, None)
        if dry_run:
            obj["metadata"].pop("resourceVersion", None)
            return obj
        if written is not res:
            obj = _to_storage(res, obj)
        self._put(resource, (ns, name), obj)
        self._by_uid[meta["uid"]] = (resource, ns, name)
        self._index(resource, None, obj)
        self._record(_Change(rv, resource, "ADDED", obj, None))
        if resource == CRDS:
            self.register(resources.resource_from_crd(obj))
        return obj

    def _prepare_create(self, res: resources.Resource, obj: Obj) -> None:
        """Per-kind defaulting on create, as the kube-apiserver strategies do."""
        key = res.key
        if res.status_subresource and key != "nodes":
            obj.pop("status", None)
        if key in ("pods", "services", JOBS) and not isinstance(obj.get("spec"), dict):
            obj["spec"] = {}
        if key == "pods":
            spec = obj["spec"]
            spec.setdefault("restartPolicy", "Always")
            _default_pod_spec(spec)
            spec.setdefault("serviceAccountName", "default")
            spec.setdefault("serviceAccount", spec["serviceAccountName"])
            spec.setdefault("enableServiceLinks", True)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
            spec.setdefault("priority", 0)
            obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
        elif key == JOBS:
            _prepare_job(obj)
        elif key == "services":
            spec = obj["spec"]
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            if not spec.get("clusterIP"):
                spec["clusterIP"] = self._allocate_ip()
            if spec["clusterIP"] != "None" or "clusterIPs" not in spec:
                spec["clusterIPs"] = [spec["clusterIP"]]
            for port in spec.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
                    if "port" in port:
                        port.setdefault("targetPort", port["port"])
            if spec["type"] in ("ClusterIP", "NodePort", "LoadBalancer"):
                spec.setdefault("ipFamilies", ["IPv4"])
                spec.setdefault("ipFamilyPolicy", "SingleStack")
                spec.setdefault("internalTrafficPolicy", "Cluster")
            obj["status"] = {"loadBalancer": {}}
        elif key == NAMESPACES:
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            labels = obj["metadata"].get("labels") or {}
            obj["metadata"]["labels"] = labels
            labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        elif key == CRDS:
            obj["status"] = _crd_status(obj)
        elif key == "secrets":
            obj.setdefault("type", "Opaque")
            _fold_string_data(obj)

    def _allocate_ip(self) -> str:
        n = self._next_ip
        self._next_ip += 1
        return f"10.96.{(n >> 8) & 255}.{n & 255}"

    def _update(self, resource: str, obj: Obj, subresource: str | None, version: str | None = None,
                dry_run: bool = False) -> Obj:
        res = self.resource(resource)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise errors.bad_request("the body of the request must be an object with metadata")
        meta = obj["metadata"]
        name = meta.get("name") or ""
        if not name:
            raise errors.bad_request("name is required for an update")
        check_shape(res, obj, str(name))
        ns = (meta.get("namespace") or "") if res.namespaced else ""
        if res.namespaced and not ns:
            raise errors.bad_request("namespace is required for an update")
        old = self._objects[resource].get((ns, name))
        if old is None:
            raise errors.not_found(resource, name)
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(resource, name)
        return self._commit_update(res, old, obj, subresource, _written_as(res, obj, version), dry_run)

    def _commit_update(self, res: resources.Resource, old: Obj, new: Obj, subresource: str | None,
                       written: resources.Resource | None = None, dry_run: bool = False) -> Obj:
        """Store ``new`` (a fresh top-level dict, may share subtrees with ``old``) as the next version.

        ``written``: the version the write came through (default the storage version). As in
        kube-apiserver, the written object is pruned and defaulted by that version's schema
        before the strategy takes the parts a write leaves alone (status, or all but status)
        from the old object as that version reads it; validation is that version's, ratcheted
        against the old object; a multi-version kind's object is then stored in the storage
        version (pruned and defaulted by its schema: the defaults kube applies reading etcd).

        ``dry_run``: every check, and the object as validating admission sees it (in the version
        written), but nothing stored."""
        written = written or res
        stored = old
        if written.schema:
            new = schema.prune_and_default(written.schema, new)
        if written is not res:
            old = view(written, old)
        old_meta = old["metadata"]
        if subresource == "status":
            status = new.get("status")
            new = {k: v for k, v in old.items() if k != "status"}
            if status is not None:
                new["status"] = status
            new["metadata"] = dict(old_meta)
        elif subresource is None:
            new_meta = new.get("metadata")
            new["metadata"] = dict(new_meta) if isinstance(new_meta, dict) else {}
            if written.status_subresource:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            meta = new["metadata"]
            for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"):
                if field in old_meta:
                    meta[field] = old_meta[field]
                else:
                    meta.pop(field, None)
            if "managedFields" not in meta and "managedFields" in old_meta:
                meta["managedFields"] = old_meta["managedFields"]
            meta.pop("selfLink", None)
        else:
            raise errors.ApiError(404, "NotFound", f"the server could not find the requested resource ({subresource})")
        if subresource is None:
            check_shape(res, new, old_meta["name"])
            if res.key == "secrets" and "stringData" in new:
                _fold_string_data(new)
            if res.key == "pods" and self.validate_updates:
                _check_pod_update(old, new)
        elif res.builtin and new.get("status") is not None and not isinstance(new.get("status"), dict):
            raise errors.invalid(res.kind, res.key, old_meta["name"],
                                 [errors.field_invalid("status", new.get("status"), "must be an object")])
        new["apiVersion"] = new.get("apiVersion") or old.get("apiVersion")
        new["kind"] = new.get("kind") or old.get("kind")
        if written.schema:
            _check_schema(written, new, old_meta["name"], subresource, old)
        if written is not res:
            new = _to_storage(res, new)
        old = stored
        meta = new["metadata"]
        if old_meta.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or [] if f not in (old_meta.get("finalizers") or [])]
            if added:
                listed = ", ".join(json.dumps(f) for f in added)
                raise errors.invalid(res.kind, res.key, old_meta["name"], [{
                    "reason": "FieldValueForbidden", "field": "metadata.finalizers",
                    "message": "Forbidden: no new finalizers can be added if the object is being deleted, "
                               f"found new finalizers []string{{{listed}}}"}])
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if res.key == CRDS and subresource is None:
            new["status"] = _crd_status(new, old.get("status"))
        if new == old:
            return view(written, old) if dry_run else old
        skip = ("metadata", "status") if written.status_subresource else ("metadata",)
        if res.generation and any(new.get(k) != old.get(k) for k in set(new) | set(old) if k not in skip) \
                and not _is_binding(res, old, new):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if dry_run:
            return view(written, new)
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        ident = (meta.get("namespace", ""), meta["name"])
        self._put(res.key, ident, new)
        self._index(res.key, old, new)
        self._record(_Change(rv, res.key, "MODIFIED", new, old))
        if res.key == CRDS:
            self.register(resources.resource_from_crd(new))
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(res, new)
        if (meta.get("deletionTimestamp") and "foregroundDeletion" in (meta.get("finalizers") or ())
                and "foregroundDeletion" not in (old_meta.get("finalizers") or ())):
            self.gc_queue.put_nowait(("foreground", meta["uid"]))
        return new

    def _patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: object,
        patch_type: str,
        subresource: str | None,
        manager: str | None = None,
        version: str | None = None,
    ) -> Obj:
        """Patch an object through ``version`` (None: the storage version): the patch applies to
        the object as that version reads it."""
        staged = self._patched(resource, namespace, name, patch, patch_type, subresource, manager, version)
        assert staged.stored is not None
        return self._commit_update(staged.res, staged.stored, staged.new, subresource, staged.written)

    def _patched(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: object,
        patch_type: str,
        subresource: str | None,
        manager: str | None = None,
        version: str | None = None,
    ) -> Staged:
        """The first half of ``_patch``: the stored object and the patched one, before the
        strategy (what mutating admission is shown); nothing stored."""
        res = self.resource(resource)
        written = res.at(version)
        if patch_type == "apply":
            raise errors.unsupported_media_type(
                "server-side apply (application/apply-patch+yaml) is not supported by the kto local "
                "cluster; use client-side `kubectl apply` or a merge patch"
            )
        if patch_type == "strategic" and not res.builtin:
            raise errors.strategic_merge_unsupported()
        stored = self._get(resource, namespace, name)
        old = view(written, stored)
        new = patching.apply(old, patch, patch_type)
        if new is old:
            new = dict(old)
        if manager:
            applying.record_update(old, new, manager, written.status_subresource, subresource)
        new_meta = new.get("metadata")
        if isinstance(new_meta, dict):
            rv = new_meta.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(resource, name)
            if new_meta.get("name", name) != name:
                raise errors.bad_request(
                    f"the name of the object ({new_meta.get('name')}) does not match the name on the URL ({name})"
                )
        return Staged(res, written, stored, new)

    def _apply(self, resource: str, namespace: str | None, name: str, config: Obj, manager: str, force: bool,
               subresource: str | None, version: str | None = None) -> tuple[Obj, bool]:
        """Server-side apply of ``config`` as ``manager`` through ``version`` (None: the one the
        config's apiVersion names): (the stored object, whether it was created)."""
        staged = self._applied(resource, namespace, name, config, manager, force, subresource, version)
        if staged.stored is None:
            return self._create(resource, staged.new, namespace, staged.written.version or None), True
        return self._commit_update(staged.res, staged.stored, staged.new, subresource, staged.written), False

    def _applied(self, resource: str, namespace: str | None, name: str, config: Obj, manager: str, force: bool,
                 subresource: str | None, version: str | None = None) -> Staged:
        """The first half of ``_apply``: the stored object (None: apply creates) and the applied one,
        before the strategy; nothing stored."""
        res = self.resource(resource)
        written = _written_as(res, config, version)
        stored = self.peek(resource, namespace, name)
        if stored is None and subresource is not None:
            raise errors.not_found(resource, name)
        old = None if stored is None else view(written, stored)
        new = applying.apply(old, config, manager, force, written.status_subresource, subresource)
        if stored is not None:
            new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        return Staged(res, written, stored, new)

    def _delete(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        propagation: str = "Background",
        preconditions: dict[str, Any] | None = None,
    ) -> Obj:
        res = self.resource(resource)
        old = self._get(resource, namespace, name)
        meta = old["metadata"]
        if preconditions:
            for field, label, why in (("uid", "UID", "deleted and then recreated"),
                                      ("resourceVersion", "ResourceVersion", "modified")):
                want = preconditions.get(field)
                if want and want != meta.get(field):
                    raise errors.ApiError(
                        409, "Conflict",
                        f'Operation cannot be fulfilled on {res.kind} "{name}": the {label} in the precondition '
                        f"({want}) does not match the {label} in record ({meta.get(field)}). The object might "
                        f"have been {why}",
                        details={"name": name, "kind": res.kind, **({"group": res.group} if res.group else {})},
                    )
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise errors.invalid("DeleteOptions", resource, name, [
                errors.field_invalid("propagationPolicy", propagation,
                                     'must be one of "Orphan", "Background", "Foreground"')
            ])
        if propagation == "Orphan":
            self._orphan(meta["uid"])
        if resource == NAMESPACES:
            return self._delete_namespace(res, old)
        finalizers = list(meta.get("finalizers") or [])
        if propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if not finalizers:
            return self._remove(res, old)
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return old
        new = dict(old)
        new_meta = new["metadata"] = dict(meta)
        new_meta.setdefault("deletionTimestamp", now())
        new_meta.setdefault("deletionGracePeriodSeconds", 0)
        new_meta["finalizers"] = finalizers
        rv = self._next_rv()
        new_meta["resourceVersion"] = str(rv)
        self._put(resource, (new_meta.get("namespace", ""), name), new)
        self._record(_Change(rv, resource, "MODIFIED", new, old))
        if "foregroundDeletion" in finalizers:
            self.gc_queue.put_nowait(("foreground", new_meta["uid"]))
        return new

    def _orphan(self, uid: str) -> None:
        for resource, ns, name in list(self._dependents.get(uid, ())):
            dep = self._objects[resource].get((ns, name))
            if dep is None:
                continue
            new = dict(dep)
            new["metadata"] = dict(dep["metadata"])
            refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self._commit_update(self._resources[resource], dep, new, None)

    def _delete_namespace(self, res: resources.Resource, old: Obj) -> Obj:
        ns = old["metadata"]["name"]
        if old["metadata"].get("deletionTimestamp"):
            return old
        new = dict(old)
        new["metadata"] = dict(old["metadata"], deletionTimestamp=now(), deletionGracePeriodSeconds=0)
        new["status"] = {"phase": "Terminating"}
        rv = self._next_rv()
        new["metadata"]["resourceVersion"] = str(rv)
        self._put(NAMESPACES, ("", ns), new)
        self._record(_Change(rv, NAMESPACES, "MODIFIED", new, old))
        for key, info in list(self._resources.items()):
            if not info.namespaced:
                continue
            for (obj_ns, name) in [k for k in self._objects[key] if k[0] == ns]:
                if (obj_ns, name) in self._objects[key]:
                    self._delete(key, obj_ns, name)
        return self._finish_namespace(ns) or new

    def _finish_namespace(self, ns: str) -> Obj | None:
        """Remove a terminating namespace once it holds nothing."""
        namespace_obj = self._objects[NAMESPACES].get(("", ns))
        if namespace_obj is None or not namespace_obj["metadata"].get("deletionTimestamp"):
            return None
        for key, info in self._resources.items():
            if info.namespaced and any(k[0] == ns for k in self._objects[key]):
                return None
        return self._remove(self._resources[NAMESPACES], namespace_obj)

    def _remove(self, res: resources.Resource, old: Obj) -> Obj:
        meta = old["metadata"]
        ident = (meta.get("namespace", ""), meta["name"])
        rv = self._next_rv()
        final = dict(old)
        final["metadata"] = dict(meta, resourceVersion=str(rv))
        self._drop(res.key, ident)
        self._by_uid.pop(meta["uid"], None)
        self._index(res.key, old, None)
        self._record(_Change(rv, res.key, "DELETED", final, old))
        if meta["uid"] in self._dependents:
            self.gc_queue.put_nowait(("gone", meta["uid"]))
        for uid in _owner_uids(old):
            self.gc_queue.put_nowait(("recheck", uid))
        if res.key == CRDS:
            self._drop_kind(final)
        if res.namespaced and ident[0]:
            namespace_obj = self._objects[NAMESPACES].get(("", ident[0]))
            if namespace_obj is not None and namespace_obj["metadata"].get("deletionTimestamp"):
                self._finish_namespace(ident[0])
        return final

    def _drop_kind(self, crd: Obj) -> None:
        """A CRD is gone: its objects go and its kind is no longer served."""
        info = resources.resource_from_crd(crd)
        for key in list(self._objects.get(info.key, {})):
            obj = self._objects[info.key].get(key)
            if obj is not None:
                self._remove(info, obj)
        self._objects.pop(info.key, None)
        self._labelled.pop(info.key, None)
        self._sorted_keys.pop(info.key, None)
        for watch in list(self._watchers.get(info.key, ())):
            watch.close()
        self.unregister(info.key)

    # --- for the garbage collector and the admin API ---------------------------------------------

    def by_uid(self, uid: str) -> Obj | None:
        """The stored object with ``uid`` (do not mutate) or None."""
        where = self._by_uid.get(uid)
        if where is None:
            return None
        return self._objects[where[0]].get((where[1], where[2]))

    def locate(self, uid: str) -> tuple[str, str, str] | None:
        """(resource, namespace, name) of the object with ``uid``, or None."""
        return self._by_uid.get(uid)

    def dependents(self, uid: str) -> builtins.list[tuple[str, str, str]]:
        """(resource, namespace, name) of every object with an ownerReference to ``uid``."""
        return sorted(self._dependents.get(uid, ()))

    def iter_objects(self, resource: str) -> Iterator[Obj]:
        yield from self._objects.get(resource, {}).values()

    def count(self, resource: str) -> int:
        return len(self._objects.get(resource, {}))

    async def watch_events(self, resource: str) -> AsyncIterator[WatchEvent]:
        """Every change of ``resource`` from now on, as copies (a convenience over ``subscribe``)."""
        watch = self.subscribe(resource)
        try:
            async for event in watch:
                yield event
        finally:
            watch.close()


_LIST_FIELDS = {"pods": ("containers", "initContainers", "volumes", "tolerations"), "services": ("ports",)}


def _compact(new: Obj, old: Obj | None) -> None:
    """Make the parts of ``new`` that are not ``old``'s own (a create: all of it) share their strings with
    every other stored object: keys and string values interned, in a fresh copy of each such part. The
    same key or value (``terminationMessagePath``, a job's labels, its pods' image and env) then takes
    memory once in the cluster instead of once per object, which halves what a stored pod holds. A write
    re-interns only what it changed: a subtree that is ``old``'s (the same object) is kept as it is.
    ``new`` is the store's own, not yet stored."""
    fresh = [(sys.intern(k), _interned_beside(v, old.get(k)) if old is not None else _interned(v))
             for k, v in new.items()]
    new.clear()
    new.update(fresh)


def _interned_beside(value: Any, old: Any) -> Any:
    """``value`` with its keys and strings interned, keeping every subtree that is the same object in ``old``."""
    if value is old:
        return value
    if type(value) is dict and type(old) is dict:
        return {sys.intern(k): _interned_beside(v, old.get(k)) for k, v in value.items()}
    return _interned(value)


def _interned(value: Any) -> Any:
    """A copy of a JSON value with its keys and strings interned."""
    kind = type(value)
    if kind is dict:
        return {sys.intern(k): (sys.intern(v) if type(v) is str else _interned(v) if type(v) in _NESTED else v)
                for k, v in value.items()}
    if kind is list:
        return [(sys.intern(v) if type(v) is str else _interned(v) if type(v) in _NESTED else v) for v in value]
    if kind is str:
        return sys.intern(value)
    return value


_NESTED = (dict, list)


def check_shape(res: resources.Resource, obj: Obj, name: str) -> None:
    """422 Invalid for metadata (and, for built-in kinds, spec and status) of the wrong JSON types."""
    causes: list[dict[str, Any]] = []
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        causes.append(errors.field_invalid("metadata", meta, "must be an object"))
        meta = {}
    for field in ("name", "generateName", "namespace", "resourceVersion", "uid"):
        value = meta.get(field)
        if value is not None and not isinstance(value, str):
            causes.append(errors.field_invalid(f"metadata.{field}", value, "must be a string"))
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            causes.append(errors.field_invalid(f"metadata.{field}", value, "must be a map of strings to strings"))
        elif field == "labels":
            for key, label in value.items():
                if not selectors.valid_key(key):
                    causes.append(errors.field_invalid(f"metadata.labels", key, "name part must consist of "
                                  "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                                  "alphanumeric character"))
                if not selectors.valid_value(label):
                    causes.append(errors.field_invalid(f"metadata.labels", label, "a valid label must be an empty "
                                  "string or consist of alphanumeric characters, '-', '_' or '.', and must start "
                                  "and end with an alphanumeric character"))
    finalizers = meta.get("finalizers")
    if finalizers is not None and (not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)):
        causes.append(errors.field_invalid("metadata.finalizers", finalizers, "must be a list of strings"))
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list):
            causes.append(errors.field_invalid("metadata.ownerReferences", refs, "must be a list"))
        else:
            for n, ref in enumerate(refs):
                if not isinstance(ref, dict):
                    causes.append(errors.field_invalid(f"metadata.ownerReferences[{n}]", ref, "must be an object"))
                    continue
                for field in ("apiVersion", "kind", "name", "uid"):
                    if not isinstance(ref.get(field), str) or not ref.get(field):
                        causes.append(errors.field_required(f"metadata.ownerReferences[{n}].{field}",
                                                            f"{field} must not be empty"))
    if res.builtin:
        for field in ("spec", "status"):
            value = obj.get(field)
            if value is not None and not isinstance(value, dict):
                causes.append(errors.field_invalid(field, value, "must be an object"))
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for field in _LIST_FIELDS.get(res.key, ()):
                value = spec.get(field)
                if value is not None and (not isinstance(value, list) or not all(isinstance(i, dict) for i in value)):
                    causes.append(errors.field_invalid(f"spec.{field}", value, "must be a list of objects"))
    if causes:
        raise errors.invalid(res.kind, res.key, name, causes)


def view(res: resources.Resource, obj: Obj) -> Obj:
    """A stored object as version ``res`` of its kind reads it (conversion strategy None): apiVersion
    rewritten and, if that version's schema prunes unlike the storage version's, pruned by it (no
    defaults: kube-apiserver applies the storage version's on reading etcd, which the store did on
    writing). The object itself for a kind with one version; never mutates ``obj``."""
    if not res.multi_version:
        return obj
    wanted = res.api_version()
    if res.prunes_on_read:
        obj = schema.prune_and_default(res.schema, obj, defaults=False)
    elif obj.get("apiVersion") == wanted:
        return obj
    return dict(obj, apiVersion=wanted)


def _written_as(res: resources.Resource, obj: Any, version: str | None) -> resources.Resource:
    """The version a write comes through: ``version``, else the one the body's apiVersion names, else storage."""
    if not res.multi_version:
        return res
    if version is None and isinstance(obj, dict):
        api_version = obj.get("apiVersion")
        if isinstance(api_version, str) and api_version.startswith(res.group + "/"):
            version = api_version[len(res.group) + 1:]
    return res.at(version)


def _to_storage(res: resources.Resource, obj: Obj) -> Obj:
    """An object written through another version, as the storage version ``res`` stores it."""
    obj = schema.prune_and_default(res.schema, obj) if res.schema else obj
    obj["apiVersion"] = res.api_version()
    return obj


def _check_schema(res: resources.Resource, obj: Obj, name: str, subresource: str | None,
                  old: Obj | None = None) -> None:
    """422 Invalid for what violates the CRD's structural schema (status only for /status writes);
    ``old``: the object an update replaces (validation ratchets on it)."""
    only = ("status",) if subresource == "status" else None
    causes = schema.validate(res.schema, obj, only, old)
    if not causes:
        return
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    raise errors.ApiError(422, "Invalid", f'{res.kind}.{res.group} "{name}" is invalid: {summary}', causes,
                          details={"name": name, "group": res.group, "kind": res.kind})


def _is_binding(res: resources.Resource, old: Obj, new: Obj) -> bool:
    """A pod's spec.nodeName set and nothing else of its spec changed: kube-apiserver binds
    through pods/binding, past the pod strategy, so the pod's generation stays."""
    if res.key != "pods" or any(new.get(k) != old.get(k) for k in set(new) | set(old) if k not in ("metadata",
                                                                                                   "status", "spec")):
        return False
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    return not old_spec.get("nodeName") and bool(new_spec.get("nodeName")) and \
        {k: v for k, v in new_spec.items() if k != "nodeName"} == old_spec


def _owner_uids(obj: Obj) -> set[str]:
    refs = objects.metadata(obj).get("ownerReferences") or ()
    return {r["uid"] for r in refs if isinstance(r, dict) and r.get("uid")}


def _fold_string_data(secret: Obj) -> None:
    """stringData is write-only: folded into data (base64), as kube-apiserver does."""
    strings = secret.pop("stringData", None)
    if isinstance(strings, dict) and strings:
        data = dict(secret.get("data") or {})
        for key, value in strings.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data


def _check_pod_update(old: Obj, new: Obj) -> None:
    """The part of kube's pod update validation the sim keeps: the set of containers is fixed."""
    def names(obj: Obj) -> list[Any]:
        return [c.get("name") for c in (obj.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]

    if names(old) != names(new):
        raise errors.invalid("Pod", "pods", old["metadata"]["name"], [{
            "reason": "FieldValueForbidden", "field": "spec.containers",
            "message": "Forbidden: pod updates may not add or remove containers"}])


def _default_pod_spec(spec: Obj) -> None:
    """The defaults of every pod spec, a pod's or a template's (admission adds the pod-only ones)."""
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if isinstance(container, dict):
            _default_container(container)


def _prepare_job(job: Obj) -> None:
    """A new Job as kube-apiserver stores it: defaulted, its selector and pod labels generated, validated."""
    meta = job["metadata"]
    spec = job["spec"]
    template = spec.get("template")
    if not isinstance(template, dict):
        template = spec["template"] = {}
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        pod_spec = template["spec"] = {}
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    _default_pod_spec(pod_spec)
    causes = _job_causes(job)
    if not spec["manualSelector"]:
        generated = {"batch.kubernetes.io/controller-uid": meta["uid"]}
        given = spec.get("selector")
        if given:
            merged = dict(given, matchLabels={**(given.get("matchLabels") or {}), **generated})
            shown = json.dumps(merged, separators=(",", ":"), sort_keys=True)
            causes.append({"reason": "FieldValueInvalid", "field": "spec.selector",
                           "message": f"Invalid value: {shown}: `selector` not auto-generated"})
        spec["selector"] = {"matchLabels": generated}
        template_meta = template.setdefault("metadata", {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **generated,
                                   "batch.kubernetes.io/job-name": meta["name"],
                                   "controller-uid": meta["uid"], "job-name": meta["name"]}
    if causes:
        raise errors.invalid("Job", JOBS, meta["name"], causes)
    if not meta.get("labels"):
        # A Job without labels of its own takes its pods' (generated ones included).
        labels = objects.metadata(template).get("labels")
        if labels:
            meta["labels"] = dict(labels)
    job["status"] = {}


def _job_causes(job: Obj) -> list[dict[str, Any]]:
    """What kube-apiserver's Job validation refuses, of what a Job author gets wrong."""
    spec = job["spec"]
    pod_spec = spec["template"]["spec"]
    causes = []
    for field in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append(errors.field_invalid(f"spec.{field}", value, "must be greater than or equal to 0"))
    if not pod_spec.get("containers"):
        causes.append({"reason": "FieldValueRequired", "message": "Required value",
                       "field": "spec.template.spec.containers"})
    if pod_spec.get("restartPolicy") not in ("OnFailure", "Never"):
        causes.append(errors.field_required("spec.template.spec.restartPolicy",
                                            'valid values: "OnFailure", "Never"'))
    return causes


def _default_container(container: Obj) -> None:
    """The defaults kube-apiserver gives every container of a new pod."""
    container.setdefault("resources", {})
    resources_ = container["resources"]
    if isinstance(resources_, dict) and isinstance(resources_.get("limits"), dict):
        requests = resources_.setdefault("requests", {})
        for key, value in resources_["limits"].items():
            requests.setdefault(key, value)
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = str(container.get("image") or "")
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    for variable in container.get("env") or ():
        field_ref = ((variable.get("valueFrom") or {}).get("fieldRef") if isinstance(variable, dict) else None)
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")


def _qos_class(spec: Obj) -> str:
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    requests = [((c.get("resources") or {}).get("requests") or {}) for c in containers]
    limits = [((c.get("resources") or {}).get("limits") or {}) for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        lim.get("cpu") and lim.get("memory") and all(req.get(k, lim[k]) == lim[k] for k in ("cpu", "memory"))
        for req, lim in zip(requests, limits, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _crd_status(crd: Obj, previous: Obj | None = None) -> Obj:
    """Established and NamesAccepted, with the accepted names, as the apiextensions controllers set them."""
    names = ((crd.get("spec") or {}).get("names")) or {}
    accepted = dict(names)
    accepted.setdefault("singular", names.get("plural", "").rstrip("s"))
    accepted.setdefault("listKind", names.get("kind", "") + "List")
    old_conditions = {c.get("type"): c for c in ((previous or {}).get("conditions") or [])}
    stamp = now()

    def condition(kind: str, reason: str, message: str) -> Obj:
        old = old_conditions.get(kind)
        return {
            "type": kind,
            "status": "True",
            "lastTransitionTime": old.get("lastTransitionTime", stamp) if old else stamp,
            "reason": reason,
            "message": message,
        }

    versions = [v.get("name") for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")]
    return {
        "acceptedNames": accepted,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": versions or [v.get("name") for v in (crd.get("spec") or {}).get("versions") or []][:1],
    }
