"""The SSH key pair of an MPIJob's ``<job>-ssh`` Secret (spec A.8.3), as data.

In: nothing. Out: :class:`KeyPair`, what the Secret holds. The pair is made
at the edge (``shared.keygen``, with the ``cryptography`` package: an ECDSA
P-521 key as upstream makes it): randomness is not the pure core's business,
and key generation is not code to write by hand.
"""

from __future__ import annotations

import dataclasses

SSH_KEY_TYPE = "ecdsa-sha2-nistp521"


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """What the Secret holds: ``ssh-privatekey`` (PEM ``EC PRIVATE KEY``, SEC1, as Go's
    ``x509.MarshalECPrivateKey`` writes it) and ``ssh-publickey`` (OpenSSH
    ``authorized_keys`` form, newline-terminated), as bytes."""

    private_pem: bytes
    public_openssh: bytes
