"""The real Kueue, as its own installation (``config/default``) runs it.

In: a real control plane's kubeconfig and context (``kto control-plane``, or one cluster of
``kto up --control-plane kube``), and :class:`KueueSettings` (which integrations, whether it is a
MultiKueue manager). Out: :func:`ensure_build`, one ``go build`` of ``sigs.k8s.io/kueue/cmd/kueue``
at :data:`VERSION` from the Go module proxy into the per-machine cache, beside the module's CRDs
and webhook manifests; :class:`KueueController`, that binary running against the cluster as
its Deployment runs it, started once its controllers run and its webhooks answer; and
:func:`connect_workers` / :func:`wait_clusters_active`, which make a Kueue a MultiKueue manager
of other clusters as upstream's MultiKueue setup does (a kubeconfig Secret, a MultiKueueCluster
per worker, one MultiKueueConfig, one AdmissionCheck).

What its Deployment gives it, given here:

* its CRDs (``config/components/crd/bases``) and namespace (``kueue-system``), applied. Without
  the conversion webhook upstream's CRD patches add: kto speaks v1beta2, the storage version,
  and a CRD whose conversion webhook points at a stopped process would fail every v1beta1 read
  after the run;
* its configuration file (``controller_manager_config.yaml``: leader election on, the lease in
  ``kueue-system``; the integrations of :class:`KueueSettings`; ``multiKueue`` when a manager;
  ``fairSharing`` when asked);
* its webhooks, from the module's ``config/components/webhook/manifests.yaml`` with upstream's
  ``failurePolicy``, named as kustomize names them (``kueue-`` prefix). The webhooks of the
  integrations that are off are left out: Kueue serves them as no-ops (jobframework's
  ``WithNoopWebhook``), so they change nothing while running and would refuse every pod,
  Deployment or StatefulSet while Kueue is stopped or slow. They point at
  ``https://127.0.0.1:<port>``: there is no Service in front of a local process. So internal
  cert management (open-policy-agent's cert-controller, on in upstream's Deployment) is off: its
  certificates name only the Service (``kueue-webhook-service.kueue-system.svc``), which a call
  to 127.0.0.1 would not verify against. kto's certificates (realparts/certifying.py: a CA of
  the run's own and a server certificate for 127.0.0.1) are given instead, in a ``certDir`` of
  the run's own, the CA in the configurations' ``caBundle``.

Two things of ``cmd/kueue`` are fixed in its code, not in its configuration:

* with internal cert management off it reads a metrics certificate from
  :data:`METRICS_CERT_DIR` (upstream mounts cert-manager's there) before anything else, even
  with the metrics server off; kto writes a placeholder pair there once per machine (the
  metrics server is off, ``bindAddress: "0"``, so the pair serves nothing);
* the visibility server (``VisibilityOnDemand``, on by default) listens on a fixed port (8082)
  for an APIService kto does not register: it is turned off, so several Kueues can run on one
  machine and no APIService that fails discovery is left behind.

Nothing of Kueue is committed: the build module is written at build time and the manifests come
from the module the Go module proxy serves. A kubeconfig's contents (keys, tokens) go only into
the Secret :func:`connect_workers` writes, never into a log line or an error.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import pathlib
import re
import shutil
import time
import types
from collections.abc import Mapping
from typing import Any

import yaml

from realparts import caching, certifying, controllerruntime, ports
from shared.kube import clients, resources

VERSION = "v0.17.0"
"""The Kueue release kto is proven against."""

MODULE = "sigs.k8s.io/kueue"
PACKAGE = f"{MODULE}/cmd/kueue"
NAMESPACE = "kueue-system"
"""Kueue's namespace in upstream's installation: its lease, and MultiKueue's kubeconfig Secrets."""
BINARY = "kueue"
CRD_DIR = caching.CRD_DIR
"""Where the build keeps the module's ``config/components/crd/bases``."""
WEBHOOK_DIR = caching.WEBHOOK_DIR
"""Where the build keeps the module's ``config/components/webhook``."""
BUILD_REVISION = 1
"""Bumped when the build recipe changes, so a cache made by an older recipe is not used."""

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
CONTROLLER = "workload-reconciler"
"""The Workload controller's logger in Kueue's log lines: its workers start once Kueue leads."""
START_TIMEOUT = 90.0
"""Seconds from the start to Kueue's controllers running and its webhooks answering."""
MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"
"""The webhook configurations' names in upstream's installation (kustomize's ``kueue-`` prefix)."""
LEASE = "c1f6bfd2.kueue.x-k8s.io"
"""Kueue's leader-election lease (its ``resourceName``) in :data:`NAMESPACE`."""
METRICS_CERT_DIR = pathlib.Path("/etc/kueue/metrics/certs")
"""Where ``cmd/kueue`` reads its metrics certificate when internal cert management is off."""
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
"""The AdmissionCheck controllerName of MultiKueue."""
KUBECONFIG_KEY = "kubeconfig"
"""The key of a MultiKueue kubeconfig Secret (``MultiKueueConfigSecretKey``)."""

