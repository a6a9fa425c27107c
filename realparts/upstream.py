"""Kubeflow's training-operator, the operator a kto user would otherwise run, for side-by-side benchmarks.

In: the real control plane's kubeconfig (``kto control-plane``: kube-apiserver, the
controllers, kto's fake GPU nodes). Out: :func:`ensure_binary`, one ``go build`` of
``github.com/kubeflow/training-operator/cmd/training-operator.v1`` at
:data:`VERSION` from the Go module proxy into the per-machine cache, and
:class:`TrainingOperator`, that binary running against the cluster as its Deployment
runs it in a real one, started once its PyTorchJob controller runs.

What a pod would give it, given here:

* the webhook serving certificate. The operator's cert rotator (open-policy-agent's
  cert-controller) writes a CA and certificate into the Secret
  ``training-operator-webhook-cert`` of namespace ``kubeflow``, then waits for the kubelet
  to mount that Secret at ``/tmp/k8s-webhook-server/serving-certs`` (it polls for
  ``tls.crt`` there) and for its CA to be in the webhook configuration; only then does the
  operator set up its job controllers. There is no kubelet for a local process, so
  :class:`TrainingOperator` does the kubelet's part: it watches the Secret for the
  operator's whole life and writes its files there as the kubelet updates a Secret volume
  (a new directory made current by one rename), each time the Secret changes.
* that directory to itself. The path is fixed in the operator's code (v1.8.1 has no flag
  for it; its webhook server reads ``$TMPDIR/k8s-webhook-server/serving-certs``, so the
  operator runs with ``TMPDIR=/tmp``), and every run on the machine would share it, a
  run's files passing for another's. So a run holds an exclusive lock
  (:data:`CERT_LOCK`, ``flock``) on it from before it empties the directory until the
  operator has exited: the lock's file descriptor is handed to the operator, so the lock
  ends with the last of the two. A second run waits for the first to end. (A private
  mount namespace would let runs overlap, but needs CAP_SYS_ADMIN or unprivileged user
  namespaces, which containers and hardened distributions often refuse; a lock works
  for any user anywhere.)
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
import fcntl
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from realparts import caching, controllerruntime, kube, ports
from shared import lifecycle
from shared.kube import clients, resources
from supervising import processes

VERSION = "v1.8.1"
"""The training-operator release served by the Go module proxy here (the last with ``kubeflow.org/v1`` alone)."""

MODULE = "github.com/kubeflow/training-operator"
PACKAGE = f"{MODULE}/cmd/training-operator.v1"
NAMESPACE = "kubeflow"
"""The operator's namespace (its default, ``MY_POD_NAMESPACE`` unset)."""
CERT_SECRET = "training-operator-webhook-cert"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
CERT_DIR = pathlib.Path("/tmp/k8s-webhook-server/serving-certs")
"""Where the operator's cert rotator waits for its webhook certificate (fixed in its code)."""
CERT_LOCK = CERT_DIR.parent / "serving-certs.lock"
"""Held (``flock``) by the run whose operator uses :data:`CERT_DIR`, for the operator's whole life."""
CERT_FILES = ("ca.crt", "tls.crt", "tls.key")
"""The Secret's keys the webhook server needs; the rotator writes them (and ``ca.key``) in one update."""
JOB_CONTROLLER = "pytorchjob-controller"
"""The controller of ``--enable-scheme=pytorchjob``: it runs the jobs. Its ``Starting workers`` line
(:func:`realparts.controllerruntime.workers_started`) says the operator runs jobs; the rotator's own
controller (``cert-rotator``) logs one too, before the certificate is in place."""
START_TIMEOUT = 60.0
"""Seconds from the operator's start to its job controller running. It takes 0.6-2 s on a
two-core machine, also with both cores busy: the rotator fills the Secret, looks for the
files at once and then with a back-off that doubles from 1-2 s, injects its CA, and the
controllers' caches sync. More means it is stuck (a fresh machine's CI run waited for ever)."""
LOCK_TIMEOUT = 600.0
"""Seconds a run waits for another one on the machine to release :data:`CERT_DIR` (a
side-by-side bench of 100 jobs holds it for about two minutes)."""


