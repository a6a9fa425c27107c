"""CustomResourceDefinitions of every kind kto serves, generated from the pydantic models (spec §1, §3.5, A.1, B.1).

In: a job class of ``shared.api.jobs`` (or of ``shared.api.elastic``). Out: an
``apiextensions.k8s.io/v1`` CRD as a plain dict, with a structural OpenAPI v3
schema derived from the model fields (type by type, so a field added to a
model shows up here). What the models cannot say (int64 fields, defaults, the
CEL rule on the queue, LabelSelector's shape) is in the small tables below.

Every field's ``description`` (what ``kubectl explain`` prints) is the field's
docstring in the model (``common.Model`` turns attribute docstrings into
descriptions); a map value or list item that is a model, and the object
itself, take the model's class docstring. :func:`describe` applies them to
generated and kept-as-data schemas alike. Printer columns, short names (none)
and categories (none) are upstream's.

MPIJob is served in two versions of one CRD, as upstream's two operators
serve it: ``v1`` (training-operator; the storage version) and ``v2beta1``
(mpi-operator; its schema is upstream's, kept as data beside this module in
``crds_mpijob_v2beta1.yaml``). The conversion strategy is None — the API
server only rewrites ``apiVersion`` — so each version's schema also carries
the other's fields (without defaults), or a read in one version would prune
what was written in the other. The v2beta1 defaults (``mpiImplementation:
OpenMPI`` …) are stored with every object written in v2beta1, which is how
kto tells which operator's behaviour a stored MPIJob asked for
(:func:`shared.api.mpijobs.is_v2beta1`).

et-operator's three CRDs (``kai.alibabacloud.com/v1alpha1``) are upstream's
schemas, kept as data in ``crds_et_operator.yaml`` (pod templates free-form),
with the descriptions of ``shared.api.elastic``'s models added.

Kubeflow Trainer v2's three kinds (``trainer.kubeflow.org/v1alpha1``, :func:`trainer_crd`) are
generated from ``shared.api.trainer`` as the v1 kinds are, with upstream's kubebuilder markers read
from each field's ``json_schema_extra`` and a model's ``CRD`` (:func:`_mark`) and a field's model
default as the schema's ``default``; tests/deploy/test_trainer_crds.py compares them with upstream's
field by field.

``python -m shared.api.crds DIR`` writes ``DIR/kubeflow.org_<plural>.yaml``
and ``DIR/kai.alibabacloud.com_<plural>.yaml`` and ``DIR/trainer.kubeflow.org_<plural>.yaml``; that script entry point and
the reading of the data files are the only code here that touches the file
system.
"""

from __future__ import annotations

import copy
import datetime as dt
import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pydantic
import pydantic_core
import yaml

from shared.api import common, elastic, jobs, jobsets, mpijobs, trainer

Schema = dict[str, Any]
ETKind = type[elastic.TrainingJob] | type[elastic.ScaleIn] | type[elastic.ScaleOut]
TrainerKind = type[trainer.TrainJob] | type[trainer.TrainingRuntime] | type[trainer.ClusterTrainingRuntime]
Kind = type[jobs.Job] | ETKind | type[jobsets.JobSet] | TrainerKind

_INT64_FIELDS = {(common.RunPolicy, "active_deadline_seconds")}
"""int fields that are int64 upstream; every other int is int32."""

_DEFAULTS: dict[tuple[type[pydantic.BaseModel], str], Any] = {
    (common.RunPolicy, "suspend"): False,
    (jobsets.ReplicatedJob, "replicas"): 1,
    (jobsets.ReplicatedJob, "group_name"): jobsets.DEFAULT_GROUP_NAME,
    (jobsets.FailurePolicy, "restart_strategy"): "Recreate",
}
"""Schema defaults applied by the API server (``runPolicy.suspend`` of kubeflow.org/v1; a JobSet's
replicas, groupName and restartStrategy)."""

_VALIDATIONS: dict[tuple[type[pydantic.BaseModel], str], list[Schema]] = {
    (common.SchedulingPolicy, "queue"): [
        {"rule": "self == oldSelf", "message": "spec.runPolicy.schedulingPolicy.queue is immutable"}
    ],
}
"""CEL rules (``x-kubernetes-validations``) per field."""

_QUANTITY: Schema = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}

