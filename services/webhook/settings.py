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

    max_request_bytes: int = 16 * 1024 * 1024
    """Largest AdmissionReview accepted (object and old object together); larger ones are
    answered 413. kube-apiserver accepts objects of up to 3 MiB."""

    reload_interval: float = 10.0
    """Seconds between two looks at the certificate files: a renewed certificate (cert-manager,
    ``--self-signed``) is served from the next TLS handshake on, without a restart."""
