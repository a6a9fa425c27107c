"""The OpenAPI v3 documents of the local cluster, built from the kinds it serves, as kube-apiserver publishes them.

In: the store's kinds (a custom resource's with the openAPIV3Schema of each version of its CRD).
Out: ``/openapi/v3`` (every group version with a ``serverRelativeURL`` whose ``hash`` is the
document's ETag) and ``/openapi/v3/<api|apis/group>/<version>`` (an OpenAPI 3.0 document), what
``kubectl explain`` reads and ``kubectl apply`` asks about field validation.

For custom resources the document is what kube-apiserver's CRD builder (apiextensions-apiserver,
``pkg/controller/openapi/builder``) writes: per kind the list (all namespaces and one namespace),
create and deletecollection, read, replace, delete and patch paths, those of the status and scale
subresources, each operation tagged with ``x-kubernetes-action`` and
``x-kubernetes-group-version-kind``; and in ``components.schemas`` the kind (its version's schema
with ``apiVersion``, ``kind`` and ``metadata`` as the API server sets them), its List, and the
meta/v1 and autoscaling/v1 types they refer to. Those types' schemas and the parameters' texts are
kube-apiserver v1.37's, kept as data in ``openapi_meta.json``.

Built-in kinds get their PATCH operation only (with ``fieldValidation``, so kubectl leaves field
validation to the server); their schemas are not served, so ``kubectl explain pod`` says the
schema is missing (docs/sim.md).

How a document is answered (ETag, ``?hash=``, 301 to the current hash, immutable caching, 406)
follows kube-openapi's handler3: :func:`answer`.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

from sim.apiserver import discovery, resources

Obj = dict[str, Any]

_META: Obj = json.loads(Path(__file__).with_name("openapi_meta.json").read_text())
SCHEMAS: dict[str, Obj] = _META["schemas"]
PARAMETERS: dict[str, Obj] = _META["parameters"]

_REF = "#/components/schemas/"
_META_V1 = "io.k8s.apimachinery.pkg.apis.meta.v1."
_SCALE = "io.k8s.api.autoscaling.v1.Scale"
_STATUS = _META_V1 + "Status"
_PATCH_TYPES = ("application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json")
_OBJECT_TYPES = ("application/json", "application/yaml")

_TYPE_META = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object. Servers should "
                  "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
                  "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
                  "#resources",
    "kind": "Kind is a string value representing the REST resource this object represents. Servers may infer "
            "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
            "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
}
_OBJECT_METADATA = ("Standard object's metadata. More info: "
                    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")
_LIST_METADATA = ("Standard list metadata. More info: "
                  "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")

_LIST = ("allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit", "resourceVersion",
         "resourceVersionMatch", "sendInitialEvents", "shardSelector", "timeoutSeconds", "watch")
_WRITE = ("dryRun", "fieldManager", "fieldValidation")
_QUERY: dict[str, tuple[str, ...]] = {
    "list": _LIST,
    "deletecollection": _LIST,
    "post": _WRITE,
    "get": ("resourceVersion",),
    "put": _WRITE,
    "delete": ("dryRun", "gracePeriodSeconds", "ignoreStoreReadErrorWithClusterBreakingPotential", "orphanDependents",
               "propagationPolicy"),
    "patch": ("dryRun", "fieldManager:patch", "fieldValidation", "force"),
}
"""The query parameters of each action (``x-kubernetes-action``), as the CRD builder adds them."""


def model_name(group: str, version: str, kind: str) -> str:
    """``org.kubeflow.v1.PyTorchJob``: the group's parts reversed, then version and kind."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _ref(name: str) -> Obj:
    return {"$ref": _REF + name}


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _kind_schema(res: resources.Resource, version: str) -> Obj:
    """The CRD version's schema as the builder publishes it: type meta described, metadata a ref
    (a version without a schema: any object)."""
    schema: Obj = {"type": "object"}
    if res.schema:
        schema = copy.deepcopy(res.schema)
        properties: Obj = schema.setdefault("properties", {})
        properties["metadata"] = {"description": _OBJECT_METADATA, "allOf": [_ref(_META_V1 + "ObjectMeta")]}
        for name, text in _TYPE_META.items():
            properties[name] = {"description": text, "type": "string"}
    schema["x-kubernetes-group-version-kind"] = [{"group": res.group, "kind": res.kind, "version": version}]
    return schema


