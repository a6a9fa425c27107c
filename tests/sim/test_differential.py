"""sim/ held against the real kube-apiserver: the same HTTP requests to both, the answers compared.

Every test runs one scenario — a function of an ``Api`` (one server) and a namespace —
against a fresh sim and against the session's real control plane (``real_cluster``, a
kube-apiserver v1.37 with etcd, kube-controller-manager and kube-scheduler), each in a
namespace the test creates on both. A scenario returns a transcript: status codes,
``metav1.Status`` reason, message and details, returned objects and watch events. The
transcripts are normalised (``normalise``) and must be equal.

What the normalisation hides, because it must differ or is out of scope (docs/sim.md,
"Where sim/ differs from kube-apiserver, on purpose"):

- values of uid, resourceVersion, creationTimestamp, deletionTimestamp and condition
  times (their behaviour is compared instead: a scenario records whether a
  resourceVersion went up or stayed);
- ``metadata.managedFields`` (server-side apply ownership is compared through apply
  conflicts, not through the FieldsV1 bookkeeping);
- a Service's clusterIP / clusterIPs values (different service CIDRs);
- a Pod's service-account token volume and its mounts (``kube-api-access-*``, added by
  the ServiceAccount admission plugin) and the two NoExecute tolerations added by the
  DefaultTolerationSeconds admission plugin;
- the resourceVersion numbers inside "too old resource version: N (M)" messages.

Plain HTTP without auth on the sim side, HTTPS with the kubeconfig's bearer token and CA
on the real side: ``Api.from_kubeconfig`` reads either.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import difflib
import json
import pathlib
import re
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import yaml

from sim import cluster as sim_cluster_module
from sim import settings as sim_settings_module
from sim.apiserver import store as sim_store
from tests.fixtures import tiers

ROOT = pathlib.Path(__file__).resolve().parents[2]
POLL = 0.05
GC_TIMEOUT = 30.0
"""Seconds the garbage collector of kube-controller-manager may take (it is quick: ~1 s)."""

Obj = dict[str, Any]


# --- one server, over HTTP --------------------------------------------------------------------


@dataclasses.dataclass
class Reply:
    code: int
    body: Any


class Api:
    """One API server: ``request`` sends a request and returns the status code and the decoded body."""

    def __init__(self, name: str, server: str, token: str | None, ssl_context: ssl.SSLContext | None) -> None:
        self.name = name
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else False
        self._session: aiohttp.ClientSession | None = None
        self.kubeconfig: pathlib.Path | None = None
        self.context: str | None = None
        """Where ``from_kubeconfig`` read the server from: lets a scenario run kubectl against it too."""

    @classmethod
    def from_kubeconfig(cls, name: str, path: pathlib.Path, context: str | None = None) -> Api:
        """Server, bearer token and CA of ``context`` (or the current one) of a kubeconfig."""
        config = yaml.safe_load(path.read_text())
        context = context or config.get("current-context")
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == context)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == ctx["user"])
        ssl_context = None
        if cluster["server"].startswith("https:"):
            if cluster.get("certificate-authority-data"):
                import base64

                ssl_context = ssl.create_default_context(
                    cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
            else:
                ssl_context = ssl.create_default_context(cafile=cluster.get("certificate-authority"))
        api = cls(name, cluster["server"], user.get("token"), ssl_context)
        api.kubeconfig, api.context = path, context
        return api

    async def __aenter__(self) -> Api:
        self._session = aiohttp.ClientSession(headers=self._headers,
                                              timeout=aiohttp.ClientTimeout(total=60, sock_read=30))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
                      query: dict[str, str] | None = None, data: str | None = None) -> Reply:
        assert self._session is not None
        headers = {"Accept": "application/json"}
        payload: bytes | None = None
        if data is not None:
            payload = data.encode()
        elif body is not None:
            payload = json.dumps(body).encode()
        if payload is not None:
            headers["Content-Type"] = ctype
        async with self._session.request(method, self.server + path, data=payload, params=query or {},
                                         headers=headers, ssl=self._ssl) as response:
            text = await response.text()
            try:
                decoded = json.loads(text)
            except ValueError:
                decoded = text
            return Reply(response.status, decoded)

    async def watch(self, path: str, query: dict[str, str], *, until: Callable[[list[Obj]], bool],
                    timeout: float = 10.0) -> tuple[int, list[Obj]]:
        """Watch events until ``until(events)`` or the stream ends (or ``timeout`` seconds)."""
        assert self._session is not None
        params = {"watch": "true", "timeoutSeconds": str(int(timeout)), **query}
        events: list[Obj] = []
        deadline = time.monotonic() + timeout
        async with self._session.get(self.server + path, params=params, ssl=self._ssl,
                                     headers={"Accept": "application/json"}) as response:
            if response.status != 200:
                return response.status, [await response.json()]
            buffer = b""
            while not until(events):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    chunk = await asyncio.wait_for(response.content.readany(), remaining)
                except TimeoutError:
                    break
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                events.extend(json.loads(line) for line in lines if line.strip())
            return response.status, events

    async def wait_for(self, path: str, predicate: Callable[[Reply], bool], timeout: float = GC_TIMEOUT) -> Reply:
        """GET ``path`` until ``predicate(reply)``; the last reply."""
        deadline = time.monotonic() + timeout
        while True:
            reply = await self.request("GET", path)
            if predicate(reply) or time.monotonic() > deadline:
                return reply
            await asyncio.sleep(POLL)


# --- normalising ------------------------------------------------------------------------------

_TIME_KEYS = {"creationTimestamp", "deletionTimestamp", "lastTransitionTime", "lastUpdateTime", "lastProbeTime"}
_TOO_OLD = re.compile(r"too old resource version: \d+ \(\d+\)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def normalise(value: Any) -> Any:
    """``value`` with what must differ between two servers replaced by fixed stand-in values (see the module doc)."""
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        value = _UUID.sub(lambda m: m.group(0) if m.group(0) == _ZERO_UUID else "<uid>", value)
        return _TOO_OLD.sub("too old resource version: N (M)", value)
    if not isinstance(value, dict):
        return value
    value = dict(value)
    if value.get("kind") == "Pod" and isinstance(value.get("spec"), dict):
        value["spec"] = _pod_spec(value["spec"])
    out: Obj = {}
    for key, item in value.items():
        if key == "managedFields":
            continue
        if key == "uid" and isinstance(item, str):
            out[key] = "<uid>"
        elif key == "resourceVersion" and isinstance(item, str):
            out[key] = "<rv>"
        elif key in _TIME_KEYS and item is not None:
            out[key] = "<time>"
        elif key in ("clusterIP", "clusterIPs") and item not in ("None", ["None"]):
            out[key] = "<ip>"
        elif key == "finalizers" and isinstance(item, list):
            # A strategic-merge union orders them differently (docs/sim.md); the order means nothing.
            out[key] = sorted(item)
        elif key == "continue" and isinstance(item, str):
            out[key] = "<token>"
        else:
            out[key] = normalise(item)
    return out


def _pod_spec(spec: Obj) -> Obj:
    spec = copy.deepcopy(spec)
    token = {v["name"] for v in spec.get("volumes") or [] if v.get("name", "").startswith("kube-api-access-")}
    if "volumes" in spec:
        spec["volumes"] = [v for v in spec["volumes"] if v.get("name") not in token]
        if not spec["volumes"]:
            del spec["volumes"]
    for container in spec.get("containers") or []:
        if "volumeMounts" in container:
            container["volumeMounts"] = [m for m in container["volumeMounts"] if m.get("name") not in token]
            if not container["volumeMounts"]:
                del container["volumeMounts"]
    if "tolerations" in spec:
        spec["tolerations"] = [t for t in spec["tolerations"]
                               if not (t.get("key") in _DEFAULT_TOLERATIONS and t.get("effect") == "NoExecute"
                                       and t.get("tolerationSeconds") == 300)]
        if not spec["tolerations"]:
            del spec["tolerations"]
    return spec


def rv(obj: Any) -> int:
    return int(obj["metadata"]["resourceVersion"])


def status_of(reply: Reply, *, go_message: bool = False) -> Any:
    """What of a reply is compared: the code and the body. ``go_message``: the Status message is
    the text of a Go library error (JSON decoder, strconv, label parser), not compared."""
    body = reply.body
    if go_message and isinstance(body, dict) and body.get("kind") == "Status":
        body = dict(body, message="<Go error text>")
    return {"code": reply.code, "body": body}


GO_MESSAGE = {"wrong kind", "wrong apiVersion", "malformed JSON", "bad label selector", "bad limit"}
"""Cases whose Status message is the text of a Go library error (docs/sim.md): code and reason compared."""


# --- the two sides ----------------------------------------------------------------------------

Scenario = Callable[[Api, str], Awaitable[Any]]


def _crds() -> list[Obj]:
    found = []
    for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
        found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


@dataclasses.dataclass
class Pair:
    sim: Api
    real: Api

    async def run(self, scenario: Scenario, *, pods: bool = False) -> tuple[Any, Any]:
        """``scenario`` on both servers, each in a fresh namespace of the same name; the transcripts must match."""
        namespace = "diff-" + uuid.uuid4().hex[:10]
        sim_out, real_out = await asyncio.gather(self._one(self.sim, namespace, scenario, pods),
                                                 self._one(self.real, namespace, scenario, pods))
        sim_norm, real_norm = normalise(sim_out), normalise(real_out)
        if sim_norm != real_norm:
            diff = difflib.unified_diff(
                json.dumps(real_norm, indent=1, sort_keys=True).splitlines(),
                json.dumps(sim_norm, indent=1, sort_keys=True).splitlines(),
                "kube-apiserver", "sim", lineterm="", n=4)
            pytest.fail("sim/ and kube-apiserver differ:\n" + "\n".join(diff), pytrace=False)
        return sim_out, real_out

    @staticmethod
    async def _one(api: Api, namespace: str, scenario: Scenario, pods: bool) -> Any:
        made = await api.request("POST", "/api/v1/namespaces",
                                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        assert made.code == 201, (api.name, made)
        if pods and api.name == "real":
            # The ServiceAccount admission plugin refuses pods until the namespace's
            # default ServiceAccount exists (the serviceaccount controller makes it).
            sa = await api.wait_for(f"/api/v1/namespaces/{namespace}/serviceaccounts/default",
                                    lambda r: r.code == 200, 30)
            assert sa.code == 200, sa
        try:
            return await scenario(api, namespace)
        finally:
            await api.request("DELETE", f"/api/v1/namespaces/{namespace}")


@pytest.fixture
async def sim_side(tmp_path: pathlib.Path) -> AsyncIterator[Api]:
    settings = sim_settings_module.SimSettings(kubeconfig=tmp_path / "sim.kubeconfig", bookmark_interval=0.2,
                                               watch_window=500)
    async with sim_cluster_module.Cluster(settings) as cluster:
        for crd in _crds():
            cluster.store._create(sim_store.CRDS, crd, None)
        assert cluster.kubeconfig is not None
        async with Api.from_kubeconfig("sim", cluster.kubeconfig) as api:
            yield api


@pytest.fixture
async def pair(sim_side: Api, real_cluster: tiers.RealCluster) -> AsyncIterator[Pair]:
    async with Api.from_kubeconfig("real", real_cluster.kubeconfig, tiers.CONTEXT) as real:
        yield Pair(sim_side, real)


def cm(name: str, data: dict[str, str] | None = None, **meta: Any) -> Obj:
    body: Obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}}
    if data is not None:
        body["data"] = data
    return body


def pytorchjob(name: str, workers: int = 2) -> Obj:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.5.1"}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": template}}}}


def cms(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")


def jobs(ns: str, name: str = "") -> str:
    return f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs" + (f"/{name}" if name else "")


# --- created objects and their defaults -------------------------------------------------------

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"},
                                                       "annotations": {"sim.kto.dev/duration": "600"}},
       "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "600"]},
                               {"name": "side", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}]}}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
           "spec": {"selector": {"app": "x"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080},
                                                        {"name": "metrics", "port": 9090}]}}
HEADLESS = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "workers"},
            "spec": {"clusterIP": "None", "selector": {"app": "x"}, "ports": [{"port": 23456}]}}
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}}


@pytest.mark.parametrize(("collection", "body"), [
    pytest.param("/api/v1/namespaces/{ns}/configmaps", cm("c", {"k": "v"}, labels={"a": "b"}), id="configmap"),
    pytest.param("/api/v1/namespaces/{ns}/secrets", SECRET, id="secret"),
    pytest.param("/api/v1/namespaces/{ns}/pods", POD, id="pod"),
    pytest.param("/api/v1/namespaces/{ns}/services", SERVICE, id="service"),
    pytest.param("/api/v1/namespaces/{ns}/services", HEADLESS, id="headless service"),
    pytest.param("/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", pytorchjob("job"), id="pytorchjob"),
])
async def test_create_returns_the_defaulted_object(pair: Pair, collection: str, body: Obj) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        path = collection.format(ns=ns)
        created = await api.request("POST", path, body)
        again = await api.request("POST", path, body)
        got = await api.request("GET", f"{path}/{body['metadata']['name']}")
        same = body["kind"] == "Pod" or normalise(got.body) == normalise(created.body)
        return {"created": status_of(created), "again": status_of(again), "get equals create": same}

    await pair.run(scenario, pods=body["kind"] == "Pod")


async def test_namespace_defaults_and_generation(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        got = await api.request("GET", f"/api/v1/namespaces/{ns}")
        return status_of(got)

    await pair.run(scenario)


# --- bodies without kind / apiVersion, bad input ----------------------------------------------

@pytest.mark.parametrize(("body", "ctype"), [
    pytest.param('{"metadata":{"name":"x"},"data":{"a":"1"}}', "application/json", id="no kind, no apiVersion"),
    pytest.param('{"kind":"ConfigMap","metadata":{"name":"x"}}', "application/json", id="no apiVersion"),
    pytest.param('{"apiVersion":"v1","metadata":{"name":"x"}}', "application/json", id="no kind"),
    pytest.param("metadata:\n  name: x\ndata:\n  a: '1'\n", "application/yaml", id="yaml without kind"),
    pytest.param('{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}', "application/json", id="wrong kind"),
    pytest.param('{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}', "application/json",
                 id="wrong apiVersion"),
    pytest.param("{not json", "application/json", id="malformed JSON"),
    pytest.param('{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Not_Valid"}}', "application/json",
                 id="invalid name"),
    pytest.param('{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}', "application/json", id="no name"),
    pytest.param('{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"gen-"}}', "application/json",
                 id="generateName"),
])
async def test_post_bodies(pair: Pair, body: str, ctype: str, request: pytest.FixtureRequest) -> None:
    go = request.node.callspec.id in GO_MESSAGE

    async def scenario(api: Api, ns: str) -> Any:
        reply = await api.request("POST", cms(ns), data=body, ctype=ctype)
        if reply.code == 201 and "gen-" in reply.body["metadata"]["name"]:
            name = reply.body["metadata"]["name"]
            assert re.fullmatch(r"gen-[a-z0-9]{5}", name), name
            reply.body["metadata"]["name"] = "gen-XXXXX"
        return status_of(reply, go_message=go)

    await pair.run(scenario)


async def test_pytorchjob_without_kind(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        body = pytorchjob("j")
        del body["kind"], body["apiVersion"]
        return status_of(await api.request("POST", jobs(ns), body))

    await pair.run(scenario)


@pytest.mark.parametrize(("method", "path", "body", "ctype"), [
    pytest.param("GET", "/api/v1/namespaces/{ns}/configmaps/missing", None, "", id="missing object"),
    pytest.param("GET", "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/missing", None, "", id="missing CR"),
    pytest.param("DELETE", "/api/v1/namespaces/{ns}/configmaps/missing", None, "", id="delete missing"),
    pytest.param("PUT", "/api/v1/namespaces/{ns}/configmaps/missing", cm("missing"), "application/json",
                 id="update missing"),
    pytest.param("PATCH", "/api/v1/namespaces/{ns}/configmaps/missing", {"data": {"a": "b"}},
                 "application/merge-patch+json", id="patch missing"),
    pytest.param("POST", "/api/v1/namespaces/{ns}-nope/configmaps", cm("x"), "application/json",
                 id="missing namespace"),
    pytest.param("PUT", "/api/v1/namespaces/{ns}/configmaps/other", cm("x"), "application/json",
                 id="name mismatch"),
    pytest.param("PATCH", "/api/v1/namespaces/{ns}/configmaps/x", {}, "text/plain", id="unknown patch type"),
    pytest.param("GET", "/api/v1/namespaces/{ns}/configmaps?labelSelector=a%20in%20(b", None, "",
                 id="bad label selector"),
    pytest.param("GET", "/api/v1/namespaces/{ns}/configmaps?fieldSelector=data.a%3Db", None, "",
                 id="unsupported field selector"),
    pytest.param("GET", "/api/v1/namespaces/{ns}/configmaps?limit=abc", None, "", id="bad limit"),
])
async def test_errors(pair: Pair, method: str, path: str, body: Any, ctype: str,
                      request: pytest.FixtureRequest) -> None:
    go = request.node.callspec.id in GO_MESSAGE

    async def scenario(api: Api, ns: str) -> Any:
        url, _, query = path.format(ns=ns).partition("?")
        params = dict(p.split("=", 1) for p in query.split("&")) if query else None
        if params:
            params = {k: v.replace("%20", " ").replace("%3D", "=") for k, v in params.items()}
        reply = await api.request(method, url, body, ctype=ctype or "application/json", query=params)
        return status_of(reply, go_message=go)

    await pair.run(scenario)


# --- bodies nested too deep -------------------------------------------------------------------

def nest(levels: int, bracket: str = "{") -> str:
    """JSON text ``levels`` deep: ``{"a":{"a":…1…}}`` or ``[[…1…]]``."""
    if bracket == "{":
        return '{"a":' * levels + "1" + "}" * levels
    return "[" * levels + "1" + "]" * levels


def deep_configmap(name: str, inner: str) -> str:
    """A ConfigMap whose ``extra`` holds ``inner``, one level below the top."""
    return f'{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"extra":{inner}}}'


def deep_job(name: str, inner: str) -> str:
    """A PyTorchJob with ``inner`` in a container of its pod template (kept: templates are free-form),
    ``JOB_ENVELOPE`` levels below the top."""
    return ('{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"%s"},"spec":{"pytorchReplicaSpecs":'
            '{"Worker":{"replicas":1,"template":{"spec":{"containers":[{"name":"pytorch","image":"x","deep":%s}]}}}}}}'
            % (name, inner))


JOB_ENVELOPE = 8
"""Levels above ``deep_job``'s inner value: the top, spec, the map, Worker, template, spec, containers, a container."""

