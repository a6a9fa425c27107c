"""mpi-operator's MPIJob, ``kubeflow.org/v2beta1`` (spec A.1–A.3), and how to load one.

In: a dict (one YAML document or an object read from the API server). Out: a
typed :class:`MPIJob` whose fields carry upstream's camelCase names as
aliases. Unknown fields are kept and pod templates stay plain dicts, so
``job.dump()`` gives back what was loaded.

Enumerations that upstream checks in its controller (``cleanPodPolicy``,
``mpiImplementation``, ``restartPolicy``, ``launcherCreationPolicy``) are
plain strings here: a wrong value is a validation error with a field path
(``shared.core.mpi_v2.validating``), as upstream reports it, not a load error.

This is a kind of its own, not a ``shared.api.jobs.Job``: it has its own API
version (every child's ownerReference names ``kubeflow.org/v2beta1``), its
own operator name (``mpi-operator``) and none of the v1 plugin machinery.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pydantic

from shared.api import common, jobs, limits

GROUP = jobs.GROUP
VERSION = "v2beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MPIJob"
OPERATOR_NAME = "mpi-operator"
"""The ``training.kubeflow.org/operator-name`` of its pods (v1's is ``mpijob-controller``)."""
PLURAL = "mpijobs"
SINGULAR = "mpijob"

LAUNCHER = "Launcher"
WORKER = "Worker"
REPLICA_TYPES = (LAUNCHER, WORKER)
REPLICA_FIELD_ALIAS = "mpiReplicaSpecs"

OPEN_MPI = "OpenMPI"
INTEL_MPI = "Intel"
MPICH = "MPICH"
IMPLEMENTATIONS = (OPEN_MPI, INTEL_MPI, MPICH)

AT_STARTUP = "AtStartup"
WAIT_FOR_WORKERS_READY = "WaitForWorkersReady"

CLEAN_POD_POLICIES = ("None", "Running", "All")
RESTART_POLICIES = ("Never", "OnFailure")
"""The replica restart policies validation accepts (the type also names Always and ExitCode)."""

MANAGED_BY_MPI_OPERATOR = "kubeflow.org/mpi-operator"
MANAGED_BY_VALUES = (MANAGED_BY_MPI_OPERATOR, common.MANAGED_BY_MULTIKUEUE)

DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"

LoadError = jobs.LoadError
"""A document that is not a loadable job; ``errors`` are ``(field path, message)`` pairs."""


class ReplicaSpec(common.Model):
    """One replica type of the job (Launcher or Worker): how many pods, from which pod template, and how
    they restart."""

    replicas: int | None = None
    """Number of pods. Launcher: 1 (the default). Worker: at least 1 (leave the Worker entry out for no
    workers, as with runLauncherAsWorker)."""
    template: common.Manifest = pydantic.Field(default_factory=dict)
    """Pod template of this replica type: the Launcher's becomes the pod template of a batch/v1 Job, the
    Worker's that of each worker pod."""
    restart_policy: str | None = None
    """Never or OnFailure. Defaults to OnFailure for the Launcher and Never for the Worker."""


class RunPolicy(common.Model):
    """``spec.runPolicy``: v2beta1's own copy of the Kubeflow run policy. The fields without a docstring
    here are described by ``common.RunPolicy``'s (shared.api.crds)."""

    clean_pod_policy: str | None = None
    """Which worker pods are deleted when the job finishes: All, Running (those still running or pending)
    or None. Defaults to None."""
    ttl_seconds_after_finished: int | None = None
    """Seconds after the launcher Job finishes before it is deleted (the Job's ttlSecondsAfterFinished)."""
    active_deadline_seconds: int | None = None
    """Seconds the launcher Job may run (the Job's activeDeadlineSeconds); past them the job fails."""
    backoff_limit: int | None = None
    """Retries of the launcher pod before the job fails (the launcher Job's backoffLimit; Kubernetes'
    default of 6 when unset)."""
    scheduling_policy: common.SchedulingPolicy | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class MPIJobSpec(common.Model):
    slots_per_worker: int | None = None
    """Slots (MPI processes) per worker in the hostfile. Defaults to 1."""
    run_launcher_as_worker: bool | None = None
    """Whether the launcher also runs MPI processes (it is listed first in the hostfile). Defaults to false."""
    ssh_auth_mount_path: str | None = None
    """Directory the job's SSH keys are mounted at in the launcher and the workers. Defaults to /root/.ssh."""
    launcher_creation_policy: str | None = None
    """When the launcher is created: AtStartup (the default) or WaitForWorkersReady (once every worker pod
    is ready)."""
    mpi_implementation: str | None = None
    """MPI implementation, which decides the hostfile format and the launcher's environment: OpenMPI (the
    default), Intel or MPICH."""
    mpi_replica_specs: dict[str, ReplicaSpec | None] | None = None
    """The job's replica types and their pods: Launcher (exactly one pod, running mpirun in a batch/v1
    Job) and Worker, e.g. {"Launcher": {...}, "Worker": {...}}."""
    run_policy: RunPolicy | None = None
    """Policies of the job: cleanup of worker pods, TTL, deadline and backoff limit (applied to the
    launcher Job), gang scheduling, suspension and which controller manages it."""


class MPIJob(common.Named, common.Model):
    """An MPI job of mpi-operator (kubeflow.org/v2beta1): a launcher Job runs mpirun over SSH across the
    Worker pods."""

    KIND: ClassVar[str] = KIND
    CONTROLLER_NAME: ClassVar[str] = "mpi-job-controller"
    """mpi-operator's event source component (its controllerAgentName)."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: common.ObjectMeta = pydantic.Field(default_factory=common.ObjectMeta)
    spec: MPIJobSpec = pydantic.Field(default_factory=MPIJobSpec)
    """Desired state of the MPIJob."""
    status: common.JobStatus | None = None
    """Most recently observed status of the job, written by kto's status service; read-only."""

    @property
    def run_policy(self) -> RunPolicy:
        """The run policy, created empty (and remembered) when the job has none
        (upstream's is a struct, never nil)."""
        if self.spec.run_policy is None:
            self.spec.run_policy = RunPolicy()
        return self.spec.run_policy

    @property
    def suspended(self) -> bool:
        return bool(self.run_policy.suspend)

    @property
    def launcher_as_worker(self) -> bool:
        return bool(self.spec.run_launcher_as_worker)

    def replica(self, replica_type: str) -> ReplicaSpec | None:
        return (self.spec.mpi_replica_specs or {}).get(replica_type)

    @property
    def worker_replicas(self) -> int:
        """``Worker.replicas``; 0 without a Worker spec (upstream workerReplicas)."""
        worker = self.replica(WORKER)
        return worker.replicas or 0 if worker is not None else 0


def is_v2beta1(document: Any) -> bool:
    """Whether a stored MPIJob was written in ``kubeflow.org/v2beta1``, whichever version
    it is read in: the v2beta1 schema defaults ``spec.mpiImplementation``, which the v1
    API has no field for, so every object written through v2beta1 carries it (the CRD
    converts with strategy None: only ``apiVersion`` differs between the versions)."""
    if not isinstance(document, dict):
        return False
    if document.get("apiVersion") == API_VERSION:
        return True
    spec = document.get("spec")
    return isinstance(spec, dict) and spec.get("mpiImplementation") is not None


def load(document: Any) -> MPIJob:
    """Load one ``kubeflow.org/v2beta1`` MPIJob document; raise :data:`LoadError` naming every bad field.

    A document nested deeper than ``limits.MAX_OBJECT_DEPTH`` is refused before
    pydantic sees it (pydantic cannot hold more than 255 levels)."""
    errors = jobs.identity_errors(document, API_VERSION, (KIND,))
    if "spec" not in document:
        errors.append(("spec", "Required value"))
    if errors:
        raise LoadError(errors)
    deep = limits.depth_error(document)
    if deep is not None:
        raise LoadError([deep])
    try:
        return MPIJob.model_validate(document)
    except pydantic.ValidationError as exc:
        raise LoadError([(limits.field_path(tuple(err["loc"])), err["msg"]) for err in exc.errors()]) from None

