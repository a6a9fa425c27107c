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

import copy
import re
import time
from typing import Any

import pytest

from tests.fixtures import sim as sim_fixtures
from tests.sim import test_differential as differential
from tests.sim.test_differential import JSON_PATCH, MERGE, Api, Obj, Pair, Reply, jobs, pytorchjob, status_of

pair = differential.pair
sim_side = differential.sim_side

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


# --- batch/v1 Jobs ----------------------------------------------------------------------------

_TIMES = {"startTime", "completionTime", "startedAt", "finishedAt"}
_PLACED = {"nodeName": "<node>", "hostIP": "<ip>", "podIP": "<ip>", "hostIPs": "<ips>", "podIPs": "<ips>"}
"""Where a pod runs: kube-scheduler spreads pods over the nodes, the sim's scheduler packs them."""
_GENERATED = re.compile(r"^(?P<job>[a-z0-9-]+)-[bcdfghjklmnpqrstvwxz2456789]{5}$")


def batch_jobs(ns: str, name: str = "") -> str:
    return f"/apis/batch/v1/namespaces/{ns}/jobs" + (f"/{name}" if name else "")


def pods(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def job(name: str, annotations: dict[str, str] | None = None, restart: str = "Never", **spec: Any) -> Obj:
    template: Obj = {"spec": {"restartPolicy": restart,
                              "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", "true"]}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {**spec, "template": template}}


