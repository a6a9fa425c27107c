"""What kto keeps of each kind of object: one projection per kind, written down in one place.

In: an object as the API server returned it (or as a record carried it). Out: the same
object with only the fields something in kto reads (:func:`project`): the pure core's
decisions (every family's ``decide``, status computation, expectations, bases and
reports), ``kto history`` (its pod timeline), the console and ``kto replay``. The
watcher publishes projected objects (the record says so: ``Observation.projection``)
and keeps them in its inventory; every worker's view (:class:`shared.core.views.JobView`)
projects what it takes in, from a record or from the API server alike, so no decision
depends on where its input came from. A kind without a table here is kept whole (what
:func:`shared.bus.records.redact_object` leaves of it). Pure: no I/O; the object given is
never changed.

What a process holds for long it may keep packed (:func:`pack`, :func:`unpack`): Python's
dicts of an object take about six times its JSON.

Projecting is idempotent: a projected object projects to itself. The tables are
checked by tests/api/test_projections.py, which runs every family's decision on full
objects and on their projections and wants the same effects.
"""

from __future__ import annotations

import marshal
from collections.abc import Mapping
from typing import Any, TypeAlias

VERSION = 1
"""The projection this code writes: ``Observation.projection`` of a projected record (0: whole)."""

Shape: TypeAlias = Mapping[str, "Shape | bool"]
"""Keys kept of a mapping: ``True`` keeps the value whole; a nested shape keeps those keys of
a mapping value, or of every mapping in a list value."""

METADATA: Shape = dict.fromkeys((
    "name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
    "labels", "annotations", "ownerReferences", "finalizers",
), True)
"""Metadata kept of a projected object. Identity and versions (views, expectations, bases,
``kto replay``'s lookup by kind, name and resourceVersion), labels (which replica and index
a pod is: ``statuses.replica_pods``, the watcher's job mapping), annotations (kto's and the
user's; ``kubectl apply``'s copy is dropped by redaction), ownerReferences (who controls a
child: ``owners.controls``, the watcher's mapping of unlabelled children), finalizers and the
deletion mark (``objects.is_deleting``). Not ``managedFields``, ``generation`` or
``deletionGracePeriodSeconds``."""

_CONTAINER_STATUS: Shape = dict.fromkeys(("name", "restartCount", "state"), True)
"""A container's status: its name (the default container's exit code, Events), restarts
(restart and backoff counting, ``kto history``'s restarts) and its state (exit codes for
ExitCode restarts and verdicts, terminated and waiting messages for Events). Not its
readiness, last state, image, imageID or containerID."""

POD: Shape = {
    "apiVersion": True,
    "kind": True,
    "metadata": METADATA,
    "spec": {
        "nodeName": True,  # kto history's "scheduled", kto demo's node
        "containers": {"name": True},  # the elastic launcher's exec target: its first container's name
    },
    "status": {
        "phase": True,  # every family: active, succeeded, failed counts; restarts; kto history
        "reason": True,  # Evicted (mpi_v2 and elastic statuses)
        "message": True,
        # Ready (mpi_v2's launcher waits for ready workers); the latest one not True is an Event
        "conditions": dict.fromkeys(("type", "status", "reason", "message"), True),
        "containerStatuses": _CONTAINER_STATUS,
        "initContainerStatuses": _CONTAINER_STATUS,  # Events, when no container has a status
    },
}
"""A Pod as kto reads it. Decisions never read a pod's spec beyond its containers' names (a
child is made from the job's template, never from another pod), so a pod's containers,
volumes, tolerations, env, resources, restartPolicy and schedulerName are not kept; nor its
status's startTime, IPs, QoS class, conditions' times or containers' images and readiness."""

_TRANSITION: Shape = dict.fromkeys(("type", "status", "reason", "message", "lastTransitionTime"), True)

