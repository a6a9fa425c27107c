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
from shared.core import computations, errors, launchers, naming, owners, settings
from shared.core.frameworks import base

LAUNCHER = "Launcher"
WORKER = "Worker"

KUBECTL_VOLUME = "mpi-job-kubectl"
KUBECTL_DELIVERY = "kubectl-delivery"

INTEL_BOOTSTRAP = "I_MPI_HYDRA_BOOTSTRAP"
INTEL_BOOTSTRAP_EXEC = "I_MPI_HYDRA_BOOTSTRAP_EXEC"

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
    """``kubexec.sh``: OpenMPI's rsh agent, ``kubectl exec`` into the named pod (into ``mainContainer``
    when set)."""
    return launchers.kubexec_script(_spec(job).main_container)


def hostfile(job: jobs.Job) -> str:
    """One ``<pod> slots=<n>`` line per worker (launcher first when it has a GPU)."""
    hosts = [naming.mpi_launcher_name(job)] if is_gpu_launcher(job) else []
    hosts += [naming.mpi_worker_name(job, i) for i in range(worker_replicas(job))]
    return launchers.hostfile(hosts, slots(job), launchers.SLOTS_LINE)


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
    given = objects.spec_of(spec.template).get("serviceAccountName") if spec is not None else None
    return str(given) if given else naming.mpi_launcher_name(job)


def _metadata(job: jobs.Job, name: str) -> base.Manifest:
    """The metadata of the ConfigMap, ServiceAccount, Role and RoleBinding: ``app`` labels."""
    return owners.child_metadata(job, name, labels=naming.app_labels(job))


def desired_service_account(job: jobs.Job) -> base.Manifest | None:
    """ServiceAccount ``<job>-launcher``; None when the launcher template names its own (used as is)."""
    spec = job.specs().get(LAUNCHER)
    if spec is not None and objects.spec_of(spec.template).get("serviceAccountName"):
        return None
    return launchers.service_account(_metadata(job, naming.mpi_launcher_name(job)))


def desired_config_map(job: jobs.Job, observed: Sequence[Mapping[str, Any]] = ()) -> base.Manifest:
    """ConfigMap ``<job>-config`` with ``discover_hosts.sh``, ``hostfile``, ``kubexec.sh`` (keys sorted)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, naming.mpi_config_name(job)),
        "data": {
            launchers.DISCOVER_HOSTS: discover_hosts_script(job, observed),
            launchers.HOSTFILE: hostfile(job),
            launchers.KUBEXEC: kubexec_script(job),
        },
    }


def desired_role(job: jobs.Job) -> base.Manifest:
    """Role ``<job>-launcher``: read pods; ``pods/exec`` only into this job's workers, each
    named. With no workers there is no ``pods/exec`` rule at all: upstream leaves
    ``resourceNames`` empty then, which grants exec into every pod of the namespace."""
    workers = [naming.mpi_worker_name(job, i) for i in range(worker_replicas(job))]
    return launchers.role(_metadata(job, naming.mpi_launcher_name(job)), workers)


def desired_role_binding(job: jobs.Job) -> base.Manifest:
    """RoleBinding ``<job>-launcher``: the launcher's ServiceAccount → Role ``<job>-launcher``."""
    metadata = _metadata(job, naming.mpi_launcher_name(job))
    return launchers.role_binding(metadata, service_account_name(job), job.namespace)


def launcher_env(job: jobs.Job, user_env: Sequence[Mapping[str, Any]]) -> list[base.EnvVar]:
    """Env appended to the launcher's first container; Intel MPI vars only if ``user_env`` lacks them."""
    out = [
        base.env("OMPI_MCA_plm_rsh_agent", f"{launchers.CONFIG_MOUNT_PATH}/{launchers.KUBEXEC}"),
        base.env("OMPI_MCA_orte_default_hostfile", f"{launchers.CONFIG_MOUNT_PATH}/{launchers.HOSTFILE}"),
    ]
    if not is_gpu_launcher(job):
        # Keep a CPU launcher off the node's GPUs whatever the runtime would expose.
        out += [base.env("NVIDIA_VISIBLE_DEVICES", ""), base.env("NVIDIA_DRIVER_CAPABILITIES", "")]
    defined = {var.get("name") for var in user_env}
    if INTEL_BOOTSTRAP not in defined:
        out.append(base.env(INTEL_BOOTSTRAP, "rsh"))
    if INTEL_BOOTSTRAP_EXEC not in defined:
        out.append(base.env(INTEL_BOOTSTRAP_EXEC, f"{launchers.CONFIG_MOUNT_PATH}/{launchers.KUBEXEC}"))
    return out


def kubectl_delivery(job: jobs.Job, operator: settings.OperatorSettings) -> base.Manifest:
    """The launcher init container that copies kubectl into ``/opt/kube`` and waits for the workers."""
    resources = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
    return {
        "name": KUBECTL_DELIVERY,
        "image": operator.mpi_kubectl_delivery_image,
        "imagePullPolicy": "IfNotPresent",
        "env": [base.env("TARGET_DIR", launchers.KUBECTL_MOUNT_PATH), base.env("NAMESPACE", job.namespace)],
        "volumeMounts": [
            {"name": KUBECTL_VOLUME, "mountPath": launchers.KUBECTL_MOUNT_PATH},
            {"name": launchers.MPI_CONFIG_VOLUME, "mountPath": launchers.CONFIG_MOUNT_PATH},
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
    return {"name": launchers.MPI_CONFIG_VOLUME, "configMap": {"name": naming.mpi_config_name(job), "items": items}}


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
                {"name": KUBECTL_VOLUME, "mountPath": launchers.KUBECTL_MOUNT_PATH},
                {"name": launchers.MPI_CONFIG_VOLUME, "mountPath": launchers.CONFIG_MOUNT_PATH},
            ]
            volumes += [
                {"name": KUBECTL_VOLUME, "emptyDir": {}},
                _config_volume(
                    job,
                    [
                        launchers.config_item(launchers.KUBEXEC, launchers.SCRIPT_MODE),
                        launchers.config_item(launchers.HOSTFILE, launchers.HOSTFILE_MODE),
                        launchers.config_item(launchers.DISCOVER_HOSTS, launchers.SCRIPT_MODE),
                    ],
                ),
            ]
        else:
            if not container.get("command"):
                container["command"] = ["sleep"]
                container["args"] = ["365d"]
            # Open MPI checks the rsh agent's path on every rank, so workers mount it too.
            mounts.append({"name": launchers.MPI_CONFIG_VOLUME, "mountPath": launchers.CONFIG_MOUNT_PATH})
            volumes.append(
                _config_volume(job, [launchers.config_item(launchers.KUBEXEC, launchers.SCRIPT_MODE)])
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
        if launcher is not None and objects.spec_of(launcher.template).get("restartPolicy"):
            warnings.append((RESTART_POLICY_REASON, base.RESTART_POLICY_MESSAGE))
        if operator.gang_scheduling:
            name = operator.pod_scheduler_name
            templates = [objects.spec_of(spec.template) for spec in job.specs().values()]
            if not any(t.get("schedulerName") == name for t in templates):
                warnings.append((SCHEDULER_NAME_REASON, base.SCHEDULER_NAME_MESSAGE))
        return warnings
