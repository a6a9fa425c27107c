"""MPIJob (legacy kubeflow.org/v1): kubectl-exec transport, launcher and worker pods (§5.6, A.18).

In: a defaulted MPIJob, the operator settings and the job's observed pods
(only Running workers matter: they fill ``discover_hosts.sh``). Out: the
launcher ServiceAccount (unless the launcher template names its own), the
``<job>-config`` ConfigMap, the launcher Role and RoleBinding, and the
per-pod touches: worker ``sleep 365d`` default and ``kubexec.sh`` mount,
launcher ``kubectl-delivery`` init container, OpenMPI / Intel MPI env and
volumes. No Services.
Upstream: ``pkg/controller.v1/mpi/{mpijob_controller.go,mpijob.go}@v1.9.0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.api import jobs, objects
from shared.core import computations, errors, naming, owners, settings
from shared.core.frameworks import base

LAUNCHER = "Launcher"
WORKER = "Worker"

CONFIG_VOLUME = "mpi-job-config"
CONFIG_MOUNT_PATH = "/etc/mpi"
KUBECTL_VOLUME = "mpi-job-kubectl"
KUBECTL_MOUNT_PATH = "/opt/kube"
KUBEXEC_SCRIPT = "kubexec.sh"
HOSTFILE = "hostfile"
DISCOVER_HOSTS_SCRIPT = "discover_hosts.sh"
KUBECTL_DELIVERY = "kubectl-delivery"
SCRIPT_MODE = 0o555
HOSTFILE_MODE = 0o444

INTEL_BOOTSTRAP = "I_MPI_HYDRA_BOOTSTRAP"
INTEL_BOOTSTRAP_EXEC = "I_MPI_HYDRA_BOOTSTRAP_EXEC"

EXEC_VERBS = ("create", "get")
"""``pods/exec`` verbs of the launcher Role: ``create`` as upstream (kubectl's SPDY exec is a
POST), and ``get``, which the WebSocket exec of kubectl 1.31 and later is a GET of (since
Kubernetes 1.35 the API server asks for both)."""

RESTART_POLICY_REASON = "SettedPodTemplateRestartPolicy"
SCHEDULER_NAME_REASON = "SettedPodTemplateSchedulerName"


def _spec(job: jobs.Job) -> jobs.MPIJobSpec:
    if not isinstance(job.spec, jobs.MPIJobSpec):
        raise errors.PlanError("kind", f"expected an MPIJob, got {job.KIND}")
    return job.spec


def slots(job: jobs.Job) -> int:
    """``slotsPerWorker``, 1 when unset."""
    value = _spec(job).slots_per_worker
    return 1 if value is None else value


def worker_replicas(job: jobs.Job) -> int:
    return base.replicas(job, WORKER, default=0)


def is_gpu_launcher(job: jobs.Job) -> bool:
    """Any launcher container has a resource *limit* ending in ``.com/gpu`` or containing ``gpu``."""
    for container in base.containers(job, LAUNCHER):
        limits = (container.get("resources") or {}).get("limits") or {}
        if any(key.endswith(".com/gpu") or "gpu" in key for key in limits):
            return True
    return False


def kubexec_script(job: jobs.Job) -> str:
    """``kubexec.sh``: OpenMPI's rsh agent, ``kubectl exec`` into the named pod (no trailing newline)."""
    command = f"{KUBECTL_MOUNT_PATH}/kubectl exec ${{POD_NAME}}"
    main_container = _spec(job).main_container
    if main_container:
        command += f" --container {main_container}"
    return f'#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n{command} -- /bin/sh -c "$*"'


def hostfile(job: jobs.Job) -> str:
    """One ``<pod> slots=<n>`` line per worker (launcher first when it has a GPU), each ending in ``\\n``."""
    n = slots(job)
    lines = [f"{naming.mpi_launcher_name(job)} slots={n}\n"] if is_gpu_launcher(job) else []
    lines += [f"{naming.mpi_worker_name(job, i)} slots={n}\n" for i in range(worker_replicas(job))]
    return "".join(lines)


