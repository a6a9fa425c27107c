"""Hypothesis strategies for hostile input: random JSON values (deep, wide, huge numbers, odd strings),
job documents spoilt at random paths, and raw record bytes. ``KTO_FUZZ_EXAMPLES`` sets how many examples
each fuzz test runs (default 200: a few seconds each)."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from shared.api import jobs

EXAMPLES = int(os.environ.get("KTO_FUZZ_EXAMPLES", "200"))

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("KTO_FUZZ_RANDOM") is None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
"""Settings of every fuzz test: derandomized (a failure repeats) unless ``KTO_FUZZ_RANDOM`` is set."""

ODD_STRINGS = st.sampled_from([
    "", " ", "Worker", "worker", "Master", "Launcher", "PS", "Chief", "three", "Sometimes", "ExitCode", "-1",
    "\x00", "\ud800", "é" * 3, "a/b", "../../etc", "${HOME}", "1e400", "NaN", "x" * 300,
])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 1_000_000, 10_001]),
    st.sampled_from([4300, 5000]).map(lambda digits: 10**digits),
    st.floats(allow_nan=True, allow_infinity=True), ODD_STRINGS, st.text(max_size=20),
)


def nested(levels: int, inner: Any = 1) -> Any:
    value = inner
    for index in range(levels):
        value = {"a": value} if index % 2 else [value]
    return value


DEEP = st.builds(nested, st.sampled_from([50, 63, 64, 65, 200, 256, 300, 990, 5000]))
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.one_of(ODD_STRINGS, st.text(max_size=8)), children, max_size=4)),
    max_leaves=12,
) | DEEP

_FIELDS = ["replicas", "restartPolicy", "template", "spec", "containers", "name", "image", "env", "ports",
           "runPolicy", "backoffLimit", "cleanPodPolicy", "schedulingPolicy", "minAvailable", "suspend",
           "elasticPolicy", "nprocPerNode", "slotsPerWorker", "metadata", "annotations", "labels", "status",
           "conditions", "value", "containerPort", "resources", "limits", "successPolicy", "managedBy"]


def base_job(kind: str) -> dict[str, Any]:
    cls = jobs.KINDS[kind]
    container = {"name": cls.DEFAULT_CONTAINER, "image": "busybox",
                 "env": [{"name": "DB_PASSWORD", "value": "p"}], "ports": [{"name": "x", "containerPort": 1}]}
    specs = {rt: {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [dict(container)]}}}
             for rt in cls.REPLICA_TYPES[:2]}
    return {"apiVersion": jobs.API_VERSION, "kind": kind,
            "metadata": {"name": "fuzz", "namespace": "default", "uid": "u-1", "resourceVersion": "5"},
            "spec": {cls.REPLICA_FIELD_ALIAS: specs, "runPolicy": {"backoffLimit": 1}}}


def _containers(document: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) slot of the document, to choose one to spoil."""
    slots: list[tuple[Any, Any]] = []
    stack = [document]
    while stack and len(slots) < 500:
        node = stack.pop()
        if isinstance(node, dict):
            slots += [(node, key) for key in node]
            stack += [v for v in node.values() if isinstance(v, (dict, list))]
        elif isinstance(node, list):
            slots += [(node, index) for index in range(len(node))]
            stack += [v for v in node if isinstance(v, (dict, list))]
    return slots


@st.composite
def spoilt_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid job of a random kind with 1–4 random changes: a value replaced, a field added, removed."""
    document = copy.deepcopy(base_job(draw(st.sampled_from(sorted(jobs.KINDS)))))
    for _ in range(draw(st.integers(1, 4))):
        slots = _containers(document)
        parent, key = draw(st.sampled_from(slots))
        action = draw(st.sampled_from(["replace", "add", "remove"]))
        if action == "replace":
            parent[key] = draw(JSON)
        elif action == "remove" and isinstance(parent, dict):
            del parent[key]
        else:
            target = parent[key]
            if isinstance(target, dict):
                target[draw(st.sampled_from(_FIELDS) | ODD_STRINGS)] = draw(JSON)
            elif isinstance(target, list):
                target.append(draw(JSON))
    if draw(st.booleans()):
        document["kind"] = draw(st.sampled_from([*jobs.KINDS, "Pod", "", None]))
    return document


def _json_bytes(value: Any) -> bytes:
    try:
        return json.dumps(value).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return b"[" * 10


_ENVELOPE = {"schema_version": 1, "id": "r", "key": "c/ns/PyTorchJob/j", "type": "observation",
             "object_kind": "PyTorchJob", "event": "ADDED", "object": {}}


@st.composite
def _spoilt_envelope(draw: st.DrawFn) -> bytes:
    envelope: dict[str, Any] = dict(_ENVELOPE, object=base_job("PyTorchJob"))
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from([*envelope, "action", "detail", "observed_at", "redacted", "omitted"]))
        if draw(st.booleans()):
            envelope[field] = draw(JSON)
        else:
            envelope.pop(field, None)
    return _json_bytes(envelope)


RECORD_BYTES = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda b, n: b * n, st.sampled_from([b"[", b'{"a":', b"9", b'"', b"\\u"]),
              st.sampled_from([1, 1000, 5000, 100_000])),
    st.builds(lambda n: b'{"schema_version": 1, "n": ' + b"7" * n + b"}", st.sampled_from([4301, 5000, 50_000])),
    st.builds(_json_bytes, JSON),
    _spoilt_envelope(),
    st.builds(lambda n: b'{"schema_version": 1, "pad": "' + b"x" * n + b'"}', st.sampled_from([999_900, 1_000_001])),
)
"""Random bytes for a record value: garbage, deep nesting, huge integers, JSON of random shape, envelopes
with fields spoilt or missing, values around the size limit."""
