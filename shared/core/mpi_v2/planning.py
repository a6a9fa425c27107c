"""The children of an MPIJob v2beta1 (spec A.8–A.10): what each must look like.

In: a defaulted, validated MPIJob, the operator settings (``cluster_domain``
is mpi-operator's ``--cluster-domain``; ``gang_scheduler_name`` its
``--gang-scheduling``) and, for ``discover_hosts.sh``, the observed pods.
Out: plain JSON-shaped manifests, byte-for-byte the same for the same input:

* the headless Service ``<job>`` fronting launcher and workers;
* the ConfigMap ``<job>-config``: ``hostfile`` (from the spec) and
  ``discover_hosts.sh`` (from the Running workers);
* the Secret ``<job>-ssh`` (type ``kubernetes.io/ssh-auth``) from a key pair;
* worker Pods ``<job>-worker-<i>`` (bare pods running ``sshd``);
* the launcher ``batch/v1`` Job ``<job>-launcher`` with the MPI env.

Whether and when each is created, updated or deleted is ``deciding``'s
business. Where kto differs from upstream: the ConfigMap, Secret, Service and
launcher Job carry the ``training.kubeflow.org/job-name`` label beside
upstream's ``app`` (as kto's v1 MPI children do), so label-selected watches
see them.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shared.api import common, mpijobs, objects
from shared.core import launchers, naming, owners, settings
from shared.core.mpi_v2 import scheduling, sshkeys

Manifest = common.Manifest

OPERATOR_NAME = mpijobs.OPERATOR_NAME
"""Value of the ``training.kubeflow.org/operator-name`` label on launcher and worker pods."""
ROLE_LAUNCHER = "launcher"
ROLE_WORKER = "worker"
ROLE_ENV = "K_MPI_JOB_ROLE"

SSH_SECRET_SUFFIX = "-ssh"
SSH_SECRET_TYPE = "kubernetes.io/ssh-auth"
SSH_PRIVATE_KEY = "ssh-privatekey"
SSH_PUBLIC_KEY = "ssh-publickey"
SSH_VOLUME = "ssh-auth"
SSH_ITEMS = (
    {"key": SSH_PRIVATE_KEY, "path": "id_rsa"},
    {"key": SSH_PUBLIC_KEY, "path": "id_rsa.pub"},
    {"key": SSH_PUBLIC_KEY, "path": "authorized_keys"},
)
SSH_ROOT_MODE = 0o600
"""``defaultMode`` of the SSH volume, only when it is mounted at ``/root/.ssh``."""

WORKER_COMMAND = ["/usr/sbin/sshd", "-De"]
CONNECTION_ATTEMPTS = "-o ConnectionAttempts=10"
HOSTFILE_PATH = f"{launchers.CONFIG_MOUNT_PATH}/{launchers.HOSTFILE}"
NVIDIA_HIDDEN = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")

SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations", "schedulingGates")
"""Launcher pod-spec fields replaced on resume (KEP-2926's mutable scheduling directives)."""


# ---------------------------------------------------------------------------
# Names, labels, owner
# ---------------------------------------------------------------------------


def launcher_name(job: mpijobs.MPIJob) -> str:
    return job.name + naming.MPI_LAUNCHER_SUFFIX


def worker_name(job: mpijobs.MPIJob, index: int) -> str:
    return f"{job.name}{naming.MPI_WORKER_SUFFIX}-{index}"


def config_name(job: mpijobs.MPIJob) -> str:
    return job.name + naming.MPI_CONFIG_SUFFIX


def secret_name(job: mpijobs.MPIJob) -> str:
    return job.name + SSH_SECRET_SUFFIX


def service_name(job: mpijobs.MPIJob) -> str:
    return job.name


def role_labels(job: mpijobs.MPIJob, role: str) -> dict[str, str]:
    """operator-name, job-name and job-role: the launcher's and workers' own labels."""
    return {**pod_selector(job), naming.LABEL_JOB_ROLE: role}


def pod_selector(job: mpijobs.MPIJob) -> dict[str, str]:
    """The Service's selector: every launcher and worker pod of the job."""
    return {naming.LABEL_OPERATOR_NAME: OPERATOR_NAME, naming.LABEL_JOB_NAME: job.name}


def app_labels(job: mpijobs.MPIJob) -> dict[str, str]:
    """Upstream's ``app: <job>`` on the Service, ConfigMap, Secret and launcher Job, plus kto's job-name."""
    return {naming.LABEL_APP: job.name, naming.LABEL_JOB_NAME: job.name}


def worker_index_label(job: mpijobs.MPIJob, index: int) -> str:
    """The worker's ``replica-index``: ``i``, or ``i+1`` when the launcher is worker 0."""
    return str(index + 1 if job.launcher_as_worker else index)


def _metadata(job: mpijobs.MPIJob, name: str, labels: Mapping[str, str],
              annotations: Mapping[str, str] | None = None) -> Manifest:
    return owners.child_metadata(job, name, labels=dict(labels), annotations=dict(annotations or {}))


# ---------------------------------------------------------------------------
# hostfile and discover_hosts.sh (A.9)
# ---------------------------------------------------------------------------


def host(job: mpijobs.MPIJob, hostname: str, operator: settings.OperatorSettings) -> str:
    """``<hostname>.<job>.<ns>.svc``, then ``.<cluster domain>`` when one is configured."""
    fqdn = f"{hostname}.{job.name}.{job.namespace}.svc"
    return f"{fqdn}.{operator.cluster_domain}" if operator.cluster_domain else fqdn


def _hosts(job: mpijobs.MPIJob, hostnames: Iterable[str], operator: settings.OperatorSettings) -> list[str]:
    launcher = [launcher_name(job)] if job.launcher_as_worker else []
    return [host(job, name, operator) for name in [*launcher, *hostnames]]


def hostfile(job: mpijobs.MPIJob, operator: settings.OperatorSettings) -> str:
    """One line per host (the launcher first when it is a worker): ``host slots=n`` for
    OpenMPI, ``host:n`` for Intel MPI and MPICH."""
    slots = job.spec.slots_per_worker if job.spec.slots_per_worker is not None else 1
    workers = (worker_name(job, i) for i in range(job.worker_replicas))
    line = launchers.SLOTS_LINE if job.spec.mpi_implementation == mpijobs.OPEN_MPI else launchers.COLON_LINE
    return launchers.hostfile(_hosts(job, workers, operator), slots, line)


def is_worker_pod(job: mpijobs.MPIJob, pod: Mapping[str, Any]) -> bool:
    """A pod of the job's namespace with the workers' three labels (any index, any owner)."""
    if pod.get("kind", "Pod") != "Pod" or (objects.namespace_of(pod) or job.namespace) != job.namespace:
        return False
    labels = objects.labels_of(pod)
    return all(labels.get(key) == value for key, value in role_labels(job, ROLE_WORKER).items())


def running_workers(job: mpijobs.MPIJob, pods: Sequence[Manifest]) -> list[str]:
    """Names of the worker pods in phase Running, sorted as strings (``-10`` before ``-2``)."""
    return sorted(
        str(pod["metadata"]["name"]) for pod in pods
        if is_worker_pod(job, pod) and objects.phase_of(pod) == "Running"
    )


def discover_hosts(job: mpijobs.MPIJob, pods: Sequence[Manifest], operator: settings.OperatorSettings) -> str:
    """``#!/bin/sh`` then ``echo <host>`` per Running worker (the launcher first when it is a
    worker, whatever its state). Elastic Horovod polls it."""
    return "#!/bin/sh\n" + "".join(
        f"echo {name}\n" for name in _hosts(job, running_workers(job, pods), operator)
    )


# ---------------------------------------------------------------------------
# Service, ConfigMap, Secret (A.8.1–A.8.3)
# ---------------------------------------------------------------------------


def desired_service(job: mpijobs.MPIJob) -> Manifest:
    """The headless Service ``<job>``; it publishes not-ready pods only when the launcher is a worker."""
    spec: Manifest = {"clusterIP": "None", "selector": pod_selector(job)}
    if job.launcher_as_worker:
        spec["publishNotReadyAddresses"] = True
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _metadata(job, service_name(job), app_labels(job)), "spec": spec}


