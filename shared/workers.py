"""The wiring every consumer-group worker shares (reconciler, status).

In: a worker factory (cluster clients and a publisher in, an object with the
KeyedConsumer ``accept``, ``handle`` and ``settle`` out), the worker's identity and its
Kafka settings. Out: :func:`run`, which sets up tracing, the worker's metrics
(served on ``metrics_port``, see :mod:`shared.metrics`), the clusters'
clients, the publisher and the consumer, calls ``on_ready`` once the group is
joined, consumes until cancelled, then drains, commits and closes everything
in reverse order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from collections.abc import Awaitable, Callable
from typing import Protocol

from opentelemetry import context as otel_context

from shared import metrics, tracing
from shared.bus import consuming, producing, records
from shared.bus.settings import KafkaSettings
from shared.kube import connecting


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


async def run(
    identity: Identity,
    kafka: KafkaSettings,
    make_worker: Callable[[connecting.ClusterClients, producing.Publisher, metrics.ServiceMetrics], Worker],
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    provider = tracing.configure(f"kto-{identity.service}", identity.instance)
    service_metrics = metrics.ServiceMetrics(kafka.dlq_topic)
    clusters = connecting.ClusterClients(identity.kubeconfig, identity.in_cluster_name, service_metrics.on_request)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(provider.shutdown)
        await stack.enter_async_context(metrics.serving(service_metrics, identity.metrics_port))
        stack.push_async_callback(clusters.close)
        publisher = await stack.enter_async_context(
            producing.Publisher(kafka, identity.service, identity.instance, on_event=[service_metrics.on_bus_event])
        )
        worker = make_worker(clusters, publisher, service_metrics)
        stack.callback(worker.close)
        consumer = await stack.enter_async_context(
            consuming.KeyedConsumer(
                kafka, identity.group_id, worker.handle, accept=worker.accepts,
                settle=service_metrics.timed_settle(identity.service, worker.settle),
                on_event=[service_metrics.on_bus_event],
                on_revoked=worker.forget,
                concurrency_limit=identity.concurrency, span_name=identity.span_name,
                instance=identity.instance,
                retriable=lambda exc: getattr(exc, "retriable", False) is True,
            )
        )
        service_metrics.watch_lag(consumer, identity.group_id)
        on_ready()
        await consumer.run()
