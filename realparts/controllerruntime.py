"""What kto reads of a controller-runtime manager's output: the training-operator and the JobSet
controller both are one, logging in zap's development format (one line per entry, its fields a
JSON object after the message); Kueue is one too, in zap's JSON format (the line is the object),
its controllers named by ``logger`` (its log processor drops controller-runtime's ``controller``).

And what running one outside a cluster as its installation runs it inside takes (the JobSet
controller, Kueue): its manifests read, its webhooks called by URL with kto's certificates, its
CRDs Established, its readiness probe, its objects removed when it stops."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import pathlib
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import yaml

from realparts import caching, certifying, kube
from shared import lifecycle
from shared.kube import clients, resources
from supervising import processes

READY_LINE = "Starting workers"
"""What controller-runtime logs once a controller runs (after its caches have synced)."""


def workers_started(log: str, controller: str) -> bool:
    """Whether ``controller``'s :data:`READY_LINE` is in ``log``."""
    for line in log.splitlines():
        if READY_LINE not in line or "{" not in line:
            continue
        try:
            fields = json.loads(line[line.index("{"):])
        except ValueError:
            continue
        if isinstance(fields, dict) and controller in (fields.get("controller"), fields.get("logger")):
            return True
    return False


LEADING_LINE = "successfully acquired lease"
"""What client-go's leader election logs (klog, any case) once the manager leads."""


def leads(log: str) -> bool:
    """Whether the manager has won its lease: Kueue starts its controllers before (as a follower,
    they do not admit), so a started controller alone does not mean it serves."""
    return LEADING_LINE in log.lower()


def context_kubeconfig(kubeconfig: pathlib.Path, context: str, written: pathlib.Path) -> pathlib.Path:
    """``kubeconfig`` with ``context`` its current context, written to ``written`` (mode 0600: it
    holds the credentials): a controller-runtime manager takes ``--kubeconfig`` and no context, so
    one given a kubeconfig of several clusters would serve its current context's."""
    config = yaml.safe_load(kubeconfig.read_text()) or {}
    base = kubeconfig.resolve().parent
    for entry in [*(config.get("clusters") or []), *(config.get("users") or [])]:
        for body in (entry.get("cluster"), entry.get("user")):
            for field in ("certificate-authority", "client-certificate", "client-key", "tokenFile"):
                if isinstance(body, dict) and field in body:  # relative paths stay right from another directory
                    body[field] = str(base / body[field])
    config["current-context"] = context
    certifying.write_private(written, yaml.safe_dump(config, sort_keys=False).encode())
    return written


def log_text(path: pathlib.Path) -> str:
    """The log so far; empty before the process has written it."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------
# Running one as its installation does (the JobSet controller, Kueue)
# --------------------------------------------------------------------------


Object = tuple[resources.ResourceType, str | None, str]
"""One object of a cluster: its resource type, namespace (None: cluster-scoped) and name."""


def manifests(directory: pathlib.Path, pattern: str = "*.yaml") -> list[dict[str, Any]]:
    """Every document of the YAML files ``pattern`` in ``directory``, in the files' order."""
    return [doc for path in sorted(directory.glob(pattern)) for doc in yaml.safe_load_all(path.read_text()) if doc]


def webhooks_at(manifest: Mapping[str, Any], name: str, webhooks: list[dict[str, Any]], url: str,
                ca: bytes) -> dict[str, Any]:
    """``manifest`` (a webhook configuration of upstream's) named ``name`` with ``webhooks``, each
    calling ``url`` + its Service path with ``ca`` as its CA bundle: the webhooks of a process
    outside the cluster, which kube-apiserver reaches by URL (no Service, no loopback Endpoints)."""
    bundle = base64.b64encode(ca).decode()
    called = []
    for webhook in webhooks:
        path = webhook["clientConfig"]["service"]["path"]
        called.append(dict(webhook, clientConfig={"url": f"{url}{path}", "caBundle": bundle}))
    return dict(manifest, metadata={"name": name}, webhooks=called)


def serving_certs(authority: certifying.Authority, directory: pathlib.Path, name: str) -> pathlib.Path:
    """``directory`` with ``tls.crt`` and ``tls.key``, a server certificate for 127.0.0.1 signed by
    ``authority``: the ``certDir`` a controller-runtime webhook server reads."""
    issued = authority.issue(name, server=True)
    directory.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(issued.cert, directory / "tls.crt")
    shutil.copyfile(issued.key, directory / "tls.key")
    return directory


async def apply_crds(client: clients.KubeClient, crds: list[dict[str, Any]], timeout: float) -> None:
    """Create or replace ``crds``; return once each is Established (a PartError after ``timeout``)."""
    for crd in crds:
        await client.put(resources.CRDS, None, crd)
    deadline = time.monotonic() + timeout
    for name in [crd["metadata"]["name"] for crd in crds]:
        while not any(c.get("type") == "Established" and c.get("status") == "True" for c in (
                (await client.get(resources.CRDS, None, name)).get("status") or {}
        ).get("conditions") or []):
            if time.monotonic() > deadline:
                raise caching.PartError(f"the CRD {name} is not Established after {timeout:g}s")
            await asyncio.sleep(0.05)


