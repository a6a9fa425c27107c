"""Runs one reconciler worker: consumer group ``kto-reconciler`` on ``kto.jobs``.

In: settings. Out: a worker that reconciles until cancelled, then drains,
commits and closes its clients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from shared import tracing
from shared.bus import consuming, producing
from shared.bus.settings import KafkaSettings
from shared.kube import connecting
from services.reconciler import reconciling
from services.reconciler.settings import ReconcilerSettings


async def run(
    settings: ReconcilerSettings, kafka: KafkaSettings, on_ready: Callable[[], None] = lambda: None,
) -> None:
    provider = tracing.configure("kto-reconciler", settings.instance)
    clusters = connecting.ClusterClients(settings.kubeconfig, settings.in_cluster_name)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(provider.shutdown)
        stack.push_async_callback(clusters.close)
        publisher = await stack.enter_async_context(producing.Publisher(kafka, "reconciler", settings.instance))
        worker = reconciling.Reconciler(settings, clusters, publisher)
        stack.callback(worker.close)
        consumer = await stack.enter_async_context(
            consuming.KeyedConsumer(
                kafka, settings.group_id, worker.handle,
                concurrency_limit=settings.concurrency, span_name="reconcile", instance=settings.instance,
                retriable=lambda exc: getattr(exc, "retriable", False) is True,
            )
        )
        on_ready()
        await consumer.run()
