"""Liveness and readiness of one service process: what ``/healthz`` and ``/readyz`` answer.

In: the readiness checks a service registers as it starts (a name and a coroutine
function that returns None when all is well, else the reason), and probes asking.
Out: :class:`Health`, whose aiohttp handlers answer as kube-apiserver answers its own
probes: ``200`` and ``ok``, or ``503`` with one line per check, ``[+]name ok`` or
``[-]name failed: reason withheld`` (``?verbose`` lists the checks on success too).
The reason itself (which may name brokers, clusters, namespaces) goes to the log,
once each time a check's answer changes: a probe's body is for whoever can reach
the port, the log for the operator.

* **Liveness** (``/healthz``) is the event loop answering: the handler runs on the
  loop the service runs on, so a loop that is blocked or gone fails the probe by its
  timeout. Nothing else is checked, so an outage of the broker or a cluster never
  gets a process restarted (a restart would not bring them back).
* **Readiness** (``/readyz``) is every required check passing. A check runs at most
  once per :attr:`Health.cache` seconds (probes asking meanwhile get its last
  answer) and at most :attr:`Health.timeout` seconds (past that it failed). A check
  registered with ``required=False`` is shown but does not fail readiness.

The checks kto's services register (see :mod:`services.watcher.running` and
:mod:`shared.workers`): ``broker`` (one metadata request to the brokers answered),
``cluster`` / ``clusters`` (``GET /version`` answered by the API server(s)),
``consumer`` (the worker's consumer has started) and ``lease`` / ``watch`` (the
watcher has read its Lease; as leader, it has listed every type it watches).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web
from opentelemetry import trace

log = logging.getLogger("kto.health")

Check = Callable[[], Awaitable[str | None]]
"""A readiness check: None when it passes, else why not (one line)."""

LIVE_PATH = "/healthz"
READY_PATH = "/readyz"


@dataclasses.dataclass
class _Entry:
    name: str
    check: Check
    required: bool
    timeout: float
    outcome: str | None = "not checked yet"
    checked_at: float | None = None
    running: asyncio.Task[str | None] | None = None
    logged: str | None = None
    """The last answer logged (None: passing), so a failure is logged when it starts or changes."""


@contextlib.contextmanager
def unsampled() -> Iterator[None]:
    """Spans started inside are not recorded (under a parent-based sampler, kto's
    default): a probe every few seconds would otherwise be a trace of its own each time."""
    context = trace.SpanContext(
        trace_id=random.getrandbits(128) or 1, span_id=random.getrandbits(64) or 1, is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT),
    )
    with trace.use_span(trace.NonRecordingSpan(context)):
        yield


class Health:
    """The probes' answers for one process; checks are added as the service starts."""

    def __init__(self, *, timeout: float = 3.0, cache: float = 2.0) -> None:
        self.timeout = timeout
        """Seconds one check may take before it counts as failed."""
        self.cache = cache
        """Seconds a check's answer is kept for the probes that follow."""
        self._entries: dict[str, _Entry] = {}

    def add(self, name: str, check: Check, *, required: bool = True, timeout: float | None = None) -> None:
        """Register (or replace) the check ``name``; ``timeout`` overrides :attr:`timeout` for it
        (a check that waits on others needs longer than they may take)."""
        self._entries[name] = _Entry(name, check, required, self.timeout if timeout is None else timeout)

    def gate(self, name: str, waiting: str) -> Callable[[], None]:
        """A required check that fails with ``waiting`` until the returned function is called."""
        opened = False

        async def check() -> str | None:
            return None if opened else waiting

        def open_gate() -> None:
            nonlocal opened
            opened = True
            entry = self._entries.get(name)
            if entry is not None and entry.check is check:
                entry.checked_at = None  # the next probe sees it at once

        self.add(name, check)
        return open_gate

    async def _run(self, entry: _Entry) -> str | None:
        try:
            with unsampled():
                async with asyncio.timeout(entry.timeout):
                    return await entry.check()
        except TimeoutError:
            return f"no answer within {entry.timeout:g}s"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a check that raises has failed, and says why
            return (str(exc) or type(exc).__name__)[:500]

    async def _outcome(self, entry: _Entry) -> str | None:
        now = asyncio.get_running_loop().time()
        if entry.checked_at is not None and now - entry.checked_at < self.cache:
            return entry.outcome
        if entry.running is None:
            entry.running = asyncio.create_task(self._run(entry), name=f"readiness check {entry.name}")
        running = entry.running
        try:
            outcome = await asyncio.shield(running)
        finally:
            if entry.running is running and running.done():
                entry.running = None
        entry.outcome, entry.checked_at = outcome, asyncio.get_running_loop().time()
        if outcome != entry.logged:
            if outcome is None:
                log.info("readiness check %s passes again", entry.name)
            else:
                log.warning("readiness check %s failed%s: %s", entry.name,
                            "" if entry.required else " (not required)", outcome)
            entry.logged = outcome
        return outcome

    async def outcome(self, name: str) -> str | None:
        """The check ``name``'s answer (from the last :attr:`cache` seconds, or run now)."""
        entry = self._entries.get(name)
        return "no such check" if entry is None else await self._outcome(entry)

    async def ready(self) -> tuple[bool, list[str]]:
        """Whether every required check passes, and one line per check (a failed one's reason
        withheld, as kube-apiserver's probes withhold it: it is in the log)."""
        entries = list(self._entries.values())
        outcomes = await asyncio.gather(*(self._outcome(e) for e in entries))
        lines = []
        ready = True
        for entry, outcome in zip(entries, outcomes):
            if outcome is None:
                lines.append(f"[+]{entry.name} ok")
                continue
            ready = ready and not entry.required
            note = "" if entry.required else " (not required)"
            lines.append(f"[-]{entry.name} failed: reason withheld{note}")
        return ready, lines

    # -- HTTP ----------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        """``GET /healthz``: the event loop answers."""
        text = "[+]ping ok\nhealthz check passed\n" if "verbose" in request.query else "ok"
        return web.Response(text=text)

    async def readyz(self, request: web.Request) -> web.Response:
        """``GET /readyz``: 200 when every required check passes, else 503 saying which failed."""
        ready, lines = await self.ready()
        if ready and "verbose" not in request.query:
            return web.Response(text="ok")
        verdict = "readyz check passed" if ready else "readyz check failed"
        return web.Response(text="\n".join([*lines, verdict]) + "\n", status=200 if ready else 503)

    def routes(self) -> list[web.RouteDef]:
        return [web.get(LIVE_PATH, self.healthz), web.get(READY_PATH, self.readyz)]
