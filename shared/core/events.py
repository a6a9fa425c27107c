"""Upstream's Events about a job's children (spec §9.2), as pure functions.

In: what a worker did to a child (created, failed to create, deleted), or the pods
it observes. Out: :class:`Event` values with upstream's reasons
and messages — the reconciler's ``SuccessfulCreatePod``, ``SuccessfulCreateService``,
``SuccessfulDeletePod`` … and the TTL deletion's event; the status worker's
``ExitedWithCode`` and the abnormal-pod warnings, each keyed by a *mark* so a worker
says it once per pod incarnation and restart, where upstream says it again on every
reconcile; and, from the job's Kueue Workloads, why Kueue keeps it waiting. Aggregating them into few writes is the recorder's
(:mod:`shared.kube.recording`). No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from shared.api import kueue, objects

MPI_KIND = "MPIJob"
WAITING_REASONS = frozenset({"Pending", "Inadmissible"})
"""The QuotaReserved=False reasons Kueue gives a waiting Workload: ``Pending`` (its scheduler: no quota
or no flavour fits, or preempted and requeued) and ``Inadmissible`` (no such LocalQueue or ClusterQueue,
or one stopped or inactive)."""
TRAINJOB_KIND = "TrainJob"
TTL_JOB_REASON_KINDS = frozenset({"TFJob", "XGBoostJob", "MPIJob"})
"""Kinds whose TTL deletion says ``SuccessfulDeleteJob``; the others say ``SuccessfulDeletePod`` (upstream's quirk, kept on the wire)."""

_NOUNS = {"Pod": "pod", "Service": "service"}


@dataclasses.dataclass(frozen=True)
class Event:
    """A Kubernetes Event to record on the job."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def _launcher(name: str) -> bool:
    return name.endswith("-launcher") or "-launcher-" in name


def created(kind: str, child_kind: str, name: str) -> Event | None:
    """The Event for a child created for a ``kind`` job (None for kinds upstream says nothing of)."""
    if child_kind == "PodGroup":
        return None
    if kind == MPI_KIND and child_kind == "Pod":
        if _launcher(name):
            return Event("Normal", "MPIJobRunning", f"launcher pod created success: {name}")
        return Event("Normal", "SuccessfulCreatePod", f"Created worker pod: {name}")
    noun = _NOUNS.get(child_kind)
    if noun is None:
        return None
    return Event("Normal", f"SuccessfulCreate{child_kind}", f"Created {noun}: {name}")


def create_failed(kind: str, child_kind: str, name: str, error: str) -> Event | None:
    if kind == TRAINJOB_KIND:
        return trainjob_creation_failed(error)
    if kind == MPI_KIND and child_kind == "Pod":
        what = "launcher" if _launcher(name) else "worker"
        return Event("Warning", "MPIJobFailed", f"{what} pod created failed: {error}")
    if child_kind not in _NOUNS:
        return None
    return Event("Warning", f"FailedCreate{child_kind}", f"Error creating: {error}")


TRAINJOB_MESSAGE_LIMIT = 950


def trainjob_creation_failed(error: str) -> Event:
    """Trainer v2's one Warning for a TrainJob whose objects could not be made (its error
    cut at 950 characters, as upstream cuts it)."""
    cut = error[:TRAINJOB_MESSAGE_LIMIT] + (" ..." if len(error) > TRAINJOB_MESSAGE_LIMIT else "")
    return Event("Warning", "TrainJobResourcesCreationFailed", f"TrainJob resources reconciliation failed: {cut}")


def deleted(kind: str, child_kind: str, name: str, job_name: str) -> list[Event]:
    if child_kind == "PodGroup":
        return [Event("Normal", "JobTerminated", "Job has been terminated. Deleting PodGroup"),
                Event("Normal", "SuccessfulDeletePodGroup", f"Deleted PodGroup: {job_name}")]
    noun = _NOUNS.get(child_kind)
    if noun is None:
        return []
    return [Event("Normal", f"SuccessfulDelete{child_kind}", f"Deleted {noun}: {name}")]


def delete_failed(kind: str, child_kind: str, error: str) -> Event | None:
    if child_kind == "PodGroup":
        return Event("Warning", "FailedDeletePodGroup", f"Error deleting: {error}")
    if child_kind not in _NOUNS:
        return None
    return Event("Warning", f"FailedDelete{child_kind}", f"Error deleting: {error}")


def ttl_deleted(kind: str, name: str) -> Event:
    reason = "SuccessfulDeleteJob" if kind in TTL_JOB_REASON_KINDS else "SuccessfulDeletePod"
    return Event("Normal", reason, f"Deleted job: {name}")


def pod_events(
    pods: Iterable[Mapping[str, Any]], default_container: str,
) -> list[tuple[tuple[str, ...], Event]]:
    """(mark, Event) for what the pods show: ``ExitedWithCode`` for a pod whose default
    container terminated, and for an active pod (Pending, Running) a Warning per container
    terminated with a non-zero code or waiting with a message (init containers when no
    container has a status; the latest pod condition that is not True when neither has).
    A mark names the pod incarnation, container and restart, so each is said once."""
    found: list[tuple[tuple[str, ...], Event]] = []
    for pod in pods:
        status = pod.get("status") or {}
        name, uid = objects.name_of(pod), objects.uid_of(pod) or ""
        namespace = objects.namespace_of(pod)
        containers = status.get("containerStatuses") or []
        for container in containers:
            terminated = (container.get("state") or {}).get("terminated")
            if container.get("name") == default_container and isinstance(terminated, dict):
                code = terminated.get("exitCode", 0)
                found.append(((uid, "exited", str(container.get("restartCount", 0)), str(code)),
                              Event("Normal", "ExitedWithCode", f"Pod: {namespace}.{name} exited with code {code}")))
        if status.get("phase") not in ("Pending", "Running"):
            continue
        found.extend(_abnormal(name, uid, containers or status.get("initContainerStatuses") or [],
                               status.get("conditions") or []))
    return found


def _abnormal(pod: str, uid: str, containers: Sequence[Mapping[str, Any]],
              conditions: Sequence[Mapping[str, Any]]) -> list[tuple[tuple[str, ...], Event]]:
    found: list[tuple[tuple[str, ...], Event]] = []
    for container in containers:
        state = container.get("state") or {}
        name, restarts = str(container.get("name", "")), str(container.get("restartCount", 0))
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if isinstance(terminated, dict) and terminated.get("exitCode", 0) != 0:
            found.append(((uid, "terminated", name, restarts), Event(
                "Warning", str(terminated.get("reason") or "Error"),
                f"Error pod {pod} container {name} exitCode: {terminated.get('exitCode')} "
                f"terminated message: {terminated.get('message', '')}")))
        elif isinstance(waiting, dict) and waiting.get("message"):
            found.append(((uid, "waiting", name, restarts, str(waiting.get("reason", ""))), Event(
                "Warning", str(waiting.get("reason") or "Waiting"),
                f"Error pod {pod} container {name} waiting message: {waiting.get('message')}")))
    if not containers and conditions:
        latest = conditions[-1]
        if latest.get("status") != "True":
            found.append(((uid, "condition", str(latest.get("type", "")), str(latest.get("reason", ""))), Event(
                "Warning", str(latest.get("reason") or latest.get("type") or "PodCondition"),
                f"Error pod {pod} condition message: {latest.get('message', '')}")))
    return found


def queue_events(workloads: Iterable[Mapping[str, Any]]) -> list[tuple[tuple[str, ...], Event]]:
    """(mark, Event) for why Kueue keeps a job waiting: each of its Workloads whose ``QuotaReserved``
    condition is False with a reason of :data:`WAITING_REASONS` gives a Warning with Kueue's reason
    and message unchanged (Kueue writes them to the Workload only: its scheduler's ``Pending`` Events
    are the Workload's, and a missing LocalQueue is said nowhere else). A mark names the Workload,
    the reason and the message, so each is said once."""
    found: list[tuple[tuple[str, ...], Event]] = []
    for workload in workloads:
        for condition in (workload.get("status") or {}).get("conditions") or []:
            if not isinstance(condition, Mapping) or condition.get("type") != kueue.QUOTA_RESERVED:
                continue
            reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
            if condition.get("status") == "False" and reason in WAITING_REASONS and message:
                found.append(((objects.uid_of(workload) or objects.name_of(workload), "queue", reason, message),
                              Event("Warning", reason, message)))
    return found
