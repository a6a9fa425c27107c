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

The TLS certificate is re-read when its files change (looked at every
``reload_interval`` seconds): new handshakes get the new one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from services.webhook.settings import WebhookSettings
from shared import lifecycle
from shared.core import admitting, families

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


@dataclasses.dataclass
class _Review:
    """One review decided in a thread: its request's uid as soon as it is known (for an answer
    past the deadline), then the HTTP status and the AdmissionReview to send."""

    hook: admitting.Hook
    raw: bytes
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
            answer = admitting.review(self.hook, body)
        except admitting.BadReview as exc:
            return 400, admitting.denied(self.uid, str(exc), 400, "BadRequest").review()
        except Exception as exc:  # a bug must cost one request, never the process
            log.exception("%s failed on a request", self.hook.name)
            answer = admitting.denied(self.uid, f"kto's webhook {self.hook.name} failed: {type(exc).__name__}: {exc}",
                                      500, "InternalError")
        if not answer.allowed:
            log.debug("%s denied %s: %s", self.hook.name, answer.uid, answer.message)
        return 200, answer.review()


def handler(hook: admitting.Hook, settings: WebhookSettings) -> Handler:
    """The request handler of one webhook."""
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
        review = _Review(hook, raw)
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
        self.app = web.Application(client_max_size=settings.max_request_bytes)
        for hook in families.REGISTRY.hooks:
            self.app.router.add_post(hook.path, handler(hook, settings))
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

