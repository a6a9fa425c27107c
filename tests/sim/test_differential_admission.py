"""sim/ held against the real kube-apiserver: admission webhooks (sim/apiserver/admitting.py).

A webhook of the test's own (HTTPS with a CA of its own, answering by path) is
registered on both servers with the same configurations, scoped to the
scenario's namespace (the real cluster is shared by the tests of a pytest
worker) and removed at the end. What is compared: the answers to the writes
(codes, Status bodies, ``Warning`` headers, the stored objects) and what the
webhook was sent (operation, kinds and resources, names, namespace, dryRun,
options, the object and the old object). Each configuration carries a probe
webhook, so a scenario waits until kube-apiserver has taken it up (an informer,
about a second) before it writes.

Hidden beyond ``normalise``: the user the review names (the kubeconfig's on each side).
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from realparts import ports
from services.webhook import certifying
from tests.sim import test_differential as differential
from tests.sim.test_differential import Api, Obj, Pair

pair = differential.pair
sim_side = differential.sim_side

PROBE_LABEL = "kto-probe"
ROOT_CA = "kube-root-ca.crt"
_NOT_PROBE = {"matchExpressions": [{"key": PROBE_LABEL, "operator": "DoesNotExist"}]}


class Hook:
    """The test's webhook: what it answers depends on the path; every review is recorded."""

    def __init__(self, certificates: certifying.Files) -> None:
        self.files = certificates
        self.received: list[tuple[str, str, Obj]] = []
        """(side, path, request) of every review but the probes'."""
        self.app = web.Application()
        self.app.router.add_post("/{side}/{what}", self._answer)
        self.runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def start(self) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.files.cert, self.files.key)
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        what = request.match_info["what"]
        review = await request.json()
        uid = review["request"]["uid"]
        if what == "probe":
            return web.json_response(_response(uid, False, status={"code": 403, "message": "probe"}))
        if review["request"].get("name") == ROOT_CA:
            # kube-controller-manager's own ConfigMap in each new namespace: on a loaded machine it
            # can be written after the scenario's webhooks are, and is no part of the scenario.
            return web.json_response(_response(uid, True))
        self.received.append((request.match_info["side"], what, review["request"]))
        if what == "deny":
            return web.json_response(_response(uid, False, warnings=["first, a warning"], status={
                "code": 403, "reason": "Forbidden", "message": "no widgets today",
                "details": {"causes": [{"field": "data.widget", "message": "not today"}]}}))
        if what == "deny-bare":
            return web.json_response(_response(uid, False))
        if what == "deny-low-code":
            return web.json_response(_response(uid, False, status={"code": 200, "reason": "Teapot"}))
        if what == "warn":
            return web.json_response(_response(uid, True, warnings=["look out", 'a "quoted" one']))
        if what == "annotate":
            ops = [{"op": "add", "path": "/metadata/annotations", "value": {"mutated": "yes"}}]
            return web.json_response(_response(uid, True, patchType="JSONPatch",
                                               patch=base64.b64encode(json.dumps(ops).encode()).decode()))
        if what == "bad-uid":
            return web.json_response(_response("someone-else", True))
        if what == "bad-kind":
            return web.json_response({"apiVersion": "v1", "kind": "Status"})
        if what == "sleep":
            await asyncio.sleep(3)
        return web.json_response(_response(uid, True))


def _response(uid: str, allowed: bool, **more: Any) -> Obj:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": allowed, **more}}


@pytest.fixture
async def hook(tmp_path: pathlib.Path) -> AsyncIterator[Hook]:
    made = Hook(certifying.ensure(tmp_path / "certs"))
    await made.start()
    try:
        yield made
    finally:
        await made.stop()


def webhook(hook: Hook, side: str, name: str, path: str, ns: str, *, resources: list[str] | None = None,
            operations: list[str] | None = None, groups: list[str] | None = None, versions: list[str] | None = None,
            url: str | None = None, **more: Any) -> Obj:
    return {
        "name": f"{name}.test.kto.dev",
        "clientConfig": {"url": f"{url or hook.url}/{side}/{path}",
                         "caBundle": base64.b64encode(hook.files.ca.read_bytes()).decode()},
        "rules": [{"apiGroups": groups or [""], "apiVersions": versions or ["v1"],
                   "operations": operations or ["CREATE"], "resources": resources or ["configmaps"]}],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "objectSelector": _NOT_PROBE,
        "sideEffects": "None", "admissionReviewVersions": ["v1"], **more,
    }


