"""The wiring every consumer-group worker shares (reconciler, status).

In: a worker factory (cluster clients and a publisher in, an object with the
KeyedConsumer ``accept``, ``handle`` and ``settle`` out), the worker's identity and its
Kafka settings. Out: :func:`run`, which sets up tracing, the worker's metrics
(served on ``metrics_port``, see :mod:`shared.metrics`) and probes (also on
``health_port``; readiness: consumer started, broker and a cluster answering, see
:mod:`shared.health`), the clusters' clients, the publisher and the consumer, calls
``on_ready`` once the group is
joined, consumes until cancelled, then drains, commits and closes everything
in reverse order.

Many clusters, one worker: the settles of one cluster's job keys hold at most
half the worker's slots (the consumer's lanes), and a key whose cluster does
not answer waits (:func:`waiting_for_clusters`), so one cluster that stops
answering slows no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pathlib
from collections.abc import Awaitable, Callable
from typing import Protocol

from opentelemetry import context as otel_context

from shared import health, metrics, tracing
from shared.bus import consuming, producing, records, signing
from shared.bus.settings import KafkaSettings
from shared.kube import clients, connecting

log = logging.getLogger("kto.workers")


def cluster_of(job_key: str) -> str:
    """The cluster part of a job key (``cluster/namespace/kind/name``): a settle's lane."""
    return job_key.split("/", 1)[0]


