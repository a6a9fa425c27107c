"""Which job an object belongs to: pure, no I/O.

In: a Kubernetes object as a dict (a job of a family in
:data:`shared.core.families.REGISTRY`, or a pod, Service, ConfigMap… that may
belong to one) and the cluster name.
Out: the object's :class:`~shared.bus.records.JobKey`
(``cluster/namespace/kind/name``), or None for an object that belongs to no job.

A job is keyed by itself. A child is keyed by its controller ownerReference
when that points at a kubeflow.org/v1 job kind (or at a kubeflow.org/v2beta1
MPIJob), else by its ``training.kubeflow.org/job-name`` and
``training.kubeflow.org/operator-name`` labels (``pytorchjob-controller`` →
PyTorchJob, ``mpi-operator`` → MPIJob: the pods of an MPIJob v2beta1's
launcher Job, whose controller is that Job), as upstream finds children. An
MPIJob has one key whichever of its two versions wrote it. et-operator's
TrainingJob is keyed by itself and its children by their controller
ownerReference; a ScaleIn or ScaleOut by the TrainingJob its
``spec.selector.name`` names, so the scaling of a job is read in order with
the job. A JobSet is a job of its own family (kto serves it, or the real JobSet
controller does: then ``unserved`` names its kind and only its owner's key is given), its
batch Jobs keyed by their controller; a job whose controller is another job (a JobSet made
by a TrainJob) is also published under its owner's key (:func:`owner_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.bus import records
from shared.api import jobsets, objects
from shared.core import families, naming

LABEL_JOB_NAME = naming.LABEL_JOB_NAME
LABEL_OPERATOR_NAME = naming.LABEL_OPERATOR_NAME

KIND_BY_CONTROLLER: dict[str, str] = families.REGISTRY.operator_names
"""Value of the operator-name label → job kind."""


def _key(cluster: str, namespace: str, kind: str, name: str) -> records.JobKey | None:
    if not (namespace and name) or "/" in namespace or "/" in name:
        return None
    return records.JobKey(cluster=cluster, namespace=namespace, kind=kind, name=name)


def is_job(obj: dict[str, Any]) -> bool:
    """True for a job of a family kto serves (:data:`shared.core.families.REGISTRY`)."""
    return families.REGISTRY.is_job(obj.get("apiVersion"), obj.get("kind"))


def job_key(cluster: str, obj: dict[str, Any], unserved: frozenset[str] = frozenset()) -> records.JobKey | None:
    """The key of the job ``obj`` is (or belongs to), None if it belongs to none or to a job
    of a kind in ``unserved`` (a kind another controller serves here)."""
    key = _job_key(cluster, obj)
    return None if key is None or key.kind in unserved else key


def owner_key(cluster: str, obj: dict[str, Any]) -> records.JobKey | None:
    """For a job whose controller is a job too (a JobSet of a TrainJob): the owner's key."""
    if not is_job(obj):
        return None
    ref = _controller_job(obj)
    return _key(cluster, objects.namespace_of(obj), str(ref["kind"]), str(ref.get("name") or "")) if ref else None


def _controller_job(obj: dict[str, Any]) -> Mapping[str, Any] | None:
    for ref in objects.owner_refs_of(obj):
        if ref.get("controller"):
            return ref if families.REGISTRY.is_job(ref.get("apiVersion"), ref.get("kind")) else None
    return None


def _job_key(cluster: str, obj: dict[str, Any]) -> records.JobKey | None:
    namespace = objects.namespace_of(obj)
    if is_job(obj):
        return _key(cluster, namespace, str(obj["kind"]), objects.name_of(obj))
    if (named := families.REGISTRY.job_of(obj)) is not None:
        # Keyed by a field of its own (a scaler by the TrainingJob it names, bound or not yet).
        job_kind, target = named
        return _key(cluster, namespace, job_kind, target) if target is not None else None
    ref = _controller_job(obj)
    if ref is not None:
        return _key(cluster, namespace, str(ref["kind"]), str(ref.get("name") or ""))
    labels = objects.labels_of(obj)
    kind = KIND_BY_CONTROLLER.get(str(labels.get(LABEL_OPERATOR_NAME) or ""))
    job_name = labels.get(LABEL_JOB_NAME)
    if kind is None or not job_name:
        jobset = labels.get(jobsets.JOBSET_NAME_LABEL)  # a JobSet's pod (its Job is its controller)
        return _key(cluster, namespace, jobsets.KIND, str(jobset)) if jobset else None
    return _key(cluster, namespace, kind, str(job_name))
