"""The HTTP API as clients see it: discovery, kubernetes-asyncio, propagation, tables, bad input, admin."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from sim import cluster as sim_cluster

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                     "statusReplicasPath": ".status.replicas"}},
            "additionalPrinterColumns": [
                {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        }],
    },
}


async def call(cluster: sim_cluster.Cluster, method: str, path: str, body: Any = None, *,
               data: bytes | str | None = None, headers: dict[str, str] | None = None,
               raw: bool = False) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession() as session:
        kwargs: dict[str, Any] = {"headers": headers or {}}
        if body is not None:
            kwargs["json"] = body
        if data is not None:
            kwargs["data"] = data
        async with session.request(method, cluster.url + path, **kwargs) as response:
            text = await response.text()
            if raw:
                return response.status, text, response.headers
            try:
                payload = json.loads(text)
            except ValueError:
                payload = text
            return response.status, payload, response.headers


def configmap(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}}


async def test_discovery_documents(sim_cluster: sim_cluster.Cluster) -> None:
    code, version, _ = await call(sim_cluster, "GET", "/version")
    assert code == 200 and version["major"] == "1"
    _, api, _ = await call(sim_cluster, "GET", "/api")
    assert api["kind"] == "APIVersions" and api["versions"] == ["v1"]
    _, core, _ = await call(sim_cluster, "GET", "/api/v1")
    names = {r["name"] for r in core["resources"]}
    assert {"pods", "pods/status", "pods/log", "pods/eviction", "services", "events", "namespaces"} <= names
    _, groups, _ = await call(sim_cluster, "GET", "/apis")
    assert {"coordination.k8s.io", "batch", "scheduling.volcano.sh", "scheduling.x-k8s.io", "events.k8s.io",
            "rbac.authorization.k8s.io", "autoscaling", "apiextensions.k8s.io"} <= {g["name"] for g in groups["groups"]}
    code, _, _ = await call(sim_cluster, "GET", "/apis/example.com")
    assert code == 404


async def test_a_crd_registers_and_unregisters_its_kind(sim_cluster: sim_cluster.Cluster) -> None:
    code, crd, _ = await call(sim_cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert code == 201
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]} == {"Established": "True", "NamesAccepted": "True"}
    _, group, _ = await call(sim_cluster, "GET", "/apis/example.com/v1")
    assert {r["name"] for r in group["resources"]} == {"widgets", "widgets/status", "widgets/scale"}
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"replicas": 2}}
    code, _, _ = await call(sim_cluster, "POST", "/apis/example.com/v1/namespaces/default/widgets", widget)
    assert code == 201
    _, scale, _ = await call(sim_cluster, "GET", "/apis/example.com/v1/namespaces/default/widgets/w/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    code, _, _ = await call(sim_cluster, "PATCH", "/apis/example.com/v1/namespaces/default/widgets/w/scale",
                            data=json.dumps({"spec": {"replicas": 5}}),
                            headers={"Content-Type": "application/merge-patch+json"})
    assert code == 200 and sim_cluster.store.peek("widgets.example.com", "default", "w")["spec"]["replicas"] == 5
    code, table, _ = await call(sim_cluster, "GET", "/apis/example.com/v1/namespaces/default/widgets",
                                headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "State", "Replicas", "Age"]
    assert table["rows"][0]["cells"][:3] == ["w", None, 5]
    code, _, _ = await call(sim_cluster, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
    assert code == 200
    code, status, _ = await call(sim_cluster, "GET", "/apis/example.com/v1/namespaces/default/widgets")
    assert code == 404 and status["kind"] == "Status" and status["reason"] == "NotFound"


async def test_custom_resources_refuse_strategic_merge_patch(sim_cluster: sim_cluster.Cluster) -> None:
    await call(sim_cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}
    await call(sim_cluster, "POST", "/apis/example.com/v1/namespaces/default/widgets", widget)
    code, status, _ = await call(sim_cluster, "PATCH", "/apis/example.com/v1/namespaces/default/widgets/w",
                                 data="{}", headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert code == 415 and status["reason"] == "UnsupportedMediaType"


async def test_kubernetes_asyncio_create_conflict_and_already_exists(sim_api: Any) -> None:
    v1 = client.CoreV1Api(sim_api)
    created = await v1.create_namespaced_config_map("default", configmap("c"))
    await v1.replace_namespaced_config_map("c", "default", {**configmap("c"), "data": {"a": "1"},
                                                            "metadata": {"name": "c", "resourceVersion": created.metadata.resource_version}})
    with pytest.raises(ApiException) as stale:
        await v1.replace_namespaced_config_map("c", "default", {**configmap("c"), "metadata": {
            "name": "c", "resourceVersion": created.metadata.resource_version}})
    assert stale.value.status == 409 and json.loads(stale.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as exists:
        await v1.create_namespaced_config_map("default", configmap("c"))
    assert exists.value.status == 409 and json.loads(exists.value.body)["reason"] == "AlreadyExists"


async def test_kubernetes_asyncio_watch_resumes_and_gets_gone(sim_cluster: sim_cluster.Cluster, sim_api: Any) -> None:
    v1 = client.CoreV1Api(sim_api)
    first = await v1.create_namespaced_config_map("default", configmap("a"))
    await v1.create_namespaced_config_map("default", configmap("b"))
    seen = []
    async with watch.Watch().stream(v1.list_namespaced_config_map, "default",
                                    resource_version=first.metadata.resource_version, timeout_seconds=1) as stream:
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("ADDED", "b")]
    for i in range(sim_cluster.settings.watch_window + 5):
        sim_cluster.store._create("secrets", {"metadata": {"name": f"s{i}"}}, "default")
    with pytest.raises(ApiException) as gone:
        async with watch.Watch().stream(v1.list_namespaced_config_map, "default",
                                        resource_version=first.metadata.resource_version, timeout_seconds=1) as stream:
            async for _ in stream:
                pass
    assert gone.value.status == 410


@pytest.fixture
def sim_settings(tmp_path: Any) -> Any:
    from sim import settings

    return settings.SimSettings(kubeconfig=tmp_path / "kubeconfig", watch_window=200, bookmark_interval=0.2)


async def test_watch_stream_sends_bookmarks_and_ends_at_timeout(sim_cluster: sim_cluster.Cluster) -> None:
    rv = sim_cluster.store.resource_version
    code, text, _ = await call(sim_cluster, "GET", f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"
                                                   "&allowWatchBookmarks=true&timeoutSeconds=1", raw=True)
    events = [json.loads(line) for line in text.splitlines()]
    assert code == 200 and events and {e["type"] for e in events} == {"BOOKMARK"}


async def test_watch_path_with_a_too_old_version_sends_an_error_event(sim_cluster: sim_cluster.Cluster) -> None:
    for i in range(250):
        sim_cluster.store._create("secrets", {"metadata": {"name": f"s{i}"}}, "default")
    code, text, _ = await call(sim_cluster, "GET", "/api/v1/watch/namespaces/default/pods?resourceVersion=1", raw=True)
    event = json.loads(text.splitlines()[0])
    assert code == 200 and event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


async def test_an_expired_continue_is_http_gone(sim_cluster: sim_cluster.Cluster) -> None:
    for i in range(3):
        sim_cluster.store._create("configmaps", {"metadata": {"name": f"c{i}"}}, "default")
    _, page, _ = await call(sim_cluster, "GET", "/api/v1/namespaces/default/configmaps?limit=1")
    token = page["metadata"]["continue"]
    _, page2, _ = await call(sim_cluster, "GET", f"/api/v1/namespaces/default/configmaps?limit=1&continue={token}")
    assert page2["items"][0]["metadata"]["name"] == "c1"
    for i in range(250):
        sim_cluster.store._create("secrets", {"metadata": {"name": f"s{i}"}}, "default")
    code, status, _ = await call(sim_cluster, "GET", f"/api/v1/namespaces/default/configmaps?limit=1&continue={token}")
    assert code == 410 and status["reason"] == "Expired"


def owned(name: str, owner: dict[str, Any], block: bool = False) -> dict[str, Any]:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [ref]}}


async def eventually(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("propagation", ["Background", "Foreground", "Orphan"])
async def test_delete_propagation(sim_cluster: sim_cluster.Cluster, propagation: str) -> None:
    store = sim_cluster.store
    owner = await store.create("configmaps", configmap("owner"), "default")
    await store.create("configmaps", owned("child", owner, block=True), "default")
    grandchild_owner = await store.get("configmaps", "default", "child")
    await store.create("configmaps", owned("grandchild", grandchild_owner, block=True), "default")
    code, body, _ = await call(sim_cluster, "DELETE", "/api/v1/namespaces/default/configmaps/owner",
                               {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation})
    if propagation == "Orphan":
        assert code == 200 and store.peek("configmaps", "default", "owner") is None
        await asyncio.sleep(0.1)
        child = store.peek("configmaps", "default", "child")
        assert child is not None and "ownerReferences" not in child["metadata"]
        return
    if propagation == "Foreground":
        assert code == 200 and "foregroundDeletion" in body["metadata"]["finalizers"]
        assert body["metadata"]["deletionTimestamp"]
    await eventually(lambda: all(store.peek("configmaps", "default", n) is None
                                 for n in ("owner", "child", "grandchild")))


async def test_a_dependent_with_another_live_owner_loses_only_the_dangling_reference(
    sim_cluster: sim_cluster.Cluster,
) -> None:
    store = sim_cluster.store
    first = await store.create("configmaps", configmap("first"), "default")
    second = await store.create("configmaps", configmap("second"), "default")
    child = owned("child", first)
    child["metadata"]["ownerReferences"].append(owned("x", second)["metadata"]["ownerReferences"][0])
    await store.create("configmaps", child, "default")
    await store.delete("configmaps", "default", "first")
    await eventually(lambda: len(store.peek("configmaps", "default", "child")["metadata"]["ownerReferences"]) == 1)


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "code", "reason"),
    [
        pytest.param("POST", "/api/v1/namespaces/default/configmaps", "{not json", {"Content-Type": "application/json"},
                     400, "BadRequest", id="malformed JSON"),
        pytest.param("POST", "/api/v1/namespaces/default/configmaps", "a: [b", {"Content-Type": "application/yaml"},
                     400, "BadRequest", id="malformed YAML"),
        pytest.param("POST", "/api/v1/namespaces/default/configmaps",
                     '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Not_Valid"}}',
                     {"Content-Type": "application/json"}, 422, "Invalid", id="invalid name"),
        pytest.param("POST", "/api/v1/namespaces",
                     '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a.b"}}',
                     {"Content-Type": "application/json"}, 422, "Invalid", id="namespace name not a label"),
        pytest.param("GET", "/api/v1/namespaces/default/gizmos", None, {}, 404, "NotFound", id="unknown resource"),
        pytest.param("GET", "/apis/nope.io/v1/things", None, {}, 404, "NotFound", id="unknown group"),
        pytest.param("GET", "/api/v1/pods?labelSelector=a%20in%20(b", None, {}, 400, "BadRequest", id="bad label selector"),
        pytest.param("GET", "/api/v1/pods?fieldSelector=nonsense", None, {}, 400, "BadRequest", id="bad field selector"),
        pytest.param("GET", "/api/v1/pods?limit=abc", None, {}, 400, "BadRequest", id="bad limit"),
        pytest.param("PATCH", "/api/v1/namespaces/default/configmaps/x", "{}", {"Content-Type": "text/plain"},
                     415, "UnsupportedMediaType", id="unknown patch type"),
        pytest.param("PATCH", "/api/v1/namespaces/default/configmaps/x", "a: b",
                     {"Content-Type": "application/apply-patch+yaml"}, 422, "Invalid",
                     id="server-side apply without a field manager"),
        pytest.param("PUT", "/api/v1/namespaces/default/configmaps", "{}", {"Content-Type": "application/json"},
                     405, "MethodNotAllowed", id="update without a name"),
        pytest.param("GET", "/api/v1/namespaces/default/configmaps/missing", None, {}, 404, "NotFound", id="missing object"),
    ],
)
async def test_bad_input_is_answered_with_a_status(sim_cluster: sim_cluster.Cluster, method: str, path: str,
                                                   body: str | None, headers: dict[str, str], code: int,
                                                   reason: str) -> None:
    got, status, _ = await call(sim_cluster, method, path, data=body, headers=headers)
    assert (got, status["kind"], status["reason"], status["code"]) == (code, "Status", reason, code)
    if reason == "Invalid":
        field = "fieldManager" if "apply-patch" in headers.get("Content-Type", "") else "metadata.name"
        assert status["details"]["causes"][0]["field"] == field


async def test_pod_status_subresource_and_eviction(sim_cluster: sim_cluster.Cluster) -> None:
    store = sim_cluster.store
    sim_cluster.faults.set("")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"sim.kto.dev/duration": "60"}},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    code, created, _ = await call(sim_cluster, "POST", "/api/v1/namespaces/default/pods", pod)
    assert code == 201 and created["status"]["phase"] == "Pending"
    code, got, _ = await call(sim_cluster, "GET", "/api/v1/namespaces/default/pods/p/status")
    assert code == 200 and got["metadata"]["name"] == "p"
    code, _, _ = await call(sim_cluster, "POST", "/api/v1/namespaces/default/pods/p/eviction",
                            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
    assert code == 201
    await eventually(lambda: store.peek("pods", "default", "p") is None
                     or (store.peek("pods", "default", "p").get("status") or {}).get("phase") == "Failed")


async def test_admin_endpoints(sim_cluster: sim_cluster.Cluster) -> None:
    start = sim_cluster.server.request_count
    await call(sim_cluster, "GET", "/api/v1/namespaces/default/configmaps/none")
    code, log, _ = await call(sim_cluster, "GET", f"/admin/requests?since={start}")
    entry = log["items"][0]
    assert code == 200 and (entry["verb"], entry["resource"], entry["namespace"], entry["name"], entry["code"]) == (
        "get", "configmaps", "default", "none", 404)
    assert sim_cluster.requests[-1]["name"] == "none"
    code, view, _ = await call(sim_cluster, "PUT", "/admin/faults", data="latency=get:1ms")
    assert code == 200 and view["latency"] == {"get": 0.001}
    code, status, _ = await call(sim_cluster, "PUT", "/admin/faults", data="latency=get:1xs")
    assert code == 400 and "1xs" in status["message"]
    code, status, _ = await call(sim_cluster, "PUT", "/admin/faults", {"spec": 5})
    assert code == 400 and sim_cluster.admin.fault_spec.latency == {"get": 0.001}
    _, stats, _ = await call(sim_cluster, "GET", "/admin/stats")
    assert stats["faults"]["spec"] == "latency=get:1ms" and stats["objects"]["nodes"] == 4
    code, _, _ = await call(sim_cluster, "POST", "/admin/nodes/sim-node-0/fail")
    assert code == 200
    node = sim_cluster.store.peek("nodes", None, "sim-node-0")
    assert any(t.get("key") == "node.kubernetes.io/unreachable" for t in node["spec"].get("taints") or [])
    code, _, _ = await call(sim_cluster, "POST", "/admin/nodes/sim-node-0/recover")
    assert code == 200
    code, _, _ = await call(sim_cluster, "POST", "/admin/nodes/no-such-node/fail")
    assert code == 404


async def test_logs_of_a_pod_with_several_containers_need_a_container(sim_cluster: sim_cluster.Cluster) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two"},
           "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}}
    await call(sim_cluster, "POST", "/api/v1/namespaces/default/pods", pod)
    code, status, _ = await call(sim_cluster, "GET", "/api/v1/namespaces/default/pods/two/log")
    assert code == 400 and "choose one of: [a b]" in status["message"]
    code, _, _ = await call(sim_cluster, "GET", "/api/v1/namespaces/default/pods/two/log?container=b", raw=True)
    assert code == 200


async def test_a_table_watch_streams_rows(sim_cluster: sim_cluster.Cluster) -> None:
    sim_cluster.store._create("configmaps", {"metadata": {"name": "c"}}, "default")
    code, text, _ = await call(sim_cluster, "GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1",
                               headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, raw=True)
    event = json.loads(text.splitlines()[0])
    assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["cells"][0] == "c"


async def test_aggregated_discovery_is_offered_to_clients_that_ask(sim_cluster: sim_cluster.Cluster) -> None:
    accept = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
    code, body, headers = await call(sim_cluster, "GET", "/apis", headers={"Accept": accept})
    assert code == 200 and headers["Content-Type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    batch = next(i for i in body["items"] if i["metadata"].get("name") == "batch")
    job = batch["versions"][0]["resources"][0]
    assert (job["resource"], job["scope"], job["responseKind"]["kind"]) == ("jobs", "Namespaced", "Job")
    _, core, _ = await call(sim_cluster, "GET", "/api", headers={"Accept": accept})
    pods = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    assert {s["subresource"] for s in pods["subresources"]} == {"status", "log", "eviction", "binding"}
