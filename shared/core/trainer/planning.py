"""A TrainJob and its runtime → the objects Kubeflow Trainer v2.3 makes for it.

In: the TrainJob and its TrainingRuntime or ClusterTrainingRuntime, both as dicts
as the API server holds them (the runtime's ``template`` is a JobSet spec).
Out: a :class:`Plan` — the JobSet named as the TrainJob, and, by policy, the
PodGroup (coscheduling or Volcano), the MPI hostfile ConfigMap and whether the
MPI SSH Secret is needed (:func:`ssh_secret` makes it from a key pair made at
the edge) — or :class:`~shared.core.errors.PlanError` naming the field that
stops it. Pure: no I/O, no clock, no randomness.

The steps are upstream's (pkg/runtime/core/trainingruntime.go and the
framework plugins), in its order:

1. the runtime's template metadata and every ``runtimePatches[].trainingRuntimeSpec
   .template.metadata`` give the JobSet's labels and annotations; the patches'
   template specs are merged into the JobSet spec (a strategic merge patch,
   :mod:`shared.core.trainer.patching`), the replicated jobs kept in the
   runtime's order;
2. a *pod set* per replicated job: its pod count (``parallelism``, or
   ``mlPolicy.numNodes`` for the step labelled ``trainer``), and
   ``trainer.resourcesPerNode`` merged into the ``node`` container of the
   trainer step (and of the ``node`` job when MPI runs the launcher as a node);
3. the ML policy (:mod:`shared.core.trainer.policies`): counts, env, ports,
   volumes; then the pod-group policy's pod label or annotation;
4. the pods' DNS names (``<job>-<rjob>-<replica>-<index>.<subdomain>``), for
   the MPI hostfile; ``parallelism`` and ``completions`` of each replicated
   job set to its pod set's count;
5. the JobSet: the initializers' ``STORAGE_URI``, env and ``secretRef``, the
   trainer's image, command, args and env, the pod labels and annotations of
   the pod-group policy, ``suspend``, and the controller ownerReference.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

from shared.api import objects
from shared.core import errors, podgroups
from shared.core.trainer import patching, podsets, policies, scheduling, sshkeys

Manifest = dict[str, Any]


@dataclasses.dataclass
class Plan:
    """What a TrainJob's runtime makes (see the module)."""

    jobset: Manifest
    pod_group: Manifest | None = None
    hostfile: Manifest | None = None
    mpi: bool = False
    """Whether the MPI SSH Secret ``<job>-mpi-ssh-auth`` belongs to the plan (:func:`ssh_secret`)."""


# --- the TrainJob and its runtime, read ---------------------------------------------

def runtime_ref(job: Mapping[str, Any]) -> tuple[str, str, str]:
    """(apiGroup, kind, name) of ``spec.runtimeRef``; apiGroup and kind default as the CRD
    defaults them (``trainer.kubeflow.org``, ClusterTrainingRuntime)."""
    ref = objects.spec_of(job).get("runtimeRef")
    ref = ref if isinstance(ref, dict) else {}
    group = ref.get("apiGroup")
    kind = ref.get("kind")
    return (podsets.GROUP if group is None else str(group), podsets.CLUSTER_TRAINING_RUNTIME if kind is None else str(kind),
            str(ref.get("name") or ""))


def snapshot_name(job: Mapping[str, Any]) -> str:
    return objects.name_of(job) + podsets.SNAPSHOT_SUFFIX


def secret_name(job: Mapping[str, Any]) -> str:
    return objects.name_of(job) + podsets.MPI_SECRET_SUFFIX


def hostfile_name(job: Mapping[str, Any]) -> str:
    return objects.name_of(job) + podsets.MPI_HOSTFILE_SUFFIX


def _metadata(job: Mapping[str, Any], name: str, **fields: Any) -> Manifest:
    metadata: Manifest = {"name": name, "namespace": objects.namespace_of(job)}
    metadata.update({k: v for k, v in fields.items() if v})
    metadata["ownerReferences"] = [podsets.owner_reference(job)]
    return metadata


