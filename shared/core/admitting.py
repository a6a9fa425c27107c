"""Admission decisions for every kind kto serves: AdmissionReview ``admission.k8s.io/v1``.

In: the webhook that was called (a :class:`Hook`: one kind, validating or
mutating) and the AdmissionReview the API server sent it, decoded from JSON.
Out: an :class:`Answer` — allowed, or denied with upstream's message (the
field errors (``reports``) as Kubernetes' ``ToAggregate()`` writes them,
code 403 as controller-runtime's ``Denied``); the warnings; and, from a
mutating hook, the RFC 6902 JSONPatch that adds the stored defaults
(``defaulting.stored_defaults``). A body that is not an AdmissionReview at
all raises :class:`BadReview`; anything wrong inside a well-formed review is
a denial naming it, never an exception.

Which kinds, and what each hook does (docs/admission.md):

* the five kubeflow.org/v1 kinds with an upstream webhook (PyTorchJob, TFJob,
  XGBoostJob, PaddleJob, JAXJob): validation of the *un-defaulted* object
  (spec §3.2, §3.3, the CEL queue rule of §3.5 and kto's limits) under
  upstream's webhook names; defaulting only of a job that validation accepts,
  so an invalid one reaches the validator as the user wrote it and is refused
  with upstream's message (``Master.replicas`` left out stays an error);
* MPIJob ``kubeflow.org/v2beta1``: mpi-operator's validation (spec A.5) of the
  defaulted object (A.4), which its controller runs; the defaults are stored;
* et-operator's TrainingJob (defaulted, then kto's rules) and ScaleIn /
  ScaleOut (kto's rules): upstream has no webhook and checks only its CRD
  schema;
* MPIJob ``kubeflow.org/v1`` has no hook, as upstream: its controller
  validates (spec §3.4) and reports ``MPIJobFailedValidation``.

An UPDATE that leaves ``spec`` as it was is allowed untouched: metadata-only
writes (labels, finalizers, the reconciler's annotations) must go through
even on a job stored before the webhook was registered.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from shared.api import jobs, limits
from shared.core import reports

REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"
UPSTREAM_SUFFIX = "training-operator.kubeflow.org"
"""The domain of upstream's webhook names (``validator.pytorchjob.training-operator.kubeflow.org``)."""
KTO_SUFFIX = "kto.dev"
"""The domain of the webhooks upstream does not have."""

Obj = dict[str, Any]


class BadReview(ValueError):
    """The body is not an AdmissionReview ``admission.k8s.io/v1`` with a request and its uid."""


@dataclasses.dataclass(frozen=True)
class Read:
    """One object a kind's rules need from the API server (a GET), such as the runtime a TrainJob names."""

    api_version: str
    kind: str
    namespace: str | None
    name: str


@dataclasses.dataclass(frozen=True)
class Unread:
    """A read the API server answered without the object: its error as Kubernetes' client writes it
    (``clustertrainingruntimes.trainer.kubeflow.org "x" not found``)."""

    message: str


Fetch = Callable[[Read], "Obj | Unread | None"]
"""The webhook's GET of one object: the object, why the API server gave none, or None when kto cannot ask
(no credentials): rules that need the object are then left to the reconciler."""


@dataclasses.dataclass(frozen=True)
class Reading:
    """The part of a kind's rules that needs another object from the API server (upstream's TrainJob
    webhook reads the runtime the job names)."""

    read: Callable[[Any], Read]
    """The object a loaded document needs."""
    check: Callable[[Any, Any, "Obj | Unread"], reports.Report]
    """The report on a loaded document (the old one or None, as ``Rules.check``) given what was read."""


@dataclasses.dataclass(frozen=True)
class Rules:
    """How one kind is loaded, judged and defaulted."""

    load: Callable[[Any], Any]
    """The document as a model; ``jobs.LoadError`` (every loader's) names what does not load."""
    check: Callable[[Any, Any], reports.Report]
    """The report on a loaded object, given the old one (or None) on UPDATE."""
    defaults: Callable[[Any], Any] | None = None
    """A copy of a loaded object with the defaults to store; None: the kind has no mutating hook."""
    defaults_valid_only: bool = False
    """Default only what ``check`` accepts (the kinds whose upstream webhook judges the job as written)."""
    reading: Reading | None = None
    """Rules judged once ``check`` accepts, with an object read from the API server; None: none."""

    def validate(self, obj: Obj, old: Obj | None, fetch: Fetch | None = None) -> tuple[list[str], list[str]]:
        """The errors and the warnings of ``obj`` (``fetch``: how the webhook reads what ``reading`` needs)."""
        try:
            loaded = self.load(obj)
        except jobs.LoadError as exc:
            return [f"{path}: {message}" if path else message for path, message in exc.errors], []
        previous = _loaded(self.load, old)
        report = self.check(loaded, previous)
        if report.ok and self.reading is not None and fetch is not None:
            found = fetch(self.reading.read(loaded))
            if found is not None:
                more = self.reading.check(loaded, previous, found)
                report = reports.Report(more.errors, [*report.warnings, *more.warnings])
        return [str(error) for error in report.errors], list(report.warnings)

    def defaulted(self, obj: Obj) -> tuple[Obj, Obj] | None:
        """(``obj`` as loaded, with its stored defaults), both dumped; None when it is not defaulted."""
        if self.defaults is None:
            return None
        try:
            loaded = self.load(obj)
        except jobs.LoadError:
            return None
        if self.defaults_valid_only and not self.check(loaded, None).ok:
            return None
        return _dump(loaded), _dump(self.defaults(loaded))


