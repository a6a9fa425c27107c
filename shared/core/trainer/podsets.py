"""The data a TrainJob's runtime is built through: upstream's ``runtime.Info`` and pod sets.

In: nothing (data and the small edits every plugin makes). Out: the names and numbers of
Trainer v2.3's API and runtime (labels, steps, ports, suffixes), :class:`Info` and
:class:`PodSet`, the upserts of ``pkg/apply`` (env, ports, volumes, mounts), and the
resource reads the ML policies resolve ``numProcPerNode`` and worker counts with.
Pure: no I/O.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from shared.api import jobsets, objects, trainer
from shared.core import errors, podgroups

Manifest = dict[str, Any]

GROUP = trainer.GROUP
API_VERSION = trainer.API_VERSION
KIND = trainer.TRAINJOB_KIND
TRAINING_RUNTIME = trainer.TRAINING_RUNTIME_KIND
CLUSTER_TRAINING_RUNTIME = trainer.CLUSTER_TRAINING_RUNTIME_KIND
JOBSET_API_VERSION = jobsets.API_VERSION
JOBSET_KIND = jobsets.KIND

ANCESTOR_LABEL = trainer.ANCESTOR_LABEL
DATASET_INITIALIZER = trainer.DATASET_INITIALIZER
MODEL_INITIALIZER = trainer.MODEL_INITIALIZER
ANCESTOR_TRAINER = trainer.TRAINER
NODE = trainer.NODE
LAUNCHER = trainer.LAUNCHER
CONTAINER_TRAINER_PORT = 29500
"""The port of the trainer's rendezvous (PET_MASTER_PORT, JAX's coordinator, XGBoost's tracker)."""
STORAGE_URI_ENV = "STORAGE_URI"
COMPLETION_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

SNAPSHOT_SUFFIX = "-runtime-snapshot"
SNAPSHOT_KEY = "runtime"

MPI_SECRET_SUFFIX = "-mpi-ssh-auth"
MPI_HOSTFILE_SUFFIX = "-mpi-hostfile"
MPI_HOSTFILE_DIR = "/etc/mpi"
MPI_HOSTFILE_NAME = "hostfile"
MPI_PUBLIC_KEY = "ssh-publickey"
MPI_PRIVATE_KEY = "ssh-privatekey"

