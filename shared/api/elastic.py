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
    template: common.Manifest = pydantic.Field(default_factory=dict)
    restart_policy: str | None = None


class ETWorkerSpec(ETReplicaSpec):
    """``etReplicaSpecs.worker``: adds the elastic bounds (spec B.2)."""

    min_replicas: int | None = None
    max_replicas: int | None = None


class ETReplicaSpecs(common.Model):
    launcher: ETReplicaSpec | None = None
    worker: ETWorkerSpec | None = None


class TrainingJobSpec(common.Model):
    clean_pod_policy: str | None = None
    et_replica_specs: ETReplicaSpecs
    launcher_attach_mode: str | None = None
    slots_per_worker: int | None = None
    restart_policy: str | None = None
    backoff_limit: int | None = None


class ETStatus(common.JobStatus):
    """Upstream's ``common.JobStatus`` of et-operator: the kubeflow status plus a phase,
    the running scaler and the whole-job restart count. Shared by all three kinds."""

    phase: str | None = None
    current_scaler: str | None = None
    restart_count: int | None = None


class TrainingJobStatus(ETStatus):
    target_workers: list[str] | None = None
    current_workers: list[str] | None = None


class _Object(common.Model):
    """What the three kinds share: apiVersion, metadata, and the name and namespace."""

    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str]

    api_version: str = API_VERSION
    metadata: common.ObjectMeta = pydantic.Field(default_factory=common.ObjectMeta)

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"


class TrainingJob(_Object):
    KIND = "TrainingJob"
    CONTROLLER_NAME: ClassVar[str] = "et-operator"
    """The ``source.component`` of the Events recorded on a TrainingJob."""
    PLURAL = "trainingjobs"
    SINGULAR = "trainingjob"

    kind: str = "TrainingJob"
    spec: TrainingJobSpec
    status: TrainingJobStatus | None = None

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
    name: str | None = None
    value: str | None = None


class Selector(common.Model):
    name: str | None = None
    """The TrainingJob, in the scaler's namespace, this scaler acts on."""


class ToDeleteSpec(common.Model):
    count: int | None = None
    pod_names: list[str] | None = None


class ToAddSpec(common.Model):
    count: int | None = None


class ScalerSpec(common.Model):
    """Fields both scalers have: the inlined ScaleScriptSpec, backoffLimit (unused) and selector."""

    script: str | None = None
    timeout: int | None = None
    env: list[EnvSpec] | None = None
    backoff_limit: int | None = None
    selector: Selector | None = None


class ScaleInSpec(ScalerSpec):
    to_delete: ToDeleteSpec | None = None


class ScaleOutSpec(ScalerSpec):
    to_add: ToAddSpec | None = None


class ScaleInStatus(ETStatus):
    to_delete_pods: list[str] | None = None


class ScaleOutStatus(ETStatus):
    add_pods: list[str] | None = None


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
    KIND = "ScaleIn"
    PLURAL = "scaleins"
    SINGULAR = "scalein"
    SCALE_TYPE = "ScalingIn"

    kind: str = "ScaleIn"
    spec: ScaleInSpec = pydantic.Field(default_factory=ScaleInSpec)
    status: ScaleInStatus | None = None

    @property
    def pod_names(self) -> list[str]:
        return list((self.status.to_delete_pods if self.status else None) or [])


class ScaleOut(_Scaler):
    KIND = "ScaleOut"
    PLURAL = "scaleouts"
    SINGULAR = "scaleout"
    SCALE_TYPE = "ScalingOut"

    kind: str = "ScaleOut"
    spec: ScaleOutSpec = pydantic.Field(default_factory=ScaleOutSpec)
    status: ScaleOutStatus | None = None

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

