"""The wiring every consumer-group worker shares (reconciler, status).

In: a worker factory (cluster clients and a publisher in, an object with the
KeyedConsumer ``accept``, ``handle`` and ``settle`` out), the worker's identity and its
Kafka settings. Out: :func:`run`, which sets up tracing, the clusters'
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

from shared import tracing
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


async def run(
    identity: Identity,
    kafka: KafkaSettings,
    make_worker: Callable[[connecting.ClusterClients, producing.Publisher], Worker],
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    provider = tracing.configure(f"kto-{identity.service}", identity.instance)
    clusters = connecting.ClusterClients(identity.kubeconfig, identity.in_cluster_name)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(provider.shutdown)
        stack.push_async_callback(clusters.close)
        publisher = await stack.enter_async_context(
            producing.Publisher(kafka, identity.service, identity.instance)
        )
        worker = make_worker(clusters, publisher)
        stack.callback(worker.close)
        consumer = await stack.enter_async_context(
            consuming.KeyedConsumer(
                kafka, identity.group_id, worker.handle, settle=worker.settle, accept=worker.accepts,
                on_revoked=worker.forget,
                concurrency_limit=identity.concurrency, span_name=identity.span_name,
                instance=identity.instance,
                retriable=lambda exc: getattr(exc, "retriable", False) is True,
            )
        )
        on_ready()
        await consumer.run()
