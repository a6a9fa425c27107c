"""The console's web application on aiohttp.

In: :class:`~kto.console.settings.ConsoleSettings`. Out: these routes —

* ``GET /`` — the jobs page; ``GET /jobs/{cluster}/{namespace}/{kind}/{name}`` —
  a job's page, or a 404 page saying what is missing (an unknown cluster, a
  kind kto does not serve, a job neither the cluster nor the audit log has);
* ``GET /api/jobs`` (filters ``cluster``, ``namespace``, ``kind``, ``state``,
  ``q``) and ``GET /api/jobs/{cluster}/{namespace}/{kind}/{name}`` — the JSON
  the pages show (:mod:`kto.console.summaries`); errors as ``{"error": …}``
  with 404, or 503 for a cluster that cannot answer about a job the audit
  log does not know either;
* the same two with ``/stream`` appended — server-sent events, one ``data:``
  line of that JSON each time it changes (a job's page is sent again at once
  when a record of it is written to the audit log, else after at most
  ``refresh`` seconds), so the pages update without a reload;
* ``GET /static/…`` — the pages' CSS and JavaScript (package data; the pages'
  HTML is ``pages/``, each filled into ``pages/layout.html``).

Every request is first checked (:mod:`kto.console.authenticating`): its
``Host`` (400 missing or malformed, 421 a name the console does not serve),
then who sends it (401 without a bearer token the clusters accept, unless the
console listens on loopback: then it is the kubeconfig's user). The jobs shown,
and the jobs and records a page may show (403 otherwise), are those of the kinds
and namespaces that user may ``list``. Every response carries
:data:`SECURITY_HEADERS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import http
import importlib.resources
import json
import logging
import pathlib
import string
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kto.console import authenticating, reading, summaries
from kto.console.settings import ConsoleSettings
from shared.bus import records
from shared.bus import reading as bus_reading
from shared.bus.errors import BusError

log = logging.getLogger("kto.console")

STATIC = pathlib.Path(str(importlib.resources.files("kto.console") / "static"))
"""The pages' CSS and JavaScript, served as they are."""

PAGES = pathlib.Path(str(importlib.resources.files("kto.console") / "pages"))
"""The pages' HTML: ``layout.html`` and the ``<main>`` of each page."""

KEEPALIVE = 10.0
"""Seconds of silence after which an event stream sends a comment (a closed page is noticed by then)."""

_JOB = "/{cluster}/{namespace}/{kind}/{name}"

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
"""Sent with every response: only the console's own scripts and styles run, no site may frame it, a
type is never guessed, and no page address (job names, namespaces) leaks to another site."""

_VIEWER = "kto.console.viewer"
"""The request's :class:`~kto.console.authenticating.Viewer`, set by :func:`_guard`."""


class ListenError(Exception):
    """The console cannot listen where it was asked to (port taken, address not local …)."""


class _Missing(Exception):
    """What a page or an endpoint cannot show, with the HTTP status that says so."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Console:
    """What the handlers share: the settings, the clusters' clients and the jobs list's answers."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.clusters = reading.Clusters(settings.kubeconfig, settings.contexts, settings.cluster_timeout)
        self.listing = reading.Listing(self.clusters, settings.refresh, settings.patience)
        self.gate = authenticating.Gate(self.clusters, local_user=authenticating.is_loopback(settings.host),
                                        access_ttl=settings.access_ttl)

    async def allowed_key(self, request: web.Request) -> records.JobKey:
        """:meth:`key`, and _Missing when the request's viewer may not list its kind in its namespace (403)
        or its cluster cannot say (503)."""
        key = self.key(request)
        try:
            allowed = await self.gate.may_list(_viewer(request), key.cluster, key.namespace, key.kind)
        except reading.Unanswered as exc:
            raise _Missing(503, f"cluster {key.cluster} cannot answer whether you may list {key.kind}s in "
                                f"namespace {key.namespace} ({exc})") from None
        if not allowed:
            raise _Missing(403, f"you may not list {key.kind}s in namespace {key.namespace} of cluster "
                                f"{key.cluster}")
        return key

    def key(self, request: web.Request) -> records.JobKey:
        """The job key a path names; _Missing (404) for a cluster or kind the console does not know."""
        info = request.match_info
        if info["cluster"] not in self.settings.contexts:
            raise _Missing(404, f"no cluster {info['cluster']!r} in {self.settings.kubeconfig} "
                                f"(its contexts: {', '.join(self.settings.contexts)})")
        kind = summaries.kind_named(info["kind"])
        if kind is None:
            raise _Missing(404, f"{info['kind']!r} is not a job kind kto serves ({', '.join(summaries.KINDS)})")
        try:
            return records.JobKey.parse(f"{info['cluster']}/{info['namespace']}/{kind}/{info['name']}")
        except (records.InvalidJobKey, ValueError) as exc:
            raise _Missing(404, str(exc)) from None

    async def entries(self, key: records.JobKey) -> tuple[list[bus_reading.Entry], str]:
        """The job's audit-log entries, and why they could not be read ("" when they could)."""
        topic = self.settings.kafka.jobs_topic
        try:
            async with asyncio.timeout(self.settings.audit_timeout):
                return await reading.joined_entries(self.settings.kafka, key, self.settings.contexts), ""
        except TimeoutError:
            return [], f"reading {topic} took more than {self.settings.audit_timeout:g}s"
        except BusError as exc:
            return [], str(exc)
        except Exception as exc:  # aiokafka's own errors while reading (kto code may not name them)
            log.warning("reading the records of %s failed", key, exc_info=True)
            return [], f"reading {topic} failed: {exc!r}"

    async def page(self, key: records.JobKey, found: list[bus_reading.Entry], audit_error: str) -> dict[str, Any]:
        """The job's page with the job as its cluster has it now."""
        job, cluster_error = None, ""
        try:
            job = await self.clusters.job(key)
        except reading.Unanswered as exc:
            cluster_error = str(exc)
        return summaries.page(key, job, found, trace_url=self.settings.trace_url, cluster_error=cluster_error,
                              audit_error=audit_error)

    async def document(self, key: records.JobKey) -> dict[str, Any]:
        """The job's page; _Missing when neither its cluster nor the audit log has it."""
        found, audit_error = await self.entries(key)
        page = await self.page(key, found, audit_error)
        if page["onCluster"] or found:
            return page
        what = f"{key.kind} {key.namespace}/{key.name}"
        if page["clusterError"]:
            raise _Missing(503, f"cluster {key.cluster} cannot answer ({page['clusterError']}) "
                                f"and the audit log has no record of {what}")
        log_said = (f"and no record of it in {self.settings.kafka.jobs_topic}" if not audit_error else
                    f"and the audit log cannot be read ({audit_error})")
        raise _Missing(404, f"no {what} in cluster {key.cluster}, {log_said}")

    async def close(self) -> None:
        await self.listing.close()
        await self.clusters.close()


