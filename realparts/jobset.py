"""The real JobSet controller, as Kubeflow Trainer v2's own installation runs it.

In: the real control plane's kubeconfig (``kto control-plane``: kube-apiserver,
kube-controller-manager, which runs the Jobs, and kto's node agent, which runs their pods).
Out: :func:`ensure_build`, one ``go build`` of ``sigs.k8s.io/jobset`` at :data:`VERSION`
(its ``main.go`` at the module root) from the Go module proxy into the per-machine cache,
beside the module's own CRD and webhook manifests; and :class:`JobSetController`, that
binary running against the cluster as its Deployment runs it, started once its JobSet
controller runs and its webhooks answer.

What its Deployment gives it, given here:

* its CRD (``config/components/crd/bases``) and namespace (``jobset-system``), applied;
* its configuration file (``controller_manager_config.yaml``: leader election on, as upstream)
  with the lease in ``jobset-system`` (a process outside a pod must be told the namespace);
* its webhooks: the mutating and validating JobSet webhooks and the pod webhooks, from the
  module's ``config/components/webhook`` (its pod webhooks with the kustomize patches' object
  selector, so only JobSet pods go through them), registered as upstream does with
  ``failurePolicy: Fail``. They point at ``https://127.0.0.1:<port>``: there is no Service in
  front of a local process, and kube-apiserver refuses a loopback address in Endpoints.
  So internal cert management (open-policy-agent's cert-controller, on in upstream's
  Deployment) is off through the configuration file: the certificates it makes name only
  the Service (``jobset-webhook-service.jobset-system.svc``), which a call to 127.0.0.1
  would not verify against. kto's certificates (realparts/certifying.py: a CA of the run's
  own and a server certificate for 127.0.0.1) are given instead: the webhook server reads
  them from the ``certDir`` of the configuration file (a directory of the run's own, so
  runs never share it, unlike the training-operator's fixed path), and the CA goes in the
  configurations' ``caBundle``.

Nothing of the controller is committed: the build module is written at build time and
the manifests come from the module the Go module proxy serves.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import yaml

from realparts import caching, certifying, controllerruntime, kube, ports
from shared import lifecycle
from shared.kube import clients, resources
from supervising import processes

VERSION = "v0.12.0"
"""The JobSet release Kubeflow Trainer v2.3.0 installs."""

MODULE = "sigs.k8s.io/jobset"
NAMESPACE = "jobset-system"
"""The controller's namespace in upstream's installation (its leader-election lease lives there)."""
BINARY = "jobset-controller"
CRD_DIR = "crd"
"""Where the build keeps the module's ``config/components/crd/bases``."""
WEBHOOK_DIR = "webhook"
"""Where the build keeps the module's ``config/components/webhook`` (manifests and patches)."""
BUILD_REVISION = 1
"""Bumped when the build recipe changes, so a cache made by an older recipe is not used."""

CONTROLLER = "jobset"
"""The JobSet controller's name in controller-runtime's log lines (its pod controller is ``pod``)."""
START_TIMEOUT = 60.0
"""Seconds from the start to the JobSet controller running and its webhooks answering."""
MUTATING = "jobset-mutating-webhook-configuration"
VALIDATING = "jobset-validating-webhook-configuration"
"""The webhook configurations' names in upstream's installation (kustomize's ``jobset-`` prefix)."""
LEASE = "6d4f6a47.jobset.x-k8s.io"
"""The controller's leader-election lease (its default ``resourceName``) in :data:`NAMESPACE`."""


