"""Validation of a defaulted MPIJob v2beta1 (spec A.5), as mpi-operator's controller runs it.

In: a defaulted :class:`mpijobs.MPIJob`. Out: a ``reports.Report`` whose
errors come in upstream's order with upstream's field paths, types and
details, then kto's limits (``shared.api.limits``: nesting depth, size,
replicas), which upstream does not have. ``event`` turns a failed report
into upstream's ``ValidationError`` Warning.
"""

from __future__ import annotations

from shared.api import limits, mpijobs
from shared.core import reports
from shared.core.events import Event
from shared.core.reports import FieldError, Report

VALIDATION_ERROR_REASON = "ValidationError"
EVENT_MESSAGE_LIMIT = 1024
"""Kubernetes' Event note limit; longer messages are cut to 1021 characters + ``...``."""

_NON_NEGATIVE = "must be greater than or equal to 0"
_REPLICAS_PATH = f"spec.{mpijobs.REPLICA_FIELD_ALIAS}"


def truncate(message: str) -> str:
    """Upstream truncateMessage: at most 1024 characters, the cut marked with ``...``."""
    if len(message) <= EVENT_MESSAGE_LIMIT:
        return message
    return message[: EVENT_MESSAGE_LIMIT - 3] + "..."


def _not_supported(path: str, value: str, supported: tuple[str, ...]) -> FieldError:
    """Kubernetes field.NotSupported, the supported values sorted as ``sets.String.List`` gives them."""
    return FieldError(path, "NotSupported", reports.supported(sorted(supported)), reports.quote(value))


def _non_negative(path: str, value: int | None, errors: list[FieldError]) -> None:
    if value is not None and value < 0:
        errors.append(FieldError(path, "Invalid", _NON_NEGATIVE, reports.number(value)))


def _check_name(job: mpijobs.MPIJob, errors: list[FieldError]) -> None:
    worker = job.replica(mpijobs.WORKER)
    replicas = worker.replicas if worker is not None and worker.replicas is not None and worker.replicas > 0 else 1
    hostname = f"{job.name}-worker-{replicas - 1}"
    problems = reports.dns1035_errors(hostname)
    if problems:
        errors.append(FieldError(
            "metadata.name", "Invalid",
            f"will not able to create pod and service with invalid DNS label {reports.quote(hostname)}: "
            + ", ".join(problems),
            reports.quote(job.name),
        ))


