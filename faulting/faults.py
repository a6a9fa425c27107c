"""Fault injection for a Kubernetes API: a spec string, parsed, and the decisions it drives.

In: a spec such as
``latency=create:20ms,get:5ms;error_rate=0.05;throttle_rate=0.02:retry_after=1;conflict_rate=0.01;watch_drop=30s;gone_every=60s``.
Out: per request, how long to wait and which refusal (a ``metav1.Status``, if any) to answer
instead of serving it, plus how long a watch stream may live and whether a watch start gets 410 Gone; every
injected fault is counted.

Grammar (clauses separated by ``;``, blanks ignored, each clause at most once)::

    spec        := clause (";" clause)*
    clause      := "latency=" verb ":" duration ("," verb ":" duration)*
                 | "error_rate=" rate [":code=" 5xx]         answer 500 (or the code) instead
                 | "throttle_rate=" rate [":retry_after=" int] answer 429 + Retry-After (seconds, default 1)
                 | "conflict_rate=" rate                      answer 409 Conflict to update/patch
                 | "watch_drop=" duration                     end every watch stream after this long
                 | "gone_every=" duration                     410 Gone to the first watch start after each interval
                 | "gone_rate=" rate                          410 Gone to this share of watch starts
                 | "resources=" resource ("," resource)*      only these resource keys get faults
                 | "seed=" int                                 seed of the random choices
    verb        := get | list | watch | create | update | patch | delete | deletecollection | "*"
    rate        := a number in [0, 1]
    duration    := number ("ms" | "s" | "m")

Faults apply to resource requests only: discovery, ``/version`` and ``/admin`` are never
faulted. Two servers apply them: sim/ in process (``kto sim --faults SPEC``) and the proxy
of faulting/proxying.py in front of any API server; on both ``PUT /admin/faults`` replaces
the spec at run time (an empty spec turns every fault off).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import re
import time
from typing import Any

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
WRITE_VERBS = frozenset({"update", "patch"})
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
KINDS = ("latency", "error", "throttle", "conflict", "watch_drop", "gone")


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An injected error: what the API server answers instead of serving the request."""

    kind: str
    """What it is: an injected ``throttle``, ``error``, ``conflict`` or ``gone``, or the proxy's own
    answer (``upstream`` unreachable, ``admin`` refused)."""
    code: int
    """The HTTP status."""
    reason: str
    """The ``metav1.Status`` reason (``TooManyRequests``, ``InternalError`` …)."""
    message: str
    details: dict[str, Any] | None = None
    """The ``metav1.Status`` details, as kube-apiserver gives them for the same failure."""
    retry_after: int | None = None
    """Seconds for the ``Retry-After`` header (and ``details.retryAfterSeconds``) of a 429."""

    def status(self) -> dict[str, Any]:
        """The ``metav1.Status`` body."""
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason, "code": self.code}
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details or self.details is not None:
            body["details"] = details
        return body


def gone(resource_version: str) -> Refusal:
    """The 410 a watch from ``resource_version`` gets when ``Faults.watch_gone`` says so."""
    return Refusal("gone", 410, "Expired", f"too old resource version: {resource_version} (injected fault)")


class FaultSpecError(ValueError):
    """A fault spec that does not parse; the message names the bad part."""


@dataclasses.dataclass(frozen=True)
class FaultSpec:
    latency: dict[str, float] = dataclasses.field(default_factory=dict)
    """Verb (or "*") → seconds added before the request is served."""
    error_rate: float = 0.0
    error_code: int = 500
    throttle_rate: float = 0.0
    retry_after: int = 1
    conflict_rate: float = 0.0
    watch_drop: float | None = None
    gone_every: float | None = None
    gone_rate: float = 0.0
    resources: frozenset[str] | None = None
    seed: int | None = None
    text: str = ""
    """The spec as given."""


