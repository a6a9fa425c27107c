"""The desired children of a job, for every kind, written once (spec §4, §5, §6.9, §8).

In: a defaulted, validated job, the operator settings and the job's observed
children (only MPI's ``discover_hosts.sh`` and an existing Volcano PodGroup's
queue read them). Out: plain JSON-shaped manifests (apiVersion, kind,
metadata, spec), in a fixed order, byte-for-byte the same for the same input:

* gang mode, job not suspended: the PodGroup ``<job>`` first;
* the kind's auxiliary children (MPI: ServiceAccount, ConfigMap, Role,
  RoleBinding; PyTorch: the elastic HPA unless suspended);
* per replica type, in the plugin's order (canonical types, then unknown TF
  types sorted; MPI: workers then launcher): pods 0..n-1, then their headless
  Services (not for MPI).

The planner does not decide *whether* pods should exist now (suspension,
backoff, deadlines, cleanPodPolicy, a pending Volcano PodGroup): that is the
run-policy engine's job. It only says what each child must look like. The
PodGroup and the HPA are the exception: a suspended job has none (upstream
deletes both on suspend), so they are left out of its plan.

Per-kind decisions come from ``frameworks.for_job(job)`` (``base.Framework``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from shared.api import common, jobs, objects
from shared.core import errors, frameworks, naming, owners, podgroups
from shared.core import settings as operator_settings
from shared.core.frameworks import base

Manifest = common.Manifest
PlanError = errors.PlanError

DEFAULT_VOLCANO_QUEUE = "default"


@dataclasses.dataclass(frozen=True)
class Planned:
    """One desired child: its kind and name, and how to build its manifest.

    Building a pod copies its template; a reconciler that already has the child
    only needs the name, so :func:`planned` leaves the building to the caller.
    """

    kind: str
    name: str
    build: Callable[[], Manifest]


def planned(
    job: jobs.Job, settings: operator_settings.OperatorSettings, observed: Sequence[Manifest] = ()
) -> list[Planned]:
    """Every desired child of a new or running job, in :func:`plan`'s order, not yet built
    (pods and Services; the few other children are built here, being few)."""
    framework = frameworks.for_job(job)
    children: list[Planned] = []
    pod_group = desired_pod_group(job, settings, observed)
    extra = [pod_group] if pod_group is not None else []
    extra += framework.auxiliary_children(job, settings, observed)
    children += [Planned(m["kind"], m["metadata"]["name"], functools.partial(_built, m)) for m in extra]
    for replica_type in framework.replica_order(job):
        count = framework.replica_count(job, replica_type)
        children += [
            Planned("Pod", framework.pod_name(job, replica_type, index),
                    functools.partial(desired_pod, job, replica_type, index, settings, observed))
            for index in range(count)
        ]
        if framework.has_services:
            children += [
                Planned("Service", naming.service_name(job, replica_type, index),
                        functools.partial(desired_service, job, replica_type, index))
                for index in range(count)
            ]
    return children


def _built(manifest: Manifest) -> Manifest:
    return manifest


def plan(
    job: jobs.Job, settings: operator_settings.OperatorSettings, observed: Sequence[Manifest] = ()
) -> list[Manifest]:
    """Every desired child of a new or running job, in a fixed order (module docstring)."""
    return [child.build() for child in planned(job, settings, observed)]


def replica_count(job: jobs.Job, replica_type: str) -> int:
    """How many pods of ``replica_type`` the job wants (0 for a type it does not have)."""
    if replica_type not in job.specs():
        return 0
    return frameworks.for_job(job).replica_count(job, replica_type)


def pod_restart_policy(restart_policy: common.RestartPolicy) -> str:
    """The pod's ``restartPolicy`` for a replica policy: ``ExitCode`` → ``Never``, others as is."""
    return "Never" if restart_policy == "ExitCode" else restart_policy


def _replica_spec(job: jobs.Job, replica_type: str) -> common.ReplicaSpec:
    spec = job.specs().get(replica_type)
    if spec is None:
        raise PlanError(f"spec.{job.REPLICA_FIELD_ALIAS}[{replica_type}]", "Required value")
    return spec


