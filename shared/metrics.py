"""Prometheus metrics of one kto service process, and the ``/metrics`` endpoint serving them.

In: what a service and its client layers report: bus events (records consumed,
published and dead-lettered, by their ``kto-type`` header; the reconciler's
``replica_restarted`` decisions), API requests (method, host, status code,
seconds), settle passes (job key, outcome, seconds), status writes (the status
before and after) and job deletions seen by the watcher; and, read when scraped,
each consumer's lag per partition.
Out: one :class:`ServiceMetrics` per service, with a ``CollectorRegistry`` of
its own (tests run several services in one process, so nothing is registered
globally), served by :func:`serving` as ``GET /metrics`` on the event loop, beside
the probes of :mod:`shared.health` (``/healthz``, ``/readyz``), on the address
:func:`bind_address` reads from the environment: ``$KTO_METRICS_ADDRESS``, else
every address inside a pod (``$KUBERNETES_SERVICE_HOST`` set: the kubelet and
Prometheus come from outside) and loopback elsewhere.

Names are those operators already chart: training-operator's job counters
(labels ``job_namespace``, ``framework``, and kto's ``queue`` and ``cluster``: :data:`JOB_LABELS`), controller-runtime's reconcile
metrics, client-go's REST client metrics; kto's own start with ``kto_``.
What each counts, and where it differs from upstream, is in
docs/observability.md ("Metrics").
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import prometheus_client
from aiohttp import web
from prometheus_client import exposition, metrics_core, registry

from shared import health
from shared.api import common, jobs
from shared.core import families
from shared.bus import events

log = logging.getLogger("kto.metrics")

JOBS_CREATED = "training_operator_jobs_created_total"
JOBS_DELETED = "training_operator_jobs_deleted_total"
JOBS_SUCCESSFUL = "training_operator_jobs_successful_total"
JOBS_FAILED = "training_operator_jobs_failed_total"
JOBS_RESTARTED = "training_operator_jobs_restarted_total"
RECONCILE_TOTAL = "controller_runtime_reconcile_total"
RECONCILE_ERRORS = "controller_runtime_reconcile_errors_total"
RECONCILE_TIME = "controller_runtime_reconcile_time_seconds"
REST_REQUESTS = "rest_client_requests_total"
REST_DURATION = "rest_client_request_duration_seconds"
CONSUMER_LAG = "kto_consumer_lag"
RECORDS_CONSUMED = "kto_records_consumed_total"
RECORDS_PUBLISHED = "kto_records_published_total"
RECORDS_DEAD_LETTERED = "kto_records_dead_lettered_total"
RECORDS_REJECTED = "kto_records_rejected_total"
CONFIRMATIONS = "kto_confirmations_total"
STATUS_WRITES = "kto_status_writes_total"
STATUS_WRITES_SKIPPED = "kto_status_writes_skipped_total"

RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0,
    40.0, 50.0, 60.0,
)
"""controller-runtime's buckets of ``controller_runtime_reconcile_time_seconds``."""

REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
"""client-go's buckets of ``rest_client_request_duration_seconds``."""

RESTART_TYPE = "decision:replica_restarted"
"""The ``kto-type`` of the reconciler's decision to delete a failed pod for restart."""

MAX_RECORD_TYPES = 64
"""Distinct ``type`` label values kept per metric family; later ones count as ``other``."""

_RECORD_TYPE = re.compile(r"(observation|decision):[A-Za-z][A-Za-z0-9_.]{0,62}")
"""A ``kto-type`` value kept as a label: anything else (another producer's header) is ``other``."""

_CONTROLLERS = families.REGISTRY.controllers
"""The ``controller`` label of a reconciler's settle passes, by job kind (upstream's controller names)."""

Settle = Callable[[str, Any, bool], Awaitable[float | None]]
"""A KeyedConsumer settle: ``(job key, trace context, flush)`` → seconds until it wants to run again, or None."""


class MetricsPortError(Exception):
    """The metrics port cannot be listened on (in use, or not allowed), or the address asked for is
    not one. Not retriable."""


