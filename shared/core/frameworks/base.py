"""The per-kind hooks of the common child planner, and helpers the plugins share.

In: a defaulted, validated job (plus operator settings, observed children).
Out: small per-kind decisions — which replica is the master, which env vars
and init containers a pod gets, which extra children a kind needs, when the
job runs, succeeds or fails — that ``shared.core.planning`` and
``shared.core.statuses`` combine with the logic written once for every kind
(names, labels, owner references, restart policy, gang scheduling; condition
bookkeeping, replica counting, suspension).

``Framework`` is the interface (a ``typing.Protocol``, checked statically).
``GenericFramework`` is an optional base class holding the behaviour the five
"generic" kinds (PyTorch, TF, XGBoost, Paddle, JAX) share, so each plugin
states only what differs.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Sequence
from typing import Any, Protocol

from shared.api import common, jobs, objects
from shared.core import computations, errors, naming, settings

Manifest = common.Manifest
EnvVar = dict[str, Any]
"""One ``corev1.EnvVar`` as a JSON-shaped dict (``{"name": …, "value": …}``)."""

RESTART_POLICY_MESSAGE = "Restart policy in pod template will be overwritten by restart policy in replica spec"
SCHEDULER_NAME_MESSAGE = (
    "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten"
)


class Framework(Protocol):
    """What the common planner asks a kind. One implementation per kind, in ``REGISTRY``.

    Every hook is pure and receives a defaulted, validated job. Hooks that
    cannot do their work raise ``errors.PlanError`` with a field path.
    """

    @property
    def kind(self) -> str:
        """The job kind served (``PyTorchJob`` …), the registry key."""
        ...

    @property
    def has_services(self) -> bool:
        """Whether every replica gets a headless Service named like its pod (§4.6; not MPI)."""
        ...

    def replica_order(self, job: jobs.Job) -> list[str]:
        """The replica types that get pods, in the order the planner emits them."""
        ...

    def replica_count(self, job: jobs.Job, replica_type: str) -> int:
        """How many pods of ``replica_type`` the job wants (its ``replicas``)."""
        ...

    def pod_name(self, job: jobs.Job, replica_type: str, index: int) -> str:
        """Name of pod ``index`` of ``replica_type`` (§4.1)."""
        ...

    def pod_labels(self, job: jobs.Job, replica_type: str, index: int) -> dict[str, str]:
        """The operator's labels of that pod; they win over template labels on a clash (§4.2)."""
        ...

    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool:
        """Whether that pod has the master role (label ``job-role=master``, §4.2)."""
        ...

    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[EnvVar]:
        """Env vars the operator appends, in upstream order, after the user's own (§5)."""
        ...

    def env_containers(self, job: jobs.Job, replica_type: str, containers: Sequence[Manifest]) -> list[int]:
        """Indices into the pod's ``containers`` that receive ``cluster_env``."""
        ...

    def init_containers(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[Manifest]:
        """Init containers appended after the template's own (PyTorch ``init-pytorch``, MPI ``kubectl-delivery``)."""
        ...

    def finish_pod_spec(self, job: jobs.Job, replica_type: str, index: int, spec: Manifest) -> Manifest:
        """Last kind-specific touches to the pod spec (MPI volumes, command, service account).

        ``spec`` is the planner's private copy, env and init containers already
        added; the hook may change it in place and returns the spec to use.
        """
        ...

    def auxiliary_children(
        self, job: jobs.Job, operator: settings.OperatorSettings, observed: Sequence[Manifest]
    ) -> list[Manifest]:
        """Children other than pods, Services and PodGroups (MPI RBAC + ConfigMap, PyTorch HPA).

        ``observed`` are the job's existing children (MPI reads Running workers
        from them). The planner places these before the pods.
        """
        ...

    def template_warnings(self, job: jobs.Job, operator: settings.OperatorSettings) -> list[tuple[str, str]]:
        """Warning events (reason, message) that the job's pod templates call for (§4.5, §6.9)."""
        ...

    @property
    def status_selector(self) -> bool:
        """Whether ``replicaStatuses`` carry the scale subresource's label selector (§4.4)."""
        ...

    def status_rules(self, p: computations.Computation) -> None:
        """The kind's Running / Succeeded / Failed / Restarting rules (§7), applied to
        a pass whose replica counts the engine has filled (``statuses.compute``)."""
        ...


# ---------------------------------------------------------------------------
# Helpers shared by the plugins
# ---------------------------------------------------------------------------


def env(name: str, value: str) -> EnvVar:
    return {"name": name, "value": value}


def ordered_replica_types(job: jobs.Job) -> list[str]:
    """The job's replica types: the kind's canonical order, then unknown types sorted."""
    return computations.replica_order(job)


def replicas(job: jobs.Job, replica_type: str, default: int = 1) -> int:
    """``replicas`` of one replica type: 0 when the type is absent, ``default`` when unset."""
    spec = job.specs().get(replica_type)
    if spec is None:
        return 0
    return default if spec.replicas is None else spec.replicas


def total_replicas(job: jobs.Job) -> int:
    """Σ replicas over every replica type, unset counting as 1 (upstream GetTotalReplicas)."""
    return sum(1 if spec.replicas is None else spec.replicas for spec in job.specs().values())


def containers(job: jobs.Job, replica_type: str) -> list[Manifest]:
    """The containers of one replica type's template (empty when the type is absent)."""
    spec = job.specs().get(replica_type)
    if spec is None:
        return []
    found = objects.spec_of(spec.template).get("containers")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def containers_field(job: jobs.Job, replica_type: str) -> str:
    """Field path of a replica type's containers, for error messages."""
    return f"spec.{job.REPLICA_FIELD_ALIAS}[{replica_type}].template.spec.containers"


def find_port(job: jobs.Job, replica_type: str) -> int | None:
    """containerPort of the default port name on the default container, if any.

    Like upstream, every container with the default name is searched, first
    match wins.
    """
    for container in containers(job, replica_type):
        if container.get("name") != job.DEFAULT_CONTAINER:
            continue
        for port in container.get("ports") or []:
            if isinstance(port, dict) and port.get("name") == job.DEFAULT_PORT_NAME:
                return int(port.get("containerPort", 0))
    return None


def require_port(job: jobs.Job, replica_type: str, message: str) -> int:
    """``find_port`` or a ``PlanError`` with upstream's ``message``."""
    port = find_port(job, replica_type)
    if port is None:
        raise errors.PlanError(containers_field(job, replica_type), message)
    return port


class GenericFramework(abc.ABC):
    """Behaviour shared by the five kinds that use upstream's generic pod/Service machinery.

    Subclasses set ``kind`` and implement ``is_master_role``, ``cluster_env`` and
    ``status_rules``;
    they override the other hooks only where the kind differs.
    """

    kind: str = ""
    has_services: bool = True
    status_selector: bool = False

    def replica_order(self, job: jobs.Job) -> list[str]:
        return ordered_replica_types(job)

    def replica_count(self, job: jobs.Job, replica_type: str) -> int:
        return replicas(job, replica_type)

    def pod_name(self, job: jobs.Job, replica_type: str, index: int) -> str:
        return naming.pod_name(job, replica_type, index)

    def pod_labels(self, job: jobs.Job, replica_type: str, index: int) -> dict[str, str]:
        master = self.is_master_role(job, replica_type, index)
        return naming.pod_labels(job, replica_type, index, master_role=master)

    @abc.abstractmethod
    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool: ...

    @abc.abstractmethod
    def status_rules(self, p: computations.Computation) -> None: ...

    @abc.abstractmethod
    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[EnvVar]: ...

    def env_containers(self, job: jobs.Job, replica_type: str, containers: Sequence[Manifest]) -> list[int]:
        """Every container, sidecars included (PyTorch, XGBoost, Paddle, JAX)."""
        return list(range(len(containers)))

    def init_containers(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[Manifest]:
        return []

    def finish_pod_spec(self, job: jobs.Job, replica_type: str, index: int, spec: Manifest) -> Manifest:
        return spec

    def auxiliary_children(
        self, job: jobs.Job, operator: settings.OperatorSettings, observed: Sequence[Manifest]
    ) -> list[Manifest]:
        return []

    def template_warnings(self, job: jobs.Job, operator: settings.OperatorSettings) -> list[tuple[str, str]]:
        """``SetPodTemplateRestartPolicy`` and ``SetPodTemplateSchedulerName`` (§4.5, §6.9).

        Upstream records them once per pod it creates; kto reports each at
        most once per job and leaves when to record them to the reconciler.
        """
        warnings: list[tuple[str, str]] = []
        templates = [objects.spec_of(spec.template) for spec in job.specs().values()]
        if any(t.get("restartPolicy") for t in templates):
            warnings.append(("SetPodTemplateRestartPolicy", RESTART_POLICY_MESSAGE))
        if operator.gang_scheduling:
            name = operator.pod_scheduler_name
            if any(t.get("schedulerName") and t.get("schedulerName") != name for t in templates):
                warnings.append(("SetPodTemplateSchedulerName", SCHEDULER_NAME_MESSAGE))
        return warnings


def deep(value: Manifest) -> Manifest:
    """A deep copy, so planned children never share a dict with the job."""
    return copy.deepcopy(value)