def snapshot(job: Mapping[str, Any], runtime: Mapping[str, Any]) -> Manifest:
    """The ``<job>-runtime-snapshot`` ConfigMap (KEP 2599): the runtime as the job first
    used it, so that a runtime edited later does not change the job's JobSet. Upstream
    writes YAML with ``sigs.k8s.io/yaml``; kto writes JSON, which that reader reads too."""
    kept = {"apiVersion": runtime.get("apiVersion") or podsets.API_VERSION, "kind": runtime.get("kind"),
            "metadata": {k: v for k, v in objects.meta(runtime).items() if k in ("name", "namespace", "labels",
                                                                                  "annotations")},
            "spec": runtime.get("spec") or {}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(job, snapshot_name(job)),
            "data": {podsets.SNAPSHOT_KEY: json.dumps(kept, sort_keys=True, separators=(",", ":"))}}


def from_snapshot(job: Mapping[str, Any], config_map: Mapping[str, Any]) -> Manifest:
    """The runtime a snapshot ConfigMap holds (:class:`errors.PlanError` with upstream's
    words when it is not this job's, or not the runtime its ``runtimeRef`` names)."""
    owner = next((r for r in objects.owner_refs_of(config_map) if r.get("controller")), None)
    if owner is None or owner.get("uid") != objects.uid_of(job):
        raise errors.PlanError("spec.runtimeRef", "invalid runtime snapshot: a snapshot configmap exists but is "
                                                  "owned by another object")
    raw = (config_map.get("data") or {}).get(podsets.SNAPSHOT_KEY)
    if not isinstance(raw, str):
        raise errors.PlanError("spec.runtimeRef", f'invalid runtime snapshot: snapshot ConfigMap missing '
                                                  f'"{podsets.SNAPSHOT_KEY}" data key')
    try:
        runtime = json.loads(raw)
    except ValueError as exc:
        raise errors.PlanError("spec.runtimeRef", f"invalid runtime snapshot: unable to unmarshal the snapshot: "
                                                  f"{exc}") from None
    if not isinstance(runtime, dict):
        raise errors.PlanError("spec.runtimeRef", "invalid runtime snapshot: unable to unmarshal the snapshot")
    group, kind, name = runtime_ref(job)
    found_group = str(runtime.get("apiVersion") or "").partition("/")[0]
    if (runtime.get("kind"), found_group, objects.name_of(runtime)) != (kind, group, name):
        raise errors.PlanError("spec.runtimeRef", (
            "invalid runtime snapshot: the snapshot refers to the wrong runtime: expecting a runtime with name, "
            f'api group and kind of "{name}", "{group}", "{kind}" but found runtime with name, api group and kind '
            f'of "{objects.name_of(runtime)}", "{found_group}", "{runtime.get("kind")}"'))
    return runtime


def _pod_requests(pod_spec: Mapping[str, Any], path: str) -> dict[str, podgroups.Quantity]:
    """A pod's requests as the scheduler counts them: the sum of its containers' (and
    sidecars'), at least each init container's."""
    total: dict[str, podgroups.Quantity] = {}

    def requests(container: Any, where: str) -> dict[str, podgroups.Quantity]:
        listed = ((container or {}).get("resources") or {}).get("requests") or {}
        return {str(k): podsets.quantity(v, f"{where}.resources.requests[{k}]") for k, v in listed.items()}

    for index, container in enumerate(pod_spec.get("containers") or []):
        for name, value in requests(container, f"{path}.containers[{index}]").items():
            total[name] = total[name].add(value) if name in total else value
    for index, container in enumerate(pod_spec.get("initContainers") or []):
        for name, value in requests(container, f"{path}.initContainers[{index}]").items():
            if name not in total or value.value > total[name].value:
                total[name] = value
    for name, value in (pod_spec.get("overhead") or {}).items():
        extra = podsets.quantity(value, f"{path}.overhead[{name}]")
        total[str(name)] = total[str(name)].add(extra) if str(name) in total else extra
    return total


# --- building --------------------------------------------------------------------------------

def _runtime_template(runtime: Mapping[str, Any]) -> tuple[Manifest, Manifest]:
    spec = _dict(runtime.get("spec"))
    template = _dict(spec.get("template"))
    return copy.deepcopy(_dict(template.get("metadata"))), copy.deepcopy(_dict(template.get("spec")))


