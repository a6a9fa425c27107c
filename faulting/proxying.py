"""The faulting proxy: every request forwarded to one API server, with faults injected on the way.

In: ``ProxySettings`` (the upstream's kubeconfig and context, the first fault spec, where to
listen, where to write the proxy's kubeconfig); HTTP requests from any Kubernetes client.
Out: the upstream's answers, streamed as they come (watches and ``follow`` logs stay open),
upgrades (exec and attach over WebSocket or SPDY) passed through byte for byte; or, when the
spec says so, a ``metav1.Status`` refusal (5xx, 429 + Retry-After, 409 on update/patch), a
delay, a watch cut short or a watch start answered 410 Gone, counted by kind.
``GET /admin/faults`` shows the spec, ``PUT /admin/faults`` replaces it (a bad spec is a 400
whose message is one line); every other ``/admin`` path goes to the upstream (sim's own).

Credentials: a request's own ``Authorization`` goes upstream unchanged, so the API server (and
its audit log) sees the client's user, never the proxy's; a request without one gets the
kubeconfig user's token or client certificate. TLS to the upstream trusts the kubeconfig's CA.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import ssl
import tempfile
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from yarl import URL

from faulting import faults

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host"})
"""Headers that describe one hop, not the request: never forwarded as they are."""
DEFAULT_WATCH_SECONDS = 1800.0
"""How long the upstream keeps a watch without timeoutSeconds (kube-apiserver picks 30–60 minutes)."""
HEAD_LIMIT = 64 * 1024
"""The most bytes the upstream's answer to an upgrade may take before its body."""


class ProxyError(Exception):
    """The proxy cannot stand before this upstream (a kubeconfig that names none, a file missing)."""


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    kubeconfig: pathlib.Path
    """The upstream's kubeconfig: its server, CA and user."""
    context: str | None = None
    """The kubeconfig context to use; None: its current-context."""
    faults: str = ""
    """The fault spec in force at start (faulting/faults.py grammar)."""
    host: str = "127.0.0.1"
    """Where the proxy listens."""
    port: int = 0
    """Its port; 0 picks a free one."""
    write_kubeconfig: pathlib.Path | None = None
    """Where to write a kubeconfig whose server is the proxy (same context name and user); None: nowhere."""
    shutdown_timeout: float = 1.0
    """Seconds :meth:`Proxy.stop` gives the requests it is still serving before it cancels them. A watch
    whose client has gone is among them until its next event comes from upstream, so a stop with a watch
    open takes this long: the tests, whose every pipeline stops one, give 0.1 s."""


@dataclasses.dataclass(frozen=True)
class Upstream:
    """The API server behind the proxy, as its kubeconfig names it."""

    url: URL
    """Scheme, host and port (and any path prefix) of the API server."""
    ssl: ssl.SSLContext | None
    """TLS to it (the kubeconfig's CA and client certificate), or None for plain HTTP."""
    authorization: str | None
    """The kubeconfig user's ``Authorization`` value, for requests that bring none."""
    context: str
    """The context's name."""
    user: dict[str, Any]
    """The kubeconfig's user entry, copied into the proxy's kubeconfig."""


def _named(config: dict[str, Any], section: str, name: str, path: pathlib.Path) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return dict(entry.get(section[:-1]) or {})
    raise ProxyError(f"{path}: no {section[:-1]} {name!r}")


def _material(entry: dict[str, Any], key: str, base: pathlib.Path) -> bytes | None:
    """The bytes of a ``key`` / ``key-data`` pair of a kubeconfig entry (a file relative to the kubeconfig)."""
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        file = base / str(entry[key])
        try:
            return file.read_bytes()
        except OSError as exc:
            raise ProxyError(f"cannot read {key} {file}: {exc.strerror}") from None
    return None


