"""Validation of TrainingJobs and scalers (kto's rules; upstream has no webhook, spec B.2).

In: a TrainingJob after ``defaulting.set_defaults``, or a ScaleIn / ScaleOut.
Out: a ``shared.core.reports.Report`` whose errors each name a field path.

Upstream checks nothing beyond its CRD schema and crashes or misbehaves on
what it cannot use (no containers, a null worker spec). kto refuses such a
job up front: ``deciding.decide`` marks it Failed (reason
``TrainingJobFailedValidation``) with these messages. Beyond the schema,
kto requires ``minReplicas ≤ replicas ≤ maxReplicas`` when the bounds are
set, names that make valid worker Service names, and its limits
(``shared.api.limits``).
"""

from __future__ import annotations

import re
from typing import Any

from shared.api import elastic, limits
from shared.core.elastic import naming, planning
from shared.core.reports import FieldError, Report

_CLEAN_POD_POLICIES = ("All", "Running", "None", "")
_JOB_RESTART_POLICIES = ("Never", "OnFailure")
_WORKER_RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
_ATTACH_MODES = (elastic.ATTACH_SSH, elastic.ATTACH_KUBEXEC)
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_MAX = 63

SPECS = "spec.etReplicaSpecs"
WORKER = f"{SPECS}.worker"
LAUNCHER = f"{SPECS}.launcher"


def _not_supported(path: str, value: str, supported: tuple[str, ...]) -> FieldError:
    return FieldError(path, "NotSupported", "supported values: " + ", ".join(f'"{v}"' for v in supported), f'"{value}"')


def validate(job: elastic.TrainingJob) -> Report:
    """Every error of a defaulted TrainingJob at once."""
    report = Report()
    spec = job.spec
    _check_name(job, report)
    if spec.clean_pod_policy is not None and spec.clean_pod_policy not in _CLEAN_POD_POLICIES:
        report.errors.append(_not_supported("spec.cleanPodPolicy", spec.clean_pod_policy, _CLEAN_POD_POLICIES[:3]))
    if spec.restart_policy not in _JOB_RESTART_POLICIES:
        report.errors.append(_not_supported("spec.restartPolicy", str(spec.restart_policy), _JOB_RESTART_POLICIES))
    if spec.launcher_attach_mode not in _ATTACH_MODES:
        report.errors.append(_not_supported("spec.launcherAttachMode", str(spec.launcher_attach_mode), _ATTACH_MODES))
    if spec.backoff_limit is not None and spec.backoff_limit < 0:
        report.errors.append(FieldError("spec.backoffLimit", "Invalid", "must be greater than or equal to 0",
                                        str(spec.backoff_limit)))
    if spec.slots_per_worker is not None and spec.slots_per_worker < 1:
        report.errors.append(FieldError("spec.slotsPerWorker", "Invalid", "must be greater than or equal to 1",
                                        str(spec.slots_per_worker)))
    launcher, worker = spec.et_replica_specs.launcher, spec.et_replica_specs.worker
    if launcher is None:
        report.errors.append(FieldError(LAUNCHER, "Required", ""))
    else:
        if launcher.replicas is not None and launcher.replicas != 1:
            report.errors.append(FieldError(f"{LAUNCHER}.replicas", "Invalid", "must be 1", str(launcher.replicas)))
        if launcher.restart_policy not in (None, "", *_WORKER_RESTART_POLICIES):
            report.errors.append(_not_supported(f"{LAUNCHER}.restartPolicy", str(launcher.restart_policy),
                                                _WORKER_RESTART_POLICIES))
        _check_template(launcher.template, f"{LAUNCHER}.template", report)
    if worker is None:
        report.errors.append(FieldError(WORKER, "Required", ""))
    else:
        _check_worker(worker, report)
        _check_template(worker.template, f"{WORKER}.template", report)
    _check_limits(job, report)
    return report