def _is_running_worker(job: jobs.Job, pod: Mapping[str, Any]) -> bool:
    """A Running worker pod of this job, controlled by it (upstream getRunningWorkerPods)."""
    if pod.get("kind", "Pod") != "Pod":
        return False
    if (objects.namespace_of(pod) or job.namespace) != job.namespace:
        return False
    labels = objects.labels_of(pod)
    wanted = {**naming.job_selector(job), naming.LABEL_REPLICA_TYPE: WORKER.lower()}
    if any(labels.get(key) != value for key, value in wanted.items()):
        return False
    if (pod.get("status") or {}).get("phase") != "Running":
        return False
    return owners.controls(job, pod)


def discover_hosts_script(job: jobs.Job, observed: Sequence[Mapping[str, Any]]) -> str:
    """``discover_hosts.sh``: ``echo <pod>:<slots>`` per Running worker sorted by name (GPU launcher first)."""
    n = slots(job)
    script = "#!/bin/sh"
    if is_gpu_launcher(job):
        script += f"\necho {naming.mpi_launcher_name(job)}:{n}\n"
    names = sorted(objects.name_of(pod) for pod in observed if _is_running_worker(job, pod))
    for name in names:
        script += f"\necho {name}:{n}"
    return script


def service_account_name(job: jobs.Job) -> str:
    """The launcher template's ``serviceAccountName``, else ``<job>-launcher``."""
    spec = job.specs().get(LAUNCHER)
    given = base.pod_spec(spec.template).get("serviceAccountName") if spec is not None else None
    return str(given) if given else naming.mpi_launcher_name(job)


def _metadata(job: jobs.Job, name: str) -> base.Manifest:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": naming.app_labels(job),
        "ownerReferences": [owners.reference(job)],
    }


def desired_service_account(job: jobs.Job) -> base.Manifest | None:
    """ServiceAccount ``<job>-launcher``; None when the launcher template names its own (used as is)."""
    spec = job.specs().get(LAUNCHER)
    if spec is not None and base.pod_spec(spec.template).get("serviceAccountName"):
        return None
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(job, naming.mpi_launcher_name(job))}


def desired_config_map(job: jobs.Job, observed: Sequence[Mapping[str, Any]] = ()) -> base.Manifest:
    """ConfigMap ``<job>-config`` with ``discover_hosts.sh``, ``hostfile``, ``kubexec.sh`` (keys sorted)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, naming.mpi_config_name(job)),
        "data": {
            DISCOVER_HOSTS_SCRIPT: discover_hosts_script(job, observed),
            HOSTFILE: hostfile(job),
            KUBEXEC_SCRIPT: kubexec_script(job),
        },
    }


def desired_role(job: jobs.Job) -> base.Manifest:
    """Role ``<job>-launcher``: read pods; ``pods/exec`` only into this job's workers, each
    named. With no workers there is no ``pods/exec`` rule at all: upstream leaves
    ``resourceNames`` empty then, which grants exec into every pod of the namespace."""
    rules: list[base.Manifest] = [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]
    workers = [naming.mpi_worker_name(job, i) for i in range(worker_replicas(job))]
    if workers:
        rules.append({"verbs": list(EXEC_VERBS), "apiGroups": [""], "resources": ["pods/exec"], "resourceNames": workers})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(job, naming.mpi_launcher_name(job)),
        "rules": rules,
    }


def desired_role_binding(job: jobs.Job) -> base.Manifest:
    """RoleBinding ``<job>-launcher``: the launcher's ServiceAccount → Role ``<job>-launcher``."""
    name = naming.mpi_launcher_name(job)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(job, name),
        "subjects": [{"kind": "ServiceAccount", "name": service_account_name(job), "namespace": job.namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
    }


def launcher_env(job: jobs.Job, user_env: Sequence[Mapping[str, Any]]) -> list[base.EnvVar]:
    """Env appended to the launcher's first container; Intel MPI vars only if ``user_env`` lacks them."""
    out = [
        base.env("OMPI_MCA_plm_rsh_agent", f"{CONFIG_MOUNT_PATH}/{KUBEXEC_SCRIPT}"),
        base.env("OMPI_MCA_orte_default_hostfile", f"{CONFIG_MOUNT_PATH}/{HOSTFILE}"),
    ]
    if not is_gpu_launcher(job):
        # Keep a CPU launcher off the node's GPUs whatever the runtime would expose.
        out += [base.env("NVIDIA_VISIBLE_DEVICES", ""), base.env("NVIDIA_DRIVER_CAPABILITIES", "")]
    defined = {var.get("name") for var in user_env}
    if INTEL_BOOTSTRAP not in defined:
        out.append(base.env(INTEL_BOOTSTRAP, "rsh"))
    if INTEL_BOOTSTRAP_EXEC not in defined:
        out.append(base.env(INTEL_BOOTSTRAP_EXEC, f"{CONFIG_MOUNT_PATH}/{KUBEXEC_SCRIPT}"))
    return out


def kubectl_delivery(job: jobs.Job, operator: settings.OperatorSettings) -> base.Manifest:
    """The launcher init container that copies kubectl into ``/opt/kube`` and waits for the workers."""
    resources = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
    return {
        "name": KUBECTL_DELIVERY,
        "image": operator.mpi_kubectl_delivery_image,
        "imagePullPolicy": "IfNotPresent",
        "env": [base.env("TARGET_DIR", KUBECTL_MOUNT_PATH), base.env("NAMESPACE", job.namespace)],
        "volumeMounts": [
            {"name": KUBECTL_VOLUME, "mountPath": KUBECTL_MOUNT_PATH},
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH},
        ],
        "resources": {"limits": dict(resources), "requests": dict(resources)},
    }