ADMISSION_CHECKS = resources.ResourceType(GROUP, "v1beta2", "admissionchecks", "AdmissionCheck", namespaced=False)
MULTIKUEUE_CONFIGS = resources.ResourceType(GROUP, "v1beta2", "multikueueconfigs", "MultiKueueConfig",
                                            namespaced=False)
MULTIKUEUE_CLUSTERS = resources.ResourceType(GROUP, "v1beta2", "multikueueclusters", "MultiKueueCluster",
                                             namespaced=False)
RESOURCE_FLAVORS = resources.ResourceType(GROUP, "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False)

FRAMEWORKS: tuple[str, ...] = (
    "batch/job", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob", "kubeflow.org/xgboostjob",
    "kubeflow.org/paddlejob", "kubeflow.org/jaxjob", "kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob",
    "jobset.x-k8s.io/jobset",
)
"""Kueue's integrations for every kind kto serves that Kueue knows (et-operator's TrainingJob it
does not), and batch/job."""
FAIR_SHARING: tuple[str, ...] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
"""Fair Sharing's preemption strategies as Kueue's own e2e configuration lists them: preempt a
workload of another ClusterQueue when the preemptor's share with its workload is at most the other's
share without it, else when it stays below the other's share."""

_CORE_FRAMEWORKS = {("", "pods"): "pod", ("apps", "deployments"): "deployment",
                    ("apps", "statefulsets"): "statefulset"}
"""Integrations named without a group (the rest are ``<group>/<singular>``)."""


@dataclasses.dataclass(frozen=True)
class KueueSettings:
    """How one Kueue runs."""

    frameworks: tuple[str, ...] = FRAMEWORKS
    """``integrations.frameworks``: the job kinds Kueue queues, as Kueue names them."""
    multikueue: bool = False
    """This Kueue is a MultiKueue manager (its ``multiKueue`` configuration is written)."""
    worker_lost_timeout: float = 900.0
    """MultiKueue's ``workerLostTimeout`` in seconds: how long a workload admitted on a worker
    whose cluster is no longer reachable keeps its reservation there (upstream's default 15 min)."""
    gc_interval: float = 60.0
    """MultiKueue's ``gcInterval`` in seconds: how often the manager removes its objects left on
    workers (upstream's default 1 min)."""
    fair_sharing: tuple[str, ...] | None = None
    """Kueue's Fair Sharing: ``fairSharing.preemptionStrategies`` in order (one of Kueue's accepted
    lists, e.g. :data:`FAIR_SHARING`), or None for off (upstream's default). On, Kueue reports each
    ClusterQueue's and Cohort's ``status.fairSharing.weightedShare`` and may preempt a borrowing
    ClusterQueue's workloads so that borrowers in a cohort get equal shares."""
    feature_gates: Mapping[str, bool] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    """Feature gates for ``--feature-gates``, over Kueue's defaults and kto's own
    (``VisibilityOnDemand=false``, see the module's docstring)."""
    start_timeout: float = START_TIMEOUT
    """Seconds ``start`` waits for its controllers to run and its webhooks to answer."""


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


def ensure_build(*, quiet: bool = False) -> pathlib.Path:
    """The build directory: the ``kueue`` binary, ``crd/`` and ``webhook/``; built once per machine."""
    return caching.cached_controller("kueue", module=MODULE, version=VERSION, package=PACKAGE, binary=BINARY,
                                     what="Kueue", revision=BUILD_REVISION, quiet=quiet)


def framework_of(rule: Mapping[str, Any]) -> str:
    """The integration a webhook rule belongs to, as ``integrations.frameworks`` names it."""
    group, resource = rule["apiGroups"][0], rule["resources"][0]
    return _CORE_FRAMEWORKS.get((group, resource)) or f"{group}/{resource.removesuffix('s')}"


def webhook_configurations(build: pathlib.Path, url: str, ca: bytes,
                           frameworks: tuple[str, ...]) -> list[dict[str, Any]]:
    """The module's mutating and validating webhook configurations as its installation makes them
    (kustomize's ``kueue-`` names), with only Kueue's own webhooks and those of ``frameworks``,
    each webhook calling ``url`` + its path with ``ca`` as the CA bundle."""
    names = {"MutatingWebhookConfiguration": MUTATING, "ValidatingWebhookConfiguration": VALIDATING}
    made = []
    for manifest in controllerruntime.manifests(build / WEBHOOK_DIR, "manifests.yaml"):
        kept = [webhook for webhook in manifest["webhooks"]
                if webhook["rules"][0]["apiGroups"][0] == GROUP or framework_of(webhook["rules"][0]) in frameworks]
        made.append(controllerruntime.webhooks_at(manifest, names[manifest["kind"]], kept, url, ca))
    return made


def configuration(cert_dir: pathlib.Path, webhook_port: int, probe_port: int,
                  settings: KueueSettings) -> dict[str, Any]:
    """Kueue's configuration file: upstream's, with the lease and Kueue's objects in
    :data:`NAMESPACE`, internal cert management off, the webhook server on 127.0.0.1 with kto's
    certificates, metrics off, and the integrations (and MultiKueue, Fair Sharing) of ``settings``."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": True, "resourceName": LEASE, "resourceNamespace": NAMESPACE},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": list(settings.frameworks)},
    }
    if settings.multikueue:
        config["multiKueue"] = {"gcInterval": f"{settings.gc_interval:g}s",
                                "workerLostTimeout": f"{settings.worker_lost_timeout:g}s"}
    if settings.fair_sharing is not None:
        config["fairSharing"] = {"preemptionStrategies": list(settings.fair_sharing)}
    return config


def feature_gates(settings: KueueSettings) -> str:
    """The ``--feature-gates`` value: kto's (the visibility server off) and then ``settings``'."""
    gates = {"VisibilityOnDemand": False, **settings.feature_gates}
    return ",".join(f"{name}={str(on).lower()}" for name, on in gates.items())


def ensure_metrics_placeholder() -> None:
    """A certificate and key in :data:`METRICS_CERT_DIR` if none is there (see the module's
    docstring): written once per machine, atomically, so Kueues started at once all read a pair."""
    cert, key = METRICS_CERT_DIR / "tls.crt", METRICS_CERT_DIR / "tls.key"
    if cert.is_file() and key.is_file():
        return
    try:
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        scratch = METRICS_CERT_DIR / f".kto-{os.getpid()}"
        issued = certifying.Authority(scratch, "kto kueue metrics placeholder").issue("metrics", server=True)
        for made, final in ((issued.key, key), (issued.cert, cert)):
            os.replace(made, final)
        shutil.rmtree(scratch, ignore_errors=True)
    except OSError as exc:
        raise caching.PartError(
            f"Kueue {VERSION} reads a metrics certificate from {METRICS_CERT_DIR} (fixed in its cmd/kueue when "
            f"its internal certificates are off) and kto cannot write a placeholder there: {exc.strerror}; "
            f"run as a user who may create it, or create tls.crt and tls.key there once") from exc


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


INSTALLATION = controllerruntime.Installation(
    what="Kueue", binary=BINARY, namespace=NAMESPACE, mutating=MUTATING, validating=VALIDATING, lease=LEASE,
    controller=CONTROLLER)


class KueueController(controllerruntime.LocalManager):
    """The Kueue process against one cluster; its state (configuration, certificates) in
    ``directory``, its output in ``directory/kueue.log``.

    ``start`` applies the CRDs and namespace, registers the webhooks and returns once Kueue leads,
    its Workload controller runs and its webhooks answer through the API server, or fails within
    ``settings.start_timeout`` seconds with Kueue's last log lines. ``stop`` removes the webhook
    configurations (with ``failurePolicy: Fail`` they refuse every queued kind while nothing
    answers them), then the process and its lease (Kueue releases it on a clean stop; this covers
    a killed one); the CRDs and Kueue's objects stay."""

    def __init__(self, kubeconfig: pathlib.Path, context: str, directory: pathlib.Path,
                 settings: KueueSettings = KueueSettings()) -> None:
        super().__init__(INSTALLATION, kubeconfig, context, directory, settings.start_timeout)
        self.settings = settings

    async def start(self) -> None:
        build = await asyncio.to_thread(ensure_build)
        await asyncio.to_thread(ensure_metrics_placeholder)
        ca, certs = self._certificates("kueue")
        webhook_port, probe_port = ports.free(), ports.free()
        config = self.directory / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(certs, webhook_port, probe_port, self.settings),
                                         sort_keys=False))
        webhooks = webhook_configurations(build, f"https://127.0.0.1:{webhook_port}", ca, self.settings.frameworks)
        argv = (str(build / BINARY), f"--config={config}",
                f"--feature-gates={feature_gates(self.settings)}")
        await self._launch(controllerruntime.manifests(build / CRD_DIR), webhooks, argv, probe_port, _webhooks_answer)


