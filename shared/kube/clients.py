"""A small async Kubernetes client over kubernetes-asyncio's transport.

In: a kubeconfig (path + context) or the in-cluster service account.
Out: JSON dicts from the API server, ``ApiError`` for failures (with
``retriable`` set for 5xx, 429 and timeouts), and watch streams as
``WatchEvent``s. Retriable failures are retried here, in one place, with
tenacity, honouring ``Retry-After``. Works on plain dicts so that every kind,
custom or built in, goes through the same few calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol

import aiohttp
import tenacity
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from opentelemetry import trace

from shared import tracing
from shared.api import objects
from shared.kube import resources

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("kto.kube")

PatchType = Literal["merge", "json", "strategic"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


RequestHook = Callable[[str, str, int | None, float], None]
"""Told of each HTTP request to the API server (retries and watches included):
method, host (``host:port``), status code (None: no answer came) and seconds
until the answer's headers."""


class ApiError(Exception):
    """A failed API call, from the server's metav1.Status when there is one."""

    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def retriable(self) -> bool:
        return self.code == 429 or self.code >= 500 or self.code == 0

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def already_exists(self) -> bool:
        return self.code == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        return self.code == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.code == 410


class ClusterUnreachable(ApiError):
    """A request not sent: its cluster has not answered lately (see :mod:`shared.kube.reaching`).
    Retriable, but never retried in place: the caller should come back after ``retry_after``
    seconds without holding anything meanwhile."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(0, "ClusterUnreachable", message, retry_after)


class Guard(Protocol):
    """Runs each attempt of a request (``what``: method and path); may refuse it with
    :class:`ClusterUnreachable` or cut it short (an ApiError with code 0)."""

    def attempt(self, what: str) -> AbstractAsyncContextManager[None]: ...


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    type: str
    """ADDED, MODIFIED, DELETED or BOOKMARK."""
    object: dict[str, Any]


EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
"""The remote-command WebSocket subprotocols ``exec`` offers, preferred first."""

EXEC_OUTPUT_LIMIT = 64 * 1024
"""Bytes of stdout, and of stderr, that ``exec`` keeps; the rest is read and dropped, and
the text kept ends with ``dropped_marker`` saying how much."""


def dropped_marker(dropped: int) -> str:
    """What ends an exec's output cut at ``EXEC_OUTPUT_LIMIT``."""
    return f"\n[kto: {dropped} more bytes dropped, exec output is capped at {EXEC_OUTPUT_LIMIT} bytes]\n"


class _CappedOutput:
    """One channel's bytes, kept up to ``EXEC_OUTPUT_LIMIT``, the rest only counted."""

    def __init__(self) -> None:
        self.kept = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = EXEC_OUTPUT_LIMIT - len(self.kept)
        self.kept += data[:max(room, 0)]
        self.dropped += max(len(data) - max(room, 0), 0)

    def text(self) -> str:
        text = self.kept.decode("utf-8", "replace")
        return text + dropped_marker(self.dropped) if self.dropped else text


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """What a command run by ``KubeClient.exec`` printed, and how it exited."""

    stdout: str
    stderr: str
    exit_code: int


def _exec_outcome(status: dict[str, Any]) -> int:
    """The exit code a remote-command Status reports (v4/v5 error channel); ApiError for a failure that is
    not the command's own exit."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause.get("message") or 1)
    raise ApiError(int(status.get("code") or 500), str(status.get("reason") or "InternalError"),
                   str(status.get("message") or status))


@dataclasses.dataclass(frozen=True)
class RetrySettings:
    attempts: int = 8
    """How many times a retriable call is tried before its error is raised."""
    initial_wait: float = 0.05
    """First back-off, in seconds; doubled per attempt with jitter."""
    max_wait: float = 5.0
    """Longest single back-off, in seconds (a longer Retry-After is honoured)."""


def _wait(settings: RetrySettings) -> Callable[[tenacity.RetryCallState], float]:
    """Exponential back-off with jitter, unless the server said how long (Retry-After)."""
    backoff = tenacity.wait_exponential_jitter(multiplier=settings.initial_wait, max=settings.max_wait)

    def wait(state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, ApiError) and error.retry_after is not None:
            return error.retry_after
        return float(backoff(state))

    return wait


def retrying(settings: RetrySettings, attempts: int | None = None) -> tenacity.AsyncRetrying:
    """The retry policy for API calls: retriable ApiErrors only, Retry-After honoured;
    ``attempts`` (default ``settings.attempts``) tries in all."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(
            lambda e: isinstance(e, ApiError) and e.retriable and not isinstance(e, ClusterUnreachable)),
        wait=_wait(settings),
        stop=tenacity.stop_after_attempt(attempts or settings.attempts),
        reraise=True,
    )


