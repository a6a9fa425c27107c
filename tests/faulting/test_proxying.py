"""The faulting proxy (faulting/proxying.py): what passes through untouched (lists, watches, logs,
exec over WebSocket and SPDY, the client's own credentials), each kind of fault as a client meets
it, and the admin endpoint. Pass-through runs on both tiers (sim/, and kube-apiserver over TLS);
the faults on sim/ behind the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from faulting import proxying
from shared.kube import clients, resources
from sim import cluster as sim_cluster_module
from sim import settings as sim_settings_module
from tests.fixtures import sim as sim_fixtures
from tests.fixtures import tiers
from tests.sim.test_exec import HOSTFILE, launcher_pod


class Behind:
    """A cluster with the proxy in front: a client of each, and kubectl through the proxy."""

    def __init__(self, proxy: proxying.Proxy, direct: clients.KubeClient, through: clients.KubeClient,
                 kubectl: sim_fixtures.Kubectl, namespace: str, sim: sim_cluster_module.Cluster | None) -> None:
        self.proxy, self.direct, self.through, self.kubectl = proxy, direct, through, kubectl
        self.namespace, self.sim = namespace, sim

    @property
    def configmaps(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps"

    async def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                   headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
        """A request to the proxy with no credentials of its own (the proxy adds the kubeconfig's)."""
        async with aiohttp.ClientSession() as session:
            data = body if isinstance(body, str) else (json.dumps(body) if body is not None else None)
            async with session.request(method, self.proxy.url + path, data=data,
                                       headers={"Content-Type": content_type, **(headers or {})}) as response:
                return response.status, await response.text(), response.headers


@contextlib.asynccontextmanager
async def behind(real: tiers.RealCluster | None, tmp_path: pathlib.Path) -> AsyncIterator[Behind]:
    namespace = f"proxied-{uuid.uuid4().hex[:6]}"
    async with contextlib.AsyncExitStack() as stack:
        sim = None
        if real is None:
            kubeconfig, context = tmp_path / "kubeconfig", None
            sim = await stack.enter_async_context(sim_cluster_module.Cluster(sim_settings_module.SimSettings(
                kubeconfig=kubeconfig, bookmark_interval=0.2)))
        else:
            kubeconfig, context = real.kubeconfig, tiers.CONTEXT
        written = tmp_path / "proxy.kubeconfig"
        proxy = await stack.enter_async_context(proxying.Proxy(proxying.ProxySettings(
            kubeconfig, context, write_kubeconfig=written)))
        direct = await stack.enter_async_context(await clients.KubeClient.connect(kubeconfig, context))
        through = await stack.enter_async_context(await clients.KubeClient.connect(written, context))
        await direct.create(resources.NAMESPACES, None, {"metadata": {"name": namespace}})
        yield Behind(proxy, direct, through, sim_fixtures.Kubectl(written, tmp_path / "cache"), namespace, sim)
        with contextlib.suppress(clients.ApiError):
            await direct.delete(resources.NAMESPACES, None, namespace)


@pytest.fixture
async def sim_behind(tmp_path: pathlib.Path) -> AsyncIterator[Behind]:
    async with behind(None, tmp_path) as it:
        yield it


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}}


async def until_running(client: clients.KubeClient, namespace: str, pod: str) -> None:
    for _ in range(300):
        if ((await client.get(resources.PODS, namespace, pod)).get("status") or {}).get("phase") == "Running":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"pod {pod} never ran")


# --- pass-through, both tiers ---------------------------------------------------------------------


