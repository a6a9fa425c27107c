"""Gang scheduling of an MPIJob v2beta1 (spec A.17): its PodGroup and the pod decoration.

In: a defaulted, validated MPIJob, the operator settings (``gang_scheduler_name``:
``volcano`` or a scheduler-plugins scheduler name) and the values of the
PriorityClasses its templates name (read by the service layer; a pure
function cannot look them up). Out: the PodGroup ``<job>`` manifest
(``scheduling.volcano.sh/v1beta1`` or ``scheduling.x-k8s.io/v1alpha1``), and
the scheduler name, label or annotation every launcher and worker pod gets.

Quantities are added with the arithmetic every family uses
(``shared.core.podgroups``); the way they are counted differs from v1 and is
mpi-operator's: requests, with limits for resources without a request, per
resource, times the replicas of each type, the lower-priority type (the
workers on a tie) counted ``minMember - 1`` times when both types together
exceed ``minMember``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.api import common, mpijobs, objects
from shared.core import podgroups, settings

VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
"""The MPIJob annotation naming the Volcano queue when ``schedulingPolicy.queue`` is empty."""


def _policy(job: mpijobs.MPIJob) -> common.SchedulingPolicy | None:
    return job.run_policy.scheduling_policy


def min_available(job: mpijobs.MPIJob) -> int:
    """``schedulingPolicy.minAvailable``, else workers + 1 (the launcher)."""
    policy = _policy(job)
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return job.worker_replicas + 1


def priority_class_name(job: mpijobs.MPIJob) -> str:
    """``schedulingPolicy.priorityClass`` → Launcher template's → Worker template's → ``""``."""
    policy = _policy(job)
    if policy is not None and policy.priority_class:
        return policy.priority_class
    for replica_type in (mpijobs.LAUNCHER, mpijobs.WORKER):
        replica = job.replica(replica_type)
        if replica is not None:
            name = objects.spec_of(replica.template).get("priorityClassName")
            if name:
                return str(name)
    return ""


def _requested(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container's requests, with its limits for resources it requests nothing of."""
    resources = container.get("resources") or {}
    merged = dict(resources.get("requests") or {})
    for name, value in (resources.get("limits") or {}).items():
        merged.setdefault(name, value)
    return merged


def min_resources(job: mpijobs.MPIJob, members: int, priorities: Mapping[str, int]) -> dict[str, str] | None:
    """``schedulingPolicy.minResources`` if set; None when ``members`` is 0; else the sum (module docstring).

    ``priorities``: PriorityClass name → value; a class not in it counts as 0
    (upstream logs the lookup failure and uses 0 too)."""
    policy = _policy(job)
    if policy is not None and policy.min_resources is not None:
        return {name: str(value) for name, value in policy.min_resources.items()}
    if members == 0:
        return None
    order: list[tuple[int, str, int]] = []  # (priority, replica type, replicas), highest priority first
    for replica_type in mpijobs.REPLICA_TYPES:
        replica = job.replica(replica_type)
        if replica is None:
            continue
        class_name = objects.spec_of(replica.template).get("priorityClassName")
        priority = priorities.get(str(class_name), 0) if class_name else 0
        order.append((priority, replica_type, replica.replicas or 0))
    order.sort(key=lambda entry: -entry[0])  # stable: the Launcher first on a tie
    counted = {replica_type: replicas for _, replica_type, replicas in order}
    if len(order) > 1 and order[0][2] + order[1][2] > members:
        lower = mpijobs.WORKER if order[0][0] == order[1][0] else order[1][1]
        if lower in counted:
            counted[lower] = members - 1
    totals: dict[str, podgroups.Quantity] = {}
    for _, replica_type, _ in order:
        replica = job.replica(replica_type)
        assert replica is not None
        for container in objects.spec_of(replica.template).get("containers") or []:
            if not isinstance(container, dict):
                continue
            for name, raw in _requested(container).items():
                parsed = podgroups.Quantity.parse(raw)
                quantity = podgroups.Quantity(parsed.value * counted[replica_type], parsed.form)
                totals[name] = totals[name].add(quantity) if name in totals else quantity
    return {name: totals[name].format() for name in sorted(totals)}


def desired_pod_group(
    job: mpijobs.MPIJob, operator: settings.OperatorSettings, owner: common.Manifest,
    priorities: Mapping[str, int],
) -> common.Manifest | None:
    """The PodGroup ``<job>``; None when gang scheduling is off."""
    if not operator.gang_scheduling:
        return None
    members = min_available(job)
    resources = min_resources(job, members, priorities)
    policy = _policy(job)
    spec: common.Manifest = {"minMember": members}
    if operator.volcano:
        api_version = podgroups.VOLCANO_API_VERSION
        queue = (job.metadata.annotations or {}).get(VOLCANO_QUEUE_ANNOTATION, "")
        if policy is not None and policy.queue:
            queue = policy.queue
        if queue:
            spec["queue"] = queue
        priority_class = priority_class_name(job)
        if priority_class:
            spec["priorityClassName"] = priority_class
        if resources is not None:  # a pointer upstream: an empty list is still written
            spec["minResources"] = resources
    else:
        api_version = podgroups.SCHEDULER_PLUGINS_API_VERSION
        timeout = policy.schedule_timeout_seconds if policy is not None else None
        spec["scheduleTimeoutSeconds"] = timeout or 0
        if resources:
            spec["minResources"] = resources
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": job.name, "namespace": job.namespace, "ownerReferences": [owner]},
        "spec": spec,
    }


def decorate(job: mpijobs.MPIJob, operator: settings.OperatorSettings,
             labels: dict[str, str], annotations: dict[str, str], pod_spec: common.Manifest) -> None:
    """Gang mode: the scheduler name (overwriting the template's, as upstream does) and the
    group's annotation (Volcano) or label (scheduler-plugins). Changes the arguments in place."""
    if not operator.gang_scheduling:
        return
    pod_spec["schedulerName"] = operator.pod_scheduler_name
    if operator.volcano:
        annotations[podgroups.VOLCANO_GROUP_NAME_ANNOTATION] = job.name
    else:
        labels[podgroups.SCHEDULER_PLUGINS_POD_GROUP_LABEL] = job.name