WORKLOAD: Shape = {
    "apiVersion": True,
    "kind": True,
    "metadata": METADATA,  # its owner (the job's key), its name (what a MultiKueue job's copies share)
    "spec": {
        "queueName": True,  # the LocalQueue: kto history's "queued in"
        "priority": True,
        "priorityClassRef": True,  # v1beta2's WorkloadPriorityClass or PriorityClass reference
        "active": True,
        "podSets": dict.fromkeys(("name", "count", "minCount"), True),  # not their pod templates
    },
    "status": {
        "conditions": _TRANSITION,  # QuotaReserved, Admitted, Evicted, Preempted, Requeued, PodsReady, Finished
        "admission": {
            "clusterQueue": True,
            "podSetAssignments": dict.fromkeys(("name", "flavors", "count"), True),
        },
        "clusterName": True,  # MultiKueue: the worker cluster it was dispatched to
        "admissionChecks": dict.fromkeys(("name", "state", "message", "lastTransitionTime"), True),
    },
}
"""A Kueue Workload (``kueue.x-k8s.io/v1beta2``) as ``kto history`` and the console read it
(:mod:`shared.api.kueue`), and as the status service reads its ``QuotaReserved`` reason and
message, which it copies to an Event on the job (``events.queue_events``); no decision of kto's reads one. Not its pod sets' templates (the job's
own, whose env may hold what a log may not), their resource usage, topology or node selectors, nor
the status's requeue state, reclaimable pods, resource requests or scheduling stats. A Workload
holds no Secret, nor a reference to one."""

KINDS: Mapping[str, Shape] = {"Pod": POD, "Workload": WORKLOAD}
"""The projection of each kind. Every other kind is kept whole:

* the job kinds (kubeflow.org/v1, MPIJob v2beta1, TrainingJob): their templates make every
  child, their status is the old status a write compares with, and the status workers
  write the job they hold back (``PUT /status``);
* Services, ConfigMaps, the launcher ``batch/v1`` Job, HPAs, PodGroups and the scalers: the
  reconciler writes some of them over the copy its view holds (an MPIJob v2beta1's Service
  selector, its launcher's ``suspend``, the HPA, a scaler's status), so the copy must be
  whole; they are few and small next to the pods.
"""


def projects(kind: str) -> bool:
    """Whether objects of ``kind`` are projected (have a table in :data:`KINDS`)."""
    return kind in KINDS


def project(obj: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """``obj`` as kto keeps it: its kind's projection, or ``obj`` itself for a kind kept whole.
    ``kind``: the object's kind when the object may not say it (a watch event of a typed list)."""
    shape = KINDS.get(kind if kind is not None else str(obj.get("kind") or ""))
    if shape is None:
        return obj
    return _kept(obj, shape)


def _kept(node: Mapping[str, Any], shape: Shape) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, sub in shape.items():
        if key not in node:
            continue
        value = node[key]
        if not isinstance(sub, Mapping):
            kept[key] = value
        elif isinstance(value, Mapping):
            kept[key] = _kept(value, sub)
        elif isinstance(value, list):
            kept[key] = [_kept(item, sub) if isinstance(item, Mapping) else item for item in value]
        else:
            kept[key] = value
    return kept


Packed: TypeAlias = bytes | dict[str, Any]
"""An object as :func:`pack` keeps it."""


def pack(obj: dict[str, Any]) -> Packed:
    """``obj`` as a process keeps it for long: :mod:`marshal` bytes (Python's own serialisation
    of its built-in types: the fastest to load, about 0.8 of the JSON's size, a sixth of the
    dicts' memory), never written anywhere nor read from outside this process; an object that
    holds anything but built-in types (a test's stand-in, say) is kept as it is."""
    try:
        return marshal.dumps(obj)
    except ValueError:
        return obj


def unpack(held: Packed) -> dict[str, Any]:
    """The object :func:`pack` kept: a new copy each time (what a reader changes in it changes
    nothing held), or the object itself if it was kept as it is."""
    if isinstance(held, bytes):
        found: dict[str, Any] = marshal.loads(held)
        return found
    return held
