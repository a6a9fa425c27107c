"""Fault injection in the sim's own server: each kind of fault as clients meet it (the grammar: tests/faulting)."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest

from sim import cluster as sim_cluster


async def request(cluster: sim_cluster.Cluster, method: str, path: str, body: Any = None,
                  content_type: str = "application/json") -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as session:
        data = json.dumps(body) if body is not None else None
        async with session.request(method, cluster.url + path, data=data,
                                   headers={"Content-Type": content_type}) as response:
            return response.status, await response.text(), response.headers


CM = "/api/v1/namespaces/default/configmaps"


async def test_latency_delays_only_the_named_verb(sim_cluster: sim_cluster.Cluster) -> None:
    sim_cluster.admin.set_faults("latency=get:200ms")
    await request(sim_cluster, "POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    started = time.perf_counter()
    await request(sim_cluster, "GET", CM + "/c")
    slow = time.perf_counter() - started
    started = time.perf_counter()
    await request(sim_cluster, "GET", CM)
    fast = time.perf_counter() - started
    assert slow >= 0.2 and fast < 0.2
    assert sim_cluster.admin.stats()["faults"]["injected"]["latency"] == 1


async def test_error_rate_answers_internal_errors(sim_cluster: sim_cluster.Cluster) -> None:
    sim_cluster.admin.set_faults("error_rate=1")
    code, text, _ = await request(sim_cluster, "GET", CM)
    assert code == 500 and json.loads(text)["reason"] == "InternalError"
    assert sim_cluster.requests[-1]["fault"] == "error"


async def test_throttling_answers_429_with_retry_after(sim_cluster: sim_cluster.Cluster) -> None:
    sim_cluster.admin.set_faults("throttle_rate=1:retry_after=2")
    code, text, headers = await request(sim_cluster, "GET", CM)
    status = json.loads(text)
    assert code == 429 and headers["Retry-After"] == "2"
    assert status["reason"] == "TooManyRequests" and status["details"]["retryAfterSeconds"] == 2


async def test_conflicts_are_injected_into_writes_only(sim_cluster: sim_cluster.Cluster) -> None:
    await request(sim_cluster, "POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    sim_cluster.admin.set_faults("conflict_rate=1")
    code, _, _ = await request(sim_cluster, "GET", CM + "/c")
    assert code == 200
    code, text, _ = await request(sim_cluster, "PATCH", CM + "/c", {"data": {"a": "1"}}, "application/merge-patch+json")
    assert code == 409 and "the object has been modified" in json.loads(text)["message"]
    assert sim_cluster.admin.stats()["faults"]["injected"]["conflict"] == 1


async def test_watch_streams_are_dropped(sim_cluster: sim_cluster.Cluster) -> None:
    sim_cluster.admin.set_faults("watch_drop=300ms")
    started = time.perf_counter()
    code, _, _ = await request(sim_cluster, "GET", CM + "?watch=true&timeoutSeconds=30")
    assert code == 200 and 0.3 <= time.perf_counter() - started < 5
    assert sim_cluster.admin.stats()["faults"]["injected"]["watch_drop"] == 1


async def test_watch_starts_are_forced_gone(sim_cluster: sim_cluster.Cluster) -> None:
    sim_cluster.admin.set_faults("gone_rate=1")
    rv = sim_cluster.store.resource_version
    _, text, _ = await request(sim_cluster, "GET", CM + f"?watch=true&resourceVersion={rv}&timeoutSeconds=5")
    event = json.loads(text.splitlines()[0])
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    sim_cluster.admin.set_faults("gone_every=10ms")
    time.sleep(0.02)
    _, text, _ = await request(sim_cluster, "GET", CM + f"?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    assert json.loads(text.splitlines()[0])["type"] == "ERROR"
    assert sim_cluster.admin.stats()["faults"]["injected"]["gone"] == 2


async def test_faults_can_be_scoped_to_resources(sim_cluster: sim_cluster.Cluster) -> None:
    sim_cluster.admin.set_faults("error_rate=1;resources=pods")
    assert (await request(sim_cluster, "GET", CM))[0] == 200
    assert (await request(sim_cluster, "GET", "/api/v1/pods"))[0] == 500
    assert (await request(sim_cluster, "GET", "/api/v1"))[0] == 200, "discovery is never faulted"


async def test_kubernetes_asyncio_sees_injected_faults_as_api_exceptions(sim_cluster: sim_cluster.Cluster,
                                                                       sim_api: Any) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    sim_cluster.admin.set_faults("throttle_rate=1:retry_after=1")
    with pytest.raises(ApiException) as caught:
        await client.CoreV1Api(sim_api).list_namespaced_pod("default")
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "1"