def _list_schema(res: resources.Resource, version: str) -> Obj:
    return {
        "description": f"{res.list_kind} is a list of {res.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": _TYPE_META["apiVersion"], "type": "string"},
            "items": {
                "description": f"List of {res.plural}. More info: "
                               "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md",
                "type": "array",
                "items": _ref(model_name(res.group, version, res.kind)),
            },
            "kind": {"description": _TYPE_META["kind"], "type": "string"},
            "metadata": {"description": _LIST_METADATA, "allOf": [_ref(_META_V1 + "ListMeta")]},
        },
        "x-kubernetes-group-version-kind": [{"group": res.group, "kind": res.list_kind, "version": version}],
    }


def _content(name: str, types: tuple[str, ...] = _OBJECT_TYPES) -> Obj:
    return {"content": {media: {"schema": _ref(name)} for media in types}}


def _identifier(text: str, capitalize: bool) -> str:
    """apiserver's ToValidOperationID: letters, digits and underscores kept, capitalised after anything else."""
    out = []
    for index, char in enumerate(text):
        if char.isalpha() or char == "_" or (index and char.isdigit()):
            out.append(char.upper() if capitalize else char)
            capitalize = False
        else:
            capitalize = True
    return "".join(out)


_VERBS = ("get", "log", "read", "replace", "patch", "delete", "deletecollection", "watch", "connect", "proxy",
          "list", "create")


def _operation_id(operation: str, group: str, version: str) -> tuple[str, str]:
    """apiserver's GetOperationIDAndTags: ``listNamespacedPyTorchJob`` becomes
    ``listKubeflowOrgV1NamespacedPyTorchJob`` (the shortest verb first: ``deleteKubeflowOrgV1Collection…``),
    tagged ``kubeflowOrg_v1``."""
    verb = min((v for v in _VERBS if operation.startswith(v)), key=len)
    trimmed = group.removesuffix(".k8s.io") if group else "core"
    prefix = verb + _identifier(trimmed, True) + _identifier(version, True)
    return (prefix + _identifier(operation[len(verb):], True),
            _identifier(trimmed, False) + "_" + _identifier(version, False))


_VERB_TEXT = {"post": "create", "get": "read", "put": "replace", "delete": "delete", "patch": "partially update"}


def _operation(res: resources.Resource, version: str, action: str, subresource: str, operation: str,
               sample: str) -> Obj:
    kind = res.kind
    sub = f" {subresource} of" if subresource else ""
    if action == "list":
        text = f"list objects of kind {kind}"
    elif action == "deletecollection":
        text = f"delete collection of{sub + ' a' if sub else ''} {kind}"
    elif action in ("post", "delete"):
        article = " an " if kind[:1].lower() in "aeiou" else " a "
        text = f"{_VERB_TEXT[action]}{sub}{article}{kind}"
    else:
        text = f"{_VERB_TEXT[action]}{sub} the specified {kind}"
    operation_id, tag = _operation_id(operation, res.group, version)
    op: Obj = {"tags": [tag], "description": text, "operationId": operation_id}
    query = [dict(PARAMETERS[name]) for name in _QUERY[action]]
    if query:
        op["parameters"] = query
    if action in ("post", "put"):
        op["requestBody"] = {**_content(sample), "required": True}
    elif action == "patch":
        op["requestBody"] = {**_content(_META_V1 + "Patch", _PATCH_TYPES), "required": True}
    elif action == "delete":
        op["requestBody"] = _content(_META_V1 + "DeleteOptions")
    returned = _STATUS if action in ("delete", "deletecollection") else sample
    responses: Obj = {"200": {"description": "OK", **_content(returned)}}
    if action == "post":
        responses["201"] = {"description": "Created", **_content(returned)}
        responses["202"] = {"description": "Accepted", **_content(returned)}
    elif action == "put":
        responses["201"] = {"description": "Created", **_content(returned)}
    elif action == "delete":
        responses["202"] = {"description": "Accepted", **_content(returned)}
    responses["401"] = {"description": "Unauthorized"}
    op["responses"] = responses
    op["x-kubernetes-action"] = action
    op["x-kubernetes-group-version-kind"] = {"group": res.group, "version": version, "kind": kind}
    return op