async def register(api: Api, hook: Hook, ns: str, *, mutating: tuple[Obj, ...] | list[Obj] = (),
                   validating: tuple[Obj, ...] | list[Obj] = ()) -> None:
    """Both configurations (each with a probe webhook), then wait until the server calls them."""
    probe = webhook(hook, api.name, "probe", "probe", ns, objectSelector={"matchLabels": {PROBE_LABEL: "yes"}})
    for kind, plural, hooks in (("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", mutating),
                                ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", validating)):
        made = await api.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": f"{ns}-{plural}"},
            "webhooks": [probe, *hooks]})
        assert made.code == 201, made
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "labels": {PROBE_LABEL: "yes"}}}
    for _ in range(200):
        reply = await api.request("POST", differential.cms(ns), body, query={"dryRun": "All"})
        if reply.code == 403 and "probe" in str(reply.body):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{api.name}: the webhooks were never called: {reply}")


async def unregister(api: Api, ns: str) -> None:
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        await api.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{ns}-{plural}")


async def send(api: Api, method: str, path: str, body: Any, ctype: str = "application/json") -> Obj:
    """The answer with its ``Warning`` headers."""
    assert api._session is not None
    async with api._session.request(method, api.server + path, data=json.dumps(body).encode(), ssl=api._ssl,
                                    headers={"Content-Type": ctype, "Accept": "application/json"}) as response:
        return {"code": response.status, "body": await response.json(),
                "warnings": response.headers.getall("Warning", [])}


def sent(hook: Hook, side: str) -> list[Obj]:
    """What the webhook got from one side, without the user (each side's kubeconfig's)."""
    return [{"path": what, **{k: v for k, v in request.items() if k not in ("uid", "userInfo")}}
            for where, what, request in hook.received if where == side]


def unsided(api: Api, value: Any) -> Any:
    """``value`` with the side's part of the webhook URLs (``/sim/``, ``/real/``) made the same."""
    return json.loads(json.dumps(value).replace(f"/{api.name}/", "/<side>/"))


def cm(name: str, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}, "data": {"a": "b"}}


async def test_a_denial_is_worded_as_kube_apiserver_words_it(pair: Pair, hook: Hook) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await register(api, hook, ns, validating=[
            webhook(hook, api.name, "deny", "deny", ns),
            webhook(hook, api.name, "bare", "deny-bare", ns, objectSelector={"matchLabels": {"deny": "bare"}}),
            webhook(hook, api.name, "low", "deny-low-code", ns, objectSelector={"matchLabels": {"deny": "low"}}),
        ])
        try:
            denied = await send(api, "POST", differential.cms(ns), cm("widgets"))
            hook_names = {"bare": "deny-bare", "low": "deny-low-code"}
            others = {}
            for label in hook_names:
                # Only the first failing validating webhook (in order) is reported.
                await unregister(api, ns)
                await register(api, hook, ns, validating=[
                    webhook(hook, api.name, label, hook_names[label], ns, objectSelector={"matchLabels": {"deny": label}})])
                others[label] = await send(api, "POST", differential.cms(ns), cm(label, labels={"deny": label}))
            return unsided(api, {"denied": denied, **others})
        finally:
            await unregister(api, ns)

    await pair.run(scenario)


async def test_mutating_webhooks_patch_before_validating_ones_see_the_object(pair: Pair, hook: Hook) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await register(
            api, hook, ns,
            mutating=[webhook(hook, api.name, "annotate", "annotate", ns, operations=["CREATE", "UPDATE"])],
            validating=[webhook(hook, api.name, "record", "record", ns, operations=["CREATE", "UPDATE"]),
                        webhook(hook, api.name, "warn", "warn", ns, operations=["CREATE", "UPDATE"])])
        try:
            created = await send(api, "POST", differential.cms(ns), cm("widgets", generateName="ignored-"))
            generated = await send(api, "POST", differential.cms(ns), {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}})
            patched = await send(api, "PATCH", differential.cms(ns, "widgets"), {"data": {"a": "c"}},
                                 ctype="application/merge-patch+json")
            name = generated["body"]["metadata"]["name"]
            # Validating webhooks are called in parallel by kube-apiserver: in no particular order.
            return {"created": created, "patched": patched, "generated name": name.startswith("gen-"),
                    "sent": sorted((_masked(item, name) for item in sent(hook, api.name)), key=_order)}
        finally:
            await unregister(api, ns)

    await pair.run(scenario)


def _order(item: Obj) -> tuple[str, str, str]:
    meta = item["object"]["metadata"]
    return item["operation"], str(meta.get("name") or meta.get("generateName")), item["path"]


def _masked(item: Obj, generated: str) -> Obj:
    """A review with the generated name (random on each side) replaced."""
    return json.loads(json.dumps(item).replace(generated, "gen-<random>"))


