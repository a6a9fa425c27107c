"""Certificates for a real part's TLS listeners: a CA of its own, and the certificates it signs.

In: a directory, the CA's name, and for each certificate a name (its common name: the
principal of a client) and whether it is a server's (dialled at 127.0.0.1 or localhost, where
the real parts listen).
Out: :class:`Authority`, whose ``ca.crt`` and ``ca.key`` are made in the directory the first
time and read back later, and :meth:`Authority.issue`, which writes ``<name>.crt`` and
``<name>.key`` there (made once, kept on later calls, so a restarted part keeps its
certificates). Every file is written with mode 0600, the directory 0700.

ECDSA P-256 and SHA-256; keys are PKCS#8 PEM without a password (what Kafka's PEM key
stores and Python's ``ssl`` both read). Test material only: valid for a year, no revocation.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import os
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)

_PEM = serialization.Encoding.PEM


@dataclasses.dataclass(frozen=True)
class Issued:
    """A certificate and its key, both PEM files."""

    cert: pathlib.Path
    key: pathlib.Path

    def key_then_chain(self) -> bytes:
        """The key followed by the certificate: a PEM key store as Kafka reads one."""
        return self.key.read_bytes() + self.cert.read_bytes()


def write_private(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (mode 0600, also when it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(data)


LOCAL_NAMES: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
"""A server certificate's subjectAltName: where the real parts listen."""


def _usage(*, signs: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, key_cert_sign=signs, crl_sign=signs, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
        decipher_only=False,
    )


class Authority:
    """A CA in ``directory`` (``ca.crt``, ``ca.key``), made on first use."""

    def __init__(self, directory: pathlib.Path, name: str) -> None:
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self.cert = self.directory / "ca.crt"
        key_path = self.directory / "ca.key"
        if self.cert.is_file() and key_path.is_file():
            loaded = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(loaded, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path} is not an EC key; remove {self.directory} to make a new CA")
            self._key = loaded
            self._certificate = x509.load_pem_x509_certificate(self.cert.read_bytes())
            return
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.timezone.utc)
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject).public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(signs=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        write_private(key_path, self._key.private_bytes(
            _PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        write_private(self.cert, self._certificate.public_bytes(_PEM))

    def issue(self, name: str, *, server: bool = False) -> Issued:
        """``<name>.crt`` (CN=name, signed by this CA) and ``<name>.key``: a client's certificate,
        or with ``server`` one for 127.0.0.1 and localhost that is also good as a client's."""
        issued = Issued(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        if issued.cert.is_file() and issued.key.is_file():
            return issued
        key = ec.generate_private_key(ec.SECP256R1())
        purposes = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            purposes.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        now = dt.datetime.now(dt.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(signs=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(LOCAL_NAMES), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        write_private(issued.key, key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
        write_private(issued.cert, certificate.public_bytes(_PEM))
        return issued