_LABEL_SELECTOR: Schema = {
    "type": "object",
    "properties": {
        "matchExpressions": {
            "description": "Requirements on the labels, all of which must hold.",
            "type": "array",
            "items": {
                "description": "A requirement on one label: its key, an operator and values.",
                "type": "object",
                "properties": {
                    "key": {"description": "The label key.", "type": "string"},
                    "operator": {"description": "In, NotIn, Exists or DoesNotExist.", "type": "string"},
                    "values": {"description": "The values for In and NotIn; empty for Exists and DoesNotExist.",
                               "type": "array", "items": {"type": "string"}},
                },
                "required": ["key", "operator"],
            },
        },
        "matchLabels": {"description": "Labels that must have these values.",
                        "type": "object", "additionalProperties": {"type": "string"}},
    },
    "x-kubernetes-map-type": "atomic",
}

_QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                     r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
_RESOURCES: Schema = {"type": "object", "additionalProperties": {**_QUANTITY, "pattern": _QUANTITY_PATTERN}}
"""A ResourceList as the Kubernetes schema has it (Trainer's CRDs embed it)."""

_OVERRIDES: dict[tuple[type[pydantic.BaseModel], str], Schema] = {
    (common.ReplicaStatus, "label_selector"): _LABEL_SELECTOR,
    (common.SchedulingPolicy, "min_resources"): {"type": "object", "additionalProperties": _QUANTITY},
    (trainer.ResourceRequirements, "limits"): _RESOURCES,
    (trainer.ResourceRequirements, "requests"): _RESOURCES,
    (trainer.ResourceFieldSelector, "divisor"): {**_QUANTITY, "pattern": _QUANTITY_PATTERN},
}
"""Fields whose model type is looser than the upstream schema."""

_FREE_FORM: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
"""Pod templates and autoscaling metrics: any object, kept as given."""


def _alias(model: type[pydantic.BaseModel], name: str) -> str:
    field = model.model_fields[name]
    return field.alias or name


def _schema_of_type(annotation: Any) -> Schema:
    """The schema of one Python type as used in the models."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _schema_of_type(args[0])
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) != 1:
            raise TypeError(f"no schema for union {annotation!r}")
        return _schema_of_type(members[0])
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin is dict:
        value = args[1]
        if value is Any:
            return dict(_FREE_FORM)
        return {"type": "object", "additionalProperties": _schema_of_type(value)}
    if origin is list:
        return {"type": "array", "items": _schema_of_type(args[0])}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer", "format": "int32"}
    if annotation is str:
        return {"type": "string"}
    if annotation is dt.datetime:
        return {"type": "string", "format": "date-time"}
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return _schema_of_model(annotation)
    raise TypeError(f"no schema for {annotation!r}")


def _schema_of_field(model: type[pydantic.BaseModel], name: str) -> Schema:
    key = (model, name)
    if key in _OVERRIDES:
        return copy.deepcopy(_OVERRIDES[key])  # described in place later: one copy per use
    field = model.model_fields[name]
    schema = _schema_of_type(field.annotation)
    if key in _INT64_FIELDS:
        schema["format"] = "int64"
    if key in _DEFAULTS:
        schema["default"] = _DEFAULTS[key]
    if key in _VALIDATIONS:
        schema["x-kubernetes-validations"] = _VALIDATIONS[key]
    if field.default is not None and field.default is not pydantic_core.PydanticUndefined and isinstance(
            field.default, (bool, int, str)):
        schema["default"] = field.default  # a model default is the API server's (trainer's +kubebuilder:default)
    if isinstance(field.json_schema_extra, dict):
        _mark(schema, field.json_schema_extra)
    return schema


def _mark(schema: Schema, markers: dict[str, Any]) -> None:
    """Merge a field's kubebuilder markers (its ``json_schema_extra``) into its schema, in place: ``items``
    goes into the list's item schema, and a None marker removes what the type gave (a format)."""
    for key, value in markers.items():
        if key == "items" and isinstance(value, dict):
            _mark(schema["items"], value)
        elif key == "required":
            schema[key] = sorted({*schema.get(key, []), *value})
        elif value is None:
            schema.pop(key, None)
        else:
            schema[key] = copy.deepcopy(value)


def _schema_of_model(
    model: type[pydantic.BaseModel], *, skip: tuple[str, ...] = (), required: tuple[str, ...] = ()
) -> Schema:
    """An object schema with one property per field; required = fields without a default."""
    properties: Schema = {}
    required_names = list(required)
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        alias = _alias(model, name)
        properties[alias] = _schema_of_field(model, name)
        if field.is_required() and alias not in required_names:
            required_names.append(alias)
    schema: Schema = {"type": "object"}
    if properties:
        schema["properties"] = dict(sorted(properties.items()))
    if required_names:
        schema["required"] = sorted(required_names)
    _mark(schema, getattr(model, "CRD", {}))
    return schema