def _build(directory: pathlib.Path) -> None:
    caching.go_build(directory, module=MODULE, version=VERSION, package=PACKAGE, binary="training-operator",
                     what="the training-operator")


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
    """The training-operator process against one cluster, its output in ``log``; ``pid`` for its CPU.

    ``start`` returns once its PyTorchJob controller runs, or fails within ``start_timeout``
    seconds with the operator's last log lines; ``progress`` hears of a wait for another run."""

    def __init__(self, kubeconfig: pathlib.Path, context: str, log: pathlib.Path, *, threads: int = 1,
                 start_timeout: float = START_TIMEOUT, lock_timeout: float = LOCK_TIMEOUT,
                 progress: Callable[[str], None] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.log = log
        self.threads = threads
        """``--controller-threads`` (upstream's default, 1)."""
        self._start_timeout = start_timeout
        self._lock_timeout = lock_timeout
        self._progress = progress
        self._process: processes.Process | None = None
        self._lock: int | None = None
        self._client: clients.KubeClient | None = None
        self._mirror: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def start(self) -> None:
        binary = ensure_binary()
        self._lock = await _hold(CERT_LOCK, self._lock_timeout, self._progress)
        _empty(CERT_DIR)  # an earlier run's files would pass for this run's
        self._client = client = await clients.KubeClient.connect(self.kubeconfig, self.context)
        await _create(client, resources.NAMESPACES, None, {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        await _create(client, resources.SECRETS, NAMESPACE, {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": CERT_SECRET, "namespace": NAMESPACE}})
        await _create(client, resources.VALIDATING_WEBHOOK_CONFIGURATIONS, None, WEBHOOK)
        argv = (
            str(binary), f"--kubeconfig={self.kubeconfig}", "--enable-scheme=pytorchjob",
            f"--controller-threads={self.threads}",
            f"--metrics-bind-address=127.0.0.1:{ports.free()}",
            f"--health-probe-bind-address=127.0.0.1:{ports.free()}", f"--webhook-server-port={ports.free()}",
        )
        # Its webhook server reads $TMPDIR/k8s-webhook-server/serving-certs, its rotator CERT_DIR.
        env = dict(os.environ, TMPDIR=str(CERT_DIR.parents[1]))
        self.log.unlink(missing_ok=True)
        self._process = process = processes.Process("training-operator", processes.Command(
            argv, log=self.log, append=True, env=env, pass_fds=(self._lock,)))
        kube.start(process)
        _note(self._lock, f"pid {os.getpid()}, training-operator pid {self.pid}")
        self._mirror = asyncio.create_task(_mirror_certificate(client), name="training-operator certificate mirror")
        deadline = time.monotonic() + self._start_timeout
        while not controllerruntime.workers_started(controllerruntime.log_text(self.log), JOB_CONTROLLER):
            kube.check(process)
            if self._mirror.done():  # it runs until cancelled: it failed
                mirror, self._mirror = self._mirror, None
                raise _mirror_failed(mirror.exception())
            if time.monotonic() > deadline:
                raise caching.PartError(f"the training-operator did not start its {JOB_CONTROLLER} within "
                                        f"{self._start_timeout:g}s; last lines of {self.log}: "
                                        + " | ".join(processes.tail(self.log, 8)))
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        """Safe twice; the lock goes last, once the operator is gone and its files with it."""
        failed: BaseException | None = None
        if self._mirror is not None:
            mirror, self._mirror = self._mirror, None
            mirror.cancel()
            await asyncio.wait([mirror])
            failed = None if mirror.cancelled() else mirror.exception()
        if self._process is not None:
            process, self._process = self._process, None
            await process.stop(kube.STOP_TIMEOUT)
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            _empty(CERT_DIR)
            os.close(lock)
        if failed is not None:
            raise _mirror_failed(failed)


def _mirror_failed(error: BaseException | None) -> caching.PartError:
    failure = caching.PartError(f"mirroring the Secret {NAMESPACE}/{CERT_SECRET} into {CERT_DIR} failed: {error!r}")
    failure.__cause__ = error
    return failure


async def _create(client: clients.KubeClient, rt: resources.ResourceType, namespace: str | None,
                  body: dict[str, Any]) -> None:
    try:
        await client.create(rt, namespace, body)
    except clients.ApiError as exc:
        if not exc.already_exists:
            raise


async def _hold(path: pathlib.Path, timeout: float, progress: Callable[[str], None] | None) -> int:
    """An exclusive ``flock`` on ``path``, waited for up to ``timeout`` seconds: its file
    descriptor, this process's pid written in it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "pid unknown"
                if time.monotonic() > deadline:
                    raise caching.PartError(
                        f"another training-operator run ({holder}) has held {CERT_DIR}, the operator's "
                        f"fixed certificate path, for over {timeout:g}s; let it finish first") from None
                if progress is not None and not told:
                    progress(f"waiting for the training-operator run of {holder} to end "
                             f"(the operator's certificate path {CERT_DIR} is one per machine)")
                    told = True
                await asyncio.sleep(0.25)
        _note(fd, f"pid {os.getpid()}")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _note(lock: int, holder: str) -> None:
    """Who holds ``lock``, for whoever waits for it."""
    os.ftruncate(lock, 0)
    os.pwrite(lock, f"{holder}\n".encode(), 0)


def _empty(directory: pathlib.Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)


async def _mirror_certificate(client: clients.KubeClient) -> None:
    """The kubelet's part, until cancelled: the Secret's files in :data:`CERT_DIR` once the
    rotator has filled it, and again each time it changes (a later write of the rotator is
    mirrored, as the kubelet mirrors it)."""
    mirrored = ""
    while True:
        try:
            secret = await client.get(resources.SECRETS, NAMESPACE, CERT_SECRET)
            mirrored = _sync(secret, mirrored)
            since = str((secret.get("metadata") or {}).get("resourceVersion") or "")
            events = client.watch(resources.SECRETS, NAMESPACE, since, timeout_seconds=60)
            try:
                async for event in events:
                    if event.type != "DELETED" and (event.object.get("metadata") or {}).get("name") == CERT_SECRET:
                        mirrored = _sync(event.object, mirrored)
            finally:
                # Closed now, also when cancelled, so its connection goes back before the client closes.
                close = getattr(events, "aclose", None)
                if close is not None:
                    await asyncio.shield(close())
        except clients.ApiError as exc:
            if not (exc.gone or exc.retriable):
                raise
            await asyncio.sleep(0.5)  # then read it afresh


def _sync(secret: Mapping[str, Any], mirrored: str) -> str:
    """Write ``secret``'s files unless it is the version ``mirrored`` or not filled yet; the version on disk."""
    version = str((secret.get("metadata") or {}).get("resourceVersion") or "")
    data = secret.get("data") or {}
    if version == mirrored or not all(name in data for name in CERT_FILES):
        return mirrored
    project(CERT_DIR, {name: base64.b64decode(value) for name, value in data.items()})
    return version


def project(directory: pathlib.Path, files: Mapping[str, bytes]) -> None:
    """``files`` in ``directory`` as the kubelet updates a Secret volume: written into a new
    directory, made current by one rename of the ``..data`` link, each name a link through
    it; a reader sees the old set or the new, never half of each. ``tls.crt``, which the
    rotator polls for, is linked last."""
    directory.mkdir(parents=True, exist_ok=True)
    fresh = pathlib.Path(tempfile.mkdtemp(prefix="..", dir=directory))
    for name, content in files.items():
        (fresh / name).write_bytes(content)
    current, staged = directory / "..data", directory / "..data_tmp"
    previous = os.readlink(current) if current.is_symlink() else None
    staged.unlink(missing_ok=True)
    staged.symlink_to(fresh.name)
    staged.rename(current)
    for name in sorted(files, key=lambda n: n == "tls.crt"):
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(pathlib.Path("..data") / name)
    for link in directory.iterdir():
        if link.is_symlink() and not link.name.startswith("..") and link.name not in files:
            link.unlink()
    if previous is not None:
        shutil.rmtree(directory / previous, ignore_errors=True)
