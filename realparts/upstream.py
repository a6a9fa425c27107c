"""Kubeflow's training-operator, the operator a kto user would otherwise run, for side-by-side benchmarks.

In: the real control plane's kubeconfig (``kto control-plane``: kube-apiserver, the
controllers, kto's fake GPU nodes). Out: :func:`ensure_binary`, one ``go build`` of
``github.com/kubeflow/training-operator/cmd/training-operator.v1`` at
:data:`VERSION` from the Go module proxy into the per-machine cache, and
:class:`TrainingOperator`, that binary running against the cluster as its Deployment
runs it in a real one.

What a pod would give it, given here:

* the webhook serving certificate. The operator's cert rotator writes a CA and
  certificate into the Secret ``training-operator-webhook-cert`` of namespace
  ``kubeflow`` and then waits for the kubelet to mount that Secret at
  ``/tmp/k8s-webhook-server/serving-certs``. There is no kubelet for a local
  process, so :class:`TrainingOperator` copies the Secret's files there.
* the ``ValidatingWebhookConfiguration`` ``validator.training-operator.kubeflow.org``,
  which the rotator must find to inject its CA (or it stops the manager). It is
  registered with no rule that matches a request: there is no Service in front of the
  operator, and kto's bench runs without its own webhook too, so neither side
  validates at admission.

Nothing of the operator is committed: the build module is written at build time.
"""

from __future__ import annotations

import asyncio
import base64
import os
import pathlib
import time
from typing import Any

from realparts import caching, kube, ports
from shared import lifecycle
from shared.kube import clients, resources

VERSION = "v1.8.1"
"""The training-operator release served by the Go module proxy here (the last with ``kubeflow.org/v1`` alone)."""

MODULE = "github.com/kubeflow/training-operator"
PACKAGE = f"{MODULE}/cmd/training-operator.v1"
NAMESPACE = "kubeflow"
"""The operator's namespace (its default, ``MY_POD_NAMESPACE`` unset)."""
CERT_SECRET = "training-operator-webhook-cert"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
CERT_DIR = pathlib.Path("/tmp/k8s-webhook-server/serving-certs")
"""Where the operator reads its webhook certificate (fixed in its code)."""
READY_LINE = "Starting workers"
"""What the operator logs once a controller runs (controller-runtime's log line)."""


def _build(directory: pathlib.Path) -> None:
    go = caching.require_tool("go", "install Go 1.26 or newer (https://go.dev/dl or your distribution's golang package)")
    source = directory / "src"
    source.mkdir(parents=True)
    (source / "go.mod").write_text(f"module kto.local/upstreambuild\n\ngo 1.26.0\n\nrequire {MODULE} {VERSION}\n")
    env = dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")
    for command in ([go, "get", f"{PACKAGE}@{VERSION}"],
                    [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(directory / "training-operator"), PACKAGE]):
        caching.run_logged(command, cwd=source, env=env, log_path=directory / "build.log",
                           what=f"{' '.join(command[:2])} of the training-operator {VERSION}")


def ensure_binary(*, quiet: bool = False) -> pathlib.Path:
    """The ``training-operator`` binary, built once per machine."""
    return caching.cached(f"training-operator-{VERSION}", _build, quiet=quiet) / "training-operator"


WEBHOOK: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": WEBHOOK_CONFIGURATION},
    "webhooks": [{
        "name": "validator.pytorchjob.training-operator.kubeflow.org",
        "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
        "clientConfig": {"service": {"name": "training-operator", "namespace": NAMESPACE, "port": 443}},
        # No request matches: only the operator's CA goes in (see the module docstring).
        "rules": [{"apiGroups": ["kto.dev"], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["nothing"]}],
    }],
}


class TrainingOperator(lifecycle.Started):
    """The training-operator process against one cluster, its output in ``log``; ``pid`` for its CPU."""

    def __init__(self, kubeconfig: pathlib.Path, context: str, log: pathlib.Path, *, threads: int = 1,
                 start_timeout: float = 120.0) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.log = log
        self.threads = threads
        """``--controller-threads`` (upstream's default, 1)."""
        self._start_timeout = start_timeout
        self._process = kube.Process("training-operator", [], log)

    @property
    def pid(self) -> int | None:
        popen = self._process.popen
        return popen.pid if popen is not None else None

    async def start(self) -> None:
        binary = ensure_binary()
        async with await clients.KubeClient.connect(self.kubeconfig, self.context) as client:
            await _create(client, resources.NAMESPACES, None, {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            await _create(client, resources.SECRETS, NAMESPACE, {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": CERT_SECRET, "namespace": NAMESPACE}})
            await _create(client, resources.VALIDATING_WEBHOOK_CONFIGURATIONS, None, WEBHOOK)
            self._process.argv = [
                str(binary), f"--kubeconfig={self.kubeconfig}", "--enable-scheme=pytorchjob",
                f"--controller-threads={self.threads}",
                f"--metrics-bind-address=127.0.0.1:{ports.free()}",
                f"--health-probe-bind-address=127.0.0.1:{ports.free()}", f"--webhook-server-port={ports.free()}",
            ]
            self.log.unlink(missing_ok=True)
            self._process.start()
            deadline = time.monotonic() + self._start_timeout
            mounted = False
            while READY_LINE not in _text(self.log):
                self._process.check()
                if time.monotonic() > deadline:
                    raise caching.PartError(f"the training-operator did not start its controller within "
                                            f"{self._start_timeout:g}s; last lines of {self.log}: "
                                            + " | ".join(kube.tail(self.log, 6)))
                if not mounted:
                    mounted = await _mount_certificate(client)
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        await self._process.stop()


async def _create(client: clients.KubeClient, rt: resources.ResourceType, namespace: str | None,
                  body: dict[str, Any]) -> None:
    try:
        await client.create(rt, namespace, body)
    except clients.ApiError as exc:
        if not exc.already_exists:
            raise


async def _mount_certificate(client: clients.KubeClient) -> bool:
    """The kubelet's part: the Secret's files in :data:`CERT_DIR`, once the rotator has filled it."""
    secret = await client.get(resources.SECRETS, NAMESPACE, CERT_SECRET)
    data = secret.get("data") or {}
    if not all(name in data for name in ("tls.crt", "tls.key", "ca.crt")):
        return False
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
    return True


def _text(path: pathlib.Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
