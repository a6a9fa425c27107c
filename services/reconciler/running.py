"""Runs one reconciler worker: consumer group ``kto-reconciler`` on ``kto.jobs``.

In: settings. Out: a worker that reconciles until cancelled, then drains,
commits and closes its clients.
"""

from __future__ import annotations

from collections.abc import Callable

from shared import workers
from shared.bus.settings import KafkaSettings
from services.reconciler import reconciling
from services.reconciler.settings import ReconcilerSettings


async def run(
    settings: ReconcilerSettings, kafka: KafkaSettings, on_ready: Callable[[], None] = lambda: None,
) -> None:
    identity = workers.Identity(
        service="reconciler", instance=settings.instance, group_id=settings.group_id,
        kubeconfig=settings.kubeconfig, in_cluster_name=settings.in_cluster_name,
        concurrency=settings.concurrency, span_name="reconcile", metrics_port=settings.metrics_port,
        health_port=settings.health_port, release_after=settings.release_after,
    )
    await workers.run(
        identity, kafka,
        lambda clusters, publisher, service_metrics: reconciling.Reconciler(settings, clusters, publisher,
                                                                            service_metrics),
        on_ready,
    )
