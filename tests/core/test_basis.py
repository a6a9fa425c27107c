"""shared/core/basis.py: what a decision was made from, written on its pass record and
rebuilt by ``kto replay``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.core import basis, views

NOW = dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)


def obj(kind: str, name: str, rv: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "resourceVersion": rv, "uid": f"u-{name}",
                                                           **meta}}


JOB = {**obj("PyTorchJob", "p", "10"), "apiVersion": "kubeflow.org/v1", "spec": {"x": 1}}
LOGGED_POD = obj("Pod", "p-master-0", "11")
READ_POD = obj("Pod", "p-worker-0", "12")


def logged(version: basis.Version) -> bool:
    return version in {basis.version_of(JOB), basis.version_of(LOGGED_POD)}


def test_a_version_taken_from_a_record_is_named_and_one_read_from_the_api_server_is_carried_whole() -> None:
    described = basis.describe(JOB, [LOGGED_POD, READ_POD], NOW, logged=logged, settings={"a": 1})
    assert described["now"] == "2024-01-02T03:04:05.678901+00:00"
    assert described["job"] == {"kind": "PyTorchJob", "name": "p", "rv": "10", "uid": "u-p"}
    assert "object" not in described["children"][0] and described["children"][1]["object"] == READ_POD
    assert described["settings"] == {"a": 1}


def test_a_basis_rebuilds_the_same_inputs_from_the_log() -> None:
    old = {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "9"}, "spec": {"x": 0}}
    described = basis.describe(JOB, [LOGGED_POD, READ_POD], NOW, logged=logged, old=old, executed=[])
    on_the_log = {basis.version_of(o): o for o in (JOB, LOGGED_POD)}
    inputs = basis.rebuild(described, on_the_log.get)
    assert (inputs.now, inputs.job, inputs.children, inputs.old) == (NOW, JOB, [LOGGED_POD, READ_POD], old)
    assert inputs.extra == {"executed": []}


def test_a_child_the_worker_saw_going_is_carried_without_its_stamp_and_gets_one_back() -> None:
    going = {**READ_POD, "metadata": {**READ_POD["metadata"], "deletionTimestamp": "whatever the worker said"}}
    described = basis.describe(JOB, [going], NOW, logged=logged, terminating={views.child_key(going)})
    ref = described["children"][0]
    assert ref["terminating"] is True and "deletionTimestamp" not in ref["object"]["metadata"]
    rebuilt = basis.rebuild(described, {basis.version_of(JOB): JOB}.get).children[0]
    assert rebuilt["metadata"]["deletionTimestamp"] == described["now"]


def test_a_version_neither_carried_nor_on_the_log_is_named() -> None:
    described = basis.describe(JOB, [LOGGED_POD], NOW, logged=logged)
    with pytest.raises(basis.Unresolved, match="Pod p-master-0 at resourceVersion 11 is not on the log"):
        basis.rebuild(described, lambda version: JOB if version == basis.version_of(JOB) else None)


@pytest.mark.parametrize(("broken", "message"), [
    pytest.param({"job": {}}, "basis lacks 'now'", id="no-now"),
    pytest.param({"now": NOW.isoformat(), "job": {"object": JOB}, "children": {"a": 1}}, "children is not a list",
                 id="children-not-a-list"),
    pytest.param({"now": NOW.isoformat(), "job": "p"}, "is not an object", id="job-not-an-object"),
])
def test_a_basis_that_is_not_one_is_refused_by_name(broken: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        basis.rebuild(broken, lambda version: None)


def test_what_a_view_took_from_records_counts_as_logged() -> None:
    view = views.JobView()
    view.note_logged(LOGGED_POD, False)
    assert basis.logged_in(view)(basis.version_of(LOGGED_POD))
    assert not basis.logged_in(view)(basis.version_of(READ_POD))