ADDRESS_ENV = "KTO_METRICS_ADDRESS"
"""The address ``/metrics`` and the probes are served on; ``*`` (or ``0.0.0.0``, ``::``) for every address."""

def bind_address(environ: Mapping[str, str]) -> str | None:
    """Where ``/metrics`` and the probes listen (None: every address, IPv4 and IPv6):
    ``$KTO_METRICS_ADDRESS`` when set; else every address inside a pod (``$KUBERNETES_SERVICE_HOST`` is set there, and the
    kubelet's probes and Prometheus come from outside it) and ``127.0.0.1`` elsewhere, so a service
    started on a laptop does not show its metrics to the network. :class:`MetricsPortError` for a
    value that is not an IP address."""
    given = environ.get(ADDRESS_ENV, "").strip()
    if not given:
        return None if environ.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"
    if given == "*":
        return None
    try:
        ipaddress.ip_address(given)
    except ValueError:
        raise MetricsPortError(f"{ADDRESS_ENV} {given!r}: not an IP address (or * for every address)") from None
    return given


class LagSource(Protocol):
    """A consumer that knows how far behind it is (:class:`~shared.bus.consuming.KeyedConsumer`)."""

    def lags(self) -> Mapping[tuple[str, int], int]: ...


JOB_LABELS = ("job_namespace", "framework", "queue", "cluster")
"""The labels of the job counters: upstream's two, then the job's Kueue LocalQueue (its
``kueue.x-k8s.io/queue-name`` label, "" when none) and its cluster (the kubeconfig context of its key).
A LocalQueue is a namespace's, so the series are bounded by the LocalQueues times the frameworks
times the clusters, never by the jobs; and a process keeps at most :data:`MAX_QUEUES` queue values."""

MAX_QUEUES = 256
"""Distinct ``queue`` label values a process keeps; later ones count as ``other``. A queue label is the
user's to write (Kueue does not refuse one naming no LocalQueue: the job waits), so without a bound a
user could grow the series with jobs of made-up queues."""

_QUEUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
"""A label value (what Kubernetes lets a ``kueue.x-k8s.io/queue-name`` label hold)."""

MAX_QUEUES_REMEMBERED = 65536
"""Jobs whose queue a service keeps for the counters it bumps with a key only (the reconciler's
restarts); the oldest is forgotten first (its restarts then count under queue "")."""


def _job_labels(job_key: str, queue: str) -> tuple[str, str, str, str] | None:
    """The :data:`JOB_LABELS` of a key of one of the six training-operator kinds, else None."""
    parts = job_key.split("/")
    if len(parts) != 4 or parts[2] not in jobs.KINDS:
        return None
    return parts[1], jobs.KINDS[parts[2]].FRAMEWORK, queue, parts[0]


def _true_conditions(status: common.JobStatus | None) -> set[str]:
    return {c.type for c in (status.conditions if status is not None else None) or () if c.status == "True"}


class _LagCollector(registry.Collector):
    """``kto_consumer_lag``, read from the attached consumers at each scrape, so a
    partition this member no longer holds leaves no stale series behind."""

    def __init__(self) -> None:
        self._sources: list[tuple[LagSource, str]] = []

    def attach(self, source: LagSource, group: str) -> None:
        self._sources.append((source, group))

    def collect(self) -> Iterable[metrics_core.Metric]:
        family = metrics_core.GaugeMetricFamily(
            CONSUMER_LAG,
            "Records on each partition this member holds that it has not finished yet: the log end of "
            "its last fetch minus its first offset not done.",
            labels=["topic", "partition", "group"],
        )
        for source, group in self._sources:
            for (topic, partition), lag in sorted(source.lags().items()):
                family.add_metric([topic, str(partition), group], lag)
        yield family


