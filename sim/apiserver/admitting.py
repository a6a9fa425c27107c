"""Admission webhooks, called as kube-apiserver's MutatingAdmissionWebhook and
ValidatingAdmissionWebhook plugins call them.

In: a create, update, patch, server-side apply or delete the server is about to make,
and the Mutating- and ValidatingWebhookConfigurations in the store. Out: the
object written as the mutating webhooks patched it, after the validating
webhooks allowed it; or the ``ApiError`` kube-apiserver answers instead, worded
as it words it:

* a denial: ``admission webhook "<name>" denied the request: <message>``, with
  the webhook's code (at least 400), reason and details;
* a webhook that cannot be called or answers wrongly, under ``failurePolicy:
  Fail`` (the default): 500 ``Internal error occurred: failed calling webhook
  "<name>": failed to call webhook: Post "<url>?timeout=10s": <why>`` (or
  ``received invalid webhook response: <why>``); under ``Ignore`` the webhook
  is skipped.

As kube-apiserver: configurations are taken in name order, the mutating ones
(each webhook in turn, each seeing the previous one's patch) before the
validating ones; a webhook is called when a rule matches (operations,
apiGroups, apiVersions, resources with ``*`` and subresources, scope), its
namespaceSelector matches the namespace's labels (a missing namespace: 404)
and its objectSelector the new or the old object's labels. ``matchPolicy:
Equivalent`` (the default) also matches another version of the same CRD, and
the webhook is sent the object in that version. Mutating webhooks see the
object as the request makes it; validating webhooks see it as it would be
stored (name generated, defaults applied, schema checked), with ``resourceVersion``
unset on create. The object written is the one validated: a write that raced
with another on the same object is admitted again. Responses' ``warnings``
become ``Warning`` headers. Webhook configurations themselves are never sent
to webhooks.

Kept simpler (docs/sim.md): ``matchConditions`` (CEL) are not evaluated (the
webhook is called as if they held), ``reinvocationPolicy`` is not followed,
a ``clientConfig.service`` cannot be reached (the sim has no cluster network:
a call failure), v1 reviews only, and the configurations are not validated
when written.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import ssl
import uuid
from typing import Any

import aiohttp

from sim import errors
from sim.apiserver import patching, resources
from sim.apiserver import store as sim_store

log = logging.getLogger(__name__)

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
MUTATING = f"mutatingwebhookconfigurations.{GROUP}"
VALIDATING = f"validatingwebhookconfigurations.{GROUP}"
_NEVER_ADMITTED = frozenset({MUTATING, VALIDATING})
"""kube-apiserver sends no admission review for the webhook configurations themselves."""
DEFAULT_TIMEOUT = 10
RACE_ATTEMPTS = 5
"""Times a patch or an update is admitted again when the object changed meanwhile."""
REVIEW_VERSION = "admission.k8s.io/v1"


class Denied(errors.ApiError):
    """An ApiError that carries the warnings the webhooks gave before it."""

    def __init__(self, error: errors.ApiError, warnings: list[str]) -> None:
        super().__init__(error.code, error.reason, error.message, error.causes, error.retry_after,
                         details=error.details)
        self.warnings = warnings

    def status(self) -> dict[str, Any]:
        body = super().status()
        if not body.get("reason"):
            body.pop("reason", None)  # a denial without a reason has none (metav1.Status omits it)
        return body


@dataclasses.dataclass(frozen=True)
class Request:
    """What is written, as the admission attributes of kube-apiserver."""

    operation: str
    """CREATE, UPDATE or DELETE."""
    res: resources.Resource
    """The kind, in the version of the request."""
    namespace: str | None
    name: str
    subresource: str | None
    dry_run: bool
    field_manager: str | None


@dataclasses.dataclass(frozen=True)
class _Call:
    """A matching webhook and the version it is sent the object in."""

    configuration: str
    webhook: Obj
    mutating: bool
    res: resources.Resource

    @property
    def name(self) -> str:
        return str(self.webhook.get("name") or "")


def _selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against labels; empty matches all."""
    if not isinstance(selector, dict):
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, dict):
            return False
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            ok = False
        if not ok:
            return False
    return True


