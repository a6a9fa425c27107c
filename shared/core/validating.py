"""Validation of the six kubeflow.org/v1 kinds (spec §3).

In: a loaded but *un-defaulted* job, as the upstream admission webhook sees
it, and on update the stored (old) job. Out: a ``reports.Report`` holding every
error of the document at once (a Kubernetes ``field.ErrorList``) and the
warnings the PyTorch webhook returns.

Where kto differs from upstream (each is listed in docs/api.md):
- MPIJob, validated upstream in the controller with "first failing rule
  wins", gets every error reported, each with a field path; the upstream
  sentence is kept as the detail.
- The PyTorch update check of ``runPolicy.managedBy`` works (upstream passes
  the new object as the old one). JAXJob still does not check ``managedBy``
  at all, as upstream, so that a JAXJob accepted upstream is accepted here.
- A null replica spec is an error (``Required``) instead of a crash.
- An empty replica map (``{}``) is refused as a missing one, with the nil
  map's error; upstream lets it through (the webhooks only check for nil) and
  the job waits for ever (an empty MPIJob map fails upstream on its missing
  Launcher instead).
- Replica-type keys that collide case-insensitively (``Worker`` and
  ``worker``) are a ``Duplicate`` error: defaulting would merge them.
- Pod-template shapes that defaulting and planning rely on (``spec`` an
  object, ``containers`` a list of objects, ``name`` and ``image`` strings,
  ``ports`` a list) are checked, as the upstream CRD schema does.
- kto's limits (``shared.api.limits``: nesting depth, size as JSON, replicas
  per replica type and in all) are checked for every kind; upstream has none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from shared.api import common, jobs, limits
from shared.core import reports
from shared.core.reports import FieldError, Report


def validate(job: jobs.Job, old: jobs.Job | None = None) -> Report:
    """Validate ``job`` (un-defaulted); pass ``old`` on update to check immutable fields."""
    report = Report()
    _KINDS[job.KIND](job, old, report)
    _check_limits(job, report)
    if old is not None:
        _check_queue_immutable(job, old, report)
    return report


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _check_name(job: jobs.Job, report: Report) -> None:
    """C1: metadata.name is a DNS-1035 label."""
    errors = reports.dns1035_errors(job.name)
    if errors:
        report.errors.append(
            FieldError("metadata.name", "Invalid", f"should match: {','.join(errors)}", reports.quote(job.name))
        )


def _map_path(job: jobs.Job) -> str:
    return f"spec.{job.REPLICA_FIELD_ALIAS}"


def _rt_path(job: jobs.Job, replica_type: str) -> str:
    return f"{_map_path(job)}[{replica_type}]"


def _check_managed_by(job: jobs.Job, report: Report) -> None:
    """C6: managedBy, when set (even to ""), is one of the two known controllers."""
    run_policy = job.spec.run_policy
    managed_by = run_policy.managed_by if run_policy else None
    if managed_by is not None and managed_by not in common.MANAGED_BY_VALUES:
        report.errors.append(
            FieldError(
                "spec.runPolicy.managedBy",
                "NotSupported",
                reports.supported(list(common.MANAGED_BY_VALUES)),
                reports.quote(managed_by),
            )
        )


def _check_managed_by_update(job: jobs.Job, old: jobs.Job | None, report: Report) -> None:
    """C7: managedBy is immutable (nil → set and set → nil are changes too)."""
    if old is None:
        return
    new_value = job.spec.run_policy.managed_by if job.spec.run_policy else None
    old_value = old.spec.run_policy.managed_by if old.spec.run_policy else None
    if new_value != old_value:
        shown = "null" if new_value is None else reports.quote(new_value)
        report.errors.append(
            FieldError("spec.runPolicy.managedBy", "Invalid", "field is immutable", shown)
        )


def _check_queue_immutable(job: jobs.Job, old: jobs.Job, report: Report) -> None:
    """§3.5: the CRD's CEL transition rule on schedulingPolicy.queue.

    A transition rule is evaluated only when both the old and the new object
    have the field, so setting or removing the queue is allowed.
    """
    new_queue = _queue(job)
    old_queue = _queue(old)
    if new_queue is not None and old_queue is not None and new_queue != old_queue:
        report.errors.append(
            FieldError(
                "spec.runPolicy.schedulingPolicy.queue",
                "Invalid",
                "spec.runPolicy.schedulingPolicy.queue is immutable",
                reports.quote(new_queue),
            )
        )


def _check_limits(job: jobs.Job, report: Report) -> None:
    """kto: nesting depth, size and replica counts within ``shared.api.limits``."""
    document = job.model_dump(by_alias=True, exclude_unset=True, exclude={"status"})
    meta = document.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    deep = limits.too_deep(document)
    if deep is not None:
        path, depth = deep
        report.errors.append(FieldError(
            limits.shorten(path), "Invalid",
            f"nested {depth} levels deep; kto's limit is {limits.MAX_OBJECT_DEPTH} levels",
        ))
    else:
        size = limits.json_size(document)
        if size > limits.MAX_OBJECT_BYTES:
            path, held = limits.largest_field(document)
            report.errors.append(FieldError(
                limits.shorten(path) or "<object>", "Invalid",
                f"the job is {size} bytes as JSON ({held} of them here); kto's limit is "
                f"{limits.MAX_OBJECT_BYTES} bytes",
            ))
    total = 0
    for replica_type, spec in job.specs().items():
        replicas = spec.replicas
        if replicas is None:
            continue
        total += max(replicas, 0)
        if replicas > limits.MAX_REPLICAS:
            report.errors.append(FieldError(
                f"{_rt_path(job, replica_type)}.replicas", "Invalid",
                f"kto's limit is {limits.MAX_REPLICAS} replicas per replica type", reports.number(replicas),
            ))
    if total > limits.MAX_REPLICAS and len(job.specs()) > 1:
        report.errors.append(FieldError(
            _map_path(job), "Invalid",
            f"{reports.number(total)} replicas in all; kto's limit is {limits.MAX_REPLICAS} replicas per job",
        ))


def _queue(job: jobs.Job) -> str | None:
    run_policy = job.spec.run_policy
    if run_policy is None or run_policy.scheduling_policy is None:
        return None
    return run_policy.scheduling_policy.queue


@dataclasses.dataclass(frozen=True)
class _Container:
    index: int
    name: Any
    image: Any


_Shape = Literal["string", "integer", "object", "list", "string list", "object list", "string map", "quantity map"]

_SHAPE_TEXT: dict[_Shape, str] = {
    "string": "must be a string",
    "integer": "must be an integer",
    "object": "must be an object",
    "list": "must be a list",
    "string list": "must be a list of strings",
    "object list": "must be a list of objects",
    "string map": "must be a map of strings",
    "quantity map": "must be a map of quantities (strings or numbers)",
}


def _has_shape(value: Any, shape: _Shape) -> bool:
    if shape == "string":
        return isinstance(value, str)
    if shape == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if shape == "object":
        return isinstance(value, dict)
    if shape == "list":
        return isinstance(value, list)
    if shape == "string list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if shape == "object list":
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    if shape == "string map":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return isinstance(value, dict) and all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value.values()
    )


def _check_fields(obj: dict[str, Any], shapes: dict[str, _Shape], path: str, report: Report) -> bool:
    """Check the listed fields of ``obj`` (absent or null is fine); True when all fit."""
    ok = True
    for field, shape in shapes.items():
        value = obj.get(field)
        if value is not None and not _has_shape(value, shape):
            report.errors.append(FieldError(f"{path}.{field}", "Invalid", _SHAPE_TEXT[shape]))
            ok = False
    return ok


_METADATA_SHAPES: dict[str, _Shape] = {"labels": "string map", "annotations": "string map"}
_POD_SPEC_SHAPES: dict[str, _Shape] = {
    "initContainers": "object list",
    "volumes": "object list",
    "nodeSelector": "string map",
    "restartPolicy": "string",
    "schedulerName": "string",
    "priorityClassName": "string",
    "serviceAccountName": "string",
}
_CONTAINER_SHAPES: dict[str, _Shape] = {
    "name": "string",
    "image": "string",
    "command": "string list",
    "args": "string list",
    "env": "object list",
    "ports": "object list",
    "resources": "object",
    "volumeMounts": "object list",
}
_ENV_SHAPES: dict[str, _Shape] = {"name": "string", "value": "string"}
_PORT_SHAPES: dict[str, _Shape] = {"name": "string", "containerPort": "integer"}
_RESOURCES_SHAPES: dict[str, _Shape] = {"limits": "quantity map", "requests": "quantity map"}


def _containers(
    spec: common.ReplicaSpec, containers_path: str, report: Report
) -> list[_Container] | None:
    """The containers of a replica's pod template, or None when the shape is wrong.

    Shape errors in the parts of the pod template that kto reads or writes
    (as the API server's pod-template schema would report them) are added
    to ``report``; the rest of the template is passed through unchecked.
    """
    template_path = containers_path.removesuffix(".spec.containers")
    shape_ok = _check_fields(spec.template, {"metadata": "object", "spec": "object"}, template_path, report)
    metadata = spec.template.get("metadata")
    if isinstance(metadata, dict):
        shape_ok &= _check_fields(metadata, _METADATA_SHAPES, f"{template_path}.metadata", report)
    pod_spec = spec.template.get("spec")
    if not isinstance(pod_spec, dict):
        return [] if pod_spec is None and shape_ok else None
    shape_ok &= _check_fields(pod_spec, _POD_SPEC_SHAPES, f"{template_path}.spec", report)
    raw = pod_spec.get("containers")
    if raw is None:
        return [] if shape_ok else None
    if not isinstance(raw, list):
        report.errors.append(FieldError(containers_path, "Invalid", "must be a list"))
        return None
    result: list[_Container] = []
    for index, container in enumerate(raw):
        path = f"{containers_path}[{index}]"
        if not isinstance(container, dict):
            report.errors.append(FieldError(path, "Invalid", "must be an object"))
            shape_ok = False
            continue
        if not _check_fields(container, _CONTAINER_SHAPES, path, report):
            shape_ok = False
            continue
        for field, shapes in (("env", _ENV_SHAPES), ("ports", _PORT_SHAPES)):
            for item_index, item in enumerate(container.get(field) or []):
                shape_ok &= _check_fields(item, shapes, f"{path}.{field}[{item_index}]", report)
        resources = container.get("resources")
        if isinstance(resources, dict):
            shape_ok &= _check_fields(resources, _RESOURCES_SHAPES, f"{path}.resources", report)
        result.append(_Container(index, container.get("name") or "", container.get("image") or ""))
    return result if shape_ok else None


def _check_duplicate_keys(job: jobs.Job, report: Report) -> None:
    """kto: two RT keys equal but for case would be merged by camel-casing (§2)."""
    seen: dict[str, str] = {}
    for replica_type in job.replica_specs or {}:
        folded = replica_type.lower()
        if folded in seen:
            report.errors.append(
                FieldError(
                    _rt_path(job, replica_type),
                    "Duplicate",
                    f"replica type {reports.quote(seen[folded])} is already present"
                    " (keys are compared case-insensitively)",
                    reports.quote(replica_type),
                )
            )
        else:
            seen[folded] = replica_type


# ---------------------------------------------------------------------------
# The five webhook kinds
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _WebhookRules:
    """What differs between the five webhooks (§3.2, §3.3)."""

    allowed_types: tuple[str, ...] | None
    """Allowed RT keys, or None when any key is accepted (TFJob)."""
    quote_container_name: bool = False
    """Paddle writes the default container name with %q in C5."""
    check_managed_by: bool = True
    """C6/C7; JAXJob checks neither (kept from upstream)."""


def _check_webhook_kind(job: jobs.Job, old: jobs.Job | None, report: Report, rules: _WebhookRules) -> None:
    """C1–C7 and the RT allow-list, then the per-RT container checks."""
    _check_name(job, report)
    if rules.check_managed_by:
        _check_managed_by_update(job, old, report)
        _check_managed_by(job, report)
    specs = job.replica_specs
    if not specs:  # None, or {}: no replica type to run is the same mistake
        report.errors.append(FieldError(_map_path(job), "Required", "must be required"))
        return
    _check_duplicate_keys(job, report)
    name = reports.quote(job.DEFAULT_CONTAINER) if rules.quote_container_name else job.DEFAULT_CONTAINER
    for replica_type, spec in specs.items():
        rt_path = _rt_path(job, replica_type)
        containers_path = f"{rt_path}.template.spec.containers"
        if rules.allowed_types is not None and replica_type not in rules.allowed_types:
            report.errors.append(
                FieldError(rt_path, "NotSupported", reports.supported(rules.allowed_types), reports.quote(replica_type))
            )
        if spec is None:
            report.errors.append(FieldError(rt_path, "Required", "must be specified"))
            continue
        containers = _containers(spec, containers_path, report)
        if containers is None:
            continue
        if not containers:
            report.errors.append(FieldError(containers_path, "Required", "must be specified"))
        for container in containers:
            if not container.image:
                report.errors.append(
                    FieldError(f"{containers_path}[{container.index}].image", "Required", "must be required")
                )
        if not any(container.name == job.DEFAULT_CONTAINER for container in containers):
            report.errors.append(
                FieldError(containers_path, "Required", f"must have at least one container with name {name}")
            )


def _check_replicas_exactly_one(job: jobs.Job, replica_type: str, report: Report) -> None:
    """Master.replicas must be spelled out as 1: the webhook runs before defaulting."""
    spec = job.specs().get(replica_type)
    if spec is not None and spec.replicas != 1:
        report.errors.append(FieldError(f"{_rt_path(job, replica_type)}.replicas", "Forbidden", "must be 1"))


def _pytorch(job: jobs.Job, old: jobs.Job | None, report: Report) -> None:
    assert isinstance(job, jobs.PyTorchJob)
    _check_webhook_kind(job, old, report, _WebhookRules(allowed_types=job.REPLICA_TYPES))
    spec = job.spec
    elastic = spec.elastic_policy
    if elastic is not None and elastic.n_proc_per_node is not None:
        report.warnings.append("spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead")
        if spec.nproc_per_node is not None:
            report.errors.append(
                FieldError("spec.elasticPolicy.nProcPerNode", "Forbidden", "must not be used with spec.nprocPerNode")
            )
    if not spec.pytorch_replica_specs:  # reported as missing
        return
    _check_replicas_exactly_one(job, "Master", report)
    for replica_type, replica in job.specs().items():
        if replica_type != "Master" and replica.replicas is not None and replica.replicas < 1:
            report.errors.append(
                FieldError(f"{_rt_path(job, replica_type)}.replicas", "Forbidden", "must be at least 1")
            )
    if elastic is not None and "Worker" not in spec.pytorch_replica_specs:
        report.errors.append(
            FieldError(_rt_path(job, "Worker"), "Required", "must be configured if elastic policy is used")
        )


def _tensorflow(job: jobs.Job, old: jobs.Job | None, report: Report) -> None:
    assert isinstance(job, jobs.TFJob)
    _check_webhook_kind(job, old, report, _WebhookRules(allowed_types=None))
    keys = job.spec.tf_replica_specs or {}
    # Upstream counts keys, not replicas: Chief with replicas 2 passes.
    if sum(1 for key in keys if key in ("Chief", "Master")) > 1:
        report.errors.append(
            FieldError(_map_path(job), "Forbidden", "must not have more than 1 Chief or Master role")
        )


def _xgboost(job: jobs.Job, old: jobs.Job | None, report: Report) -> None:
    assert isinstance(job, jobs.XGBoostJob)
    _check_webhook_kind(job, old, report, _WebhookRules(allowed_types=job.REPLICA_TYPES))
    specs = job.spec.xgb_replica_specs
    if not specs:  # reported as missing
        return
    if "Master" not in specs:
        report.errors.append(FieldError(_rt_path(job, "Master"), "Required", "must be present"))
    else:
        _check_replicas_exactly_one(job, "Master", report)


def _paddle(job: jobs.Job, old: jobs.Job | None, report: Report) -> None:
    assert isinstance(job, jobs.PaddleJob)
    _check_webhook_kind(
        job, old, report, _WebhookRules(allowed_types=job.REPLICA_TYPES, quote_container_name=True)
    )


def _jax(job: jobs.Job, old: jobs.Job | None, report: Report) -> None:
    assert isinstance(job, jobs.JAXJob)
    _check_webhook_kind(
        job, old, report, _WebhookRules(allowed_types=job.REPLICA_TYPES, check_managed_by=False)
    )


# ---------------------------------------------------------------------------
# MPIJob (upstream mpi_validation.go, run by the controller)
# ---------------------------------------------------------------------------


def _mpi(job: jobs.Job, old: jobs.Job | None, report: Report) -> None:
    """Every rule of ValidateV1MpiJobSpec, all reported, with field paths.

    No name check, no container-name requirement and no managedBy check, as
    upstream (MPIJob has no webhook).
    """
    assert isinstance(job, jobs.MPIJob)
    specs = job.spec.mpi_replica_specs
    if not specs:  # None, or {} (upstream reports {} as a missing Launcher)
        report.errors.append(FieldError(_map_path(job), "Required", "MPIReplicaSpecs is not valid"))
        return
    _check_duplicate_keys(job, report)
    for replica_type, spec in specs.items():
        rt_path = _rt_path(job, replica_type)
        containers_path = f"{rt_path}.template.spec.containers"
        if replica_type not in job.REPLICA_TYPES:
            allowed = " ".join(job.REPLICA_TYPES)
            report.errors.append(
                FieldError(
                    rt_path,
                    "NotSupported",
                    f"MPIReplicaType is {replica_type} but must be one of [{allowed}]",
                    reports.quote(replica_type),
                )
            )
        missing = f"MPIReplicaSpecs is not valid: containers definition expected in {replica_type}"
        if spec is None:
            report.errors.append(FieldError(rt_path, "Required", missing))
            continue
        containers = _containers(spec, containers_path, report)
        if containers is None:
            continue
        if not containers:
            report.errors.append(FieldError(containers_path, "Required", missing))
        for container in containers:
            path = f"{containers_path}[{container.index}]"
            if not container.image:
                report.errors.append(
                    FieldError(
                        f"{path}.image",
                        "Required",
                        f"MPIReplicaSpec is not valid: Image is undefined in the container of {replica_type}",
                    )
                )
            if not container.name:
                report.errors.append(
                    FieldError(
                        f"{path}.name",
                        "Required",
                        f"MPIReplicaSpec is not valid: ImageName is undefined in the container of {replica_type}",
                    )
                )
        if replica_type == "Launcher" and spec.replicas is not None and spec.replicas != 1:
            report.errors.append(
                FieldError(
                    f"{rt_path}.replicas",
                    "Forbidden",
                    "MPIReplicaSpec is not valid: There must be only 1 launcher replica",
                )
            )
    if "Launcher" not in specs:
        report.errors.append(
            FieldError(
                _rt_path(job, "Launcher"),
                "Required",
                "MPIReplicaSpec is not valid: Master ReplicaSpec must be present",
            )
        )


_KINDS: dict[str, Callable[[jobs.Job, jobs.Job | None, Report], None]] = {
    jobs.PyTorchJob.KIND: _pytorch,
    jobs.TFJob.KIND: _tensorflow,
    jobs.XGBoostJob.KIND: _xgboost,
    jobs.MPIJob.KIND: _mpi,
    jobs.PaddleJob.KIND: _paddle,
    jobs.JAXJob.KIND: _jax,
}
"""Validation rules, keyed by kind."""
