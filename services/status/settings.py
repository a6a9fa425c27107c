"""Settings of a status worker, read once by `kto status-service` and passed down."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import socket
import uuid

from shared import namespaces as served
from shared.workers import RELEASE_AFTER


def _instance() -> str:
    return f"status-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclasses.dataclass(frozen=True)
class StatusSettings:
    kubeconfig: pathlib.Path | None
    """Kubeconfig whose contexts are the clusters (a job key's cluster = context name);
    None: in-cluster config for the cluster named ``in_cluster_name``."""

    in_cluster_name: str = "in-cluster"
    """Cluster name of job keys served through the in-cluster config."""

    concurrency: int = 32
    """Job keys handled at the same time by this worker."""

    release_after: float = RELEASE_AFTER
    """Seconds a job key whose cluster does not answer holds its records before it lets them
    go and leaves a wake-up record in their place (``--release-after``)."""

    group_id: str = "kto-status"
    """Kafka consumer group shared by all status workers."""

    write_interval: float = 0.5
    """Seconds between two status writes of one job (the first comes this long after
    the job is first seen): changes within it are written together."""

    conflict_attempts: int = 5
    """Status writes tried on 409 Conflict (each after re-reading the job) before giving up."""

    record_events: bool = True
    """Record Kubernetes Events for condition transitions."""

    metrics_port: int = 0
    """Port of the Prometheus ``/metrics`` endpoint (``--metrics-port``, or ``KTO_METRICS_PORT``); 0: none."""

    health_port: int = 0
    """Port of the probes ``/healthz`` and ``/readyz`` (``--health-port``, or ``KTO_HEALTH_PORT``); 0: only
    beside ``/metrics``."""

    instance: str = dataclasses.field(default_factory=_instance)
    """This worker's instance id (stamped on its records)."""

    namespaces: tuple[str, ...] = ()
    """Namespaces whose jobs' status this worker writes (``KTO_NAMESPACES``, comma-separated;
    () → all). Records of other namespaces are skipped (deploy/overlays/namespaced binds
    the status worker no role there)."""

    def refusal(self, namespace: str) -> str | None:
        """None when jobs of ``namespace`` are this worker's, else why not."""
        return served.refusal(self.namespaces, namespace)