def _first_container(job: jobs.Job, replica_type: str, spec: base.Manifest) -> base.Manifest:
    found = spec.get("containers")
    if not isinstance(found, list) or not found or not isinstance(found[0], dict):
        raise errors.PlanError(base.containers_field(job, replica_type), "Required value")
    container: base.Manifest = found[0]
    return container


def _config_volume(job: jobs.Job, items: list[base.Manifest]) -> base.Manifest:
    return {"name": CONFIG_VOLUME, "configMap": {"name": naming.mpi_config_name(job), "items": items}}


def _status_rules(p: computations.Computation) -> None:
    """§7.7: only the launcher decides Running and Succeeded; reason MPIJobMPIJobFailed kept (wire-level)."""
    job = p.job
    for rt in computations.replica_order(job):
        c = p.counts[rt]
        if rt == "Launcher":
            if c.active > 0:
                p.running(f"MPIJob {job.name} is running.")
            if p.replicas(rt) - c.succeeded == 0:
                p.succeeded(f"MPIJob {job.name} is successfully completed.")
                return
        if c.failed > 0:
            message = f"MPIJob {job.name} is failed because {c.failed} {rt} replica(s) failed."
            if p.policy(rt) == "ExitCode":
                p.restarting(f"MPIJob {job.name} is restarting because {c.failed} {rt} replica(s) failed.")
            else:
                p.failed(message, reason_word="MPIJobFailed")


