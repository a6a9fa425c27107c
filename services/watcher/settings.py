"""Settings of the watcher service.

In: command-line flags, read once by ``kto watcher``.
Out: one frozen :class:`WatcherSettings` passed down to :mod:`running`,
:mod:`watching` and :mod:`resyncing`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket

from shared import namespaces as served
from shared.api import jobsets


def default_identity() -> str:
    """``<hostname>-<pid>-<random>``: unique per process, readable in the Lease."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclasses.dataclass(frozen=True)
class WatcherSettings:
    """What one watcher process watches and how it shares the cluster with its standbys."""

    cluster: str
    """Name of the watched cluster: the first segment of every job key it publishes."""

    kubeconfig: str | None = None
    """Path of the kubeconfig; None → ``$KUBECONFIG`` / ``~/.kube/config``, or the
    in-cluster service account when running in a pod."""

    context: str | None = None
    """kubeconfig context to use; None → the current context."""

    namespace: str | None = None
    """Namespaces to watch, comma-separated (``--namespace``, else ``KTO_NAMESPACES``); None
    → all namespaces. Each is listed and watched on its own, as controller-runtime's watch
    namespaces, so the watcher needs no role outside them."""

    resync_interval: float = 30.0
    """Seconds between two periodic resyncs (RESYNCED for every live job)."""

    lease_namespace: str = "default"
    """Namespace of the Lease that elects the one active watcher of the cluster."""

    lease_name: str = ""
    """Name of that Lease; "" → ``kto-watcher-<cluster>``."""

    lease_duration: float = 15.0
    """Seconds a standby waits after the Lease last changed before it takes over."""

    renew_deadline: float = 0.0
    """Seconds the leader keeps trying to renew before it steps down; 0 → 2/3 of
    ``lease_duration``."""

    retry_period: float = 0.0
    """Seconds between two attempts to acquire or renew; 0 → ``lease_duration`` / 7.5
    (2 s for the default 15 s, as client-go's defaults)."""

    metrics_port: int = 0
    """Port of the Prometheus ``/metrics`` endpoint (``--metrics-port``, or ``KTO_METRICS_PORT``); 0: none."""

    health_port: int = 0
    """Port of the probes ``/healthz`` and ``/readyz`` (``--health-port``, or ``KTO_HEALTH_PORT``); 0: only
    beside ``/metrics``."""

    identity: str = dataclasses.field(default_factory=default_identity)
    """This process in the Lease and in the ``instance`` field of its records."""

    watch_timeout: int = 300
    """Seconds one watch request stays open before it is renewed (from the last
    resourceVersion, without a relist)."""

    discovery_interval: float = 30.0
    """Seconds between two looks at a kind the cluster may not serve (a PodGroup
    kind whose CRD is not installed): listing it is tried again this often."""

    serve_jobsets: bool = True
    """kto serves JobSets (``KTO_SERVE_JOBSETS``, default true): a JobSet, its Jobs and pods are
    published under the JobSet's key; false where the real JobSet controller serves them (a JobSet
    made by a TrainJob is still published under the TrainJob's key)."""

    def __post_init__(self) -> None:
        served.parse(self.namespace, "namespace")
        if not self.cluster or "/" in self.cluster or self.cluster != self.cluster.strip():
            raise ValueError(f"cluster name {self.cluster!r} must be non-empty, without '/' or spaces")
        if self.resync_interval <= 0:
            raise ValueError(f"resync interval must be positive, not {self.resync_interval}")
        if self.lease_duration <= 0:
            raise ValueError(f"lease duration must be positive, not {self.lease_duration}")
        if not 0 < self.lease_renew_deadline < self.lease_duration:
            raise ValueError("renew deadline must be positive and below the lease duration")
        if not 0 < self.lease_retry_period < self.lease_renew_deadline:
            raise ValueError("retry period must be positive and below the renew deadline")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics port {self.metrics_port} is not a port number (0 = none)")
        if not 0 <= self.health_port <= 65535:
            raise ValueError(f"health port {self.health_port} is not a port number (0 = none)")
        if self.watch_timeout < 1:
            raise ValueError(f"watch timeout must be at least 1 s, not {self.watch_timeout}")

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The namespaces watched; () → all."""
        return served.parse(self.namespace, "namespace")

    @property
    def unserved_kinds(self) -> frozenset[str]:
        """Job kinds another controller serves in this cluster: not published under their own key."""
        return frozenset() if self.serve_jobsets else frozenset({jobsets.KIND})

    @property
    def lease(self) -> str:
        """The Lease name actually used."""
        return self.lease_name or f"kto-watcher-{self.cluster}"

    @property
    def lease_renew_deadline(self) -> float:
        return self.renew_deadline or self.lease_duration * 2 / 3

    @property
    def lease_retry_period(self) -> float:
        return self.retry_period or self.lease_duration / 7.5