def desired_pod(
    job: jobs.Job,
    replica_type: str,
    index: int,
    settings: operator_settings.OperatorSettings,
    observed: Sequence[Manifest] = (),
) -> Manifest:
    """Pod ``index`` of ``replica_type`` (§4.5): template copy, labels, cluster spec, restart policy, gang.

    ``observed`` is accepted for symmetry with ``plan``; no pod depends on it today.
    """
    framework = frameworks.for_job(job)
    replica = _replica_spec(job, replica_type)
    template = copy.deepcopy(replica.template)
    spec: Manifest = template.get("spec") or {}

    labels = {**objects.labels_of(template), **framework.pod_labels(job, replica_type, index)}
    annotations = objects.annotations_of(template)

    # 1. kind-specific cluster spec: env after the user's own, init containers after the template's.
    containers = spec.get("containers") or []
    env = framework.cluster_env(job, replica_type, index, settings)
    if env:
        for position in framework.env_containers(job, replica_type, containers):
            container = containers[position]
            container["env"] = [*(container.get("env") or []), *copy.deepcopy(env)]
    init = framework.init_containers(job, replica_type, index, settings)
    if init:
        spec["initContainers"] = [*(spec.get("initContainers") or []), *init]
    spec = framework.finish_pod_spec(job, replica_type, index, spec)

    # 2–3. the replica's restart policy overrides the template's (template_warnings reports that).
    spec["restartPolicy"] = pod_restart_policy(replica.restart_policy or job.DEFAULT_RESTART_POLICY)

    # 4. gang scheduling decoration (§6.9).
    if settings.gang_scheduling:
        if not spec.get("schedulerName"):
            spec["schedulerName"] = settings.pod_scheduler_name
        if settings.volcano:
            annotations[podgroups.VOLCANO_GROUP_NAME_ANNOTATION] = job.name
            annotations[podgroups.VOLCANO_TASK_SPEC_ANNOTATION] = replica_type.lower()
        else:
            labels[podgroups.SCHEDULER_PLUGINS_POD_GROUP_LABEL] = job.name

    metadata = owners.child_metadata(
        job,
        framework.pod_name(job, replica_type, index),
        labels=labels,
        annotations=annotations,
        finalizers=list(objects.meta(template).get("finalizers") or []),
    )
    # ownerReferences last, labels first: keep a stable, readable key order.
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def service_ports(job: jobs.Job, replica_type: str) -> list[Manifest]:
    """Every port of the type's default-named container, as ``{name, port}``, in template order.

    Upstream goes through a Go map, so its order is random; kto keeps the
    template's order. A port name given twice keeps its first position and
    its last value, as the map would. ``PlanError`` ("failed to find the
    port") when no container has the default name.
    """
    for container in base.containers(job, replica_type):
        if container.get("name") != job.DEFAULT_CONTAINER:
            continue
        ports: dict[str, int] = {}
        for port in container.get("ports") or []:
            if isinstance(port, dict):
                ports[str(port.get("name") or "")] = int(port.get("containerPort", 0))
        return [{"name": name, "port": number} if name else {"port": number} for name, number in ports.items()]
    raise PlanError(base.containers_field(job, replica_type), "failed to find the port")


def desired_service(job: jobs.Job, replica_type: str, index: int) -> Manifest:
    """The headless Service named like pod ``index`` of ``replica_type`` (§4.6)."""
    if not frameworks.for_job(job).has_services:
        raise PlanError("kind", f"{job.KIND} has no per-replica Services")
    _replica_spec(job, replica_type)
    labels = naming.service_labels(job, replica_type, index)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owners.child_metadata(job, naming.service_name(job, replica_type, index), labels=labels),
        "spec": {
            "clusterIP": "None",
            "selector": dict(labels),
            "ports": service_ports(job, replica_type),
        },
    }


