"""The Kubernetes resource types kto reads and writes, and their REST paths.

In: an apiVersion + kind (from a manifest) or a job kind. Out: a
``ResourceType`` that knows its URL path. No I/O here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shared.api import elastic, jobs, jobsets, kueue, trainer


@dataclasses.dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = ResourceType("", "v1", "pods", "Pod")
SERVICES = ResourceType("", "v1", "services", "Service")
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap")
SERVICEACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount")
EVENTS = ResourceType("", "v1", "events", "Event")
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False)
ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLEBINDINGS = ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
HPAS = ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
SECRETS = ResourceType("", "v1", "secrets", "Secret")
BATCH_JOBS = ResourceType("batch", "v1", "jobs", "Job")
PRIORITY_CLASSES = ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
VOLCANO_PODGROUPS = ResourceType("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PLUGINS_PODGROUPS = ResourceType("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
CRDS = ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
VALIDATING_WEBHOOK_CONFIGURATIONS = ResourceType("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
                                                 "ValidatingWebhookConfiguration", namespaced=False)
MUTATING_WEBHOOK_CONFIGURATIONS = ResourceType("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                                               "MutatingWebhookConfiguration", namespaced=False)

TRAININGJOBS = ResourceType(elastic.GROUP, elastic.VERSION, elastic.TrainingJob.PLURAL, elastic.TrainingJob.KIND)
SCALEINS = ResourceType(elastic.GROUP, elastic.VERSION, elastic.ScaleIn.PLURAL, elastic.ScaleIn.KIND)
SCALEOUTS = ResourceType(elastic.GROUP, elastic.VERSION, elastic.ScaleOut.PLURAL, elastic.ScaleOut.KIND)
JOBSETS = ResourceType(jobsets.GROUP, jobsets.VERSION, jobsets.PLURAL, jobsets.KIND)
"""JobSet v1alpha2: served by kto (``OperatorSettings.serve_jobsets``) or by the real JobSet controller."""
TRAINJOBS = ResourceType(trainer.GROUP, trainer.VERSION, trainer.TrainJob.PLURAL, trainer.TrainJob.KIND)
TRAININGRUNTIMES = ResourceType(trainer.GROUP, trainer.VERSION, trainer.TrainingRuntime.PLURAL,
                                trainer.TrainingRuntime.KIND)
CLUSTERTRAININGRUNTIMES = ResourceType(trainer.GROUP, trainer.VERSION, trainer.ClusterTrainingRuntime.PLURAL,
                                       trainer.ClusterTrainingRuntime.KIND, namespaced=False)
RUNTIME_TYPES: dict[str, ResourceType] = {rt.kind: rt for rt in (TRAININGRUNTIMES, CLUSTERTRAININGRUNTIMES)}
"""Kubeflow Trainer v2's runtimes, keyed by the kind a TrainJob's ``runtimeRef`` names: read by the
TrainJob's hydration, never watched."""
WORKLOADS = ResourceType(kueue.GROUP, kueue.VERSION, kueue.WORKLOAD_PLURAL, kueue.WORKLOAD_KIND)
"""Kueue's Workloads (v1beta2): watched where Kueue's CRDs are, each published under the job that owns it."""
SCALER_TYPES: dict[str, ResourceType] = {rt.kind: rt for rt in (SCALEINS, SCALEOUTS)}
"""et-operator's ScaleIn and ScaleOut: keyed by the TrainingJob they scale."""

JOB_TYPES: dict[str, ResourceType] = {
    **{kind: ResourceType(jobs.GROUP, jobs.VERSION, cls.PLURAL, kind) for kind, cls in jobs.KINDS.items()},
    TRAININGJOBS.kind: TRAININGJOBS,
    JOBSETS.kind: JOBSETS,
    TRAINJOBS.kind: TRAINJOBS,
}
"""The job kinds, keyed by kind: the six of kubeflow.org/v1, et-operator's TrainingJob, JobSet and
Kubeflow Trainer v2's TrainJob."""

MPIJOBS_V2BETA1 = ResourceType(jobs.GROUP, "v2beta1", jobs.MPIJob.PLURAL, jobs.MPIJob.KIND)
"""The same MPIJobs, read and written in mpi-operator's version (one CRD, two versions)."""

CHILD_TYPES: tuple[ResourceType, ...] = (
    PODS,
    SERVICES,
    CONFIGMAPS,
    SERVICEACCOUNTS,
    ROLES,
    ROLEBINDINGS,
    HPAS,
    SECRETS,
    BATCH_JOBS,
    VOLCANO_PODGROUPS,
    PLUGINS_PODGROUPS,
)
"""Every kind of child object a job can own."""

_BY_API_KIND: dict[tuple[str, str], ResourceType] = {
    (rt.api_version, rt.kind): rt for rt in (
        *CHILD_TYPES, *JOB_TYPES.values(), *SCALER_TYPES.values(), *RUNTIME_TYPES.values(), MPIJOBS_V2BETA1, WORKLOADS,
        EVENTS, LEASES, NAMESPACES, CRDS, PRIORITY_CLASSES, VALIDATING_WEBHOOK_CONFIGURATIONS,
        MUTATING_WEBHOOK_CONFIGURATIONS,
    )
}


def for_manifest(manifest: dict[str, Any]) -> ResourceType:
    """The resource type of a manifest, by its apiVersion and kind."""
    key = (str(manifest.get("apiVersion", "")), str(manifest.get("kind", "")))
    try:
        return _BY_API_KIND[key]
    except KeyError:
        raise ValueError(f"unknown resource apiVersion={key[0]!r} kind={key[1]!r}") from None