async def test_lists_watches_logs_and_exec_pass_through(real_or_sim: tiers.RealCluster | None,
                                                        tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async with behind(real_or_sim, tmp_path) as it:
        ns = it.namespace
        await it.through.create(resources.CONFIGMAPS, ns, configmap("a"))
        items, version = await it.through.list(resources.CONFIGMAPS, ns)
        assert "a" in {i["metadata"]["name"] for i in items}
        # A watch streams each event as it happens, not at the end.
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{it.proxy.url}{it.configmaps}?watch=true&resourceVersion={version}"
                                   "&timeoutSeconds=30") as watch:
                assert watch.status == 200
                await it.direct.create(resources.CONFIGMAPS, ns, configmap("b"))
                event = json.loads(await asyncio.wait_for(watch.content.readline(), 10))
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")
        # Exec over WebSocket (kto's client), over SPDY (kubectl without WebSockets), and logs.
        await it.direct.create(resources.CONFIGMAPS, ns, {"apiVersion": "v1", "kind": "ConfigMap",
                                                          "metadata": {"name": "job-config"},
                                                          "data": {"hostfile": HOSTFILE}})
        await it.direct.create(resources.PODS, ns, launcher_pod())
        await until_running(it.direct, ns, "launcher")
        read = await it.through.exec(ns, "launcher", "launcher", ["cat", "/etc/edl/hostfile"])
        assert read.stdout == HOSTFILE
        assert (await it.kubectl("-n", ns, "exec", "launcher", "--", "cat", "/etc/edl/hostfile")).stdout == HOSTFILE
        monkeypatch.setenv("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
        piped = await it.kubectl("-n", ns, "exec", "-i", "launcher", "--", "grep", "b", input="a\nb\nab\n")
        assert piped.stdout == "b\nab\n"
        failed = await it.kubectl("-n", ns, "exec", "launcher", "--", "sh", "-c", "exit 5", check=False)
        assert failed.returncode == 5
        assert "sim: started container(s) launcher (run 1)\n" in (await it.kubectl("-n", ns, "logs", "launcher")).stdout
        assert it.proxy.faults.stats()["total"] == 0


async def test_the_api_server_sees_the_clients_own_credentials(real_cluster: tiers.RealCluster,
                                                               tmp_path: pathlib.Path) -> None:
    async with behind(real_cluster, tmp_path) as it:
        await it.through.create(resources.CONFIGMAPS, it.namespace, configmap("mine"))
        writes = [(r["verb"], r["resource"], r["name"]) for r in real_cluster.requests(it.namespace)]
        assert ("create", "configmaps", "mine") in writes, "the audit log names kto's user, not the proxy's"
        code, _, _ = await it.call("GET", it.configmaps, headers={"Authorization": "Bearer not-a-token"})
        assert code == 401, "a request's own token goes upstream unchanged"


# --- faults, on sim/ behind the proxy ----------------------------------------------------------------


async def test_latency_delays_only_the_named_verb(sim_behind: Behind) -> None:
    it = sim_behind
    await it.call("POST", it.configmaps, configmap("c"))
    it.proxy.faults.set("latency=get:200ms")
    started = time.perf_counter()
    assert (await it.call("GET", it.configmaps + "/c"))[0] == 200
    slow = time.perf_counter() - started
    started = time.perf_counter()
    await it.call("GET", it.configmaps)
    assert slow >= 0.2 and time.perf_counter() - started < 0.2
    assert it.proxy.faults.stats()["injected"]["latency"] == 1


@pytest.mark.parametrize(
    ("spec", "method", "code", "reason", "kind"),
    [
        pytest.param("error_rate=1", "GET", 500, "InternalError", "error", id="error"),
        pytest.param("error_rate=1:code=503", "GET", 503, "ServiceUnavailable", "error", id="error 503"),
        # Retry-After 1: the client below honours it on each of its 8 tries.
        pytest.param("throttle_rate=1:retry_after=1", "GET", 429, "TooManyRequests", "throttle", id="throttle"),
        pytest.param("conflict_rate=1", "PATCH", 409, "Conflict", "conflict", id="conflict"),
    ],
)
async def test_refusals_are_answered_by_the_proxy_as_the_api_server_words_them(
    sim_behind: Behind, spec: str, method: str, code: int, reason: str, kind: str,
) -> None:
    it = sim_behind
    await it.call("POST", it.configmaps, configmap("c"))
    it.proxy.faults.set(spec)
    got, text, headers = await it.call(method, it.configmaps + "/c", {"data": {"a": "1"}} if method == "PATCH" else None,
                                       "application/merge-patch+json")
    status = json.loads(text)
    assert (got, status["kind"], status["code"], status["reason"]) == (code, "Status", code, reason)
    if code == 429:
        assert headers["Retry-After"] == "1" and status["details"]["retryAfterSeconds"] == 1
    assert it.proxy.faults.stats()["injected"][kind] == 1
    assert it.sim is not None and it.sim.admin.stats()["faults"]["total"] == 0, "the sim injected nothing"
    with pytest.raises(clients.ApiError) as caught:
        await it.through.patch(resources.CONFIGMAPS, it.namespace, "c", {"data": {"b": "2"}})
    assert caught.value.code == code


async def test_conflicts_are_injected_into_writes_only(sim_behind: Behind) -> None:
    it = sim_behind
    await it.call("POST", it.configmaps, configmap("c"))
    it.proxy.faults.set("conflict_rate=1")
    assert (await it.call("GET", it.configmaps + "/c"))[0] == 200
    assert (await it.call("POST", it.configmaps, configmap("d")))[0] == 201


async def test_watch_streams_are_dropped_between_two_events(sim_behind: Behind) -> None:
    it = sim_behind
    for i in range(20):
        await it.direct.create(resources.CONFIGMAPS, it.namespace, {**configmap(f"c{i}"), "data": {"k": "x" * 5000}})

    async def churn() -> None:
        for i in range(200):
            await it.direct.patch(resources.CONFIGMAPS, it.namespace, f"c{i % 20}", {"data": {"n": str(i)}})

    it.proxy.faults.set("watch_drop=300ms")
    writes = asyncio.create_task(churn())
    started = time.perf_counter()
    code, text, _ = await it.call("GET", it.configmaps + "?watch=true&resourceVersion=0&timeoutSeconds=30")
    assert code == 200 and 0.3 <= time.perf_counter() - started < 5
    await writes
    events = [json.loads(line) for line in text.splitlines()]
    assert events and text.endswith("\n"), "every event whole: a dropped watch ends between two"
    assert it.proxy.faults.stats()["injected"]["watch_drop"] == 1


async def test_watch_starts_are_forced_gone(sim_behind: Behind) -> None:
    it = sim_behind
    _, version = await it.direct.list(resources.CONFIGMAPS, it.namespace)
    it.proxy.faults.set("gone_rate=1")
    _, text, _ = await it.call("GET", it.configmaps + f"?watch=true&resourceVersion={version}&timeoutSeconds=5")
    event = json.loads(text.splitlines()[0])
    assert event["type"] == "ERROR" and (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")
    code, _, _ = await it.call("GET", it.configmaps + "?watch=true&timeoutSeconds=1")
    assert code == 200, "a watch from no version is never gone"
    assert it.proxy.faults.stats()["injected"]["gone"] == 1


async def test_faults_can_be_scoped_to_resources_and_spare_discovery(sim_behind: Behind) -> None:
    it = sim_behind
    it.proxy.faults.set("error_rate=1;resources=pods")
    assert (await it.call("GET", it.configmaps))[0] == 200
    assert (await it.call("GET", "/api/v1/pods"))[0] == 500
    assert (await it.call("GET", "/api/v1"))[0] == 200, "discovery is never faulted"
    assert (await it.call("GET", "/version"))[0] == 200


# --- the admin endpoint --------------------------------------------------------------------------------


async def test_the_admin_endpoint_shows_and_replaces_the_spec(sim_behind: Behind) -> None:
    it = sim_behind
    code, text, _ = await it.call("PUT", "/admin/faults", "latency=get:1ms", "text/plain")
    assert code == 200 and json.loads(text)["latency"] == {"get": 0.001}
    code, text, _ = await it.call("PUT", "/admin/faults", {"spec": "conflict_rate=0.5;seed=3"})
    assert code == 200 and (json.loads(text)["conflict_rate"], json.loads(text)["seed"]) == (0.5, 3)
    code, text, _ = await it.call("GET", "/admin/faults")
    assert json.loads(text)["spec"] == "conflict_rate=0.5;seed=3"
    code, text, _ = await it.call("GET", "/admin/stats")
    assert code == 200 and "openWatches" in json.loads(text), "other /admin paths are the upstream's"


@pytest.mark.parametrize("body", [
    pytest.param("latency=get:1xs", id="bad duration"),
    pytest.param({"spec": 5}, id="not a string"),
    pytest.param("{not json", id="not json"),
])
async def test_a_bad_spec_is_refused_in_one_line(sim_behind: Behind, body: Any) -> None:
    it = sim_behind
    it.proxy.faults.set("latency=get:1ms")
    content_type = "text/plain" if body == "latency=get:1xs" else "application/json"
    code, text, _ = await it.call("PUT", "/admin/faults", body, content_type)
    status = json.loads(text)
    assert (code, status["reason"]) == (400, "BadRequest") and "\n" not in status["message"]
    assert it.proxy.faults.spec.text == "latency=get:1ms", "the spec in force stays"


def test_a_kubeconfig_naming_no_cluster_is_one_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: []\n")
    with pytest.raises(proxying.ProxyError) as caught:
        proxying.upstream_of(path)
    assert str(caught.value) == f"{path}: no context 'x'"