def _dict(value: Any) -> Manifest:
    """``value`` when it is an object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _patches(job: Mapping[str, Any]) -> Iterator[Manifest]:
    """Each ``runtimePatches[].trainingRuntimeSpec.template`` of the job, in order."""
    for patch in objects.spec_of(job).get("runtimePatches") or []:
        template = ((patch or {}).get("trainingRuntimeSpec") or {}).get("template")
        if isinstance(template, dict):
            yield template


def _merge_patches(job: Mapping[str, Any], spec: Manifest) -> Manifest:
    order = {str(r.get("name")): i for i, r in enumerate(spec.get("replicatedJobs") or []) if isinstance(r, dict)}
    for template in _patches(job):
        if isinstance(template.get("spec"), dict):
            spec = patching.merge(spec, template["spec"])
    jobs = spec.get("replicatedJobs") or []
    spec["replicatedJobs"] = sorted(jobs, key=lambda r: order.get(str((r or {}).get("name")), len(order)))
    return spec


def _merged_resources(base: Any, override: Mapping[str, Any]) -> Manifest:
    merged: Manifest = patching.merge(base if isinstance(base, dict) else {}, override)
    return merged


def new_info(job: Manifest, runtime: Mapping[str, Any]) -> podsets.Info:
    """Steps 1 and 2 of the module: labels, annotations, the patched spec, the pod sets
    (``job`` is copied: torchtune's policy completes the copy's command)."""
    job = copy.deepcopy(job)
    metadata, spec = _runtime_template(runtime)
    labels = dict(metadata.get("labels") or {})
    annotations = dict(metadata.get("annotations") or {})
    for template in _patches(job):
        patch_meta = template.get("metadata") or {}
        labels.update(patch_meta.get("labels") or {})
        annotations.update(patch_meta.get("annotations") or {})
    spec = _merge_patches(job, spec)
    runtime_spec = _dict(runtime.get("spec"))
    ml_policy = runtime_spec.get("mlPolicy") if isinstance(runtime_spec.get("mlPolicy"), dict) else None
    pod_group_policy = runtime_spec.get("podGroupPolicy")
    mpi = (ml_policy or {}).get("mpi")
    launcher_as_node = isinstance(mpi, dict) and bool(mpi.get("runLauncherAsNode"))
    trainer = objects.spec_of(job).get("trainer") if isinstance(objects.spec_of(job).get("trainer"), dict) else None
    per_node = (trainer or {}).get("resourcesPerNode")
    pod_sets = []
    for index, rjob in enumerate(spec.get("replicatedJobs") or []):
        path = f"spec.template.spec.replicatedJobs[{index}]"
        if not isinstance(rjob, dict) or not rjob.get("name"):
            raise errors.PlanError(f"{path}.name", "Required value")
        job_template = rjob.setdefault("template", {})
        job_spec = job_template.setdefault("spec", {})
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        ancestor = ((job_template.get("metadata") or {}).get("labels") or {}).get(podsets.ANCESTOR_LABEL)
        count = int(job_spec.get("parallelism") or 1)
        if ancestor == podsets.ANCESTOR_TRAINER and ml_policy is not None:
            count = int(ml_policy.get("numNodes") or 1)
        if isinstance(per_node, dict) and ((ancestor == podsets.ANCESTOR_TRAINER and ml_policy is not None)
                                           or (launcher_as_node and rjob["name"] == podsets.NODE)):
            for container in pod_spec.get("containers") or []:
                if isinstance(container, dict) and container.get("name") == podsets.NODE:
                    container["resources"] = _merged_resources(container.get("resources"), per_node)
                    break
        pod_sets.append(podsets.PodSet(str(rjob["name"]), None if ancestor is None else str(ancestor), max(count, 1),
                               int(rjob.get("replicas") or 1), pod_spec,
                               _pod_requests(pod_spec, f"{path}.template.spec.template.spec")))
    pod_group_policy = pod_group_policy if isinstance(pod_group_policy, dict) else None
    return podsets.Info(job, labels, annotations, copy.deepcopy(ml_policy), copy.deepcopy(pod_group_policy), spec, pod_sets)


def _identify_pod_network(info: podsets.Info) -> None:
    name = info.name
    subdomain = (info.spec.get("network") or {}).get("subdomain") or name
    for pod_set in info.pod_sets:
        pod_set.endpoints = [f"{name}-{pod_set.name}-{replica}-{index}.{subdomain}"
                             for replica in range(pod_set.replicas) for index in range(pod_set.count)]


def _sync_parallel_count(info: podsets.Info) -> None:
    for pod_set in info.pod_sets:
        for rjob in info.spec.get("replicatedJobs") or []:
            if rjob.get("name") == pod_set.name:
                rjob["template"]["spec"]["parallelism"] = pod_set.count
                rjob["template"]["spec"]["completions"] = pod_set.count
                break


def _initializers(info: podsets.Info) -> None:
    initializer = objects.spec_of(info.job).get("initializer") or {}
    for rjob in info.spec.get("replicatedJobs") or []:
        ancestor = ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(podsets.ANCESTOR_LABEL)
        step = {podsets.DATASET_INITIALIZER: "dataset", podsets.MODEL_INITIALIZER: "model"}.get(str(ancestor))
        if step is None:
            continue
        rjob["replicas"] = 1
        given = initializer.get(step)
        for container in rjob["template"]["spec"]["template"]["spec"].get("containers") or []:
            if container.get("name") != ancestor or not isinstance(given, dict):
                continue
            if given.get("storageUri") is not None:
                podsets.upsert_env(container, podsets.value_env(podsets.STORAGE_URI_ENV, str(given["storageUri"])))
            podsets.upsert_env(container, *(given.get("env") or []))
            secret = given.get("secretRef")
            if isinstance(secret, dict):
                container.setdefault("envFrom", []).append({"secretRef": {"name": secret.get("name")}})


def _trainer(info: podsets.Info) -> None:
    trainer = info.trainer
    mpi = (info.ml_policy or {}).get("mpi")
    launcher_as_node = isinstance(mpi, dict) and bool(mpi.get("runLauncherAsNode"))
    for rjob in info.spec.get("replicatedJobs") or []:
        ancestor = ((rjob["template"].get("metadata") or {}).get("labels") or {}).get(podsets.ANCESTOR_LABEL)
        containers = rjob["template"]["spec"]["template"]["spec"].get("containers") or []
        node = next((c for c in containers if c.get("name") == podsets.NODE), None)
        if ancestor == podsets.ANCESTOR_TRAINER:
            rjob["replicas"] = 1
            if node is not None and trainer is not None:
                for field in ("image", "command", "args"):
                    if trainer.get(field) is not None:
                        node[field] = copy.deepcopy(trainer[field])
        if (ancestor == podsets.ANCESTOR_TRAINER or (launcher_as_node and rjob.get("name") == podsets.NODE)) and node is not None \
                and trainer is not None:
            podsets.upsert_env(node, *(trainer.get("env") or []))


def _pod_metadata(info: podsets.Info) -> None:
    for rjob in info.spec.get("replicatedJobs") or []:
        template = rjob["template"]["spec"]["template"]
        if info.pod_labels:
            template.setdefault("metadata", {}).setdefault("labels", {}).update(info.pod_labels)
        if info.pod_annotations:
            template.setdefault("metadata", {}).setdefault("annotations", {}).update(info.pod_annotations)


def jobset(info: podsets.Info) -> Manifest:
    """Step 5 of the module: the JobSet from the built info."""
    _initializers(info)
    _trainer(info)
    _pod_metadata(info)
    suspend = objects.spec_of(info.job).get("suspend")
    if suspend is not None:
        info.spec["suspend"] = bool(suspend)
    return {"apiVersion": podsets.JOBSET_API_VERSION, "kind": podsets.JOBSET_KIND,
            "metadata": _metadata(info.job, info.name, labels=dict(info.labels), annotations=dict(info.annotations)),
            "spec": info.spec}


def build(job: Manifest, runtime: Mapping[str, Any]) -> Plan:
    """The objects the runtime makes for ``job`` (see the module);
    :class:`errors.PlanError` naming the field that stops it."""
    info = new_info(job, runtime)
    policies.enforce(info)
    scheduling.enforce(info)
    _identify_pod_network(info)
    _sync_parallel_count(info)
    plan = Plan(jobset=jobset(info))
    plan.pod_group = scheduling.pod_group(info)
    if (info.ml_policy or {}).get("mpi") is not None:
        plan.mpi = True
        plan.hostfile = policies.hostfile(info)
    return plan


def ssh_secret(job: Mapping[str, Any], keys: sshkeys.KeyPair) -> Manifest:
    """The immutable ``<job>-mpi-ssh-auth`` Secret (type ``kubernetes.io/ssh-auth``)."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _metadata(job, secret_name(job)),
            "type": "kubernetes.io/ssh-auth", "immutable": True,
            "data": {podsets.MPI_PRIVATE_KEY: base64.b64encode(keys.private_pem).decode(),
                     podsets.MPI_PUBLIC_KEY: base64.b64encode(keys.public_openssh).decode()}}
