"""Types shared by every kubeflow.org/v1 job kind (spec §1.2).

In: plain dicts as read from YAML / the API server. Out: pydantic models whose
fields carry the upstream camelCase names as aliases. Unknown fields are kept
(``extra="allow"``) and pod templates stay plain dicts, so
``model_dump(by_alias=True, exclude_unset=True)`` gives back what was loaded.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pydantic
from pydantic import alias_generators

Manifest = dict[str, Any]
"""A Kubernetes object as a plain JSON-shaped dict (apiVersion, kind, metadata, …)."""

RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["All", "Running", "None", ""]
ConditionType = Literal["Created", "Running", "Restarting", "Succeeded", "Suspended", "Failed"]
ConditionStatus = Literal["True", "False", "Unknown"]

MANAGED_BY_KUBEFLOW = "kubeflow.org/training-operator"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGED_BY_VALUES = (MANAGED_BY_KUBEFLOW, MANAGED_BY_MULTIKUEUE)


def format_time(value: dt.datetime) -> str:
    """RFC 3339 in UTC with second precision, as the API server writes metav1.Time."""
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> dt.datetime:
    """Parse an RFC 3339 time (``Z`` or an offset; fractional seconds allowed)."""
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed


Time = Annotated[dt.datetime, pydantic.PlainSerializer(format_time, return_type=str)]
"""metav1.Time: a timezone-aware datetime, serialised as ``2024-01-02T03:04:05Z``."""


class Model(pydantic.BaseModel):
    """Base of every API model: camelCase aliases, unknown fields kept."""

    model_config = pydantic.ConfigDict(
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        extra="allow",
        use_attribute_docstrings=True,  # a field's docstring is its description in the CRDs (crds.py)
    )

    def dump(self) -> dict[str, Any]:
        """The wire form: aliases, only the fields that were given or set."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class OwnerReference(Model):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(Model):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None


class Named:
    """The ``name`` and ``namespace`` of a stored object's model, read from its ``metadata`` (a
    mixin of the kinds kto serves)."""

    if TYPE_CHECKING:
        metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"


class ReplicaSpec(Model):
    """One replica type of the job: how many pods to run, from which pod template, and how they restart."""

    replicas: int | None = None
    """Number of pods of this replica type. Defaults to 1 (0 for an MPIJob's Worker)."""
    template: Manifest = pydantic.Field(default_factory=dict)
    """Pod template the pods of this replica type are made from. Its spec.restartPolicy is replaced by the
    replica's restartPolicy (ExitCode becomes Never); kept as given otherwise."""
    restart_policy: RestartPolicy | None = None
    """What happens when a pod of this replica type fails: Always, OnFailure, Never, or ExitCode (the pod is
    replaced when its exit code is 128 or above, a retryable failure such as a signal; below 128 the job
    fails). Defaults to OnFailure for PyTorchJob and PaddleJob, Never otherwise."""


class SchedulingPolicy(Model):
    min_available: int | None = None
    """Pods that must be schedulable together before any starts (the PodGroup's minMember). Defaults to
    the total number of replicas."""
    queue: str | None = None
    """Queue of the PodGroup (Volcano); "default" when unset. Cannot be changed once set."""
    min_resources: dict[str, str | int | float] | None = None
    """Resources the gang needs to start (the PodGroup's minResources). Defaults to the sum of the requests
    of the first minAvailable pods, higher pod priority first."""
    priority_class: str | None = None
    """PriorityClass of the PodGroup (Volcano)."""
    schedule_timeout_seconds: int | None = None
    """Seconds the gang may wait to be scheduled (scheduler-plugins' PodGroup)."""


class RunPolicy(Model):
    clean_pod_policy: CleanPodPolicy | None = None
    """Which pods are deleted when the job finishes: All, Running (those still running or pending) or
    None. Defaults to None."""
    ttl_seconds_after_finished: int | None = None
    """Seconds after the job finishes (from status.completionTime) before the job and its pods are
    deleted. Unset: the job is kept."""
    active_deadline_seconds: int | None = None
    """Seconds from status.startTime the job may run; past them its pods are deleted and the job fails.
    Unset: no deadline."""
    backoff_limit: int | None = None
    """How many container restarts the job may have before it is marked Failed. Unset: no limit."""
    scheduling_policy: SchedulingPolicy | None = None
    """Gang scheduling of the job's pods (a PodGroup), used when the operator runs with a gang scheduler."""
    suspend: bool | None = None
    """Whether the job is suspended: true deletes its pods (they are created again on resume) and sets
    the Suspended condition; setting it back to false resumes the job and resets status.startTime.
    Defaults to false."""
    managed_by: str | None = None
    """Which controller reconciles the job: unset or the kind's own operator
    (kubeflow.org/training-operator; kubeflow.org/mpi-operator for a kubeflow.org/v2beta1 MPIJob) means
    kto, kueue.x-k8s.io/multikueue means MultiKueue does and kto leaves the job alone. Cannot be
    changed."""


class JobCondition(Model):
    """One observed state of the job; the last condition in the list is the latest transition."""

    type: str
    """Type of the condition, e.g. Created, Running, Restarting, Succeeded, Suspended or Failed."""
    status: ConditionStatus
    """Whether the condition holds: True, False or Unknown."""
    reason: str | None = None
    """Machine-readable reason of the last transition, the kind followed by a word (PyTorchJobRunning)."""
    message: str | None = None
    """Human-readable details of the last transition."""
    last_update_time: Time | None = None
    """When the condition was last written."""
    last_transition_time: Time | None = None
    """When the condition last changed its status."""


class ReplicaStatus(Model):
    """Pod counts of one replica type."""

    active: int | None = None
    """Pods of this replica type that are running."""
    succeeded: int | None = None
    """Pods of this replica type that succeeded."""
    failed: int | None = None
    """Pods of this replica type that failed."""
    label_selector: dict[str, Any] | None = None
    """Deprecated and never written; see selector."""
    selector: str | None = None
    """Label selector of the pods of this replica type, as a string (used by the scale subresource)."""


class JobStatus(Model):
    conditions: list[JobCondition] | None = None
    """Observed conditions of the job, oldest transition first."""
    replica_statuses: dict[str, ReplicaStatus] | None = None
    """Pod counts per replica type (Launcher, Master, Worker, ...)."""
    start_time: Time | None = None
    """When the job started running (reset when a suspended job is resumed)."""
    completion_time: Time | None = None
    """When the job succeeded or failed."""
    last_reconcile_time: Time | None = None
    """When the job was last reconciled while waiting for its PodGroup (gang scheduling)."""