_CONSOLE = web.AppKey("console", _Console)


def _render(page: str, title: str, code: int = 200, **fields: str) -> web.Response:
    """``pages/<page>.html`` (its ``$fields`` filled in, escaped) in the layout."""
    main = string.Template((PAGES / f"{page}.html").read_text(encoding="utf-8"))
    layout = string.Template((PAGES / "layout.html").read_text(encoding="utf-8"))
    body = layout.substitute(title=html.escape(title), page=page, live="" if page == "error" else "connecting…",
                             main=main.substitute({name: html.escape(value) for name, value in fields.items()}))
    return web.Response(text=body, status=code, content_type="text/html", headers={"Cache-Control": "no-cache"})


def _error_page(status: int, message: str) -> web.Response:
    phrase = http.HTTPStatus(status).phrase
    return _render("error", phrase, status, status=str(status), phrase=phrase, message=message)


@web.middleware
async def _errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                  ) -> web.StreamResponse:
    """What is missing as a page saying so (JSON under /api/), never a traceback."""
    api = request.path.startswith("/api/")
    try:
        return await handler(request)
    except _Missing as exc:
        status, message = exc.status, exc.message
    except web.HTTPNotFound:
        status, message = 404, f"no page at {request.path}"
    if api:
        return web.json_response({"error": message}, status=status)
    return _error_page(status, message)


def _refusal(request: web.Request, status: int, message: str) -> web.Response:
    if request.path.startswith("/api/"):
        return web.json_response({"error": message}, status=status)
    return _error_page(status, message)


@web.middleware
async def _guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    """The Host header checked, then who asks (:mod:`kto.console.authenticating`), before any handler."""
    console = _console(request)
    refused = authenticating.host_refusal(request.headers.get("Host"), console.settings.host,
                                          console.settings.allowed_hosts)
    if refused is not None:
        return _refusal(request, *refused)
    try:
        request[_VIEWER] = await console.gate.viewer(request.headers.get("Authorization"))
    except authenticating.Refused as exc:
        response = _refusal(request, 401, str(exc))
        response.headers["WWW-Authenticate"] = 'Bearer realm="kto console"'
        return response
    except authenticating.Unreviewed as exc:
        return _refusal(request, 503, str(exc))
    return await handler(request)


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


def _console(request: web.Request) -> _Console:
    return request.app[_CONSOLE]


def _viewer(request: web.Request) -> authenticating.Viewer:
    viewer: authenticating.Viewer = request[_VIEWER]
    return viewer


async def _jobs_page(request: web.Request) -> web.StreamResponse:
    return _render("jobs", "Jobs")


async def _job_page(request: web.Request) -> web.StreamResponse:
    console = _console(request)
    key = await console.allowed_key(request)
    await console.document(key)  # a missing job is a 404 page, not an empty one
    return _render("job", f"{key.kind} {key.namespace}/{key.name}")


