"""The children of a JobSet, as JobSet v0.12.0's controller makes them.

In: a defaulted :class:`~shared.api.jobsets.JobSet`. Out: the batch Job
``<jobset>-<replicatedJob>-<index>`` of each replica of each replicated job, with
upstream's labels and annotations on the Job and on its pod template (jobset-name,
jobset-uid, replicatedjob-name, restart-attempt, replicatedjob-replicas, global-replicas,
job-index, job-key, job-global-index, group-name, group-replicas, job-group-index, the
coordinator's endpoint), the pods' ``subdomain``; and the headless Service named as the
subdomain. Pure: no I/O.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from shared.api import common, jobsets
from shared.core import owners

Manifest = common.Manifest


def job_name(jobset: jobsets.JobSet, rjob: str, index: int) -> str:
    """Upstream's ``placement.GenJobName``."""
    return f"{jobset.name}-{rjob}-{index}"


def job_key(namespace: str, name: str) -> str:
    """The job-key label: SHA-1 of ``<namespace>/<job>``, hex."""
    return hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()


def coordinator_endpoint(jobset: jobsets.JobSet) -> str:
    coordinator = jobset.spec.coordinator
    assert coordinator is not None
    return (f"{jobset.name}-{coordinator.replicated_job}-{coordinator.job_index}-{coordinator.pod_index}"
            f".{jobset.subdomain}")


def _global_index(jobset: jobsets.JobSet, rjob: str, index: int, group: str | None = None) -> str:
    """The Job's index among every Job of the JobSet (of ``group`` only, when given)."""
    before = 0
    for other in jobset.replicated_jobs:
        if group is not None and other.group_name != group:
            continue
        if other.name == rjob:
            return str(before + index)
        before += other.replicas
    return ""


def _replicas(jobset: jobsets.JobSet, group: str | None = None) -> str:
    return str(sum(r.replicas for r in jobset.replicated_jobs if group is None or r.group_name == group))


def identity(jobset: jobsets.JobSet, rjob: jobsets.ReplicatedJob, index: int) -> dict[str, str]:
    """The labels (and the same annotations) upstream's ``labelAndAnnotateObject`` puts on a
    Job and its pod template."""
    name = job_name(jobset, rjob.name, index)
    restarts = jobset.status.restarts if jobset.status is not None else 0
    marks = {
        jobsets.JOBSET_NAME_LABEL: jobset.name,
        jobsets.JOBSET_UID_LABEL: jobset.uid,
        jobsets.REPLICATED_JOB_LABEL: rjob.name,
        jobsets.RESTARTS_KEY: str(restarts),
        jobsets.REPLICATED_JOB_REPLICAS_LABEL: str(rjob.replicas),
        jobsets.GLOBAL_REPLICAS_LABEL: _replicas(jobset),
        jobsets.JOB_INDEX_LABEL: str(index),
        jobsets.JOB_KEY_LABEL: job_key(jobset.namespace, name),
        jobsets.JOB_GLOBAL_INDEX_LABEL: _global_index(jobset, rjob.name, index),
        jobsets.GROUP_NAME_LABEL: rjob.group_name,
        jobsets.GROUP_REPLICAS_LABEL: _replicas(jobset, rjob.group_name),
        jobsets.JOB_GROUP_INDEX_LABEL: _global_index(jobset, rjob.name, index, rjob.group_name),
    }
    if jobset.spec.coordinator is not None:
        marks[jobsets.COORDINATOR_KEY] = coordinator_endpoint(jobset)
    return marks