def _check_name(job: elastic.TrainingJob, report: Report) -> None:
    """A worker's Service is named ``<job>-worker-<i>``: that must be a DNS-1035 label."""
    widest = naming.worker_name(job.name, max((job.worker.max_replicas or 0), (job.worker.replicas or 1)) - 1)
    for name in (job.name, widest):
        if len(name) > _DNS1035_MAX or not _DNS1035.match(name):
            report.errors.append(FieldError(
                "metadata.name", "Invalid",
                f"worker Service {name!r} would not be a DNS-1035 label (lower case alphanumerics and '-', "
                f"starting with a letter, at most {_DNS1035_MAX} characters)", f'"{job.name}"'))
            return


def _check_worker(worker: elastic.ETWorkerSpec, report: Report) -> None:
    for field, value in (("replicas", worker.replicas), ("minReplicas", worker.min_replicas),
                         ("maxReplicas", worker.max_replicas)):
        if value is None:
            continue
        if value < 1:
            report.errors.append(FieldError(f"{WORKER}.{field}", "Invalid", "must be greater than or equal to 1",
                                            str(value)))
        elif value > limits.MAX_REPLICAS:
            report.errors.append(FieldError(f"{WORKER}.{field}", "Invalid",
                                            f"kto's limit is {limits.MAX_REPLICAS} replicas", str(value)))
    low, high, replicas = worker.min_replicas, worker.max_replicas, worker.replicas or 1
    if low is not None and high is not None and low > high:
        report.errors.append(FieldError(f"{WORKER}.minReplicas", "Invalid",
                                        f"must not be greater than maxReplicas {high}", str(low)))
    elif low is not None and replicas < low:
        report.errors.append(FieldError(f"{WORKER}.replicas", "Invalid",
                                        f"must not be less than minReplicas {low}", str(replicas)))
    elif high is not None and replicas > high:
        report.errors.append(FieldError(f"{WORKER}.replicas", "Invalid",
                                        f"must not be greater than maxReplicas {high}", str(replicas)))
    if worker.restart_policy not in _WORKER_RESTART_POLICIES:
        report.errors.append(_not_supported(f"{WORKER}.restartPolicy", str(worker.restart_policy),
                                            _WORKER_RESTART_POLICIES))


def _check_template(template: dict[str, Any], path: str, report: Report) -> None:
    """What planning relies on: ``spec.containers`` a non-empty list of objects with string
    names and images (upstream makes no pod at all without a container)."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        report.errors.append(FieldError(f"{path}.spec", "Required", "a pod template needs a spec"))
        return
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        report.errors.append(FieldError(f"{path}.spec.containers", "Required", "at least one container is needed"))
        return
    for i, container in enumerate(containers):
        where = f"{path}.spec.containers[{i}]"
        if not isinstance(container, dict):
            report.errors.append(FieldError(where, "Invalid", "must be an object"))
            continue
        for key in ("name", "image"):
            if not isinstance(container.get(key), str) or not container[key]:
                report.errors.append(FieldError(f"{where}.{key}", "Required", ""))


def _check_limits(job: elastic.TrainingJob, report: Report) -> None:
    document = job.model_dump(by_alias=True, exclude_unset=True, exclude={"status"}, mode="json")
    report.errors += [FieldError(path, "Invalid", message) for path, message in elastic.limit_errors(document)]


def validate_scaler(scaler: elastic.Scaler) -> Report:
    """What a scaler must say besides its count (the count rules are upstream's, at run time,
    ``scaling``): which job, a positive timeout, env entries named by shell identifiers
    (each is ``export``-ed in the launcher's shell; the name itself is not echoed back, it
    may be hostile text bound for a record)."""
    report = Report()
    if not scaler.target_name:
        report.errors.append(FieldError("spec.selector.name", "Required", "the TrainingJob to scale"))
    if scaler.spec.timeout is not None and scaler.spec.timeout < 1:
        report.errors.append(FieldError("spec.timeout", "Invalid", "must be greater than 0", str(scaler.spec.timeout)))
    for i, env in enumerate(scaler.spec.env or []):
        if not env.name:
            report.errors.append(FieldError(f"spec.env[{i}].name", "Required", ""))
        elif not planning.SHELL_NAME.fullmatch(env.name):
            report.errors.append(FieldError(
                f"spec.env[{i}].name", "Invalid",
                "must be a shell variable name: a letter or '_', then letters, digits or '_' ([A-Za-z_][A-Za-z0-9_]*)"))
    return report