@dataclasses.dataclass(frozen=True)
class Target:
    """One kind (in one version) kto admits."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    upstream: bool
    """The webhook exists upstream (its name and path are upstream's)."""
    rules: Rules = dataclasses.field(repr=False, compare=False)
    cluster_scoped: bool = False
    """The kind is cluster-scoped (a ClusterTrainingRuntime): its webhook rule's scope is Cluster."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def hook_path(self, mutating: bool) -> str:
        """controller-runtime's path: ``/validate-kubeflow-org-v1-pytorchjob``."""
        verb = "mutate" if mutating else "validate"
        return f"/{verb}-{self.group.replace('.', '-')}-{self.version}-{self.singular}"

    def hook_name(self, mutating: bool) -> str:
        """``validator.pytorchjob.training-operator.kubeflow.org`` (upstream's), else a kto.dev name;
        a kind served in more than one version names its version (``validator.mpijob-v2beta1.kto.dev``)."""
        role = "defaulter" if mutating else "validator"
        if self.upstream and not mutating:
            # kubeflow.org's operators name theirs under their own domain; Trainer v2 under its group.
            return f"{role}.{self.singular}.{UPSTREAM_SUFFIX if self.group == jobs.GROUP else self.group}"
        subject = self.singular if self.group != jobs.GROUP or self.version == jobs.VERSION else (
            f"{self.singular}-{self.version}")
        return f"{role}.{subject}.{KTO_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class Hook:
    """One webhook: a kind, and whether it defaults (mutating) or validates."""

    target: Target
    mutating: bool

    @property
    def name(self) -> str:
        return self.target.hook_name(self.mutating)

    @property
    def path(self) -> str:
        return self.target.hook_path(self.mutating)


@dataclasses.dataclass(frozen=True)
class Answer:
    """The AdmissionResponse to one request."""

    uid: str
    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[Obj, ...] = ()
    """RFC 6902 operations (mutating hooks)."""

    def review(self) -> Obj:
        """The AdmissionReview to send back (the patch base64-encoded, ``patchType: JSONPatch``)."""
        response: Obj = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed:
            status: Obj = {"code": self.code, "message": self.message}
            if self.reason:
                status["reason"] = self.reason
            response["status"] = status
        if self.warnings:
            response["warnings"] = list(self.warnings)
        if self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(list(self.patch), separators=(",", ":")).encode()).decode()
        return {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}


def denied(uid: str, message: str, code: int = 403, reason: str = "Forbidden",
           warnings: tuple[str, ...] = ()) -> Answer:
    """A denial: ``code`` 403 (Forbidden) as controller-runtime's ``Denied``; 400 for a request
    that cannot be judged."""
    return Answer(uid, False, code, reason, message, warnings)


# ---------------------------------------------------------------------------
# Per kind
# ---------------------------------------------------------------------------


def _dump(model: Any) -> Obj:
    dumped: Obj = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return dumped


def _loaded(load: Callable[[Any], Any], document: Obj | None) -> Any:
    """``document`` loaded, or None (no old object, or one that does not load: nothing to compare)."""
    if document is None:
        return None
    try:
        return load(document)
    except jobs.LoadError:
        return None


def hooks(targets: Sequence[Target]) -> tuple[Hook, ...]:
    """The webhooks of ``targets``: a validating one each, then a mutating one for each whose
    kind has defaults to store (the families' ``admitted`` targets, in registry order, are
    what the webhook serves: ``shared.core.families.REGISTRY.hooks``)."""
    return (*(Hook(target, False) for target in targets),
            *(Hook(target, True) for target in targets if target.rules.defaults is not None))


# ---------------------------------------------------------------------------
# The decision
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Request:
    uid: str
    operation: str
    kind: Obj
    obj: Any
    old: Any