def template_warnings(job: jobs.Job, settings: operator_settings.OperatorSettings) -> list[tuple[str, str]]:
    """Warning events (reason, message) the job's pod templates call for, each at most once.

    ``SetPodTemplateRestartPolicy`` / MPI ``SettedPodTemplateRestartPolicy``
    when a template sets ``restartPolicy``; ``SetPodTemplateSchedulerName`` /
    MPI ``SettedPodTemplateSchedulerName`` in gang mode (§4.5, §6.9).
    Upstream records them on every pod creation; the reconciler decides when.
    """
    return frameworks.for_job(job).template_warnings(job, settings)


# ---------------------------------------------------------------------------
# Gang scheduling (§6.9)
# ---------------------------------------------------------------------------


def min_member(job: jobs.Job) -> int:
    """``schedulingPolicy.minAvailable``, else Σ replicas (unset = 1)."""
    policy = job.spec.run_policy.scheduling_policy if job.spec.run_policy else None
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return base.total_replicas(job)


def min_resources(job: jobs.Job, members: int) -> dict[str, str]:
    """Σ of requests (limits where a container has no requests) over the first ``members`` pods.

    Upstream orders replica types by the value of the PriorityClass their
    template names, highest first. A pure planner cannot read PriorityClasses,
    so every type counts as priority 0 and the kind's canonical order is kept
    (upstream's order among equal priorities is Go's random map order).
    """
    totals: dict[str, podgroups.Quantity] = {}
    taken = 0
    for replica_type in base.ordered_replica_types(job):
        spec = job.specs()[replica_type]
        if spec.replicas is None:
            continue
        for _ in range(spec.replicas):
            if taken >= members:
                break
            taken += 1
            for container in base.containers(job, replica_type):
                resources = container.get("resources") or {}
                requests = resources.get("requests")
                source = requests if requests is not None else resources.get("limits") or {}
                for name, value in source.items():
                    quantity = podgroups.Quantity.parse(value)
                    totals[name] = totals[name].add(quantity) if name in totals else quantity
    return {name: totals[name].format() for name in sorted(totals)}


def desired_pod_group(
    job: jobs.Job, settings: operator_settings.OperatorSettings, observed: Sequence[Manifest] = ()
) -> Manifest | None:
    """The PodGroup ``<job>`` in gang mode (Volcano or scheduler-plugins); None when off or suspended.

    An existing Volcano PodGroup (in ``observed``) with a non-empty queue keeps it.
    """
    run_policy = job.spec.run_policy
    if not settings.gang_scheduling or (run_policy is not None and run_policy.suspend):
        return None
    policy = run_policy.scheduling_policy if run_policy is not None else None
    members = min_member(job)
    resources: dict[str, Any]
    if policy is not None and policy.min_resources is not None:
        resources = dict(policy.min_resources)
    else:
        resources = min_resources(job, members)
    metadata = owners.child_metadata(job, job.name, annotations=dict(job.metadata.annotations or {}))
    spec: Manifest = {"minMember": members}
    if settings.volcano:
        queue = _observed_volcano_queue(job, observed) or (policy.queue if policy and policy.queue else "")
        spec["queue"] = queue or DEFAULT_VOLCANO_QUEUE
        if policy is not None and policy.priority_class:
            spec["priorityClassName"] = policy.priority_class
        spec["minResources"] = resources
        api_version = podgroups.VOLCANO_API_VERSION
    else:
        if resources:
            spec["minResources"] = resources
        if policy is not None and policy.schedule_timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
        api_version = podgroups.SCHEDULER_PLUGINS_API_VERSION
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": metadata, "spec": spec}


def _observed_volcano_queue(job: jobs.Job, observed: Sequence[Manifest]) -> str:
    for child in observed:
        metadata = objects.meta(child)
        if (
            child.get("kind") == "PodGroup"
            and child.get("apiVersion") == podgroups.VOLCANO_API_VERSION
            and metadata.get("name") == job.name
            and metadata.get("namespace", job.namespace) == job.namespace
        ):
            return str((child.get("spec") or {}).get("queue") or "")
    return ""
