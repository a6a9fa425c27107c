"""Whether one cluster's API server answers, as one worker sees it.

In: every request a worker makes to the cluster, each run inside
:meth:`Reachability.attempt` (the KubeClient's guard), and
:class:`ReachSettings`. Out: requests that fail fast instead of waiting for
an answer that does not come:

* a request that gets no answer within ``request_timeout`` (or whose
  connection is refused or reset) marks the cluster **unreachable**; the
  requests to it still waiting are cut at once (they fail as unanswered, as
  a refused connection does);
* while it is unreachable, a request is not sent: it fails at once with
  :class:`~shared.kube.clients.ClusterUnreachable`, whose ``retry_after`` says
  when to come back; the KubeClient does not retry it in place;
* after a backoff (``initial_backoff``, doubling to ``max_backoff``) one
  request goes out as the probe; any answer to it (an HTTP status of any
  kind) marks the cluster reachable again, no answer doubles the backoff.

A worker turns ClusterUnreachable into a wait of the job key's own (its
records held, no handler slot taken, nothing dead-lettered: see
:mod:`shared.workers`), so the keys of a cluster that stopped answering wait
and catch up when it is back, and the keys of the other clusters flow.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import AsyncIterator

from shared.kube import clients

log = logging.getLogger("kto.kube.reaching")


@dataclasses.dataclass(frozen=True)
class ReachSettings:
    """How soon a cluster counts as unreachable, and how often it is tried again."""

    request_timeout: float = 10.0
    """Seconds one API request (connection, answer and body) may take before it counts as
    unanswered. A worker's requests read or write one job's objects and take milliseconds."""

    initial_backoff: float = 0.5
    """Seconds from the first unanswered request to the first probe."""

    max_backoff: float = 5.0
    """Cap of the backoff between probes (doubled after each unanswered probe): the longest a
    returning cluster waits to be noticed."""

    jitter: float = 0.2
    """Up to this many seconds added at random to each ``retry_after``, so the waiting keys
    of a cluster do not come back all at once."""

    def __post_init__(self) -> None:
        if self.request_timeout <= 0 or not 0 < self.initial_backoff <= self.max_backoff or self.jitter < 0:
            raise ValueError("need request_timeout > 0, 0 < initial_backoff <= max_backoff and jitter >= 0")


class Reachability:
    """One cluster's answers as one worker sees them; ``attempt()`` wraps every request."""

    def __init__(self, cluster: str, settings: ReachSettings = ReachSettings()) -> None:
        self.cluster = cluster
        self._settings = settings
        self._down_since: float | None = None
        """Loop time the cluster stopped answering; None while it answers."""
        self._backoff = settings.initial_backoff
        self._probe_at = 0.0
        """Loop time from which the next request may go out as the probe."""
        self._probing = False
        self._waiting: set[asyncio.Timeout] = set()
        """Deadlines of the requests in flight (rescheduled to now to cut them)."""

    @property
    def reachable(self) -> bool:
        return self._down_since is None

    @contextlib.asynccontextmanager
    async def attempt(self, what: str) -> AsyncIterator[None]:
        """Run one request (``what``: method and path, for messages): at once
        :class:`~shared.kube.clients.ClusterUnreachable` while the cluster is unreachable
        and no probe is due; otherwise the request, cut after ``request_timeout``."""
        loop = asyncio.get_running_loop()
        probe = False
        if self._down_since is not None:
            now = loop.time()
            if self._probing or now < self._probe_at:
                wait = self._backoff if self._probing else self._probe_at - now
                raise clients.ClusterUnreachable(
                    f"{what}: cluster {self.cluster} has not answered for {now - self._down_since:.1f}s",
                    wait + random.uniform(0, self._settings.jitter),
                )
            probe = self._probing = True
        try:
            async with asyncio.timeout(self._settings.request_timeout) as deadline:
                self._waiting.add(deadline)
                try:
                    yield
                finally:
                    self._waiting.discard(deadline)
        except TimeoutError as exc:
            self._unanswered(loop, probe, f"{what}: no answer")
            raise clients.ApiError(0, "Timeout", f"{what}: no answer from cluster {self.cluster}") from exc
        except clients.ApiError as exc:
            if exc.code == 0:
                self._unanswered(loop, probe, exc.message)
            else:
                self._answered(loop)
            raise
        else:
            self._answered(loop)
        finally:
            if probe:
                self._probing = False

    def _unanswered(self, loop: asyncio.AbstractEventLoop, probe: bool, why: str) -> None:
        now = loop.time()
        if self._down_since is None:
            self._down_since = now
            self._backoff = self._settings.initial_backoff
            log.warning("cluster %s is not answering (%s); its job keys wait, probing it every %.1f-%.1fs",
                        self.cluster, why[:300], self._settings.initial_backoff, self._settings.max_backoff)
            for deadline in list(self._waiting):
                if not deadline.expired():
                    deadline.reschedule(now)  # no answer is coming to them either
        elif probe:
            self._backoff = min(self._backoff * 2, self._settings.max_backoff)
        else:
            return  # a request cut, or sent before the cluster went away: not a new failure
        self._probe_at = now + self._backoff

    def _answered(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._down_since is not None:
            log.warning("cluster %s answers again after %.1fs", self.cluster, loop.time() - self._down_since)
            self._down_since = None
            self._backoff = self._settings.initial_backoff