async def _listing(request: web.Request) -> dict[str, Any]:
    console = _console(request)
    viewer = _viewer(request)
    jobs, errors = await console.listing.snapshot()
    for cluster in console.settings.contexts:
        if not viewer.accepted_by(cluster) and not errors.get(cluster):  # one that cannot answer says so
            errors = {**errors, cluster: "this cluster does not accept your token"}
    shown = await console.gate.visible(viewer, jobs)
    return summaries.listing(console.settings.contexts, shown, errors, summaries.Filters.from_query(request.query))


async def _jobs_api(request: web.Request) -> web.StreamResponse:
    return web.json_response(await _listing(request))


async def _job_api(request: web.Request) -> web.StreamResponse:
    console = _console(request)
    return web.json_response(await console.document(await console.allowed_key(request)))


async def _events(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    return response


async def _send(response: web.StreamResponse, document: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(document, separators=(",", ":")).encode() + b"\n\n")


async def _pace(response: web.StreamResponse, quiet: float, changed: asyncio.Event | None, wait: float) -> float:
    """Wait ``wait`` seconds (or until ``changed``); a keep-alive comment after ``KEEPALIVE`` quiet
    seconds. The quiet seconds after."""
    if quiet >= KEEPALIVE:
        await response.write(b": keepalive\n\n")
        quiet = 0.0
    if changed is None:
        await asyncio.sleep(wait)
    else:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), wait)
        changed.clear()
    return quiet + wait


async def _jobs_stream(request: web.Request) -> web.StreamResponse:
    response = await _events(request)
    last: dict[str, Any] | None = None
    quiet = 0.0
    with contextlib.suppress(ConnectionResetError):  # the page was closed
        while True:
            document = await _listing(request)
            if document != last:
                await _send(response, document)
                last, quiet = document, 0.0
            quiet = await _pace(response, quiet, None, _console(request).settings.refresh)
    return response


async def _job_stream(request: web.Request) -> web.StreamResponse:
    console = _console(request)
    key = await console.allowed_key(request)
    found, audit_error = await console.entries(key)
    response = await _events(request)
    changed = asyncio.Event()

    async def follow(followed: records.JobKey) -> None:
        nonlocal audit_error
        last = next((e for e in reversed(found) if e.key == str(followed)), None)
        try:
            async for entry in reading.follow(console.settings.kafka, followed, last):
                found.append(entry)
                changed.set()
        except Exception as exc:  # BusError, or aiokafka's own errors while reading
            log.warning("following the records of %s stopped", followed, exc_info=not isinstance(exc, BusError))
            audit_error = f"following the audit log stopped: {exc}"
            changed.set()

    async def follow_all() -> None:
        """The job's key, and the keys of its MultiKueue copies found in the first read."""
        async with asyncio.TaskGroup() as group:
            for followed in sorted({key} | {records.JobKey.parse(e.key) for e in found}, key=str):
                group.create_task(follow(followed), name=f"console-follow-{followed}")

    follower = asyncio.create_task(follow_all(), name=f"console-follow-{key}") if not audit_error else None
    last: dict[str, Any] | None = None
    quiet = 0.0
    try:
        with contextlib.suppress(ConnectionResetError):
            while True:
                document = await console.page(key, found, audit_error)
                if document != last:
                    await _send(response, document)
                    last, quiet = document, 0.0
                quiet = await _pace(response, quiet, changed, console.settings.refresh)
    finally:
        if follower is not None:
            follower.cancel()
            await asyncio.wait({follower})
    return response


async def _close(app: web.Application) -> None:
    await app[_CONSOLE].close()


def application(settings: ConsoleSettings) -> web.Application:
    app = web.Application(middlewares=[_guard, _errors])
    app[_CONSOLE] = _Console(settings)
    app.on_response_prepare.append(_secure)
    app.router.add_get("/", _jobs_page)
    app.router.add_get("/jobs" + _JOB, _job_page)
    app.router.add_get("/api/jobs", _jobs_api)
    app.router.add_get("/api/jobs/stream", _jobs_stream)
    app.router.add_get("/api/jobs" + _JOB, _job_api)
    app.router.add_get("/api/jobs" + _JOB + "/stream", _job_stream)
    app.router.add_static("/static", STATIC)
    app.on_cleanup.append(_close)
    return app


async def serve(settings: ConsoleSettings, ready: Callable[[str], None]) -> None:
    """Serve until cancelled; ``ready(url)`` once listening. ListenError when it cannot listen."""
    # Open event streams are cut after 2 s at shutdown rather than waited for.
    runner = web.AppRunner(application(settings), shutdown_timeout=2.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        try:
            await site.start()
        except OSError as exc:
            raise ListenError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None
        host, port = runner.addresses[0][:2]
        ready(f"http://{f'[{host}]' if ':' in host else host}:{port}/")
        await asyncio.Event().wait()
    finally:
        await asyncio.shield(runner.cleanup())
