"""Settings of a reconciler worker, read once by `kto reconciler` and passed down."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import socket
import uuid

from shared.core.elastic.settings import ElasticSettings
from shared.core.settings import OperatorSettings
from shared import namespaces as served
from shared.workers import RELEASE_AFTER


def default_instance(service: str) -> str:
    """A process instance id: host, pid and a short random part."""
    return f"{service}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclasses.dataclass(frozen=True)
class ReconcilerSettings:
    kubeconfig: pathlib.Path | None
    """Kubeconfig whose contexts are the clusters: a job key's cluster is a context name.
    None: in-cluster config, serving the one cluster named by ``in_cluster_name``."""

    in_cluster_name: str = "in-cluster"
    """Cluster name of job keys served through the in-cluster config."""

    operator: OperatorSettings = OperatorSettings()
    """Flags that shape the children (gang scheduler, init container images, …)."""

    elastic: ElasticSettings = ElasticSettings()
    """How et-operator TrainingJobs are run (its init container image, SSH secret, scaler order)."""

    concurrency: int = 32
    """Job keys reconciled at the same time by this worker."""

    create_concurrency: int = 16
    """Pods and services of one job created at the same time."""

    release_after: float = RELEASE_AFTER
    """Seconds a job key whose cluster does not answer holds its records before it lets them
    go and leaves a wake-up record in their place (``--release-after``)."""

    group_id: str = "kto-reconciler"
    """Kafka consumer group shared by all reconciler workers."""

    check_after: float = 300.0
    """Seconds without an observation of a job after which it is read afresh (the
    watcher resyncs live jobs every 30 s by default), so a job deleted while no
    watcher ran is noticed; 0 turns the check off."""

    exec_timeout: float = 60.0
    """Seconds a command run in a TrainingJob's launcher (hostfile rewrite, scaler script,
    process probe) may take; one that has not ended by then counts as failed
    (``--exec-timeout``)."""

    delete_grace: float = 300.0
    """Seconds a child this worker deleted counts as going away before it is deleted again."""

    metrics_port: int = 0
    """Port of the Prometheus ``/metrics`` endpoint (``--metrics-port``, or ``KTO_METRICS_PORT``); 0: none."""

    health_port: int = 0
    """Port of the probes ``/healthz`` and ``/readyz`` (``--health-port``, or ``KTO_HEALTH_PORT``); 0: only
    beside ``/metrics``."""

    instance: str = dataclasses.field(default_factory=lambda: default_instance("reconciler"))
    """This worker's instance id (stamped on its records)."""

    namespaces: tuple[str, ...] = ()
    """The namespaces served (``KTO_NAMESPACES``, comma-separated); () → every namespace. A
    record of a job key outside them is skipped, so nothing is created, changed or deleted
    there (deploy/overlays/namespaced binds the reconciler no role there)."""

    def refusal(self, namespace: str) -> str | None:
        """Why a job key of ``namespace`` is skipped; None when it is served."""
        return served.refusal(self.namespaces, namespace)