class MPI:
    """Legacy MPIJob: its own pod shapes and RBAC, no Services (not a ``GenericFramework``)."""

    kind = jobs.MPIJob.KIND
    has_services = False
    status_selector = False

    def status_rules(self, p: computations.Computation) -> None:
        _status_rules(p)

    def replica_order(self, job: jobs.Job) -> list[str]:
        """Workers first, then the launcher, as upstream creates them."""
        return [rt for rt in (WORKER, LAUNCHER) if rt in job.specs()]

    def replica_count(self, job: jobs.Job, replica_type: str) -> int:
        return base.replicas(job, replica_type, default=0 if replica_type == WORKER else 1)

    def pod_name(self, job: jobs.Job, replica_type: str, index: int) -> str:
        if replica_type == LAUNCHER:
            return naming.mpi_launcher_name(job)
        return naming.mpi_worker_name(job, index)

    def pod_labels(self, job: jobs.Job, replica_type: str, index: int) -> dict[str, str]:
        """Workers: type + index; the launcher: type ``launcher`` + job-role, no index (§4.2)."""
        if replica_type == LAUNCHER:
            return naming.mpi_launcher_labels(job)
        return naming.pod_labels(job, replica_type, index, master_role=False)

    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool:
        return replica_type == LAUNCHER

    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.EnvVar]:
        if replica_type != LAUNCHER:
            return []
        launcher = base.containers(job, LAUNCHER)
        user_env = [var for var in (launcher[0].get("env") or []) if isinstance(var, dict)] if launcher else []
        return launcher_env(job, user_env)

    def env_containers(self, job: jobs.Job, replica_type: str, containers: Sequence[base.Manifest]) -> list[int]:
        """The launcher's first container, by position (not by name)."""
        return [0] if replica_type == LAUNCHER and containers else []

    def init_containers(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.Manifest]:
        return [kubectl_delivery(job, operator)] if replica_type == LAUNCHER else []

    def finish_pod_spec(self, job: jobs.Job, replica_type: str, index: int, spec: base.Manifest) -> base.Manifest:
        """Workers: ``sleep 365d`` default, ``kubexec.sh`` mount; launcher: SA, kubectl + config mounts."""
        container = _first_container(job, replica_type, spec)
        mounts = list(container.get("volumeMounts") or [])
        volumes = list(spec.get("volumes") or [])
        if replica_type == LAUNCHER:
            if not spec.get("serviceAccountName"):
                spec["serviceAccountName"] = naming.mpi_launcher_name(job)
            mounts += [
                {"name": KUBECTL_VOLUME, "mountPath": KUBECTL_MOUNT_PATH},
                {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH},
            ]
            volumes += [
                {"name": KUBECTL_VOLUME, "emptyDir": {}},
                _config_volume(
                    job,
                    [
                        {"key": KUBEXEC_SCRIPT, "path": KUBEXEC_SCRIPT, "mode": SCRIPT_MODE},
                        {"key": HOSTFILE, "path": HOSTFILE, "mode": HOSTFILE_MODE},
                        {"key": DISCOVER_HOSTS_SCRIPT, "path": DISCOVER_HOSTS_SCRIPT, "mode": SCRIPT_MODE},
                    ],
                ),
            ]
        else:
            if not container.get("command"):
                container["command"] = ["sleep"]
                container["args"] = ["365d"]
            # Open MPI checks the rsh agent's path on every rank, so workers mount it too.
            mounts.append({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH})
            volumes.append(
                _config_volume(job, [{"key": KUBEXEC_SCRIPT, "path": KUBEXEC_SCRIPT, "mode": SCRIPT_MODE}])
            )
        container["volumeMounts"] = mounts
        spec["volumes"] = volumes
        return spec

    def auxiliary_children(
        self, job: jobs.Job, operator: settings.OperatorSettings, observed: Sequence[base.Manifest]
    ) -> list[base.Manifest]:
        """ServiceAccount (unless the template names one), ConfigMap, Role, RoleBinding — upstream's order."""
        account = desired_service_account(job)
        return [
            *([] if account is None else [account]),
            desired_config_map(job, observed),
            desired_role(job),
            desired_role_binding(job),
        ]

    def template_warnings(self, job: jobs.Job, operator: settings.OperatorSettings) -> list[tuple[str, str]]:
        """``SettedPodTemplateRestartPolicy`` (launcher template only) and ``SettedPodTemplateSchedulerName``.

        Upstream's scheduler check is inverted for MPI: it warns when *no*
        template names the gang scheduler, which is kept.
        """
        warnings: list[tuple[str, str]] = []
        launcher = job.specs().get(LAUNCHER)
        if launcher is not None and base.pod_spec(launcher.template).get("restartPolicy"):
            warnings.append((RESTART_POLICY_REASON, base.RESTART_POLICY_MESSAGE))
        if operator.gang_scheduling:
            name = base.gang_scheduler_name(operator)
            templates = [base.pod_spec(spec.template) for spec in job.specs().values()]
            if not any(t.get("schedulerName") == name for t in templates):
                warnings.append((SCHEDULER_NAME_REASON, base.SCHEDULER_NAME_MESSAGE))
        return warnings