def service_update(job: mpijobs.MPIJob, current: Manifest) -> Manifest | None:
    """``current`` with the desired selector and publishNotReadyAddresses, or None when both match."""
    desired = desired_service(job)["spec"]
    spec = current.get("spec") or {}
    publish = bool(desired.get("publishNotReadyAddresses"))
    if spec.get("selector") == desired["selector"] and bool(spec.get("publishNotReadyAddresses")) == publish:
        return None
    updated = copy.deepcopy(current)
    updated.setdefault("spec", {}).update({"selector": desired["selector"], "publishNotReadyAddresses": publish})
    return updated


def desired_config_map(job: mpijobs.MPIJob, pods: Sequence[Manifest], operator: settings.OperatorSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, config_name(job), app_labels(job)),
        "data": {
            launchers.HOSTFILE: hostfile(job, operator),
            launchers.DISCOVER_HOSTS: discover_hosts(job, pods, operator),
        },
    }


def desired_secret(job: mpijobs.MPIJob, keys: sshkeys.KeyPair) -> Manifest:
    """The Secret ``<job>-ssh``; ``data`` base64-encoded as on the wire."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(job, secret_name(job), app_labels(job)),
        "type": SSH_SECRET_TYPE,
        "data": {
            SSH_PRIVATE_KEY: base64.b64encode(keys.private_pem).decode("ascii"),
            SSH_PUBLIC_KEY: base64.b64encode(keys.public_openssh).decode("ascii"),
        },
    }


def secret_is_complete(secret: Manifest) -> bool:
    """Whether an existing Secret's data keys are exactly the two key files (else it is regenerated)."""
    return set(secret.get("data") or {}) == {SSH_PRIVATE_KEY, SSH_PUBLIC_KEY}


