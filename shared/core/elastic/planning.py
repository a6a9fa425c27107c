"""The children of a TrainingJob and the scripts run in its launcher (spec B.6, B.9).

In: a defaulted, validated TrainingJob, worker names, operator settings.
Out: manifests (plain dicts) exactly as upstream builds them: worker pods
and their Services, ConfigMap ``<job>-config``, the SSH Secret, the
launcher's ServiceAccount / Role / RoleBinding and the launcher pod; and the
shell commands that rewrite the hostfile, run a scaler's script or list the
launcher's ssh processes. Pod templates are deep-copied, never changed.

Every value that reaches a shell script (worker names, a scaler's env values,
script path and timeout, a container name) is quoted with ``shlex.quote``, so
a value like ``1; wget … | sh #`` stays one word; an env name must be a shell
identifier (``SHELL_NAME``, checked by ``validating.validate_scaler``).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import re
import shlex
from collections.abc import Sequence
from typing import Any

from shared.api import common, elastic, objects
from shared.core import launchers, owners
from shared.core.elastic import naming
from shared.core.elastic.settings import ElasticSettings

Manifest = common.Manifest

DEEPSPEED_HOSTFILE = "deepspeed-hostfile"
HOSTFILE_DIR = "/etc/edl"
HOSTFILE_PATH = f"{HOSTFILE_DIR}/{launchers.HOSTFILE}"
DEEPSPEED_DIR = "/job"
KUBEXEC_PATH = f"{launchers.CONFIG_MOUNT_PATH}/{launchers.KUBEXEC}"
HOSTFILE_VOLUME = "training-job-hostfile"
CONFIG_VOLUME = "training-job-config"
KUBECTL_VOLUME = "training-job-kubectl"
DEEPSPEED_VOLUME = "deepspeed-hostfile"
INIT_CONTAINER = "init-hostfile"
GPU_RESOURCE = "nvidia.com/gpu"
SSH_ATTACH = "ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no"
SSH_CONFIG = "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n"
SSH_MOUNT_PATH = "/root/.ssh"
SSH_SUB_PATH = ".ssh"
SSH_MODE = 0o600
WORKER_PORTS = ({"name": "ssh-port", "port": 22}, {"name": "kubeai-service-port", "port": 9009})

DISCOVER_HOSTS_SCRIPT = f"#!/bin/bash\nwhile read line\ndo\necho $line\ndone < {HOSTFILE_PATH}\n"
_CONFIG, _HOSTS, _DISCOVER = launchers.CONFIG_MOUNT_PATH, launchers.HOSTFILE, launchers.DISCOVER_HOSTS
_INIT_COMMAND = (
    f"cp {_CONFIG}/{_HOSTS} {HOSTFILE_PATH} && chmod 600 {HOSTFILE_PATH} && "
    f"cp {_CONFIG}/{_DISCOVER} {HOSTFILE_DIR}/{_DISCOVER} && chmod +x {HOSTFILE_DIR}/{_DISCOVER} && "
    f"cp {_CONFIG}/{DEEPSPEED_HOSTFILE} {DEEPSPEED_DIR}/{_HOSTS} && chmod 600 {DEEPSPEED_DIR}/{_HOSTS}"
)
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What a scaler's env name must be: it is ``export``-ed, unquoted, in the launcher's shell."""
_INIT_RESOURCES = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """An SSH key pair made at the edge (randomness is not the core's): upstream uses RSA
    1024-bit, the private key as PKCS#1 PEM (``RSA PRIVATE KEY``)."""

    private_key_pem: str
    public_key: str
    """authorized_keys format: ``ssh-rsa AAAA…\\n``."""


# ---------------------------------------------------------------------------
# Hostfiles and scripts (B.6.3, B.9, B.13 step 4)
# ---------------------------------------------------------------------------


def _first_worker_container(job: elastic.TrainingJob) -> dict[str, Any]:
    containers = (job.worker.template.get("spec") or {}).get("containers") or [{}]
    first = containers[0]
    return first if isinstance(first, dict) else {}


