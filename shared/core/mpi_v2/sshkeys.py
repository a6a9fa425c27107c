"""The SSH key pair of an MPIJob's ``<job>-ssh`` Secret (spec A.8.3), derived from a seed.

In: random bytes the service layer draws (``secrets.token_bytes(SEED_BYTES)``).
Out: a :class:`KeyPair` as upstream stores it: an ECDSA P-521 private key as
a PEM block ``EC PRIVATE KEY`` (SEC1 DER, as Go's ``x509.MarshalECPrivateKey``
writes it: version 1, the 66-byte scalar, the named curve, the public point)
and its public key in OpenSSH ``authorized_keys`` form, newline-terminated.

Why here and pure: drawing randomness is the only I/O in making a key, so
the service layer draws the seed and the derivation is a pure function that
tests pin byte for byte. The ``cryptography`` package is not a dependency of
kto, so the scalar multiplication is written out below; it is not constant
time, which matters only to an attacker who can time the operator while it
derives a key, once per job. A service layer that has another key source
builds a :class:`KeyPair` itself.

The scalar follows FIPS 186-5 A.2.1 ("extra random bits"): the seed has 64
bits more than the group order, ``d = seed mod (n - 1) + 1``, so ``d`` is in
``[1, n-1]`` with negligible bias and never invalid.
"""

from __future__ import annotations

import base64
import dataclasses
import struct

# secp521r1 (SEC 2, FIPS 186-5 P-521): y² = x³ - 3x + b over GF(p).
_P = 2**521 - 1
_B = int(
    "0051953eb9618e1c9a1f929a21a0b68540eea2da725b99b315f3b8b489918ef109e156193951ec7e93"
    "7b1652c0bd3bb1bf073573df883d2c34f1ef451fd46b503f00",
    16,
)
_N = int(
    "01fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffa51868783bf2f966b"
    "7fcc0148f709a5d03bb5c9b8899c47aebb6fb71e91386409",
    16,
)
_GX = int(
    "00c6858e06b70404e9cd9e3ecb662395b4429c648139053fb521f828af606b4d3dbaa14b5e77efe759"
    "28fe1dc127a2ffa8de3348b3c1856a429bf97e7e31c2e5bd66",
    16,
)
_GY = int(
    "011839296a789a3bc0045c8a5fb42c7d1bd998f54449579b446817afbd17273e662c97ee72995ef426"
    "40c550b9013fad0761353c7086a272c24088be94769fd16650",
    16,
)
_COORDINATE_BYTES = 66
"""(521 + 7) // 8: the width of a scalar or a coordinate, zero-padded."""

SEED_BYTES = 74
"""Bytes of seed :func:`from_seed` wants: 521 + 64 bits, rounded up."""

_SECP521R1_OID = bytes([0x06, 0x05, 0x2B, 0x81, 0x04, 0x00, 0x23])
"""DER of OID 1.3.132.0.35 (secp521r1)."""

SSH_KEY_TYPE = "ecdsa-sha2-nistp521"
_SSH_CURVE = "nistp521"


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """What the Secret holds: ``ssh-privatekey`` and ``ssh-publickey``, as bytes."""

    private_pem: bytes
    public_openssh: bytes


_Jacobian = tuple[int, int, int]
_INFINITY: _Jacobian = (1, 1, 0)


def _double(point: _Jacobian) -> _Jacobian:
    x, y, z = point
    if z == 0 or y == 0:
        return _INFINITY
    yy = y * y % _P
    s = 4 * x * yy % _P
    zz = z * z % _P
    m = 3 * (x - zz) * (x + zz) % _P  # a = -3
    x3 = (m * m - 2 * s) % _P
    y3 = (m * (s - x3) - 8 * yy * yy) % _P
    z3 = 2 * y * z % _P
    return x3, y3, z3


def _add(first: _Jacobian, second: _Jacobian) -> _Jacobian:
    if first[2] == 0:
        return second
    if second[2] == 0:
        return first
    x1, y1, z1 = first
    x2, y2, z2 = second
    z1z1, z2z2 = z1 * z1 % _P, z2 * z2 % _P
    u1, u2 = x1 * z2z2 % _P, x2 * z1z1 % _P
    s1, s2 = y1 * z2 * z2z2 % _P, y2 * z1 * z1z1 % _P
    if u1 == u2:
        return _double(first) if s1 == s2 else _INFINITY
    h, r = (u2 - u1) % _P, (s2 - s1) % _P
    hh = h * h % _P
    hhh = h * hh % _P
    v = u1 * hh % _P
    x3 = (r * r - hhh - 2 * v) % _P
    y3 = (r * (v - x3) - s1 * hhh) % _P
    z3 = h * z1 * z2 % _P
    return x3, y3, z3


def public_point(scalar: int) -> tuple[int, int]:
    """``scalar · G`` in affine coordinates (``scalar`` in ``[1, n-1]``)."""
    if not 1 <= scalar < _N:
        raise ValueError("the private scalar must be in [1, n-1]")
    result, addend = _INFINITY, (_GX, _GY, 1)
    while scalar:
        if scalar & 1:
            result = _add(result, addend)
        addend = _double(addend)
        scalar >>= 1
    x, y, z = result
    z_inverse = pow(z, -1, _P)
    zz = z_inverse * z_inverse % _P
    return x * zz % _P, y * zz * z_inverse % _P


def _der(tag: int, content: bytes) -> bytes:
    length = len(content)
    if length < 0x80:
        header = bytes([length])
    else:
        encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
        header = bytes([0x80 | len(encoded)]) + encoded
    return bytes([tag]) + header + content


def _ssh_string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _pem(label: str, der: bytes) -> bytes:
    body = base64.b64encode(der).decode("ascii")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return (f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n").encode("ascii")


def from_scalar(scalar: int) -> KeyPair:
    """The key pair of private scalar ``scalar`` in upstream's two encodings."""
    x, y = public_point(scalar)
    point = b"\x04" + x.to_bytes(_COORDINATE_BYTES, "big") + y.to_bytes(_COORDINATE_BYTES, "big")
    sec1 = _der(
        0x30,
        _der(0x02, b"\x01")
        + _der(0x04, scalar.to_bytes(_COORDINATE_BYTES, "big"))
        + _der(0xA0, _SECP521R1_OID)
        + _der(0xA1, _der(0x03, b"\x00" + point)),
    )
    blob = _ssh_string(SSH_KEY_TYPE.encode()) + _ssh_string(_SSH_CURVE.encode()) + _ssh_string(point)
    public = f"{SSH_KEY_TYPE} {base64.b64encode(blob).decode('ascii')}\n".encode("ascii")
    return KeyPair(private_pem=_pem("EC PRIVATE KEY", sec1), public_openssh=public)


def from_seed(seed: bytes) -> KeyPair:
    """The key pair for ``seed`` (at least :data:`SEED_BYTES` random bytes)."""
    if len(seed) < SEED_BYTES:
        raise ValueError(f"an SSH key seed needs at least {SEED_BYTES} bytes, got {len(seed)}")
    return from_scalar(int.from_bytes(seed, "big") % (_N - 1) + 1)
