"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

In: a state directory. Out: :class:`ControlPlane`, started with ``async with``;
``kubeconfig`` (token auth over TLS, one context), ``url``, and the
processes (:class:`supervising.processes.Process`), each in a session of its own
with its output in ``<state-dir>/logs/<name>.log``. Nodes are not part of it: ``sim.node.nodeagent``
registers fake GPU nodes against it and runs their pods.

The binaries come from :func:`ensure_binaries`: one ``go build`` of the
published ``k8s.io/kubernetes`` module (its staging modules replaced by their
published ``v0.N.x`` versions, the usual way to consume it as a module) and
of etcd's server (``go.etcd.io/etcd/server/v3/etcdmain``, the version
Kubernetes itself pins), cached per machine by version in ``~/.cache/kto``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import pathlib
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import yaml

from realparts import caching, ports
from shared import lifecycle
from supervising import processes

KUBERNETES_VERSION = "v1.37.2"
"""The pinned Kubernetes release (``k8s.io/kubernetes`` on the Go module proxy)."""

STAGING_VERSION = "v0.37.2"
"""The published version of every staging module (``k8s.io/api`` …) of that release."""

ETCD_VERSION = "v3.7.0"
"""etcd's server module, the version ``k8s.io/kubernetes`` requires."""

STAGING_MODULES = (
    "api", "apiextensions-apiserver", "apimachinery", "apiserver", "cli-runtime", "client-go",
    "cloud-provider", "cluster-bootstrap", "code-generator", "component-base", "component-helpers",
    "controller-manager", "cri-api", "cri-client", "cri-streaming", "csi-translation-lib",
    "dynamic-resource-allocation", "endpointslice", "externaljwt", "kms", "kube-aggregator",
    "kube-controller-manager", "kube-proxy", "kube-scheduler", "kubectl", "kubelet", "metrics",
    "mount-utils", "pod-security-admission", "sample-apiserver", "sample-cli-plugin",
    "sample-controller", "streaming",
)
"""``k8s.io/kubernetes`` requires these at v0.0.0 and replaces them with ./staging; we use the published ones."""

VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
"""Where a Kubernetes binary keeps the version it reports (set at link time, as the release build does)."""

BUILD_REVISION = 2
"""Bumped when the build recipe changes, so a cache made by an older recipe is not used."""

BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")

SERVICE_CIDR = "10.96.0.0/16"

ETCD_BIND_ATTEMPTS = 3
"""Starts of a new etcd, each on ports chosen anew, when the last one's port was taken first."""

ADMIN = "kto-admin"
"""The user of ``kubeconfig`` (what kubectl, tests and kto's services use)."""

USERS = (ADMIN, "kube-controller-manager", "kube-scheduler", "kto-node-agent")
"""One token each (all in system:masters), so the audit log tells kto's requests from the cluster's own."""

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: Metadata
"""
"""Every write at Metadata level: the request log tests and ``kto bench`` count kto's writes with."""
START_TIMEOUT = 120.0
"""Seconds the whole control plane may take to become ready (the apiserver's first start on a busy
2-core machine takes ~10-20 s)."""

STOP_TIMEOUT = 10.0
"""Seconds between SIGTERM and SIGKILL when one part is stopped."""


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


def go_mod() -> str:
    """The go.mod of the build module."""
    replaces = "\n".join(f"\tk8s.io/{name} => k8s.io/{name} {STAGING_VERSION}" for name in STAGING_MODULES)
    return (
        "module kto.local/kubebuild\n\n"
        "go 1.26.0\n\n"
        f"require (\n\tk8s.io/kubernetes {KUBERNETES_VERSION}\n\tgo.etcd.io/etcd/server/v3 {ETCD_VERSION}\n)\n\n"
        f"replace (\n{replaces}\n)\n"
    )


ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def _build(directory: pathlib.Path) -> None:
    go = caching.require_tool("go", caching.GO_HOW)
    source = directory / "src"
    (source / "etcd").mkdir(parents=True)
    (source / "go.mod").write_text(go_mod())
    (source / "etcd" / "main.go").write_text(ETCD_MAIN)
    env = dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    stamp = {"gitVersion": KUBERNETES_VERSION, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean",
             "buildDate": "1970-01-01T00:00:00Z"}
    version_flags = " ".join(
        f"-X {package}.{name}={value}" for package in VERSION_PACKAGES for name, value in stamp.items()
    )
    command = [
        go, "build", "-trimpath", f"-ldflags=-s -w {version_flags}", "-o", str(directory / "bin") + "/",
        *(f"k8s.io/kubernetes/cmd/{name}" for name in BINARIES if name != "etcd"), "./etcd",
    ]
    caching.run_logged(command, cwd=source, env=env, log_path=directory / "build.log",
                       what=f"go build of Kubernetes {KUBERNETES_VERSION}")
    for name in BINARIES:
        if not (directory / "bin" / name).is_file():
            raise caching.PartError(f"go build of Kubernetes {KUBERNETES_VERSION} made no {name} binary")