def _request(body: Any) -> _Request:
    """The parts of an AdmissionReview's request the decision reads; ``BadReview`` without a uid to answer."""
    if not isinstance(body, dict):
        raise BadReview(f"the body must be an AdmissionReview object, not a JSON {_json_type(body)}")
    version, kind = body.get("apiVersion"), body.get("kind")
    if version != REVIEW_API_VERSION or kind != REVIEW_KIND:
        raise BadReview(f"expected an AdmissionReview of {REVIEW_API_VERSION}, got apiVersion={_shown(version)}, "
                        f"kind={_shown(kind)}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise BadReview("request: Required value: an AdmissionReview sent to a webhook carries a request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid: Required value")
    kind_of = request.get("kind")
    return _Request(uid, str(request.get("operation") or ""), kind_of if isinstance(kind_of, dict) else {},
                    request.get("object"), request.get("oldObject"))


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    return jobs.shown(value) if value is not None else "<none>"


def review(hook: Hook, body: Any, fetch: Fetch | None = None) -> Answer:
    """The answer of ``hook`` to the AdmissionReview ``body``; ``BadReview`` when ``body`` is not one.
    ``fetch`` reads what a kind's rules need from the API server that sent the review."""
    request = _request(body)
    target = hook.target
    asked = (request.kind.get("group"), request.kind.get("version"), request.kind.get("kind"))
    if asked != (target.group, target.version, target.kind):
        return denied(request.uid, f"this webhook admits {target.kind} of {target.api_version}, not "
                      f"{_shown(asked[2])} of {_shown(asked[0])}/{_shown(asked[1])}: check the rules of {hook.name}",
                      400, "BadRequest")
    if request.operation not in ("CREATE", "UPDATE"):
        return Answer(request.uid, True)  # DELETE and CONNECT are not judged (upstream neither)
    obj = request.obj
    if not isinstance(obj, dict):
        return denied(request.uid, f"request.object: Required value: a {request.operation} carries the object",
                      400, "BadRequest")
    old = request.old if isinstance(request.old, dict) else None
    if request.operation == "UPDATE" and old is not None and _same(obj.get("spec"), old.get("spec")):
        return Answer(request.uid, True)
    too_big = _limit_errors(obj)
    rules = target.rules
    if hook.mutating:
        if rules.defaults is None or too_big:
            return Answer(request.uid, True)  # the validator refuses what is over the limits
        pair = rules.defaulted(obj)
        return Answer(request.uid, True, patch=tuple(diff(*pair)) if pair is not None else ())
    if too_big:
        return denied(request.uid, reports.aggregate(too_big))
    errors, warnings = rules.validate(obj, old if request.operation == "UPDATE" else None, fetch)
    if errors:
        return denied(request.uid, reports.aggregate(errors), warnings=tuple(warnings))
    return Answer(request.uid, True, warnings=tuple(warnings))


def _limit_errors(obj: Obj) -> list[reports.FieldError]:
    """kto's depth and size limits, checked before anything loads the object (a value nested
    hundreds of levels deep cannot be loaded or serialised)."""
    measured = {key: value for key, value in obj.items() if key != "status"}
    meta = measured.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        measured["metadata"] = {key: value for key, value in meta.items() if key != "managedFields"}
    deep = limits.too_deep(measured)
    if deep is not None:
        path, depth = deep
        return [reports.FieldError(limits.shorten(path) or "<object>", "Invalid",
                                      f"nested {depth} levels deep; kto's limit is {limits.MAX_OBJECT_DEPTH} levels")]
    size = limits.json_size(measured)
    if size > limits.MAX_OBJECT_BYTES:
        path, held = limits.largest_field(measured)
        return [reports.FieldError(limits.shorten(path) or "<object>", "Invalid",
                                      f"the object is {size} bytes as JSON ({held} of them here); kto's limit is "
                                      f"{limits.MAX_OBJECT_BYTES} bytes")]
    return []


def _same(a: Any, b: Any) -> bool:
    """JSON equality (``1`` is not ``true``, ``1`` is ``1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _pointer(parent: str, key: str | int) -> str:
    """RFC 6901: ``~`` and ``/`` in a key escaped as ``~0`` and ``~1``."""
    return f"{parent}/{str(key).replace('~', '~0').replace('/', '~1')}"


def diff(before: Any, after: Any, path: str = "") -> list[Obj]:
    """RFC 6902 operations that turn ``before`` into ``after``: objects field by field, lists of
    one length item by item, anything else that changed replaced whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[Obj] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": _pointer(path, key)})
        for key, value in after.items():
            if key not in before:
                ops.append({"op": "add", "path": _pointer(path, key), "value": value})
            else:
                ops += diff(before[key], value, _pointer(path, key))
        return ops
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [op for index, (item, changed) in enumerate(zip(before, after))
                for op in diff(item, changed, _pointer(path, index))]
    if _same(before, after):
        return []
    return [{"op": "replace", "path": path, "value": after}]
