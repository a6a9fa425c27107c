"""The HTTP face of the local cluster: the Kubernetes REST API over the store, plus /admin.

In: HTTP requests from kubectl, kubernetes-asyncio or anything else speaking the API
(``/api/v1/namespaces/default/pods``, ``/apis/kubeflow.org/v1/...``, ``?watch=true`` …).
Out: JSON objects, lists, server-side Tables, watch streams and ``metav1.Status`` errors;
every request logged (verb, resource, subresource, namespace, name, code, time) and
passed through fault injection first.
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import yaml
from aiohttp import web

from faulting import faults
from sim import errors, objects
from sim.apiserver import (admitting, applying, decoding, discovery, kubelets, openapi, patching, protobuf, resources,
                           reviewing, tables)
from sim.apiserver import store as sim_store

log = logging.getLogger(__name__)

Obj = dict[str, Any]
REQUEST_LOG_SIZE = 100_000
"""Entries the request log keeps; older ones are dropped (their index stays taken)."""
DEFAULT_WATCH_SECONDS = 1800.0
"""How long a watch without timeoutSeconds lives (kube-apiserver picks 30–60 minutes)."""

_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": "apply",
}


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(body), status=status, content_type="application/json")


def _status_response(exc: errors.ApiError) -> web.Response:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    response = web.Response(body=_dumps(exc.status()), status=exc.code, content_type="application/json",
                            headers=headers)
    return _warned(response, getattr(exc, "warnings", ()))


def _refused(refusal: faults.Refusal) -> errors.ApiError:
    """An injected refusal as the error the server answers."""
    return errors.ApiError(refusal.code, refusal.reason, refusal.message, retry_after=refusal.retry_after,
                           details=refusal.details)


def _warned(response: web.Response, warnings: Any) -> web.Response:
    """``response`` with a ``Warning: 299 - "<text>"`` header per admission warning, as kube-apiserver adds them."""
    for warning in warnings or ():
        quoted = str(warning).replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{quoted}"')
    return response


class Route:
    """What a request addresses, filled in while routing; also the request-log entry."""

    __slots__ = ("verb", "group", "version", "resource", "namespace", "name", "subresource", "res")

    def __init__(self) -> None:
        self.verb = ""
        self.group = ""
        self.version = ""
        self.resource: str | None = None
        self.namespace: str | None = None
        self.name: str | None = None
        self.subresource: str | None = None
        self.res: resources.Resource | None = None


class _Accept:
    __slots__ = ("table", "json_ok")

    def __init__(self, header: str) -> None:
        self.table = False
        self.json_ok = not header
        for part in header.split(","):
            media, *params = [p.strip() for p in part.split(";")]
            opts = dict(p.partition("=")[::2] for p in params)
            if media in ("application/json", "*/*", "application/*", "application/yaml"):
                if opts.get("as") == "Table" and opts.get("g") == "meta.k8s.io":
                    self.table = True
                elif "as" not in opts:
                    self.json_ok = True
            elif media == "":
                self.json_ok = True


class Server:
    """The aiohttp application; ``start()`` binds it, ``stop()`` closes it (safe to call twice)."""

    def __init__(self, store: sim_store.Store, fault_state: faults.Faults, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.store = store
        store.validate_updates = True
        self.faults = fault_state
        self.host = host
        self.port = port
        self.kubelet: kubelets.KubeletApi | None = None
        """The nodes' kubelet API (logs, exec, evict, fail_node) once the cluster has one."""
        self.requests: collections.deque[Obj] = collections.deque(maxlen=REQUEST_LOG_SIZE)
        self.request_count = 0
        self.openapi = openapi.Documents()
        """The /openapi/v3 documents, rebuilt when the served kinds change."""
        self.open_watches = 0
        self._watches: set[sim_store.Watch] = set()
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.admission = admitting.Admission(store)
        """The admission webhook plugins (sim/apiserver/admitting.py)."""
        self.reviews = reviewing.Reviews(store)
        """Tokens issued, TokenReview and access reviews (sim/apiserver/reviewing.py)."""
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> str:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True, backlog=1024)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        return self.url

    async def stop(self) -> None:
        self._stopping.set()
        for watch in list(self._watches):
            watch.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        await self.admission.close()

    # --- the request log ------------------------------------------------------------------------

    def _log(self, route: Route, code: int, started: float, fault: str | None) -> None:
        elapsed = time.perf_counter() - started
        self.requests.append({
            "index": self.request_count,
            "time": time.time() - elapsed,
            "verb": route.verb,
            "resource": route.resource,
            "subresource": route.subresource,
            "namespace": route.namespace,
            "name": route.name,
            "code": code,
            "duration": round(elapsed, 6),
            "fault": fault,
        })
        self.request_count += 1

    def requests_since(self, index: int) -> list[Obj]:
        if not self.requests:
            return []
        first = self.requests[0]["index"]
        return list(self.requests)[max(0, index - first):]

    # --- dispatch -----------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        route = Route()
        fault: str | None = None
        response: web.StreamResponse
        try:
            response, fault = await self._dispatch(request, route)
        except errors.ApiError as exc:
            response = _status_response(exc)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("unexpected error serving %s %s", request.method, request.path_qs)
            response = _status_response(errors.internal(f"{type(exc).__name__}: {exc}"))
        if route.verb:
            self._log(route, response.status, started, fault)
        return response

    async def _dispatch(self, request: web.Request, route: Route) -> tuple[web.StreamResponse, str | None]:
        parts = [p for p in request.path.split("/") if p]
        head = parts[0] if parts else ""
        if head in ("api", "apis") and len(parts) == 1 and discovery.wants_aggregated(request.headers.get("Accept", "")):
            body = discovery.aggregated(self.store.kinds(), core=head == "api")
            return web.Response(body=_dumps(body), headers={"Content-Type": discovery.AGGREGATED_CONTENT_TYPE}), None
        if head == "api":
            if len(parts) == 1:
                return _json(discovery.api_versions(f"{self.host}:{self.port}")), None
            return await self._api(request, route, "", parts[1], parts[2:])
        if head == "apis":
            kinds = self.store.kinds()
            if len(parts) == 1:
                return _json(discovery.api_group_list(kinds)), None
            if len(parts) == 2:
                group = discovery.api_group(kinds, parts[1])
                if group is None:
                    raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
                return _json(group), None
            return await self._api(request, route, parts[1], parts[2], parts[3:])
        if head == "admin":
            return await self._admin(request, parts[1:]), None
        if head == "version" and len(parts) == 1:
            return _json(discovery.VERSION), None
        if head in ("healthz", "livez", "readyz"):
            return web.Response(text="ok"), None
        if head == "openapi" and parts[1:2] == ["v3"]:
            self.openapi.refresh(self.store.kinds(), self.store.registry_version)
            if len(parts) == 2:  # kube-apiserver's discovery document: no ETag, text/plain
                return web.Response(body=_dumps(self.openapi.root()), headers={
                    "Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-cache, private"}), None
            answered = openapi.answer(self.openapi, "/".join(parts[2:]), request.query.get("hash"),
                                      request.headers.get("Accept", ""), request.headers.get("If-None-Match"),
                                      dt.datetime.now(dt.timezone.utc))
            if answered is not None:
                code, headers, document = answered
                return web.Response(status=code, headers=headers, body=document or None), None
        if not parts:
            return _json({"paths": ["/api", "/api/v1", "/apis", "/version", "/healthz", "/openapi/v3", "/admin"]}), None
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})

    async def _api(self, request: web.Request, route: Route, group: str, version: str,
                   rest: list[str]) -> tuple[web.StreamResponse, str | None]:
        route.group, route.version = group, version
        if not rest:
            body = discovery.resource_list(self.store.kinds(), group, version)
            if body is None:
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
            return _json(body), None
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        namespace = None
        if rest and rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        plural = rest[0]
        key = f"{plural}.{group}" if group else plural
        route.resource, route.namespace = key, namespace
        route.name = rest[1] if len(rest) > 1 else None
        route.subresource = rest[2] if len(rest) > 2 else None
        if key in reviewing.REVIEWS and version == "v1":
            return await self._review(request, route, key), None
        res = self.store.resource(key)
        if version not in res.versions:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        # A CRD's version serves with its own schema, printer columns and subresources.
        res = res.at(version)
        route.res = res
        if not res.namespaced and namespace is not None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        query = request.query
        method = request.method
        if method == "GET":
            if route.name is None:
                route.verb = "watch" if watch_path or _bool(query, "watch") else "list"
            else:
                route.verb = "watch" if watch_path else "get"
        else:
            if watch_path:
                raise errors.method_not_allowed()
            route.verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                          "DELETE": "delete" if route.name else "deletecollection"}.get(method, "")
            if not route.verb:
                raise errors.method_not_allowed()
            if method == "POST" and route.name is not None and route.subresource is None:
                raise errors.method_not_allowed()
            if method in ("PUT", "PATCH") and route.name is None:
                raise errors.method_not_allowed()

        if query.get("dryRun") and route.verb in ("update", "patch", "delete", "deletecollection"):
            raise errors.bad_request(
                f"dryRun is not supported for {route.verb} by the kto local cluster; drop --dry-run=server"
            )
        fault = await self._inject(route)
        if fault is not None:
            return _status_response(fault[1]), fault[0]
        handler: Callable[[web.Request, Route, resources.Resource], Awaitable[web.StreamResponse]]
        handler = getattr(self, f"_{route.verb}")
        if route.verb == "watch":
            response = await handler(request, route, res)
            return response, getattr(response, "kto_fault", None)
        return await handler(request, route, res), None

    async def _inject(self, route: Route) -> tuple[str, errors.ApiError] | None:
        state = self.faults
        if not state.applies(route.resource):
            return None
        delay = state.latency(route.verb)
        if delay:
            await asyncio.sleep(delay)
        refusal = state.error(route.verb, route.resource or "", route.name)
        if refusal is None:
            return None
        return refusal.kind, _refused(refusal)

    # --- bodies and options -------------------------------------------------------------------------

    async def _body(self, request: web.Request, kind: str, patch_type: str | None = None) -> Any:
        """The decoded body of a create or update of ``kind`` (or of a patch of ``patch_type``);
        a body nested deeper than ``decoding.MAX_DEPTH`` is refused as kube-apiserver refuses one
        past its limit, before it is parsed."""
        ctype = request.content_type
        if ctype == "application/vnd.kubernetes.protobuf":
            return protobuf.decode(await request.read())
        if "protobuf" in ctype or "cbor" in ctype:
            raise errors.unsupported_media_type(
                f"the body of the request was in an unknown format ({ctype}) - the kto local cluster accepts "
                "application/json and application/yaml"
            )
        raw = await request.read()
        if not raw.strip():
            raise errors.bad_request("the body of the request is empty")
        refusal = (decoding.object_refusal(raw, "yaml" in ctype, kind) if patch_type is None
                   else decoding.patch_refusal(raw, patch_type))
        if refusal is not None:
            raise errors.bad_request(refusal)
        try:
            if "yaml" in ctype:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None

    async def _object_body(self, request: web.Request, route: Route, res: resources.Resource) -> Obj:
        body = await self._body(request, res.kind)
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of the request must be a {res.kind} object, not {type(body).__name__}")
        expected = res.api_version(route.version)
        if route.subresource is None or route.subresource == "status":
            # Like kube-apiserver's decoder: a missing kind or apiVersion is taken from the URL
            # (for built-in kinds; the unstructured decoder of custom resources insists on a kind).
            if not body.get("kind") and not res.builtin:
                raw = (await request.read()).decode(errors="replace")
                more = f"{raw[:30]} ..." if len(raw) > 30 else raw
                raise errors.bad_request(f"the object provided is unrecognized (must be of type {res.kind}): "
                                         f"Object 'Kind' is missing in '{raw}' ({more})")
            if not body.get("kind"):
                body["kind"] = res.kind
            if not body.get("apiVersion"):
                body["apiVersion"] = expected
        if not body.get("kind") or not body.get("apiVersion"):
            # Encoded only for the refusal: a whole pod encoded per write was a fifth of the sim's CPU.
            compact = json.dumps(body, separators=(",", ":"))[:200]
            missing = "Kind" if not body.get("kind") else "apiVersion"
            raise errors.bad_request(f"Object '{missing}' is missing in '{compact}'")
        if route.subresource is None or route.subresource == "status":
            # Only the version of the URL: kube-apiserver refuses another served version's apiVersion too.
            if body["apiVersion"] != expected:
                raise errors.bad_request(
                    f"the API version in the data ({body['apiVersion']}) does not match the expected API version ({expected})"
                )
            if body["kind"] != res.kind:
                raise errors.bad_request(
                    f"the kind in the data ({body['kind']}) does not match the expected kind ({res.kind})"
                )
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        return body

    def _check_namespace(self, route: Route, res: resources.Resource, for_write: bool) -> None:
        if res.namespaced and not route.namespace and (for_write or route.name):
            raise errors.bad_request("the namespace of the object must be given in the request path")

    @staticmethod
    def _out(obj: Obj, route: Route, res: resources.Resource) -> Obj:
        """The stored object as the requested version of its kind reads it (``sim.apiserver.store.view``)."""
        return sim_store.view(res, obj)

    # --- verbs ----------------------------------------------------------------------------------------

    async def _get(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        self._check_namespace(route, res, False)
        assert route.name is not None
        sub = route.subresource
        if sub == "log" and res.key == "pods":
            return await self._pod_log(request, route)
        if sub == "exec" and res.key == "pods":
            return await self._exec(request, route)
        if sub == "scale":
            return _json(self._scale(res, self.store._get(res.key, route.namespace, route.name)))
        if sub not in (None, "status") or (sub == "status" and not res.status_subresource):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        obj = self._out(self.store._get(res.key, route.namespace, route.name), route, res)
        accept = _Accept(request.headers.get("Accept", ""))
        if accept.table:
            return _json(tables.table(res, [obj], include=request.query.get("includeObject", "Metadata"),
                                      resource_version=obj["metadata"].get("resourceVersion")))
        return _json(obj)

    async def _list(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        if route.subresource is not None:
            raise errors.method_not_allowed()
        query = request.query
        _check_field_selector(res, query.get("fieldSelector"))
        limit = _int_param(query, "limit")
        items, rv, token, remaining = self.store.list_page(
            res.key, route.namespace, query.get("labelSelector"), query.get("fieldSelector"),
            limit=limit or None, continue_token=query.get("continue") or None,
        )
        if res.multi_version:
            items = [self._out(i, route, res) for i in items]
        accept = _Accept(request.headers.get("Accept", ""))
        if accept.table:
            return _json(tables.table(res, items, include=query.get("includeObject", "Metadata"),
                                      resource_version=rv, continue_token=token, remaining=remaining))
        meta: Obj = {"resourceVersion": rv}
        if token:
            meta["continue"] = token
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        return _json({"kind": res.list_kind, "apiVersion": res.api_version(route.version),
                      "metadata": meta, "items": items})

    async def _create(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        if route.subresource is not None:
            return await self._create_subresource(request, route, res)
        self._check_namespace(route, res, True)
        body = await self._object_body(request, route, res)
        given = body.get("metadata")
        review = self._admission(request, route, res, "CREATE",
                                 str(given.get("name") or "") if isinstance(given, dict) else "")
        if request.query.get("dryRun") == "All":
            probe = dict(body)
            probe["metadata"] = dict(objects.metadata(body))
            if review is not None:
                return _warned(_json(await review.dry_create(probe), 201), review.warnings)
            return _json(probe, 201)
        manager = request.query.get("fieldManager")
        if manager:
            applying.record_update(None, body, manager, res.status_subresource, None)
        if review is not None:
            obj = await review.create(body, res.version or None)
            return _warned(_json(self._out(obj, route, res), 201), review.warnings)
        obj = self.store._create(res.key, body, route.namespace, res.version or None)
        return _json(self._out(obj, route, res), 201)

    def _admission(self, request: web.Request, route: Route, res: resources.Resource, operation: str,
                   name: str) -> admitting.Review | None:
        """The webhooks a write calls (None: none), before it reaches the store."""
        return self.admission.begin(admitting.Request(
            operation, res, route.namespace, name, route.subresource, bool(request.query.get("dryRun")),
            request.query.get("fieldManager") or None))

    async def _update(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        self._check_namespace(route, res, True)
        assert route.name is not None
        sub = route.subresource
        if sub == "scale":
            return await self._update_scale(request, route, res, None)
        if sub not in (None, "status") or (sub == "status" and not res.status_subresource):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        body = await self._object_body(request, route, res)
        meta = body.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != route.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({route.name})")
        meta["name"] = route.name
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != route.namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = route.namespace
        manager = request.query.get("fieldManager")
        if manager:
            old = self.store.peek(res.key, route.namespace, route.name)
            if old is not None:
                if "managedFields" not in meta and "managedFields" in old["metadata"]:
                    meta["managedFields"] = old["metadata"]["managedFields"]
                applying.record_update(old, body, manager, res.status_subresource, sub)
        review = self._admission(request, route, res, "UPDATE", route.name)
        if review is not None:
            obj = await review.update(body, res.version or None)
            return _warned(_json(self._out(obj, route, res)), review.warnings)
        obj = self.store._update(res.key, body, sub, res.version or None)
        return _json(self._out(obj, route, res))

    async def _patch(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        self._check_namespace(route, res, True)
        assert route.name is not None
        sub = route.subresource
        ctype = request.content_type
        patch_type = _PATCH_TYPES.get(ctype)
        if patch_type is None:
            raise errors.ApiError(415, "UnsupportedMediaType", "415: Unsupported Media Type", details={})
        if patch_type == "apply":
            if sub == "scale":
                raise errors.unsupported_media_type("server-side apply of the scale subresource is not supported "
                                                    "by the kto local cluster")
            return await self._apply(request, route, res)
        if sub == "scale":
            return await self._update_scale(request, route, res, patch_type)
        if sub not in (None, "status") or (sub == "status" and not res.status_subresource):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        body = await self._body(request, res.kind, patch_type)
        review = self._admission(request, route, res, "UPDATE", route.name)
        if review is not None:
            obj, _ = await review.staged(lambda: self.store._patched(
                res.key, route.namespace, route.name, body, patch_type, sub,
                request.query.get("fieldManager") or None, res.version or None))
            return _warned(_json(self._out(obj, route, res)), review.warnings)
        obj = self.store._patch(res.key, route.namespace, route.name, body, patch_type, sub,
                                request.query.get("fieldManager") or None, res.version or None)
        return _json(self._out(obj, route, res))

    async def _apply(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        """Server-side apply (application/apply-patch+yaml): create or merge, with field ownership."""
        assert route.name is not None
        sub = route.subresource
        if sub not in (None, "status") or (sub == "status" and not res.status_subresource):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        manager = request.query.get("fieldManager") or ""
        if not manager:
            detail = "is required for apply patch"
            raise errors.ApiError(422, "Invalid", f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                                  f"Required value: {detail}",
                                  [{"reason": "FieldValueRequired", "message": f"Required value: {detail}",
                                    "field": "fieldManager"}],
                                  details={"group": "meta.k8s.io", "kind": "PatchOptions"})
        config = await self._body(request, res.kind, "apply")
        if not isinstance(config, dict):
            raise errors.bad_request("invalid object type: /, Kind=")
        kind, api_version = str(config.get("kind") or ""), str(config.get("apiVersion") or "")
        if not kind or not api_version:
            group_version = api_version if "/" in api_version else f"/{api_version}"
            raise errors.bad_request(f"invalid object type: {group_version}, Kind={kind}")
        if kind == res.kind and api_version != res.api_version() and api_version in {
                res.api_version(v) for v in res.versions}:
            # Another served version of the kind: apply's decoder knows it, but not for this URL.
            raise errors.bad_request(f"invalid object type: {api_version}, Kind={kind}")
        if api_version != res.api_version() or kind != res.kind:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({res.api_version(route.version)})" if kind == res.kind else
                f"the kind in the data ({kind}) does not match the expected kind ({res.kind})")
        meta = config.get("metadata")
        if not isinstance(meta, dict):
            meta = config["metadata"] = {}
        if meta.get("name", route.name) != route.name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({route.name})")
        meta["name"] = route.name
        if res.namespaced:
            meta["namespace"] = route.namespace
        force = _bool(request.query, "force")
        exists = self.store.peek(res.key, route.namespace, route.name) is not None
        review = self._admission(request, route, res, "UPDATE" if exists else "CREATE", route.name)
        if review is not None:
            obj, created = await review.staged(lambda: self.store._applied(
                res.key, route.namespace, route.name, config, manager, force, sub, res.version or None))
            return _warned(_json(self._out(obj, route, res), 201 if created else 200), review.warnings)
        obj, created = self.store._apply(res.key, route.namespace, route.name, config, manager, force, sub,
                                         res.version or None)
        return _json(self._out(obj, route, res), 201 if created else 200)

    async def _delete_options(self, request: web.Request) -> tuple[str, Obj | None, bool | None]:
        query = request.query
        options: Obj = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                refusal = decoding.options_refusal(raw)
                if refusal is not None:
                    raise errors.bad_request(refusal)
                try:
                    parsed = json.loads(raw)
                except ValueError as exc:
                    raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None
                if parsed is not None and not isinstance(parsed, dict):
                    raise errors.bad_request("DeleteOptions must be an object")
                options = parsed or {}  # a JSON null is no options, as kube-apiserver takes it
        policy = query.get("propagationPolicy") or options.get("propagationPolicy")
        orphan = query.get("orphanDependents") or options.get("orphanDependents")
        if not policy:
            policy = "Orphan" if orphan in (True, "true") else "Background"
        preconditions = options.get("preconditions")
        orphan_flag = None if orphan is None else orphan in (True, "true")
        return policy, preconditions if isinstance(preconditions, dict) else None, orphan_flag

    async def _delete(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        self._check_namespace(route, res, True)
        assert route.name is not None
        if route.subresource is not None:
            raise errors.method_not_allowed()
        policy, preconditions, orphan = await self._delete_options(request)
        review = self._admission(request, route, res, "DELETE", route.name)
        if review is not None:
            await review.delete(self.store._get(res.key, route.namespace, route.name))
        obj = self.store._delete(res.key, route.namespace, route.name, policy, preconditions)
        still_there = self.store.peek(res.key, route.namespace, route.name) is not None
        # kube-apiserver answers 202 only when the object stays and orphanDependents=false was given.
        code = 202 if still_there and orphan is False else 200
        if not still_there and res.builtin and res.key != "pods":
            # Most built-in registries answer an immediate deletion with a Status, not the object.
            details: Obj = {"name": route.name, "kind": res.plural, "uid": obj["metadata"].get("uid")}
            if res.group:
                details = {"name": route.name, "group": res.group, "kind": res.plural, "uid": obj["metadata"].get("uid")}
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                          "details": details}, code)
        return _json(self._out(obj, route, res), code)

    async def _deletecollection(self, request: web.Request, route: Route,
                                res: resources.Resource) -> web.StreamResponse:
        policy, _, _ = await self._delete_options(request)
        items, _, _, _ = self.store.list_page(res.key, route.namespace, request.query.get("labelSelector"),
                                              request.query.get("fieldSelector"))
        deleted = []
        for item in list(items):
            meta = item["metadata"]
            try:
                deleted.append(self._out(self.store._delete(res.key, meta.get("namespace"), meta["name"], policy),
                                         route, res))
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
        return _json({"kind": res.list_kind, "apiVersion": res.api_version(route.version),
                      "metadata": {"resourceVersion": self.store.resource_version}, "items": deleted})

    async def _review(self, request: web.Request, route: Route, key: str) -> web.StreamResponse:
        """A TokenReview or (self) SubjectAccessReview: create-only, answered, never stored."""
        if request.method != "POST":
            raise errors.method_not_allowed()
        if route.namespace is not None or route.name is not None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        route.verb = "create"
        fault = await self._inject(route)
        if fault is not None:
            return _status_response(fault[1])
        kind = reviewing.REVIEWS[key]
        body = await self._body(request, kind)
        if kind == "TokenReview":
            return _json(self.reviews.token_review(body), 201)
        if kind == "SubjectAccessReview":
            return _json(self.reviews.subject_access_review(body), 201)
        return _json(self.reviews.self_subject_access_review(body, request.headers.get("Authorization", "")), 201)

    # --- subresources -------------------------------------------------------------------------------

    async def _create_subresource(self, request: web.Request, route: Route,
                                  res: resources.Resource) -> web.StreamResponse:
        assert route.name is not None
        if res.key == "pods" and route.subresource == "exec":
            return await self._exec(request, route)
        if res.key == "serviceaccounts" and route.subresource == "token":
            body = await self._body(request, "TokenRequest")
            return _json(self.reviews.token_request(route.namespace or "", route.name, body), 201)
        if res.key != "pods" or route.subresource not in ("eviction", "binding"):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        body = await self._body(request, str(route.subresource).capitalize())
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of a {route.subresource} must be an object")
        pod = self.store._get("pods", route.namespace, route.name)
        if route.subresource == "binding":
            node = (body.get("target") or {}).get("name")
            if not node:
                raise errors.bad_request("a binding needs target.name")
            if (pod.get("spec") or {}).get("nodeName"):
                raise errors.conflict("pods/binding", route.name,
                                      f"pod {route.name} is already assigned to node \"{pod['spec']['nodeName']}\"")
            self.store._patch("pods", route.namespace, route.name, {"spec": {"nodeName": node}}, "merge", None)
        else:
            await self.evict(route.namespace or "", route.name)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    async def evict(self, namespace: str, name: str) -> None:
        self.store._get("pods", namespace, name)
        if self.kubelet is not None:
            await self.kubelet.evict(namespace, name)
        else:
            self.store._delete("pods", namespace, name)

    async def _exec(self, request: web.Request, route: Route) -> web.StreamResponse:
        """``pods/{name}/exec``: kube-apiserver's checks, then the kubelet's answer (sim/apiserver/kubelets.py)."""
        assert route.name is not None and route.namespace is not None
        pod = self.store._get("pods", route.namespace, route.name)
        container = kubelets.exec_container(pod, request.query.get("container"))
        kubelets.require_host(pod)
        if self.kubelet is None:
            return web.Response(status=404, text="pod does not exist")
        return await self.kubelet.serve_exec(request, route.namespace, route.name, container,
                                             kubelets.exec_query(request.query))

    async def _pod_log(self, request: web.Request, route: Route) -> web.StreamResponse:
        """``pods/{name}/log``: kube-apiserver's checks, then the kubelet's log stream relayed as it comes."""
        assert route.name is not None and route.namespace is not None
        pod = self.store._get("pods", route.namespace, route.name)
        query = request.query
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
        container = query.get("container")
        if container and container not in names:
            raise errors.bad_request(f"container {container} is not valid for pod {route.name}")
        if not container and len(names) > 1:
            raise errors.bad_request(
                f"a container name must be specified for pod {route.name}, choose one of: [{' '.join(map(str, names))}]"
            )
        previous = _bool(query, "previous")
        follow = _bool(query, "follow") and not previous  # the Python client sends follow=True
        if self.kubelet is None:
            return web.Response(body=b"", content_type="text/plain")
        chunks = self.kubelet.stream_log(route.namespace, route.name, container or None, previous=previous,
                                         tail=_int_param(query, "tailLines"), follow=follow)
        content = await anext(chunks)
        if not follow:
            return web.Response(body=content, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        try:
            await response.write(content)
            async for chunk in chunks:
                if chunk:
                    await response.write(chunk)
                if self._stopping.is_set() or self.store.peek("pods", route.namespace, route.name) is None:
                    break
        except ConnectionError:
            return response
        finally:
            await chunks.aclose()
        await response.write_eof()
        return response

    def _scale(self, res: resources.Resource, obj: Obj) -> Obj:
        """The ``autoscaling/v1`` Scale of a custom resource, read through its CRD's scale paths."""
        if not res.scale:
            if not res.builtin:
                # The apiextensions server answers an undeclared subresource as a missing object.
                raise errors.not_found(res.key, obj["metadata"]["name"])
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        spec_values = tables.jsonpath(obj, res.scale.get("specReplicasPath", ""))
        status_values = tables.jsonpath(obj, res.scale.get("statusReplicasPath", ""))
        selector_path = res.scale.get("labelSelectorPath", "")
        status: Obj = {"replicas": int(status_values[0]) if status_values else 0}
        if selector_path and (sel := tables.jsonpath(obj, selector_path)):
            status["selector"] = sel[0]
        spec: Obj = {}
        if spec_values and spec_values[0]:
            # Scale.spec.replicas is omitempty in Go: 0 is not written.
            spec["replicas"] = int(spec_values[0])
        meta = obj["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": spec, "status": status}

    async def _update_scale(self, request: web.Request, route: Route, res: resources.Resource,
                            patch_type: str | None) -> web.StreamResponse:
        """PUT or PATCH of a Scale: its spec.replicas written to the parent's specReplicasPath."""
        assert route.name is not None
        obj = self.store._get(res.key, route.namespace, route.name)
        scale = self._scale(res, obj)
        assert res.scale is not None
        if patch_type == "strategic":
            raise errors.strategic_merge_unsupported()
        body = await self._body(request, "Scale", patch_type)
        new_scale = body if patch_type is None else patching.apply(scale, body, patch_type)
        if not isinstance(new_scale, dict):
            raise errors.bad_request("a Scale must be an object")
        rv = objects.metadata(new_scale).get("resourceVersion")
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise errors.conflict(res.key, route.name)
        replicas = (new_scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or replicas < 0:
            field = res.scale.get("specReplicasPath", "")
            cause = {"reason": "FieldValueInvalid", "field": field,
                     "message": f"Invalid value: {replicas}: should be a non-negative integer"}
            raise errors.ApiError(422, "Invalid", f'{res.kind}.{res.group} "{route.name}" is invalid: '
                                  f"{field}: {cause['message']}", [cause],
                                  details={"name": route.name, "group": res.group, "kind": res.kind})
        path = [p for p in res.scale.get("specReplicasPath", "").split(".") if p]
        patch: Obj = {}
        node = patch
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = replicas
        updated = self.store._patch(res.key, route.namespace, route.name, patch, "merge", None)
        return _json(self._scale(res, updated))

    # --- watch --------------------------------------------------------------------------------------

    async def _watch(self, request: web.Request, route: Route, res: resources.Resource) -> web.StreamResponse:
        query = request.query
        rv = query.get("resourceVersion") or None
        timeout = _int_param(query, "timeoutSeconds")
        bookmarks = _bool(query, "allowWatchBookmarks")
        initial = _bool(query, "sendInitialEvents")
        match = query.get("resourceVersionMatch")
        if "sendInitialEvents" in query and match != "NotOlderThan":
            raise _list_options_invalid("resourceVersionMatch",
                                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        if match and "sendInitialEvents" not in query:
            raise _list_options_invalid("resourceVersionMatch",
                                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
        field_selector = query.get("fieldSelector")
        _check_field_selector(res, field_selector)
        if route.name is not None:
            by_name = f"metadata.name={route.name}"
            field_selector = f"{field_selector},{by_name}" if field_selector else by_name
        accept = _Accept(request.headers.get("Accept", ""))
        fault_kind: str | None = None
        error: errors.ApiError | None = None
        watch: sim_store.Watch | None = None
        if rv not in (None, "0") and self.faults.applies(res.key) and self.faults.watch_gone():
            fault_kind = "gone"
            error = _refused(faults.gone(rv))
        else:
            try:
                watch = self.store.open_watch(res.key, route.namespace, None if initial else rv,
                                              query.get("labelSelector"), field_selector, bookmarks, copies=False)
            except errors.ApiError as exc:
                if exc.code != 410:
                    raise
                error = exc
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        response.kto_fault = fault_kind  # type: ignore[attr-defined]
        if watch is None:
            assert error is not None
            await response.write(_dumps({"type": "ERROR", "object": error.status()}) + b"\n")
            await response.write_eof()
            return response
        self.open_watches += 1
        self._watches.add(watch)
        duration = float(timeout) if timeout else DEFAULT_WATCH_SECONDS
        drop = self.faults.spec.watch_drop if self.faults.applies(res.key) else None
        if drop is not None and drop < duration:
            duration = drop
            response.kto_fault = "watch_drop"  # type: ignore[attr-defined]
        columns_sent = False
        include = query.get("includeObject", "Metadata")
        plain = not accept.table and not res.multi_version

        def encode(event: sim_store.WatchEvent) -> bytes:
            if event.type == "BOOKMARK":
                if res.multi_version:
                    return _dumps({"type": event.type, "object": dict(event.object, apiVersion=res.api_version())})
                return _dumps({"type": event.type, "object": event.object})
            if plain:
                source = event.source
                if source is not None:
                    line = source.encoded.get(event.type)
                    if line is None:
                        line = source.encoded[event.type] = _dumps({"type": event.type, "object": event.object})
                    return line
                return _dumps({"type": event.type, "object": event.object})
            if accept.table:
                obj = tables.table(res, [self._out(event.object, route, res)], include=include,
                                   with_columns=not columns_sent)
            else:
                obj = self._out(event.object, route, res)
            return _dumps({"type": event.type, "object": obj})

        if initial and bookmarks:
            # sendInitialEvents: the queue already holds the ADDED events; a bookmark marks their end.
            watch.queue.put_nowait(sim_store.WatchEvent("BOOKMARK", {
                **self.store.bookmark_object(res.key),
                "metadata": {"resourceVersion": self.store.resource_version,
                             "annotations": {"k8s.io/initial-events-end": "true"}},
            }))
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            watch.close()

        # A timer ends the stream (closing the watch queues its end marker), so the loop below
        # needs no per-event timeout task.
        timer = asyncio.get_running_loop().call_later(duration, expire)
        try:
            while not self._stopping.is_set():
                if watch.queue.empty():
                    try:
                        event = await watch.__anext__()
                    except StopAsyncIteration:
                        break
                else:
                    queued = watch.queue.get_nowait()
                    if queued is None:
                        break
                    event = queued
                if event.type == "BOOKMARK" and not bookmarks:
                    continue
                chunk = [encode(event)]
                columns_sent = True
                ended = False
                while not watch.queue.empty() and len(chunk) < 256:
                    # Drain what is already queued into one write.
                    more = watch.queue.get_nowait()
                    if more is None:
                        ended = True
                        break
                    chunk.append(encode(more))
                await response.write(b"\n".join(chunk) + b"\n")
                if ended:
                    break
        except (ConnectionResetError, ConnectionError):
            return response
        except Exception as exc:
            # Headers are sent: the failure can only be reported in the stream.
            log.exception("watch of %s failed", res.key)
            failure = errors.internal(f"{type(exc).__name__}: {exc}")
            try:
                await response.write(_dumps({"type": "ERROR", "object": failure.status()}) + b"\n")
            except (ConnectionResetError, ConnectionError):
                return response
        finally:
            timer.cancel()
            watch.close()
            self._watches.discard(watch)
            self.open_watches -= 1
        if expired and drop is not None and duration == drop:
            self.faults.counts["watch_drop"] += 1
        try:
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return response

    # --- admin ---------------------------------------------------------------------------------------

    async def _admin(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        method = request.method
        if parts == ["faults"]:
            if method == "GET":
                return _json(self.faults.view())
            if method in ("PUT", "POST"):
                raw = (await request.read()).decode()
                text = raw
                if request.content_type == "application/json" and raw.strip():
                    try:
                        parsed = json.loads(raw)
                    except ValueError as exc:
                        raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None
                    text = parsed.get("spec", "") if isinstance(parsed, dict) else parsed
                try:
                    self.faults.set(text)
                except faults.FaultSpecError as exc:
                    raise errors.bad_request(f"bad fault spec: {exc}") from None
                return _json(self.faults.view())
            raise errors.method_not_allowed()
        if parts == ["stats"] and method == "GET":
            return _json(self.stats())
        if parts == ["requests"] and method == "GET":
            since = _int_param(request.query, "since") or 0
            items = self.requests_since(since)
            return _json({"items": items, "next": self.request_count})
        if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "fail" and method == "POST":
            self.store._get("nodes", None, parts[1])
            if self.kubelet is None:
                raise errors.ApiError(503, "ServiceUnavailable", "the local cluster runs no kubelet")
            await self.kubelet.fail_node(parts[1])
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200,
                          "message": f"node {parts[1]} failed"})
        if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "recover" and method == "POST":
            self.store._get("nodes", None, parts[1])
            if self.kubelet is None:
                raise errors.ApiError(503, "ServiceUnavailable", "the local cluster runs no kubelet")
            await self.kubelet.recover_node(parts[1])
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200,
                          "message": f"node {parts[1]} recovered"})
        if len(parts) == 4 and parts[0] == "pods" and parts[3] == "evict" and method == "POST":
            await self.evict(parts[1], parts[2])
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200,
                          "message": f"pod {parts[1]}/{parts[2]} evicted"})
        raise errors.ApiError(404, "NotFound", f"no admin endpoint {request.method} {request.path}")

    def stats(self) -> Obj:
        return {
            "faults": self.faults.stats(),
            "requests": self.request_count,
            "openWatches": self.open_watches,
            "resourceVersion": self.store.resource_version,
            "objects": {r.key: self.store.count(r.key) for r in self.store.kinds() if self.store.count(r.key)},
        }


_FIELD_SELECTORS: dict[str, tuple[str, ...]] = {
    "configmaps": (),
    "secrets": ("type",),
    "serviceaccounts": (),
    "endpoints": (),
    "limitranges": (),
    "resourcequotas": (),
    "leases.coordination.k8s.io": (),
    "namespaces": ("status.phase",),
    "nodes": ("spec.unschedulable",),
    "services": ("spec.clusterIP", "spec.type"),
    "persistentvolumeclaims": (),
}
"""Field selectors kube-apiserver supports beyond metadata.name and metadata.namespace, for the kinds
the sim checks (pods, events, jobs and the rest take any dotted path, see docs/sim.md)."""


def _check_field_selector(res: resources.Resource, selector: str | None) -> None:
    """400 for a field selector on a field kube-apiserver does not index (configmaps, custom resources …)."""
    if not selector:
        return
    if res.key in _FIELD_SELECTORS:
        allowed = ("metadata.name", "metadata.namespace", *_FIELD_SELECTORS[res.key])
    elif not res.builtin:
        allowed = ("metadata.name", "metadata.namespace")
    else:
        return
    for term in selector.split(","):
        field = term.replace("!=", "=").replace("==", "=").partition("=")[0].strip()
        if field and field not in allowed:
            listed = ", ".join(f'"{a}"' for a in allowed)
            raise errors.bad_request(f'"{field}" is not a known field selector: only {listed}')


def _list_options_invalid(field: str, detail: str) -> errors.ApiError:
    cause = {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}
    return errors.ApiError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {field}: Forbidden: {detail}',
                           [cause], details={"group": "meta.k8s.io", "kind": "ListOptions"})


def _bool(query: Any, name: str) -> bool:
    """A boolean query parameter, read like Go's strconv.ParseBool."""
    return query.get(name) in ("1", "t", "T", "true", "TRUE", "True")


def _int_param(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise errors.bad_request(f"invalid {name} {raw!r}: must be an integer") from None
    if value < 0:
        raise errors.bad_request(f"invalid {name} {raw!r}: must not be negative")
    return value
