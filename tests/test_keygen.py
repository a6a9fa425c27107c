"""SSH key pairs are made as each upstream operator makes them, and the two halves match."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from shared import keygen


def test_an_mpijob_gets_an_ecdsa_p521_pair_with_a_sec1_private_key() -> None:
    pair = keygen.mpi_key_pair()
    assert pair.private_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----\n")
    key = serialization.load_pem_private_key(pair.private_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp521r1"
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert pair.public_openssh == public + b"\n" and public.startswith(b"ecdsa-sha2-nistp521 ")


def test_a_training_job_gets_an_rsa_1024_pair_with_a_pkcs1_private_key() -> None:
    pair = keygen.training_job_key_pair()
    assert pair.private_key_pem.startswith("-----BEGIN RSA PRIVATE KEY-----\n")
    key = serialization.load_pem_private_key(pair.private_key_pem.encode(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 1024
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    assert pair.public_key == public.decode() + "\n" and pair.public_key.startswith("ssh-rsa ")


def test_every_pair_is_new() -> None:
    assert keygen.mpi_key_pair() != keygen.mpi_key_pair()
