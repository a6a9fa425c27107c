"""A self-signed serving certificate for the webhook, for local use (``kto webhook --self-signed DIR``).

In: a directory and the host names / IP addresses the API server will dial.
Out: ``DIR/ca.crt`` (a CA of its own, the ``caBundle`` of the webhook
configurations), ``DIR/tls.crt`` and ``DIR/tls.key`` (the serving certificate
it signed, and its key) — the file names of a cert-manager or
controller-runtime certificate directory. Files already there are kept while
they are valid for a day more and name every host asked for; otherwise all
three are made anew. A lock file keeps two webhook processes starting at once
from writing different certificates.

Made with the ``cryptography`` package (ECDSA P-256, SHA-256): kube-apiserver
checks the subjectAltName (never the common name), so every host is one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import ipaddress
import os
import pathlib
from collections.abc import Iterator, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class Files:
    """Where a certificate directory keeps its three files."""

    directory: pathlib.Path

    @property
    def ca(self) -> pathlib.Path:
        return self.directory / "ca.crt"

    @property
    def cert(self) -> pathlib.Path:
        return self.directory / "tls.crt"

    @property
    def key(self) -> pathlib.Path:
        return self.directory / "tls.key"


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _usable(files: Files, hosts: Sequence[str], now: dt.datetime) -> bool:
    """The certificate there names every host, chains to the CA there and lasts a day more."""
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
        serialization.load_pem_private_key(files.key.read_bytes(), password=None)
        named = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    if any(name not in named for name in _names(hosts)):
        return False
    if cert.issuer != ca.subject:
        return False
    return min(cert.not_valid_after_utc, ca.not_valid_after_utc) - now > RENEW_BEFORE


def _write(path: pathlib.Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` at once (a temporary file renamed over it)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    tmp.replace(path)


def _make(files: Files, hosts: Sequence[str], now: dt.datetime) -> None:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kto webhook CA")])
    start, end = now - dt.timedelta(minutes=5), now + VALIDITY
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                     content_commitment=False, data_encipherment=False, key_agreement=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(files.key, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)
    _write(files.cert, cert.public_bytes(pem), 0o644)
    _write(files.ca, ca.public_bytes(pem), 0o644)


@contextlib.contextmanager
def _locked(directory: pathlib.Path) -> Iterator[None]:
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure(directory: pathlib.Path, hosts: Sequence[str] = DEFAULT_HOSTS, now: dt.datetime | None = None) -> Files:
    """The certificate directory ``directory``, made or renewed when needed (module docstring)."""
    hosts = list(dict.fromkeys(hosts)) or list(DEFAULT_HOSTS)
    now = now or dt.datetime.now(dt.timezone.utc)
    directory.mkdir(parents=True, exist_ok=True)
    files = Files(directory)
    with _locked(directory):
        if not _usable(files, hosts, now):
            _make(files, hosts, now)
    return files