def _labels(obj: Obj | None) -> dict[str, str] | None:
    if obj is None:
        return None
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def _rule_matches(rule: Any, request: Request, version: str) -> bool:
    """kube's rules.Matcher: scope, operation, group, version, resource[/subresource]."""
    if not isinstance(rule, dict):
        return False
    res = request.res

    def has(field: str, value: str) -> bool:
        listed = rule.get(field) or []
        return "*" in listed or value in listed

    scope = rule.get("scope") or "*"
    if scope == "Cluster" and request.namespace or scope == "Namespaced" and not request.namespace:
        return False
    if not (has("operations", request.operation) and has("apiGroups", res.group) and has("apiVersions", version)):
        return False
    for listed in rule.get("resources") or []:
        resource, _, sub = str(listed).partition("/")
        if (resource in ("*", res.plural)) and (sub == "*" or sub == (request.subresource or "")):
            return True
    return False


class Admission:
    """The admission plugins of one server: which webhooks a write calls, and calling them."""

    def __init__(self, store: sim_store.Store) -> None:
        self.store = store
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        """Close the client session; safe to call twice."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _configurations(self, key: str) -> list[Obj]:
        if not self.store.count(key):
            return []  # the common case, on every write: nothing registered
        return sorted(self.store.iter_objects(key), key=lambda c: str(c["metadata"].get("name")))

    def _matching(self, request: Request) -> list[_Call]:
        """Webhooks whose rules match the request (selectors are checked per object, later)."""
        if request.res.key in _NEVER_ADMITTED or request.operation not in ("CREATE", "UPDATE", "DELETE"):
            return []
        calls: list[_Call] = []
        for mutating, key in ((True, MUTATING), (False, VALIDATING)):
            for configuration in self._configurations(key):
                for webhook in configuration.get("webhooks") or []:
                    if not isinstance(webhook, dict):
                        continue
                    res = self._version_for(webhook, request)
                    if res is not None:
                        calls.append(_Call(str(configuration["metadata"].get("name")), webhook, mutating, res))
        return calls

    def _version_for(self, webhook: Obj, request: Request) -> resources.Resource | None:
        """The version of the kind the webhook is called with: the request's, or under
        ``matchPolicy: Equivalent`` another served version of the same CRD its rules name."""
        rules = webhook.get("rules") or []
        res = request.res
        if any(_rule_matches(rule, request, res.version or res.versions[0]) for rule in rules):
            return res
        if (webhook.get("matchPolicy") or "Equivalent") != "Equivalent" or not res.multi_version:
            return None
        for version in res.versions:
            if version != res.version and any(_rule_matches(rule, request, version) for rule in rules):
                return res.at(version)
        return None

    def begin(self, request: Request) -> Review | None:
        """The admission of one write, or None when no webhook's rules match it (the write goes
        straight to the store)."""
        calls = self._matching(request)
        return Review(self, request, calls) if calls else None

    # --- calling ------------------------------------------------------------------------------

    def _session_for(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _ssl(self, bundle: Any) -> ssl.SSLContext:
        key = str(bundle or "")
        context = self._contexts.get(key)
        if context is None:
            if key:
                try:
                    data = base64.b64decode(key, validate=True).decode()
                except (binascii.Error, UnicodeDecodeError) as exc:
                    raise _CallFailed(f"failed to call webhook: invalid caBundle: {exc}") from None
                try:
                    context = ssl.create_default_context(cadata=data)
                except ssl.SSLError as exc:
                    raise _CallFailed(f"failed to call webhook: invalid caBundle: {exc.reason or exc}") from None
            else:
                context = ssl.create_default_context()
            self._contexts[key] = context
        return context

    async def call(self, call: _Call, review: Obj) -> Obj:
        """POST the review to the webhook; its verified response, or ``_CallFailed`` saying why."""
        config = call.webhook.get("clientConfig") or {}
        timeout = call.webhook.get("timeoutSeconds") or DEFAULT_TIMEOUT
        url = config.get("url")
        if not url:
            service = config.get("service") or {}
            where = f"{service.get('name')}.{service.get('namespace')}.svc:{service.get('port') or 443}"
            target = f"https://{where}{service.get('path') or ''}?timeout={timeout}s"
            raise _CallFailed(f'failed to call webhook: Post "{target}": dial tcp: lookup '
                              f"{where.rsplit(':', 1)[0]}: no such host (the kto local cluster has no cluster network: "
                              "register webhooks by clientConfig.url)")
        target = f"{url}{'&' if '?' in url else '?'}timeout={timeout}s"
        if not str(url).startswith("https://"):
            raise _CallFailed(f'failed to call webhook: Post "{target}": webhooks are called over https only')
        context = self._ssl(config.get("caBundle"))
        try:
            async with self._session_for().post(
                target, data=json.dumps(review, separators=(",", ":")).encode(), ssl=context,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=float(timeout)),
            ) as response:
                body = await response.read()
                status = response.status
        except asyncio.TimeoutError:
            raise _CallFailed(f'failed to call webhook: Post "{target}": context deadline exceeded') from None
        except aiohttp.ClientConnectorCertificateError as exc:
            raise _CallFailed(f'failed to call webhook: Post "{target}": tls: failed to verify certificate: '
                              f"x509: {_certificate_problem(exc)}") from None
        except aiohttp.ClientConnectorError as exc:
            why = "connect: connection refused" if isinstance(exc.os_error, ConnectionRefusedError) else (
                exc.os_error.strerror or str(exc.os_error))
            raise _CallFailed(f'failed to call webhook: Post "{target}": dial tcp {exc.host}:{exc.port}: {why}') from None
        except aiohttp.ServerDisconnectedError:
            raise _CallFailed(f'failed to call webhook: Post "{target}": EOF') from None
        except (aiohttp.ClientError, OSError) as exc:
            raise _CallFailed(f'failed to call webhook: Post "{target}": {exc}') from None
        if status != 200:
            text = body.decode(errors="replace").strip()[:1000]
            raise _CallFailed(f"failed to call webhook: an error on the server ({json.dumps(text)}) has prevented "
                              f"the request from succeeding (HTTP {status})")
        try:
            answer = json.loads(body)
        except ValueError as exc:
            raise _CallFailed(f"received invalid webhook response: {exc}") from None
        return _verify(answer, review["request"]["uid"], call.mutating)


def _certificate_problem(exc: aiohttp.ClientConnectorCertificateError) -> str:
    reason = str(getattr(exc.certificate_error, "verify_message", "") or exc.certificate_error)
    if "unable to get local issuer" in reason or "self-signed" in reason or "self signed" in reason:
        return "certificate signed by unknown authority"
    if "hostname" in reason or "IP address mismatch" in reason:
        return f"certificate is not valid for {exc.host}"
    return reason


class _CallFailed(Exception):
    """The webhook could not be called, or answered with something that is not a valid review."""


def _verify(answer: Any, uid: str, mutating: bool) -> Obj:
    """kube's VerifyAdmissionResponse."""
    invalid = "received invalid webhook response: "
    if not isinstance(answer, dict):
        raise _CallFailed(invalid + "the response is not an object")
    version, kind = answer.get("apiVersion"), answer.get("kind")
    if kind != "AdmissionReview" and isinstance(kind, str) and isinstance(version, str) and kind:
        # kube-apiserver decodes the body into an AdmissionReview: another kind does not convert.
        raise _CallFailed(f"failed to call webhook: converting ({version.rsplit('/', 1)[-1]}.{kind}) to "
                          "(v1.AdmissionReview): unknown conversion")
    if version != REVIEW_VERSION or kind != "AdmissionReview":
        raise _CallFailed(f"{invalid}expected webhook response of {REVIEW_VERSION}, Kind=AdmissionReview, "
                          f"got {version}, Kind={kind}")
    response = answer.get("response")
    if not isinstance(response, dict):
        raise _CallFailed(invalid + "webhook response was absent")
    if response.get("uid") != uid:
        raise _CallFailed(f'{invalid}expected response.uid="{uid}", got "{response.get("uid")}"')
    if response.get("patch"):
        if not mutating:
            raise _CallFailed(invalid + "validating webhook may not return patches")
        if response.get("patchType") != "JSONPatch":
            raise _CallFailed(invalid + (f'webhook returned invalid patchType: "{response.get("patchType")}"'
                                         if response.get("patchType") else "webhook returned patch without patchType"))
    return response