def slots(job: elastic.TrainingJob) -> int:
    """``slotsPerWorker``; else the first worker container's ``nvidia.com/gpu`` limit as an
    integer; else 1 (upstream getSlots; a limit that is not a whole number counts as 1, where
    upstream writes 0 slots)."""
    if job.spec.slots_per_worker is not None:
        return job.spec.slots_per_worker
    limit = ((_first_worker_container(job).get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE)
    text = str(limit) if isinstance(limit, (int, str)) else ""
    return int(text) if text.isdigit() and int(text) > 0 else 1


def hostfile(workers: Sequence[str], slot_count: int) -> str:
    """Elastic Horovod's hostfile: ``<worker>:<slots>`` per line."""
    return launchers.hostfile(workers, slot_count, launchers.COLON_LINE)


def deepspeed_hostfile(workers: Sequence[str], slot_count: int) -> str:
    """DeepSpeed's hostfile: ``<worker> slots=<slots>`` per line."""
    return launchers.hostfile(workers, slot_count, launchers.SLOTS_LINE)


def hostfile_script(workers: Sequence[str], slot_count: int) -> str:
    """The command that rewrites the launcher's hostfile (the ConfigMap is never updated)."""
    return f"echo {shlex.quote(hostfile(workers, slot_count))} > {HOSTFILE_PATH}"


def scaler_script(scaler: elastic.Scaler, pods: Sequence[str], slot_count: int) -> str:
    """A scaler's custom script, exactly as upstream builds it: ``export K=V  && timeout <t>
    sh <script> <p1>:<slots>,<p2>:<slots>`` (a leading space when there is no env), with every
    value quoted. ValueError for an env name that is not a shell identifier (validation
    refuses such a scaler before it runs)."""
    envs = scaler.spec.env or []
    for env in envs:
        if not SHELL_NAME.fullmatch(env.name or ""):
            raise ValueError("a scaler's env name must be a shell identifier")
    prefix = "".join(f"export {env.name}={shlex.quote(env.value or '')} " for env in envs) + " &&" if envs else ""
    workers = shlex.quote(",".join(f"{pod}:{slot_count}" for pod in pods))
    return f"{prefix} timeout {int(scaler.timeout)} sh {shlex.quote(scaler.spec.script or '')} {workers}"


def attach_command(job: elastic.TrainingJob) -> str:
    """How the launcher reaches a worker: ssh, or the kubexec script."""
    return KUBEXEC_PATH if job.attach_mode == elastic.ATTACH_KUBEXEC else SSH_ATTACH


def probe_script(job: elastic.TrainingJob) -> str:
    """Lists the launcher's processes attached to workers (B.13 step 4)."""
    # Both attach commands are kto's constants (no spec value), written as upstream does.
    return f"ps -ef | grep '{attach_command(job)}'"


def shut_down(job: elastic.TrainingJob, probe_output: str, workers: Sequence[str]) -> list[str]:
    """The workers no launcher process is attached to any more."""
    attach = attach_command(job)
    return [worker for worker in workers if f"{attach} {worker}" not in probe_output]


def kubexec_script(job: elastic.TrainingJob) -> str:
    """``kubexec.sh``, into the first worker container."""
    container = _first_worker_container(job).get("name")
    return launchers.kubexec_script(container if isinstance(container, str) else None)


# ---------------------------------------------------------------------------
# Children (B.6)
# ---------------------------------------------------------------------------


def _metadata(job: elastic.TrainingJob, name: str, labels: dict[str, str] | None, **extra: Any) -> Manifest:
    return owners.child_metadata(job, name, labels=labels, **extra)


def _mount_ssh(pod_spec: Manifest, secret: str) -> None:
    """Upstream MountRsaKey: the Secret's keys under ``.ssh/``, mounted at /root/.ssh in every
    container (not init containers)."""
    items = [
        {"key": "id_rsa", "path": f"{SSH_SUB_PATH}/id_rsa"},
        {"key": "id_rsa.pub", "path": f"{SSH_SUB_PATH}/id_rsa.pub"},
        {"key": "id_rsa.pub", "path": f"{SSH_SUB_PATH}/authorized_keys"},
        {"key": "config", "path": f"{SSH_SUB_PATH}/config"},
    ]
    pod_spec.setdefault("volumes", []).append(
        {"name": secret, "secret": {"secretName": secret, "items": items, "defaultMode": SSH_MODE}})
    for container in pod_spec.get("containers") or []:
        container.setdefault("volumeMounts", []).append(
            {"name": secret, "mountPath": SSH_MOUNT_PATH, "subPath": SSH_SUB_PATH})


def _pod(job: elastic.TrainingJob, template: Manifest, name: str, labels: dict[str, str]) -> tuple[Manifest, Manifest]:
    """A pod from a deep copy of ``template``: operator labels over the template's, restartPolicy
    Never. Returns the pod and its (mutable) spec."""
    tpl = copy.deepcopy(template)
    spec: Manifest = tpl.get("spec") or {}
    spec["restartPolicy"] = "Never"
    extra: dict[str, Any] = {}
    if annotations := objects.annotations_of(tpl):
        extra["annotations"] = annotations
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, name, {**objects.labels_of(tpl), **labels}, **extra),
        "spec": spec,
    }
    return pod, spec


