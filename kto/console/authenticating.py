"""Who asks the console, from where, and which namespaces of which cluster they may see.

In: a request's ``Host`` and ``Authorization`` headers, the console's settings,
and the clusters (:class:`kto.console.reading.Clusters`), which answer reviews.
Out:

* :func:`host_refusal` — why a ``Host`` header is not one the console serves
  (loopback names, the address it listens on, ``--allowed-host``): a page of an
  attacker's site whose name was made to resolve to 127.0.0.1 (DNS rebinding)
  still sends its own name, and is refused;
* :meth:`Gate.viewer` — the :class:`Viewer`: a bearer token, reviewed by each
  cluster's API server (a TokenReview; a cluster that refuses it shows that user
  nothing), or — only for a console listening on a loopback address — the
  kubeconfig's own user, the identity the console reads the clusters with.
  :class:`Refused` (401) otherwise, :class:`Unreviewed` (503) when no cluster
  accepted the token and one of them could not be asked;
* :meth:`Gate.may_list` — whether the viewer may ``list`` a job kind in a
  namespace of a cluster: a SubjectAccessReview for a token's user, a
  SelfSubjectAccessReview for the kubeconfig's user; answers are kept
  ``access_ttl`` seconds. A kind allowed cluster-wide needs no question per
  namespace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import ipaddress
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from kto.console import reading
from shared.api import objects
from shared.kube import resources

log = logging.getLogger("kto.console")

TOKENREVIEWS = resources.ResourceType("authentication.k8s.io", "v1", "tokenreviews", "TokenReview",
                                      namespaced=False)
SUBJECTACCESSREVIEWS = resources.ResourceType("authorization.k8s.io", "v1", "subjectaccessreviews",
                                              "SubjectAccessReview", namespaced=False)
SELFSUBJECTACCESSREVIEWS = resources.ResourceType("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                                                  "SelfSubjectAccessReview", namespaced=False)

LOOPBACK_NAMES = frozenset({"localhost"})
"""Names that are loopback whatever DNS says (an IP address is loopback by its value)."""

ACCESS_QUESTIONS = 16
"""Reviews asked of one cluster at once."""

_KEPT = 4096
"""Cached answers beyond which the expired ones are dropped."""


class Refused(Exception):
    """The request is not authenticated (401); the message says what to send."""


class Unreviewed(Exception):
    """No cluster accepted the token and some could not be asked (503): it may be good once they answer."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address, IPv6 with or without brackets) is loopback."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def hostname(header: str) -> str | None:
    """The host of a ``Host`` header (its port dropped, IPv6 unbracketed, lower case); None when malformed."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1:]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return header[1:end] or None
    name, colon, port = header.rpartition(":") if header.count(":") == 1 else (header, "", "")
    if colon and not port.isdigit():
        return None
    if not name or any(c.isspace() or c in "/@?#\\" for c in name):
        return None
    return name.rstrip(".")


def host_refusal(header: str | None, listening_on: str, allowed: Sequence[str]) -> tuple[int, str] | None:
    """(status, message) refusing a request whose ``Host`` is missing or malformed (400) or not a
    name this console serves (421); None when it is served."""
    if not header:
        return 400, "the request has no Host header"
    name = hostname(header)
    if name is None:
        return 400, f"the Host header {header!r} is not a host name"
    served = {host.strip("[]").lower().rstrip(".") for host in (*allowed, listening_on)} - {"", "0.0.0.0", "::"}
    if is_loopback(name) or name in served:
        return None
    return 421, (f"this console does not serve the host {name!r} (start it with `--allowed-host {name}` "
                 "if that is its name)")


@dataclasses.dataclass(frozen=True)
class Viewer:
    """Who asks: a bearer token's user in each cluster that accepted it, or the kubeconfig's own user."""

    key: str
    """Names the viewer in caches: a digest of the token, or ``local``."""
    users: Mapping[str, Mapping[str, Any] | None]
    """Per cluster, the TokenReview's ``status.user`` (None: that cluster did not accept the token);
    empty for the kubeconfig's own user."""

    @property
    def local(self) -> bool:
        return self.key == "local"

    def accepted_by(self, cluster: str) -> bool:
        return self.local or self.users.get(cluster) is not None


LOCAL = Viewer("local", {})


@dataclasses.dataclass
class _Cached:
    value: Any
    until: float


