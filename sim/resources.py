"""The kinds the local cluster serves: built-in ones here, custom ones added when a CRD is created.

In: a CRD object (``resource_from_crd``). Out: ``Resource`` values the store and the server
look up by key — ``pods`` for the core group, ``<plural>.<group>`` otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUB_VERBS = ("get", "patch", "update")


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    """API group; "" for the core group."""
    versions: tuple[str, ...]
    """Served versions, the preferred (storage) one first."""
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    """Writes to the main resource keep the stored status; /status writes change only status."""
    scale: dict[str, str] | None = None
    """specReplicasPath, statusReplicasPath, labelSelectorPath of a scale subresource."""
    printer_columns: tuple[dict[str, Any], ...] = ()
    """additionalPrinterColumns of a CRD (name, type, jsonPath, priority, format, description)."""
    builtin: bool = True
    """Built-in kinds accept strategic-merge patches; custom resources do not (as in kube)."""
    name_rule: str = "subdomain"
    """How names are validated: "subdomain" (DNS-1123 subdomain) or "label" (DNS-1123 label)."""
    extra_subresources: tuple[str, ...] = ()
    """Further subresources served (pods: log, eviction, binding)."""
    generation: bool = False
    """Objects carry metadata.generation (kinds with a spec the strategy tracks: pods, jobs, custom resources)."""
    schema: dict[str, Any] | None = dataclasses.field(default=None, compare=False, hash=False)
    """The storage version's openAPIV3Schema of a CRD (validation, defaulting, pruning)."""

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def api_version(self, version: str | None = None) -> str:
        version = version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version


def _core(plural: str, singular: str, kind: str, **kw: Any) -> Resource:
    return Resource(group="", versions=("v1",), plural=plural, singular=singular, kind=kind, **kw)


BUILTINS: tuple[Resource, ...] = (
    _core("namespaces", "namespace", "Namespace", namespaced=False, short_names=("ns",),
          status_subresource=True, name_rule="label"),
    _core("nodes", "node", "Node", namespaced=False, short_names=("no",), status_subresource=True),
    _core("pods", "pod", "Pod", short_names=("po",), categories=("all",), status_subresource=True,
          extra_subresources=("log", "eviction", "binding"), generation=True),
    _core("services", "service", "Service", short_names=("svc",), categories=("all",),
          status_subresource=True, name_rule="label"),
    _core("endpoints", "endpoints", "Endpoints", short_names=("ep",)),
    _core("configmaps", "configmap", "ConfigMap", short_names=("cm",)),
    _core("secrets", "secret", "Secret"),
    _core("serviceaccounts", "serviceaccount", "ServiceAccount", short_names=("sa",)),
    _core("events", "event", "Event", short_names=("ev",)),
    _core("resourcequotas", "resourcequota", "ResourceQuota", short_names=("quota",),
          status_subresource=True),
    _core("limitranges", "limitrange", "LimitRange", short_names=("limits",)),
    _core("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim",
          short_names=("pvc",), status_subresource=True),
    Resource("events.k8s.io", ("v1",), "events", "event", "Event", short_names=("ev",)),
    Resource("coordination.k8s.io", ("v1",), "leases", "lease", "Lease"),
    Resource("rbac.authorization.k8s.io", ("v1",), "roles", "role", "Role"),
    Resource("rbac.authorization.k8s.io", ("v1",), "rolebindings", "rolebinding", "RoleBinding"),
    Resource("rbac.authorization.k8s.io", ("v1",), "clusterroles", "clusterrole", "ClusterRole",
             namespaced=False),
    Resource("rbac.authorization.k8s.io", ("v1",), "clusterrolebindings", "clusterrolebinding",
             "ClusterRoleBinding", namespaced=False),
    Resource("autoscaling", ("v2",), "horizontalpodautoscalers", "horizontalpodautoscaler",
             "HorizontalPodAutoscaler", short_names=("hpa",), categories=("all",),
             status_subresource=True, generation=True),
    Resource("batch", ("v1",), "jobs", "job", "Job", categories=("all",), status_subresource=True,
             generation=True),
    Resource("scheduling.volcano.sh", ("v1beta1",), "podgroups", "podgroup", "PodGroup",
             short_names=("pg", "podgroup-v1beta1"), status_subresource=True, generation=True,
             printer_columns=(
                 {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
                 {"name": "minMember", "type": "integer", "jsonPath": ".spec.minMember"},
                 {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
                 {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
             )),
    Resource("scheduling.x-k8s.io", ("v1alpha1",), "podgroups", "podgroup", "PodGroup",
             short_names=("pgs",), status_subresource=True, generation=True,
             printer_columns=(
                 {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
                 {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
                 {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
                 {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
             )),
    Resource("apiextensions.k8s.io", ("v1",), "customresourcedefinitions",
             "customresourcedefinition", "CustomResourceDefinition", namespaced=False,
             short_names=("crd", "crds"), status_subresource=True, generation=True),
)


def resource_from_crd(crd: dict[str, Any]) -> Resource:
    """The kind a CRD defines: served versions (storage first), names, scope, subresources."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    served = [v for v in spec.get("versions") or [] if v.get("served", True)]
    served.sort(key=lambda v: not v.get("storage", False))
    first = served[0] if served else {}
    subresources = first.get("subresources") or {}
    scale = subresources.get("scale")
    plural = names.get("plural", "")
    return Resource(
        group=spec.get("group", ""),
        versions=tuple(v["name"] for v in served),
        plural=plural,
        singular=names.get("singular") or plural,
        kind=names.get("kind", ""),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        status_subresource="status" in subresources,
        scale=dict(scale) if isinstance(scale, dict) else None,
        printer_columns=tuple(first.get("additionalPrinterColumns") or ()),
        builtin=False,
        generation=True,
        schema=(first.get("schema") or {}).get("openAPIV3Schema"),
    )
