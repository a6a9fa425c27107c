"""Hydration: what a worker fetches for a job key it has not seen (after a rebalance or restart).

In: a client and a job's kind, namespace and name. Out: the job (None when it
does not exist) and its children: one GET of the job and one label-selected
LIST per child type the kind can have, all at once; each child as its kind's projection
(:mod:`shared.api.projections`: what decisions read, as a record carries it). Secrets are never listed:
the SSH Secret kto makes for a job is read by its name (a TrainingJob's
``<job>``, an MPIJob v2beta1's ``<job>-ssh``, a TrainJob's ``<job>-mpi-ssh-auth``), so the
reconciler needs no right to list Secrets, and the watcher does not watch them.

A TrainJob's objects are all read by name (its JobSet, PodGroup of either kind, MPI
Secret and hostfile, runtime snapshot), and so is the runtime its ``runtimeRef`` names,
once the job is read: a TrainingRuntime in the job's namespace or a ClusterTrainingRuntime
(a 404 is no runtime, which the job's decision says as upstream does). The runtime is
handed to the decision among the children, so a pass's basis carries it and
``kto replay`` decides from the runtime the pass saw.
"""

from __future__ import annotations

import asyncio
from typing import Any

from shared.api import jobsets, objects, projections
from shared.core.mpi_v2 import planning as mpi_v2_planning
from shared.core.trainer import planning as trainer_planning
from shared.core.trainer import podsets as trainer_podsets
from shared.kube import clients, resources

JOB_NAME_LABEL = "training.kubeflow.org/job-name"

MPI_APP_TYPES = (resources.CONFIGMAPS, resources.SERVICEACCOUNTS, resources.ROLES, resources.ROLEBINDINGS)
"""MPIJob children that upstream labels only with ``app: <job>``."""

MPI_V2_TYPES = (resources.SERVICES, resources.BATCH_JOBS)
"""MPIJob v2beta1 children besides its pods, ConfigMap (which the ``app`` LIST finds) and SSH Secret."""

TRAINING_JOB_TYPES = (
    resources.PODS, resources.SERVICES, resources.CONFIGMAPS,
    resources.SERVICEACCOUNTS, resources.ROLES, resources.ROLEBINDINGS,
)
"""A TrainingJob's children besides its SSH Secret."""

BY_NAME = ""
"""Not a label: the child named like the job is read (GET): the elastic HPA, the PodGroup, a
TrainingJob's SSH Secret."""

MPI_SSH_SECRET = mpi_v2_planning.SSH_SECRET_SUFFIX
"""Not a label: the child named ``<job>`` + this suffix is read: an MPIJob v2beta1's SSH Secret."""

TRAINJOB_NAMED = (trainer_podsets.MPI_SECRET_SUFFIX, trainer_podsets.MPI_HOSTFILE_SUFFIX,
                  trainer_podsets.SNAPSHOT_SUFFIX)
"""Not labels: a TrainJob's MPI Secret, MPI hostfile and runtime snapshot, ``<job>`` + each suffix."""

SCALER_TARGET = "spec.selector.name"
"""Not a label: the ScaleIns / ScaleOuts of the namespace whose ``spec.selector.name`` is the job."""


def child_types(
    kind: str, pods_only: bool = False, podgroups: resources.ResourceType | None = None,
) -> list[tuple[resources.ResourceType, str]]:
    """(resource type, label key) pairs to list for a job of ``kind`` (:data:`BY_NAME`,
    :data:`MPI_SSH_SECRET`: read by name, see :func:`reads_by_name`); ``podgroups``: the
    PodGroup kind of gang mode."""
    if pods_only:
        # An MPIJob v2beta1's state is its launcher Job's: the status needs it too.
        return [(resources.PODS, JOB_NAME_LABEL), *([(resources.BATCH_JOBS, JOB_NAME_LABEL)] if kind == "MPIJob" else [])]
    if kind == resources.JOBSETS.kind:
        # A JobSet's Jobs carry its name label; its headless Service (no labels) is named as
        # its subdomain, which is the JobSet's name unless the spec says otherwise.
        return [(resources.BATCH_JOBS, jobsets.JOBSET_NAME_LABEL), (resources.SERVICES, BY_NAME)]
    if kind == resources.TRAINJOBS.kind:
        return [(resources.JOBSETS, BY_NAME), (resources.PLUGINS_PODGROUPS, BY_NAME),
                (resources.VOLCANO_PODGROUPS, BY_NAME), (resources.SECRETS, trainer_podsets.MPI_SECRET_SUFFIX),
                *((resources.CONFIGMAPS, suffix) for suffix in TRAINJOB_NAMED[1:])]
    if kind == resources.TRAININGJOBS.kind:
        # kto labels every child of a TrainingJob with the job name; its scalers name it.
        return [*((rt, JOB_NAME_LABEL) for rt in TRAINING_JOB_TYPES), (resources.SECRETS, BY_NAME),
                *((rt, SCALER_TARGET) for rt in resources.SCALER_TYPES.values())]
    types = [(resources.PODS, JOB_NAME_LABEL)]
    if kind == "MPIJob":
        types += [(rt, "app") for rt in MPI_APP_TYPES]
        # Which version wrote the job is known once it is read: list v2beta1's children too.
        types += [(rt, JOB_NAME_LABEL) for rt in MPI_V2_TYPES]
        types.append((resources.SECRETS, MPI_SSH_SECRET))
    else:
        types.append((resources.SERVICES, JOB_NAME_LABEL))
    if kind == "PyTorchJob":
        types.append((resources.HPAS, BY_NAME))
    if podgroups is not None:
        types.append((podgroups, BY_NAME))  # named like the job, without labels (as upstream)
    return types


