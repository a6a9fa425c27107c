"""CustomResourceDefinitions of the six kinds, generated from the pydantic models (spec §1, §3.5).

In: a job class of ``shared.api.jobs``. Out: an ``apiextensions.k8s.io/v1``
CRD as a plain dict, with a structural OpenAPI v3 schema derived from the
model fields (type by type, so a field added to a model shows up here).
What the models cannot say (int64 fields, defaults, the CEL rule on the
queue, LabelSelector's shape) is in the small tables below.

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

``python -m shared.api.crds DIR`` writes ``DIR/kubeflow.org_<plural>.yaml``;
that script entry point and the reading of the v2beta1 schema are the only
code here that touches the file system.
"""

from __future__ import annotations

import copy
import datetime as dt
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from shared.api import common, jobs

Schema = dict[str, Any]

_INT64_FIELDS = {(common.RunPolicy, "active_deadline_seconds")}
"""int fields that are int64 upstream; every other int is int32."""

_DEFAULTS: dict[tuple[type[pydantic.BaseModel], str], Any] = {(common.RunPolicy, "suspend"): False}
"""Schema defaults applied by the API server (only ``runPolicy.suspend`` upstream)."""

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
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["key", "operator"],
            },
        },
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "x-kubernetes-map-type": "atomic",
}

_OVERRIDES: dict[tuple[type[pydantic.BaseModel], str], Schema] = {
    (common.ReplicaStatus, "label_selector"): _LABEL_SELECTOR,
    (common.SchedulingPolicy, "min_resources"): {"type": "object", "additionalProperties": _QUANTITY},
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
        return _OVERRIDES[key]
    field = model.model_fields[name]
    schema = _schema_of_type(field.annotation)
    if key in _INT64_FIELDS:
        schema["format"] = "int64"
    if key in _DEFAULTS:
        schema["default"] = _DEFAULTS[key]
    if key in _VALIDATIONS:
        schema["x-kubernetes-validations"] = _VALIDATIONS[key]
    return schema


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
    schema: Schema = {"type": "object", "properties": dict(sorted(properties.items()))}
    if required_names:
        schema["required"] = sorted(required_names)
    return schema


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


def _mpi_versions(v1: Schema) -> list[Schema]:
    """v1 (storage) and v2beta1 (served), each schema carrying the other's fields."""
    v2 = yaml.safe_load(_MPI_V2BETA1.read_text())
    v1_schema = v1["schema"]["openAPIV3Schema"]
    v2_schema = v2["schema"]["openAPIV3Schema"]
    original_v1 = copy.deepcopy(v1_schema)
    _union(v1_schema, v2_schema)
    _union(v2_schema, original_v1)
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
    if cls is jobs.MPIJob:
        definition["spec"]["versions"] = _mpi_versions(definition["spec"]["versions"][0])
    return definition


def file_name(cls: type[jobs.Job]) -> str:
    """``kubeflow.org_<plural>.yaml``, as upstream names its CRD files."""
    return f"{jobs.GROUP}_{cls.PLURAL}.yaml"


def render(cls: type[jobs.Job]) -> str:
    """The CRD as the YAML text committed under deploy/crds/."""
    header = "# Generated by `python -m shared.api.crds deploy/crds` from shared/api; do not edit.\n"
    return header + yaml.safe_dump(crd(cls), sort_keys=False, default_flow_style=False)


def files() -> dict[str, str]:
    """Every CRD file: name → text."""
    return {file_name(cls): render(cls) for cls in jobs.KINDS.values()}


def _write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files().items():
        (directory / name).write_text(text)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m shared.api.crds DIRECTORY", file=sys.stderr)
        sys.exit(2)
    _write(Path(sys.argv[1]))