# ---------------------------------------------------------------------------
# Pods (A.8.4, A.8.5, A.10)
# ---------------------------------------------------------------------------


def _env(name: str, value: str) -> Manifest:
    """A corev1.EnvVar as Go writes it: an empty value is left out."""
    return {"name": name, "value": value} if value else {"name": name}


def launcher_env(job: mpijobs.MPIJob) -> list[Manifest]:
    """What the launcher's first container gets after its own env (A.10.1)."""
    slots = str(job.spec.slots_per_worker if job.spec.slots_per_worker is not None else 1)
    implementation = job.spec.mpi_implementation
    env = [_env(ROLE_ENV, ROLE_LAUNCHER)]
    if implementation == mpijobs.OPEN_MPI:
        env += [
            _env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            _env("OMPI_MCA_orte_default_hostfile", HOSTFILE_PATH),
            _env("OMPI_MCA_plm_rsh_args", CONNECTION_ATTEMPTS),
            _env("OMPI_MCA_orte_set_default_slots", slots),
        ]
    elif implementation == mpijobs.INTEL_MPI:
        env += [
            _env("I_MPI_HYDRA_HOST_FILE", HOSTFILE_PATH),
            _env("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", CONNECTION_ATTEMPTS),
            _env("I_MPI_PERHOST", slots),
        ]
    elif implementation == mpijobs.MPICH:
        env += [_env("HYDRA_HOST_FILE", HOSTFILE_PATH), _env("HYDRA_LAUNCH_EXTRA_ARGS", CONNECTION_ATTEMPTS)]
    if not job.launcher_as_worker:
        # Keep the launcher off the node's GPUs whatever the runtime would expose.
        env += [_env(name, "") for name in NVIDIA_HIDDEN]
    return env


def ssh_volume(job: mpijobs.MPIJob) -> Manifest:
    secret: Manifest = {"secretName": secret_name(job), "items": [dict(item) for item in SSH_ITEMS]}
    if job.spec.ssh_auth_mount_path == mpijobs.DEFAULT_SSH_AUTH_MOUNT_PATH:
        secret["defaultMode"] = SSH_ROOT_MODE
    return {"name": SSH_VOLUME, "secret": secret}


def config_volume(job: mpijobs.MPIJob) -> Manifest:
    items = [
        launchers.config_item(launchers.HOSTFILE, launchers.HOSTFILE_MODE),
        launchers.config_item(launchers.DISCOVER_HOSTS, launchers.SCRIPT_MODE),
    ]
    return {"name": launchers.MPI_CONFIG_VOLUME, "configMap": {"name": config_name(job), "items": items}}


def _mount(spec: Manifest, volume: Manifest, path: str) -> None:
    """``volume`` after the template's volumes, mounted at ``path`` in the first container only."""
    spec["volumes"] = [*(spec.get("volumes") or []), volume]
    container = spec["containers"][0]
    container["volumeMounts"] = [*(container.get("volumeMounts") or []), {"name": volume["name"], "mountPath": path}]


def _restart_policy(replica: mpijobs.ReplicaSpec) -> str:
    return "Never" if replica.restart_policy == "ExitCode" else str(replica.restart_policy or "")


