"""A worker's view of one job: newer objects win, and only changes that matter ask for a reconcile."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.core import views


def pod(rv: int, phase: str = "Pending", uid: str = "p-1", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pt-worker-0", "namespace": "ns", "uid": uid, "resourceVersion": str(rv),
                     "labels": {"training.kubeflow.org/replica-type": "worker"},
                     "ownerReferences": [{"uid": "job-1", "controller": True}]},
        "spec": {"containers": [{"name": "pytorch"}]},
        "status": {"phase": phase, **status},
    }


def scheduled(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["metadata"]["resourceVersion"] = str(rv)
    changed["spec"]["nodeName"] = "node-1"
    changed["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    changed["status"]["podIP"] = "10.0.0.7"
    return changed


def test_a_new_child_matters_and_scheduling_does_not() -> None:
    view = views.JobView()
    first = pod(10)
    assert view.observe_child(first, deleted=False) is True
    assert view.observe_child(scheduled(first, 11), deleted=False) is False
    assert view.children[("Pod", "pt-worker-0")]["metadata"]["resourceVersion"] == "11", "still kept, newest wins"


@pytest.mark.parametrize(
    "later",
    [
        pytest.param(pod(11, "Running"), id="phase"),
        pytest.param(pod(11, "Failed", containerStatuses=[
            {"name": "pytorch", "restartCount": 0, "state": {"terminated": {"exitCode": 137}}}]), id="exit-code"),
        pytest.param({**pod(11), "metadata": {**pod(11)["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}},
                     id="deleting"),
        pytest.param(pod(11, uid="p-2"), id="re-created"),
    ],
)
def test_changes_a_decision_or_a_status_looks_at_matter(later: dict[str, Any]) -> None:
    view = views.JobView()
    view.observe_child(pod(10), deleted=False)
    assert view.observe_child(later, deleted=False) is True


def test_an_older_object_is_ignored_and_a_deletion_matters_once() -> None:
    view = views.JobView()
    view.observe_child(pod(10, "Running"), deleted=False)
    assert view.observe_child(pod(9, "Pending"), deleted=False) is False
    assert view.children[("Pod", "pt-worker-0")]["status"]["phase"] == "Running"
    assert view.observe_child(pod(12), deleted=True) is True
    assert view.observe_child(pod(12), deleted=True) is False


def test_every_change_of_another_kind_of_child_matters() -> None:
    view = views.JobView()
    config = {"kind": "ConfigMap", "metadata": {"name": "pi-config", "uid": "c", "resourceVersion": "1"}, "data": {}}
    view.observe_child(config, deleted=False)
    edited = {**config, "metadata": {**config["metadata"], "resourceVersion": "2"}, "data": {"hostfile": "x"}}
    assert view.observe_child(edited, deleted=False) is True


def test_a_late_record_of_a_previous_incarnation_never_replaces_or_removes_the_current_one() -> None:
    view = views.JobView()
    view.observe_child(pod(10, "Failed", uid="old"), deleted=False)
    view.observe_child(pod(20, "Running", uid="new"), deleted=False)
    assert view.observe_child(pod(12, "Failed", uid="old"), deleted=False) is False, "a late update of the old pod"
    assert view.observe_child(pod(13, "Failed", uid="old"), deleted=True) is False, "a late deletion of the old pod"
    assert view.children[("Pod", "pt-worker-0")]["metadata"]["uid"] == "new"


def job(rv: int, uid: str = "job-1") -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "ns", "uid": uid, "resourceVersion": str(rv)}}


def test_a_job_record_older_than_the_view_asks_for_a_reread_and_the_api_server_wins() -> None:
    view = views.JobView()
    view.observe_job(job(10**9), deleted=False)  # a record that lies about its version
    view.observe_job(job(30), deleted=False)
    assert view.reread and view.job is not None and view.job["metadata"]["resourceVersion"] == str(10**9)
    view.replace_job(job(31))
    assert not view.reread and view.confirmed and view.job["metadata"]["resourceVersion"] == "31"
    view.observe_job(job(5, uid="job-0"), deleted=False)
    assert view.job["metadata"]["uid"] == "job-1", "a late record of a deleted job with the same name"


@pytest.mark.parametrize(("conditions", "done"), [
    pytest.param([{"type": "Created", "status": "True"}, {"type": "Succeeded", "status": "True"}], True, id="succeeded"),
    pytest.param([{"type": "Failed", "status": "True"}], True, id="failed"),
    pytest.param([{"type": "Complete", "status": "True"}], True, id="a-complete-trainjob"),
    pytest.param([{"type": "Running", "status": "True"}, {"type": "Failed", "status": "False"}], False, id="running"),
    pytest.param(None, False, id="no-status"),
])
def test_a_job_has_finished_when_a_succeeded_or_failed_condition_is_true(
        conditions: list[dict[str, str]] | None, done: bool) -> None:
    job = {"metadata": {"name": "j"}, **({"status": {"conditions": conditions}} if conditions is not None else {})}
    assert views.finished(job) is done


def test_children_are_held_as_their_projection_whether_observed_or_listed() -> None:
    full = {**pod(5, "Running"), "spec": {"containers": [{"name": "pytorch", "image": "i", "env": [{"name": "A"}]}],
                                          "volumes": [{"name": "v"}]}}
    observed, listed = views.JobView(), views.JobView()
    observed.observe_child(copy.deepcopy(full), deleted=False)
    listed.replace_children([copy.deepcopy(full)], set())
    key = ("Pod", "pt-worker-0")
    assert observed.children[key] == listed.children[key]
    assert observed.children[key]["spec"] == {"containers": [{"name": "pytorch"}]}


def test_a_child_read_from_the_view_is_a_copy_that_changes_nothing_held() -> None:
    view = views.JobView()
    view.observe_child(pod(5, "Running"), deleted=False)
    read = view.children[("Pod", "pt-worker-0")]
    read["status"]["phase"] = "Failed"
    assert view.children[("Pod", "pt-worker-0")]["status"]["phase"] == "Running"
    assert set(view.children) == {("Pod", "pt-worker-0")} and len(view.children) == 1


def test_every_logged_version_of_the_job_is_named_and_only_the_newest_of_a_child() -> None:
    view = views.JobView()
    job = {"kind": "PyTorchJob", "metadata": {"name": "pt", "resourceVersion": "1"}}
    view.note_logged(job, is_job=True)
    view.note_logged({**job, "metadata": {"name": "pt", "resourceVersion": "2"}}, is_job=True)
    view.note_logged(pod(5), is_job=False)
    view.note_logged(pod(6), is_job=False)
    assert ("PyTorchJob", "pt", "1") in view.logged and ("PyTorchJob", "pt", "2") in view.logged
    assert ("Pod", "pt-worker-0", "6") in view.logged
    assert ("Pod", "pt-worker-0", "5") not in view.logged and ("Pod", "pt-worker-0", "") not in view.logged
    assert ("Pod", "pt-worker-1", "6") not in view.logged


def finished_job(rv: int, uid: str = "j-1") -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "ns", "uid": uid, "resourceVersion": str(rv)},
            "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}


@pytest.mark.parametrize(("incoming", "seen"), [
    pytest.param(finished_job(7), True, id="the-released-version-again-a-resync"),
    pytest.param(finished_job(5), True, id="an-older-version-a-late-record"),
    pytest.param(finished_job(8), False, id="a-newer-version-an-edit"),
    pytest.param(finished_job(7, uid="j-2"), False, id="another-incarnation"),
    pytest.param({"metadata": {"uid": "j-1"}}, False, id="no-version"),
])
def test_a_released_job_is_known_again_only_as_it_was_or_older(incoming: dict[str, Any], seen: bool) -> None:
    mark = views.released_mark(finished_job(7))
    assert mark == ("j-1", 7)
    assert views.seen_before(incoming, mark) is seen
    assert not views.seen_before(incoming, None), "nothing released, nothing passed over"