_YAML_FLOW = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\nextra: {inner}\n"
"""A YAML ConfigMap, ``extra`` on line 4 in flow style."""


def _unrecognized(kind: str, why: str, head: str) -> str:
    """kube-apiserver's words for a create or update body its decoder cannot read, with the body's first
    30 bytes (as text for a JSON object, else in hex)."""
    return f"the object provided is unrecognized (must be of type {kind}): {why} ({head} ...)"


def _bad_request(message: str) -> Obj:
    return {"code": 400, "body": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": "BadRequest", "code": 400}}


def deep_cases(levels: int) -> list[Any]:
    """(method, path, body, content type, query, the answer) of requests whose body nests ``levels`` deep:
    create, update and patch of every kind of body, of a ConfigMap and a custom resource, and their
    subresources. go-yaml names its limit (10,000; the sim's is lower): ``max depth of N`` here."""
    json_depth = "couldn't get version/kind; json parse error: invalid character '{' exceeded max depth"
    arrays = json_depth.replace("'{'", "'['")
    cm_head, job_head = '{"apiVersion":"v1","kind":"Con', '{"apiVersion":"kubeflow.org/v1'
    yaml_head = b"apiVersion: v1\nkind: ConfigMap".hex()
    deep, inner = nest(levels - 1), nest(levels - JOB_ENVELOPE)
    cases = [
        ("create", "POST", cms("{ns}"), deep_configmap("deep", deep), "application/json", None,
         _unrecognized("ConfigMap", json_depth, cm_head)),
        ("create-arrays", "POST", cms("{ns}"), deep_configmap("deep", nest(levels - 1, "[")), "application/json", None,
         _unrecognized("ConfigMap", arrays, cm_head)),
        ("create-not-an-object", "POST", cms("{ns}"), nest(levels, "["), "application/json", None,
         _unrecognized("ConfigMap", arrays, "5b" * 30)),
        ("create-custom-resource", "POST", jobs("{ns}"), deep_job("deep", inner), "application/json", None,
         _unrecognized("PyTorchJob", json_depth, job_head)),
        ("create-eviction", "POST", "/api/v1/namespaces/{ns}/pods/target/eviction",
         '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"target"},"x":%s}' % deep,
         "application/json", None, _unrecognized("Eviction", json_depth, '{"apiVersion":"policy/v1","kin')),
        ("create-yaml", "POST", cms("{ns}"), _YAML_FLOW.format(name="y", inner=deep), "application/yaml", None,
         _unrecognized("ConfigMap", "yaml: line 4: exceeded max depth of N", yaml_head)),
        ("update", "PUT", cms("{ns}", "target"), deep_configmap("target", deep), "application/json", None,
         _unrecognized("ConfigMap", json_depth, cm_head)),
        ("update-status", "PUT", jobs("{ns}", "target") + "/status", deep_job("target", inner), "application/json",
         None, _unrecognized("PyTorchJob", json_depth, job_head)),
        ("patch-merge", "PATCH", cms("{ns}", "target"), '{"extra":%s}' % deep, "application/merge-patch+json", None,
         "invalid JSON patch"),
        ("patch-strategic", "PATCH", cms("{ns}", "target"), '{"extra":%s}' % deep,
         "application/strategic-merge-patch+json", None, "invalid JSON patch"),
        ("patch-json", "PATCH", cms("{ns}", "target"), '[{"op":"add","path":"/data","value":%s}]' % nest(levels - 2),
         "application/json-patch+json", None, "invalid JSON patch"),
        ("patch-custom-resource", "PATCH", jobs("{ns}", "target"), '{"spec":%s}' % deep,
         "application/merge-patch+json", None, "invalid JSON patch"),
        ("apply-json", "PATCH", cms("{ns}", "target"), deep_configmap("target", deep), "application/apply-patch+yaml",
         {"fieldManager": "test"}, "error decoding patch: error converting YAML to JSON: yaml: exceeded max depth of N"),
        ("apply-yaml", "PATCH", cms("{ns}", "target"), _YAML_FLOW.format(name="target", inner=deep),
         "application/apply-patch+yaml", {"fieldManager": "test"},
         "error encoding patch: yaml: line 4: exceeded max depth of N"),
        ("delete-options", "DELETE", cms("{ns}", "target"),
         '{"kind":"DeleteOptions","apiVersion":"v1","x":%s}' % deep, "application/json", None, json_depth),
    ]
    return [pytest.param(method, path, body, ctype, query, _bad_request(message), id=f"{name}-{levels}")
            for name, method, path, body, ctype, query, message in cases]


async def deep_scenario(api: Api, ns: str, method: str, path: str, body: str, ctype: str,
                        query: dict[str, str] | None) -> Any:
    """Make a ConfigMap and a PyTorchJob named target, send the request; its answer (``max depth of N``),
    and the two targets must be as they were."""
    made = [await api.request("POST", cms(ns), cm("target", {"a": "1"})),
            await api.request("POST", jobs(ns), data=deep_job("target", "1"))]
    assert [reply.code for reply in made] == [201, 201], (api.name, made)
    reply = await api.request(method, path.format(ns=ns), data=body, ctype=ctype, query=query)
    after = [await api.request("GET", cms(ns, "target")), await api.request("GET", jobs(ns, "target"))]
    assert [r.code for r in after] == [200, 200] and after[0].body["data"] == {"a": "1"}, (api.name, after)
    answer = status_of(reply)
    if isinstance(reply.body, dict) and isinstance(reply.body.get("message"), str):
        answer["body"] = dict(reply.body, message=re.sub(r"max depth of \d+", "max depth of N", reply.body["message"]))
    return answer


@pytest.mark.parametrize(("method", "path", "body", "ctype", "query", "expected"), deep_cases(10_002))
async def test_a_body_nested_past_kube_apiservers_limit_is_refused_alike(
    pair: Pair, method: str, path: str, body: str, ctype: str, query: dict[str, str] | None, expected: Any,
) -> None:
    """10,002 levels: past kube-apiserver's limit (10,000 levels of JSON, and of YAML's flow collections
    below the block mapping at the top) and the sim's (``sim.apiserver.decoding.MAX_DEPTH``)."""
    sim_out, _ = await pair.run(lambda api, ns: deep_scenario(api, ns, method, path, body, ctype, query))
    assert sim_out == expected


# --- resourceVersion, generation, optimistic concurrency --------------------------------------

async def test_resource_version_and_generation(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        first = (await api.request("POST", cms(ns), cm("c", {"a": "1"}))).body
        same = await api.request("PUT", cms(ns, "c"), first)
        out["no-op update"] = {"code": same.code, "rv unchanged": rv(same.body) == rv(first)}
        noop_patch = await api.request("PATCH", cms(ns, "c"), {"data": {"a": "1"}}, ctype="application/merge-patch+json")
        out["no-op patch"] = {"code": noop_patch.code, "rv unchanged": rv(noop_patch.body) == rv(first)}
        changed = await api.request("PUT", cms(ns, "c"), dict(first, data={"a": "2"}))
        out["update"] = {"code": changed.code, "rv increased": rv(changed.body) > rv(first), "body": changed.body}
        stale = await api.request("PUT", cms(ns, "c"), dict(first, data={"a": "3"}))
        out["stale update"] = status_of(stale)
        stale_patch = await api.request(
            "PATCH", cms(ns, "c"), {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]},
                                    "data": {"a": "4"}}, ctype="application/merge-patch+json")
        out["stale patch"] = status_of(stale_patch)
        unconditional = await api.request("PUT", cms(ns, "c"), cm("c", {"a": "5"}))
        out["update without resourceVersion"] = status_of(unconditional)
        listed = await api.request("GET", cms(ns))
        out["list rv >= item rv"] = int(listed.body["metadata"]["resourceVersion"]) >= rv(unconditional.body)

        job = (await api.request("POST", jobs(ns), pytorchjob("j"))).body
        labelled = (await api.request("PATCH", jobs(ns, "j"), {"metadata": {"labels": {"x": "y"}}},
                                      ctype="application/merge-patch+json")).body
        respec = (await api.request("PATCH", jobs(ns, "j"),
                                    {"spec": {"runPolicy": {"suspend": True}}},
                                    ctype="application/merge-patch+json")).body
        out["generation"] = [o["metadata"].get("generation") for o in (job, labelled, respec)]
        return out

    await pair.run(scenario)