def _exclusive(jobset: jobsets.JobSet, rjob: jobsets.ReplicatedJob) -> dict[str, str]:
    """The exclusive-placement annotations the Job inherits (the replicated job's win)."""
    found: dict[str, str] = {}
    for source in (jobset.metadata.annotations or {}, (rjob.template.get("metadata") or {}).get("annotations") or {}):
        if jobsets.EXCLUSIVE_KEY in source:
            found[jobsets.EXCLUSIVE_KEY] = source[jobsets.EXCLUSIVE_KEY]
            if jobsets.NODE_SELECTOR_STRATEGY_KEY in source:
                found[jobsets.NODE_SELECTOR_STRATEGY_KEY] = source[jobsets.NODE_SELECTOR_STRATEGY_KEY]
    return found


def _marked(meta: dict[str, Any], marks: dict[str, str], exclusive: dict[str, str]) -> dict[str, Any]:
    return {**meta, "labels": {**(meta.get("labels") or {}), **marks},
            "annotations": {**(meta.get("annotations") or {}), **marks, **exclusive}}


def desired_job(jobset: jobsets.JobSet, rjob: jobsets.ReplicatedJob, index: int) -> Manifest:
    """The Job upstream's ``constructJob`` makes (``jobset`` defaulted)."""
    template = copy.deepcopy(rjob.template)
    marks = identity(jobset, rjob, index)
    exclusive = _exclusive(jobset, rjob)
    name = job_name(jobset, rjob.name, index)
    template_meta = template.get("metadata") or {}
    metadata = owners.child_metadata(
        jobset, name, labels={**(template_meta.get("labels") or {}), **marks},
        annotations={**(template_meta.get("annotations") or {}), **marks, **exclusive})
    spec: dict[str, Any] = template.get("spec") or {}
    pod = spec.get("template") or {}
    pod["metadata"] = _marked(pod.get("metadata") or {}, marks, exclusive)
    pod_spec = pod.setdefault("spec", {})
    if jobset.dns_hostnames:
        pod_spec["subdomain"] = jobset.subdomain
    if jobsets.EXCLUSIVE_KEY in exclusive and jobsets.NODE_SELECTOR_STRATEGY_KEY in exclusive:
        pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}),
                                    jobsets.NAMESPACED_JOB_KEY: f"{jobset.namespace}_{name}"}
        pod_spec["tolerations"] = [*(pod_spec.get("tolerations") or []), {
            "key": jobsets.NO_SCHEDULE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    spec["template"] = pod
    spec["suspend"] = jobset.suspended
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def desired_service(jobset: jobsets.JobSet) -> Manifest:
    """The headless Service of the pods' subdomain (``createHeadlessSvcIfNecessary``)."""
    network = jobset.spec.network
    publish = network.publish_not_ready_addresses if network is not None else None
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": owners.child_metadata(jobset, jobset.subdomain),
        "spec": {"clusterIP": "None", "selector": {jobsets.JOBSET_NAME_LABEL: jobset.name},
                 "publishNotReadyAddresses": True if publish is None else publish},
    }


def resumed(job: Manifest, rjob: jobsets.ReplicatedJob | None) -> Manifest:
    """A suspended Job resumed as ``resumeJob`` does: the replicated job's pod template labels,
    annotations, nodeSelector, tolerations and scheduling gates merged in, ``suspend`` false."""
    out = copy.deepcopy(job)
    spec = out.setdefault("spec", {})
    if rjob is not None:
        source = (rjob.template.get("spec") or {}).get("template") or {}
        source_meta, source_spec = source.get("metadata") or {}, source.get("spec") or {}
        pod = spec.setdefault("template", {})
        meta, pod_spec = pod.setdefault("metadata", {}), pod.setdefault("spec", {})
        for field in ("labels", "annotations"):
            if source_meta.get(field):
                meta[field] = {**(meta.get(field) or {}), **source_meta[field]}
        if source_spec.get("nodeSelector"):
            pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **source_spec["nodeSelector"]}
        for field in ("tolerations", "schedulingGates"):
            merged = list(pod_spec.get(field) or [])
            merged += [item for item in source_spec.get(field) or [] if item not in merged]
            if merged:
                pod_spec[field] = merged
    spec["suspend"] = False
    return out
