"""Builders of MPIJob v2beta1 jobs and of the objects observed for them, for the mpi_v2 tests."""

from __future__ import annotations

import datetime as dt
from typing import Any

from shared.api import common, mpijobs
from shared.core import settings
from shared.core.mpi_v2 import defaulting, planning, sshkeys

NOW = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
EARLIER = "2024-01-01T00:00:00Z"
OPERATOR = settings.OperatorSettings()
VOLCANO = settings.OperatorSettings(gang_scheduler_name="volcano")
PLUGINS = settings.OperatorSettings(gang_scheduler_name="scheduler-plugins-scheduler")
KEYS = sshkeys.KeyPair(b"-----BEGIN EC PRIVATE KEY-----\nfixed\n-----END EC PRIVATE KEY-----\n",
                       b"ecdsa-sha2-nistp521 AAAAfixed\n")


def new_key() -> sshkeys.KeyPair:
    return KEYS


def job(
    name: str = "foo",
    namespace: str = "default",
    workers: int | None = 2,
    *,
    uid: str = "uid-job",
    launcher: dict[str, Any] | None = None,
    worker: dict[str, Any] | None = None,
    launcher_pod_spec: dict[str, Any] | None = None,
    worker_pod_spec: dict[str, Any] | None = None,
    run_policy: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> mpijobs.MPIJob:
    """A loaded (not defaulted) MPIJob; ``workers=None`` leaves the Worker spec out."""
    specs: dict[str, Any] = {
        "Launcher": {"template": {"spec": {
            "containers": [{"name": "launcher", "image": "mpi", "command": ["mpirun"], **(launcher or {})}],
            **(launcher_pod_spec or {}),
        }}},
    }
    if workers is not None:
        specs["Worker"] = {"replicas": workers, "template": {"spec": {
            "containers": [{"name": "worker", "image": "mpi", **(worker or {})}], **(worker_pod_spec or {}),
        }}}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if annotations:
        metadata["annotations"] = annotations
    document: dict[str, Any] = {
        "apiVersion": mpijobs.API_VERSION, "kind": "MPIJob", "metadata": metadata,
        "spec": {"mpiReplicaSpecs": specs, **spec},
    }
    if run_policy is not None:
        document["spec"]["runPolicy"] = run_policy
    if status is not None:
        document["status"] = status
    return mpijobs.load(document)


def defaulted(*args: Any, **kwargs: Any) -> mpijobs.MPIJob:
    return defaulting.set_defaults(job(*args, **kwargs))


def condition(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastUpdateTime": EARLIER, "lastTransitionTime": EARLIER}


def created_status(**extra: Any) -> dict[str, Any]:
    return {"conditions": [condition("Created", reason="MPIJobCreated", message="MPIJob default/foo is created.")],
            **extra}


def with_status(manifest: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**manifest, "status": status}


def worker(the_job: mpijobs.MPIJob, index: int, phase: str = "Running", *, ready: bool = False,
           reason: str | None = None, foreign: bool = False) -> dict[str, Any]:
    """Worker pod ``index`` as planned for ``the_job`` (defaulted inside), in ``phase``."""
    pod = planning.desired_worker(defaulting.set_defaults(the_job), index, OPERATOR)
    if foreign:
        pod["metadata"]["ownerReferences"] = []
    status: dict[str, Any] = {"phase": phase}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    if reason:
        status["reason"] = reason
    return with_status(pod, **status)


def workers(the_job: mpijobs.MPIJob, count: int, phase: str = "Running", **kwargs: Any) -> list[dict[str, Any]]:
    return [worker(the_job, i, phase, **kwargs) for i in range(count)]


def launcher(the_job: mpijobs.MPIJob, *conditions: dict[str, Any], suspend: bool | None = None,
             **status: Any) -> dict[str, Any]:
    """The launcher Job as planned for ``the_job``, with a uid and the given status."""
    manifest = planning.desired_launcher(defaulting.set_defaults(the_job), OPERATOR)
    manifest["metadata"]["uid"] = "uid-launcher"
    if suspend is not None:
        manifest["spec"]["suspend"] = suspend
    if conditions:
        status["conditions"] = list(conditions)
    return with_status(manifest, **status) if status else manifest


def launcher_pod(name: str, phase: str, *, created: str = EARLIER, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": created,
                     "labels": {"training.kubeflow.org/job-role": "launcher"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "foo-launcher",
                                          "uid": "uid-launcher", "controller": True}]},
        "status": {"phase": phase, "reason": reason, "message": message},
    }


def auxiliaries(the_job: mpijobs.MPIJob, pods: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The Service, ConfigMap and Secret as this job wants them (nothing to change)."""
    done = defaulting.set_defaults(the_job)
    return [
        planning.desired_service(done),
        planning.desired_config_map(done, pods or [], OPERATOR),
        planning.desired_secret(done, KEYS),
    ]


def foreign(manifest: dict[str, Any]) -> dict[str, Any]:
    return {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": []}}


def status_of(value: common.JobStatus | None) -> dict[str, Any]:
    assert value is not None
    return value.dump()


def reasons(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c.get("reason", "")) for c in status.get("conditions") or []]
