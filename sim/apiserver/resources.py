"""The kinds the local cluster serves: built-in ones here, custom ones added when a CRD is created.

In: a CRD object (``resource_from_crd``). Out: ``Resource`` values the store and the server
look up by key — ``pods`` for the core group, ``<plural>.<group>`` otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from sim.apiserver import schema

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CRD_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
"""The verbs of a custom resource, in the order the apiextensions discovery controller lists them."""
SUB_VERBS = ("get", "patch", "update")


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    """API group; "" for the core group."""
    versions: tuple[str, ...]
    """Served versions, the preferred one first (kube's version priority: v1 before v2beta1 before v1alpha1)."""
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
    """This version's openAPIV3Schema of a CRD (validation, defaulting, pruning)."""
    storage_version: str = ""
    """The storage version of a CRD's kind ("" for built-in kinds)."""
    version: str = ""
    """The version this value describes; "" for built-in kinds (their only version). The value the
    store registers is the storage version's; ``at`` gives the others."""
    prunes_on_read: bool = False
    """Reading a stored object in this version can drop fields (its schema prunes unlike the storage
    version's); otherwise converting to it only rewrites apiVersion."""
    views: dict[str, Resource] = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)
    """Every version of a CRD (served or not) by name, each with its own schema, printer columns
    and subresources; empty for built-in kinds."""

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def api_version(self, version: str | None = None) -> str:
        version = version or self.version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version

    @property
    def multi_version(self) -> bool:
        """More than one version: objects are converted between them (conversion strategy None)."""
        return len(self.views) > 1

    def at(self, version: str | None) -> Resource:
        """This kind as ``version`` serves it (itself for a kind with one version, or for None)."""
        if not version or len(self.views) < 2:
            return self
        return self.views.get(version, self)

    @property
    def verbs(self) -> tuple[str, ...]:
        return ALL_VERBS if self.builtin else CRD_VERBS

    @property
    def storage(self) -> Resource:
        """The version objects are stored in (the value the store registers)."""
        return self.views.get(self.storage_version, self)


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
    Resource("admissionregistration.k8s.io", ("v1",), "validatingwebhookconfigurations",
             "validatingwebhookconfiguration", "ValidatingWebhookConfiguration", namespaced=False,
             categories=("api-extensions",), generation=True),
    Resource("admissionregistration.k8s.io", ("v1",), "mutatingwebhookconfigurations",
             "mutatingwebhookconfiguration", "MutatingWebhookConfiguration", namespaced=False,
             categories=("api-extensions",), generation=True),
)


_PRIORITY = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key of kube's version priority: GA, then beta, then alpha (each highest number first),
    then any other name alphabetically (apimachinery's CompareKubeAwareVersionStrings)."""
    match = _PRIORITY.match(version)
    if match is None:
        return (3, 0, 0, version)
    major, level, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[level]
    return (rank, -int(major), -int(minor or 0), "")


def resource_from_crd(crd: dict[str, Any]) -> Resource:
    """The kind a CRD defines, as its storage version serves it; ``views`` holds every version
    with its own schema, printer columns and subresources (``Resource.at``)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    every = [v for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("name")]
    served = sorted((v["name"] for v in every if v.get("served", True)), key=version_priority)
    storage = next((v["name"] for v in every if v.get("storage")), every[0]["name"] if every else "")
    plural = names.get("plural", "")
    views: dict[str, Resource] = {}
    shapes = {v["name"]: schema.pruning_shape((v.get("schema") or {}).get("openAPIV3Schema")) for v in every}
    for version in every:
        subresources = version.get("subresources") or {}
        scale = subresources.get("scale")
        views[version["name"]] = Resource(
            group=spec.get("group", ""),
            versions=tuple(served),
            plural=plural,
            singular=names.get("singular") or plural,
            kind=names.get("kind", ""),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            status_subresource="status" in subresources,
            scale=dict(scale) if isinstance(scale, dict) else None,
            printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            builtin=False,
            generation=True,
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            storage_version=storage,
            version=version["name"],
            prunes_on_read=shapes[version["name"]] != shapes[storage],
            views=views,
        )
    if not views:
        return Resource(group=spec.get("group", ""), versions=(), plural=plural, singular=names.get("singular") or plural,
                        kind=names.get("kind", ""), builtin=False, generation=True)
    return views[storage]
