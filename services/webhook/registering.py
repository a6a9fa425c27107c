"""The ValidatingWebhookConfiguration and MutatingWebhookConfiguration that register kto's webhook.

In: the webhook's base URL, the CA that signed its serving certificate, and
optionally a name and a namespace selector. Out: the two configurations as
plain dicts (``admissionregistration.k8s.io/v1``), and ``register`` /
``unregister`` to create-or-replace / delete them through a ``KubeClient``.

Every webhook is ``failurePolicy: Fail`` (as upstream's), ``sideEffects:
None``, ``matchPolicy: Exact`` and has one rule naming one group, version and
resource of kto's, for CREATE and UPDATE: a webhook that is down refuses
kto's kinds and nothing else. MPIJob's rule names ``v2beta1`` only — with
``Exact`` a ``kubeflow.org/v1`` MPIJob (one CRD, two versions) is never sent
to it. The default namespace selector leaves out ``kube-system``
(docs/admission.md).
"""

from __future__ import annotations

import base64
import copy
from typing import Any

from shared.core import admitting, families
from shared.kube import clients, resources

Obj = dict[str, Any]

API_VERSION = "admissionregistration.k8s.io/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server puts on every namespace: its name."""
TIMEOUT_SECONDS = 10
"""Seconds the API server waits for an answer (its default and upstream's)."""

DEFAULT_NAMESPACE_SELECTOR: Obj = {
    "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system"]}],
}


def cluster_url(url: str, context: str) -> str:
    """The base URL of the webhook at ``url`` for the cluster of a kubeconfig ``context``: its reviews read
    from that cluster (``services.webhook.serving.Readers``)."""
    return f"{url.rstrip('/')}/clusters/{context}"


def only_namespace(namespace: str) -> Obj:
    """A namespace selector matching one namespace (by the name label every namespace carries)."""
    return {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}


def _webhook(hook: admitting.Hook, url: str, ca_bundle: bytes, selector: Obj, timeout: int) -> Obj:
    target = hook.target
    webhook: Obj = {
        "name": hook.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": url.rstrip("/") + hook.path, "caBundle": base64.b64encode(ca_bundle).decode()},
        "failurePolicy": "Fail",
        "matchPolicy": "Exact",
        "namespaceSelector": copy.deepcopy(selector),
        "objectSelector": {},
        "rules": [{
            "apiGroups": [target.group], "apiVersions": [target.version], "operations": ["CREATE", "UPDATE"],
            "resources": [target.plural], "scope": "Cluster" if target.cluster_scoped else "Namespaced",
        }],
        "sideEffects": "None",
        "timeoutSeconds": timeout,
    }
    if hook.mutating:
        webhook["reinvocationPolicy"] = "Never"
    return webhook


def configurations(url: str, ca_bundle: bytes, *, name: str = "kto", namespace_selector: Obj | None = None,
                   timeout_seconds: int = TIMEOUT_SECONDS) -> list[Obj]:
    """``<name>-validating-webhook-configuration`` and ``<name>-mutating-webhook-configuration``
    for the webhook at ``url``, whose certificate ``ca_bundle`` (PEM) signed."""
    selector = DEFAULT_NAMESPACE_SELECTOR if namespace_selector is None else namespace_selector
    labels = {"app.kubernetes.io/name": "kto", "app.kubernetes.io/component": "webhook"}
    made = []
    for mutating, kind in ((False, "ValidatingWebhookConfiguration"), (True, "MutatingWebhookConfiguration")):
        made.append({
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": f"{name}-{'mutating' if mutating else 'validating'}-webhook-configuration",
                         "labels": labels},
            "webhooks": [_webhook(hook, url, ca_bundle, selector, timeout_seconds)
                         for hook in families.REGISTRY.hooks if hook.mutating == mutating],
        })
    return made


async def register(client: clients.KubeClient, manifests: list[Obj]) -> None:
    """Create each configuration, or replace the one of that name."""
    for manifest in manifests:
        rt = resources.for_manifest(manifest)
        try:
            await client.create(rt, None, manifest)
        except clients.ApiError as exc:
            if not exc.already_exists:
                raise
            current = await client.get(rt, None, manifest["metadata"]["name"])
            meta = dict(manifest["metadata"], resourceVersion=current["metadata"]["resourceVersion"])
            await client.replace(rt, None, dict(manifest, metadata=meta))


async def unregister(client: clients.KubeClient, manifests: list[Obj]) -> None:
    """Delete each configuration (one already gone is fine)."""
    for manifest in manifests:
        try:
            await client.delete(resources.for_manifest(manifest), None, manifest["metadata"]["name"])
        except clients.ApiError as exc:
            if not exc.not_found:
                raise