SCHEDULE_TIMEOUT_SECONDS = trainer.DEFAULT_SCHEDULE_TIMEOUT_SECONDS
"""``podGroupPolicy.coscheduling.scheduleTimeoutSeconds`` when the runtime leaves it out."""
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def owner_reference(job: Mapping[str, Any]) -> Manifest:
    """The controller ownerReference to ``job`` (upstream's, ``blockOwnerDeletion`` too)."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": objects.name_of(job), "uid": objects.uid_of(job) or "",
            "controller": True, "blockOwnerDeletion": True}


@dataclasses.dataclass
class PodSet:
    """One replicated job of the JobSet being built: its pods' count and its pod spec
    (the dict inside the JobSet spec, changed in place)."""

    name: str
    ancestor: str | None
    count: int
    replicas: int
    pod_spec: Manifest
    requests: dict[str, podgroups.Quantity]
    """What one pod requests (sum of its containers, or its largest init container)."""
    endpoints: list[str] = dataclasses.field(default_factory=list)

    def container(self, name: str, *, init: bool = False) -> Manifest | None:
        """The container of that name (regular first, then init containers when ``init``)."""
        lists = [self.pod_spec.get("containers") or []]
        if init:
            lists.append(self.pod_spec.get("initContainers") or [])
        return next((c for cs in lists for c in cs if isinstance(c, dict) and c.get("name") == name), None)


@dataclasses.dataclass
class Info:
    """What the runtime and the TrainJob give the plugins (upstream's ``runtime.Info``)."""

    job: Manifest
    labels: dict[str, str]
    annotations: dict[str, str]
    ml_policy: Manifest | None
    pod_group_policy: Manifest | None
    spec: Manifest
    """The JobSet spec being built."""
    pod_sets: list[PodSet]
    pod_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    pod_annotations: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return objects.name_of(self.job)

    @property
    def namespace(self) -> str:
        return objects.namespace_of(self.job)

    def owner_reference(self) -> Manifest:
        """The controller ownerReference every object made for the TrainJob carries."""
        return owner_reference(self.job)

    @property
    def trainer(self) -> Manifest | None:
        """``spec.trainer`` of the TrainJob (None when it has none)."""
        trainer = objects.spec_of(self.job).get("trainer")
        return trainer if isinstance(trainer, dict) else None

    def by_ancestor(self, ancestor: str) -> PodSet | None:
        return next((ps for ps in self.pod_sets if ps.ancestor == ancestor), None)

    def by_name(self, name: str) -> PodSet | None:
        return next((ps for ps in self.pod_sets if ps.name == name), None)

    def trainer_container(self) -> Manifest | None:
        """The ``node`` container of the trainer step, when the TrainJob has a ``trainer``."""
        pod_set = self.by_ancestor(ANCESTOR_TRAINER)
        return pod_set.container(NODE) if pod_set is not None and self.trainer is not None else None

    def resources_per_node(self) -> Manifest:
        """``trainer.resourcesPerNode``, else the runtime's ``node`` container's resources."""
        trainer = self.trainer or {}
        if isinstance(trainer.get("resourcesPerNode"), dict):
            return dict(trainer["resourcesPerNode"])
        for pod_set in self.pod_sets:
            if pod_set.name == NODE or pod_set.ancestor == ANCESTOR_TRAINER:
                container = pod_set.container(NODE)
                if container is not None and isinstance(container.get("resources"), dict):
                    return dict(container["resources"])
        return {}


# --- upserts, as pkg/apply does them ---------------------------------------------------

def upsert(items: list[Any], item: Manifest, *keys: str) -> None:
    """Replace the first item equal to ``item`` on any of ``keys`` (a key absent from both
    counts as equal, as Go's ``ptr.Equal(nil, nil)``), or append it."""
    for index, existing in enumerate(items):
        if isinstance(existing, dict) and any(existing.get(k) == item.get(k) for k in keys):
            items[index] = copy.deepcopy(item)
            return
    items.append(copy.deepcopy(item))


def upsert_env(container: Manifest, *env: Manifest) -> None:
    listed = container.setdefault("env", [])
    for variable in env:
        upsert(listed, variable, "name")


def upsert_port(container: Manifest, port: int) -> None:
    upsert(container.setdefault("ports", []), {"containerPort": port}, "containerPort", "name")


def upsert_volume(pod_spec: Manifest, volume: Manifest) -> None:
    upsert(pod_spec.setdefault("volumes", []), volume, "name")


def upsert_mount(container: Manifest, mount: Manifest) -> None:
    upsert(container.setdefault("volumeMounts", []), mount, "mountPath")


def value_env(name: str, value: str) -> Manifest:
    return {"name": name, "value": value}


def index_env(name: str) -> Manifest:
    """An env var holding the pod's Job completion index."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}}


# --- resources ----------------------------------------------------------------------------

def quantity(value: Any, path: str) -> podgroups.Quantity:
    try:
        return podgroups.Quantity.parse(value)
    except errors.PlanError as exc:
        raise errors.PlanError(path, exc.message) from None


def _rounded_up(value: Any, path: str) -> int:
    """A quantity's ``Value()``: rounded up to an integer."""
    return math.ceil(quantity(value, path).value)


def gpus(resources: Mapping[str, Any]) -> int:
    """GPUs per node: the first resource whose name has ``gpu`` in requests, else limits."""
    def count(listed: Any, path: str) -> int:
        for name, value in (listed or {}).items():
            if "gpu" in str(name).lower():
                return _rounded_up(value, f"{path}[{name}]")
        return 0
    return count(resources.get("requests"), "resources.requests") or count(resources.get("limits"), "resources.limits")


def cpus(resources: Mapping[str, Any]) -> int:
    """CPUs per node: requests, or limits when there is no non-zero request."""
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    if "cpu" in requests and quantity(requests["cpu"], "resources.requests[cpu]").value != 0:
        return _rounded_up(requests["cpu"], "resources.requests[cpu]")
    return _rounded_up(limits["cpu"], "resources.limits[cpu]") if "cpu" in limits else 0