class ServiceMetrics:
    """Every metric of one service, in a registry of its own.

    The hooks (:meth:`on_bus_event`, :meth:`on_request`, :meth:`timed_settle`…) are
    handed to the bus clients, the Kubernetes clients and the consumer by the
    service's wiring; the services call :meth:`status_written`,
    :meth:`status_write_skipped` and :meth:`job_observed` themselves.
    """

    def __init__(self, dead_letter_topic: str = "") -> None:
        """``dead_letter_topic``: sends to it are counted as dead-lettered (by the
        consumer's event), not as published."""
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # no ``*_created`` series
        self.registry = registry.CollectorRegistry(auto_describe=True)
        self._dead_letter_topic = dead_letter_topic
        self._types: set[str] = set()
        job_labels = list(JOB_LABELS)
        self._queue_values: set[str] = set()
        self._queues: dict[str, str] = {}
        """Job key → its queue, for :meth:`_count_job` without the job at hand (:meth:`job_queue`)."""

        def counter(name: str, doc: str, labels: list[str]) -> prometheus_client.Counter:
            return prometheus_client.Counter(name, doc, labels, registry=self.registry)

        self.jobs_created = counter(JOBS_CREATED, "Jobs kto took in: the status service wrote their "
                                    "Created condition.", job_labels)
        self.jobs_deleted = counter(JOBS_DELETED, "Jobs deleted (any cause), as the watcher saw them go.",
                                    job_labels)
        self.jobs_successful = counter(JOBS_SUCCESSFUL, "Jobs whose Succeeded condition the status service "
                                       "wrote.", job_labels)
        self.jobs_failed = counter(JOBS_FAILED, "Jobs whose Failed condition the status service wrote "
                                   "(every cause).", job_labels)
        self.jobs_restarted = counter(JOBS_RESTARTED, "Failed pods the reconciler deleted for restart.",
                                      job_labels)
        self.reconcile_total = counter(RECONCILE_TOTAL, "Settle passes per controller, by result "
                                       "(success, requeue_after, error).", ["controller", "result"])
        self.reconcile_errors = counter(RECONCILE_ERRORS, "Settle passes that raised.", ["controller"])
        self.reconcile_time = prometheus_client.Histogram(
            RECONCILE_TIME, "Seconds per settle pass.", ["controller"], buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.rest_requests = counter(REST_REQUESTS, "HTTP requests to the API server, by status code "
                                     "(<error> when no answer came), method and host.", ["code", "method", "host"])
        self.rest_duration = prometheus_client.Histogram(
            REST_DURATION, "Seconds until the API server's answer (its headers), by verb and host.",
            ["verb", "host"], buckets=REST_BUCKETS, registry=self.registry,
        )
        self.records_consumed = counter(RECORDS_CONSUMED, "Records taken in from the jobs topic, by "
                                        "kto-type header.", ["type"])
        self.records_published = counter(RECORDS_PUBLISHED, "Records the broker acknowledged, by kto-type "
                                         "header (dead-letter copies excluded).", ["type"])
        self.records_dead_lettered = counter(RECORDS_DEAD_LETTERED, "Records written to the dead-letter topic, "
                                             "by kto-type header.", ["type"])
        self.records_rejected = counter(RECORDS_REJECTED, "Records refused as not authentic (never acted on, "
                                        "dead-lettered), by reason: unsigned, unknown_key, retired_key, "
                                        "bad_signature, role.", ["reason"])
        self.status_writes = counter(STATUS_WRITES, "Job status writes, by job kind.", ["kind"])
        self.status_writes_skipped = counter(STATUS_WRITES_SKIPPED, "Status passes that wrote nothing: the "
                                             "stored status was already the computed one.", ["kind"])
        self.confirmations = counter(CONFIRMATIONS, "Acts a record's word called for, read again from the API "
                                     "server before being carried out, by what the answer called for: 'same' "
                                     "(an act still), 'overruled' (no act: the record was stale or forged).",
                                     ["service", "outcome"])
        self._lag = _LagCollector()
        self.registry.register(self._lag)
        prometheus_client.ProcessCollector(registry=self.registry)
        prometheus_client.PlatformCollector(registry=self.registry)
        prometheus_client.GCCollector(registry=self.registry)

    def names(self) -> set[str]:
        """Every sample name this registry can expose (``…_total``, ``…_bucket``, ``…_count``…)."""
        found: set[str] = set()
        for family in self.registry.collect():
            found.add(family.name)
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ())
            found.update(family.name + s for s in suffixes)
        return found

    # -- bus -------------------------------------------------------------------

    def _type(self, tag: object) -> str:
        """The ``type`` label of a ``kto-type`` header value, bounded in number."""
        if not isinstance(tag, str) or not _RECORD_TYPE.fullmatch(tag):
            return "other" if tag else "none"
        if tag not in self._types:
            if len(self._types) >= MAX_RECORD_TYPES:
                return "other"
            self._types.add(tag)
        return tag

    def on_bus_event(self, event: events.BusEvent) -> None:
        """The bus hook (:data:`shared.bus.events.Hook`) of this service's publishers and consumers."""
        attributes = event.attributes
        if event.name == events.MESSAGE_IN:
            self.records_consumed.labels(self._type(attributes.get("type"))).inc()
        elif event.name == events.DEAD_LETTERED:
            self.records_dead_lettered.labels(self._type(attributes.get("type"))).inc()
        elif event.name == events.REJECTED:
            self.records_rejected.labels(str(attributes.get("reason") or "unknown")).inc()
        elif event.name == events.SEND_DONE and attributes.get("topic") != self._dead_letter_topic:
            tag = self._type(attributes.get("type"))
            self.records_published.labels(tag).inc()
            if tag == RESTART_TYPE:
                self._count_job(self.jobs_restarted, str(attributes.get("key") or ""))

    def watch_lag(self, consumer: LagSource, group: str) -> None:
        """Expose ``consumer``'s lag per partition as ``kto_consumer_lag{topic,partition,group}``."""
        self._lag.attach(consumer, group)

    # -- Kubernetes client -------------------------------------------------------

    def on_request(self, method: str, host: str, code: int | None, seconds: float) -> None:
        """The Kubernetes client hook: one HTTP request answered (``code``) or not (None)."""
        self.rest_requests.labels("<error>" if code is None else str(code), method, host).inc()
        self.rest_duration.labels(method, host).observe(seconds)

    # -- settle passes -------------------------------------------------------------

    def timed_settle(self, service: str, settle: Settle) -> Settle:
        """``settle`` counted and timed per pass, with controller-runtime's reconcile metrics.
        ``controller``: upstream's controller name of the job's kind in the reconciler,
        ``<kind>-status`` in the status service."""

        async def timed(job_key: str, parent: Any, flush: bool) -> float | None:
            kind = job_key.split("/")[2] if job_key.count("/") == 3 else ""
            if service == "reconciler":
                controller = _CONTROLLERS.get(kind, "other")
            else:
                controller = f"{kind.lower()}-{service}" if kind in _CONTROLLERS else f"other-{service}"
            started = time.perf_counter()
            try:
                delay = await settle(job_key, parent, flush)
            except Exception:
                self.reconcile_time.labels(controller).observe(time.perf_counter() - started)
                self.reconcile_errors.labels(controller).inc()
                self.reconcile_total.labels(controller, "error").inc()
                raise
            self.reconcile_time.labels(controller).observe(time.perf_counter() - started)
            self.reconcile_total.labels(controller, "success" if delay is None else "requeue_after").inc()
            return delay

        return timed

    # -- jobs and their statuses ---------------------------------------------------

    def _queue(self, queue: str) -> str:
        """The ``queue`` label of a queue name, bounded in number (:data:`MAX_QUEUES`)."""
        if not queue:
            return ""
        if not _QUEUE.fullmatch(queue):
            return "other"
        if queue not in self._queue_values:
            if len(self._queue_values) >= MAX_QUEUES:
                return "other"
            self._queue_values.add(queue)
        return queue

    def _count_job(self, counter: prometheus_client.Counter, job_key: str, queue: str | None = None) -> None:
        """Count one for the job of ``job_key``, in ``queue`` (None: the one :meth:`job_queue` said)."""
        labels = _job_labels(job_key, self._queue(self._queues.get(job_key, "") if queue is None else queue))
        if labels is not None:
            counter.labels(*labels).inc()

    def job_queue(self, job_key: str, queue: str, gone: bool = False) -> None:
        """The job of ``job_key`` is in Kueue's LocalQueue ``queue`` ("" for none); ``gone``: it was
        deleted (forget it)."""
        self._queues.pop(job_key, None)
        if gone or not queue:
            return
        if len(self._queues) >= MAX_QUEUES_REMEMBERED:
            self._queues.pop(next(iter(self._queues)))
        self._queues[job_key] = queue

    def job_observed(self, event: str, kind: str, job_key: str, queue: str) -> None:
        """The watcher published an observation: a job's own deletion counts (``queue``: the job's)."""
        if event == "DELETED" and job_key.count("/") == 3 and job_key.split("/")[2] == kind:
            self._count_job(self.jobs_deleted, job_key, queue)

    def status_written(self, job_key: str, old: common.JobStatus | None, new: common.JobStatus,
                       queue: str) -> None:
        """The status service wrote ``new`` over ``old`` of a job in ``queue``: a write, and the conditions
        it made True."""
        self.status_writes.labels(job_key.split("/")[2] if job_key.count("/") == 3 else "other").inc()
        made_true = _true_conditions(new) - _true_conditions(old)
        for condition, counter in (("Created", self.jobs_created), ("Succeeded", self.jobs_successful),
                                   ("Failed", self.jobs_failed)):
            if condition in made_true:
                self._count_job(counter, job_key, queue)

    def confirmed(self, service: str, overruled: bool) -> None:
        """A worker read the API server before acting on a record's word; ``overruled``: its answer called
        for no act."""
        self.confirmations.labels(service, "overruled" if overruled else "same").inc()

    def status_write_skipped(self, kind: str) -> None:
        """A status pass found the stored status up to date and wrote nothing."""
        self.status_writes_skipped.labels(kind).inc()

    # -- exposition ----------------------------------------------------------------

    async def scrape(self, request: web.Request) -> web.Response:
        """``GET /metrics``: the Prometheus text format, or OpenMetrics when asked for."""
        encoder, content_type = exposition.choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self.registry), headers={"Content-Type": content_type})


