"""Runs one status worker: consumer group ``kto-status`` on ``kto.jobs``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from shared import tracing
from shared.bus import consuming, producing
from shared.bus.settings import KafkaSettings
from shared.kube import connecting
from services.status import aggregating
from services.status.settings import StatusSettings


async def run(settings: StatusSettings, kafka: KafkaSettings, on_ready: Callable[[], None] = lambda: None) -> None:
    provider = tracing.configure("kto-status", settings.instance)
    clusters = connecting.ClusterClients(settings.kubeconfig, settings.in_cluster_name)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(provider.shutdown)
        stack.push_async_callback(clusters.close)
        publisher = await stack.enter_async_context(producing.Publisher(kafka, "status", settings.instance))
        worker = aggregating.StatusAggregator(settings, clusters, publisher)
        consumer = await stack.enter_async_context(
            consuming.KeyedConsumer(
                kafka, settings.group_id, worker.handle,
                concurrency_limit=settings.concurrency, span_name="aggregate status", instance=settings.instance,
                retriable=lambda exc: getattr(exc, "retriable", False) is True,
            )
        )
        on_ready()
        await consumer.run()