def worker_pod(job: elastic.TrainingJob, name: str, scale_out: str | None = None) -> Manifest:
    """Worker ``name`` (B.6.1); ``scale_out`` labels a pod created by that ScaleOut."""
    index = naming.worker_index(job.name, name)
    labels = naming.worker_labels(job, index if index is not None else 0)
    if scale_out is not None:
        labels[naming.LABEL_SCALE_OUT] = scale_out
    pod, spec = _pod(job, job.worker.template, name, labels)
    first = spec["containers"][0]
    if not first.get("command"):
        sleep = "/usr/sbin/sshd  && sleep 365d" if job.attach_mode == elastic.ATTACH_SSH else "sleep 365d"
        first["command"] = ["sh", "-c", sleep]
    if job.attach_mode == elastic.ATTACH_SSH:
        _mount_ssh(spec, naming.secret_name(job))
    return pod


def worker_service(job: elastic.TrainingJob, name: str) -> Manifest:
    """The headless Service that makes ``<job>-worker-<i>`` resolvable (B.6.2)."""
    index = naming.worker_index(job.name, name)
    labels = naming.worker_labels(job, index if index is not None else 0)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name, labels),
        "spec": {"clusterIP": "None", "selector": dict(labels), "ports": [dict(p) for p in WORKER_PORTS]},
    }


def config_map(job: elastic.TrainingJob, workers: Sequence[str]) -> Manifest:
    """``<job>-config`` (B.6.3), from the workers Running when the launcher is created."""
    count = slots(job)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, naming.config_name(job), naming.app_labels(job)),
        "data": {
            launchers.HOSTFILE: hostfile(workers, count),
            DEEPSPEED_HOSTFILE: deepspeed_hostfile(workers, count),
            launchers.DISCOVER_HOSTS: DISCOVER_HOSTS_SCRIPT,
            launchers.KUBEXEC: kubexec_script(job),
        },
    }


def ssh_secret(job: elastic.TrainingJob, keys: KeyPair) -> Manifest:
    """Secret ``<job>`` (B.6.5): the key pair and an ssh config that trusts any host."""

    def encoded(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(job, job.name, naming.kto_labels(job)),
        "data": {"id_rsa": encoded(keys.private_key_pem), "id_rsa.pub": encoded(keys.public_key),
                 "config": encoded(SSH_CONFIG)},
    }


def service_account(job: elastic.TrainingJob) -> Manifest:
    return launchers.service_account(_metadata(job, naming.launcher_name(job), naming.app_labels(job)))


def role(job: elastic.TrainingJob, workers: Sequence[str]) -> Manifest:
    """B.6.6, with one departure: ``pods/exec`` into the named ``workers`` only, and no
    ``pods/exec`` rule when there are none (upstream's rule names no pod, so the launcher may
    exec into every pod of the namespace). The reconciler keeps the names equal to the job's
    worker pods as they change (``deciding``). The other rules as upstream writes them
    (``configmap``, singular, grants nothing)."""
    config_map_rule = {"verbs": ["get"], "apiGroups": [""], "resources": ["configmap"],
                       "resourceNames": [naming.config_name(job)]}
    return launchers.role(_metadata(job, naming.launcher_name(job), naming.app_labels(job)),
                          naming.sorted_workers(job.name, list(workers)), [config_map_rule])