@contextlib.asynccontextmanager
async def serving(
    service_metrics: ServiceMetrics, port: int, checks: health.Health | None = None, health_port: int = 0,
) -> AsyncIterator[None]:
    """Serve ``GET /metrics`` at ``port`` while inside, on :func:`bind_address`; port 0 serves
    nothing. With ``checks``, ``/healthz`` and ``/readyz`` (:mod:`shared.health`) are
    served beside ``/metrics`` and, when ``health_port`` is set, on that port too (also
    when metrics are off). :class:`MetricsPortError` when a port cannot be listened on."""
    routes: dict[int, list[web.RouteDef]] = {}
    if port:
        routes[port] = [web.get("/metrics", service_metrics.scrape)]
    if checks is not None:
        for served in {port, health_port} - {0}:
            routes.setdefault(served, []).extend(checks.routes())
    if not routes:
        yield
        return
    address = bind_address(os.environ)
    shown = "*" if address is None else f"[{address}]" if ":" in address else address
    runners: list[web.AppRunner] = []
    try:
        for served, served_routes in routes.items():
            app = web.Application()
            app.add_routes(served_routes)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            runners.append(runner)
            await runner.setup()
            try:
                await web.TCPSite(runner, host=address, port=served, reuse_address=True).start()
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                flag = "--metrics-port" if served == port else "--health-port"
                raise MetricsPortError(f"{flag} {served}: cannot listen on {shown}: {reason}") from None
            log.info("serving %s on %s:%d", ", ".join(sorted({r.path for r in served_routes})), shown, served)
        yield
    finally:
        for runner in runners:
            await asyncio.shield(runner.cleanup())
