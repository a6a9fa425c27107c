"""A body nested too deep: sim/ answers with kube-apiserver's ``metav1.Status``, never a traceback.

kube-apiserver refuses a body nested past 10,000 levels (Go's JSON scanner, go-yaml) with a 400
whose message depends on the request; sim/ refuses one past ``decoding.MAX_DEPTH`` with the same
code and message (its decoders and copies recurse: a 10,000-level body raised RecursionError, a
500 and a traceback in its log). The requests and their answers are
``tests.sim.test_differential.deep_cases``, which also holds them against kube-apiserver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sim import cluster as sim_cluster_module
from sim.apiserver import decoding
from sim.apiserver import store as sim_store
from tests.sim.test_differential import JOB_ENVELOPE, Api, _crds, deep_cases, deep_job, deep_scenario, jobs, nest

LIMIT = decoding.MAX_DEPTH


@pytest.fixture
async def api(sim_cluster: sim_cluster_module.Cluster) -> AsyncIterator[Api]:
    for crd in _crds():
        sim_cluster.store._create(sim_store.CRDS, crd, None)
    assert sim_cluster.kubeconfig is not None
    async with Api.from_kubeconfig("sim", sim_cluster.kubeconfig) as client:
        yield client


def nothing_logged(caplog: pytest.LogCaptureFixture) -> None:
    """No warning, no error, no traceback in the sim's log."""
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not logged, [r.getMessage()[:300] for r in logged]


@pytest.mark.parametrize(("method", "path", "body", "ctype", "query", "expected"),
                         [*deep_cases(LIMIT + 1), *deep_cases(10_002), *deep_cases(100_000)])
async def test_a_body_nested_too_deep_is_refused_with_kube_apiservers_status(
    api: Api, caplog: pytest.LogCaptureFixture, method: str, path: str, body: str, ctype: str,
    query: dict[str, str] | None, expected: Any,
) -> None:
    with caplog.at_level(logging.INFO):
        assert await deep_scenario(api, "default", method, path, body, ctype, query) == expected
    nothing_logged(caplog)


async def test_a_job_nested_as_deep_as_the_limit_is_stored_read_listed_watched_patched_and_deleted(
    api: Api, caplog: pytest.LogCaptureFixture,
) -> None:
    inner = nest(LIMIT - JOB_ENVELOPE)
    with caplog.at_level(logging.INFO):
        created = await api.request("POST", jobs("default"), data=deep_job("deepest", inner))
        assert created.code == 201, created.body
        got = await api.request("GET", jobs("default", "deepest"))
        assert got.code == 200 and json.dumps(got.body["spec"]).count('{"a": ') == LIMIT - JOB_ENVELOPE
        listed = await api.request("GET", jobs("default"))
        assert listed.code == 200 and [j["metadata"]["name"] for j in listed.body["items"]] == ["deepest"]
        code, events = await api.watch(jobs("default"), {}, until=lambda seen: len(seen) >= 1)
        assert code == 200 and events[0]["object"]["metadata"]["name"] == "deepest"
        for ctype, patch in (("application/merge-patch+json", {"metadata": {"labels": {"a": "b"}}}),
                             ("application/json-patch+json", [{"op": "add", "path": "/metadata/labels/c", "value": "d"}])):
            patched = await api.request("PATCH", jobs("default", "deepest"), patch, ctype=ctype)
            assert patched.code == 200, patched.body
        applied = await api.request("PATCH", jobs("default", "deepest"), data=deep_job("deepest", inner),
                                    ctype="application/apply-patch+yaml", query={"fieldManager": "test"})
        assert applied.code == 200, applied.body
        deleted = await api.request("DELETE", jobs("default", "deepest"))
        assert deleted.code == 200, deleted.body
    nothing_logged(caplog)


async def test_a_json_patch_that_would_nest_the_object_too_deep_stores_nothing(
    api: Api, caplog: pytest.LogCaptureFixture,
) -> None:
    """A shallow patch can make a deep object: a value added below a deep path. kube-apiserver stores one
    past its limit and then can neither read, list nor delete it (500, "StorageError: corrupt object");
    sim/ answers its 500 and stores nothing."""
    inner = nest(LIMIT - JOB_ENVELOPE)
    assert (await api.request("POST", jobs("default"), data=deep_job("deepest", inner))).code == 201
    path = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/deep" + "/a" * (LIMIT - JOB_ENVELOPE)
    with caplog.at_level(logging.INFO):
        refused = await api.request("PATCH", jobs("default", "deepest"),
                                    [{"op": "replace", "path": path, "value": {"b": 1}}],
                                    ctype="application/json-patch+json")
    assert (refused.code, refused.body["reason"]) == (500, "InternalError"), refused.body
    assert refused.body["message"] == "object not decodable: invalid character '{' exceeded max depth"
    got = await api.request("GET", jobs("default", "deepest"))
    assert got.code == 200 and '"b"' not in json.dumps(got.body)
    nothing_logged(caplog)
