"""Who a token is and what a user may do: the sim's TokenRequest, TokenReview and access reviews.

In: ``POST`` bodies of ``serviceaccounts/<name>/token`` (TokenRequest, ``v1``),
``tokenreviews`` (``authentication.k8s.io/v1``) and ``subjectaccessreviews`` /
``selfsubjectaccessreviews`` (``authorization.k8s.io/v1``), and the store's
ServiceAccounts and RBAC objects. Out: the answers kube-apiserver gives for the
sim's users, decided as kube-apiserver's token and RBAC authorizers decide:

* the kubeconfig's token ``kto-sim`` is the user ``sim`` in ``system:masters``
  (kube-apiserver's static token file in ``kto control-plane`` says the same of
  its tokens): every access is allowed;
* a token made by a TokenRequest is its ServiceAccount
  (``system:serviceaccount:<ns>:<name>``, groups ``system:serviceaccounts``,
  ``system:serviceaccounts:<ns>``, ``system:authenticated``) until it expires or
  the ServiceAccount is deleted; any other token is not authenticated;
* access is allowed to ``system:masters``, else by a rule of a Role or
  ClusterRole bound to the user, one of its groups or its ServiceAccount
  (RoleBindings in the namespace asked about, ClusterRoleBindings anywhere).

The sim itself still authenticates no request (docs/sim.md): a request without
a TokenRequest's token is the user ``sim``, which is what a self review answers.
Tokens live in memory: a restarted sim has forgotten them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
from collections.abc import Iterable, Iterator
from typing import Any

from sim import errors
from sim.apiserver import store as sim_store

Obj = dict[str, Any]

SIM_TOKEN = "kto-sim"
"""The token of the kubeconfigs the sim writes (sim/cluster.py)."""

MASTERS = "system:masters"
DEFAULT_EXPIRATION = 3600
"""Seconds a TokenRequest's token lives when it does not say (kube-apiserver's default)."""
MIN_EXPIRATION = 600
"""The shortest lifetime kube-apiserver grants (a shorter ``expirationSeconds`` is a 422)."""

REVIEWS = {
    "tokenreviews.authentication.k8s.io": "TokenReview",
    "subjectaccessreviews.authorization.k8s.io": "SubjectAccessReview",
    "selfsubjectaccessreviews.authorization.k8s.io": "SelfSubjectAccessReview",
}
"""The create-only review resources by store-style key, and their kinds."""


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()

    def info(self) -> Obj:
        """The ``user`` of a TokenReview's status."""
        return {"username": self.name, "uid": self.uid, "groups": list(self.groups)}


SIM_USER = User("sim", "sim", (MASTERS, "system:authenticated"))