async def _webhooks_answer(client: clients.KubeClient) -> bool:
    """Whether Kueue's webhooks answer through the API server: a dry-run ResourceFlavor passes
    its mutating and validating webhooks."""
    probe = {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": "kto-webhook-probe"}}
    try:
        await client.request("POST", RESOURCE_FLAVORS.path(), query={"dryRun": "All"}, body=probe,
                             route=RESOURCE_FLAVORS.plural)
    except clients.ApiError as exc:
        return exc.already_exists
    return True


# --------------------------------------------------------------------------
# MultiKueue
# --------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def inline_kubeconfig(kubeconfig: pathlib.Path, context: str) -> str:
    """The kubeconfig of ``context`` alone, every file it names read in (Kueue refuses file paths
    in a MultiKueue kubeconfig: its pod would not have the files). A ValueError naming the file
    and context when the context is not there; the contents are never in a message."""
    try:
        config = yaml.safe_load(kubeconfig.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the kubeconfig {kubeconfig}: {exc.__class__.__name__}") from None
    by_name = {kind: {entry.get("name"): dict(entry.get(kind[:-1]) or {}) for entry in config.get(kind) or []}
               for kind in ("contexts", "clusters", "users")}
    if context not in by_name["contexts"]:
        raise ValueError(f"the kubeconfig {kubeconfig} has no context {context!r}")
    entry = by_name["contexts"][context]
    cluster, user = by_name["clusters"].get(entry.get("cluster")), by_name["users"].get(entry.get("user"))
    if cluster is None or user is None:
        raise ValueError(f"the context {context!r} of {kubeconfig} names a cluster or user it does not have")
    base = kubeconfig.parent

    def read(path: str) -> bytes:
        return (base / path).read_bytes()

    for holder, field in ((cluster, "certificate-authority"), (user, "client-certificate"), (user, "client-key")):
        if field in holder:
            holder[f"{field}-data"] = base64.b64encode(read(holder.pop(field))).decode()
    if "tokenFile" in user:
        user["token"] = read(user.pop("tokenFile")).decode().strip()
    inlined = {"apiVersion": "v1", "kind": "Config", "current-context": context, "preferences": {},
               "clusters": [{"name": context, "cluster": cluster}],
               "users": [{"name": context, "user": user}],
               "contexts": [{"name": context, "context": {"cluster": context, "user": context}}]}
    return yaml.safe_dump(inlined, sort_keys=False)


def secret_name(worker: str) -> str:
    """The kubeconfig Secret of MultiKueue worker ``worker`` in :data:`NAMESPACE`."""
    return f"multikueue-{worker}"


async def connect_workers(manager_kubeconfig: pathlib.Path, manager_context: str,
                          workers: Mapping[str, tuple[pathlib.Path, str]], *,
                          check_name: str = "multikueue", config_name: str = "multikueue") -> None:
    """Make the manager's Kueue dispatch to ``workers`` (name -> (kubeconfig, context)): per worker a
    kubeconfig Secret in :data:`NAMESPACE` (inline credentials) and a MultiKueueCluster of the
    worker's name; one MultiKueueConfig ``config_name`` listing them; one AdmissionCheck
    ``check_name`` of MultiKueue's controller with that config as its parameters. A ClusterQueue
    whose ``admissionChecksStrategy`` names ``check_name`` then runs its jobs on the workers.
    Existing objects of these names are replaced."""
    for worker in workers:
        if not _DNS_LABEL.match(worker):
            raise ValueError(f"the MultiKueue worker name {worker!r} is not a DNS label (lower-case letters, "
                             f"digits and '-')")
    inlined = {worker: inline_kubeconfig(path, context) for worker, (path, context) in workers.items()}
    async with await clients.KubeClient.connect(manager_kubeconfig, manager_context) as client:
        await client.put(resources.NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": NAMESPACE}})
        for worker, text in inlined.items():
            await client.put(resources.SECRETS, NAMESPACE, {
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": secret_name(worker), "namespace": NAMESPACE},
                "data": {KUBECONFIG_KEY: base64.b64encode(text.encode()).decode()}})
            await client.put(MULTIKUEUE_CLUSTERS, None, {
                "apiVersion": API_VERSION, "kind": MULTIKUEUE_CLUSTERS.kind, "metadata": {"name": worker},
                "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret",
                                                          "location": secret_name(worker)}}}})
        await client.put(MULTIKUEUE_CONFIGS, None, {
            "apiVersion": API_VERSION, "kind": MULTIKUEUE_CONFIGS.kind, "metadata": {"name": config_name},
            "spec": {"clusters": list(workers)}})
        await client.put(ADMISSION_CHECKS, None, {
            "apiVersion": API_VERSION, "kind": ADMISSION_CHECKS.kind, "metadata": {"name": check_name},
            "spec": {"controllerName": MULTIKUEUE_CONTROLLER,
                     "parameters": {"apiGroup": GROUP, "kind": MULTIKUEUE_CONFIGS.kind, "name": config_name}}})


