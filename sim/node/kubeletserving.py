"""The node side's kubelet API: the one log stream and the one exec entrance, served over HTTPS and in-process.

In: ``GET /containerLogs/{namespace}/{pod}/{container}`` (``follow``, ``tailLines``, ``previous``) and
``GET|POST /exec/{namespace}/{pod}/{container}?command=…`` upgraded to WebSocket (passed through
by kube-apiserver to a node that declares ``ExtendWebSocketsToKubelet``) or SPDY/3.1 (what its
StreamTranslator speaks to any other node, and what SPDY clients send through it), from
kube-apiserver to ``https://<node InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>`` of the node
agent's fake nodes (:class:`KubeletServer`); the same calls from the local cluster's API server,
in-process (:class:`LocalKubelet`, the ``KubeletApi`` of sim/apiserver/kubelets.py). Out: the
simulated kubelet's log (:func:`stream_log`) and exec results (:func:`serve_exec`, over
sim/node/streaming.py or sim/node/spdying.py). One endpoint serves every fake node: requests name
the pod, and the kubelet knows where it runs.

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
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from multidict import MultiMapping

from sim import errors, objects
from sim.node import execing, shelling, spdying, streaming
from sim.node import kubelet as sim_kubelet

log = logging.getLogger(__name__)

DECLARED_FEATURES = ["ExtendWebSocketsToKubelet"]
"""What a v1.37 kubelet declares in ``node.status.declaredFeatures`` (its default feature gates)."""
LOG_POLL = 0.1


def advertise(node: dict[str, Any], host: str, port: int) -> None:
    """Point the node's status at this server: InternalIP, kubelet port, declared features."""
    status = node.setdefault("status", {})
    name = objects.metadata(node).get("name", "")
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


async def stream_log(kubelet: sim_kubelet.Kubelet, namespace: str, name: str, container: str | None, *,
                     previous: bool, tail: int | None, follow: bool) -> AsyncGenerator[bytes, None]:
    """The one log stream of the node side, for kube-apiserver (through :class:`KubeletServer`) and for the
    local cluster's API server (through :class:`LocalKubelet`): the log (its last ``tail`` lines) and, with
    ``follow`` (not ``previous``), what is written after, polled every ``LOG_POLL`` seconds — an empty chunk
    at each poll, so a reader may stop on its own terms — until the pod's run here has ended or the process
    container's run has exited (as ``kubectl logs -f`` ends). ``ApiError`` before the first chunk when
    ``previous`` finds no earlier run."""
    text = kubelet.read_log(namespace, name, container, previous)
    if tail is not None:
        lines = text.splitlines(keepends=True)
        text = b"".join(lines[-tail:]) if tail else b""
    yield text
    if not follow or previous:
        return
    sent = len(kubelet.read_log(namespace, name, container))
    seen = False
    while True:
        chunk = kubelet.read_log(namespace, name, container, offset=sent)
        sent += len(chunk)
        yield chunk
        # A pod bound but not yet taken up by the kubelet has not begun: what ends is a run that was seen.
        seen = seen or kubelet.pod(namespace, name) is not None
        if seen and kubelet.finished(namespace, name) or kubelet.process_exited(namespace, name, container):
            yield kubelet.read_log(namespace, name, container, offset=sent)
            return
        await asyncio.sleep(LOG_POLL)


async def serve_exec(request: web.Request, kubelet: sim_kubelet.Kubelet, namespace: str, name: str,
                     container: str, query: MultiMapping[str]) -> web.StreamResponse:
    """The one exec entrance of the node side, the kubelet's ``/exec/{namespace}/{pod}/{container}``: refused
    before the upgrade (plain text, which kube-apiserver relays as it is), or upgraded to WebSocket or SPDY
    and run. ``query`` holds the options in the kubelet's names (``command``, ``input``, ``output``, …)."""
    options = streaming.Options.of(query)
    if not (options.stdin or options.stdout or options.stderr):
        return web.Response(status=400, text="you must specify at least 1 of stdin, stdout, stderr")
    try:
        kubelet.exec_pod(namespace, name, container)
    except execing.ExecRefused as exc:
        return web.Response(status=exc.code, text=exc.text)

    async def run(stdin: bytes) -> shelling.Result:
        try:
            return await kubelet.exec(namespace, name, container, options.command, stdin)
        except execing.ExecRefused as exc:
            return shelling.Result(b"", exc.text.encode() + b"\n", 126)

    if streaming.is_websocket(request):
        return await streaming.serve_websocket(request, options, run)
    if spdying.is_spdy(request):
        return await spdying.serve(request, options, run)
    return web.Response(status=400, text="Upgrade request required")


class LocalKubelet:
    """The kubelet API in-process: what the local cluster's API server proxies logs, exec, evictions and the
    admin's node failures to (``KubeletApi`` of sim/apiserver/kubelets.py)."""

    def __init__(self, kubelet: sim_kubelet.Kubelet) -> None:
        self._kubelet = kubelet

    def stream_log(
        self, namespace: str, name: str, container: str | None, *, previous: bool, tail: int | None, follow: bool,
    ) -> AsyncGenerator[bytes, None]:
        return stream_log(self._kubelet, namespace, name, container, previous=previous, tail=tail, follow=follow)

    async def serve_exec(self, request: web.Request, namespace: str, name: str, container: str,
                         query: MultiMapping[str]) -> web.StreamResponse:
        return await serve_exec(request, self._kubelet, namespace, name, container, query)

    async def evict(self, namespace: str, name: str) -> None:
        await self._kubelet.evict(namespace, name)

    async def fail_node(self, name: str) -> None:
        await self._kubelet.fail_node(name)

    async def recover_node(self, name: str) -> None:
        await self._kubelet.recover_node(name)


class KubeletServer:
    """``await start()`` → port; ``stop()`` is safe twice."""

    def __init__(self, kubelet: sim_kubelet.Kubelet, host: str = "127.0.0.1", port: int = 0) -> None:
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
        return await serve_exec(request, self.kubelet, info["namespace"], info["pod"], info["container"], request.query)

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        namespace, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        pod = self.kubelet.pod(namespace, name)
        if pod is None:
            return web.Response(status=404, text=f'pod "{name}" does not exist\n')
        spec = pod.get("spec") or {}
        if container not in [c.get("name") for key in ("initContainers", "containers") for c in spec.get(key) or []]:
            return web.Response(status=404, text=f'container "{container}" not found in pod "{name}"\n')
        tail = request.query.get("tailLines")
        follow = request.query.get("follow") in ("true", "1")
        previous = request.query.get("previous") in ("true", "1")
        chunks = stream_log(self.kubelet, namespace, name, container, previous=previous,
                            tail=int(tail) if tail is not None and tail.isdigit() else None, follow=follow)
        try:
            text = await anext(chunks)
        except errors.ApiError as exc:
            return web.Response(status=exc.code, text=exc.message + "\n")
        if not follow or previous:
            return web.Response(body=text, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        try:
            await response.write(text)
            async for chunk in chunks:
                if chunk:
                    await response.write(chunk)
        except ConnectionError:
            return response
        finally:
            await chunks.aclose()
        await response.write_eof()
        return response