class Gate:
    """Authentication and the namespaces each viewer may see, with the clusters' answers cached."""

    def __init__(self, clusters: reading.Clusters, *, local_user: bool, access_ttl: float) -> None:
        self._clusters = clusters
        self._local_user = local_user
        """A request without a token is the kubeconfig's user (the console listens on loopback only)."""
        self._ttl = access_ttl
        self._reviews: dict[str, _Cached] = {}
        self._access: dict[tuple[str, str, str, str], _Cached] = {}
        self._asking = {cluster: asyncio.Semaphore(ACCESS_QUESTIONS) for cluster in clusters.contexts}

    def _kept(self, cache: dict[Any, _Cached], key: Any) -> Any:
        cached = cache.get(key)
        return cached.value if cached is not None and cached.until > asyncio.get_running_loop().time() else None

    def _keep(self, cache: dict[Any, _Cached], key: Any, value: Any) -> None:
        now = asyncio.get_running_loop().time()
        if len(cache) >= _KEPT:
            for stale in [k for k, cached in cache.items() if cached.until <= now]:
                del cache[stale]
        cache[key] = _Cached(value, now + self._ttl)

    async def viewer(self, authorization: str | None) -> Viewer:
        """The viewer of a request with this ``Authorization`` header; :class:`Refused` when there is none."""
        if not authorization:
            if self._local_user:
                return LOCAL
            raise Refused("this console needs a bearer token: send 'Authorization: Bearer TOKEN' with a token "
                          "the clusters' API servers accept (`kubectl create token NAME`)")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Refused("the Authorization header must be 'Bearer TOKEN'")
        key = hashlib.sha256(token.encode()).hexdigest()
        users: dict[str, Mapping[str, Any] | None] | None = self._kept(self._reviews, key)
        answered = True
        if users is None:
            users, answered = await self._review(token)
            if answered:
                self._keep(self._reviews, key, users)
        if not any(user is not None for user in users.values()):
            if not answered:
                raise Unreviewed("the bearer token could not be reviewed: a cluster's API server did not answer "
                                 "(try again)")
            raise Refused("the bearer token was not accepted by the API server of any cluster of this console")
        return Viewer(key, users)

    async def _review(self, token: str) -> tuple[dict[str, Mapping[str, Any] | None], bool]:
        """Each cluster's user for ``token`` (None where refused), and whether every cluster answered."""
        body = {"apiVersion": TOKENREVIEWS.api_version, "kind": TOKENREVIEWS.kind, "spec": {"token": token}}

        async def ask(cluster: str) -> tuple[Mapping[str, Any] | None, bool]:
            try:
                answer = await self._clusters.create(cluster, TOKENREVIEWS, body)
            except reading.Unanswered as exc:
                log.warning("cluster %s did not review a token: %s", cluster, exc)
                return None, False
            status = answer.get("status") or {}
            user = status.get("user")
            return (user if status.get("authenticated") is True and isinstance(user, dict) else None), True

        contexts = self._clusters.contexts
        answers = await asyncio.gather(*(ask(cluster) for cluster in contexts))
        return ({cluster: user for cluster, (user, _) in zip(contexts, answers)},
                all(answered for _, answered in answers))

    async def _allowed(self, viewer: Viewer, cluster: str, namespace: str, kind: str) -> bool:
        """One review: may ``viewer`` list ``kind`` in ``namespace`` ("" = every namespace) of ``cluster``;
        :class:`~kto.console.reading.Unanswered` when the cluster cannot say (not kept)."""
        key = (viewer.key, cluster, namespace, kind)
        known: bool | None = self._kept(self._access, key)
        if known is not None:
            return known
        rt = resources.JOB_TYPES[kind]
        spec: dict[str, Any] = {"resourceAttributes": {"namespace": namespace, "verb": "list", "group": rt.group,
                                                       "version": rt.version, "resource": rt.plural}}
        review = SELFSUBJECTACCESSREVIEWS
        user = viewer.users.get(cluster)
        if not viewer.local:
            if user is None:
                return False
            review = SUBJECTACCESSREVIEWS
            spec.update({name: user[field] for name, field in (("user", "username"), ("uid", "uid"),
                                                               ("groups", "groups"), ("extra", "extra"))
                         if user.get(field)})
        async with self._asking[cluster]:
            answer = await self._clusters.create(cluster, review, {
                "apiVersion": review.api_version, "kind": review.kind, "spec": spec})
        allowed = (answer.get("status") or {}).get("allowed") is True
        self._keep(self._access, key, allowed)
        return allowed

    async def may_list(self, viewer: Viewer, cluster: str, namespace: str, kind: str) -> bool:
        """Whether ``viewer`` may list the jobs of ``kind`` in ``namespace`` of ``cluster``;
        :class:`~kto.console.reading.Unanswered` when the cluster cannot say."""
        if cluster not in self._asking or kind not in resources.JOB_TYPES or not viewer.accepted_by(cluster):
            return False
        return await self._allowed(viewer, cluster, "", kind) or await self._allowed(viewer, cluster, namespace, kind)

    async def visible(self, viewer: Viewer, jobs: Mapping[str, Sequence[Mapping[str, Any]]]
                      ) -> dict[str, list[Mapping[str, Any]]]:
        """``jobs`` (per cluster) less those of a kind and namespace ``viewer`` may not list."""
        wanted = {(cluster, objects.namespace_of(job), str(job.get("kind") or ""))
                  for cluster, found in jobs.items() for job in found}
        ordered = sorted(wanted)
        kinds = sorted({(cluster, kind) for cluster, _, kind in ordered
                        if kind in resources.JOB_TYPES and viewer.accepted_by(cluster)})

        async def answered(ask: Awaitable[bool]) -> bool:
            try:
                return await ask
            except reading.Unanswered as exc:  # not shown while the cluster cannot say
                log.warning("a cluster did not answer an access review: %s", exc)
                return False

        # Cluster-wide first, once per kind: a viewer allowed everywhere needs no question per namespace.
        await asyncio.gather(*(answered(self._allowed(viewer, cluster, "", kind)) for cluster, kind in kinds))
        answers = await asyncio.gather(*(answered(self.may_list(viewer, *triple)) for triple in ordered))
        allowed = {triple for triple, yes in zip(ordered, answers) if yes}
        return {cluster: [job for job in found
                          if (cluster, objects.namespace_of(job),
                              str(job.get("kind") or "")) in allowed]
                for cluster, found in jobs.items()}
