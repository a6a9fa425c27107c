"""How ``kto console`` runs: what it reads, where it listens, how often it looks again."""

from __future__ import annotations

import dataclasses
import pathlib

from shared.bus.settings import KafkaSettings


@dataclasses.dataclass(frozen=True)
class ConsoleSettings:
    kubeconfig: pathlib.Path
    """The kubeconfig; each of its contexts is a cluster, named in job keys by the context's name."""
    contexts: tuple[str, ...]
    """The contexts of ``kubeconfig``, in its order: the clusters shown."""
    kafka: KafkaSettings
    """The broker and topic of the audit log (``kto.jobs``)."""
    host: str = "127.0.0.1"
    """The address listened on. On a loopback address a request without a bearer token is the
    kubeconfig's own user; on any other, every request needs a token."""
    allowed_hosts: tuple[str, ...] = ()
    """Names (or addresses) a request's ``Host`` may name besides loopback ones and ``host``; any
    other is refused (421), so a page of another site cannot reach the console by DNS rebinding."""
    access_ttl: float = 10.0
    """Seconds a token review's or an access review's answer is kept before the clusters are asked again."""
    port: int = 8080
    """The port listened on (0: any free one; the ready line says which)."""
    trace_url: str = ""
    """A link to a trace, with ``{trace_id}`` where its id goes (a Jaeger UI:
    ``http://jaeger:16686/trace/{trace_id}``); "" shows trace ids without links."""
    refresh: float = 1.0
    """Seconds between two looks at the clusters while a page is open."""
    cluster_timeout: float = 5.0
    """Seconds a cluster has to answer before it is shown as not answering."""
    patience: float = 1.0
    """Seconds the jobs list waits for a cluster that did not answer last time before it shows that
    cluster's error again (a cluster that answered is waited for, at most ``cluster_timeout``)."""
    audit_timeout: float = 30.0
    """Seconds reading a job's audit log may take."""