_DESCRIBED_LIKE: dict[type[pydantic.BaseModel], type[pydantic.BaseModel]] = {
    mpijobs.RunPolicy: common.RunPolicy,
}
"""A model whose undocumented fields mean what the same fields of another model say."""


def _text(doc: str | None) -> str | None:
    """A docstring as a description: the lines of a paragraph joined, paragraphs kept apart."""
    if not doc:
        return None
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in inspect.cleandoc(doc).split("\n\n"))


def _set_description(node: Schema, text: str | None) -> None:
    """Put ``text`` first in ``node`` (in place: the node may be shared with its parent)."""
    if not text:
        return
    rest = {key: value for key, value in node.items() if key != "description"}
    node.clear()
    node.update(description=text, **rest)


def _model_of(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The model an annotation names (``X`` of ``X | None`` too), or None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        annotation = members[0] if len(members) == 1 else None
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    return None


def _describe_type(node: Schema, annotation: Any) -> None:
    """Descriptions below a node of the given Python type: a model's fields, or a map value's
    or list item's (a model item takes its class docstring)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        _describe_type(node, args[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            if arg is not type(None):
                _describe_type(node, arg)
    elif origin in (dict, list):
        child = node.get("additionalProperties" if origin is dict else "items")
        member = args[-1]
        if isinstance(child, dict):
            item = _model_of(member)
            if item is not None:
                _set_description(child, _text(item.__dict__.get("__doc__")))
            _describe_type(child, member)
    elif (model := _model_of(annotation)) is not None:
        describe(node, model)


def describe(schema: Schema, model: type[pydantic.BaseModel]) -> None:
    """Set the ``description`` of every property of ``schema`` (an object schema of ``model``), at every
    depth, from the model's field docstrings; properties the model lacks are left as they are."""
    properties = schema.get("properties") or {}
    like = _DESCRIBED_LIKE.get(model)
    for name, field in model.model_fields.items():
        node = properties.get(field.alias or name)
        if not isinstance(node, dict):
            continue
        text = field.description
        if text is None and like is not None and name in like.model_fields:
            text = like.model_fields[name].description
        _set_description(node, _text(text))
        _describe_type(node, field.annotation)


def _describe_object(schema: Schema, cls: type[pydantic.BaseModel]) -> None:
    """The description of a kind's whole schema (its class docstring) and of its fields."""
    _set_description(schema, _text(cls.__dict__.get("__doc__")))
    describe(schema, cls)


def _spec_schema(cls: type[jobs.Job]) -> Schema:
    spec_model = cls.model_fields["spec"].annotation
    assert isinstance(spec_model, type) and issubclass(spec_model, pydantic.BaseModel)
    return _schema_of_model(spec_model, required=(cls.REPLICA_FIELD_ALIAS,))


def _openapi_schema(cls: type[jobs.Job]) -> Schema:
    return {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # The API server validates metadata itself; CRDs may not constrain it.
            "metadata": {"type": "object"},
            "spec": _spec_schema(cls),
            "status": _schema_of_type(common.JobStatus),
        },
        "required": ["spec"],
    }


_SCALABLE = (jobs.PyTorchJob, jobs.PaddleJob, jobs.JAXJob)


def _printer_columns(cls: type[jobs.Job]) -> list[Schema]:
    state = {"jsonPath": ".status.conditions[-1:].type", "name": "State", "type": "string"}
    age = {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}
    return [age, state] if cls is jobs.MPIJob else [state, age]


def _subresources(cls: type[jobs.Job]) -> Schema:
    subresources: Schema = {"status": {}}
    if cls in _SCALABLE:
        subresources["scale"] = {
            "specReplicasPath": f".spec.{cls.REPLICA_FIELD_ALIAS}.Worker.replicas",
            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
        }
    return subresources


_MPI_V2BETA1 = Path(__file__).with_name("crds_mpijob_v2beta1.yaml")


