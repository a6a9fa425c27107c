"""kto's Trainer v2 CRDs are upstream v2.3.0's, field by field (shared/api/crds.py, deploy/crds/trainer.*)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from realparts import trainer as upstream
from shared.api import crds, trainer

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
KINDS = [pytest.param(cls, id=cls.KIND) for cls in trainer.KINDS.values()]

FREE_FORM = {
    "trainjobs": {
        ".spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template.spec"
        + suffix
        for suffix in (".affinity", ".securityContext", ".volumes[]", ".containers[].securityContext",
                       ".initContainers[].securityContext")
    },
    "trainingruntimes": {".spec.template.spec"},
    "clustertrainingruntimes": {".spec.template.spec"},
}
"""Where kto's schema keeps any object (``x-kubernetes-preserve-unknown-fields``) and upstream's has Kubernetes'
or JobSet's big schema: the paths below one are not compared. Everything else is upstream's."""

DIFFERENT_ON_PURPOSE: dict[tuple[str, str], str] = {
    ("trainingruntimes", ".spec.template.spec"): "JobSet's CEL rule needs JobSet's schema",
    ("clustertrainingruntimes", ".spec.template.spec"): "JobSet's CEL rule needs JobSet's schema",
}
"""Nodes that differ from upstream's beyond being free-form, and why (docs/trainer-v2.md, API and admission)."""

_COMPARED = ("type", "format", "default", "enum", "maxItems", "minItems", "maxLength", "minLength", "minimum",
             "maximum", "pattern", "minProperties", "anyOf", "x-kubernetes-int-or-string", "x-kubernetes-list-type",
             "x-kubernetes-list-map-keys", "x-kubernetes-map-type")


def flatten(node: dict[str, Any], path: str = "", out: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every schema node by field path, with what the comparison looks at."""
    out = {} if out is None else out
    out[path] = {key: node[key] for key in _COMPARED if key in node}
    out[path]["required"] = sorted(node.get("required", []))
    out[path]["cel"] = sorted(rule["message"] for rule in node.get("x-kubernetes-validations", []))
    for name, child in (node.get("properties") or {}).items():
        flatten(child, f"{path}.{name}", out)
    if isinstance(node.get("items"), dict):
        flatten(node["items"], f"{path}[]", out)
    if isinstance(node.get("additionalProperties"), dict):
        flatten(node["additionalProperties"], f"{path}{{}}", out)
    return out


def version(definition: dict[str, Any]) -> dict[str, Any]:
    [served] = definition["spec"]["versions"]
    assert isinstance(served, dict)
    return served


def upstream_crd(cls: Any) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(upstream.crd_files()[cls.PLURAL].read_text())
    return loaded


@pytest.mark.parametrize("cls", KINDS)
def test_committed_crd_equals_the_generator_output(cls: Any) -> None:
    path = CRD_DIR / crds.file_name(cls)
    assert path.read_text() == crds.render(cls), "run: python -m shared.api.crds deploy/crds"


@pytest.mark.parametrize("cls", KINDS)
def test_names_scope_printer_columns_and_subresources_are_upstreams(cls: Any) -> None:
    ours, theirs = crds.trainer_crd(cls), upstream_crd(cls)
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    for key in ("group", "names", "scope"):
        assert ours["spec"][key] == theirs["spec"][key]
    for key in ("name", "served", "storage", "additionalPrinterColumns", "subresources"):
        assert version(ours).get(key) == version(theirs).get(key), key


@pytest.mark.parametrize("cls", KINDS)
def test_every_field_path_type_default_enum_limit_and_cel_message_is_upstreams(cls: Any) -> None:
    ours = flatten(version(crds.trainer_crd(cls))["schema"]["openAPIV3Schema"])
    theirs = flatten(version(upstream_crd(cls))["schema"]["openAPIV3Schema"])
    free = FREE_FORM[cls.PLURAL]
    below_free = [path for path in {*ours, *theirs} if any(path.startswith(f) and path != f for f in free)]
    differences = {
        path: (theirs.get(path), ours.get(path))
        for path in sorted({*ours, *theirs} - set(below_free))
        if theirs.get(path) != ours.get(path) and (cls.PLURAL, path) not in DIFFERENT_ON_PURPOSE
    }
    assert differences == {}
    kept_any = {path for path, node in flatten_free(crds.trainer_crd(cls)).items() if node}
    assert kept_any == free


def flatten_free(definition: dict[str, Any]) -> dict[str, bool]:
    """Each node's path → whether it keeps unknown fields."""
    found: dict[str, bool] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        found[path] = bool(node.get("x-kubernetes-preserve-unknown-fields"))
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(version(definition)["schema"]["openAPIV3Schema"], "")
    return found


def descriptions(node: dict[str, Any], path: str = "", out: dict[str, str] | None = None) -> dict[str, str]:
    """Every node's description by field path, its whitespace normalised (upstream breaks lines as its Go
    comments do)."""
    out = {} if out is None else out
    if "description" in node:
        out[path] = " ".join(node["description"].split())
    for name, child in (node.get("properties") or {}).items():
        descriptions(child, f"{path}.{name}", out)
    if isinstance(node.get("items"), dict):
        descriptions(node["items"], f"{path}[]", out)
    return out


@pytest.mark.parametrize("cls", KINDS)
def test_every_field_has_upstreams_description_and_no_other(cls: Any) -> None:
    ours = descriptions(version(crds.trainer_crd(cls))["schema"]["openAPIV3Schema"])
    theirs = descriptions(version(upstream_crd(cls))["schema"]["openAPIV3Schema"])
    shared = ours.keys() & theirs.keys()
    assert {path: (theirs[path], ours[path]) for path in shared if ours[path] != theirs[path]} == {}
    assert sorted(ours.keys() - theirs.keys()) == []
    free = FREE_FORM[cls.PLURAL]
    assert [path for path in sorted(theirs.keys() - ours.keys())
            if not any(path.startswith(f) and path != f for f in free)] == []
