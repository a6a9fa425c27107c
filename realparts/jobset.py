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
import pathlib
from typing import Any

import yaml

from realparts import caching, controllerruntime, ports

VERSION = "v0.12.0"
"""The JobSet release Kubeflow Trainer v2.3.0 installs."""

MODULE = "sigs.k8s.io/jobset"
NAMESPACE = "jobset-system"
"""The controller's namespace in upstream's installation (its leader-election lease lives there)."""
BINARY = "jobset-controller"
CRD_DIR = caching.CRD_DIR
"""Where the build keeps the module's ``config/components/crd/bases``."""
WEBHOOK_DIR = caching.WEBHOOK_DIR
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


def ensure_build(*, quiet: bool = False) -> pathlib.Path:
    """The build directory: the ``jobset-controller`` binary, ``crd/`` and ``webhook/``; built once per machine."""
    return caching.cached_controller("jobset", module=MODULE, version=VERSION, package=MODULE, binary=BINARY,
                                     what="the JobSet controller", revision=BUILD_REVISION, quiet=quiet)


def webhook_configurations(build: pathlib.Path, url: str, ca: bytes) -> list[dict[str, Any]]:
    """The module's mutating and validating webhook configurations as its installation makes them:
    kustomize's ``jobset-`` names, the pod webhooks replaced by the patches' (with their object
    selector), each webhook calling ``url`` + its path with ``ca`` as the CA bundle."""
    patches = {"MutatingWebhookConfiguration": "mutating-patch.yaml",
               "ValidatingWebhookConfiguration": "validating-patch.yaml"}
    names = {"MutatingWebhookConfiguration": MUTATING, "ValidatingWebhookConfiguration": VALIDATING}
    made = []
    for manifest in controllerruntime.manifests(build / WEBHOOK_DIR, "manifests.yaml"):
        kind = manifest["kind"]
        webhooks = list(manifest["webhooks"])
        for patch in yaml.safe_load((build / WEBHOOK_DIR / "patches" / patches[kind]).read_text()) or []:
            if patch.get("op") == "replace" and str(patch.get("path", "")).startswith("/webhooks/"):
                webhooks[int(patch["path"].rsplit("/", 1)[1])] = patch["value"]
        made.append(controllerruntime.webhooks_at(manifest, names[kind], webhooks, url, ca))
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


INSTALLATION = controllerruntime.Installation(
    what="the JobSet controller", binary=BINARY, namespace=NAMESPACE, mutating=MUTATING, validating=VALIDATING,
    lease=LEASE, controller=CONTROLLER)


class JobSetController(controllerruntime.LocalManager):
    """The JobSet controller process against one cluster; its state (configuration, certificates)
    in ``directory``, its output in ``directory/jobset-controller.log``.

    ``start`` applies the CRD and namespace, registers the webhooks and returns once the JobSet
    controller runs, or fails within ``start_timeout`` seconds with the controller's last log
    lines. ``stop`` removes the webhook configurations (they fail every JobSet and JobSet pod
    while nothing answers them), then the process; the CRD and the JobSets stay."""

    def __init__(self, kubeconfig: pathlib.Path, context: str, directory: pathlib.Path, *,
                 start_timeout: float = START_TIMEOUT) -> None:
        super().__init__(INSTALLATION, kubeconfig, context, directory, start_timeout)

    async def start(self) -> None:
        build = await asyncio.to_thread(ensure_build)
        ca, certs = self._certificates("jobset")
        webhook_port, probe_port = ports.free(), ports.free()
        config = self.directory / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(certs, webhook_port, probe_port), sort_keys=False))
        await self._launch(controllerruntime.manifests(build / CRD_DIR), webhook_configurations(build, f"https://127.0.0.1:{webhook_port}", ca),
                           (str(build / BINARY), f"--config={config}"), probe_port)