def _denial(name: str, response: Obj) -> errors.ApiError:
    """kube's webhookerrors.ToStatusErr."""
    status = response.get("status") if isinstance(response.get("status"), dict) else {}
    assert isinstance(status, dict)
    code = status.get("code") if isinstance(status.get("code"), int) else 0
    denied_by = f'admission webhook "{name}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    causes = details.get("causes") if details else None
    rest = {k: v for k, v in details.items() if k != "causes"} if details else None
    return errors.ApiError(max(int(code or 0), 400), str(status.get("reason") or ""), message,
                           causes if isinstance(causes, list) else None, details=rest)


def _failed(name: str, why: str) -> errors.ApiError:
    """kube's apierrors.NewInternalError(ErrCallingWebhook)."""
    message = f'failed calling webhook "{name}": {why}'
    return errors.ApiError(500, "InternalError", f"Internal error occurred: {message}", [{"message": message}])


OPTIONS_KINDS = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
"""The ``options`` kind of a review, by operation."""


class Review:
    """The admission of one write: its webhooks, called in order; the warnings they gave."""

    def __init__(self, admission: Admission, request: Request, calls: list[_Call]) -> None:
        self.admission = admission
        self.request = request
        self.calls = calls
        self.warnings: list[str] = []

    def _check_namespace(self) -> dict[str, str] | None:
        """The namespace's labels (None for a cluster-scoped kind); a missing namespace is a 404, as
        kube-apiserver's namespace lifecycle answers before any webhook."""
        if not self.request.res.namespaced:
            return None
        namespace = self.admission.store.peek("namespaces", None, self.request.namespace or "")
        if namespace is None:
            raise errors.not_found("namespaces", self.request.namespace or "")
        labels = namespace["metadata"].get("labels")
        return labels if isinstance(labels, dict) else {}

    def _applies(self, call: _Call, obj: Obj | None, old: Obj | None) -> bool:
        webhook = call.webhook
        namespace_labels = self._check_namespace()
        if self.request.res.key == "namespaces":
            namespace_labels = _labels(obj)
        if namespace_labels is not None and not _selector_matches(webhook.get("namespaceSelector"), namespace_labels):
            return False
        selector = webhook.get("objectSelector")
        if not selector:
            return True
        return any(labels is not None and _selector_matches(selector, labels) for labels in (_labels(obj), _labels(old)))

    def _review(self, call: _Call, obj: Obj | None, old: Obj | None) -> Obj:
        asked, sent = self.request.res, call.res
        if sent is not asked:
            obj = sim_store.view(sent, obj) if obj is not None else None
            old = sim_store.view(sent, old) if old is not None else None

        def gvk(res: resources.Resource, field: str) -> Obj:
            return {"group": res.group, "version": res.version or res.versions[0], field: getattr(res, field.lower())}

        request: Obj = {
            "uid": str(uuid.uuid4()),
            "kind": gvk(sent, "kind"), "resource": {**gvk(sent, "kind"), "resource": sent.plural},
            "requestKind": gvk(asked, "kind"), "requestResource": {**gvk(asked, "kind"), "resource": asked.plural},
            "operation": self.request.operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": self.request.dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": OPTIONS_KINDS[self.request.operation]},
        }
        for resource in (request["resource"], request["requestResource"]):
            resource.pop("kind")
        # Validating webhooks are sent the generated name of a create with generateName (kube's
        # AdmissionToValidateObjectFunc takes it from the object); mutating ones see none yet.
        meta = obj.get("metadata") if obj is not None else None
        name = self.request.name or (str(meta.get("name") or "") if isinstance(meta, dict) and not call.mutating
                                     else "")
        if name:
            request["name"] = name
        if self.request.field_manager:
            request["options"]["fieldManager"] = self.request.field_manager
        if self.request.namespace:
            request["namespace"] = self.request.namespace
        if self.request.subresource:
            request["subResource"] = request["requestSubResource"] = self.request.subresource
        return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "request": request}

    async def _answer(self, call: _Call, obj: Obj | None, old: Obj | None) -> Obj | None:
        """The webhook's response; None when it failed and its failurePolicy is Ignore."""
        review = self._review(call, obj, old)
        try:
            response = await self.admission.call(call, review)
        except _CallFailed as exc:
            if call.webhook.get("failurePolicy") == "Ignore":
                log.warning('failed calling webhook "%s", failing open: %s', call.name, exc)
                return None
            raise Denied(_failed(call.name, str(exc)), self.warnings) from None
        for warning in response.get("warnings") or []:
            if isinstance(warning, str):
                self.warnings.append(warning)
        if not response.get("allowed"):
            raise Denied(_denial(call.name, response), self.warnings)
        return response

    async def mutate(self, obj: Obj, old: Obj | None) -> Obj:
        """``obj`` as the mutating webhooks patch it, in order."""
        for call in self.calls:
            if not call.mutating or not self._applies(call, obj, old):
                continue
            response = await self._answer(call, obj, old)
            if response is None or not response.get("patch"):
                continue
            try:
                ops = json.loads(base64.b64decode(response["patch"], validate=True))
                patched = patching.json_patch(sim_store.view(call.res, obj), ops)
            except (ValueError, binascii.Error, errors.ApiError) as exc:
                raise Denied(errors.ApiError(500, "InternalError", f"Internal error occurred: {_why(exc)}",
                                             [{"message": _why(exc)}]), self.warnings) from None
            obj = patched if call.res is self.request.res else sim_store.view(self.request.res, patched)
        return obj

    async def validate(self, obj: Obj | None, old: Obj | None) -> None:
        """Raise the first denial (or call failure) of the validating webhooks."""
        for call in self.calls:
            if not call.mutating and self._applies(call, obj, old):
                await self._answer(call, obj, old)

    # --- the writes, admitted --------------------------------------------------------------------

    def _namespaced(self, obj: Obj) -> Obj:
        """The object with the request's namespace, as the API server sets it before admission."""
        if self.request.res.namespaced and self.request.namespace and isinstance(obj.get("metadata"), dict):
            obj["metadata"].setdefault("namespace", self.request.namespace)
        return obj

    async def create(self, body: Obj, version: str | None) -> Obj:
        """Admit and store a new object."""
        return await self._create(await self.mutate(self._namespaced(body), None), version)

    async def _create(self, body: Obj, version: str | None) -> Obj:
        """Validate and store a new object the mutating webhooks have seen."""
        store, res = self.admission.store, self.request.res
        staged = store._create(res.key, patching.deep_copy(body), self.request.namespace, version, dry_run=True)
        await self.validate(staged, None)
        if isinstance(body.get("metadata"), dict):
            body["metadata"]["name"] = staged["metadata"]["name"]  # a generated name stays the one admitted
        return store._create(res.key, body, self.request.namespace, version)

    async def delete(self, stored: Obj) -> None:
        """Admit a delete of ``stored``: as kube-apiserver, the mutating webhooks are called (with no
        object: nothing of theirs is applied), then the validating ones, each sent the stored object as
        ``oldObject``; a denial or a call failure under failurePolicy Fail refuses the delete."""
        old = sim_store.view(self.request.res, stored)
        for call in self.calls:
            if call.mutating and self._applies(call, None, old):
                await self._answer(call, None, old)
        await self.validate(None, old)

    async def dry_create(self, body: Obj) -> Obj:
        """Admit a create made with ``dryRun=All``: the object as mutated; nothing stored."""
        body = await self.mutate(self._namespaced(body), None)
        await self.validate(body, None)
        return body

    async def update(self, body: Obj, version: str | None) -> Obj:
        """Admit and store a replacement (PUT) of an object."""
        store, res = self.admission.store, self.request.res
        for _ in range(RACE_ATTEMPTS):
            stored = store._get(res.key, self.request.namespace, self.request.name)
            old = sim_store.view(res, stored)
            new = await self.mutate(patching.deep_copy(body), old)
            staged = store._update(res.key, patching.deep_copy(new), self.request.subresource, version, dry_run=True)
            await self.validate(staged, old)
            if store.peek(res.key, self.request.namespace, self.request.name) is stored:
                return store._update(res.key, new, self.request.subresource, version)
        raise errors.conflict(res.key, self.request.name)

    async def staged(self, stage: Any) -> tuple[Obj, bool]:
        """Admit and store a patch or an apply: ``stage()`` makes a ``sim.apiserver.store.Staged`` from the
        object as stored now; (the stored object, whether it was created)."""
        store, res = self.admission.store, self.request.res
        for _ in range(RACE_ATTEMPTS):
            made: sim_store.Staged = stage()
            old = None if made.stored is None else sim_store.view(made.written, made.stored)
            new = await self.mutate(self._namespaced(made.new), old)
            if made.stored is None:
                return await self._create(new, made.written.version or None), True
            staged = store._commit_update(made.res, made.stored, patching.deep_copy(new), self.request.subresource,
                                          made.written, dry_run=True)
            await self.validate(staged, old)
            if store.peek(res.key, self.request.namespace, self.request.name) is made.stored:
                return store._commit_update(made.res, made.stored, new, self.request.subresource, made.written), False
        raise errors.conflict(res.key, self.request.name)


def _why(exc: BaseException) -> str:
    return exc.message if isinstance(exc, errors.ApiError) else f"{type(exc).__name__}: {exc}"