async def test_a_webhook_that_cannot_answer_fails_closed_or_open_by_its_policy(pair: Pair, hook: Hook) -> None:
    closed = f"https://127.0.0.1:{ports.free()}"

    async def scenario(api: Api, ns: str) -> Any:
        await register(api, hook, ns, validating=[
            webhook(hook, api.name, "down", "down", ns, url=closed, objectSelector={"matchLabels": {"case": "down"}}),
            webhook(hook, api.name, "ignored", "down", ns, url=closed, failurePolicy="Ignore",
                    objectSelector={"matchLabels": {"case": "ignored"}}),
            webhook(hook, api.name, "slow", "sleep", ns, timeoutSeconds=1, objectSelector={"matchLabels": {"case": "slow"}}),
            webhook(hook, api.name, "bad-uid", "bad-uid", ns, objectSelector={"matchLabels": {"case": "bad-uid"}}),
            webhook(hook, api.name, "bad-kind", "bad-kind", ns, objectSelector={"matchLabels": {"case": "bad-kind"}}),
        ])
        try:
            return unsided(api, {case: await send(api, "POST", differential.cms(ns), cm(case, labels={"case": case}))
                                 for case in ("down", "ignored", "slow", "bad-uid", "bad-kind")})
        finally:
            await unregister(api, ns)

    await pair.run(scenario)


async def test_a_delete_is_sent_with_the_stored_object_as_old_and_a_denial_keeps_the_object(
    pair: Pair, hook: Hook,
) -> None:
    """DELETE reaches validating webhooks with ``object: null``, the stored object as ``oldObject``
    and DeleteOptions; a denial or a webhook that is down (failurePolicy Fail) refuses the delete."""
    closed = f"https://127.0.0.1:{ports.free()}"

    async def scenario(api: Api, ns: str) -> Any:
        await register(api, hook, ns, validating=[
            webhook(hook, api.name, "deny-delete", "deny", ns, operations=["DELETE"],
                    objectSelector={"matchLabels": {"case": "deny"}}),
            webhook(hook, api.name, "down-delete", "down", ns, operations=["DELETE"], url=closed,
                    objectSelector={"matchLabels": {"case": "down"}}),
            webhook(hook, api.name, "allow-delete", "allow", ns, operations=["DELETE"],
                    objectSelector={"matchLabels": {"case": "allow"}}),
        ])
        try:
            answers = {}
            for case in ("deny", "down", "allow"):
                await send(api, "POST", differential.cms(ns), cm(case, labels={"case": case}))
                answers[case] = await send(api, "DELETE", differential.cms(ns, case), None)
                answers[f"{case} then"] = (await send(api, "GET", differential.cms(ns, case), None))["code"]
            reviews = sorted(sent(hook, api.name), key=lambda item: str(item["path"]))
            return unsided(api, {"answers": answers, "reviews": reviews})
        finally:
            await unregister(api, ns)

    await pair.run(scenario)


async def test_selectors_and_rules_choose_the_webhooks_called(pair: Pair, hook: Hook) -> None:
    async def scenario(api: Api, ns: str) -> Any:
        await register(api, hook, ns, validating=[
            webhook(hook, api.name, "labelled", "labelled", ns, operations=["*"], resources=["configmaps"],
                    objectSelector={"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}),
            webhook(hook, api.name, "other-namespace", "other-namespace", ns,
                    namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}),
            webhook(hook, api.name, "secrets", "secrets", ns, resources=["secrets"]),
            webhook(hook, api.name, "status", "status", ns, operations=["UPDATE"], resources=["pods/status"]),
        ])
        try:
            await send(api, "POST", differential.cms(ns), cm("plain"))
            await send(api, "POST", differential.cms(ns), cm("team-a", labels={"team": "a"}))
            # The old object's labels count too: a label taken off still calls the webhook.
            await send(api, "PATCH", differential.cms(ns, "team-a"), {"metadata": {"labels": {"team": None}}},
                       ctype="application/merge-patch+json")
            await send(api, "DELETE", differential.cms(ns, "team-a"), None)
            return sorted((item["path"], item["operation"], item["name"]) for item in sent(hook, api.name))
        finally:
            await unregister(api, ns)

    await pair.run(scenario)


async def test_equivalent_versions_of_a_crd_are_sent_in_the_rules_version(pair: Pair, hook: Hook) -> None:
    """MPIJob is one CRD with v1 and v2beta1: under matchPolicy Equivalent a v1 write is sent to a webhook
    whose rule names v2beta1, in v2beta1; under Exact it is not sent (how kto's own registration keeps
    MPIJob v1 away from the v2beta1 validator)."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "legacy"},
           "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "l", "image": "mpi"}]}}}}}}

    async def scenario(api: Api, ns: str) -> Any:
        rule = {"groups": ["kubeflow.org"], "versions": ["v2beta1"], "resources": ["mpijobs"]}
        await register(api, hook, ns, validating=[
            webhook(hook, api.name, "equivalent", "equivalent", ns, **rule),
            webhook(hook, api.name, "exact", "exact", ns, matchPolicy="Exact", **rule)])
        try:
            created = await send(api, "POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/mpijobs", job)
            return {"created": created["code"], "sent": [
                (item["path"], item["kind"], item["requestKind"], item["resource"], item["object"]["apiVersion"])
                for item in sent(hook, api.name)]}
        finally:
            await unregister(api, ns)

    await pair.run(scenario)