def ready(port: int) -> bool:
    """The manager's ``/readyz`` on 127.0.0.1:``port``: true once its webhook server serves."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def delete_all(kubeconfig: pathlib.Path, context: str, failed: list[BaseException],
                     *objects: Object) -> None:
    """Delete ``objects`` (those already gone are fine); an error is added to ``failed`` instead of
    raised, so a stop goes on to stop the process when the cluster is gone first."""
    try:
        async with await clients.KubeClient.connect(kubeconfig, context) as client:
            for rt, namespace, name in objects:
                try:
                    await client.delete(rt, namespace, name)
                except clients.ApiError as exc:
                    if not exc.not_found:
                        raise
    except Exception as exc:  # the cluster gone first: the process must still stop
        failed.append(exc)


@dataclasses.dataclass(frozen=True)
class Installation:
    """What a controller's installation puts on a cluster, as :class:`LocalManager` runs it."""

    what: str
    """The controller in messages (``the JobSet controller``)."""
    binary: str
    """The binary in the build directory; its log is ``<binary>.log``."""
    namespace: str
    """The installation's namespace (its leader-election lease lives there)."""
    mutating: str
    validating: str
    """The names of its webhook configurations."""
    lease: str
    """Its leader-election lease in ``namespace``."""
    controller: str
    """The controller whose workers running mark the manager started (its name in the log)."""

    @property
    def webhook_objects(self) -> tuple[Object, Object]:
        """Its mutating and validating webhook configurations."""
        return ((resources.MUTATING_WEBHOOK_CONFIGURATIONS, None, self.mutating),
                (resources.VALIDATING_WEBHOOK_CONFIGURATIONS, None, self.validating))

    @property
    def lease_object(self) -> Object:
        return resources.LEASES, self.namespace, self.lease


class LocalManager(lifecycle.Started):
    """A controller-runtime manager run as a local process against one cluster, as its
    installation runs it in a pod; its state in ``directory``, its output in :attr:`log`.

    A subclass's ``start`` writes the configuration and calls :meth:`_launch`, which applies the
    namespace and CRDs, registers the webhooks and returns once the manager leads, the controller
    runs and its readiness probe (and ``answers``, if given) pass, or fails within ``start_timeout`` seconds
    with the last log lines. ``stop`` removes the webhook configurations (with ``failurePolicy:
    Fail`` they refuse what they serve while nothing answers them), then the process, then its
    lease; the CRDs and the objects stay."""

    def __init__(self, installation: Installation, kubeconfig: pathlib.Path, context: str,
                 directory: pathlib.Path, start_timeout: float) -> None:
        self.installation = installation
        self.kubeconfig = kubeconfig
        self.context = context
        self.directory = directory
        self.log = directory / f"{installation.binary}.log"
        self._start_timeout = start_timeout
        self._process: processes.Process | None = None
        self._registered = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def died(self) -> str | None:
        """Why the process ended without being stopped (with its last log lines), or None."""
        return kube.died(self._process) if self._process is not None and self._process.ended else None

    def _certificates(self, name: str) -> tuple[bytes, pathlib.Path]:
        """A CA of this run's own (its PEM) and the webhook server's ``certDir`` signed by it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        authority = certifying.Authority(self.directory / "pki", f"kto {name} webhook CA")
        return authority.cert.read_bytes(), serving_certs(authority, self.directory / "certs", f"{name}-webhook")

    async def _launch(self, crds: list[dict[str, Any]], webhooks: list[dict[str, Any]], argv: Sequence[str],
                      probe_port: int,
                      answers: Callable[[clients.KubeClient], Awaitable[bool]] | None = None) -> None:
        """Apply, register and run ``argv`` (the binary and its flags; ``--kubeconfig`` of
        :attr:`context` alone is added) until it leads and serves, as the class docstring says."""
        what = self.installation
        deadline = time.monotonic() + self._start_timeout
        async with await clients.KubeClient.connect(self.kubeconfig, self.context) as client:
            await client.put(resources.NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": what.namespace}})
            await apply_crds(client, crds, self._start_timeout)
            self._registered = True
            for manifest in webhooks:
                await client.put(resources.for_manifest(manifest), None, manifest)
            kubeconfig = context_kubeconfig(self.kubeconfig, self.context, self.directory / "kubeconfig")
            env = dict(os.environ, KUBECONFIG=str(kubeconfig))
            argv = (argv[0], f"--kubeconfig={kubeconfig}", *argv[1:])
            self._process = process = processes.Process(what.binary, processes.Command(argv, log=self.log, env=env))
            kube.start(process)
            while not (leads(text := log_text(self.log)) and workers_started(text, what.controller)
                       and ready(probe_port) and (answers is None or await answers(client))):
                kube.check(process)
                if time.monotonic() > deadline:
                    raise caching.PartError(f"{what.what} did not start within {self._start_timeout:g}s; "
                                            f"last lines of {self.log}: " + " | ".join(processes.tail(self.log, 8)))
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        """Safe twice: the webhook configurations go first, then the process, then its lease (as
        controller-runtime's release-on-cancel does, where upstream turns it on, and JobSet's does
        not: a controller started next on the cluster would wait out the lease's 15 s). The process
        is stopped also when the cluster no longer answers; then the first such error is raised."""
        what = self.installation
        failed: list[BaseException] = []
        if self._registered:
            self._registered = False
            await delete_all(self.kubeconfig, self.context, failed, *what.webhook_objects)
        if self._process is not None:
            process, self._process = self._process, None
            await process.stop(kube.STOP_TIMEOUT)
            await delete_all(self.kubeconfig, self.context, failed, what.lease_object)
        if failed:
            raise caching.PartError(f"cleaning up after {what.what} on {self.context}: {failed[0]!r}")