def _without_defaults(schema: Schema) -> Schema:
    """A schema node and its children without ``default``: a version's defaults apply to
    objects written in that version only."""
    out = {key: value for key, value in schema.items() if key != "default"}
    for key in ("properties",):
        if key in out:
            out[key] = {name: _without_defaults(child) for name, child in out[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _without_defaults(out[key])
    return out


def _union(into: Schema, other: Schema) -> None:
    """Add to ``into`` every property of ``other`` it lacks (without defaults), at every depth."""
    if into.get("x-kubernetes-preserve-unknown-fields") or "properties" not in other:
        return
    properties = into.setdefault("properties", {})
    for name, child in other["properties"].items():
        if name not in properties:
            properties[name] = _without_defaults(child)
        else:
            _union(properties[name], child)
    for key in ("items", "additionalProperties"):
        if isinstance(into.get(key), dict) and isinstance(other.get(key), dict):
            _union(into[key], other[key])


def _fill_descriptions(into: Schema, other: Schema) -> None:
    """Give every node of ``into`` that has no description the one of ``other``'s node at the same place."""
    if "description" not in into and "description" in other:
        _set_description(into, other["description"])
    for name, child in (into.get("properties") or {}).items():
        if isinstance((other.get("properties") or {}).get(name), dict):
            _fill_descriptions(child, other["properties"][name])
    for key in ("items", "additionalProperties"):
        if isinstance(into.get(key), dict) and isinstance(other.get(key), dict):
            _fill_descriptions(into[key], other[key])


def _mpi_versions(v1: Schema) -> list[Schema]:
    """v1 (storage) and v2beta1 (served), each schema carrying the other's fields."""
    v2 = yaml.safe_load(_MPI_V2BETA1.read_text())
    v1_schema = v1["schema"]["openAPIV3Schema"]
    v2_schema = v2["schema"]["openAPIV3Schema"]
    _describe_object(v2_schema, mpijobs.MPIJob)
    original_v1 = copy.deepcopy(v1_schema)
    _union(v1_schema, v2_schema)
    _union(v2_schema, original_v1)
    _fill_descriptions(v2_schema, original_v1)  # upstream's status types the models do not describe
    return [v1, v2]


def crd(cls: type[jobs.Job]) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind (a fresh dict sharing nothing)."""
    definition: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{cls.PLURAL}.{jobs.GROUP}"},
        "spec": {
            "group": jobs.GROUP,
            "names": {
                "kind": cls.KIND,
                "listKind": f"{cls.KIND}List",
                "plural": cls.PLURAL,
                "singular": cls.SINGULAR,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": jobs.VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": _printer_columns(cls),
                    "schema": {"openAPIV3Schema": _openapi_schema(cls)},
                    "subresources": _subresources(cls),
                }
            ],
        },
    }
    # The tables above are shared between kinds; no aliasing in the result.
    definition = copy.deepcopy(definition)
    _describe_object(definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"], cls)
    if cls is jobs.MPIJob:
        definition["spec"]["versions"] = _mpi_versions(definition["spec"]["versions"][0])
    return definition


_ET_OPERATOR = Path(__file__).with_name("crds_et_operator.yaml")


def et_crd(cls: ETKind) -> dict[str, Any]:
    """The CustomResourceDefinition of one et-operator kind: upstream's, with descriptions."""
    definition: dict[str, Any] = next(
        document for document in yaml.safe_load_all(_ET_OPERATOR.read_text())
        if document["spec"]["names"]["kind"] == cls.KIND
    )
    for version in definition["spec"]["versions"]:
        _describe_object(version["schema"]["openAPIV3Schema"], cls)
    return definition


_API_VERSION_TEXT = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources")
_KIND_TEXT = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this "
    "from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")


def _trainer_printer_columns(cls: TrainerKind) -> list[Schema]:
    if cls is not trainer.TrainJob:
        return []
    return [{"jsonPath": ".status.conditions[-1:].type", "name": "State", "type": "string"},
            {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}]


def _trainer_subresources(cls: TrainerKind) -> Schema:
    return {"status": {}} if cls is trainer.TrainJob else {}


def trainer_crd(cls: TrainerKind) -> dict[str, Any]:
    """The CRD of one Trainer v2 kind (``trainer.kubeflow.org/v1alpha1``), upstream v2.3.0's schema
    generated from :mod:`shared.api.trainer`'s models, their kubebuilder markers (``json_schema_extra``,
    a model's ``CRD``) and defaults.

    Kept free-form (``x-kubernetes-preserve-unknown-fields``) where upstream embeds a big Kubernetes or
    JobSet schema: a runtime's ``spec.template.spec`` (JobSet's JobSetSpec, pod templates within), and in
    a TrainJob's ``runtimePatches`` the pod's ``volumes``, ``affinity`` and ``securityContext`` and a
    container's ``securityContext``; an env var's ``valueFrom`` and a resource claim too. The API server
    keeps what is given there unchecked; tests/deploy/test_trainer_crds.py lists these places."""
    properties: Schema = {
        "apiVersion": {"description": _API_VERSION_TEXT, "type": "string"},
        "kind": {"description": _KIND_TEXT, "type": "string"},
        "metadata": {"type": "object"},
        "spec": _schema_of_type(cls.model_fields["spec"].annotation),
    }
    if cls is trainer.TrainJob:
        properties["status"] = _schema_of_type(trainer.TrainJobStatus)
    schema: Schema = {"type": "object", "properties": properties}
    _mark(schema, getattr(cls, "CRD", {}))
    version: Schema = {"name": trainer.VERSION, "served": True, "storage": True}
    if columns := _trainer_printer_columns(cls):
        version["additionalPrinterColumns"] = columns
    version["schema"] = {"openAPIV3Schema": schema}
    if subresources := _trainer_subresources(cls):
        version["subresources"] = subresources
    definition: dict[str, Any] = copy.deepcopy({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{cls.PLURAL}.{trainer.GROUP}"},
        "spec": {
            "group": trainer.GROUP,
            "names": {"kind": cls.KIND, "listKind": f"{cls.KIND}List", "plural": cls.PLURAL, "singular": cls.SINGULAR},
            "scope": "Cluster" if cls is trainer.ClusterTrainingRuntime else "Namespaced",
            "versions": [version],
        },
    })
    _describe_object(definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"], cls)
    return definition


def jobset_crd() -> dict[str, Any]:
    """JobSet's CustomResourceDefinition, from :mod:`shared.api.jobsets`: upstream's names, printer
    columns and status subresource; each replicated job's Job template free-form."""
    schema: Schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _schema_of_type(jobsets.JobSetSpec),
            "status": _schema_of_type(jobsets.JobSetStatus),
        },
    }
    _describe_object(schema, jobsets.JobSet)
    column = {"name": "", "type": "string", "jsonPath": ""}
    columns = [{**column, "name": name, "jsonPath": path, **({"description": text} if text else {})}
               for name, path, text in (
                   ("TerminalState", ".status.terminalState", "Final state of JobSet"),
                   ("Restarts", ".status.restarts", "Number of restarts"),
                   ("Completed", '.status.conditions[?(@.type=="Completed")].status', ""),
                   ("Suspended", ".spec.suspend", "JobSet suspended"))]
    columns.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                    "description": "Time this JobSet was created"})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{jobsets.PLURAL}.{jobsets.GROUP}"},
        "spec": {
            "group": jobsets.GROUP,
            "names": {"kind": jobsets.KIND, "listKind": f"{jobsets.KIND}List", "plural": jobsets.PLURAL,
                      "singular": jobsets.SINGULAR},
            "scope": "Namespaced",
            "versions": [{"name": jobsets.VERSION, "served": True, "storage": True,
                          "additionalPrinterColumns": columns, "schema": {"openAPIV3Schema": schema},
                          "subresources": {"status": {}}}],
        },
    }