def exec_allowed(role_manifest: Manifest) -> frozenset[str] | None:
    """The pods an observed launcher Role lets the launcher exec into: None for every pod
    (a rule without ``resourceNames``, as upstream writes it)."""
    names: set[str] = set()
    for rule in role_manifest.get("rules") or []:
        if not isinstance(rule, dict) or "pods/exec" not in (rule.get("resources") or []):
            continue
        if "create" not in (rule.get("verbs") or []) or "" not in (rule.get("apiGroups") or []):
            continue
        if not rule.get("resourceNames"):
            return None
        names.update(str(name) for name in rule["resourceNames"])
    return frozenset(names)


def role_binding(job: elastic.TrainingJob) -> Manifest:
    name = naming.launcher_name(job)
    return launchers.role_binding(_metadata(job, name, naming.app_labels(job)), name, job.namespace)


def launcher_pod(job: elastic.TrainingJob, settings: ElasticSettings) -> Manifest:
    """``<job>-launcher`` (B.6.4): the init container that copies the hostfile somewhere
    writable, the config volumes, the ServiceAccount and (ssh mode) the SSH Secret."""
    pod, spec = _pod(job, job.launcher.template, naming.launcher_name(job), naming.launcher_labels(job))
    spec.setdefault("initContainers", []).append({
        "name": INIT_CONTAINER,
        "image": settings.init_container_image,
        "imagePullPolicy": "IfNotPresent",
        "volumeMounts": [
            {"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR},
            {"name": DEEPSPEED_VOLUME, "mountPath": DEEPSPEED_DIR},
            {"name": CONFIG_VOLUME, "mountPath": launchers.CONFIG_MOUNT_PATH},
        ],
        "command": ["sh", "-c", _INIT_COMMAND],
        "resources": {"limits": dict(_INIT_RESOURCES), "requests": dict(_INIT_RESOURCES)},
    })
    first = spec["containers"][0]
    first.setdefault("volumeMounts", []).extend([
        {"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR},
        {"name": CONFIG_VOLUME, "mountPath": launchers.CONFIG_MOUNT_PATH},
        {"name": KUBECTL_VOLUME, "mountPath": launchers.KUBECTL_MOUNT_PATH},
        {"name": DEEPSPEED_VOLUME, "mountPath": DEEPSPEED_DIR},
    ])
    if job.attach_mode == elastic.ATTACH_KUBEXEC:
        first.setdefault("env", []).append({"name": "OMPI_MCA_plm_rsh_agent", "value": KUBEXEC_PATH})
    spec["serviceAccountName"] = naming.launcher_name(job)
    items = [
        launchers.config_item(launchers.HOSTFILE, launchers.HOSTFILE_MODE),
        launchers.config_item(launchers.DISCOVER_HOSTS, launchers.HOSTFILE_MODE),
        launchers.config_item(launchers.KUBEXEC, launchers.SCRIPT_MODE),
        launchers.config_item(DEEPSPEED_HOSTFILE, launchers.HOSTFILE_MODE),
    ]
    spec.setdefault("volumes", []).extend([
        {"name": HOSTFILE_VOLUME, "emptyDir": {}},
        {"name": DEEPSPEED_VOLUME, "emptyDir": {}},
        {"name": KUBECTL_VOLUME, "emptyDir": {}},
        {"name": CONFIG_VOLUME, "configMap": {"name": naming.config_name(job), "items": items}},
    ])
    if job.attach_mode == elastic.ATTACH_SSH:
        _mount_ssh(spec, naming.secret_name(job))
    return pod


def plan(job: elastic.TrainingJob, settings: ElasticSettings, keys: KeyPair) -> list[Manifest]:
    """Every child a new, defaulted TrainingJob gets, in upstream's creation order (spec
    B.8): the SSH Secret, the worker pods each followed by its Service, then (once the
    workers run) the launcher's ServiceAccount, Role and RoleBinding, the ConfigMap with
    the hostfile of those workers, and the launcher pod. What ``kto plan`` prints; the
    reconciler reaches the same objects one provisioning step at a time."""
    workers = [naming.worker_name(job.name, index) for index in range(job.worker.replicas or 0)]
    children: list[Manifest] = []
    if settings.create_ssh_secret and job.attach_mode == elastic.ATTACH_SSH:
        children.append(ssh_secret(job, keys))
    for name in workers:
        children += [worker_pod(job, name), worker_service(job, name)]
    children += [service_account(job), role(job, workers), role_binding(job), config_map(job, workers),
                 launcher_pod(job, settings)]
    return children