def reads_by_name(label: str) -> bool:
    """Whether a :func:`child_types` entry is a GET by name rather than a LIST."""
    return label in (BY_NAME, MPI_SSH_SECRET, *TRAINJOB_NAMED)


async def hydrate(
    client: clients.KubeClient, kind: str, namespace: str, name: str, pods_only: bool = False,
    podgroups: resources.ResourceType | None = None,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The job and its children, read fresh from the API server: the GET of the job
    and the LISTs of its children go out at once (the LISTs select by the job's
    name, which is known before the job is read); children of a job that is
    gone are dropped. In gang mode ``podgroups`` is the PodGroup kind, read by
    the job's name (a 404, also for a kind the cluster does not serve, is none)."""
    job_type = resources.JOB_TYPES[kind]
    results = await asyncio.gather(
        _job(client, job_type, namespace, name),
        *(_children(client, rt, label, namespace, name) for rt, label in child_types(kind, pods_only, podgroups)),
    )
    job = results[0]
    if job is None:
        return None, []
    job.setdefault("apiVersion", job_type.api_version)
    job.setdefault("kind", kind)
    children = [projections.project(child) for items in results[1:] for child in items]
    if kind == resources.TRAINJOBS.kind and not pods_only:
        children += await _runtime(client, job)
    return job, children


async def _runtime(client: clients.KubeClient, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The TrainingRuntime or ClusterTrainingRuntime the TrainJob's ``runtimeRef`` names
    (none for a 404, or for a kind or group that is not a runtime's)."""
    group, kind, name = trainer_planning.runtime_ref(job)
    rt = resources.RUNTIME_TYPES.get(kind)
    if rt is None or group != rt.group or not name:
        return []
    return await _named(client, rt, objects.namespace_of(job) if rt.namespaced else None, name)


async def _job(
    client: clients.KubeClient, job_type: resources.ResourceType, namespace: str | None, name: str,
) -> dict[str, Any] | None:
    """The object of that name (a job, or any object read by name); None for a 404."""
    try:
        return await client.get(job_type, namespace, name)
    except clients.ApiError as exc:
        if exc.not_found:
            return None
        raise


async def _named(client: clients.KubeClient, rt: resources.ResourceType, namespace: str | None,
                 name: str) -> list[dict[str, Any]]:
    """The object of that name, with its apiVersion and kind; none for a 404."""
    found = await _job(client, rt, namespace, name)
    if found is None:
        return []
    found.setdefault("apiVersion", rt.api_version)
    found.setdefault("kind", rt.kind)
    return [found]


async def _children(
    client: clients.KubeClient, rt: resources.ResourceType, label: str, namespace: str, name: str,
) -> list[dict[str, Any]]:
    """The job's children of one type: a label-selected LIST, or a GET by name for a type
    without the label (the elastic HPA, the PodGroup) and for the SSH Secret."""
    if label == SCALER_TARGET:
        items, _ = await client.list(rt, namespace)
        return [i for i in items if ((i.get("spec") or {}).get("selector") or {}).get("name") == name]
    if not reads_by_name(label):
        items, _ = await client.list(rt, namespace, label_selector=f"{label}={name}")
        return items
    return await _named(client, rt, namespace, name + label)  # BY_NAME is no suffix
