"""Settings of a webhook process, read once by ``kto webhook`` and passed down."""

from __future__ import annotations

import dataclasses
import pathlib

DEFAULT_PORT = 9443
"""controller-runtime's webhook port, as upstream's operators serve it."""


@dataclasses.dataclass(frozen=True)
class WebhookSettings:
    cert_file: pathlib.Path
    """PEM serving certificate (with its chain), presented to the API server."""

    key_file: pathlib.Path
    """PEM private key of ``cert_file``."""

    host: str = "0.0.0.0"
    """Address to listen on (all IPv4 addresses by default: the API server is rarely on loopback)."""

    port: int = DEFAULT_PORT
    """Port to listen on; 0 picks a free one (printed on the ready line)."""

    reuse_port: bool = False
    """Bind with SO_REUSEPORT, so that several webhook processes on one host share the port
    (the kernel spreads connections among them)."""

    max_request_bytes: int = 3 * 1024 * 1024
    """Largest AdmissionReview body accepted, in bytes (kube-apiserver's own cap on a request
    body is 3 MiB); a larger one is answered 413 — from its ``Content-Length`` before any of it
    is read, else as soon as that many bytes came."""

    review_deadline: float = 8.0
    """Seconds one review may take (waiting for a thread, reading the JSON, deciding) before it is
    answered with an error: less than the ``timeoutSeconds`` the configurations register (10), so
    the API server gets kto's answer rather than its own timeout."""

    kubeconfig: pathlib.Path | None = None
    """Where the rules that read from the API server (a TrainJob's runtime) get their credentials: a
    review posted to ``/clusters/<context>/<hook path>`` reads through that context of this kubeconfig, one
    posted to the plain path through its current context. None: the in-cluster service account (and, out
    of a cluster, no reads: those rules are left to the reconciler)."""

    reload_interval: float = 10.0
    """Seconds between two looks at the certificate files: a renewed certificate (cert-manager,
    ``--self-signed``) is served from the next TLS handshake on, without a restart."""