def _active(obj: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ``obj``'s Active condition is True, and its reason and message."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Active":
            return condition.get("status") == "True", f"{condition.get('reason')}: {condition.get('message')}"
    return False, "no Active condition yet"


async def wait_clusters_active(manager_kubeconfig: pathlib.Path, manager_context: str, workers: list[str], *,
                               check_name: str = "multikueue", timeout: float = 60.0) -> None:
    """Return once each worker's MultiKueueCluster and the AdmissionCheck ``check_name`` are Active
    on the manager; a PartError naming those that are not, and why Kueue says so, after ``timeout``."""
    deadline = time.monotonic() + timeout
    async with await clients.KubeClient.connect(manager_kubeconfig, manager_context) as client:
        while True:
            waiting: dict[str, str] = {}
            for rt, name in [*((MULTIKUEUE_CLUSTERS, w) for w in workers), (ADMISSION_CHECKS, check_name)]:
                try:
                    active, why = _active(await client.get(rt, None, name))
                except clients.ApiError as exc:
                    if not exc.not_found:
                        raise
                    active, why = False, "not found"
                if not active:
                    waiting[f"{rt.kind} {name}"] = why
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise caching.PartError(f"MultiKueue on {manager_context} is not Active after {timeout:g}s: "
                                        + "; ".join(f"{what} ({why})" for what, why in waiting.items()))
            await asyncio.sleep(0.2)

