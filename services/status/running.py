"""Runs one status worker: consumer group ``kto-status`` on ``kto.jobs``."""

from __future__ import annotations

from collections.abc import Callable

from shared import workers
from shared.bus.settings import KafkaSettings
from services.status import aggregating
from services.status.settings import StatusSettings


async def run(settings: StatusSettings, kafka: KafkaSettings, on_ready: Callable[[], None] = lambda: None) -> None:
    identity = workers.Identity(
        service="status", instance=settings.instance, group_id=settings.group_id,
        kubeconfig=settings.kubeconfig, in_cluster_name=settings.in_cluster_name,
        concurrency=settings.concurrency, span_name="aggregate status", metrics_port=settings.metrics_port,
        health_port=settings.health_port, release_after=settings.release_after,
    )
    await workers.run(
        identity, kafka,
        lambda clusters, publisher, service_metrics: aggregating.StatusAggregator(
            settings, clusters, publisher, service_metrics),
        on_ready,
    )
