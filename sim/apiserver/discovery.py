"""Discovery documents of the local cluster, built from the kinds the store serves.

In: the store's kinds (built-in and registered from CRDs). Out: ``/version``, ``/api``,
``/api/v1``, ``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>`` (legacy discovery,
which kubectl falls back to when aggregated discovery is not offered) and the aggregated
discovery of kubectl 1.26+. The OpenAPI documents are sim/apiserver/openapi.py's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sim.apiserver import resources

Obj = dict[str, Any]

VERSION: Obj = {
    "major": "1",
    "minor": "37",
    "emulationMajor": "1",
    "emulationMinor": "37",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "36",
    "gitVersion": "v1.37.0-kto-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_POD_SUBRESOURCES: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    # name, group, version, kind, verbs
    ("log", "", "v1", "Pod", ("get",)),
    ("eviction", "policy", "v1", "Eviction", ("create",)),
    ("binding", "", "v1", "Binding", ("create",)),
)


def api_versions(address: str) -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def groups(kinds: list[resources.Resource]) -> dict[str, list[str]]:
    """Group → served versions (preferred first), core group excluded."""
    out: dict[str, list[str]] = {}
    for res in kinds:
        if not res.group:
            continue
        versions = out.setdefault(res.group, [])
        for v in res.versions:
            if v not in versions:
                versions.append(v)
    # The preferred version is the highest by kube's version priority (not the storage version).
    return {group: sorted(versions, key=resources.version_priority) for group, versions in out.items()}


def _group(name: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(kinds: list[resources.Resource]) -> Obj:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(n, vs) for n, vs in sorted(groups(kinds).items())]}


def api_group(kinds: list[resources.Resource], name: str) -> Obj | None:
    versions = groups(kinds).get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def resource_list(kinds: list[resources.Resource], group: str, version: str) -> Obj | None:
    entries: list[Obj] = []
    for res in sorted(kinds, key=lambda r: r.plural):
        if res.group != group or version not in res.versions:
            continue
        res = res.at(version)  # a CRD's versions may differ in subresources
        entry: Obj = {
            "name": res.plural,
            "singularName": res.singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": list(res.verbs),
            "storageVersionHash": hashlib.sha256(res.key.encode()).hexdigest()[:11],
        }
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        if res.categories:
            entry["categories"] = list(res.categories)
        entries.append(entry)
        if res.status_subresource:
            entries.append({"name": f"{res.plural}/status", "singularName": "", "namespaced": res.namespaced,
                            "kind": res.kind, "verbs": list(resources.SUB_VERBS)})
        if res.scale:
            entries.append({"name": f"{res.plural}/scale", "singularName": "", "namespaced": res.namespaced,
                            "group": "autoscaling", "version": "v1", "kind": "Scale",
                            "verbs": list(resources.SUB_VERBS)})
        if res.key == "pods":
            for sub, sub_group, sub_version, kind, verbs in _POD_SUBRESOURCES:
                item: Obj = {"name": f"pods/{sub}", "singularName": "", "namespaced": True,
                             "kind": kind, "verbs": list(verbs)}
                if sub_group:
                    item.update(group=sub_group, version=sub_version)
                entries.append(item)
    if not entries:
        return None
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}


AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
"""Content type of an aggregated discovery answer (what client-go checks before parsing it)."""


def wants_aggregated(accept: str) -> bool:
    """Whether the Accept header asks for apidiscovery.k8s.io/v2 (as kubectl 1.26+ does first)."""
    for part in accept.split(","):
        params = {p.strip().partition("=")[0]: p.strip().partition("=")[2] for p in part.split(";")[1:]}
        if params.get("g") == "apidiscovery.k8s.io" and params.get("v") == "v2" and params.get("as") == "APIGroupDiscoveryList":
            return True
    return False


def _gvk(group: str, version: str, kind: str) -> Obj:
    return {"group": group, "version": version, "kind": kind}


def _aggregated_resource(res: resources.Resource, version: str) -> Obj:
    res = res.at(version)
    entry: Obj = {
        "resource": res.plural,
        "responseKind": _gvk(res.group, version, res.kind),
        "scope": "Namespaced" if res.namespaced else "Cluster",
        "singularResource": res.singular,
        "verbs": list(res.verbs),
    }
    if res.short_names:
        entry["shortNames"] = list(res.short_names)
    if res.categories:
        entry["categories"] = list(res.categories)
    subresources: list[Obj] = []
    if res.status_subresource:
        subresources.append({"subresource": "status", "responseKind": _gvk(res.group, version, res.kind),
                             "verbs": list(resources.SUB_VERBS)})
    if res.scale:
        subresources.append({"subresource": "scale", "responseKind": _gvk("autoscaling", "v1", "Scale"),
                             "verbs": list(resources.SUB_VERBS)})
    if res.key == "pods":
        for sub, sub_group, sub_version, kind, verbs in _POD_SUBRESOURCES:
            subresources.append({"subresource": sub, "responseKind": _gvk(sub_group, sub_version, kind),
                                 "verbs": list(verbs)})
    if subresources:
        entry["subresources"] = subresources
    return entry


def aggregated(kinds: list[resources.Resource], core: bool) -> Obj:
    """The APIGroupDiscoveryList of ``/api`` (core) or ``/apis`` (every named group)."""
    by_group: dict[str, dict[str, list[Obj]]] = {}
    for res in sorted(kinds, key=lambda r: r.plural):
        if bool(res.group) == core:
            continue
        versions = by_group.setdefault(res.group, {})
        for version in res.versions:
            versions.setdefault(version, []).append(_aggregated_resource(res, version))
    order = groups(kinds)
    items = []
    for group in sorted(by_group):
        preferred = order.get(group, list(by_group[group]))
        ordered = sorted(by_group[group], key=lambda v: preferred.index(v) if v in preferred else len(preferred))
        items.append({
            "metadata": {"name": group} if group else {},
            "versions": [{"version": v, "resources": by_group[group][v], "freshness": "Current"} for v in ordered],
        })
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}
