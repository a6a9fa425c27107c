"""The sim answers TokenRequest, TokenReview and SubjectAccessReview as kube-apiserver does: the same
questions asked of both tiers get the same answers (who a ServiceAccount's token is, and what RBAC
lets a user, a group or a ServiceAccount do)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kto.console import authenticating
from shared.kube import clients, resources
from tests.fixtures.pipeline import Pipeline

RBAC = "rbac.authorization.k8s.io/v1"
CLUSTERROLES = resources.ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole",
                                      namespaced=False)
CLUSTERROLEBINDINGS = resources.ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                                             "ClusterRoleBinding", namespaced=False)


async def token_of(client: clients.KubeClient, namespace: str, name: str) -> str:
    made = await client.request("POST", resources.SERVICEACCOUNTS.path(namespace, name, "token"), body={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    assert made["kind"] == "TokenRequest" and made["status"]["expirationTimestamp"], made
    return str(made["status"]["token"])


async def review(client: clients.KubeClient, token: str) -> dict[str, Any]:
    answer = await client.create(authenticating.TOKENREVIEWS, None, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
    status: dict[str, Any] = answer["status"]
    return status


async def allowed(client: clients.KubeClient, who: dict[str, Any], namespace: str, verb: str, resource: str,
                  group: str = "", name: str = "", subresource: str = "") -> bool:
    attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": resource, "name": name,
                  "subresource": subresource}
    answer = await client.create(authenticating.SUBJECTACCESSREVIEWS, None, {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {**who, "resourceAttributes": {k: v for k, v in attributes.items() if v}}})
    return answer["status"].get("allowed") is True


@pytest.fixture
async def place(pipeline: Pipeline) -> AsyncIterator[tuple[str, str, str]]:
    """(namespace, another namespace, a name for cluster-scoped objects) of this test, removed after it."""
    tag = uuid.uuid4().hex[:8]
    made = (f"rev-a-{tag}", f"rev-b-{tag}")
    for namespace in made:
        await pipeline.client.create(resources.NAMESPACES, None, {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        yield made[0], made[1], f"kto-review-{tag}"
    finally:
        for rt, namespace, name in ((CLUSTERROLEBINDINGS, None, f"kto-review-{tag}"),
                                    (CLUSTERROLES, None, f"kto-review-{tag}"),
                                    *((resources.NAMESPACES, None, n) for n in made)):
            with contextlib.suppress(clients.ApiError):
                await pipeline.client.delete(rt, namespace, name)


async def test_a_service_accounts_token_is_reviewed_as_kube_apiserver_reviews_it(
        pipeline: Pipeline, place: tuple[str, str, str]) -> None:
    namespace, _, _ = place
    client = pipeline.client
    account = await client.create(resources.SERVICEACCOUNTS, namespace, {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}})
    token = await token_of(client, namespace, "reader")
    status = await review(client, token)
    assert status["authenticated"] is True
    user = status["user"]
    assert (user["username"], user["uid"]) == (f"system:serviceaccount:{namespace}:reader",
                                               account["metadata"]["uid"])
    assert {"system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"} <= set(
        user["groups"])
    assert not (await review(client, "not-a-token")).get("authenticated")

    await client.delete(resources.SERVICEACCOUNTS, namespace, "reader")
    for _ in range(100):  # kube-apiserver looks the ServiceAccount up through its informer
        if not (await review(client, token)).get("authenticated"):
            break
        await asyncio.sleep(0.1)
    assert not (await review(client, token)).get("authenticated"), "a deleted ServiceAccount's token"
    with pytest.raises(clients.ApiError) as refused:
        await token_of(client, namespace, "nobody")
    assert refused.value.code == 404


async def test_access_reviews_follow_roles_cluster_roles_and_their_bindings(
        pipeline: Pipeline, place: tuple[str, str, str]) -> None:
    a, b, cluster_name = place
    client = pipeline.client
    sa = f"system:serviceaccount:{a}:reader"
    as_sa = {"user": sa, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{a}", "system:authenticated"]}
    as_alice = {"user": "alice", "groups": ["system:authenticated"]}
    as_team = {"user": "bob", "groups": ["team", "system:authenticated"]}
    await client.create(resources.ROLES, a, {"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "r"}, "rules": [
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["list", "get"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["settings"]}]})
    await client.create(resources.ROLEBINDINGS, a, {
        "apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "r"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": a},
                     {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]})
    await client.create(CLUSTERROLES, None, {
        "apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": cluster_name},
        "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["*"], "verbs": ["list"]}]})
    await client.create(CLUSTERROLEBINDINGS, None, {
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": cluster_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "team"}]})
    cases = [
        (as_sa, a, "list", "pytorchjobs", "kubeflow.org", "", "", True),
        (as_alice, a, "get", "pytorchjobs", "kubeflow.org", "", "", True),
        (as_sa, b, "list", "pytorchjobs", "kubeflow.org", "", "", False),
        (as_sa, a, "list", "tfjobs", "kubeflow.org", "", "", False),
        (as_sa, a, "delete", "pytorchjobs", "kubeflow.org", "", "", False),
        (as_sa, a, "get", "pods", "", "p", "log", True),
        (as_sa, a, "get", "pods", "", "p", "", False),
        (as_sa, a, "get", "configmaps", "", "settings", "", True),
        (as_sa, a, "get", "configmaps", "", "other", "", False),
        (as_sa, a, "list", "configmaps", "", "", "", False),
        (as_team, b, "list", "tfjobs", "kubeflow.org", "", "", True),
        (as_team, "", "list", "tfjobs", "kubeflow.org", "", "", True),
        (as_team, b, "get", "tfjobs", "kubeflow.org", "", "", False),
        (as_alice, "", "list", "pytorchjobs", "kubeflow.org", "", "", False),
        ({"user": "root", "groups": ["system:masters"]}, b, "delete", "nodes", "", "", "", True),
    ]
    for who, namespace, verb, resource, group, name, subresource, expected in cases:
        got = await allowed(client, who, namespace, verb, resource, group, name, subresource)
        assert got is expected, (who["user"], namespace, verb, resource, name, subresource)