def _path_item(operations: dict[str, Obj], path_parameters: list[Obj]) -> Obj:
    """The operations of one path; the parameters every operation has move up to the path (as kube-openapi
    does), all sorted by name."""
    common = [p for p in operations[next(iter(operations))].get("parameters", [])
              if all(p in op.get("parameters", []) for op in operations.values())]
    item: Obj = {}
    for method, op in operations.items():
        own = [p for p in op.get("parameters", []) if p not in common]
        item[method] = {key: value for key, value in op.items() if key != "parameters"}
        if own:
            item[method]["parameters"] = own
    item["parameters"] = sorted(path_parameters + common, key=lambda p: p["name"])
    return item


def _custom_paths(res: resources.Resource, version: str) -> Obj:
    kind = res.kind
    sample = model_name(res.group, version, kind)
    listed = model_name(res.group, version, res.list_kind)
    base = f"/apis/{res.group}/{version}"
    scope = "Namespaced" if res.namespaced else ""
    root = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
    namespace = [PARAMETERS["namespace"]] if res.namespaced else []
    name = [{"name": "name", "in": "path", "description": f"name of the {kind}", "required": True,
             "schema": {"type": "string", "uniqueItems": True}}]
    pretty = [PARAMETERS["pretty"]]

    def op(action: str, sub: str, verb: str, returned: str) -> Obj:
        return _operation(res, version, action, sub, f"{verb}{scope}{kind}{sub.title()}", returned)

    paths: Obj = {}
    if res.namespaced:
        everywhere = _operation(res, version, "list", "", f"list{kind}ForAllNamespaces", listed)
        paths[f"{base}/{res.plural}"] = _path_item({"get": everywhere}, pretty)
    paths[root] = _path_item({"get": op("list", "", "list", listed), "post": op("post", "", "create", sample),
                              "delete": op("deletecollection", "", "deletecollection", _STATUS)},
                             namespace + pretty)
    paths[f"{root}/{{name}}"] = _path_item(
        {"get": op("get", "", "read", sample), "put": op("put", "", "replace", sample),
         "delete": op("delete", "", "delete", sample), "patch": op("patch", "", "patch", sample)},
        name + namespace + pretty)
    view = res.at(version)
    for sub, returned, present in (("scale", _SCALE, view.scale is not None),
                                   ("status", sample, view.status_subresource)):
        if present:
            paths[f"{root}/{{name}}/{sub}"] = _path_item(
                {"get": op("get", sub, "read", returned), "put": op("put", sub, "replace", returned),
                 "patch": op("patch", sub, "patch", returned)},
                name + namespace + pretty)
    return paths


def _builtin_paths(res: resources.Resource, version: str) -> Obj:
    """A built-in kind's PATCH operation, for kubectl's field-validation check only."""
    prefix = "/" + _gv_path(res.group, version)
    ns = "/namespaces/{namespace}" if res.namespaced else ""
    gvk = {"group": res.group, "version": version, "kind": res.kind}
    params = [PARAMETERS["dryRun"], PARAMETERS["fieldValidation"]]
    op = {"operationId": f"patch{res.kind}", "parameters": params, "x-kubernetes-action": "patch",
          "x-kubernetes-group-version-kind": gvk, "responses": {"200": {"description": "OK"}}}
    return {f"{prefix}{ns}/{res.plural}/{{name}}": {"patch": op}}


def _referenced(value: Any, into: set[str]) -> None:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            into.add(ref[len(_REF):])
        for child in value.values():
            _referenced(child, into)
    elif isinstance(value, list):
        for child in value:
            _referenced(child, into)