def _check_replica(spec: mpijobs.ReplicaSpec, path: str, errors: list[FieldError]) -> None:
    """The checks both replica types share: replicas set, restart policy, at least one container."""
    if spec.replicas is None:
        errors.append(FieldError(f"{path}.replicas", "Required", "must define number of replicas"))
    if spec.restart_policy not in mpijobs.RESTART_POLICIES:
        errors.append(_not_supported(f"{path}.restartPolicy", spec.restart_policy or "", mpijobs.RESTART_POLICIES))
    containers_path = f"{path}.template.spec.containers"
    pod_spec = spec.template.get("spec") if isinstance(spec.template, dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if not containers:
        errors.append(FieldError(containers_path, "Required", "must define at least one container"))
    elif not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
        # kto: the CRD schema upstream refuses this shape; planning needs objects.
        errors.append(FieldError(containers_path, "Invalid", "must be a list of container objects"))


def _check_replica_specs(job: mpijobs.MPIJob, errors: list[FieldError]) -> None:
    specs = job.spec.mpi_replica_specs
    if specs is None:
        errors.append(FieldError(_REPLICAS_PATH, "Required", "must have replica specs"))
        return
    launcher_path = f"{_REPLICAS_PATH}[{mpijobs.LAUNCHER}]"
    launcher = specs.get(mpijobs.LAUNCHER)
    if launcher is None:
        errors.append(FieldError(launcher_path, "Required", f"must have {mpijobs.LAUNCHER} replica spec"))
    else:
        _check_replica(launcher, launcher_path, errors)
        if launcher.replicas is not None and launcher.replicas != 1:
            errors.append(FieldError(f"{launcher_path}.replicas", "Invalid", "must be 1",
                                     reports.number(launcher.replicas)))
    worker = specs.get(mpijobs.WORKER)
    if worker is not None:
        worker_path = f"{_REPLICAS_PATH}[{mpijobs.WORKER}]"
        _check_replica(worker, worker_path, errors)
        if worker.replicas is not None and worker.replicas <= 0:
            errors.append(FieldError(f"{worker_path}.replicas", "Invalid", "must be greater than or equal to 1",
                                     reports.number(worker.replicas)))


def _check_run_policy(job: mpijobs.MPIJob, errors: list[FieldError]) -> None:
    policy = job.run_policy
    path = "spec.runPolicy"
    if policy.clean_pod_policy is None:
        errors.append(FieldError(f"{path}.cleanPodPolicy", "Required", "must have clean Pod policy"))
    elif policy.clean_pod_policy not in mpijobs.CLEAN_POD_POLICIES:
        errors.append(_not_supported(f"{path}.cleanPodPolicy", policy.clean_pod_policy, mpijobs.CLEAN_POD_POLICIES))
    _non_negative(f"{path}.ttlSecondsAfterFinished", policy.ttl_seconds_after_finished, errors)
    _non_negative(f"{path}.activeDeadlineSeconds", policy.active_deadline_seconds, errors)
    _non_negative(f"{path}.backoffLimit", policy.backoff_limit, errors)
    if policy.managed_by is not None and policy.managed_by not in mpijobs.MANAGED_BY_VALUES:
        errors.append(_not_supported(f"{path}.managedBy", policy.managed_by, mpijobs.MANAGED_BY_VALUES))


def _check_limits(job: mpijobs.MPIJob, errors: list[FieldError]) -> None:
    """kto: nesting depth and size as JSON (``load`` refuses the deepest already), replicas."""
    document = job.model_dump(by_alias=True, exclude_unset=True, exclude={"status"}, mode="json")
    size = limits.json_size(document)
    if size > limits.MAX_OBJECT_BYTES:
        path, held = limits.largest_field(document)
        errors.append(FieldError(
            limits.shorten(path) or "<object>", "Invalid",
            f"the job is {size} bytes as JSON ({held} of them here); kto's limit is {limits.MAX_OBJECT_BYTES} bytes",
        ))
    for replica_type in mpijobs.REPLICA_TYPES:
        spec = job.replica(replica_type)
        if spec is not None and spec.replicas is not None and spec.replicas > limits.MAX_REPLICAS:
            errors.append(FieldError(
                f"{_REPLICAS_PATH}[{replica_type}].replicas", "Invalid",
                f"kto's limit is {limits.MAX_REPLICAS} replicas per replica type", reports.number(spec.replicas),
            ))


def validate(job: mpijobs.MPIJob) -> Report:
    """Every A.5 error of a defaulted job, in upstream's order, then kto's limits."""
    errors: list[FieldError] = []
    _check_name(job, errors)
    _check_replica_specs(job, errors)
    slots = job.spec.slots_per_worker
    if slots is None:
        errors.append(FieldError("spec.slotsPerWorker", "Required", "must have number of slots per worker"))
    else:
        _non_negative("spec.slotsPerWorker", slots, errors)
    _check_run_policy(job, errors)
    if not job.spec.ssh_auth_mount_path:
        errors.append(FieldError("spec.sshAuthMountPath", "Required", "must have a mount path for SSH credentials"))
    implementation = job.spec.mpi_implementation
    if implementation not in mpijobs.IMPLEMENTATIONS:
        errors.append(_not_supported("spec.mpiImplementation", implementation or "", mpijobs.IMPLEMENTATIONS))
    _check_limits(job, errors)
    return Report(errors=errors)


def event(report: Report) -> Event:
    """The Warning upstream records for an invalid job: ``Found validation errors: <aggregate>``.

    The aggregate is Kubernetes' ``ErrorList.ToAggregate()``: one error as is,
    several in brackets joined by ``, ``."""
    aggregate = reports.aggregate(report.errors)
    return Event("Warning", VALIDATION_ERROR_REASON, truncate(f"Found validation errors: {aggregate}"))
