"""et-operator's kinds, ``kai.alibabacloud.com/v1alpha1`` (spec Part B, B.1–B.4).

In: a dict (one YAML document or API object) of kind TrainingJob, ScaleIn or
ScaleOut. Out: a typed model with upstream's camelCase field names as
aliases. Unknown fields are kept and pod templates stay plain dicts, so
``dump()`` gives back what was loaded (wire compatibility with upstream's
objects, including fields kto does not read).

Loading refuses a document over kto's limits (``shared.api.limits``: nesting
depth and size as JSON) before pydantic sees it, naming the field that holds
most of it; every other error names its field path, as ``jobs.load`` does.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, TypeVar

import pydantic

from shared.api import common, jobs, limits

GROUP = "kai.alibabacloud.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

LoadError = jobs.LoadError
"""The one load error of the API layer: ``errors`` are ``(field path, message)`` pairs."""

ATTACH_SSH = "ssh"
ATTACH_KUBEXEC = "kubexec"

PHASE_CREATED = "Created"
PHASE_RUNNING = "Running"
PHASE_SCALING = "Scaling"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASE_SUSPENDED = "Suspended"
PHASE_SCALE_SUCCEEDED = "ScaleSucceeded"
PHASE_SCALE_FAILED = "ScaleFailed"

DEFAULT_SCRIPT_TIMEOUT = 60
"""Seconds a ScaleOut waits for its workers (and a custom script may run) when ``timeout`` is unset."""


# ---------------------------------------------------------------------------
# TrainingJob
# ---------------------------------------------------------------------------


class ETReplicaSpec(common.Model):
    """``etReplicaSpecs.launcher``: upstream's common ReplicaSpec. ``restartPolicy`` is a free
    string upstream (no enum); only ``Always`` and ``Never`` mean something (B.8 step 4)."""

    replicas: int | None = None
    """Number of launcher pods: 1."""
    template: common.Manifest = pydantic.Field(default_factory=dict)
    """Pod template the pods are made from."""
    restart_policy: str | None = None
    """What happens when the launcher pod is gone: Always creates it again, Never fails the job; other
    values leave it."""


class ETWorkerSpec(ETReplicaSpec):
    """``etReplicaSpecs.worker``: adds the elastic bounds (spec B.2)."""

    replicas: int | None = None
    """Number of workers the job starts with (at least 1). Defaults to 1."""
    restart_policy: str | None = None
    """When a worker pod is replaced by a new one (with a new index): Always (failed, succeeded or gone),
    OnFailure (failed), ExitCode (failed with an exit code above 128) or Never (the default)."""
    min_replicas: int | None = None
    """Fewest workers the training may run with (for the launcher's horovodrun --min-np); not enforced
    by the operator."""
    max_replicas: int | None = None
    """Most workers the training may run with (for the launcher's horovodrun --max-np); not enforced by
    the operator."""


class ETReplicaSpecs(common.Model):
    launcher: ETReplicaSpec | None = None
    """The launcher pod, created once every worker runs; it starts the training (horovodrun) against the
    workers in its hostfile."""
    worker: ETWorkerSpec | None = None
    """The worker pods; ScaleIn and ScaleOut objects remove and add workers while the job runs."""


class TrainingJobSpec(common.Model):
    clean_pod_policy: str | None = None
    """Which pods are deleted when the job finishes: All or Running delete every worker pod and its
    Service, None keeps them. Defaults to Running."""
    et_replica_specs: ETReplicaSpecs
    """The launcher and the workers of the job."""
    launcher_attach_mode: str | None = None
    """How the launcher reaches the workers: ssh (the default; the job's SSH Secret is mounted in every
    pod) or kubexec (kubectl exec)."""
    slots_per_worker: int | None = None
    """Slots (processes) per worker in the hostfile. Defaults to the first worker container's
    nvidia.com/gpu limit, or 1."""
    restart_policy: str | None = None
    """Whether a failed job is started again from scratch: OnFailure (up to backoffLimit times) or Never
    (the default)."""
    backoff_limit: int | None = None
    """How many times a failed job is restarted when restartPolicy is OnFailure. Defaults to 6."""


class ETStatus(common.JobStatus):
    """Upstream's ``common.JobStatus`` of et-operator: the kubeflow status plus a phase,
    the running scaler and the whole-job restart count. Shared by all three kinds."""

    phase: str | None = None
    """Phase of the job (Created, Running, Scaling, Succeeded, Failed, Suspended) or of the scaler
    (Scaling, ScaleSucceeded, ScaleFailed)."""
    current_scaler: str | None = None
    """The scaler being run while the job is Scaling (ScaleIn:<namespace>/<name> or ScaleOut:...)."""
    restart_count: int | None = None
    """How many times the failed job was started again."""


class TrainingJobStatus(ETStatus):
    target_workers: list[str] | None = None
    """Names of the worker pods the job should have."""
    current_workers: list[str] | None = None
    """Names of the worker pods now running, in index order: the hosts of the launcher's hostfile."""


class _Object(common.Named, common.Model):
    """What the three kinds share: apiVersion, metadata, and the name and namespace."""

    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str]

    api_version: str = API_VERSION
    metadata: common.ObjectMeta = pydantic.Field(default_factory=common.ObjectMeta)


class TrainingJob(_Object):
    """An elastic training job of et-operator: worker pods and a launcher that runs the training (Elastic
    Horovod) across them; ScaleIn and ScaleOut objects change its workers while it runs."""

    KIND = "TrainingJob"
    CONTROLLER_NAME: ClassVar[str] = "et-operator"
    """The ``source.component`` of the Events recorded on a TrainingJob."""
    PLURAL = "trainingjobs"
    SINGULAR = "trainingjob"

    kind: str = "TrainingJob"
    spec: TrainingJobSpec
    """Desired state of the TrainingJob."""
    status: TrainingJobStatus | None = None
    """Most recently observed status of the TrainingJob, written by kto; read-only."""

    @property
    def launcher(self) -> ETReplicaSpec:
        """The launcher spec (validation has refused a job without one)."""
        return self.spec.et_replica_specs.launcher or ETReplicaSpec()

    @property
    def worker(self) -> ETWorkerSpec:
        """The worker spec (validation has refused a job without one)."""
        return self.spec.et_replica_specs.worker or ETWorkerSpec()

    @property
    def attach_mode(self) -> str:
        """``launcherAttachMode``, ``ssh`` when unset (upstream GetAttachMode)."""
        return self.spec.launcher_attach_mode or ATTACH_SSH


# ---------------------------------------------------------------------------
# ScaleIn / ScaleOut
# ---------------------------------------------------------------------------


class EnvSpec(common.Model):
    """An environment variable of the scaling script."""

    name: str | None = None
    """Name of the variable."""
    value: str | None = None
    """Value of the variable."""


class Selector(common.Model):
    name: str | None = None
    """The TrainingJob, in the scaler's namespace, this scaler acts on."""


class ToDeleteSpec(common.Model):
    count: int | None = None
    """How many workers to remove, the highest indices first; must be fewer than the job's workers."""
    pod_names: list[str] | None = None
    """Names of the worker pods to remove; takes precedence over count."""


class ToAddSpec(common.Model):
    count: int | None = None
    """How many workers to add (more than 0)."""


class ScalerSpec(common.Model):
    """Fields both scalers have: the inlined ScaleScriptSpec, backoffLimit (unused) and selector."""

    script: str | None = None
    """Script on the launcher run instead of rewriting its hostfile; it gets the changed workers as
    <pod>:<slots>,... in its argument."""
    timeout: int | None = None
    """Seconds the script may run, and for a ScaleOut the new workers may take to start. Defaults to 60."""
    env: list[EnvSpec] | None = None
    """Environment variables of the script."""
    backoff_limit: int | None = None
    """Kept for compatibility; not used."""
    selector: Selector | None = None
    """The TrainingJob to scale."""


class ScaleInSpec(ScalerSpec):
    to_delete: ToDeleteSpec | None = None
    """Which workers to remove: a count or pod names."""


class ScaleOutSpec(ScalerSpec):
    to_add: ToAddSpec | None = None
    """How many workers to add."""


class ScaleInStatus(ETStatus):
    to_delete_pods: list[str] | None = None
    """Names of the worker pods this ScaleIn removes, fixed when it starts."""


class ScaleOutStatus(ETStatus):
    add_pods: list[str] | None = None
    """Names of the worker pods this ScaleOut adds, fixed when it starts."""


class _Scaler(_Object):
    """What both scalers share. ``pod_names`` are the frozen workers it removes or adds."""

    SCALE_TYPE: ClassVar[str]
    """``ScalingIn`` / ``ScalingOut``: the prefix of its condition reasons (B.4)."""

    spec: ScalerSpec
    status: ETStatus | None = None

    @property
    def full_name(self) -> str:
        """``ScaleIn:<ns>/<name>``: how the job's ``currentScaler`` and messages name it."""
        return f"{self.KIND}:{self.namespace}/{self.name}"

    @property
    def target_name(self) -> str:
        """``spec.selector.name``: the TrainingJob this scaler is for ("" when unset)."""
        selector = self.spec.selector
        return (selector.name or "") if selector is not None else ""

    @property
    def timeout(self) -> int:
        """``spec.timeout``, 60 seconds when unset (upstream GetTimeout)."""
        value = self.spec.timeout
        return DEFAULT_SCRIPT_TIMEOUT if value is None else value


class ScaleIn(_Scaler):
    """Removes workers from a running TrainingJob: the launcher's hostfile is rewritten (or a script run),
    then the chosen worker pods are deleted."""

    KIND = "ScaleIn"
    PLURAL = "scaleins"
    SINGULAR = "scalein"
    SCALE_TYPE = "ScalingIn"

    kind: str = "ScaleIn"
    spec: ScaleInSpec = pydantic.Field(default_factory=ScaleInSpec)
    """Desired state of the ScaleIn."""
    status: ScaleInStatus | None = None
    """Most recently observed status of the ScaleIn, written by kto; read-only."""

    @property
    def pod_names(self) -> list[str]:
        return list((self.status.to_delete_pods if self.status else None) or [])


class ScaleOut(_Scaler):
    """Adds workers to a running TrainingJob: new worker pods are created and, once they run, the
    launcher's hostfile is rewritten (or a script run)."""

    KIND = "ScaleOut"
    PLURAL = "scaleouts"
    SINGULAR = "scaleout"
    SCALE_TYPE = "ScalingOut"

    kind: str = "ScaleOut"
    spec: ScaleOutSpec = pydantic.Field(default_factory=ScaleOutSpec)
    """Desired state of the ScaleOut."""
    status: ScaleOutStatus | None = None
    """Most recently observed status of the ScaleOut, written by kto; read-only."""

    @property
    def pod_names(self) -> list[str]:
        return list((self.status.add_pods if self.status else None) or [])


Scaler = ScaleIn | ScaleOut
Object = TrainingJob | ScaleIn | ScaleOut

KINDS: dict[str, type[TrainingJob] | type[ScaleIn] | type[ScaleOut]] = {
    TrainingJob.KIND: TrainingJob,
    ScaleIn.KIND: ScaleIn,
    ScaleOut.KIND: ScaleOut,
}
"""Every kind of the group, keyed by ``kind``."""


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def _field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a Kubernetes field path: ``spec.env[0].name``,
    ``status.replicaStatuses[Worker]`` (map keys that are not identifiers in brackets)."""
    path = ""
    for part in loc:
        if isinstance(part, int) or not _IDENTIFIER.match(part):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


_SPEC_KEY = re.compile(r"etReplicaSpecs\[(launcher|worker)\]")


def _struct_path(path: str) -> str:
    """``limits`` writes the keys under any ``…ReplicaSpecs`` as map keys (kubeflow's are maps);
    et-operator's ``etReplicaSpecs`` is a struct: ``etReplicaSpecs.worker``."""
    return _SPEC_KEY.sub(r"etReplicaSpecs.\1", path)


def limit_errors(document: dict[str, Any]) -> list[tuple[str, str]]:
    """kto's limits on one object (``status`` not counted): ``(field path, message)`` for a
    document nested too deep or too big as JSON; empty when within them."""
    deep = limits.too_deep(document)
    if deep is not None:
        path, depth = deep
        return [(limits.shorten(_struct_path(path)), f"nested {depth} levels deep; kto's limit is {limits.MAX_OBJECT_DEPTH} levels")]
    measured = {k: v for k, v in document.items() if k != "status"}
    size = limits.json_size(measured)
    if size > limits.MAX_OBJECT_BYTES:
        path, held = limits.largest_field(measured)
        return [(limits.shorten(_struct_path(path)) or "<object>", f"the object is {size} bytes as JSON "
                 f"({held} of them here); kto's limit is {limits.MAX_OBJECT_BYTES} bytes")]
    return []


def load(document: Any) -> Object:
    """Load one TrainingJob, ScaleIn or ScaleOut; raise ``LoadError`` naming every bad field."""
    errors = jobs.identity_errors(document, API_VERSION, KINDS)
    if errors:
        raise LoadError(errors)
    kind = document["kind"]
    if kind == TrainingJob.KIND and "spec" not in document:
        raise LoadError([("spec", "Required value")])
    too_big = limit_errors(document)
    if too_big:
        raise LoadError(too_big)
    try:
        return KINDS[str(kind)].model_validate(document)
    except pydantic.ValidationError as exc:
        raise LoadError([(_field_path(tuple(err["loc"])), err["msg"]) for err in exc.errors()]) from None


_T = TypeVar("_T", TrainingJob, ScaleIn, ScaleOut)


def _load_kind(document: Any, cls: type[_T]) -> _T:
    if isinstance(document, dict) and document.get("kind") not in (None, cls.KIND):
        raise LoadError([("kind", f"Unsupported value: {jobs.shown(document.get('kind'))}: supported values: "
                          f"{cls.KIND!r}")])
    loaded = load(document)
    assert isinstance(loaded, cls)
    return loaded


def load_training_job(document: Any) -> TrainingJob:
    """Load a TrainingJob; any other kind is a ``LoadError`` on ``kind``."""
    return _load_kind(document, TrainingJob)


def load_scale_in(document: Any) -> ScaleIn:
    """Load a ScaleIn; any other kind is a ``LoadError`` on ``kind``."""
    return _load_kind(document, ScaleIn)


def load_scale_out(document: Any) -> ScaleOut:
    """Load a ScaleOut; any other kind is a ``LoadError`` on ``kind``."""
    return _load_kind(document, ScaleOut)


def load_scaler(document: Any) -> Scaler:
    """Load a ScaleIn or a ScaleOut."""
    loaded = load(document)
    if isinstance(loaded, TrainingJob):
        raise LoadError([("kind", "Unsupported value: 'TrainingJob': supported values: 'ScaleIn', 'ScaleOut'")])
    return loaded