def group_version(kinds: list[resources.Resource], group: str, version: str) -> Obj | None:
    """The OpenAPI v3 document of one group version; None when no kind serves it."""
    paths: Obj = {}
    schemas: Obj = {}
    custom = False
    for res in sorted(kinds, key=lambda r: r.plural):
        if res.group != group or version not in res.versions:
            continue
        if res.builtin:
            paths.update(_builtin_paths(res, version))
            continue
        custom = True
        view = res.at(version)
        paths.update(_custom_paths(view, version))
        schemas[model_name(group, version, res.kind)] = _kind_schema(view, version)
        schemas[model_name(group, version, res.list_kind)] = _list_schema(view, version)
    if not paths:
        return None
    wanted: set[str] = set()
    _referenced([paths, schemas], wanted)
    while True:  # the meta types refer to one another
        known = {name for name in wanted if name in SCHEMAS}
        more: set[str] = set()
        _referenced([SCHEMAS[name] for name in known], more)
        if more <= wanted:
            break
        wanted |= more
    schemas.update({name: SCHEMAS[name] for name in wanted if name in SCHEMAS})
    info = ({"title": "Kubernetes CRD Swagger", "version": "v0.1.0"} if custom
            else {"title": "Kubernetes (kto sim)", "version": discovery.VERSION["gitVersion"]})
    return {"openapi": "3.0.0", "info": info, "paths": dict(sorted(paths.items())),
            "components": {"schemas": dict(sorted(schemas.items()))}}


class Documents:
    """Every group version's document and its ETag, built once per change of the served kinds."""

    def __init__(self) -> None:
        self._version = -1
        self._bodies: dict[str, tuple[bytes, str]] = {}
        self.last_modified = dt.datetime.now(dt.timezone.utc)

    def refresh(self, kinds: list[resources.Resource], registry_version: int) -> None:
        if registry_version == self._version:
            return
        bodies: dict[str, tuple[bytes, str]] = {}
        seen: set[tuple[str, str]] = set()
        for res in kinds:
            for version in res.versions:
                if (res.group, version) in seen:
                    continue
                seen.add((res.group, version))
                doc = group_version(kinds, res.group, version)
                if doc is not None:
                    body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
                    bodies[_gv_path(res.group, version)] = (body, hashlib.sha512(body).hexdigest().upper())
        if bodies != self._bodies:
            self.last_modified = dt.datetime.now(dt.timezone.utc)
        self._bodies, self._version = bodies, registry_version

    def root(self) -> Obj:
        return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={etag}"}
                          for path, (_, etag) in sorted(self._bodies.items())}}

    def get(self, path: str) -> tuple[bytes, str] | None:
        return self._bodies.get(path)


def _http_date(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")


def _accepts_json(accept: str) -> bool:
    for part in (accept or "*/*").split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("application/json", "application/*", "*/*", "*"):
            return True
    return False


def answer(documents: Documents, path: str, query_hash: str | None, accept: str, if_none_match: str | None,
           now: dt.datetime) -> tuple[int, dict[str, str], bytes] | None:
    """Status, headers and body of ``GET /openapi/v3/<path>`` as kube-openapi's handler3 answers it; None
    for a path no kind serves (a 404). JSON only: a client that accepts only protobuf gets 406."""
    found = documents.get(path)
    if found is None:
        return None
    body, etag = found
    headers = {"Vary": "Accept", "Etag": f'"{etag}"'}
    if not _accepts_json(accept):
        return 406, {"Vary": "Accept"}, b""
    headers["Content-Type"] = "application/json"
    if query_hash:
        if query_hash != etag:
            headers.update({"Location": f"/openapi/v3/{path}?hash={etag}", "Cache-Control": "no-cache, private"})
            return 301, headers, b""
        expires = now.replace(year=now.year + 1) if not (now.month == 2 and now.day == 29) else now + dt.timedelta(365)
        headers.update({"Cache-Control": "public, immutable",
                        "Expires": expires.astimezone(dt.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S UTC")})
    else:
        headers["Cache-Control"] = "no-cache, private"
    headers["Last-Modified"] = _http_date(documents.last_modified)
    if if_none_match is not None and etag in [tag.strip().strip('"') for tag in if_none_match.split(",")]:
        return 304, headers, b""
    return 200, headers, body
