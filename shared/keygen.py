"""SSH key pairs for the Secrets kto creates, made with the ``cryptography`` package.

In: nothing (the operating system's randomness). Out: the key pair types of
the pure core, encoded as each upstream operator encodes them:

* MPIJob v2beta1 (mpi-operator, spec A.8.3): ECDSA P-521, the private key as
  a SEC1 PEM ``EC PRIVATE KEY``, the public key in ``authorized_keys`` form;
* TrainJob (Kubeflow Trainer v2's MPI plugin): the same as MPIJob v2beta1's;
* TrainingJob (et-operator, spec B.6.5): RSA 1024-bit, the private key as a
  PKCS#1 PEM ``RSA PRIVATE KEY``, the public key in ``authorized_keys`` form.

Service code calls these when a decision needs a Secret; the core never draws
randomness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from shared.core.elastic import planning as elastic_planning
from shared.core.mpi_v2 import sshkeys
from shared.core.trainer import sshkeys as trainer_sshkeys

RSA_BITS = 1024
"""et-operator's key size (upstream's choice, kept for wire compatibility of the Secret)."""


def _openssh_public(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n"


def _ecdsa_p521() -> tuple[bytes, bytes]:
    """(SEC1 PEM private key, OpenSSH public key) of a new ECDSA P-521 key."""
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    return private, _openssh_public(key)


def mpi_key_pair() -> sshkeys.KeyPair:
    private, public = _ecdsa_p521()
    return sshkeys.KeyPair(private_pem=private, public_openssh=public)


def trainjob_key_pair() -> trainer_sshkeys.KeyPair:
    private, public = _ecdsa_p521()
    return trainer_sshkeys.KeyPair(private_pem=private, public_openssh=public)


def training_job_key_pair() -> elastic_planning.KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
    return elastic_planning.KeyPair(private_key_pem=private.decode(), public_key=_openssh_public(key).decode())


MAKERS: dict[type, Callable[[], Any]] = {
    sshkeys.KeyPair: mpi_key_pair,
    elastic_planning.KeyPair: training_job_key_pair,
    trainer_sshkeys.KeyPair: trainjob_key_pair,
}
"""Key pair type → its maker: what a service hands the families (``effects.Context.key_makers``)."""