def _build(directory: pathlib.Path) -> None:
    caching.go_build(directory, module=MODULE, version=VERSION, package=MODULE, binary=BINARY,
                     what="the JobSet controller")
    go = caching.require_tool("go", caching.GO_HOW)
    found = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], cwd=directory / "src",
                           capture_output=True, check=False)
    if found.returncode != 0:
        raise caching.PartError(f"go mod download of {MODULE}@{VERSION} failed: "
                                f"{found.stderr.decode(errors='replace').strip()}")
    module = pathlib.Path(json.loads(found.stdout)["Dir"]) / "config" / "components"
    shutil.copytree(module / "crd" / "bases", directory / CRD_DIR)
    shutil.copytree(module / "webhook", directory / WEBHOOK_DIR)
    for copied in (directory / CRD_DIR, directory / WEBHOOK_DIR):  # the module cache's files are read-only
        for path in [copied, *copied.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(directory / "src")


def ensure_build(*, quiet: bool = False) -> pathlib.Path:
    """The build directory: the ``jobset-controller`` binary, ``crd/`` and ``webhook/``; built once per machine."""
    return caching.cached(f"jobset-{VERSION}-r{BUILD_REVISION}", _build, quiet=quiet)


def crds(build: pathlib.Path) -> list[dict[str, Any]]:
    """The module's CRD (JobSet), as its installation applies it."""
    return [doc for path in sorted((build / CRD_DIR).glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
            if doc]


def webhook_configurations(build: pathlib.Path, url: str, ca: bytes) -> list[dict[str, Any]]:
    """The module's mutating and validating webhook configurations as its installation makes them:
    kustomize's ``jobset-`` names, the pod webhooks replaced by the patches' (with their object
    selector), each webhook calling ``url`` + its path with ``ca`` as the CA bundle."""
    manifests = {doc["kind"]: doc for doc in yaml.safe_load_all((build / WEBHOOK_DIR / "manifests.yaml").read_text())
                 if doc}
    patches = {"MutatingWebhookConfiguration": "mutating-patch.yaml",
               "ValidatingWebhookConfiguration": "validating-patch.yaml"}
    names = {"MutatingWebhookConfiguration": MUTATING, "ValidatingWebhookConfiguration": VALIDATING}
    bundle = base64.b64encode(ca).decode()
    made = []
    for kind, manifest in manifests.items():
        webhooks = list(manifest["webhooks"])
        for patch in yaml.safe_load((build / WEBHOOK_DIR / "patches" / patches[kind]).read_text()) or []:
            if patch.get("op") == "replace" and str(patch.get("path", "")).startswith("/webhooks/"):
                webhooks[int(patch["path"].rsplit("/", 1)[1])] = patch["value"]
        for webhook in webhooks:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{url}{path}", "caBundle": bundle}
        made.append(dict(manifest, metadata={"name": names[kind]}, webhooks=webhooks))
    return made


def configuration(cert_dir: pathlib.Path, webhook_port: int, probe_port: int) -> dict[str, Any]:
    """The controller's configuration file: upstream's (leader election on) with internal cert
    management off, the webhook server on 127.0.0.1 with kto's certificates, and the ElasticJobSet
    feature gate on (kto's elastic TrainJob scales a running JobSet's node job in place; v0.12.0
    takes its feature gates from this file, it has no ``--feature-gates`` flag)."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": True, "resourceNamespace": NAMESPACE},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "featureGates": {"ElasticJobSet": True},
    }


class JobSetController(lifecycle.Started):
    """The JobSet controller process against one cluster; its state (configuration, certificates)
    in ``directory``, its output in ``directory/jobset-controller.log``.

    ``start`` applies the CRD and namespace, registers the webhooks and returns once the JobSet
    controller runs, or fails within ``start_timeout`` seconds with the controller's last log
    lines. ``stop`` removes the webhook configurations (they fail every JobSet and JobSet pod
    while nothing answers them), then the process; the CRD and the JobSets stay."""

    def __init__(self, kubeconfig: pathlib.Path, context: str, directory: pathlib.Path, *,
                 start_timeout: float = START_TIMEOUT) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.directory = directory
        self.log = directory / "jobset-controller.log"
        self._start_timeout = start_timeout
        self._process: processes.Process | None = None
        self._registered = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def start(self) -> None:
        build = await asyncio.to_thread(ensure_build)
        self.directory.mkdir(parents=True, exist_ok=True)
        authority = certifying.Authority(self.directory / "pki", "kto jobset webhook CA")
        issued = authority.issue("jobset-webhook", server=True)
        certs = self.directory / "certs"
        certs.mkdir(mode=0o700, exist_ok=True)
        shutil.copyfile(issued.cert, certs / "tls.crt")
        shutil.copyfile(issued.key, certs / "tls.key")
        webhook_port, probe_port = ports.free(), ports.free()
        config = self.directory / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(certs, webhook_port, probe_port), sort_keys=False))
        async with await clients.KubeClient.connect(self.kubeconfig, self.context) as client:
            await client.put(resources.NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": NAMESPACE}})
            for crd in crds(build):
                await client.put(resources.for_manifest(crd), None, crd)
            await _established(client, [crd["metadata"]["name"] for crd in crds(build)], self._start_timeout)
            self._registered = True
            for manifest in webhook_configurations(build, f"https://127.0.0.1:{webhook_port}",
                                                   authority.cert.read_bytes()):
                await client.put(resources.for_manifest(manifest), None, manifest)
        argv = (str(build / BINARY), f"--kubeconfig={self.kubeconfig}", f"--config={config}")
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        self._process = process = processes.Process(BINARY, processes.Command(argv, log=self.log, env=env))
        kube.start(process)
        deadline = time.monotonic() + self._start_timeout
        while not (controllerruntime.workers_started(controllerruntime.log_text(self.log), CONTROLLER)
                   and _ready(probe_port)):
            kube.check(process)
            if time.monotonic() > deadline:
                raise caching.PartError(f"the JobSet controller did not start within {self._start_timeout:g}s; "
                                        f"last lines of {self.log}: " + " | ".join(processes.tail(self.log, 8)))
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        """Safe twice: the webhook configurations go first, then the process, then its lease (as
        controller-runtime's release-on-cancel would, which upstream leaves off: a controller
        started next on the cluster would wait out the lease's 15 s). The process is stopped
        also when the cluster no longer answers; then the first such error is raised."""
        failed: list[BaseException] = []
        if self._registered:
            self._registered = False
            await self._delete(failed, (resources.MUTATING_WEBHOOK_CONFIGURATIONS, None, MUTATING),
                               (resources.VALIDATING_WEBHOOK_CONFIGURATIONS, None, VALIDATING))
        if self._process is not None:
            process, self._process = self._process, None
            await process.stop(kube.STOP_TIMEOUT)
            await self._delete(failed, (resources.LEASES, NAMESPACE, LEASE))
        if failed:
            raise caching.PartError(f"cleaning up after the JobSet controller on {self.context}: {failed[0]!r}")

    async def _delete(self, failed: list[BaseException],
                      *objects: tuple[resources.ResourceType, str | None, str]) -> None:
        """Delete ``objects`` (those already gone are fine); an error is added to ``failed``."""
        try:
            async with await clients.KubeClient.connect(self.kubeconfig, self.context) as client:
                for rt, namespace, name in objects:
                    try:
                        await client.delete(rt, namespace, name)
                    except clients.ApiError as exc:
                        if not exc.not_found:
                            raise
        except Exception as exc:  # the cluster gone first: the process must still stop
            failed.append(exc)


async def _established(client: clients.KubeClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for name in names:
        while not any(c.get("type") == "Established" and c.get("status") == "True" for c in (
                (await client.get(resources.CRDS, None, name)).get("status") or {}
        ).get("conditions") or []):
            if time.monotonic() > deadline:
                raise caching.PartError(f"the CRD {name} is not Established after {timeout:g}s")
            await asyncio.sleep(0.05)


def _ready(port: int) -> bool:
    """The controller's ``/readyz``: true once its webhook server serves."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
