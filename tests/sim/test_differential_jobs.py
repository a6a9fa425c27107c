"""sim/ held against the real kube-apiserver and kube-controller-manager: batch/v1 Jobs and the scale subresource.

The same scenarios run against a fresh sim and the session's real control plane, as in
``test_differential.py`` (whose ``Pair``, ``Api`` and ``normalise`` they reuse), and their
transcripts must be equal. Job scenarios drive their pods with the ``sim.kto.dev/*``
annotations, which the sim's kubelet and the real tier's node agent (the same logic)
understand, and compare what the Job controllers made of them: the Job's defaulted spec,
its pods' labels, owner and finalizers, and its final status — conditions, counters,
``uncountedTerminatedPods``. Intermediate statuses are not compared: kube-controller-manager
batches pod events for a second and the sim does not, so the two take different paths
through the same states.

What is hidden beyond ``normalise``: the 5 random characters of generated pod names.
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
from typing import Any

import pytest

from tests.fixtures import sim as sim_fixtures
from tests.sim.test_differential import (  # noqa: F401 (pair and sim_side are fixtures)
    JSON_PATCH,
    MERGE,
    Api,
    Obj,
    Pair,
    Reply,
    jobs,
    pair,
    pytorchjob,
    sim_side,
    status_of,
)

JOB_TIMEOUT = 60.0
"""Seconds a Job may take to finish on either side (a failure backoff is 10 s)."""

STRATEGIC = "application/strategic-merge-patch+json"


# --- scale subresource of a custom resource ---------------------------------------------------

def scale(ns: str, name: str) -> str:
    return jobs(ns, name) + "/scale"


async def test_scale_get_put_patch(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        created = (await api.request("POST", jobs(ns), pytorchjob("j", workers=2))).body
        got = await api.request("GET", scale(ns, "j"))
        out["get"] = status_of(got)
        out["get rv is the parent's"] = got.body["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
        merged = await api.request("PATCH", scale(ns, "j"), {"spec": {"replicas": 4}}, ctype=MERGE)
        out["merge patch"] = status_of(merged)
        parent = (await api.request("GET", jobs(ns, "j"))).body
        out["parent after merge patch"] = {"spec": parent["spec"], "generation": parent["metadata"]["generation"],
                                           "rv": parent["metadata"]["resourceVersion"] == merged.body["metadata"]["resourceVersion"]}
        out["json patch"] = status_of(await api.request(
            "PATCH", scale(ns, "j"), [{"op": "replace", "path": "/spec/replicas", "value": 5}], ctype=JSON_PATCH))
        out["json patch test fails"] = status_of(await api.request(
            "PATCH", scale(ns, "j"), [{"op": "test", "path": "/spec/replicas", "value": 1}], ctype=JSON_PATCH))
        out["strategic patch"] = status_of(await api.request(
            "PATCH", scale(ns, "j"), {"spec": {"replicas": 6}}, ctype=STRATEGIC))
        out["same replicas"] = status_of(await api.request(
            "PATCH", scale(ns, "j"), {"spec": {"replicas": 6}}, ctype=MERGE))
        fresh = (await api.request("GET", scale(ns, "j"))).body
        out["put"] = status_of(await api.request("PUT", scale(ns, "j"), dict(fresh, spec={"replicas": 3})))
        out["put stale"] = status_of(await api.request("PUT", scale(ns, "j"), dict(fresh, spec={"replicas": 1})))
        unconditional = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "j", "namespace": ns},
                         "spec": {"replicas": 2}}
        out["put without resourceVersion"] = status_of(await api.request("PUT", scale(ns, "j"), unconditional))
        out["patch stale"] = status_of(await api.request(
            "PATCH", scale(ns, "j"), {"metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"]},
                                      "spec": {"replicas": 7}}, ctype=MERGE))
        out["zero"] = status_of(await api.request("PATCH", scale(ns, "j"), {"spec": {"replicas": 0}}, ctype=MERGE))
        out["final parent"] = (await api.request("GET", jobs(ns, "j"))).body["spec"]
        return out

    await pair.run(scenario)


async def test_scale_reads_status_and_selector(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", jobs(ns), pytorchjob("j", workers=3))
        current = (await api.request("GET", jobs(ns, "j"))).body
        await api.request("PUT", jobs(ns, "j") + "/status", dict(current, status={
            "replicaStatuses": {"Worker": {"active": 2, "selector": "app=x,role=worker"}}}))
        return status_of(await api.request("GET", scale(ns, "j")))

    await pair.run(scenario)


@pytest.mark.parametrize(("method", "body", "ctype"), [
    pytest.param("GET", None, "application/json", id="get"),
    pytest.param("PUT", {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "nope"},
                         "spec": {"replicas": 1}}, "application/json", id="put"),
    pytest.param("PATCH", {"spec": {"replicas": 1}}, MERGE, id="merge patch"),
    pytest.param("PATCH", [{"op": "replace", "path": "/spec/replicas", "value": 1}], JSON_PATCH, id="json patch"),
])
async def test_scale_of_a_missing_object(pair: Pair, method: str, body: Any, ctype: str) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        return status_of(await api.request(method, scale(ns, "nope"), body, ctype=ctype))

    await pair.run(scenario)


async def test_scale_of_a_kind_without_it(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        body = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "m"},
                "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {
                    "spec": {"containers": [{"name": "l", "image": "mpi"}]}}}}}}
        made = await api.request("POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/mpijobs", body)
        assert made.code == 201, made
        return status_of(await api.request("GET", f"/apis/kubeflow.org/v1/namespaces/{ns}/mpijobs/m/scale"))

    await pair.run(scenario)


async def _kubectl(api: Api, ns: str, *args: str) -> Obj:
    """The real kubectl against ``api``'s server: exit code and output, the object names made alike."""
    assert api.kubeconfig is not None
    cache = api.kubeconfig.parent / f"kube-cache-{api.name}-{ns}"
    run = sim_fixtures.Kubectl(api.kubeconfig, cache)
    result = await run(f"--context={api.context}", "-n", ns, *args, check=False)
    # The current resourceVersion kubectl names in a failed precondition differs between servers.
    stderr = re.sub(r"(resource version to be \S+, was )\d+", r"\1N", result.stderr)
    return {"code": result.returncode, "stdout": result.stdout, "stderr": stderr}


async def test_kubectl_scale(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        await api.request("POST", jobs(ns), pytorchjob("j", workers=2))
        out["scale"] = await _kubectl(api, ns, "scale", "pytorchjob/j", "--replicas=3")
        out["after"] = (await api.request("GET", jobs(ns, "j"))).body["spec"]["pytorchReplicaSpecs"]["Worker"]
        out["current replicas match"] = await _kubectl(api, ns, "scale", "pytorchjobs", "j", "--current-replicas=3",
                                                       "--replicas=5")
        out["current replicas differ"] = await _kubectl(api, ns, "scale", "pytorchjob/j", "--current-replicas=1",
                                                        "--replicas=2")
        out["stale resource version"] = await _kubectl(api, ns, "scale", "pytorchjob/j", "--resource-version=1",
                                                       "--replicas=2")
        out["missing"] = await _kubectl(api, ns, "scale", "pytorchjob/nope", "--replicas=2")
        out["final"] = (await api.request("GET", jobs(ns, "j"))).body["spec"]["pytorchReplicaSpecs"]["Worker"]
        return out

    await pair.run(scenario)
