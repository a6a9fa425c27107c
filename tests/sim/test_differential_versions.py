"""sim/ held against the real kube-apiserver: a CRD with two served versions, conversion strategy None.

The repo's deploy/crds/kubeflow.org_mpijobs.yaml (applied on both sides by the fixtures of
``test_differential.py``, whose ``Pair``, ``Api`` and ``normalise`` these scenarios reuse)
serves MPIJob as ``v1`` (storage) and ``v2beta1``, whose schema defaults fields v1 leaves
alone and whose enums differ. What kube-apiserver does, and the sim must do alike:

- a write through a version is pruned, defaulted and validated by that version's schema;
  the body's apiVersion must be the URL's version (400 otherwise);
- a read in either version returns the stored fields with apiVersion rewritten — the read
  version's defaults are not applied;
- /status writes through a version take the rest of the object as stored (no defaults of
  the version added to spec);
- validation ratchets on update: a value another version accepted may stay;
- lists, watches (bookmarks included) and deletecollection answer in the asked version;
- discovery lists both versions, v1 preferred (kube's version priority), and kubectl uses it.

What is hidden beyond ``normalise``: the storageVersionHash of discovery, kubectl's AGE column.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from tests.sim import test_differential as differential
from tests.sim import test_differential_jobs as differential_jobs
from tests.sim.test_differential import JSON_PATCH, MERGE, STRATEGIC, Api, Obj, Pair, Reply, status_of

pair = differential.pair
sim_side = differential.sim_side

APPLY = "application/apply-patch+yaml"
LAUNCHER = {"Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "l", "image": "mpi"}]}}}}


def mpijobs(ns: str, version: str, name: str = "") -> str:
    path = f"/apis/kubeflow.org/{version}/namespaces/{ns}/mpijobs"
    return f"{path}/{name}" if name else path


def mpijob(name: str, version: str, **spec: Any) -> Obj:
    return {"apiVersion": f"kubeflow.org/{version}", "kind": "MPIJob", "metadata": {"name": name},
            "spec": {"mpiReplicaSpecs": LAUNCHER, **spec}}


def shown(reply: Reply) -> Any:
    """What of a written or read MPIJob is compared: code, apiVersion, spec, status, generation (or the Status)."""
    body = reply.body
    if not isinstance(body, dict) or body.get("kind") != "MPIJob":
        return status_of(reply)
    return {"code": reply.code, "apiVersion": body["apiVersion"], "spec": body.get("spec"),
            "status": body.get("status"), "generation": body["metadata"].get("generation")}


async def test_create_in_one_version_read_in_both(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        made = await api.request("POST", mpijobs(ns, "v2beta1"), mpijob("a", "v2beta1"))
        out["create v2beta1"] = status_of(made)
        for version in ("v1", "v2beta1"):
            got = await api.request("GET", mpijobs(ns, version, "a"))
            out[f"get v2beta1-made in {version}"] = status_of(got)
            out[f"same rv in {version}"] = got.body["metadata"]["resourceVersion"] == made.body["metadata"]["resourceVersion"]
        out["create v1"] = status_of(await api.request("POST", mpijobs(ns, "v1"), mpijob("b", "v1")))
        for version in ("v1", "v2beta1"):
            out[f"get v1-made in {version}"] = status_of(await api.request("GET", mpijobs(ns, version, "b")))
        out["explicit values kept"] = shown(await api.request("POST", mpijobs(ns, "v2beta1"), mpijob(
            "c", "v2beta1", mpiImplementation="Intel", slotsPerWorker=4, unknownField=1)))
        out["read explicit values in v1"] = shown(await api.request("GET", mpijobs(ns, "v1", "c")))
        return out

    await pair.run(scenario)


async def test_body_version_must_be_the_url_version(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        out["v1 body to v2beta1"] = status_of(await api.request("POST", mpijobs(ns, "v2beta1"), mpijob("a", "v1")))
        out["v2beta1 body to v1"] = status_of(await api.request("POST", mpijobs(ns, "v1"), mpijob("a", "v2beta1")))
        await api.request("POST", mpijobs(ns, "v1"), mpijob("b", "v1"))
        current = (await api.request("GET", mpijobs(ns, "v1", "b"))).body
        out["put v2beta1 body to v1"] = status_of(await api.request(
            "PUT", mpijobs(ns, "v1", "b"), dict(current, apiVersion="kubeflow.org/v2beta1")))
        out["apply v2beta1 config to v1"] = status_of(await api.request(
            "PATCH", mpijobs(ns, "v1", "b"), mpijob("b", "v2beta1"), ctype=APPLY, query={"fieldManager": "m"}))
        return out

    await pair.run(scenario)


@pytest.mark.parametrize("spec", [
    pytest.param({"mpiImplementation": "Foo"}, id="enum in both"),
    pytest.param({"runPolicy": {"cleanPodPolicy": "Bad"}}, id="enum only in v1"),
    pytest.param({"mpiReplicaSpecs": {"Launcher": dict(LAUNCHER["Launcher"], restartPolicy="Sometimes")}},
                 id="restartPolicy enum only in v1"),
    pytest.param({"launcherCreationPolicy": "Foo"}, id="no enum"),
    pytest.param({"slotsPerWorker": "many"}, id="wrong type"),
])
@pytest.mark.parametrize("version", ["v1", "v2beta1"])
async def test_validation_per_version(pair: Pair, version: str, spec: Obj) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        return shown(await api.request("POST", mpijobs(ns, version), mpijob("a", version, **spec)))

    await pair.run(scenario)


async def test_validation_ratchets_across_versions(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        out["create v2beta1"] = shown(await api.request("POST", mpijobs(ns, "v2beta1"), mpijob(
            "a", "v2beta1", runPolicy={"cleanPodPolicy": "Bad"})))
        out["label through v1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v1", "a"), {"metadata": {"labels": {"x": "y"}}}, ctype=MERGE))
        out["other field through v1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v1", "a"), {"spec": {"slotsPerWorker": 7}}, ctype=MERGE))
        out["the invalid field through v1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v1", "a"), {"spec": {"runPolicy": {"cleanPodPolicy": "Bad2"}}}, ctype=MERGE))
        out["status through v1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v1", "a") + "/status", {"status": {"startTime": "2024-01-01T00:00:00Z"}},
            ctype=MERGE))
        current = (await api.request("GET", mpijobs(ns, "v1", "a"))).body
        out["put through v1"] = shown(await api.request("PUT", mpijobs(ns, "v1", "a"), dict(
            current, spec=dict(current["spec"], sshAuthMountPath="/home/.ssh"))))
        return out

    await pair.run(scenario)


async def test_writes_default_by_their_version(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        out["create v1"] = shown(await api.request("POST", mpijobs(ns, "v1"), mpijob("a", "v1")))
        current = (await api.request("GET", mpijobs(ns, "v2beta1", "a"))).body
        out["put status v2beta1"] = shown(await api.request("PUT", mpijobs(ns, "v2beta1", "a") + "/status", dict(
            current, status={"conditions": [{"type": "Created", "status": "True"}]})))
        out["merge status v2beta1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v2beta1", "a") + "/status",
            {"status": {"startTime": "2024-01-01T00:00:00Z"}, "spec": {"slotsPerWorker": 5}}, ctype=MERGE))
        out["merge label v2beta1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v2beta1", "a"), {"metadata": {"labels": {"x": "y"}}}, ctype=MERGE))
        out["merge remove v1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v1", "a"), {"spec": {"mpiImplementation": None}}, ctype=MERGE))
        out["json patch v1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v1", "a"), [{"op": "add", "path": "/spec/slotsPerWorker", "value": 3}],
            ctype=JSON_PATCH))
        out["json patch test v2beta1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v2beta1", "a"), [{"op": "test", "path": "/apiVersion", "value": "kubeflow.org/v2beta1"},
                                                   {"op": "remove", "path": "/spec/sshAuthMountPath"}],
            ctype=JSON_PATCH))
        out["strategic v2beta1"] = shown(await api.request(
            "PATCH", mpijobs(ns, "v2beta1", "a"), {"spec": {"slotsPerWorker": 2}}, ctype=STRATEGIC))
        current = (await api.request("GET", mpijobs(ns, "v1", "a"))).body
        out["put same v1"] = shown(await api.request("PUT", mpijobs(ns, "v1", "a"), current))
        out["put same v1 keeps rv"] = (await api.request("GET", mpijobs(ns, "v1", "a"))).body["metadata"][
            "resourceVersion"] == current["metadata"]["resourceVersion"]
        out["put status v1 on v2beta1-made"] = None
        await api.request("POST", mpijobs(ns, "v2beta1"), mpijob("b", "v2beta1"))
        current = (await api.request("GET", mpijobs(ns, "v1", "b"))).body
        out["put status v1 on v2beta1-made"] = shown(await api.request(
            "PUT", mpijobs(ns, "v1", "b") + "/status", dict(current, status={"startTime": "2024-01-01T00:00:00Z"})))
        return out

    await pair.run(scenario)


async def test_server_side_apply_per_version(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}

        async def apply(version: str, name: str, **spec: Any) -> Any:
            body = {"apiVersion": f"kubeflow.org/{version}", "kind": "MPIJob", "metadata": {"name": name},
                    "spec": spec}
            return shown(await api.request("PATCH", mpijobs(ns, version, name), body, ctype=APPLY,
                                           query={"fieldManager": "m-" + version}))

        out["create v2beta1"] = await apply("v2beta1", "a", mpiReplicaSpecs=LAUNCHER)
        out["create v1"] = await apply("v1", "b", mpiReplicaSpecs=LAUNCHER)
        out["v2beta1 onto v1-made"] = await apply("v2beta1", "b", slotsPerWorker=4)
        out["invalid v2beta1"] = await apply("v2beta1", "c", mpiReplicaSpecs=LAUNCHER, mpiImplementation="Foo")
        out["read b in v1"] = shown(await api.request("GET", mpijobs(ns, "v1", "b")))
        return out

    await pair.run(scenario)


async def test_list_watch_and_deletecollection_in_the_asked_version(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        await api.request("POST", mpijobs(ns, "v1"), mpijob("a", "v1"))
        query = {"allowWatchBookmarks": "true", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        watching = asyncio.ensure_future(api.watch(mpijobs(ns, "v1"), query, until=lambda ev: len(_kept(ev)) >= 5,
                                                   timeout=10))
        await asyncio.sleep(1.0)
        await api.request("POST", mpijobs(ns, "v2beta1"), mpijob("w", "v2beta1"))
        await api.request("PATCH", mpijobs(ns, "v2beta1", "w"), {"spec": {"slotsPerWorker": 2}}, ctype=MERGE)
        await api.request("DELETE", mpijobs(ns, "v2beta1", "w"))
        code, events = await watching
        out["watch v1"] = {"code": code, "events": [
            {"type": e["type"], "apiVersion": e["object"]["apiVersion"], "kind": e["object"]["kind"],
             "name": e["object"]["metadata"].get("name"), "spec": e["object"].get("spec"),
             "annotations": e["object"]["metadata"].get("annotations")} for e in _kept(events)]}
        await api.request("POST", mpijobs(ns, "v2beta1"), mpijob("b", "v2beta1"))
        for version in ("v1", "v2beta1"):
            listed = (await api.request("GET", mpijobs(ns, version))).body
            out[f"list {version}"] = {"apiVersion": listed["apiVersion"], "kind": listed["kind"], "items": [
                (i["apiVersion"], i["metadata"]["name"], i["spec"]) for i in listed["items"]]}
        deleted = await api.request("DELETE", mpijobs(ns, "v2beta1"))
        out["deletecollection v2beta1"] = {"code": deleted.code, "apiVersion": deleted.body["apiVersion"],
                                           "items": [(i["apiVersion"], i["metadata"]["name"])
                                                     for i in deleted.body["items"]]}
        return out

    await pair.run(scenario)


def _kept(events: list[Obj]) -> list[Obj]:
    """Watch events but the periodic bookmarks (their timing differs; the initial-events-end one is kept)."""
    return [e for e in events if e["type"] != "BOOKMARK" or e["object"]["metadata"].get("annotations")]


def _discovery(body: Any) -> Any:
    if isinstance(body, dict) and "resources" in body:
        return dict(body, resources=[{k: v for k, v in r.items() if k != "storageVersionHash"}
                                     for r in body["resources"] if r["name"].startswith("mpijobs")])
    return body


async def test_discovery_lists_both_versions(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {"group": (await api.request("GET", "/apis/kubeflow.org")).body}
        groups = (await api.request("GET", "/apis")).body["groups"]
        out["in /apis"] = [g for g in groups if g["name"] == "kubeflow.org"]
        for version in ("v1", "v2beta1"):
            out[version] = _discovery((await api.request("GET", f"/apis/kubeflow.org/{version}")).body)
        return out

    await pair.run(scenario)


_AGE = re.compile(r"\b\d+(s|m)\b")


async def test_kubectl_get_in_each_version(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", mpijobs(ns, "v2beta1"), mpijob("a", "v2beta1"))
        await api.request("POST", mpijobs(ns, "v1"), mpijob("b", "v1"))
        await api.request("PATCH", mpijobs(ns, "v1", "b") + "/status",
                          {"status": {"conditions": [{"type": "Running", "status": "True"}]}}, ctype=MERGE)
        out: Obj = {}
        for args in (("get", "mpijobs"), ("get", "mpijobs.v2beta1.kubeflow.org"), ("get", "mpijobs.v1.kubeflow.org"),
                     ("get", "mpijobs.v2beta1.kubeflow.org", "b", "-o", "jsonpath={.apiVersion} {.spec}"),
                     ("get", "mpijobs", "a", "-o", "jsonpath={.apiVersion} {.spec}")):
            result = await differential_jobs._kubectl(api, ns, *args)
            result["stdout"] = _AGE.sub("<age>", result["stdout"])
            out[" ".join(args)] = result
        return out

    await pair.run(scenario)