def file_name(cls: Kind) -> str:
    """``<group>_<plural>.yaml`` (``kubeflow.org_pytorchjobs.yaml``), as upstream names its CRD files."""
    if cls is jobsets.JobSet:
        return f"{jobsets.GROUP}_{jobsets.PLURAL}.yaml"
    if issubclass(cls, jobs.Job):
        group = jobs.GROUP
    elif cls in trainer.KINDS.values():
        group = trainer.GROUP
    else:
        group = elastic.GROUP
    return f"{group}_{cls.PLURAL}.yaml"


def definition(cls: Kind) -> dict[str, Any]:
    """The CRD of any kind kto serves (:func:`crd`, :func:`et_crd`, :func:`jobset_crd` or :func:`trainer_crd`)."""
    if cls is jobsets.JobSet:
        return jobset_crd()
    for job_cls in jobs.KINDS.values():
        if cls is job_cls:
            return crd(job_cls)
    for et_cls in elastic.KINDS.values():
        if cls is et_cls:
            return et_crd(et_cls)
    for trainer_cls in trainer.KINDS.values():
        if cls is trainer_cls:
            return trainer_crd(trainer_cls)
    raise TypeError(f"kto serves no kind {cls!r}")


def render(cls: Kind) -> str:
    """The CRD as the YAML text committed under deploy/crds/."""
    header = "# Generated by `python -m shared.api.crds deploy/crds` from shared/api; do not edit.\n"
    return header + yaml.safe_dump(definition(cls), sort_keys=False, default_flow_style=False)


def files() -> dict[str, str]:
    """Every CRD file: name → text."""
    kinds: list[Kind] = [*jobs.KINDS.values(), *elastic.KINDS.values(), jobsets.JobSet, *trainer.KINDS.values()]
    return {file_name(cls): render(cls) for cls in kinds}


def _write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files().items():
        (directory / name).write_text(text)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m shared.api.crds DIRECTORY", file=sys.stderr)
        sys.exit(2)
    _write(Path(sys.argv[1]))