def alike(value: Any) -> Any:
    """``value`` with the times ``normalise`` does not know and generated pod names made alike."""
    if isinstance(value, list):
        return [alike(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: Obj = {}
    for key, item in value.items():
        if key in _TIMES and isinstance(item, str):
            out[key] = "<time>"
        elif key == "name" and isinstance(item, str) and "generateName" in value:
            out[key] = f"{value['generateName']}<suffix>"
        elif key in _PLACED:
            out[key] = _PLACED[key]
        elif key == "containerID" and isinstance(item, str):
            out[key] = "<container>"
        else:
            out[key] = alike(item)
    return out


def conditions(reply: Reply) -> list[str]:
    return [c["type"] for c in ((reply.body.get("status") or {}).get("conditions") or []) if c.get("status") == "True"]


def terminal(reply: Reply) -> bool:
    return reply.code == 200 and bool({"Complete", "Failed"} & set(conditions(reply)))


async def job_pods(api: Api, ns: str) -> list[Obj]:
    listed = await api.request("GET", pods(ns))
    # List items carry no kind in kube-apiserver's answer; normalise needs it to know a pod.
    items = [dict(alike(p), kind="Pod", apiVersion="v1") for p in listed.body["items"]]
    return sorted(items, key=lambda p: str(p["metadata"].get("creationTimestamp")))


async def finish(api: Api, ns: str, name: str = "j") -> Obj:
    """The Job once Complete or Failed (and its pods' finalizers gone), with its pods."""
    done = await api.wait_for(batch_jobs(ns, name), terminal, JOB_TIMEOUT)
    assert terminal(done), (api.name, done.body.get("status"))
    await api.wait_for(pods(ns), lambda r: not any(p["metadata"].get("finalizers") for p in r.body["items"]), 10)
    return {"job": alike(status_of(done)), "pods": await job_pods(api, ns)}


async def created_pod(api: Api, ns: str, since: str) -> Obj:
    """The first pod of the namespace as it was created (finalizer and all), from a watch."""
    code, events = await api.watch(pods(ns), {"resourceVersion": since}, until=lambda e: len(e) >= 1,
                                   timeout=JOB_TIMEOUT)
    assert code == 200 and events, (api.name, code, events)
    made = alike(events[0]["object"])
    return {"event": events[0]["type"], "pod": {"kind": "Pod", "metadata": made["metadata"], "spec": made["spec"]}}


async def condition_history(api: Api, ns: str, since: str) -> list[list[str]]:
    """The Job's conditions (True ones, in order) as its watch events showed them, repeats left out:
    interim conditions come before terminal ones in a write of their own."""
    code, events = await api.watch(batch_jobs(ns), {"resourceVersion": since},
                                   until=lambda e: bool(e) and terminal(Reply(200, e[-1]["object"])),
                                   timeout=JOB_TIMEOUT)
    assert code == 200, (api.name, code, events)
    history: list[list[str]] = []
    for event in events:
        seen = conditions(Reply(200, event["object"]))
        if not history or history[-1] != seen:
            history.append(seen)
    return history


async def test_job_runs_a_pod_to_completion(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        since = (await api.request("GET", pods(ns))).body["metadata"]["resourceVersion"]
        created = await api.request("POST", batch_jobs(ns), job("j", {"sim.kto.dev/duration": "1s"}))
        out: Obj = {"created": status_of(created)}
        out["pod as created"] = await created_pod(api, ns, since)
        out["conditions"] = await condition_history(api, ns, since)
        out["finished"] = await finish(api, ns)
        return out

    await pair.run(scenario, pods=True)


async def test_job_replaces_a_failed_pod_then_fails(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        since = (await api.request("GET", batch_jobs(ns))).body["metadata"]["resourceVersion"]
        annotations = {"sim.kto.dev/duration": "200ms", "sim.kto.dev/exit-code": "3"}
        await api.request("POST", batch_jobs(ns), job("j", annotations, backoffLimit=1))
        started = time.monotonic()
        history = await condition_history(api, ns, since)
        # The replacement waits out the 10 s backoff after the first failure, on both sides. The
        # backoff runs from the pod's finishedAt, which has second precision: up to a second of it
        # can lie before the POST returned, so "waited" means over 8 s.
        waited = time.monotonic() - started >= 8
        return {"conditions": history, "backoff waited": waited, **await finish(api, ns)}

    await pair.run(scenario, pods=True)


async def test_job_with_parallel_completions(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", batch_jobs(ns), job("j", {"sim.kto.dev/duration": "300ms"}, completions=3,
                                                      parallelism=2))
        done = await finish(api, ns)
        return {"job": done["job"], "pods": [p["status"]["phase"] for p in done["pods"]]}

    await pair.run(scenario, pods=True)


async def test_indexed_job(pair: Pair) -> None:
    """One pod per index, as kube-controller-manager makes it (name, completion-index annotation and
    label, hostname, JOB_COMPLETION_INDEX), and completedIndexes."""
    async def scenario(api: Api, ns: str) -> Any:
        body = job("j", {"sim.kto.dev/duration": "300ms"}, completions=3, parallelism=2, completionMode="Indexed")
        body["spec"]["template"]["spec"]["subdomain"] = "sub"
        await api.request("POST", batch_jobs(ns), body)
        done = await finish(api, ns)
        made = sorted(({"generateName": p["metadata"].get("generateName"), "labels": p["metadata"].get("labels"),
                        "annotations": p["metadata"].get("annotations"), "hostname": p["spec"].get("hostname"),
                        "env": p["spec"]["containers"][0].get("env"), "phase": p["status"]["phase"]}
                       for p in done["pods"]), key=lambda p: str(p["generateName"]))
        return {"job": done["job"], "pods": made}

    await pair.run(scenario, pods=True)


@pytest.mark.parametrize(("annotations", "limit"), [
    pytest.param({"sim.kto.dev/duration": "200ms", "sim.kto.dev/fail-times": "2"}, 6, id="restarts then succeeds"),
    pytest.param({"sim.kto.dev/duration": "200ms", "sim.kto.dev/exit-code": "1"}, 1, id="restarts past the limit"),
])
async def test_job_restarting_on_failure(pair: Pair, annotations: dict[str, str], limit: int) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", batch_jobs(ns), job("j", annotations, restart="OnFailure", backoffLimit=limit))
        done = await finish(api, ns)
        # How far the restarts got before the pod was stopped depends on timing: not compared.
        return {"job": done["job"], "pods": len(done["pods"])}

    await pair.run(scenario, pods=True)


async def test_job_past_its_deadline(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", batch_jobs(ns), job("j", {"sim.kto.dev/duration": "60s"}, activeDeadlineSeconds=2))
        done = await finish(api, ns)
        return {"job": done["job"], "pods": len(done["pods"])}

    await pair.run(scenario, pods=True)


async def test_job_suspended_and_resumed(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        await api.request("POST", batch_jobs(ns), job("j", {"sim.kto.dev/duration": "60s"}))
        running = await api.wait_for(batch_jobs(ns, "j"), lambda r: (r.body.get("status") or {}).get("ready") == 1,
                                     JOB_TIMEOUT)
        out["running"] = alike(running.body["status"])
        await api.request("PATCH", batch_jobs(ns, "j"), {"spec": {"suspend": True}}, ctype=MERGE)
        suspended = await api.wait_for(
            batch_jobs(ns, "j"), lambda r: "Suspended" in conditions(r) and r.body["status"].get("terminating") == 0,
            JOB_TIMEOUT)
        out["suspended"] = alike(suspended.body["status"])
        out["pods when suspended"] = len((await api.wait_for(pods(ns), lambda r: not r.body["items"])).body["items"])
        await api.request("PATCH", batch_jobs(ns, "j"), {"spec": {"suspend": False}}, ctype=MERGE)
        resumed = await api.wait_for(batch_jobs(ns, "j"), lambda r: (r.body.get("status") or {}).get("ready") == 1,
                                     JOB_TIMEOUT)
        out["resumed"] = alike(resumed.body["status"])
        return out

    await pair.run(scenario, pods=True)


async def test_job_created_suspended(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", batch_jobs(ns), job("j", {"sim.kto.dev/duration": "1s"}, suspend=True))
        got = await api.wait_for(batch_jobs(ns, "j"), lambda r: "Suspended" in conditions(r), JOB_TIMEOUT)
        return {"job": alike(status_of(got)), "pods": len((await api.request("GET", pods(ns))).body["items"])}

    await pair.run(scenario, pods=True)


@pytest.mark.parametrize("policy", ["Background", "Foreground", "Orphan"])
async def test_job_deleted_with_its_pods(pair: Pair, policy: str) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        out: Obj = {}
        await api.request("POST", batch_jobs(ns), job("j", {"sim.kto.dev/duration": "60s"}, parallelism=2))
        await api.wait_for(batch_jobs(ns, "j"), lambda r: (r.body.get("status") or {}).get("ready") == 2, JOB_TIMEOUT)
        deleted = await api.request("DELETE", batch_jobs(ns, "j"), {"apiVersion": "v1", "kind": "DeleteOptions",
                                                                    "propagationPolicy": policy})
        out["delete"] = deleted.code
        gone = await api.wait_for(batch_jobs(ns, "j"), lambda r: r.code == 404, JOB_TIMEOUT)
        out["job"] = gone.code
        if policy == "Orphan":
            # The pods stay, without owner; the Job controller then drops their finalizer.
            left = await api.wait_for(pods(ns), lambda r: all(not p["metadata"].get("finalizers")
                                                              and not p["metadata"].get("ownerReferences")
                                                              for p in r.body["items"]), JOB_TIMEOUT)
            out["pods"] = [{k: p["metadata"].get(k) for k in ("ownerReferences", "finalizers", "labels")}
                           for p in left.body["items"]]
        else:
            left = await api.wait_for(pods(ns), lambda r: not r.body["items"], JOB_TIMEOUT)
            out["pods"] = len(left.body["items"])
        return out

    await pair.run(scenario, pods=True)


_TEMPLATE_LABELS = {"metadata": {"labels": {"app": "x"}}}


@pytest.mark.parametrize("body", [
    pytest.param(job("j", suspend=True), id="defaults"),
    pytest.param(dict(job("j", suspend=True), metadata={"name": "j", "labels": {"team": "t"}}), id="own labels"),
    pytest.param(job("j", suspend=True, parallelism=3), id="parallelism only"),
    pytest.param(job("j", suspend=True, completions=4), id="completions only"),
    pytest.param(job("j", suspend=True, manualSelector=True, selector={"matchLabels": {"app": "x"}}),
                 id="manual selector"),
    pytest.param(job("j", selector={"matchLabels": {"app": "x"}}), id="selector not generated"),
    pytest.param(job("j", restart="Always"), id="restartPolicy Always"),
    pytest.param(job("j", parallelism=-1, backoffLimit=-2), id="negative counts"),
    pytest.param(dict(job("j"), spec={"template": {"spec": {"restartPolicy": "Never", "containers": []}}}),
                 id="no containers"),
])
async def test_job_defaults_and_validation(pair: Pair, body: Obj) -> None:
    body = copy.deepcopy(body)
    if body["spec"].get("manualSelector") or body["spec"].get("selector"):
        body["spec"]["template"].update(copy.deepcopy(_TEMPLATE_LABELS))
    if body["metadata"].get("labels"):
        body["spec"]["template"].update(copy.deepcopy(_TEMPLATE_LABELS))

    async def scenario(api: Api, ns: str) -> Any:
        created = await api.request("POST", batch_jobs(ns), body)
        if created.code == 422:
            # The generated selector in the message carries the Job's uid.
            created.body["message"] = re.sub(r'"batch.kubernetes.io/controller-uid":"[^"]*"', '"<uid>"',
                                             created.body["message"])
            for cause in created.body["details"]["causes"]:
                cause["message"] = re.sub(r'"batch.kubernetes.io/controller-uid":"[^"]*"', '"<uid>"', cause["message"])
        return status_of(created)

    await pair.run(scenario)


async def test_kubectl_get_jobs(pair: Pair) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await api.request("POST", batch_jobs(ns), job("done", {"sim.kto.dev/duration": "200ms"}))
        await api.request("POST", batch_jobs(ns), job("held", suspend=True, parallelism=3))
        await api.request("POST", batch_jobs(ns), job("pair", suspend=True, parallelism=2, completions=2))
        await api.wait_for(batch_jobs(ns, "done"), terminal, JOB_TIMEOUT)
        for name in ("held", "pair"):
            await api.wait_for(batch_jobs(ns, name), lambda r: "Suspended" in conditions(r), JOB_TIMEOUT)
        listed = await _kubectl(api, ns, "get", "jobs")
        # NAME STATUS COMPLETIONS; DURATION and AGE are times.
        rows = [re.split(r"\s{2,}", line)[:3] for line in listed["stdout"].splitlines()]
        return {"code": listed["code"], "rows": rows, "stderr": listed["stderr"]}

    await pair.run(scenario, pods=True)
