"""The remote-command protocol of an exec over SPDY/3.1, server side (the kubelet's end).

In: an HTTP request with ``Connection: Upgrade``, ``Upgrade: SPDY/3.1`` and the
``X-Stream-Protocol-Version`` values the client offers — what kube-apiserver's
StreamTranslator (a WebSocket exec translated for a node that does not declare
``ExtendWebSocketsToKubelet``) and SPDY clients (kubectl with
``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``) send. Out: a 101 naming the chosen
protocol (``v5.channel.k8s.io`` or ``v4.channel.k8s.io``), then SPDY/3.1 framing on
the same connection: the client opens one stream per channel with a ``streamType``
header (error, stdin, stdout, stderr, resize) and we answer each with SYN_REPLY;
once they are open (and stdin half-closed, when asked for) the command runs,
stdout and stderr go out as DATA frames closed with FIN, the ``metav1.Status`` goes
on the error stream (streaming.exit_status), and the session ends with GOAWAY.
PINGs are echoed. Header blocks are zlib-compressed with the SPDY/3 dictionary, one
compression context per direction for the whole session.

What was read to write this (no code copied): k8s.io/streaming's
``httpstream/spdy`` (the upgrade and the SYN_REPLY wait), client-go's
``tools/remotecommand`` v2..v5 (stream creation order, the error-stream decoder),
kube-apiserver's ``util/proxy/streamtranslator.go``, and moby/spdystream's
``spdy/types.go`` and ``spdy/dictionary.go`` (frame layouts, the dictionary of the
SPDY/3 draft, section 2.6.10.1).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import zlib
from typing import Any

from aiohttp import web

from sim.node import streaming

log = logging.getLogger(__name__)

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
"""Stream protocols served (v5 over SPDY is v4 on the wire; the half-close is WebSocket-only)."""
STREAMS_TIMEOUT = 30.0
"""Seconds the client has to open its streams (and close stdin) before the exec is abandoned."""
MAX_FRAME = 16 * 1024 * 1024

_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
    "allow authorization cache-control connection content-base content-encoding content-language content-length "
    "content-location content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status"
).split() + ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()
"""The zlib dictionary of SPDY/3 header blocks (length-prefixed common header words, then common values)."""
assert len(DICTIONARY) == 1423


def is_spdy(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower().startswith("spdy/3.1") and \
        "upgrade" in request.headers.get("Connection", "").lower()


def encode_headers(headers: dict[str, str]) -> bytes:
    """An uncompressed SPDY/3 name/value block (names lower-case)."""
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        raw_name, raw_value = name.lower().encode(), value.encode()
        out += [struct.pack(">I", len(raw_name)), raw_name, struct.pack(">I", len(raw_value)), raw_value]
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, str]:
    """An uncompressed name/value block → {lower-case name: value} (several values joined by NUL)."""
    (count,) = struct.unpack_from(">I", block, 0)
    offset = 4
    headers: dict[str, str] = {}
    for _ in range(count):
        (size,) = struct.unpack_from(">I", block, offset)
        name = block[offset + 4:offset + 4 + size].decode(errors="replace")
        offset += 4 + size
        (size,) = struct.unpack_from(">I", block, offset)
        headers[name.lower()] = block[offset + 4:offset + 4 + size].decode(errors="replace")
        offset += 4 + size
    return headers


def control_frame(kind: int, payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def data_frame(stream: int, data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">II", stream & 0x7FFFFFFF, (flags << 24) | len(data)) + data


class _Buffer:
    """Bytes the HTTP server receives after the upgrade (aiohttp's payload-parser interface)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False
        self.changed = asyncio.Event()

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.data += data
        self.changed.set()
        return False, b""

    def feed_eof(self) -> None:
        self.eof = True
        self.changed.set()

    async def take(self, size: int) -> bytes | None:
        while len(self.data) < size:
            if self.eof:
                return None
            self.changed.clear()
            await self.changed.wait()
        chunk = bytes(self.data[:size])
        del self.data[:size]
        return chunk


class Session:
    """One SPDY/3.1 session of one exec: frames in from ``buffer``, out through ``write``."""

    def __init__(self, buffer: _Buffer, transport: asyncio.Transport, options: streaming.Options) -> None:
        self._buffer = buffer
        self._transport = transport
        self._options = options
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(level=9, zdict=DICTIONARY)
        self.streams: dict[str, int] = {}
        """streamType → stream id."""
        self.stdin = bytearray()
        self.stdin_closed = asyncio.Event()
        self.ready = asyncio.Event()
        self.closed = False

    def _expected(self) -> set[str]:
        wanted = {"error"}
        if self._options.stdin:
            wanted.add("stdin")
        if self._options.stdout:
            wanted.add("stdout")
        if self._options.stderr and not self._options.tty:
            wanted.add("stderr")
        if self._options.tty:
            wanted.add("resize")
        return wanted

    def _send(self, frame: bytes) -> None:
        if not self._transport.is_closing():
            self._transport.write(frame)

    def _compressed(self, headers: dict[str, str]) -> bytes:
        return self._deflate.compress(encode_headers(headers)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    async def read_frames(self) -> None:
        """Until the client goes away: answer streams, echo pings, collect stdin."""
        try:
            while True:
                head = await self._buffer.take(8)
                if head is None:
                    return
                first, second = struct.unpack(">II", head)
                flags, length = second >> 24, second & 0xFFFFFF
                if length > MAX_FRAME:
                    log.warning("spdy: a frame of %d bytes: closing", length)
                    return
                payload = await self._buffer.take(length) if length else b""
                if payload is None:
                    return
                if first & 0x80000000:
                    if not self._control((first >> 16) & 0x7FFF, first & 0xFFFF, flags, payload):
                        return
                else:
                    self._data(first & 0x7FFFFFFF, flags, payload)
        finally:
            self.closed = True
            self.stdin_closed.set()
            self.ready.set()

    def _control(self, version: int, kind: int, flags: int, payload: bytes) -> bool:
        if version != VERSION:
            log.warning("spdy: control frame of version %d", version)
            return False
        if kind == SYN_STREAM:
            (stream,) = struct.unpack_from(">I", payload, 0)
            stream &= 0x7FFFFFFF
            headers = decode_headers(self._inflate.decompress(payload[10:]))
            self._send(control_frame(SYN_REPLY, struct.pack(">I", stream) + self._compressed({})))
            kind_name = headers.get("streamtype", "")
            self.streams[kind_name] = stream
            if kind_name == "stdin" and flags & FLAG_FIN:
                self.stdin_closed.set()
            if self._expected() <= set(self.streams):
                self.ready.set()
        elif kind == HEADERS:
            self._inflate.decompress(payload[4:])
        elif kind == PING:
            self._send(control_frame(PING, payload[:4]))
        elif kind == GOAWAY:
            return False
        # SETTINGS, WINDOW_UPDATE, RST_STREAM: nothing to do for one short exec.
        return True

    def _data(self, stream: int, flags: int, payload: bytes) -> None:
        if stream == self.streams.get("stdin"):
            self.stdin += payload
            if flags & FLAG_FIN:
                self.stdin_closed.set()

    def write_stream(self, kind: str, data: bytes, close: bool = True) -> None:
        stream = self.streams.get(kind)
        if stream is None:
            return
        for start in range(0, len(data), streaming.CHUNK):
            self._send(data_frame(stream, data[start:start + streaming.CHUNK]))
        if close:
            self._send(data_frame(stream, b"", FLAG_FIN))

    def finish(self) -> None:
        """Half-close what is still open on our side, then GOAWAY."""
        for kind in ("stdin", "resize"):
            if kind in self.streams:
                self._send(data_frame(self.streams[kind], b"", FLAG_FIN))
        last = max(self.streams.values(), default=0)
        self._send(control_frame(GOAWAY, struct.pack(">II", last, 0)))


async def serve(request: web.Request, options: streaming.Options, run: streaming.Runner) -> web.StreamResponse:
    """Negotiate, upgrade and serve one exec over SPDY/3.1."""
    offered = [v.strip() for value in request.headers.getall("X-Stream-Protocol-Version", [])
               for v in value.split(",")]
    chosen = next((p for p in offered if p in PROTOCOLS), None)
    if chosen is None:
        return web.Response(status=403, text=f"unable to upgrade: unable to negotiate protocol: client supports "
                                             f"{offered}, server accepts {list(PROTOCOLS)}")
    transport = request.transport
    if transport is None:
        return web.Response(status=500, text="the connection is gone")
    response = web.StreamResponse(status=101, headers={
        "Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": chosen,
    })
    # aiohttp upgrades only to WebSocket: the bytes after this request would be parsed as HTTP, so they
    # go to our buffer instead (set before the 101 goes out, since the client starts framing on it).
    buffer = _Buffer()
    protocol: Any = request.protocol
    protocol.set_parser(buffer)
    await response.prepare(request)
    session = Session(buffer, transport, options)
    reader = asyncio.create_task(session.read_frames(), name="spdy-exec-reader")
    try:
        await asyncio.wait_for(session.ready.wait(), STREAMS_TIMEOUT)
        if options.stdin:
            await asyncio.wait_for(session.stdin_closed.wait(), STREAMS_TIMEOUT)
        if not session.closed:
            result = await run(bytes(session.stdin))
            out, err = result.stdout, result.stderr
            if options.tty:
                out, err = out + err, b""
            session.write_stream("stdout", out)
            session.write_stream("stderr", err)
            status = streaming.exit_status(options.command, result.exit_code)
            session.write_stream("error", json.dumps(status, separators=(",", ":")).encode())
            session.finish()
            # The client closes once it has read everything; wait for that (or give up after a while).
            await asyncio.wait_for(asyncio.shield(reader), 10.0)
    except (asyncio.TimeoutError, ConnectionError):
        log.info("spdy exec into %s ended early", request.path)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        protocol.force_close()
        transport.close()
    return response
