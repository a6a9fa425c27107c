"""Types shared by every kubeflow.org/v1 job kind (spec §1.2).

In: plain dicts as read from YAML / the API server. Out: pydantic models whose
fields carry the upstream camelCase names as aliases. Unknown fields are kept
(``extra="allow"``) and pod templates stay plain dicts, so
``model_dump(by_alias=True, exclude_unset=True)`` gives back what was loaded.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

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


class ReplicaSpec(Model):
    """One entry of a replica-spec map: how many pods of one replica type, and how."""

    replicas: int | None = None
    template: Manifest = pydantic.Field(default_factory=dict)
    restart_policy: RestartPolicy | None = None


class SchedulingPolicy(Model):
    min_available: int | None = None
    queue: str | None = None
    min_resources: dict[str, str | int | float] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = None


class RunPolicy(Model):
    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class JobCondition(Model):
    type: str
    status: ConditionStatus
    reason: str | None = None
    message: str | None = None
    last_update_time: Time | None = None
    last_transition_time: Time | None = None


class ReplicaStatus(Model):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    label_selector: dict[str, Any] | None = None
    selector: str | None = None


class JobStatus(Model):
    conditions: list[JobCondition] | None = None
    replica_statuses: dict[str, ReplicaStatus] | None = None
    start_time: Time | None = None
    completion_time: Time | None = None
    last_reconcile_time: Time | None = None