def ensure_binaries(*, quiet: bool = False) -> pathlib.Path:
    """The directory holding ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler``, ``etcd``."""
    return caching.cached(f"kube-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}-r{BUILD_REVISION}", _build, quiet=quiet) / "bin"


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


def died(process: processes.Process) -> str:
    """Which part ended, with what code, and the last lines of its log."""
    assert process.command.log is not None
    lines = "\n".join(f"    {line}" for line in processes.tail(process.command.log, 12))
    return f"{process.name} exited with code {process.returncode}; last lines of {process.command.log}:\n{lines}"


def start(process: processes.Process) -> None:
    """Run a part; PartError if its binary cannot be run."""
    try:
        process.start()
    except OSError as exc:
        raise caching.PartError(f"cannot run {process.command.argv[0]}: {exc}") from exc


def check(process: processes.Process) -> None:
    """PartError with the last log lines if the process has ended without being stopped."""
    if process.ended:
        raise caching.PartError(died(process))


def _kubeconfig(url: str, ca: pathlib.Path, token: str, context: str) -> str:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": context, "preferences": {},
        "clusters": [{"name": context, "cluster": {"server": url, "certificate-authority": str(ca)}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": "default"}}],
    }
    return yaml.safe_dump(config, sort_keys=False)


class ControlPlane(lifecycle.Started):
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1.

    ``async with ControlPlane(state_dir) as plane:`` builds the binaries if
    needed, starts them and waits until the API server is ready and the
    ``default`` ServiceAccount exists (pods can be created). The state dir
    keeps etcd's data, the keys and the token, so a control plane started
    again on it (after a stop or a crash) finds every object it had.
    """

    def __init__(
        self, state_dir: pathlib.Path, *, context: str = "kube", port: int = 0,
        crds: Sequence[pathlib.Path] = (),
    ) -> None:
        self.state_dir = state_dir.resolve()
        self._crds = list(crds)
        self.context = context
        self._requested_port = port
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.node_kubeconfig = self.state_dir / "kto-node-agent.kubeconfig"
        """The node agent's own identity (its writes are not kto's in the audit log)."""
        self.audit_log = self.state_dir / "audit.log"
        self.url = ""
        self.processes: dict[str, processes.Process] = {}
        self._token = ""
        self._tokens: dict[str, str] = {}
        self._ports: dict[str, int] = {}

    # -- set-up ----------------------------------------------------------

    def _prepare(self) -> None:
        """Ports, token and service-account key: made once, kept in the state dir for restarts."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "pki").mkdir(exist_ok=True)
        ports_file = self.state_dir / "ports.json"
        if ports_file.is_file():
            self._ports = json.loads(ports_file.read_text())
        else:
            self._ports = {
                "apiserver": self._requested_port or ports.free(),
                "etcd": ports.free(), "etcd-peer": ports.free(),
            }
            ports_file.write_text(json.dumps(self._ports))
        token_file = self.state_dir / "tokens.csv"
        if not token_file.is_file():
            lines = [f"{secrets.token_hex(16)},{user},{user},system:masters\n" for user in USERS]
            token_file.write_text("".join(lines))
            token_file.chmod(0o600)
        self._tokens = {line.split(",")[1]: line.split(",")[0] for line in token_file.read_text().splitlines() if line}
        self._token = self._tokens[ADMIN]
        (self.state_dir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        key = self.state_dir / "pki" / "sa.key"
        if not key.is_file():
            openssl = caching.require_tool("openssl", "install it (apt-get install openssl)")
            result = subprocess.run([openssl, "genrsa", "-out", str(key), "2048"], capture_output=True, check=False)
            if result.returncode != 0:
                raise caching.PartError(f"openssl genrsa failed: {result.stderr.decode(errors='replace').strip()}")
        self.url = f"https://127.0.0.1:{self._ports['apiserver']}"

    async def start(self) -> None:
        binaries = await asyncio.to_thread(ensure_binaries)
        self._prepare()
        for name, port in self._ports.items():
            if ports.in_use(port):
                raise caching.PartError(
                    f"port {port} ({name}) on 127.0.0.1 is in use: stop what holds it or use another --state-dir"
                )
        logs = self.state_dir / "logs"
        pki = self.state_dir / "pki"
        deadline = time.monotonic() + START_TIMEOUT
        etcd_url = await self._start_etcd(binaries, logs, deadline)

        apiserver = self._process("kube-apiserver", [
            str(binaries / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self._ports['apiserver']}",
            f"--cert-dir={pki}",
            f"--token-auth-file={self.state_dir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            # The node agent serves every fake node's kubelet API on 127.0.0.1 (sim/node/kubeletserving.py);
            # the nodes' Hostname addresses (sim-node-<i>) do not resolve. No --kubelet-certificate-authority:
            # its self-signed serving certificate is not verified.
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            "--profiling=false",
            "--enable-priority-and-fairness=false",
            f"--audit-policy-file={self.state_dir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0",
            "--v=1",
        ], logs)
        start(apiserver)
        ca = pki / "apiserver.crt"
        await self._wait(apiserver, deadline, lambda: ca.is_file() and self._ready())
        for user, token in self._tokens.items():
            path = self.kubeconfig if user == ADMIN else self.state_dir / f"{user}.kubeconfig"
            path.write_text(_kubeconfig(self.url, ca, token, self.context))
            path.chmod(0o600)

        # CRDs before the controller manager: its garbage collector discovers resources at start and
        # then only every 30 s, so children of a kind created later are not collected for that long.
        if self._crds:
            await apply_crds(self.kubeconfig, self.context, self._crds, timeout=max(1.0, deadline - time.monotonic()))
        controller_manager = self._process("kube-controller-manager", [
            str(binaries / "kube-controller-manager"),
            f"--kubeconfig={self.state_dir / 'kube-controller-manager.kubeconfig'}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={ca}",
            "--use-service-account-credentials=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*",
            "--concurrent-gc-syncs=10",
            "--v=1",
        ], logs)
        scheduler = self._process("kube-scheduler", [
            str(binaries / "kube-scheduler"),
            f"--kubeconfig={self.state_dir / 'kube-scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ], logs)
        start(controller_manager)
        start(scheduler)
        # Pods are admitted only once the namespace's default ServiceAccount exists (its controller makes it).
        await self._wait(controller_manager, deadline, lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"))
        check(scheduler)

    async def _start_etcd(self, binaries: pathlib.Path, logs: pathlib.Path, deadline: float) -> str:
        """etcd, ready; its client URL. A port chosen free can be taken before etcd binds it (another
        test worker's cluster starting at the same moment): a first start whose bind failed is made
        again on other ports (a restart keeps its ports: the data dir names them)."""
        first = not (self.state_dir / "etcd").exists()
        for attempt in range(ETCD_BIND_ATTEMPTS):
            etcd_url = f"http://127.0.0.1:{self._ports['etcd']}"
            peer_url = f"http://127.0.0.1:{self._ports['etcd-peer']}"
            etcd = self._process("etcd", [
                str(binaries / "etcd"), "--name", "kto", "--data-dir", str(self.state_dir / "etcd"),
                "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"kto={peer_url}", "--log-level", "warn",
                # A test cluster on one disk: losing the last writes on a machine crash is fine.
                "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024**3),
            ], logs)
            start(etcd)
            try:
                await self._wait(etcd, deadline, lambda: _http_ok(f"{etcd_url}/health"))
                return etcd_url
            except caching.PartError as exc:
                if not first or attempt == ETCD_BIND_ATTEMPTS - 1 or "address already in use" not in str(exc):
                    raise
            await etcd.stop(STOP_TIMEOUT)
            shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
            self._ports.update({"etcd": ports.free(), "etcd-peer": ports.free()})
            (self.state_dir / "ports.json").write_text(json.dumps(self._ports))
        raise AssertionError("unreachable")

    def _process(self, name: str, argv: list[str], logs: pathlib.Path) -> processes.Process:
        process = processes.Process(name, processes.Command(tuple(argv), log=logs / f"{name}.log", append=True))
        self.processes[name] = process
        return process

    async def _wait(self, process: processes.Process, deadline: float, ready: object) -> None:
        assert callable(ready)
        while True:
            check(process)
            if await asyncio.to_thread(ready):
                return
            if time.monotonic() > deadline:
                assert process.command.log is not None
                lines = "\n".join(f"    {line}" for line in processes.tail(process.command.log, 12))
                raise caching.PartError(
                    f"{process.name} was not ready within {START_TIMEOUT:g}s; last lines of {process.command.log}:\n{lines}"
                )
            await asyncio.sleep(0.2)

    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.state_dir / "pki" / "apiserver.crt"))

    def _get(self, path: str) -> int:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self._token}"})
        try:
            with urllib.request.urlopen(request, timeout=5, context=self._context()) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, ssl.SSLError):
            return 0

    def _ready(self) -> bool:
        return self._get("/readyz") == 200

    def _exists(self, path: str) -> bool:
        return self._get(path) == 200

    # -- running ---------------------------------------------------------

    def dead(self) -> list[str]:
        """A line (with the last log lines) for each process that has ended."""
        return [died(process) for process in self.processes.values() if process.ended]

    async def stop(self) -> None:
        """Stop everything, the API server's clients first, etcd last; safe twice."""
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            process = self.processes.get(name)
            if process is not None:
                await process.stop(STOP_TIMEOUT)

    async def restart(self, name: str) -> None:
        """Start one stopped or killed process again with the same arguments."""
        process = self.processes[name]
        await process.stop(STOP_TIMEOUT)
        start(process)
        if name == "kube-apiserver":
            await self._wait(process, time.monotonic() + START_TIMEOUT, self._ready)


