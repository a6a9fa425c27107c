"""Names, labels and annotations of a TrainingJob's children, as upstream spells them (spec B.5).

In: a TrainingJob (or its name) and a worker index. Out: strings and small
label maps, so kto finds children that it or upstream's et-operator created.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from shared.api import elastic
from shared.core import naming as core_naming

LABEL_GROUP_NAME = "group-name"
LABEL_JOB_NAME = "training-job-name"
LABEL_ROLE = "training-job-role"
LABEL_REPLICA_INDEX = "replica-index"
LABEL_SCALE_OUT = "scaleout-name"
LABEL_APP = "app"
ROLE_LAUNCHER = "launcher"
ROLE_WORKER = "worker"

ANNOTATION_SUSPENDED = "job-supervisor.kube-ai.io/job-suspended"
ANNOTATION_SSH_SECRET = "arena.kubeflow.org/ssh-secret"

WORKER_SUFFIX = "-worker"
LAUNCHER_SUFFIX = "-launcher"
CONFIG_SUFFIX = "-config"

_INDEX = re.compile(r"-(\d+)$")


def worker_name(job_name: str, index: int) -> str:
    """``<job>-worker-<i>``: a worker pod and its Service."""
    return f"{job_name}{WORKER_SUFFIX}-{index}"


def worker_index(job_name: str, name: str) -> int | None:
    """The index of ``<job>-worker-<i>``; None for any other name."""
    prefix = f"{job_name}{WORKER_SUFFIX}-"
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def max_index(names: Iterable[str]) -> int:
    """Upstream getWorkerPodsMaxIndex: the largest number after the last ``-``; 0 for a
    non-empty list without one, -1 for an empty list. New workers take the next ones."""
    listed = list(names)
    if not listed:
        return -1
    found = [int(m.group(1)) for m in (_INDEX.search(n) for n in listed) if m is not None]
    return max([0, *found])


def sorted_workers(job_name: str, names: Iterable[str]) -> list[str]:
    """Worker names sorted by numeric index (``-2`` before ``-10``); names without an
    index are dropped, as upstream sortPodNames drops them."""
    indexed = [(worker_index(job_name, n), n) for n in names]
    return [name for index, name in sorted((i, n) for i, n in indexed if i is not None)]


def launcher_name(job: elastic.TrainingJob) -> str:
    """``<job>-launcher``: the launcher pod, its ServiceAccount, Role and RoleBinding."""
    return job.name + LAUNCHER_SUFFIX


def config_name(job: elastic.TrainingJob) -> str:
    """``<job>-config``: the ConfigMap with the first hostfile and the scripts."""
    return job.name + CONFIG_SUFFIX


def secret_name(job: elastic.TrainingJob) -> str:
    """The SSH Secret mounted into launcher and workers: the annotation's, else ``<job>``."""
    return (job.metadata.annotations or {}).get(ANNOTATION_SSH_SECRET) or job.name


def kto_labels(job: elastic.TrainingJob) -> dict[str, str]:
    """``training.kubeflow.org/job-name: <job>`` on every child, beside upstream's labels:
    kto's watcher selects the children of every kind by it (upstream's ConfigMap, RBAC
    objects and Secret carry no ``training-job-name``)."""
    return {core_naming.LABEL_JOB_NAME: job.name}


def job_labels(job: elastic.TrainingJob) -> dict[str, str]:
    """``group-name`` + ``training-job-name``: upstream GenLabels (and :func:`kto_labels`)."""
    return {LABEL_GROUP_NAME: elastic.GROUP, LABEL_JOB_NAME: job.name, **kto_labels(job)}


def worker_labels(job: elastic.TrainingJob, index: int) -> dict[str, str]:
    """The operator's labels of a worker pod, and the labels and selector of its Service."""
    return {**job_labels(job), LABEL_ROLE: ROLE_WORKER, LABEL_REPLICA_INDEX: str(index)}


def launcher_labels(job: elastic.TrainingJob) -> dict[str, str]:
    return {**job_labels(job), LABEL_ROLE: ROLE_LAUNCHER}


def app_labels(job: elastic.TrainingJob) -> dict[str, str]:
    """``app: <job>``: the ConfigMap, ServiceAccount, Role and RoleBinding (and :func:`kto_labels`)."""
    return {LABEL_APP: job.name, **kto_labels(job)}


def worker_selector(job: elastic.TrainingJob) -> str:
    """The label selector listing the job's worker pods and Services (within its namespace)."""
    labels = {**job_labels(job), LABEL_ROLE: ROLE_WORKER}
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))

