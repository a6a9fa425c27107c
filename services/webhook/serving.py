"""The webhook's HTTPS server: one path per webhook of ``shared.core.families.REGISTRY.hooks``, plus health.

In: ``POST /validate-<group>-<version>-<kind>`` and ``/mutate-…`` with an
AdmissionReview ``admission.k8s.io/v1`` (JSON), from the API server.
Out: the AdmissionReview answer (HTTP 200, as controller-runtime answers,
denial or not). What is not an AdmissionReview at all — not JSON, nested
past what Python can parse, another kind of object, no request uid — is
answered 400 with a review whose status says what is wrong; a body over
``max_request_bytes`` (3 MiB) 413, refused from its ``Content-Length`` before it
is read. Each review is read and decided in a worker thread, within
``review_deadline`` seconds (else an error review, before the API server's own
timeout), so the event loop stays free: ``GET /healthz`` answers at once while
the process runs, ``GET /readyz`` once it listens with its certificate loaded.

A kind whose rules need another object (a TrainJob's runtime, ``admitting.Reading``) has it read from
the API server that sent the review (GET only, :class:`Readers`): every hook is also served under
``/clusters/<context>/``, so that one webhook registered on several clusters (``kto up --clusters N``)
reads each review's objects from the cluster it came from.

The TLS certificate is re-read when its files change (looked at every
``reload_interval`` seconds): new handshakes get the new one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import pathlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from services.webhook.settings import WebhookSettings
from shared import lifecycle
from shared.core import admitting, families
from shared.kube import clients, resources

log = logging.getLogger("kto.webhook")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _bad_request(message: str, uid: str = "") -> web.Response:
    answer = admitting.denied(uid, message, 400, "BadRequest")
    return web.json_response(answer.review(), status=400)


def _too_large(limit: int, size: int | None) -> web.Response:
    said = f" ({size} bytes)" if size is not None else ""
    answer = admitting.denied("", f"the AdmissionReview{said} is larger than kto's webhook accepts "
                                  f"({limit} bytes)", 413, "RequestEntityTooLarge")
    return web.json_response(answer.review(), status=413)


def _uid_of(body: Any) -> str:
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else ""


CLUSTER_PREFIX = "/clusters/{cluster}"
"""The path prefix of a hook served for one cluster (a kubeconfig context) of several."""


class Readers:
    """The objects rules read from the API server, one client per cluster opened on first use (GET only):
    the context named in the review's path, else the kubeconfig's current one, else the in-cluster
    account. ``close()`` is safe twice."""

    def __init__(self, kubeconfig: pathlib.Path | None) -> None:
        self._kubeconfig = kubeconfig
        self._clients: dict[str | None, clients.KubeClient | None] = {}
        self._lock = asyncio.Lock()

    async def _client(self, cluster: str | None) -> clients.KubeClient | None:
        async with self._lock:
            if cluster not in self._clients:
                self._clients[cluster] = await self._connect(cluster)
            return self._clients[cluster]

    async def _connect(self, cluster: str | None) -> clients.KubeClient | None:
        if self._kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            log.warning("no kubeconfig and not in a cluster: rules that read the API server are left to the "
                        "reconciler")
            return None
        try:
            return await clients.KubeClient.connect(self._kubeconfig, cluster)
        except Exception:  # kubernetes-asyncio's ConfigException for a context it does not know, or no file
            log.warning("no credentials for cluster %s: rules that read the API server are left to the reconciler",
                        cluster or "(current context)", exc_info=True)
            return None

    async def read(self, cluster: str | None, read: admitting.Read) -> dict[str, Any] | admitting.Unread | None:
        """The object, why the API server gave none, or None when kto cannot ask."""
        client = await self._client(cluster)
        if client is None:
            return None
        try:
            rt = resources.for_manifest({"apiVersion": read.api_version, "kind": read.kind})
        except ValueError as exc:
            return admitting.Unread(str(exc))
        try:
            return await client.get(rt, read.namespace, read.name)
        except clients.ApiError as exc:
            if exc.not_found:
                return admitting.Unread(f'{rt.plural}.{rt.group} "{read.name}" not found')
            if exc.code in (401, 403):  # an install that grants no reads (deploy/overlays/namespaced)
                log.warning("cannot read %s %s: %s; left to the reconciler", read.kind, read.name, exc.message)
                return None
            return admitting.Unread(exc.message)

    def fetcher(self, cluster: str | None, deadline: float) -> admitting.Fetch:
        """A Fetch for a review decided in a worker thread: each read runs on this event loop."""
        loop = asyncio.get_running_loop()

        def fetch(read: admitting.Read) -> dict[str, Any] | admitting.Unread | None:
            return asyncio.run_coroutine_threadsafe(self.read(cluster, read), loop).result(deadline)

        return fetch

    async def close(self) -> None:
        opened, self._clients = self._clients, {}
        for client in opened.values():
            if client is not None:
                await client.close()


@dataclasses.dataclass
class _Review:
    """One review decided in a thread: its request's uid as soon as it is known (for an answer
    past the deadline), then the HTTP status and the AdmissionReview to send."""

    hook: admitting.Hook
    raw: bytes
    fetch: admitting.Fetch | None = None
    uid: str = ""

    def decide(self) -> tuple[int, dict[str, Any]]:
        """Runs in a worker thread: reading 3 MiB of JSON and judging it is CPU work the event loop
        (and so ``/healthz``) must not wait for."""
        try:
            body = json.loads(self.raw)
        except RecursionError:
            return 400, admitting.denied("", "the body is nested too deep to be read as JSON", 400,
                                         "BadRequest").review()
        except ValueError as exc:
            return 400, admitting.denied("", f"the body is not JSON: {exc}", 400, "BadRequest").review()
        self.uid = _uid_of(body)
        try:
            answer = admitting.review(self.hook, body, self.fetch)
        except admitting.BadReview as exc:
            return 400, admitting.denied(self.uid, str(exc), 400, "BadRequest").review()
        except Exception as exc:  # a bug must cost one request, never the process
            log.exception("%s failed on a request", self.hook.name)
            answer = admitting.denied(self.uid, f"kto's webhook {self.hook.name} failed: {type(exc).__name__}: {exc}",
                                      500, "InternalError")
        if not answer.allowed:
            log.debug("%s denied %s: %s", self.hook.name, answer.uid, answer.message)
        return 200, answer.review()


def handler(hook: admitting.Hook, settings: WebhookSettings, readers: Readers | None = None) -> Handler:
    """The request handler of one webhook (``readers``: what its rules read from the API server)."""
    limit = settings.max_request_bytes

    async def admit(request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/json":
            return _bad_request(f"contentType={request.content_type}, expected application/json")
        if request.content_length is not None and request.content_length > limit:
            return _too_large(limit, request.content_length)  # refused before a byte of it is read
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:  # a chunked body that grew past the limit
            return _too_large(limit, None)
        fetch = readers.fetcher(request.match_info.get("cluster"), settings.review_deadline) if readers else None
        review = _Review(hook, raw, fetch)
        deciding = asyncio.ensure_future(asyncio.to_thread(review.decide))
        try:
            status, answer = await asyncio.wait_for(asyncio.shield(deciding), settings.review_deadline)
        except TimeoutError:
            # The thread cannot be stopped; its late answer is dropped. The API server gets an error
            # it can show (failurePolicy Fail) rather than waiting out its own timeout.
            log.warning("%s did not decide %s within %gs", hook.name, review.uid or "a request",
                        settings.review_deadline)
            return web.json_response(admitting.denied(
                review.uid, f"kto's webhook {hook.name} did not decide within {settings.review_deadline:g}s",
                500, "Timeout").review())
        return web.json_response(answer, status=status)

    return admit


class Server(lifecycle.Started):
    """``async with Server(settings) as server:`` — the webhook listening on ``server.url``."""

    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings
        self.port = settings.port
        self.ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._loaded: tuple[float, float] | None = None
        self._ready = False
        self._runner: web.AppRunner | None = None
        self._reloading: asyncio.Task[None] | None = None
        self.readers = Readers(settings.kubeconfig)
        self.app = web.Application(client_max_size=settings.max_request_bytes)
        for hook in families.REGISTRY.hooks:
            self.app.router.add_post(hook.path, handler(hook, settings, self.readers))
            self.app.router.add_post(CLUSTER_PREFIX + hook.path, handler(hook, settings, self.readers))
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)

    @property
    def url(self) -> str:
        """The base URL the webhook configurations name (``https://127.0.0.1:9443`` when listening on all
        addresses)."""
        host = self.settings.host
        host = "127.0.0.1" if host in ("", "0.0.0.0") else ("[::1]" if host == "::" else host)
        return f"https://{host}:{self.port}"

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        if not self._ready:
            return web.Response(status=503, text="not listening yet")
        return web.Response(text="ok")

    def _stamp(self) -> tuple[float, float]:
        return self.settings.cert_file.stat().st_mtime, self.settings.key_file.stat().st_mtime

    def load_certificate(self) -> bool:
        """Read the certificate and key again if their files changed; True when they were (re)loaded.
        A first load that fails raises ``OSError`` / ``ssl.SSLError``; a later one keeps the old pair."""
        stamp = self._stamp()
        if stamp == self._loaded:
            return False
        try:
            self.ssl.load_cert_chain(self.settings.cert_file, self.settings.key_file)
        except (OSError, ssl.SSLError):
            if self._loaded is None:
                raise
            log.warning("the certificate files changed but do not load (yet); serving the previous ones",
                        exc_info=True)
            return False
        self._loaded = stamp
        return True

    async def start(self) -> None:
        self.load_certificate()
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port, ssl_context=self.ssl,
                           reuse_port=self.settings.reuse_port, backlog=1024)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        self._reloading = asyncio.create_task(self._reload(), name="kto-webhook-certificate-reload")
        self._ready = True
        log.info("serving %d webhooks on %s", len(families.REGISTRY.hooks), self.url)

    async def _reload(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_interval)
            try:
                if self.load_certificate():
                    log.info("certificate reloaded from %s", self.settings.cert_file)
            except OSError:
                log.warning("cannot read the certificate files", exc_info=True)

    async def stop(self) -> None:
        """Stop listening; safe to call twice."""
        self._ready = False
        reloading, self._reloading = self._reloading, None
        if reloading is not None:
            reloading.cancel()
            await asyncio.wait([reloading])
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        await self.readers.close()