def _duration(text: str, clause: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise FaultSpecError(f"bad duration {text!r} in {clause!r}: use a number with ms, s or m (e.g. 20ms, 30s)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _rate(text: str, clause: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FaultSpecError(f"bad rate {text!r} in {clause!r}: use a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise FaultSpecError(f"bad rate {text!r} in {clause!r}: use a number between 0 and 1")
    return value


def _int(text: str, clause: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise FaultSpecError(f"bad {what} {text!r} in {clause!r}: use an integer") from None


def _options(rest: list[str], clause: str, allowed: set[str]) -> dict[str, str]:
    out = {}
    for part in rest:
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in allowed:
            raise FaultSpecError(f"unknown option {part!r} in {clause!r}: allowed: {', '.join(sorted(allowed))}")
        out[key.strip()] = value.strip()
    return out


def parse(text: str) -> FaultSpec:
    """The spec for ``text``; raises ``FaultSpecError`` naming the clause that does not parse."""
    values: dict[str, Any] = {"text": text.strip()}
    seen: set[str] = set()
    for raw in text.split(";"):
        clause = raw.strip()
        if not clause:
            continue
        name, eq, body = clause.partition("=")
        name = name.strip()
        if not eq:
            raise FaultSpecError(f"bad clause {clause!r}: expected NAME=VALUE")
        if name in seen:
            raise FaultSpecError(f"clause {name!r} given twice")
        seen.add(name)
        if name == "latency":
            latency = {}
            for item in body.split(","):
                verb, colon, duration = item.partition(":")
                verb = verb.strip()
                if not colon or (verb not in VERBS and verb != "*"):
                    raise FaultSpecError(
                        f"bad latency item {item.strip()!r} in {clause!r}: expected VERB:DURATION with VERB one of "
                        f"{', '.join(VERBS)} or *"
                    )
                latency[verb] = _duration(duration, clause)
            values["latency"] = latency
        elif name in ("error_rate", "throttle_rate"):
            rate, *rest = body.split(":")
            values[name] = _rate(rate, clause)
            if name == "error_rate":
                opts = _options(rest, clause, {"code"})
                if "code" in opts:
                    code = _int(opts["code"], clause, "code")
                    if not 500 <= code <= 599:
                        raise FaultSpecError(f"bad code {code} in {clause!r}: use a 5xx code")
                    values["error_code"] = code
            else:
                opts = _options(rest, clause, {"retry_after"})
                if "retry_after" in opts:
                    values["retry_after"] = _int(opts["retry_after"], clause, "retry_after")
        elif name in ("conflict_rate", "gone_rate"):
            values[name] = _rate(body, clause)
        elif name in ("watch_drop", "gone_every"):
            values[name] = _duration(body, clause)
        elif name == "resources":
            names = frozenset(r.strip() for r in body.split(",") if r.strip())
            if not names:
                raise FaultSpecError(f"bad clause {clause!r}: name at least one resource")
            values["resources"] = names
        elif name == "seed":
            values["seed"] = _int(body, clause, "seed")
        else:
            raise FaultSpecError(
                f"unknown fault {name!r} in {clause!r}: known: latency, error_rate, throttle_rate, conflict_rate, "
                "watch_drop, gone_every, gone_rate, resources, seed"
            )
    return FaultSpec(**values)


class Faults:
    """The faults in force, their random source and counters; ``set`` swaps the spec at run time."""

    def __init__(self, spec: str | FaultSpec = "") -> None:
        self.counts: collections.Counter[str] = collections.Counter({k: 0 for k in KINDS})
        self._rng = random.Random()
        self.spec = FaultSpec()
        self._last_gone = 0.0
        self.set(spec)

    def set(self, spec: str | FaultSpec) -> FaultSpec:
        if isinstance(spec, str):
            spec = parse(spec)
        elif not isinstance(spec, FaultSpec):
            raise FaultSpecError(f"a fault spec is a string, not {type(spec).__name__}")
        self.spec = spec
        self._rng = random.Random(self.spec.seed)
        self._last_gone = time.monotonic()
        return self.spec

    def applies(self, resource: str | None) -> bool:
        spec = self.spec
        if resource is None:
            return False
        return spec.resources is None or resource in spec.resources

    def latency(self, verb: str) -> float:
        latency = self.spec.latency
        if not latency:
            return 0.0
        seconds = latency.get(verb, latency.get("*", 0.0))
        if seconds:
            self.counts["latency"] += 1
        return seconds

    def error(self, verb: str, resource: str, name: str | None) -> Refusal | None:
        """The refusal to answer instead of serving this request, if one is injected."""
        spec = self.spec
        rng = self._rng
        if spec.throttle_rate and rng.random() < spec.throttle_rate:
            self.counts["throttle"] += 1
            return Refusal("throttle", 429, "TooManyRequests", "Too many requests, please try again later.",
                           {"causes": [{"message": "injected by kto sim faults"}]}, spec.retry_after)
        if spec.error_rate and rng.random() < spec.error_rate:
            self.counts["error"] += 1
            if spec.error_code == 503:
                return Refusal("error", 503, "ServiceUnavailable",
                               "The server is currently unable to handle the request (injected fault)")
            return Refusal("error", spec.error_code, "InternalError", "Internal error occurred: injected fault")
        if spec.conflict_rate and verb in WRITE_VERBS and rng.random() < spec.conflict_rate:
            self.counts["conflict"] += 1
            return _conflict(resource, name or "")
        return None

    def watch_gone(self) -> bool:
        """Whether this watch start (from a resourceVersion) is answered 410 Gone."""
        spec = self.spec
        if spec.gone_every is not None:
            current = time.monotonic()
            if current - self._last_gone >= spec.gone_every:
                self._last_gone = current
                self.counts["gone"] += 1
                return True
        if spec.gone_rate and self._rng.random() < spec.gone_rate:
            self.counts["gone"] += 1
            return True
        return False

    def stats(self) -> dict[str, Any]:
        return {"spec": self.spec.text, "injected": dict(self.counts), "total": sum(self.counts.values())}

    def view(self) -> dict[str, Any]:
        """The spec in force, field by field, and the faults injected so far: what ``/admin/faults`` answers."""
        spec = self.spec
        return {"spec": spec.text, "latency": spec.latency, "error_rate": spec.error_rate,
                "error_code": spec.error_code, "throttle_rate": spec.throttle_rate, "retry_after": spec.retry_after,
                "conflict_rate": spec.conflict_rate, "watch_drop": spec.watch_drop, "gone_every": spec.gone_every,
                "gone_rate": spec.gone_rate, "resources": sorted(spec.resources) if spec.resources else None,
                "seed": spec.seed, "faults": self.stats()}


def _conflict(resource: str, name: str) -> Refusal:
    """409 Conflict as kube-apiserver words it for a stale resourceVersion."""
    plural, _, group = resource.partition(".")
    details: dict[str, Any] = {"kind": plural}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return Refusal("conflict", 409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object '
                   "has been modified; please apply your changes to the latest version and try again", details)
