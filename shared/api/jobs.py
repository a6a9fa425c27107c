"""The six kubeflow.org/v1 job kinds (spec §1.1, §1.3, §1.4) and how to load them.

In: a dict (one YAML document). Out: a typed job (``PyTorchJob`` …) whose
per-kind constants (controller name, default container, port, restart policy)
live on the class, beside the type, as upstream keeps them in ``*_types.go``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, ClassVar

import pydantic

from shared.api import common

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"


class RDZVConf(common.Model):
    """One extra rendezvous setting, passed to torchrun as key=value."""

    key: str | None = None
    """Name of the setting."""
    value: str | None = None
    """Value of the setting."""


class ElasticPolicy(common.Model):
    """PyTorchJob.spec.elasticPolicy (torchrun rendezvous and HPA bounds)."""

    min_replicas: int | None = None
    """Fewest workers the job runs with (the lower bound of torchrun's --nnodes and of the autoscaler).
    Defaults to maxReplicas, or to the Worker replicas when both are unset."""
    max_replicas: int | None = None
    """Most workers the job may scale to (the upper bound of torchrun's --nnodes and of the autoscaler).
    Defaults to minReplicas, or to the Worker replicas when both are unset."""
    rdzv_backend: str | None = None
    """Rendezvous backend of torchrun: c10d, etcd or etcd-v2. Defaults to c10d."""
    rdzv_port: int | None = None
    """Port of the rendezvous endpoint. Defaults to the Worker's pytorchjob-port."""
    rdzv_host: str | None = None
    """Host of the rendezvous endpoint. Defaults to the first worker's Service (<job>-worker-0)."""
    rdzv_id: str | None = None
    """Rendezvous ID shared by the job's workers (torchrun's --rdzv-id)."""
    rdzv_conf: list[RDZVConf] | None = None
    """Extra rendezvous configuration (torchrun's --rdzv-conf key1=value1,key2=value2)."""
    standalone: bool | None = None
    """Start a local standalone rendezvous backend (torchrun's --standalone), for one node with several
    workers; the other rendezvous settings are then ignored."""
    n_proc_per_node: int | None = None
    """Deprecated: use spec.nprocPerNode. Processes per worker pod."""
    max_restarts: int | None = None
    """How many times torchrun restarts the worker group before failing (torchrun's --max-restarts)."""
    metrics: list[dict[str, Any]] | None = None
    """autoscaling/v2 metric specs; when set, a HorizontalPodAutoscaler scales the Worker replicas
    between minReplicas and maxReplicas through the job's scale subresource."""


class PaddleElasticPolicy(common.Model):
    """PaddleJob.spec.elasticPolicy: defaulted only, no runtime effect upstream (§1.3)."""

    min_replicas: int | None = None
    """Fewest workers of an elastic job. Defaulted as PyTorchJob's; kto, like upstream, does not act on it."""
    max_replicas: int | None = None
    """Most workers of an elastic job. Defaulted as PyTorchJob's; kto, like upstream, does not act on it."""
    max_restarts: int | None = None
    """Restarts allowed in elastic mode. Kept but not acted on, as upstream."""
    metrics: list[dict[str, Any]] | None = None
    """autoscaling/v2 metric specs. Kept but not acted on (no autoscaler is created), as upstream."""


ReplicaSpecs = dict[str, common.ReplicaSpec | None]


class JobSpec(common.Model):
    run_policy: common.RunPolicy | None = None
    """Policies common to every kind: cleanup of pods, TTL, deadline, backoff limit, gang scheduling,
    suspension and which controller manages the job."""


class PyTorchJobSpec(JobSpec):
    pytorch_replica_specs: ReplicaSpecs | None = None
    """The job's replica types and their pods: Master (optional, exactly one pod) and Worker, e.g.
    {"Master": {...}, "Worker": {...}}. Each pod gets torchrun's environment (MASTER_ADDR, WORLD_SIZE,
    RANK, PET_*)."""
    elastic_policy: ElasticPolicy | None = None
    """Elastic training with torchrun's rendezvous: the Worker count may change between minReplicas and
    maxReplicas, optionally driven by an autoscaler."""
    nproc_per_node: str | None = None
    """Processes per pod, passed as PET_NPROC_PER_NODE: auto, cpu, gpu or a number. Defaults to auto."""


class TFJobSpec(JobSpec):
    tf_replica_specs: ReplicaSpecs | None = None
    """The job's replica types and their pods: PS, Worker, Chief, Master and Evaluator, e.g.
    {"PS": {...}, "Worker": {...}}. Each pod gets the cluster layout in TF_CONFIG."""
    success_policy: str | None = None
    """When the job succeeds: "" (the default: when the Chief or Master succeeds, or without one when
    worker 0 does) or AllWorkers (when every worker has succeeded)."""
    enable_dynamic_worker: bool | None = None
    """Whether workers may be added and removed while the job runs (a sparse TF_CONFIG cluster spec)."""


class XGBoostJobSpec(JobSpec):
    xgb_replica_specs: ReplicaSpecs | None = None
    """The job's replica types and their pods: Master (required, exactly one pod) and Worker, e.g.
    {"Master": {...}, "Worker": {...}}. Each pod gets the master's address and its rank (MASTER_ADDR,
    MASTER_PORT, WORLD_SIZE, RANK)."""


class MPIJobSpec(JobSpec):
    mpi_replica_specs: ReplicaSpecs | None = None
    """The job's replica types and their pods: Launcher (exactly one pod, runs mpirun) and Worker, e.g.
    {"Launcher": {...}, "Worker": {...}}."""
    slots_per_worker: int | None = None
    """Slots (MPI processes) per worker in the hostfile. Defaults to 1."""
    clean_pod_policy: common.CleanPodPolicy | None = None
    """Deprecated: use spec.runPolicy.cleanPodPolicy, which wins when both are set. Defaults to None."""
    main_container: str | None = None
    """Name of the worker container the launcher runs MPI processes in (kubectl exec --container)."""


class PaddleJobSpec(JobSpec):
    paddle_replica_specs: ReplicaSpecs | None = None
    """The job's replica types and their pods: Master (optional: with it the job runs in parameter-server
    mode, without it in collective mode) and Worker, e.g. {"Master": {...}, "Worker": {...}}. Each pod gets
    Paddle's environment (PADDLE_MASTER, PADDLE_NNODES, ...)."""
    elastic_policy: PaddleElasticPolicy | None = None
    """Elastic settings of the job; defaulted, but no controller acts on them (as upstream)."""


class JAXJobSpec(JobSpec):
    jax_replica_specs: ReplicaSpecs | None = None
    """The job's replica types and their pods: Worker only, e.g. {"Worker": {...}}. Each pod gets JAX's
    coordinator address (COORDINATOR_ADDRESS, NUM_PROCESSES, PROCESS_ID)."""


class Job(common.Named, common.Model):
    """Fields and constants common to every kind; subclasses fix ``spec``'s type."""

    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str]
    REPLICA_FIELD: ClassVar[str]
    """Python attribute of the replica-spec map on the spec (``pytorch_replica_specs``)."""
    REPLICA_FIELD_ALIAS: ClassVar[str]
    """Wire name of the replica-spec map (``pytorchReplicaSpecs``), used in field paths."""
    REPLICA_TYPES: ClassVar[tuple[str, ...]]
    """Canonical replica types, for camel-casing keys (§2)."""
    CONTROLLER_NAME: ClassVar[str]
    FRAMEWORK: ClassVar[str]
    DEFAULT_CONTAINER: ClassVar[str]
    DEFAULT_PORT_NAME: ClassVar[str]
    DEFAULT_PORT: ClassVar[int]
    DEFAULT_RESTART_POLICY: ClassVar[common.RestartPolicy]

    api_version: str = API_VERSION
    kind: str
    metadata: common.ObjectMeta = pydantic.Field(default_factory=common.ObjectMeta)
    spec: JobSpec
    status: common.JobStatus | None = None
    """Most recently observed status of the job, written by kto's status service; read-only."""

    @property
    def replica_specs(self) -> ReplicaSpecs | None:
        value: ReplicaSpecs | None = getattr(self.spec, self.REPLICA_FIELD)
        return value

    @replica_specs.setter
    def replica_specs(self, value: ReplicaSpecs | None) -> None:
        setattr(self.spec, self.REPLICA_FIELD, value)

    @property
    def run_policy(self) -> common.RunPolicy:
        """The run policy, created empty (and remembered) when the job has none."""
        if self.spec.run_policy is None:
            self.spec.run_policy = common.RunPolicy()
        return self.spec.run_policy

    def specs(self) -> dict[str, common.ReplicaSpec]:
        """The non-null replica specs; validation has rejected null ones before use."""
        return {rt: spec for rt, spec in (self.replica_specs or {}).items() if spec is not None}


class PyTorchJob(Job):
    """A distributed PyTorch training job: an optional Master and Workers started with torchrun's
    environment, optionally elastic."""

    KIND = "PyTorchJob"
    PLURAL = "pytorchjobs"
    SINGULAR = "pytorchjob"
    REPLICA_FIELD = "pytorch_replica_specs"
    REPLICA_FIELD_ALIAS = "pytorchReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    CONTROLLER_NAME = "pytorchjob-controller"
    FRAMEWORK = "pytorch"
    DEFAULT_CONTAINER = "pytorch"
    DEFAULT_PORT_NAME = "pytorchjob-port"
    DEFAULT_PORT = 23456
    DEFAULT_RESTART_POLICY = "OnFailure"

    kind: str = "PyTorchJob"
    spec: PyTorchJobSpec
    """Desired state of the PyTorchJob."""


class TFJob(Job):
    """A distributed TensorFlow training job: PS, Worker, Chief, Master and Evaluator pods, each given
    the cluster in TF_CONFIG."""

    KIND = "TFJob"
    PLURAL = "tfjobs"
    SINGULAR = "tfjob"
    REPLICA_FIELD = "tf_replica_specs"
    REPLICA_FIELD_ALIAS = "tfReplicaSpecs"
    REPLICA_TYPES = ("PS", "Worker", "Chief", "Master", "Evaluator")
    CONTROLLER_NAME = "tfjob-controller"
    FRAMEWORK = "tensorflow"
    DEFAULT_CONTAINER = "tensorflow"
    DEFAULT_PORT_NAME = "tfjob-port"
    DEFAULT_PORT = 2222
    DEFAULT_RESTART_POLICY = "Never"

    kind: str = "TFJob"
    spec: TFJobSpec
    """Desired state of the TFJob."""


class XGBoostJob(Job):
    """A distributed XGBoost (or LightGBM) training job: a Master and Workers."""

    KIND = "XGBoostJob"
    PLURAL = "xgboostjobs"
    SINGULAR = "xgboostjob"
    REPLICA_FIELD = "xgb_replica_specs"
    REPLICA_FIELD_ALIAS = "xgbReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    CONTROLLER_NAME = "xgboostjob-controller"
    FRAMEWORK = "xgboost"
    DEFAULT_CONTAINER = "xgboost"
    DEFAULT_PORT_NAME = "xgboostjob-port"
    DEFAULT_PORT = 9999
    DEFAULT_RESTART_POLICY = "Never"

    kind: str = "XGBoostJob"
    spec: XGBoostJobSpec
    """Desired state of the XGBoostJob."""


class MPIJob(Job):
    """An MPI job of the Training Operator (kubeflow.org/v1): a Launcher pod runs mpirun across the
    Worker pods."""

    KIND = "MPIJob"
    PLURAL = "mpijobs"
    SINGULAR = "mpijob"
    REPLICA_FIELD = "mpi_replica_specs"
    REPLICA_FIELD_ALIAS = "mpiReplicaSpecs"
    REPLICA_TYPES = ("Launcher", "Worker")
    CONTROLLER_NAME = "mpijob-controller"
    FRAMEWORK = "mpi"
    DEFAULT_CONTAINER = "mpi"
    DEFAULT_PORT_NAME = "mpi-port"
    DEFAULT_PORT = 9999
    DEFAULT_RESTART_POLICY = "Never"

    kind: str = "MPIJob"
    spec: MPIJobSpec
    """Desired state of the MPIJob."""


class PaddleJob(Job):
    """A distributed PaddlePaddle training job: Workers, with a Master in parameter-server mode."""

    KIND = "PaddleJob"
    PLURAL = "paddlejobs"
    SINGULAR = "paddlejob"
    REPLICA_FIELD = "paddle_replica_specs"
    REPLICA_FIELD_ALIAS = "paddleReplicaSpecs"
    REPLICA_TYPES = ("Master", "Worker")
    CONTROLLER_NAME = "paddlejob-controller"
    FRAMEWORK = "paddle"
    DEFAULT_CONTAINER = "paddle"
    DEFAULT_PORT_NAME = "master"
    DEFAULT_PORT = 36543
    DEFAULT_RESTART_POLICY = "OnFailure"

    kind: str = "PaddleJob"
    spec: PaddleJobSpec
    """Desired state of the PaddleJob."""


class JAXJob(Job):
    """A distributed JAX training job: Workers that meet through worker 0 as their coordinator."""

    KIND = "JAXJob"
    PLURAL = "jaxjobs"
    SINGULAR = "jaxjob"
    REPLICA_FIELD = "jax_replica_specs"
    REPLICA_FIELD_ALIAS = "jaxReplicaSpecs"
    REPLICA_TYPES = ("Worker",)
    CONTROLLER_NAME = "jaxjob-controller"
    FRAMEWORK = "jax"
    DEFAULT_CONTAINER = "jax"
    DEFAULT_PORT_NAME = "jaxjob-port"
    DEFAULT_PORT = 6666
    DEFAULT_RESTART_POLICY = "Never"

    kind: str = "JAXJob"
    spec: JAXJobSpec
    """Desired state of the JAXJob."""


KINDS: dict[str, type[Job]] = {
    cls.KIND: cls for cls in (PyTorchJob, TFJob, XGBoostJob, MPIJob, PaddleJob, JAXJob)
}
"""Every supported kind, keyed by ``kind``."""

BY_PLURAL: dict[str, type[Job]] = {cls.PLURAL: cls for cls in KINDS.values()}


class LoadError(ValueError):
    """A document is not a loadable job; ``errors`` are ``(field path, message)`` pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{path}: {message}" for path, message in errors))


def _field_path(loc: tuple[int | str, ...]) -> str:
    """Turn a pydantic error location into a Kubernetes-style field path."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif path.startswith("spec.") and path.endswith("ReplicaSpecs") and path.count(".") == 1:
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def identity_errors(document: Any, api_version: str, kinds: Collection[str]) -> list[tuple[str, str]]:
    """What is wrong with a document's ``apiVersion`` and ``kind`` for a loader serving
    ``kinds`` of ``api_version`` (as field-path errors); a document that is not a mapping
    raises ``LoadError`` at once. Shared by every loader of kto's APIs."""
    if not isinstance(document, dict):
        raise LoadError([("", f"expected a mapping (a Kubernetes object), got {type(document).__name__}")])
    errors: list[tuple[str, str]] = []
    version, kind = document.get("apiVersion"), document.get("kind")
    if not version:
        errors.append(("apiVersion", "Required value"))
    elif version != api_version:
        errors.append(("apiVersion", f"Unsupported value: {shown(version)}: supported values: {api_version!r}"))
    if not kind:
        errors.append(("kind", "Required value"))
    elif not isinstance(kind, str) or kind not in kinds:
        supported = ", ".join(repr(k) for k in kinds)
        errors.append(("kind", f"Unsupported value: {shown(kind)}: supported values: {supported}"))
    return errors


def shown(value: Any) -> str:
    """A value for a message: a string quoted (and cut), anything else by its type
    (the repr of a huge integer or of a deeply nested value raises)."""
    if isinstance(value, str):
        return repr(value if len(value) <= 100 else value[:100] + "…")
    return f"a value of type {type(value).__name__}"


def load(document: Any) -> Job:
    """Load one job document; raise ``LoadError`` naming every bad field."""
    errors = identity_errors(document, API_VERSION, KINDS)
    if errors:
        raise LoadError(errors)
    cls = KINDS[str(document["kind"])]
    if "spec" not in document:
        raise LoadError([("spec", "Required value")])
    try:
        return cls.model_validate(document)
    except pydantic.ValidationError as exc:
        raise LoadError(
            [(_field_path(tuple(err["loc"])), err["msg"]) for err in exc.errors()]
        ) from None


def skeleton(document: Any) -> Job | None:
    """The job's kind, metadata and status with an empty spec: enough to report on a
    job that does not :func:`load` (a wrongly typed field) with a status of its own.
    None when not even those load."""
    kind = document.get("kind") if isinstance(document, dict) else None
    if not isinstance(kind, str) or kind not in KINDS:
        return None
    cls = KINDS[kind]
    try:
        metadata = common.ObjectMeta.model_validate(document.get("metadata") or {})
    except pydantic.ValidationError:
        return None
    status = None
    if isinstance(document.get("status"), dict):
        try:
            status = common.JobStatus.model_validate(document["status"])
        except pydantic.ValidationError:
            status = None  # a status that does not load is written afresh
    spec_type = cls.model_fields["spec"].annotation
    assert isinstance(spec_type, type) and issubclass(spec_type, JobSpec)
    return cls(metadata=metadata, spec=spec_type(), status=status)