def lane_limit(concurrency: int) -> int:
    """Slots the settles of one cluster's keys may hold: half of them, so a cluster whose
    requests hang leaves the other half to the rest."""
    return max(1, concurrency // 2)


RELEASE_AFTER = 60.0
"""Seconds a job key whose cluster does not answer holds its records (default)."""


def waiting_for_clusters(
    settle: consuming.Settle, publisher: producing.Publisher, service: str, release_after: float,
) -> consuming.Settle:
    """``settle`` for a job key whose cluster does not answer
    (:class:`~shared.kube.clients.ClusterUnreachable`): the key waits ``retry_after``
    seconds and is settled again, its records held (and taken in as they come),
    no slot held meanwhile, nothing dead-lettered.

    After ``release_after`` seconds of waiting, the key lets its records go, so the
    partition's commits move on (a worker restarted in a long outage would otherwise
    read everything since it began): first a :data:`~shared.bus.records.WAKE_ACTION`
    record of ``service`` goes on the key (from ``publisher``, which waits out a broker
    outage as every write does), which is taken in again and waits in their place; if
    the broker refuses it for good, the key goes on holding.

    When flushing (stopping, the partition revoked) nothing can be written: its records
    are let go, and the cluster's watcher republishes the job once the cluster is back
    (its relist, then every resync), which whoever holds the key then settles."""
    def now() -> float:
        return asyncio.get_running_loop().time()

    since: dict[str, float] = {}
    """Job key → when it began waiting for its cluster."""

    async def settle_key(job_key: str, parent: otel_context.Context, flush: bool) -> float | None:
        try:
            delay = await settle(job_key, parent, flush)
        except clients.ClusterUnreachable as exc:
            if flush:
                since.pop(job_key, None)
                log.warning("%s: let go unsettled (%s)", job_key, exc.message)
                return None
            began = since.setdefault(job_key, now())
            waited = now() - began
            if waited >= release_after and await _wake_later(
                    publisher, service, job_key, waited, exc):
                del since[job_key]
                return None
            log.debug("%s: waiting %.1fs (%s)", job_key, exc.retry_after or 0.0, exc.message)
            return exc.retry_after
        since.pop(job_key, None)
        return delay

    return settle_key


async def _wake_later(publisher: producing.Publisher, service: str, job_key: str, waited: float,
                      exc: clients.ClusterUnreachable) -> bool:
    cluster = cluster_of(job_key)
    record = records.Decision(
        key=job_key, action=records.WAKE_ACTION, reason="ClusterUnreachable", source=service,
        message=f"cluster {cluster} has not answered for {waited:.0f}s ({exc.message}): the records before this "
                f"one are let go, and this one waits in their place",
    )
    try:
        await publisher.publish(record)
    except Exception as failed:  # refused for good: hold on, and try again after the next wait
        log.warning("%s: cannot leave a wake-up record (%r); its records stay held", job_key, failed)
        return False
    log.info("%s: cluster %s has not answered for %.0fs: its records let go, a wake-up record left",
             job_key, cluster, waited)
    return True


class Worker(Protocol):
    def accepts(self, type_tag: str) -> bool: ...

    async def handle(self, record: records.Record, parent: otel_context.Context) -> bool: ...

    def settle(self, job_key: str, parent: otel_context.Context, flush: bool) -> Awaitable[float | None]: ...

    def forget(self, job_keys: set[str]) -> None: ...

    def close(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Identity:
    service: str
    """``kto-<service>`` names the tracer; ``service`` is the records' source."""
    instance: str
    group_id: str
    kubeconfig: pathlib.Path | None
    in_cluster_name: str
    concurrency: int
    span_name: str
    """Name of the span each settle (one act per burst of a key's records) runs in."""
    metrics_port: int
    """Port of the Prometheus ``/metrics`` endpoint; 0: none."""
    health_port: int = 0
    """Port of the probes ``/healthz`` and ``/readyz`` (also served beside ``/metrics``); 0: none of its own."""
    release_after: float = RELEASE_AFTER
    """Seconds a job key whose cluster does not answer holds its records (:func:`waiting_for_clusters`)."""


def cluster_names(kubeconfig: pathlib.Path | None, in_cluster_name: str) -> list[str]:
    """The clusters a worker serves: the kubeconfig's context names, or the in-cluster one."""
    if kubeconfig is None:
        return [in_cluster_name]
    try:
        return connecting.context_names(kubeconfig)
    except ValueError:
        return []  # the commands refuse such a kubeconfig at start; readiness says no cluster is known


def add_cluster_checks(checks: health.Health, clusters: connecting.ClusterClients, names: list[str]) -> None:
    """Readiness: ``cluster <name>`` per cluster (``GET /version`` answered; not required alone) and
    ``clusters``, required: at least one of them answers. One cluster that is down does not make
    every worker unready: the others' job keys still flow (see the lanes above)."""
    def answers(name: str) -> health.Check:
        async def check() -> str | None:
            client = await clusters.get(name)
            await client.request("GET", "/version", route="version")
            return None
        return check

    for name in names:
        checks.add(f"cluster {name}", answers(name), required=False)

    async def any_answers() -> str | None:
        if not names:
            return "the kubeconfig names no context"
        outcomes = await asyncio.gather(*(checks.outcome(f"cluster {name}") for name in names))
        if any(outcome is None for outcome in outcomes):
            return None
        return f"none of {len(names)} cluster(s) answers"

    checks.add("clusters", any_answers, timeout=checks.timeout + 1.0)


async def run(
    identity: Identity,
    kafka: KafkaSettings,
    make_worker: Callable[[connecting.ClusterClients, producing.Publisher, metrics.ServiceMetrics], Worker],
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    provider = tracing.configure(f"kto-{identity.service}", identity.instance)
    service_metrics = metrics.ServiceMetrics(kafka.dlq_topic)
    clusters = connecting.ClusterClients(identity.kubeconfig, identity.in_cluster_name, service_metrics.on_request)
    checks = health.Health()
    started = checks.gate("consumer", "the consumer has not started yet")
    keyring = signing.Keyring.from_env()
    publisher = producing.Publisher(kafka, identity.service, identity.instance, on_event=[service_metrics.on_bus_event],
                                    signer=None if keyring is None else keyring.signer(identity.service),
                                    digest_key=b"" if keyring is None else keyring.digest_key)
    checks.add("broker", publisher.ping)
    add_cluster_checks(checks, clusters, cluster_names(identity.kubeconfig, identity.in_cluster_name))
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(provider.shutdown)
        await stack.enter_async_context(
            metrics.serving(service_metrics, identity.metrics_port, checks, identity.health_port))
        stack.push_async_callback(clusters.close)
        await stack.enter_async_context(publisher)
        worker = make_worker(clusters, publisher, service_metrics)
        stack.callback(worker.close)
        consumer = await stack.enter_async_context(
            consuming.KeyedConsumer(
                # The publisher's settings: its producer's mode, which the dead-letter producer need not ask again.
                publisher.settings,
                consuming.ConsumerSettings(
                    identity.group_id, concurrency_limit=identity.concurrency, span_name=identity.span_name,
                    instance=identity.instance, lane_limit=lane_limit(identity.concurrency),
                ),
                worker.handle, accept=worker.accepts,
                settle=service_metrics.timed_settle(identity.service, waiting_for_clusters(
                    worker.settle, publisher, identity.service, identity.release_after)),
                lane=cluster_of,
                on_event=[service_metrics.on_bus_event],
                on_revoked=worker.forget,
                keyring=keyring,
                retriable=lambda exc: getattr(exc, "retriable", False) is True,
            )
        )
        service_metrics.watch_lag(consumer, identity.group_id)
        started()
        if keyring is None:
            log.warning("%s: records are neither signed nor verified (%s is unset): anyone who can write the topic "
                        "can make this worker act; see docs/security.md", identity.service, signing.ENV)
        on_ready()
        await consumer.run()
