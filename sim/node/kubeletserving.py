"""The kubelet's HTTPS API for the node agent's fake nodes: what kube-apiserver proxies ``pods/log`` and ``pods/exec`` to.

In: requests from kube-apiserver to ``https://<node InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>``
— ``GET /containerLogs/{namespace}/{pod}/{container}`` (``follow``, ``tailLines``) and
``GET|POST /exec/{namespace}/{pod}/{container}?command=…`` upgraded to WebSocket (passed through
by kube-apiserver to a node that declares ``ExtendWebSocketsToKubelet``) or SPDY/3.1 (what its
StreamTranslator speaks to any other node, and what SPDY clients send through it). Out: the
simulated kubelet's log text and exec results (sim/node/execing.py, sim/node/streaming.py, sim/node/spdying.py).
One endpoint serves every fake node: requests name the pod, and the kubelet knows where it runs.

TLS with a self-signed serving certificate made at start: kube-apiserver started without
``--kubelet-certificate-authority`` does not verify kubelets. Client certificates are not asked
for (a real kubelet would authenticate and authorise the API server; on loopback nothing else
calls).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import pathlib
import ssl
import tempfile
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sim import errors
from sim.node import execing

log = logging.getLogger(__name__)

DECLARED_FEATURES = ["ExtendWebSocketsToKubelet"]
"""What a v1.37 kubelet declares in ``node.status.declaredFeatures`` (its default feature gates)."""
LOG_POLL = 0.1


def advertise(node: dict[str, Any], host: str, port: int) -> None:
    """Point the node's status at this server: InternalIP, kubelet port, declared features."""
    status = node.setdefault("status", {})
    name = (node.get("metadata") or {}).get("name", "")
    status["addresses"] = [{"type": "InternalIP", "address": host}, {"type": "Hostname", "address": name}]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": port}}
    status["declaredFeatures"] = list(DECLARED_FEATURES)


def _certificate(host: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kto-node-agent")])
    now = dt.datetime.now(dt.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host)),
                                                    x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _ssl_context(host: str) -> ssl.SSLContext:
    cert, key = _certificate(host)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_alpn_protocols(["http/1.1"])
    with tempfile.TemporaryDirectory(prefix="kto-kubelet-") as directory:
        cert_path, key_path = pathlib.Path(directory) / "tls.crt", pathlib.Path(directory) / "tls.key"
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        context.load_cert_chain(cert_path, key_path)
    return context


class KubeletServer:
    """``await start()`` → port; ``stop()`` is safe twice."""

    def __init__(self, kubelet: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.kubelet = kubelet
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        self.app.router.add_route("GET", "/exec/{namespace}/{pod}/{container}", self._exec)
        self.app.router.add_route("POST", "/exec/{namespace}/{pod}/{container}", self._exec)

    async def start(self) -> int:
        context = await asyncio.to_thread(_ssl_context, self.host)
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=context, reuse_address=True)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return await execing.serve_kubelet(request, self.kubelet, info["namespace"], info["pod"], info["container"])

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        pod = self.kubelet.pod(namespace, name)
        if pod is None:
            return web.Response(status=404, text=f'pod "{name}" does not exist\n')
        spec = pod.get("spec") or {}
        if container not in [c.get("name") for key in ("initContainers", "containers") for c in spec.get(key) or []]:
            return web.Response(status=404, text=f'container "{container}" not found in pod "{name}"\n')
        tail = request.query.get("tailLines")
        previous = request.query.get("previous") in ("true", "1")
        try:
            text = self.kubelet.read_log(namespace, name, container, previous)
        except errors.ApiError as exc:
            return web.Response(status=exc.code, text=exc.message + "\n")
        if tail is not None and tail.isdigit():
            lines = text.splitlines(keepends=True)
            text = b"".join(lines[-int(tail):]) if int(tail) else b""
        if request.query.get("follow") not in ("true", "1") or previous:
            return web.Response(body=text, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(text)
        sent = len(self.kubelet.read_log(namespace, name, container))
        try:
            while True:
                chunk = self.kubelet.read_log(namespace, name, container, offset=sent)
                if chunk:
                    await response.write(chunk)
                    sent += len(chunk)
                if self.kubelet.finished(namespace, name) or self.kubelet.process_exited(namespace, name, container):
                    chunk = self.kubelet.read_log(namespace, name, container, offset=sent)
                    if chunk:
                        await response.write(chunk)
                    break
                await asyncio.sleep(LOG_POLL)
        except (ConnectionResetError, ConnectionError):
            return response
        await response.write_eof()
        return response
