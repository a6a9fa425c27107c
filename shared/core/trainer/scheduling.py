"""The pod-group policies of a TrainJob's runtime: Trainer v2.3's CoScheduling and Volcano
plugins.

In: the :class:`~shared.core.trainer.podsets.Info` being built. Out: the pods' label
(scheduler-plugins: ``scheduling.x-k8s.io/pod-group``) or annotation (Volcano:
``scheduling.k8s.io/group-name``) naming the group (:func:`enforce`), and the PodGroup
named as the TrainJob (:func:`pod_group`): ``minMember`` the sum of the pod sets'
counts, ``minResources`` the sum of each pod's requests times its count, and
scheduler-plugins' ``scheduleTimeoutSeconds`` (60 unless the runtime says) or
Volcano's queue (the runtime's ``scheduling.volcano.sh/queue-name`` annotation),
priorityClassName and networkTopology. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from shared.core import podgroups
from shared.core.trainer import podsets

Manifest = dict[str, Any]


def _policy(info: podsets.Info, name: str) -> dict[str, Any] | None:
    found = (info.pod_group_policy or {}).get(name)
    return found if isinstance(found, dict) else None


def enforce(info: podsets.Info) -> None:
    """The pod label or annotation that puts every pod of the job in its group."""
    if _policy(info, "coscheduling") is not None:
        info.pod_labels[podgroups.SCHEDULER_PLUGINS_POD_GROUP_LABEL] = info.name
    if _policy(info, "volcano") is not None:
        info.pod_annotations[podgroups.VOLCANO_GROUP_NAME_ANNOTATION] = info.name


def _totals(info: podsets.Info) -> tuple[int, dict[str, str]]:
    members = 0
    resources: dict[str, podgroups.Quantity] = {}
    for pod_set in info.pod_sets:
        members += pod_set.count
        for name, quantity in pod_set.requests.items():
            scaled = podgroups.Quantity(quantity.value * pod_set.count, quantity.form)
            resources[name] = resources[name].add(scaled) if name in resources else scaled
    return members, {name: quantity.format() for name, quantity in resources.items()}


def pod_group(info: podsets.Info) -> Manifest | None:
    """The PodGroup of the runtime's pod-group policy; None without one."""
    coscheduling, volcano = _policy(info, "coscheduling"), _policy(info, "volcano")
    if coscheduling is None and volcano is None:
        return None
    members, resources = _totals(info)
    spec: Manifest = {"minMember": members, "minResources": resources}  # {} when no pod requests anything
    if coscheduling is not None:
        api_version = podgroups.SCHEDULER_PLUGINS_API_VERSION
        timeout = coscheduling.get("scheduleTimeoutSeconds")
        spec["scheduleTimeoutSeconds"] = podsets.SCHEDULE_TIMEOUT_SECONDS if timeout is None else int(timeout)
    else:
        api_version = podgroups.VOLCANO_API_VERSION
        if podsets.VOLCANO_QUEUE_ANNOTATION in info.annotations:
            spec["queue"] = info.annotations[podsets.VOLCANO_QUEUE_ANNOTATION]
        for rjob in info.spec.get("replicatedJobs") or []:
            priority = rjob["template"]["spec"]["template"]["spec"].get("priorityClassName")
            if priority:
                spec["priorityClassName"] = priority
        topology = (volcano or {}).get("networkTopology")
        if isinstance(topology, dict):
            spec["networkTopology"] = {"mode": topology.get("mode"),
                                       "highestTierAllowed": topology.get("highestTierAllowed")}
    return {"apiVersion": api_version, "kind": "PodGroup",
            "metadata": {"name": info.name, "namespace": info.namespace,
                         "ownerReferences": [info.owner_reference()]},
            "spec": spec}