# --- patches ----------------------------------------------------------------------------------

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.mark.parametrize(("target", "patch", "ctype"), [
    pytest.param("cm", {"data": {"b": "2", "a": None}, "metadata": {"labels": {"l": "1"}}}, MERGE, id="merge"),
    pytest.param("cm", [{"op": "add", "path": "/data/b", "value": "2"}, {"op": "remove", "path": "/data/a"}],
                 JSON_PATCH, id="json patch"),
    pytest.param("cm", [{"op": "test", "path": "/data/a", "value": "nope"}], JSON_PATCH, id="json patch test fails"),
    pytest.param("cm", [{"op": "remove", "path": "/data/zzz"}], JSON_PATCH, id="json patch remove missing"),
    pytest.param("cm", [{"op": "replace", "path": "/data/zzz", "value": "1"}], JSON_PATCH,
                 id="json patch replace missing"),
    pytest.param("cm", {"data": {"c": "3"}}, STRATEGIC, id="strategic on configmap"),
    pytest.param("cm", [1, 2], MERGE, id="merge patch not an object"),
    pytest.param("pod", {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}, STRATEGIC,
                 id="strategic merges containers by name"),
    pytest.param("pod", {"metadata": {"finalizers": ["x.io/b"]}}, STRATEGIC, id="strategic finalizers union"),
    pytest.param("pod", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x.io/a"]}}, STRATEGIC,
                 id="strategic delete from primitive list"),
    pytest.param("pod", {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}, STRATEGIC,
                 id="strategic $patch delete"),
    pytest.param("pod", {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}, MERGE,
                 id="merge replaces containers"),
    pytest.param("job", {"spec": {"runPolicy": {"suspend": True}}}, STRATEGIC, id="strategic on a custom resource"),
    pytest.param("job", {"spec": {"runPolicy": {"suspend": True}}}, MERGE, id="merge on a custom resource"),
    pytest.param("job", [{"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 4}],
                 JSON_PATCH, id="json patch on a custom resource"),
])
async def test_patch(pair: Pair, target: str, patch: Any, ctype: str) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        if target == "cm":
            path = cms(ns, "c")
            await api.request("POST", cms(ns), cm("c", {"a": "1"}))
        elif target == "job":
            path = jobs(ns, "j")
            await api.request("POST", jobs(ns), pytorchjob("j"))
        else:
            path = f"/api/v1/namespaces/{ns}/pods/p"
            pod = copy.deepcopy(POD)
            pod["metadata"]["finalizers"] = ["x.io/a"]
            # Not scheduled (no node fits), so the pod's status stays put while we compare.
            pod["spec"]["nodeSelector"] = {"kto.dev/nowhere": "true"}
            made = await api.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
            assert made.code == 201, made
        reply = await api.request("PATCH", path, patch, ctype=ctype)
        if target == "pod":
            if reply.code == 200:
                reply.body.pop("status", None)
            await api.request("PATCH", path, {"metadata": {"finalizers": None}}, ctype=MERGE)
        return status_of(reply)

    await pair.run(scenario, pods=target == "pod")


# --- server-side apply ------------------------------------------------------------------------

APPLY = "application/apply-patch+yaml"


async def test_server_side_apply(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}

        async def apply(body: Obj, manager: str | None, **query: str) -> Reply:
            params = dict(query)
            if manager:
                params["fieldManager"] = manager
            return await api.request("PATCH", cms(ns, "c"), data=yaml.safe_dump(body), ctype=APPLY, query=params)

        out["no field manager"] = status_of(await apply(cm("c", {"a": "1"}), None))
        out["create"] = status_of(await apply(cm("c", {"a": "1", "b": "1"}), "alice"))
        out["same again"] = status_of(await apply(cm("c", {"a": "1", "b": "1"}), "alice"))
        out["other manager, same value"] = status_of(await apply(cm("c", {"a": "1"}), "bob"))
        out["other manager, conflict"] = status_of(await apply(cm("c", {"a": "2", "c": "1"}), "bob"))
        out["forced"] = status_of(await apply(cm("c", {"a": "2", "c": "1"}), "bob", force="true"))
        out["alice drops b"] = status_of(await apply(cm("c", {"a": "1"}), "alice"))
        out["alice applies without a"] = status_of(await apply(cm("c", {"d": "1"}), "alice"))
        out["update by a merge patch"] = status_of(await api.request(
            "PATCH", cms(ns, "c"), {"data": {"d": "2"}}, ctype=MERGE, query={"fieldManager": "carol"}))
        out["alice conflicts with carol"] = status_of(await apply(cm("c", {"d": "3"}), "alice"))
        out["no kind"] = status_of(await api.request("PATCH", cms(ns, "c"), data="metadata:\n  name: c\n",
                                                     ctype=APPLY, query={"fieldManager": "alice"}))
        job = pytorchjob("j")
        out["apply a custom resource"] = status_of(await api.request(
            "PATCH", jobs(ns, "j"), data=json.dumps(job), ctype=APPLY, query={"fieldManager": "alice"}))
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 5
        out["custom resource conflict"] = status_of(await api.request(
            "PATCH", jobs(ns, "j"), data=json.dumps(job), ctype=APPLY, query={"fieldManager": "bob"}))
        return out

    await pair.run(scenario)


# --- status and scale subresources of a custom resource ---------------------------------------

async def test_status_and_scale_subresources(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        body = pytorchjob("j")
        body["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
        created = await api.request("POST", jobs(ns), body)
        out["create drops status"] = status_of(created)
        status = {"replicaStatuses": {"Worker": {"active": 2, "selector": "app=x"}},
                  "conditions": [{"type": "Running", "status": "True", "reason": "R", "message": "m"}]}
        put = await api.request("PUT", jobs(ns, "j") + "/status",
                                dict(created.body, status=status, spec={"pytorchReplicaSpecs": {}}))
        out["put status keeps spec"] = status_of(put)
        main = await api.request("PATCH", jobs(ns, "j"), {"status": {"conditions": []}, "metadata": {"labels": {"a": "b"}}},
                                 ctype=MERGE)
        out["main patch keeps status"] = status_of(main)
        out["status patch"] = status_of(await api.request(
            "PATCH", jobs(ns, "j") + "/status", {"status": {"replicaStatuses": {"Worker": {"active": 1}}}}, ctype=MERGE))
        out["null of a non-nullable field dropped"] = status_of(await api.request(
            "PUT", jobs(ns, "j") + "/status", dict((await api.request("GET", jobs(ns, "j"))).body, status={
                "replicaStatuses": {"Worker": {"active": None, "succeeded": 1}}})))
        bad = await api.request("PATCH", jobs(ns, "j") + "/status",
                                {"status": {"conditions": [{"type": "X", "status": "Maybe"}]}}, ctype=MERGE)
        out["status validated"] = status_of(bad)
        scale = await api.request("GET", jobs(ns, "j") + "/scale")
        out["get scale"] = status_of(scale)
        out["patch scale"] = status_of(await api.request(
            "PATCH", jobs(ns, "j") + "/scale", {"spec": {"replicas": 4}}, ctype=MERGE))
        out["after scale"] = (await api.request("GET", jobs(ns, "j"))).body["spec"]
        stale = dict(scale.body, spec={"replicas": 6})
        out["put stale scale"] = status_of(await api.request("PUT", jobs(ns, "j") + "/scale", stale))
        fresh = (await api.request("GET", jobs(ns, "j") + "/scale")).body
        out["put scale"] = status_of(await api.request("PUT", jobs(ns, "j") + "/scale", dict(fresh, spec={"replicas": 3})))
        out["negative scale"] = status_of(await api.request(
            "PATCH", jobs(ns, "j") + "/scale", {"spec": {"replicas": -1}}, ctype=MERGE))
        out["configmap has no status"] = status_of(await api.request("GET", cms(ns, "x") + "/status"))
        return out

    await pair.run(scenario)


# --- finalizers, deletion, garbage collection -------------------------------------------------

async def test_finalizers_keep_a_deleted_object(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        await api.request("POST", cms(ns), cm("c", {"a": "1"}, finalizers=["kto.dev/hold"]))
        deleted = await api.request("DELETE", cms(ns, "c"))
        out["delete"] = status_of(deleted)
        out["still there"] = status_of(await api.request("GET", cms(ns, "c")))
        out["delete again"] = status_of(await api.request("DELETE", cms(ns, "c")))
        out["update while deleting"] = status_of(await api.request(
            "PATCH", cms(ns, "c"), {"data": {"a": "2"}}, ctype=MERGE))
        out["add a finalizer while deleting"] = status_of(await api.request(
            "PATCH", cms(ns, "c"), {"metadata": {"finalizers": ["kto.dev/hold", "kto.dev/new"]}}, ctype=MERGE))
        out["remove finalizers"] = status_of(await api.request(
            "PATCH", cms(ns, "c"), {"metadata": {"finalizers": None}}, ctype=MERGE))
        out["gone"] = status_of(await api.request("GET", cms(ns, "c")))
        await api.request("POST", cms(ns), cm("plain"))
        out["delete without finalizers"] = status_of(await api.request("DELETE", cms(ns, "plain")))
        await api.request("POST", cms(ns), cm("pre"))
        out["precondition uid"] = status_of(await api.request(
            "DELETE", cms(ns, "pre"), {"apiVersion": "v1", "kind": "DeleteOptions",
                                       "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}))
        return out

    await pair.run(scenario)


def _owned(name: str, owner: Obj, block: bool = False) -> Obj:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"]}
    if block:
        ref["blockOwnerDeletion"] = True
    return cm(name, {"x": "1"}, ownerReferences=[ref])


@pytest.mark.parametrize("policy", ["Background", "Foreground", "Orphan", None])
async def test_deletion_propagation(pair: Pair, policy: str | None) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        owner = (await api.request("POST", cms(ns), cm("owner"))).body
        child = (await api.request("POST", cms(ns), _owned("child", owner, block=True))).body
        await api.request("POST", cms(ns), _owned("grandchild", child, block=True))
        options = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if policy:
            options["propagationPolicy"] = policy
        deleted = await api.request("DELETE", cms(ns, "owner"), options)
        # Orphan: kube-apiserver answers with the owner held by an "orphan" finalizer its garbage
        # collector removes; the sim orphans at once (docs/sim.md). The end state is compared.
        out["delete"] = deleted.code if policy == "Orphan" else status_of(deleted)
        if policy == "Orphan":
            orphaned = await api.wait_for(cms(ns, "child"), lambda r: "ownerReferences" not in r.body["metadata"])
            out["child orphaned"] = status_of(orphaned)
            gone = await api.wait_for(cms(ns, "owner"), lambda r: r.code == 404)
            out["owner"] = gone.code
        else:
            for name in ("grandchild", "child", "owner"):
                gone = await api.wait_for(cms(ns, name), lambda r: r.code == 404)
                out[name] = gone.code
        return out

    await pair.run(scenario)


async def test_dangling_owner_reference_is_collected(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        first = (await api.request("POST", cms(ns), cm("first"))).body
        second = (await api.request("POST", cms(ns), cm("second"))).body
        both = _owned("child", first)
        both["metadata"]["ownerReferences"].append(_owned("x", second)["metadata"]["ownerReferences"][0])
        await api.request("POST", cms(ns), both)
        await api.request("DELETE", cms(ns, "first"))
        kept = await api.wait_for(cms(ns, "child"), lambda r: len(r.body["metadata"]["ownerReferences"]) == 1)
        await api.request("DELETE", cms(ns, "second"))
        gone = await api.wait_for(cms(ns, "child"), lambda r: r.code == 404)
        return {"kept": [r["name"] for r in kept.body["metadata"]["ownerReferences"]], "gone": gone.code}

    await pair.run(scenario)


# --- list and watch ---------------------------------------------------------------------------

@pytest.mark.parametrize(("label_selector", "field_selector"), [
    pytest.param("app=a", None, id="equals"),
    pytest.param("app==a", None, id="double equals"),
    pytest.param("app!=a", None, id="not equals"),
    pytest.param("app in (a,b)", None, id="in"),
    pytest.param("app notin (a)", None, id="notin"),
    pytest.param("app", None, id="exists"),
    pytest.param("!app", None, id="does not exist"),
    pytest.param("app=a,tier=web", None, id="and"),
    pytest.param(None, "metadata.name=one", id="field name"),
    pytest.param(None, "metadata.name!=one", id="field name not"),
    pytest.param("app", "metadata.name!=two", id="both"),
])
async def test_list_selectors(pair: Pair, label_selector: str | None, field_selector: str | None) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        for name, labels in (("one", {"app": "a", "tier": "web"}), ("two", {"app": "b"}), ("three", {})):
            await api.request("POST", cms(ns), cm(name, labels=labels))
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        listed = await api.request("GET", cms(ns), query=query)
        return {"code": listed.code, "kind": listed.body.get("kind"),
                "names": sorted(i["metadata"]["name"] for i in ours(listed.body.get("items", [])))}

    await pair.run(scenario)


async def test_list_pages(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        # Secrets: kube-controller-manager puts a ConfigMap of its own in every namespace.
        path = f"/api/v1/namespaces/{ns}/secrets"
        for n in range(5):
            await api.request("POST", path, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{n}"}})
        first = await api.request("GET", path, query={"limit": "2"})
        second = await api.request("GET", path, query={"limit": "2", "continue": first.body["metadata"]["continue"]})
        return {"first": [i["metadata"]["name"] for i in first.body["items"]], "meta": first.body["metadata"],
                "second": [i["metadata"]["name"] for i in second.body["items"]]}

    await pair.run(scenario)


CONTROLLER_MADE = {"kube-root-ca.crt"}
"""Made in every namespace by kube-controller-manager (root-ca-cert-publisher); the sim has no such controller."""


def ours(items: Any) -> list[Obj]:
    return [i for i in items if (i.get("object", i).get("metadata") or {}).get("name") not in CONTROLLER_MADE]


def _events(events: Any) -> list[Any]:
    return [(e["type"], e["object"].get("metadata", {}).get("name"), (e["object"].get("data") or {}).get("v"))
            for e in ours(events)]


async def test_watch_resumes_from_a_resource_version(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        a = (await api.request("POST", cms(ns), cm("a", {"v": "1"}))).body
        await api.request("PATCH", cms(ns, "a"), {"data": {"v": "2"}}, ctype=MERGE)
        await api.request("POST", cms(ns), cm("b", {"v": "1"}))
        await api.request("DELETE", cms(ns, "a"))
        code, events = await api.watch(cms(ns), {"resourceVersion": a["metadata"]["resourceVersion"]},
                                       until=lambda e: len(ours(e)) >= 3)
        return {"code": code, "events": _events(events), "raw": ours(events)}

    await pair.run(scenario)


async def test_watch_from_zero_lists_first(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", cms(ns), cm("a", {"v": "1"}))
        await api.request("POST", cms(ns), cm("b", {"v": "1"}))
        code, events = await api.watch(cms(ns), {"resourceVersion": "0"}, until=lambda e: len(ours(e)) >= 2)
        return {"code": code, "events": sorted(_events(events))}

    await pair.run(scenario)


async def test_watch_initial_events_end_with_a_bookmark(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", cms(ns), cm("a", {"v": "1"}))
        await api.request("POST", cms(ns), cm("b", {"v": "1"}))
        code, events = await api.watch(
            cms(ns), {"sendInitialEvents": "true", "allowWatchBookmarks": "true", "resourceVersionMatch": "NotOlderThan"},
            until=lambda e: any(x["type"] == "BOOKMARK" for x in e))
        bookmark = next(e for e in events if e["type"] == "BOOKMARK")["object"]
        return {"code": code, "events": sorted(_events(e for e in events if e["type"] != "BOOKMARK")),
                "bookmark": bookmark}

    await pair.run(scenario)


@pytest.mark.parametrize("query", [
    pytest.param({"sendInitialEvents": "true"}, id="sendInitialEvents alone"),
    pytest.param({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, id="without bookmarks"),
    pytest.param({"resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true"},
                 id="resourceVersionMatch without sendInitialEvents"),
])
async def test_watch_bad_parameters(pair: Pair, query: dict[str, str]) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        code, events = await api.watch(cms(ns), query, until=lambda e: len(ours(e)) >= 1, timeout=2)
        return {"code": code, "events": ours(events)}

    await pair.run(scenario)


async def test_watch_label_selector_transitions(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        start = (await api.request("GET", cms(ns))).body["metadata"]["resourceVersion"]
        await api.request("POST", cms(ns), cm("a", {"v": "1"}))
        await api.request("PATCH", cms(ns, "a"), {"metadata": {"labels": {"app": "x"}}, "data": {"v": "2"}}, ctype=MERGE)
        await api.request("PATCH", cms(ns, "a"), {"data": {"v": "3"}}, ctype=MERGE)
        await api.request("PATCH", cms(ns, "a"), {"metadata": {"labels": None}, "data": {"v": "4"}}, ctype=MERGE)
        await api.request("PATCH", cms(ns, "a"), {"data": {"v": "5"}}, ctype=MERGE)
        await api.request("POST", cms(ns), cm("b", {"v": "1"}, labels={"app": "x"}))
        code, events = await api.watch(cms(ns), {"resourceVersion": start, "labelSelector": "app=x"},
                                       until=lambda e: len(ours(e)) >= 4)
        fields = await api.watch(cms(ns), {"resourceVersion": start, "fieldSelector": "metadata.name=b"},
                                 until=lambda e: len(e) >= 1)
        return {"code": code, "events": _events(events), "by name": _events(fields[1])}

    await pair.run(scenario)


# --- CRD structural schemas: validation, defaulting, pruning ----------------------------------

def _widget_crd(group: str) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["color"],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                                "color": {"type": "string", "enum": ["red", "blue"]},
                                "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                                "limits": {"type": "object", "additionalProperties": {"type": "integer"}},
                                "nested": {"type": "object", "default": {},
                                           "properties": {"enabled": {"type": "boolean", "default": True}}},
                                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "ratio": {"type": "number"},
                            },
                        },
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                    },
                }},
            }],
        },
    }


WIDGET_CASES = [
    pytest.param({"color": "red"}, id="defaults"),
    pytest.param({"color": "red", "size": 0}, id="below minimum"),
    pytest.param({"color": "red", "size": 11}, id="above maximum"),
    pytest.param({"color": "green"}, id="not in enum"),
    pytest.param({"size": 2}, id="required missing"),
    pytest.param({"color": "red", "size": "big"}, id="wrong type"),
    pytest.param({"color": "red", "size": 2.5}, id="float for integer"),
    pytest.param({"color": "red", "ratio": 1}, id="integer for number"),
    pytest.param({"color": "red", "name": "abcdefg"}, id="too long"),
    pytest.param({"color": "red", "name": "ABC"}, id="pattern"),
    pytest.param({"color": "red", "tags": ["a", "b", "c"]}, id="too many items"),
    pytest.param({"color": "red", "tags": ["a", 1]}, id="wrong item type"),
    pytest.param({"color": "red", "limits": {"cpu": 2, "mem": "x"}}, id="additionalProperties"),
    pytest.param({"color": "red", "unknown": 1, "nested": {"x": 1}, "free": {"any": {"thing": [1]}}},
                 id="pruned and preserved"),
    pytest.param({"color": "red", "size": 0, "name": "ABCDEFG"}, id="several errors"),
]


@pytest.fixture(scope="module")
def widget_group() -> str:
    return f"w{uuid.uuid4().hex[:8]}.kto.dev"


async def _establish(api: Api, crd: Obj) -> Reply:
    made = await api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert made.code in (201, 409), made
    name = crd["metadata"]["name"]

    def established(reply: Reply) -> bool:
        conditions = (reply.body.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    reply = await api.wait_for(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", established, 30)
    assert established(reply), reply
    group, version, plural = crd["spec"]["group"], crd["spec"]["versions"][0]["name"], crd["spec"]["names"]["plural"]
    # Established is set before the new kind is served everywhere: wait until it lists.
    await api.wait_for(f"/apis/{group}/{version}/{plural}", lambda r: r.code == 200, 30)
    return made


@pytest.mark.parametrize("spec", WIDGET_CASES)
async def test_crd_schema_validation_and_defaulting(pair: Pair, widget_group: str, spec: Obj) -> None:
    crd = _widget_crd(widget_group)

    async def scenario(api: Api, ns: str) -> Any:
        await _establish(api, crd)
        path = f"/apis/{widget_group}/v1/namespaces/{ns}/widgets"
        body = {"apiVersion": f"{widget_group}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec,
                "status": {"ready": True}}
        created = await api.request("POST", path, body)
        out = {"create": status_of(created)}
        causes = ((created.body.get("details") or {}).get("causes") or []) if created.code == 422 else []
        if len(causes) > 1:
            # kube-apiserver reports several schema errors in Go map order, which varies: sort them.
            causes.sort(key=lambda c: (c["field"], c["message"]))
            head = created.body["message"].partition(": [")[0]
            created.body["message"] = head + ": [" + ", ".join(f"{c['field']}: {c['message']}" for c in causes) + "]"
        if created.code == 201:
            out["update"] = status_of(await api.request("PATCH", f"{path}/w", {"spec": {"size": 20}}, ctype=MERGE))
            out["status"] = status_of(await api.request(
                "PATCH", f"{path}/w/status", {"status": {"ready": "yes"}}, ctype=MERGE))
            out["remove a defaulted field"] = status_of(await api.request(
                "PATCH", f"{path}/w", {"spec": {"size": None}}, ctype=MERGE))
        return out

    await pair.run(scenario)


async def test_crd_created_and_deleted(pair: Pair) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.kto.dev"
    crd = _widget_crd(group)

    async def scenario(api: Api, ns: str) -> Any:
        made = await _establish(api, crd)
        name = crd["metadata"]["name"]
        got = await api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        status = got.body["status"]
        conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
        deleted = await api.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return {"code": made.code, "acceptedNames": status["acceptedNames"], "storedVersions": status["storedVersions"],
                "conditions": {k: v for k, v in conditions.items() if k in ("Established", "NamesAccepted")},
                "generation": got.body["metadata"].get("generation"), "delete": deleted.code}

    await pair.run(scenario)