def _template(job: mpijobs.MPIJob, replica_type: str, role: str, hostname: str,
              operator: settings.OperatorSettings) -> tuple[dict[str, str], dict[str, str], Manifest]:
    """Labels, annotations and pod spec both pod kinds start from: a copy of the template with
    the role labels, gang decoration, hostname and subdomain."""
    replica = job.replica(replica_type)
    assert replica is not None, f"validated jobs have a {replica_type} spec"
    template = copy.deepcopy(replica.template)
    labels = {**objects.labels_of(template), **role_labels(job, role)}
    annotations = objects.annotations_of(template)
    spec: Manifest = template.get("spec") or {}
    scheduling.decorate(job, operator, labels, annotations, spec)
    spec["hostname"] = hostname
    spec["subdomain"] = service_name(job)
    if spec.get("hostNetwork"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return labels, annotations, spec


def desired_worker(job: mpijobs.MPIJob, index: int, operator: settings.OperatorSettings) -> Manifest:
    """Worker pod ``<job>-worker-<index>`` (A.8.4)."""
    name = worker_name(job, index)
    labels, annotations, spec = _template(job, mpijobs.WORKER, ROLE_WORKER, name, operator)
    labels[naming.LABEL_REPLICA_INDEX] = worker_index_label(job, index)
    # Upstream hard-codes cluster.local here, whatever --cluster-domain says.
    search = f"{job.name}.{job.namespace}.svc.cluster.local"
    dns = spec.setdefault("dnsConfig", {})
    dns["searches"] = [*(dns.get("searches") or []), search]
    replica = job.replica(mpijobs.WORKER)
    assert replica is not None
    spec["restartPolicy"] = _restart_policy(replica)
    container = spec["containers"][0]
    if not container.get("command") and not container.get("args"):
        container["command"] = list(WORKER_COMMAND)
    container["env"] = [*(container.get("env") or []), _env(ROLE_ENV, ROLE_WORKER)]
    _mount(spec, ssh_volume(job), str(job.spec.ssh_auth_mount_path))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _metadata(job, name, labels, annotations), "spec": spec}


def desired_launcher_template(job: mpijobs.MPIJob, operator: settings.OperatorSettings) -> Manifest:
    """The launcher Job's pod template (A.8.5): env, SSH and config volumes, restart policy."""
    labels, annotations, spec = _template(job, mpijobs.LAUNCHER, ROLE_LAUNCHER, launcher_name(job), operator)
    if job.launcher_as_worker:
        labels[naming.LABEL_REPLICA_INDEX] = "0"
    container = spec["containers"][0]
    container["env"] = [*(container.get("env") or []), *launcher_env(job)]
    _mount(spec, ssh_volume(job), str(job.spec.ssh_auth_mount_path))
    replica = job.replica(mpijobs.LAUNCHER)
    assert replica is not None
    spec["restartPolicy"] = _restart_policy(replica)
    _mount(spec, config_volume(job), launchers.CONFIG_MOUNT_PATH)
    metadata: Manifest = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    metadata["ownerReferences"] = [owners.reference(job)]
    return {"metadata": metadata, "spec": spec}


def launcher_template_sets_restart_policy(job: mpijobs.MPIJob) -> bool:
    """Whether the Launcher template sets ``restartPolicy`` (overridden, with a Warning)."""
    replica = job.replica(mpijobs.LAUNCHER)
    return replica is not None and bool(objects.spec_of(replica.template).get("restartPolicy"))


def desired_launcher(job: mpijobs.MPIJob, operator: settings.OperatorSettings) -> Manifest:
    """The launcher ``batch/v1`` Job ``<job>-launcher``; suspended when the MPIJob is."""
    policy = job.run_policy
    spec: Manifest = {
        name: value
        for name, value in (
            ("ttlSecondsAfterFinished", policy.ttl_seconds_after_finished),
            ("activeDeadlineSeconds", policy.active_deadline_seconds),
            ("backoffLimit", policy.backoff_limit),
        )
        if value is not None
    }
    spec["template"] = desired_launcher_template(job, operator)
    # A replacement pod only once the old one is fully terminal (kubernetes#115844).
    spec["podReplacementPolicy"] = "Failed"
    if job.suspended:
        spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _metadata(job, launcher_name(job), app_labels(job)), "spec": spec}


def resumed_launcher(job: mpijobs.MPIJob, current: Manifest, operator: settings.OperatorSettings) -> Manifest:
    """``current`` unsuspended, its template's scheduling directives synced with the desired
    template (labels and annotations merged, desired winning; nodeSelector, tolerations and
    schedulingGates replaced), as Kueue may have changed them while it was suspended. A copy."""
    updated = copy.deepcopy(current)
    desired = desired_launcher_template(job, operator)
    template = updated.setdefault("spec", {}).setdefault("template", {})
    metadata = template.setdefault("metadata", {})
    for field in ("labels", "annotations"):
        merged = {**(metadata.get(field) or {}), **(desired["metadata"].get(field) or {})}
        if merged:
            metadata[field] = merged
    pod_spec = template.setdefault("spec", {})
    for field in SCHEDULING_DIRECTIVES:
        if field in desired["spec"]:
            pod_spec[field] = copy.deepcopy(desired["spec"][field])
        else:
            pod_spec.pop(field, None)
    updated["spec"]["suspend"] = False
    return updated