def _error_from(status: int, body: bytes, headers: Any) -> ApiError:
    retry_after: float | None = None
    raw_retry = headers.get("Retry-After") if headers is not None else None
    if raw_retry:
        try:
            retry_after = float(raw_retry)
        except ValueError:
            retry_after = None
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        return ApiError(
            int(decoded.get("code") or status), str(decoded.get("reason") or ""), str(decoded.get("message") or ""),
            retry_after,
        )
    return ApiError(status, "", body.decode("utf-8", "replace")[:500], retry_after)


def _without_url(exc: BaseException) -> str:
    """What a failed connection said, without the URL (an exec's holds its command): aiohttp's
    response errors print theirs."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{type(exc).__name__}: {exc.status} {exc.message}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"{type(exc).__name__}: cannot connect to {exc.host}:{exc.port}"
    return type(exc).__name__ if isinstance(exc, aiohttp.InvalidURL) else repr(exc)


class _JsonApiClient(k8s_client.ApiClient):
    """kubernetes-asyncio's client, minus the walk that turns OpenAPI model objects
    into JSON-ready values before every request (a tenth of a busy worker's CPU):
    KubeClient only ever sends plain JSON-shaped dicts, lists and strings."""

    def sanitize_for_serialization(self, obj: Any) -> Any:
        return obj


async def _skip_environment_lookups(api: k8s_client.ApiClient) -> None:
    """kubernetes-asyncio opens its aiohttp session with ``trust_env=True``, so every
    request looks up proxy variables and ``~/.netrc`` in a worker thread (~10 %
    of a worker's CPU). With no proxy configured in the environment there is
    nothing to find (the API server never uses netrc credentials), so the session
    is swapped for one on the same connector that skips the lookups. The session
    also gets the tracing hooks when spans are exported (a CLIENT span per HTTP
    request, its context sent to the API server)."""
    proxies = bool(urllib.request.getproxies())
    trace_configs = tracing.http_trace_configs()
    if proxies and not trace_configs:
        return  # HTTPS_PROXY and friends apply: keep honouring them
    rest = api.rest_client
    old: aiohttp.ClientSession = rest.pool_manager
    connector = old.connector
    old.detach()
    await old.close()
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=proxies, read_bufsize=2**21,
                                              trace_configs=trace_configs or None)


class KubeClient:
    """One cluster's API server. ``async with KubeClient.connect(...)``; ``close()`` is safe twice."""

    def __init__(
        self, api: k8s_client.ApiClient, retry: RetrySettings = RetrySettings(), on_request: RequestHook | None = None,
        *, guard: Guard | None = None,
    ) -> None:
        self._guard = guard
        self._api = api
        self._retry = retry
        self._closed = False
        self._on_request = on_request
        self._netloc = urllib.parse.urlsplit(str(api.configuration.host)).netloc

    @classmethod
    async def connect(
        cls, kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None,
        retry: RetrySettings = RetrySettings(), on_request: RequestHook | None = None,
        *, guard: Guard | None = None,
    ) -> KubeClient:
        """From a kubeconfig (path and context), or in-cluster config when there is none;
        ``on_request`` is told of every request made; ``guard`` runs every attempt of
        ``request`` (not watches)."""
        configuration = k8s_client.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=str(kubeconfig) if kubeconfig is not None else None,
                context=context,
                client_configuration=configuration,
            )
        api = _JsonApiClient(configuration)
        await _skip_environment_lookups(api)
        return cls(api, retry, on_request, guard=guard)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._api.close()

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def _send(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
        content_type: str = "application/json", timeout: float | None = 30.0,
    ) -> aiohttp.ClientResponse:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        started = time.perf_counter()
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path, method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self._observe(method, None, started)
            raise ApiError(0, "ConnectionError", f"{method} {path}: {exc!r}") from exc
        self._observe(method, response.status, started)
        return response

    def _observe(self, method: str, code: int | None, started: float) -> None:
        if self._on_request is not None:
            self._on_request(method, self._netloc, code, time.perf_counter() - started)

    async def request(
        self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None,
        content_type: str = "application/json", *, route: str | None = None,
    ) -> dict[str, Any]:
        """One call, retried when retriable; the decoded JSON body.

        Runs in a span ``<method> <route>`` (``route``: the resource, e.g.
        ``pods`` or ``pytorchjobs/status``; the path when not given), over the
        HTTP CLIENT span of each attempt (when spans are exported). The first
        attempt skips tenacity's per-call bookkeeping; a retriable failure goes
        on to the remaining attempts with back-off (Retry-After honoured).
        """
        with _tracer.start_as_current_span(
            f"{method} {route or path}",
            attributes={"http.request.method": method, "url.path": path, "server.address": self.host},
        ) as span:
            try:
                return await self._once(method, path, query, body, content_type)
            except ApiError as exc:
                span.set_attribute("http.response.status_code", exc.code)
                if not exc.retriable or self._retry.attempts <= 1 or isinstance(exc, ClusterUnreachable):
                    raise
                first = exc
            await asyncio.sleep(first.retry_after if first.retry_after is not None else self._retry.initial_wait)
            async for attempt in retrying(self._retry, attempts=self._retry.attempts - 1):
                with attempt:
                    return await self._once(method, path, query, body, content_type)
            raise AssertionError("unreachable: tenacity reraises")

    async def _once(
        self, method: str, path: str, query: dict[str, Any] | None, body: Any, content_type: str,
    ) -> dict[str, Any]:
        if self._guard is None:
            return await self._exchange(method, path, query, body, content_type)
        async with self._guard.attempt(f"{method} {path}"):
            return await self._exchange(method, path, query, body, content_type)

    async def _exchange(
        self, method: str, path: str, query: dict[str, Any] | None, body: Any, content_type: str,
    ) -> dict[str, Any]:
        response = await self._send(method, path, query, body, content_type)
        try:
            data = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise ApiError(0, "ConnectionError", f"{method} {path}: {exc!r}") from exc
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            raise _error_from(response.status, data, response.headers)
        decoded: dict[str, Any] = json.loads(data) if data else {}
        return decoded

    async def exec(
        self, namespace: str, pod: str, container: str, command: list[str], timeout: float = 30.0,
    ) -> ExecResult:
        """Run ``command`` in a container of a pod (``pods/exec``) and wait for it to end.

        Speaks the WebSocket channel protocol (``v5.channel.k8s.io``, else ``v4``): stdout
        and stderr collected, each capped at ``EXEC_OUTPUT_LIMIT`` bytes (the rest dropped,
        a marker saying how much), the exit code read from the error channel's Status. Not
        retried (a command may not be idempotent). ApiError for a missing pod (404), an
        invalid container (400), a container not running or anything the kubelet refuses
        (its code), or a connection failure or ``timeout`` (code 0).
        """
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/exec"
        query = urllib.parse.urlencode(
            [("container", container), ("stdout", "true"), ("stderr", "true"), *(("command", c) for c in command)])
        url = f"{self.host.rstrip('/')}{path}?{query}"
        headers: dict[str, str] = {}
        await self._api.update_params_for_auth(headers, [], ["BearerToken"])
        session: aiohttp.ClientSession = self._api.rest_client.pool_manager
        where = f"exec in {namespace}/{pod}/{container}"
        # The command travels in the URL's query: the span names the path only, the
        # aiohttp hooks (whose span would hold ``url.full``) are off for it, and no error
        # message, cause or traceback carries the URL (exceptions are recorded on spans).
        with _tracer.start_as_current_span(
            "POST pods/exec",
            attributes={"http.request.method": "GET", "url.path": path, "server.address": self.host},
        ), tracing.untraced_http():
            try:
                async with asyncio.timeout(timeout):
                    return await self._exec(session, url, headers, where)
            except TimeoutError:
                raise ApiError(0, "Timeout", f"{where}: no end after {timeout:g}s") from None
            except (aiohttp.ClientError, OSError) as exc:
                raise ApiError(0, "ConnectionError", f"{where}: {_without_url(exc)}") from None

    async def _exec(self, session: aiohttp.ClientSession, url: str, headers: dict[str, str], where: str) -> ExecResult:
        try:
            ws = await session.ws_connect(url, protocols=EXEC_PROTOCOLS, headers=headers, autoping=True,
                                          max_msg_size=0)
        except aiohttp.WSServerHandshakeError as exc:
            raise await self._handshake_error(session, url, headers, exc) from None
        stdout, stderr, error = _CappedOutput(), _CappedOutput(), bytearray()
        async with ws:
            async for message in ws:
                if message.type != aiohttp.WSMsgType.BINARY or not message.data:
                    continue
                channel, data = message.data[0], message.data[1:]
                if channel == 1:
                    stdout.add(data)
                elif channel == 2:
                    stderr.add(data)
                elif channel == 3 and len(error) < EXEC_OUTPUT_LIMIT:
                    error += data
        if not error:
            raise ApiError(0, "ConnectionError", f"{where}: the exec stream ended without a status")
        try:
            status = json.loads(error)
        except ValueError:
            raise ApiError(500, "InternalError", error.decode("utf-8", "replace")) from None
        return ExecResult(stdout.text(), stderr.text(), _exec_outcome(status))

    @staticmethod
    async def _handshake_error(
        session: aiohttp.ClientSession, url: str, headers: dict[str, str], exc: aiohttp.WSServerHandshakeError,
    ) -> ApiError:
        """The refusal's body (aiohttp drops it): the same upgrade request again, read as a plain response."""
        upgrade = {**headers, "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": "a3RvLWV4ZWMtcmVmdXNhbA==", "Sec-WebSocket-Protocol": ", ".join(EXEC_PROTOCOLS)}
        try:
            async with session.get(url, headers=upgrade) as response:
                if response.status != 101:
                    return _error_from(response.status, await response.read(), response.headers)
        except aiohttp.ClientError:
            pass
        return ApiError(exc.status, "", str(exc.message))

    async def get(self, rt: resources.ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        return await self.request("GET", rt.path(namespace, name), route=rt.plural)

    async def list(
        self, rt: resources.ResourceType, namespace: str | None = None, label_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """All items (following ``continue``) and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"limit": 500}
        if label_selector:
            query["labelSelector"] = label_selector
        while True:
            page = await self.request("GET", rt.path(namespace), query, route=rt.plural)
            for item in page.get("items") or []:
                item.setdefault("apiVersion", rt.api_version)
                item.setdefault("kind", rt.kind)
                items.append(item)
            meta = objects.meta(page)
            if not meta.get("continue"):
                return items, objects.resource_version_of(page)
            query["continue"] = meta["continue"]

    async def create(self, rt: resources.ResourceType, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", rt.path(namespace), body=body, route=rt.plural)

    async def replace(self, rt: resources.ResourceType, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", rt.path(namespace, body["metadata"]["name"]), body=body, route=rt.plural)

    async def put(self, rt: resources.ResourceType, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Create ``body``, or replace what is there of its name by it (on the stored resourceVersion)."""
        try:
            return await self.create(rt, namespace, body)
        except ApiError as exc:
            if not exc.already_exists:
                raise
        current = await self.get(rt, namespace, body["metadata"]["name"])
        return await self.replace(rt, namespace, dict(body, metadata=dict(
            body["metadata"], resourceVersion=current["metadata"]["resourceVersion"])))

    async def patch(
        self, rt: resources.ResourceType, namespace: str | None, name: str, body: Any,
        patch_type: PatchType = "merge", subresource: str | None = None,
    ) -> dict[str, Any]:
        return await self.request(
            "PATCH", rt.path(namespace, name, subresource), body=body, content_type=_PATCH_CONTENT_TYPES[patch_type],
            route=f"{rt.plural}/{subresource}" if subresource else rt.plural,
        )

    async def delete(
        self, rt: resources.ResourceType, namespace: str | None, name: str,
        propagation: str | None = None, uid: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            body["propagationPolicy"] = propagation
        if uid:
            body["preconditions"] = {"uid": uid}
        return await self.request("DELETE", rt.path(namespace, name), body=body, route=rt.plural)

    async def watch(
        self, rt: resources.ResourceType, namespace: str | None = None, resource_version: str | None = None,
        label_selector: str | None = None, timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        """One watch request's events; ends when the server closes it.

        Raises ``ApiError`` (``gone`` for 410 Expired, as an HTTP status or an
        ERROR event) so the caller can relist.
        """
        query: dict[str, Any] = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds}
        if resource_version:
            query["resourceVersion"] = resource_version
        if label_selector:
            query["labelSelector"] = label_selector
        with tracing.untraced_http():
            response = await self._send("GET", rt.path(namespace), query, timeout=timeout_seconds + 30)
        try:
            if not 200 <= response.status <= 299:
                raise _error_from(response.status, await response.read(), response.headers)
            while True:
                try:
                    line = await response.content.readline()
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    raise ApiError(0, "ConnectionError", f"watch {rt.plural}: {exc!r}") from exc
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                event = json.loads(line)
                kind = str(event.get("type"))
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(
                        int(obj.get("code") or 500), str(obj.get("reason") or ""), str(obj.get("message") or ""),
                    )
                if kind != "BOOKMARK":
                    obj.setdefault("apiVersion", rt.api_version)
                    obj.setdefault("kind", rt.kind)
                yield WatchEvent(kind, obj)
        finally:
            response.release()
