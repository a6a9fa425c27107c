"""The remote-command protocol of ``pods/exec``, server side, over WebSocket (and the shared bits of SPDY).

In: an upgrade request for ``…/exec`` — the kubelet's ``/exec/{ns}/{pod}/{container}``
of the node agent, or the local cluster's ``pods/{name}/exec`` handed to the node side
(sim/node/kubeletserving.py) — its options in the kubelet's names, and a function
that runs the command. Out: the WebSocket channel protocol kubectl ≥ 1.30 and client-go speak
(subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io``): binary messages whose
first byte is the channel — 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize — and, in v5,
255 followed by a channel number to half-close it. The error channel carries one
``metav1.Status``: ``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the
exit code as a cause ``{"reason": "ExitCode", "message": "<n>"}`` (as
k8s.io/apimachinery's ``util/remotecommand`` and client-go's ``errorDecoderV4`` read it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import WSMsgType, web
from multidict import MultiMapping

from sim.node import shelling

log = logging.getLogger(__name__)

WEBSOCKET_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE = 255
"""v5: a message ``[255, channel]`` half-closes that channel."""
CHUNK = 32 * 1024
V4_STDIN_WAIT = 0.3
"""Seconds a v4 client (no half-close) is given to send its stdin before the command runs."""

Runner = Callable[[bytes], Awaitable[shelling.Result]]
"""Runs the exec's command with the given stdin."""


def _flag(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "") in ("1", "true", "True", "TRUE", "t", "T")


@dataclasses.dataclass(frozen=True)
class Options:
    """The streams an exec asks for (``remotecommand.Options`` of the kubelet)."""

    command: list[str]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def of(cls, query: MultiMapping[str]) -> Options:
        """From the kubelet's query: ``command`` and ``input``, ``output``, ``error``, ``tty`` (api.Exec*Param,
        what kube-apiserver forwards for its own ``stdin``, ``stdout``, ``stderr``, ``tty``)."""
        return cls(
            command=list(query.getall("command", [])),
            stdin=_flag(query, "input"),
            stdout=_flag(query, "output"),
            stderr=_flag(query, "error"),
            tty=_flag(query, "tty"),
        )


def exit_status(command: list[str], exit_code: int) -> dict[str, Any]:
    """The error-stream Status of a finished command, as the kubelet's runtime writes it."""
    if exit_code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: error executing command "
                   f"[{' '.join(command)}], exit code {exit_code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
    }


def is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def offered_protocol(request: web.Request) -> str | None:
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    return next((p for p in offered if p in WEBSOCKET_PROTOCOLS), None)


async def serve_websocket(request: web.Request, options: Options, run: Runner) -> web.StreamResponse:
    """Upgrade, collect stdin (if asked for), run, send stdout, stderr and the status; then close."""
    if offered_protocol(request) is None:
        offered = request.headers.get("Sec-WebSocket-Protocol", "")
        return web.Response(status=400, text=f"requested protocol(s) are not supported: [{offered}]; "
                                             f"supports [{' '.join(WEBSOCKET_PROTOCOLS)}]\n")
    ws = web.WebSocketResponse(protocols=WEBSOCKET_PROTOCOLS, autoping=True, max_msg_size=0)
    await ws.prepare(request)
    v5 = ws.ws_protocol == WEBSOCKET_PROTOCOLS[0]
    try:
        # Tells the client the streams are set up: an empty message on the lowest writable channel.
        first = STDOUT if options.stdout else STDERR if options.stderr else ERROR
        await ws.send_bytes(bytes([first]))
        stdin = await _read_stdin(ws, v5) if options.stdin else b""
        result = await run(stdin)
        out, err = result.stdout, result.stderr
        if options.tty:
            out, err = out + err, b""
        for channel, data, wanted in ((STDOUT, out, options.stdout), (STDERR, err, options.stderr)):
            if not wanted:
                continue
            for start in range(0, len(data), CHUNK):
                await ws.send_bytes(bytes([channel]) + data[start:start + CHUNK])
        status = exit_status(options.command, result.exit_code)
        await ws.send_bytes(bytes([ERROR]) + json.dumps(status, separators=(",", ":")).encode())
    except (ConnectionResetError, ConnectionError):
        return ws
    await ws.close()
    return ws


async def _read_stdin(ws: web.WebSocketResponse, v5: bool) -> bytes:
    data = bytearray()
    while True:
        try:
            message = await (ws.receive() if v5 else ws.receive(timeout=V4_STDIN_WAIT))
        except asyncio.TimeoutError:
            return bytes(data)
        if message.type != WSMsgType.BINARY:
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return bytes(data)
            continue
        payload: bytes = message.data
        if not payload:
            continue
        if v5 and payload[0] == CLOSE and payload[1:] == bytes([STDIN]):
            return bytes(data)
        if payload[0] == STDIN:
            data += payload[1:]
