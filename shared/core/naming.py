"""Names, labels and selectors of a job's children (spec §4.1, §4.2, §4.4; owner references: ``owners``).

In: a job (any kind), a replica type and an index. Out: the strings and small
dicts that identify the job's pods, Services and other children, exactly as
upstream spells them, so the operator can find children it (or upstream)
created.
"""

from __future__ import annotations

from shared.api import jobs

LABEL_OPERATOR_NAME = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"
JOB_ROLE_MASTER = "master"

LABEL_APP = "app"
"""The only label of MPI's ConfigMap, ServiceAccount, Role and RoleBinding."""

MPI_LAUNCHER_SUFFIX = "-launcher"
MPI_WORKER_SUFFIX = "-worker"
MPI_CONFIG_SUFFIX = "-config"


def general_name(job_name: str, replica_type: str, index: int | str) -> str:
    """``<job>-<rt lower>-<index>`` with every ``/`` turned into ``-`` (upstream GenGeneralName).

    The name of a replica pod and of its headless Service.
    """
    return f"{job_name}-{replica_type.lower()}-{index}".replace("/", "-")


def pod_name(job: jobs.Job, replica_type: str, index: int) -> str:
    """Name of pod ``index`` of ``replica_type`` for the five generic kinds (§4.1)."""
    return general_name(job.name, replica_type, index)


def service_name(job: jobs.Job, replica_type: str, index: int) -> str:
    """Name of the headless Service of one replica: the pod's own name (§4.6)."""
    return pod_name(job, replica_type, index)


def mpi_launcher_name(job: jobs.Job) -> str:
    """``<job>-launcher``: the MPI launcher pod, ServiceAccount, Role and RoleBinding."""
    return job.name + MPI_LAUNCHER_SUFFIX


def mpi_worker_name(job: jobs.Job, index: int) -> str:
    """``<job>-worker-<i>``: an MPI worker pod."""
    return f"{job.name}{MPI_WORKER_SUFFIX}-{index}"


def mpi_config_name(job: jobs.Job) -> str:
    """``<job>-config``: the MPI ConfigMap (hostfile, kubexec.sh, discover_hosts.sh)."""
    return job.name + MPI_CONFIG_SUFFIX


def job_label_value(job: jobs.Job) -> str:
    """Value of the ``job-name`` label: the job name with ``/`` → ``-``."""
    return job.name.replace("/", "-")


def job_selector(job: jobs.Job) -> dict[str, str]:
    """operator-name + job-name: the label selector that lists every child pod/Service of a job."""
    return {
        LABEL_OPERATOR_NAME: job.CONTROLLER_NAME,
        LABEL_JOB_NAME: job_label_value(job),
    }


def service_labels(job: jobs.Job, replica_type: str, index: int) -> dict[str, str]:
    """Labels (and selector) of a replica's headless Service: no job-role, no template labels (§4.6)."""
    labels = job_selector(job)
    labels[LABEL_REPLICA_TYPE] = replica_type.lower()
    labels[LABEL_REPLICA_INDEX] = str(index)
    return labels


def pod_labels(job: jobs.Job, replica_type: str, index: int, *, master_role: bool) -> dict[str, str]:
    """The operator's labels of a replica pod (§4.2), ``job-role=master`` on master-role pods.

    Whether a pod has the master role is a per-kind rule (``Framework.is_master_role``).
    """
    labels = service_labels(job, replica_type, index)
    if master_role:
        labels[LABEL_JOB_ROLE] = JOB_ROLE_MASTER
    return labels


def mpi_launcher_labels(job: jobs.Job) -> dict[str, str]:
    """MPI launcher pod labels: replica-type ``launcher`` and job-role ``master``, no index (§4.2)."""
    labels = job_selector(job)
    labels[LABEL_REPLICA_TYPE] = "launcher"
    labels[LABEL_JOB_ROLE] = JOB_ROLE_MASTER
    return labels


def app_labels(job: jobs.Job) -> dict[str, str]:
    """The labels of MPI's ConfigMap, ServiceAccount, Role and RoleBinding: upstream's
    ``app: <job>``, and (added by kto) the job-name label, so the watcher's
    label-selected watches see these children change or vanish too."""
    return {LABEL_APP: job.name, LABEL_JOB_NAME: job_label_value(job)}


def replica_selector(job: jobs.Job, replica_type: str) -> str:
    """``replicaStatuses[RT].selector`` (§4.4): three labels, keys sorted, ``k=v`` comma-joined."""
    labels = job_selector(job)
    labels[LABEL_REPLICA_TYPE] = replica_type.lower()
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))