def upstream_of(kubeconfig: pathlib.Path, context: str | None = None) -> Upstream:
    """The upstream a kubeconfig names; ``ProxyError`` (one line) when it names none."""
    try:
        config = yaml.safe_load(kubeconfig.read_text()) or {}
    except OSError as exc:
        raise ProxyError(f"cannot read kubeconfig {kubeconfig}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise ProxyError(f"kubeconfig {kubeconfig} is not YAML") from None
    if not isinstance(config, dict):
        raise ProxyError(f"kubeconfig {kubeconfig} is not a mapping")
    name = context or config.get("current-context")
    if not name:
        raise ProxyError(f"{kubeconfig}: no context given and no current-context")
    ctx = _named(config, "contexts", str(name), kubeconfig)
    cluster = _named(config, "clusters", str(ctx.get("cluster")), kubeconfig)
    user = _named(config, "users", str(ctx.get("user")), kubeconfig) if ctx.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server.startswith(("http://", "https://")):
        raise ProxyError(f"{kubeconfig}: cluster {ctx.get('cluster')!r} has no http(s) server")
    base = kubeconfig.resolve().parent
    context_ssl: ssl.SSLContext | None = None
    if server.startswith("https://"):
        ca = _material(cluster, "certificate-authority", base)
        context_ssl = ssl.create_default_context(cadata=ca.decode() if ca else None)
        if cluster.get("insecure-skip-tls-verify"):
            context_ssl.check_hostname = False
            context_ssl.verify_mode = ssl.CERT_NONE
        cert, key = _material(user, "client-certificate", base), _material(user, "client-key", base)
        if cert and key:
            _load_chain(context_ssl, cert, key)
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (_material({"tokenFile": user["tokenFile"]}, "tokenFile", base) or b"").decode().strip()
    authorization = f"Bearer {token}" if token else None
    if authorization is None and user.get("username"):
        pair = f"{user['username']}:{user.get('password', '')}".encode()
        authorization = f"Basic {base64.b64encode(pair).decode()}"
    return Upstream(URL(server.rstrip("/")), context_ssl, authorization, str(name), user)


def _load_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """A client certificate given as bytes: ``ssl`` loads chains from files only."""
    with tempfile.TemporaryDirectory(prefix="kto-proxy-") as folder:
        cert_file, key_file = pathlib.Path(folder, "cert.pem"), pathlib.Path(folder, "key.pem")
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        os.chmod(key_file, 0o600)
        context.load_cert_chain(cert_file, key_file)


@dataclasses.dataclass(frozen=True)
class Route:
    """What a resource request addresses: the verb and resource key faults are chosen by."""

    verb: str
    resource: str
    """``pods``, ``pytorchjobs.kubeflow.org`` …"""
    name: str | None
    subresource: str | None


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def route(method: str, path: str, query: dict[str, str] | Any) -> Route | None:
    """The route of a resource request, as kube-apiserver reads the path; None for anything else
    (discovery, /version, /openapi, /healthz, /admin): those are never faulted."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    watch_path = rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    if rest and rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        rest = rest[2:]
    if not rest or len(rest) > 3:
        return None
    resource = f"{rest[0]}.{group}" if group else rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if method == "GET":
        watching = watch_path or (name is None and query.get("watch") in ("1", "t", "T", "true", "TRUE", "True"))
        verb = "watch" if watching else ("list" if name is None else "get")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return Route(verb, resource, name, subresource)


def _status_response(refusal: faults.Refusal) -> web.Response:
    headers = {"Retry-After": str(refusal.retry_after)} if refusal.retry_after is not None else None
    return web.Response(body=json.dumps(refusal.status(), separators=(",", ":")).encode(), status=refusal.code,
                        content_type="application/json", headers=headers)


def _forwarded(headers: Any, authorization: str | None) -> list[tuple[str, str]]:
    """The request's end-to-end headers, with the kubeconfig's credentials when it brings none."""
    out: list[tuple[str, str]] = [(k, v) for k, v in headers.items()
                                  if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"]
    if authorization is not None and "authorization" not in (k.lower() for k, _ in out):
        out.append(("Authorization", authorization))
    return out


def _upgrading(request: web.Request) -> bool:
    connection = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    return "upgrade" in connection and bool(request.headers.get("Upgrade"))


class _Pipe:
    """The client's bytes after an upgrade, handed over by aiohttp's server (its payload-parser interface)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.queue.put_nowait(bytes(data))
        return False, b""

    def feed_eof(self) -> None:
        self.queue.put_nowait(b"")


class Proxy:
    """The faulting proxy; ``async with Proxy(settings) as proxy:`` listens on ``proxy.url``
    (and writes ``settings.write_kubeconfig``); ``proxy.faults.set(spec)`` swaps the faults."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.upstream = upstream_of(settings.kubeconfig, settings.context)
        self.faults = faults.Faults(settings.faults)
        """The faults in force and their counters."""
        self.port = settings.port
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._tunnels: set[asyncio.Task[None]] = set()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    async def __aenter__(self) -> Proxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> str:
        """Listen, and write the proxy's kubeconfig when asked; the proxy's URL."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.upstream.ssl if self.upstream.ssl is not None else True, limit=0),
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                                     shutdown_timeout=self.settings.shutdown_timeout)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.port, reuse_address=True, backlog=1024)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        if self.settings.write_kubeconfig is not None:
            self.settings.write_kubeconfig.write_text(self.kubeconfig_text())
        return self.url

    async def stop(self) -> None:
        """Stop listening and end every open stream; safe to call twice."""
        for task in list(self._tunnels):
            task.cancel()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def kubeconfig_text(self) -> str:
        """A kubeconfig for the proxy: plain HTTP to it, the upstream's context name and user."""
        name = self.upstream.context
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": self.upstream.user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        }
        return yaml.safe_dump(config, sort_keys=False)

    # --- serving ----------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.rstrip("/") == "/admin/faults":
            return await self._admin(request)
        target = route(request.method, request.path, request.query)
        drop: float | None = None
        if target is not None and self.faults.applies(target.resource):
            delay = self.faults.latency(target.verb)
            if delay:
                await asyncio.sleep(delay)
            refusal = self.faults.error(target.verb, target.resource, target.name)
            if refusal is not None:
                return _status_response(refusal)
            if target.verb == "watch":
                version = request.query.get("resourceVersion") or None
                if version not in (None, "0") and self.faults.watch_gone():
                    return await self._gone(request, faults.gone(str(version)))
                drop = self.faults.spec.watch_drop
                timeout = request.query.get("timeoutSeconds")
                lasts = float(timeout) if timeout and timeout.isdigit() and int(timeout) else DEFAULT_WATCH_SECONDS
                if drop is not None and drop >= lasts:
                    drop = None
        try:
            if _upgrading(request):
                return await self._tunnel(request)
            return await self._forward(request, target is not None and target.verb == "watch", drop)
        except (aiohttp.ClientError, OSError) as exc:
            cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            refusal = faults.Refusal("upstream", 503, "ServiceUnavailable",
                                     f"the API server behind the faulting proxy is unreachable: {cause}")
            return _status_response(refusal)

    async def _admin(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            return web.json_response(self.faults.view())
        if request.method not in ("PUT", "POST"):
            return _status_response(faults.Refusal("admin", 405, "MethodNotAllowed",
                                                   "the server does not allow this method on the requested resource"))
        raw = (await request.read()).decode(errors="replace")
        text: Any = raw
        if request.content_type == "application/json" and raw.strip():
            try:
                parsed = json.loads(raw)
            except ValueError as exc:
                return _bad_request(f"the body of the request could not be decoded: {exc}")
            text = parsed.get("spec", "") if isinstance(parsed, dict) else parsed
        try:
            self.faults.set(text)
        except faults.FaultSpecError as exc:
            return _bad_request(f"bad fault spec: {exc}")
        return web.json_response(self.faults.view())

    async def _gone(self, request: web.Request, refusal: faults.Refusal) -> web.StreamResponse:
        """A watch start answered as kube-apiserver answers one from an expired version: 200, one ERROR event."""
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        event = {"type": "ERROR", "object": refusal.status()}
        await response.write(json.dumps(event, separators=(",", ":")).encode() + b"\n")
        await response.write_eof()
        return response

    def _target(self, request: web.Request) -> URL:
        return URL(str(self.upstream.url) + request.raw_path, encoded=True)

    async def _forward(self, request: web.Request, watching: bool, drop: float | None) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read() if request.body_exists else None
        async with self._session.request(
            request.method, self._target(request), headers=_forwarded(request.headers, self.upstream.authorization),
            data=body, allow_redirects=False,
        ) as answer:
            response = web.StreamResponse(status=answer.status, reason=answer.reason)
            for key, value in answer.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers.add(key, value)
            await response.prepare(request)
            # A watch goes out event by event (one JSON line each), so a dropped one ends between
            # two events as kube-apiserver ends a watch, never inside one.
            pending = bytearray()
            try:
                async with asyncio.timeout(drop):
                    async for chunk in answer.content.iter_any():
                        if not watching:
                            await response.write(chunk)
                            continue
                        pending += chunk
                        end = pending.rfind(b"\n") + 1
                        if end:
                            await response.write(bytes(pending[:end]))
                            del pending[:end]
                if pending:
                    await response.write(bytes(pending))
            except TimeoutError:
                self.faults.counts["watch_drop"] += 1
            except (ConnectionError, aiohttp.ClientPayloadError):
                return response
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _tunnel(self, request: web.Request) -> web.StreamResponse:
        """An upgrade (exec, attach, port-forward over WebSocket or SPDY): the upstream's answer, and
        after a 101 every byte both ways until either side closes."""
        url = self.upstream.url
        reader, writer = await asyncio.open_connection(
            url.host, url.port, ssl=self.upstream.ssl,
            server_hostname=url.host if self.upstream.ssl is not None else None,
        )
        try:
            lines = [f"{request.method} {url.raw_path.rstrip('/')}{request.raw_path} HTTP/1.1",
                     f"Host: {url.raw_authority}",
                     f"Connection: {request.headers.get('Connection', 'Upgrade')}",
                     f"Upgrade: {request.headers['Upgrade']}"]
            body = await request.read() if request.body_exists else b""
            lines += [f"{k}: {v}" for k, v in _forwarded(request.headers, self.upstream.authorization)]
            if body:
                lines.append(f"Content-Length: {len(body)}")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                raise aiohttp.ClientError(f"the upstream's answer has no end of headers in {HEAD_LIMIT} bytes") from None
            except asyncio.IncompleteReadError:
                raise aiohttp.ClientError("the upstream closed the connection before answering") from None
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            code = int(status_line.split(" ", 2)[1])
            headers = [(k.strip(), v.strip()) for k, colon, v in (h.partition(":") for h in header_lines) if colon]
            if code != 101:
                length = next((int(v) for k, v in headers if k.lower() == "content-length"), None)
                content = await (reader.readexactly(length) if length is not None else reader.read())
                keep = {k: v for k, v in headers if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"}
                return web.Response(status=code, body=content, headers=keep)
            return await self._piped(request, reader, writer, headers)
        finally:
            writer.close()

    async def _piped(self, request: web.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     headers: list[tuple[str, str]]) -> web.StreamResponse:
        transport = request.transport
        if transport is None:
            return web.Response(status=500, text="the client is gone")
        response = web.StreamResponse(status=101)
        for key, value in headers:
            if key.lower() not in ("content-length", "transfer-encoding", "date", "server"):
                response.headers.add(key, value)
        pipe = _Pipe()
        protocol: Any = request.protocol
        # aiohttp would parse what follows as HTTP: it goes to the pipe instead, set before the
        # 101 goes out since the client starts framing on it.
        protocol.set_parser(pipe)
        await response.prepare(request)

        async def up() -> None:
            while data := await pipe.queue.get():
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        async def down() -> None:
            while data := await reader.read(65536):
                if transport.is_closing():
                    return
                transport.write(data)

        task = asyncio.current_task()
        assert task is not None
        self._tunnels.add(task)
        try:
            upward = asyncio.create_task(up(), name="proxy-upgrade-up")
            downward = asyncio.create_task(down(), name="proxy-upgrade-down")
            # The upstream's end is the session's end; the client closing first ends it too.
            await asyncio.wait({upward, downward}, return_when=asyncio.FIRST_COMPLETED)
            if not downward.done():
                with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
                    await asyncio.wait_for(asyncio.shield(downward), 10.0)
            for part in (upward, downward):
                part.cancel()
            await asyncio.gather(upward, downward, return_exceptions=True)
        finally:
            self._tunnels.discard(task)
            protocol.force_close()
            transport.close()
        return response


def _bad_request(message: str) -> web.Response:
    return _status_response(faults.Refusal("admin", 400, "BadRequest", " ".join(message.split())))
