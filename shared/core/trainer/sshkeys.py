"""The SSH key pair of a TrainJob's ``<job>-mpi-ssh-auth`` Secret, as data.

In: nothing. Out: :class:`KeyPair`. Trainer v2.3's MPI plugin makes an ECDSA P-521
key (the private key a SEC1 PEM ``EC PRIVATE KEY``, the public key in
``authorized_keys`` form), as mpi-operator does; the pair is made at the edge
(``shared.keygen``): randomness is not the pure core's.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """What the Secret holds: ``ssh-privatekey`` (PEM) and ``ssh-publickey`` (OpenSSH
    ``authorized_keys`` form, newline-terminated), as bytes."""

    private_pem: bytes
    public_openssh: bytes