async def apply_crds(
    kubeconfig: pathlib.Path, context: str, paths: Sequence[pathlib.Path], *, timeout: float = 60.0,
) -> None:
    """Create (or replace) the CRDs in the YAML files ``paths`` and wait until each is Established."""
    from shared.kube import clients, resources

    manifests = []
    for path in paths:
        try:
            manifests += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        except (OSError, yaml.YAMLError) as exc:
            raise caching.PartError(f"cannot read the CRD file {path}: {exc}") from exc
    deadline = time.monotonic() + timeout
    async with await clients.KubeClient.connect(kubeconfig, context) as client:
        for manifest in manifests:
            try:
                await client.create(resources.CRDS, None, manifest)
            except clients.ApiError as exc:
                if not exc.already_exists:
                    raise caching.PartError(f"cannot create the CRD {manifest['metadata']['name']}: {exc}") from exc
                current = await client.get(resources.CRDS, None, manifest["metadata"]["name"])
                body = dict(manifest, metadata=dict(
                    manifest["metadata"], resourceVersion=current["metadata"]["resourceVersion"]))
                await client.replace(resources.CRDS, None, body)
        for manifest in manifests:
            name = manifest["metadata"]["name"]
            while True:
                crd = await client.get(resources.CRDS, None, name)
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise caching.PartError(f"the CRD {name} is not Established after {timeout:g}s")
                await asyncio.sleep(0.05)


def read_audit_log(path: pathlib.Path, user: str = ADMIN) -> list[dict[str, Any]]:
    """The writes ``user`` made, as sim's request log has them (time, verb, resource, namespace, name,
    subresource, code), from kube-apiserver's JSON audit log, oldest first."""
    found: list[dict[str, Any]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return found
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written
        if (event.get("user") or {}).get("username") != user:
            continue
        ref = event.get("objectRef") or {}
        group = ref.get("apiGroup") or ""
        received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        found.append({
            "time": received.timestamp(),
            "verb": event.get("verb"),
            "resource": f"{ref.get('resource')}.{group}" if group else ref.get("resource"),
            "subresource": ref.get("subresource"),
            "namespace": ref.get("namespace"),
            "name": ref.get("name"),
            "code": (event.get("responseStatus") or {}).get("code"),
        })
    return found


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def remove_state(state_dir: pathlib.Path) -> None:
    """Forget a control plane's state (etcd data, keys, ports)."""
    shutil.rmtree(state_dir, ignore_errors=True)