@dataclasses.dataclass(frozen=True)
class _Issued:
    namespace: str
    name: str
    uid: str
    expires: dt.datetime


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def _time(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class Reviews:
    """The tokens the sim has issued, and the answers to reviews over the store's RBAC objects."""

    def __init__(self, store: sim_store.Store) -> None:
        self._store = store
        self._issued: dict[str, _Issued] = {}

    # -- authentication -------------------------------------------------------------------------

    def token_request(self, namespace: str, name: str, body: Any) -> Obj:
        """A token for the ServiceAccount ``namespace/name`` (404 when it does not exist)."""
        account = self._store._get("serviceaccounts", namespace, name)
        spec = body.get("spec") if isinstance(body, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION)
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < MIN_EXPIRATION:
            raise errors.invalid("TokenRequest", "serviceaccounts", name, [{
                "reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                "message": f"Invalid value: {seconds!r}: may not specify a duration less than 10 minutes"}])
        token = "sim-sa." + secrets.token_urlsafe(32)
        expires = _now() + dt.timedelta(seconds=seconds)
        self._issued[token] = _Issued(namespace, name, str(account["metadata"].get("uid", "")), expires)
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": _time(_now())},
                "spec": {"audiences": spec.get("audiences") or ["https://kubernetes.default.svc.cluster.local"],
                         "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef")},
                "status": {"token": token, "expirationTimestamp": _time(expires)}}

    def user_of(self, token: str) -> User | None:
        """Who ``token`` is; None when it is nobody the sim knows."""
        if token == SIM_TOKEN:
            return SIM_USER
        issued = self._issued.get(token)
        if issued is None:
            return None
        account = self._store.peek("serviceaccounts", issued.namespace, issued.name)
        if issued.expires <= _now() or account is None or str(account["metadata"].get("uid", "")) != issued.uid:
            self._issued.pop(token, None)
            return None
        return User(f"system:serviceaccount:{issued.namespace}:{issued.name}", issued.uid,
                    ("system:serviceaccounts", f"system:serviceaccounts:{issued.namespace}", "system:authenticated"))

    def requester(self, authorization: str) -> User:
        """Who sent a request with this ``Authorization`` header: a TokenRequest's token is its
        ServiceAccount; anything else is the sim's own user (the sim checks no request)."""
        scheme, _, token = authorization.partition(" ")
        user = self.user_of(token.strip()) if scheme.lower() == "bearer" else None
        return user or SIM_USER

    def token_review(self, body: Any) -> Obj:
        spec = _spec(body, "TokenReview")
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise errors.invalid("TokenReview", "tokenreviews", "", [{
                "reason": "FieldValueRequired", "field": "spec.token", "message": "Required value"}])
        user = self.user_of(token)
        status: Obj = ({"authenticated": True, "user": user.info(),
                        "audiences": ["https://kubernetes.default.svc.cluster.local"]}
                       if user is not None else {"user": {}, "error": "[invalid bearer token]"})
        return _answer("authentication.k8s.io/v1", "TokenReview", body, status)

    # -- authorization --------------------------------------------------------------------------

    def subject_access_review(self, body: Any) -> Obj:
        spec = _spec(body, "SubjectAccessReview")
        user, groups = spec.get("user") or "", spec.get("groups") or []
        if not isinstance(user, str) or not isinstance(groups, list) or not (user or groups):
            raise errors.invalid("SubjectAccessReview", "subjectaccessreviews", "", [{
                "reason": "FieldValueRequired", "field": "spec.user",
                "message": "Required value: at least one of user or group must be specified"}])
        asked = User(user, str(spec.get("uid") or ""), tuple(str(g) for g in groups))
        return _answer("authorization.k8s.io/v1", "SubjectAccessReview", body,
                       self._decide(asked, spec, "SubjectAccessReview"))

    def self_subject_access_review(self, body: Any, authorization: str) -> Obj:
        spec = _spec(body, "SelfSubjectAccessReview")
        return _answer("authorization.k8s.io/v1", "SelfSubjectAccessReview", body,
                       self._decide(self.requester(authorization), spec, "SelfSubjectAccessReview"))

    def _decide(self, user: User, spec: Obj, kind: str) -> Obj:
        attributes = spec.get("resourceAttributes")
        plain = spec.get("nonResourceAttributes")
        if not isinstance(attributes, dict) and not isinstance(plain, dict):
            raise errors.invalid(kind, f"{kind.lower()}s.authorization.k8s.io", "", [{
                "reason": "FieldValueRequired", "field": "spec.resourceAttributes",
                "message": "Required value: exactly one of nonResourceAttributes or resourceAttributes "
                           "must be specified"}])
        if MASTERS in user.groups:
            return {"allowed": True}
        if isinstance(attributes, dict):
            namespace = str(attributes.get("namespace") or "")
            for binding, role, rule in self._rules(user, namespace):
                if _grants(rule, attributes):
                    return {"allowed": True, "reason": f'RBAC: allowed by {binding} of {role} to {user.name}'}
        elif isinstance(plain, dict):
            for binding, role, rule in self._rules(user, ""):
                if _grants_path(rule, plain):
                    return {"allowed": True, "reason": f'RBAC: allowed by {binding} of {role} to {user.name}'}
        return {"allowed": False}

    def _rules(self, user: User, namespace: str) -> Iterator[tuple[str, str, Obj]]:
        """(binding, role, rule) of every rule bound to ``user``: cluster-wide, then in ``namespace``."""
        bindings: list[tuple[str, Obj]] = [
            (f'ClusterRoleBinding "{b["metadata"]["name"]}"', b)
            for b in self._objects("clusterrolebindings.rbac.authorization.k8s.io", None)]
        if namespace:
            bindings += [(f'RoleBinding "{b["metadata"]["name"]}/{namespace}"', b)
                         for b in self._objects("rolebindings.rbac.authorization.k8s.io", namespace)]
        for described, binding in bindings:
            if not any(_names(subject, user, binding) for subject in binding.get("subjects") or ()):
                continue
            ref = binding.get("roleRef") or {}
            cluster_wide = ref.get("kind") == "ClusterRole"
            role = self._store.peek("clusterroles.rbac.authorization.k8s.io" if cluster_wide
                                     else "roles.rbac.authorization.k8s.io",
                                     None if cluster_wide else namespace, str(ref.get("name", "")))
            if role is None:
                continue
            for rule in role.get("rules") or ():
                if isinstance(rule, dict):
                    yield described, f'{ref.get("kind")} "{ref.get("name")}"', rule

    def _objects(self, resource: str, namespace: str | None) -> Iterable[Obj]:
        items, _, _, _ = self._store.list_page(resource, namespace)
        return items


def _spec(body: Any, kind: str) -> Obj:
    spec = body.get("spec") if isinstance(body, dict) else None
    if not isinstance(spec, dict):
        raise errors.bad_request(f"a {kind} needs a spec object")
    return spec


def _answer(api_version: str, kind: str, body: Obj, status: Obj) -> Obj:
    return {"kind": kind, "apiVersion": api_version, "metadata": {"creationTimestamp": None},
            "spec": body["spec"], "status": status}


def _names(subject: Any, user: User, binding: Obj) -> bool:
    """Whether a binding's ``subject`` is ``user``, one of its groups or its ServiceAccount."""
    if not isinstance(subject, dict):
        return False
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding["metadata"].get("namespace", "")
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def _grants(rule: Obj, attributes: Obj) -> bool:
    """Whether an RBAC ``rule`` allows the resource access ``attributes`` describe."""
    resource = str(attributes.get("resource") or "")
    subresource = str(attributes.get("subresource") or "")
    wanted = f"{resource}/{subresource}" if subresource else resource
    names = rule.get("resourceNames") or []
    return (_has(rule.get("verbs"), str(attributes.get("verb") or ""))
            and _has(rule.get("apiGroups"), str(attributes.get("group") or ""))
            and (_has(rule.get("resources"), wanted)
                 or (bool(subresource) and _has(rule.get("resources"), f"*/{subresource}")))
            and (not names or str(attributes.get("name") or "") in names))


def _grants_path(rule: Obj, attributes: Obj) -> bool:
    """Whether a rule allows a non-resource URL (a trailing ``*`` matches any rest of the path)."""
    path = str(attributes.get("path") or "")
    urls = rule.get("nonResourceURLs")
    return (_has(rule.get("verbs"), str(attributes.get("verb") or "")) and isinstance(urls, list)
            and any(url == path or (url.endswith("*") and path.startswith(url[:-1])) for url in urls))
