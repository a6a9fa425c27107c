"""The sim's Job controller on its own: its pure decisions, and Jobs run in a sim cluster with short
backoffs (what kube-controller-manager does with the same Jobs is held against it in
test_differential_jobs.py)."""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import pytest

from sim import cluster as sim_cluster_module
from sim import settings as sim_settings_module
from sim.apiserver import jobcontrolling

Obj = dict[str, Any]
TIMEOUT = 20.0


# --- pure decisions ---------------------------------------------------------------------------

def test_backoff_doubles_per_failure_up_to_the_cap() -> None:
    now = 1000.0
    assert jobcontrolling.Backoff().remaining(10, now) == 0
    assert jobcontrolling.Backoff(1, now).remaining(10, now) == 10
    assert jobcontrolling.Backoff(3, now - 5).remaining(10, now) == 35
    assert jobcontrolling.Backoff(20, now).remaining(10, now) == jobcontrolling.MAX_BACKOFF
    assert jobcontrolling.Backoff(1, now - 11).remaining(10, now) == 0


def _finished(phase: str, at: str) -> Obj:
    return {"metadata": {"name": "p"}, "status": {"phase": phase, "containerStatuses": [
        {"state": {"terminated": {"finishedAt": at}}}]}}


def test_backoff_counts_failures_since_the_last_success() -> None:
    failed = _finished("Failed", "2030-01-01T00:00:10Z")
    after_one = jobcontrolling.Backoff().after([], [failed])
    assert after_one.failures == 1 and after_one.last_failure == jobcontrolling._epoch("2030-01-01T00:00:10Z")
    assert after_one.after([_finished("Succeeded", "2030-01-01T00:00:20Z")], []) == jobcontrolling.Backoff()
    later = _finished("Failed", "2030-01-01T00:00:30Z")
    mixed = after_one.after([_finished("Succeeded", "2030-01-01T00:00:20Z")], [failed, later])
    assert mixed.failures == 1 and mixed.last_failure == jobcontrolling._epoch("2030-01-01T00:00:30Z")


def test_status_body_leaves_out_what_go_omits() -> None:
    status = {"conditions": [], "startTime": "t", "active": 0, "succeeded": 2, "failed": 0, "terminating": 0,
              "uncountedTerminatedPods": {"succeeded": [], "failed": ["u"]}, "ready": 0}
    assert jobcontrolling.status_body(status) == {
        "startTime": "t", "succeeded": 2, "terminating": 0, "uncountedTerminatedPods": {"failed": ["u"]}, "ready": 0}


def test_conditions_are_added_true_and_only_changed_to_false() -> None:
    conditions: list[Obj] = []
    assert not jobcontrolling.ensure_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed")
    assert jobcontrolling.ensure_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended")
    assert not jobcontrolling.ensure_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended")
    assert jobcontrolling.ensure_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed")
    assert [(c["type"], c["status"], c["reason"]) for c in conditions] == [("Suspended", "False", "JobResumed")]


def test_pod_from_template() -> None:
    job = {"metadata": {"name": "launcher", "uid": "u-1"}, "spec": {"template": {
        "metadata": {"labels": {"a": "b"}, "finalizers": ["x.io/keep"], "name": "ignored"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}
    pod = jobcontrolling.pod_from_template(job)
    assert pod["metadata"] == {
        "generateName": "launcher-", "labels": {"a": "b"},
        "finalizers": ["x.io/keep", jobcontrolling.FINALIZER],
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "launcher", "uid": "u-1",
                             "controller": True, "blockOwnerDeletion": True}]}
    assert pod["spec"] == job["spec"]["template"]["spec"] and pod["spec"] is not job["spec"]["template"]["spec"]


# --- in a cluster -----------------------------------------------------------------------------

@pytest.fixture
def sim_settings(tmp_path: pathlib.Path) -> sim_settings_module.SimSettings:
    return sim_settings_module.SimSettings(kubeconfig=tmp_path / "kubeconfig", nodes=4, gpus_per_node=8,
                                           cpu_per_node="1000", pod_duration=0.1, startup_delay=0.01,
                                           job_backoff=0.5)


def job(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    template: Obj = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"metadata": {"name": name}, "spec": {**spec, "template": template}}


async def until(check: Any, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.02)


def true_conditions(cluster: sim_cluster_module.Cluster, name: str) -> list[str]:
    found = cluster.store.peek("jobs.batch", "default", name)
    return [c["type"] for c in ((found or {}).get("status") or {}).get("conditions") or [] if c["status"] == "True"]


def job_pods(cluster: sim_cluster_module.Cluster, name: str) -> list[Obj]:
    return [p for p in cluster.store.iter_objects("pods")
            if (p["metadata"].get("labels") or {}).get("job-name") == name]


async def test_a_wide_job_completes_cheaply(sim_cluster: sim_cluster_module.Cluster) -> None:
    writes = sim_cluster.store.subscribe("jobs.batch")
    await sim_cluster.store.create("jobs.batch", job("wide", completions=200, parallelism=200), "default")
    assert await until(lambda: "Complete" in true_conditions(sim_cluster, "wide"))
    status = sim_cluster.store.peek("jobs.batch", "default", "wide")["status"]
    assert status["succeeded"] == 200 and "active" not in status and status["uncountedTerminatedPods"] == {}
    assert true_conditions(sim_cluster, "wide") == ["SuccessCriteriaMet", "Complete"]
    pods = job_pods(sim_cluster, "wide")
    assert len(pods) == 200 and not any(p["metadata"].get("finalizers") for p in pods)
    events = 0
    while True:
        try:
            await asyncio.wait_for(writes.__anext__(), 0.05)
        except TimeoutError:
            break
        events += 1
    writes.close()
    # Pod events are batched: a handful of status writes, not one per pod and phase.
    assert events < 40, events


async def test_a_failed_pod_is_replaced_after_the_backoff(sim_cluster: sim_cluster_module.Cluster) -> None:
    annotations = {"sim.kto.dev/exit-code": "1", "sim.kto.dev/duration": "50ms"}
    await sim_cluster.store.create("jobs.batch", job("flaky", annotations, backoffLimit=2), "default")
    assert await until(lambda: "Failed" in true_conditions(sim_cluster, "flaky"))
    pods = job_pods(sim_cluster, "flaky")
    assert len(pods) == 3 and all(p["status"]["phase"] == "Failed" for p in pods)
    status = sim_cluster.store.peek("jobs.batch", "default", "flaky")["status"]
    assert status["failed"] == 3 and true_conditions(sim_cluster, "flaky") == ["FailureTarget", "Failed"]
    starts = sorted(jobcontrolling._epoch(p["metadata"]["creationTimestamp"]) or 0 for p in pods)
    # 0.5 s, then 1 s: the second replacement comes a whole second or more after the first pod.
    assert starts[2] - starts[0] >= 1


async def test_a_deleted_pod_counts_as_failed_and_is_replaced(sim_cluster: sim_cluster_module.Cluster) -> None:
    store = sim_cluster.store
    await store.create("jobs.batch", job("j", {"sim.kto.dev/duration": "60s"}), "default")
    first = await until(lambda: [p for p in job_pods(sim_cluster, "j") if p["status"].get("phase") == "Running"])
    await store.delete("pods", "default", first[0]["metadata"]["name"])
    assert await until(lambda: (store.peek("jobs.batch", "default", "j")["status"].get("failed") == 1
                                and len(job_pods(sim_cluster, "j")) == 1
                                and job_pods(sim_cluster, "j")[0]["metadata"]["uid"] != first[0]["metadata"]["uid"]))
    status = store.peek("jobs.batch", "default", "j")["status"]
    assert status["active"] == 1 and not status.get("conditions")


async def test_orphaned_pods_lose_the_finalizer(sim_cluster: sim_cluster_module.Cluster) -> None:
    store = sim_cluster.store
    await store.create("jobs.batch", job("j", {"sim.kto.dev/duration": "60s"}, parallelism=3), "default")
    assert await until(lambda: len(job_pods(sim_cluster, "j")) == 3)
    await store.delete("jobs.batch", "default", "j", propagation="Orphan")
    assert await until(lambda: all(not p["metadata"].get("finalizers") and not p["metadata"].get("ownerReferences")
                                   for p in job_pods(sim_cluster, "j")))
    assert len(job_pods(sim_cluster, "j")) == 3


async def test_a_job_wider_than_one_sync(tmp_path: pathlib.Path) -> None:
    """More pods than one sync creates (500) or takes into uncountedTerminatedPods (500): several
    syncs, and the Job completes only once every pod is counted."""
    settings = sim_settings_module.SimSettings(nodes=8, cpu_per_node="1000", pod_duration=0.2, startup_delay=0.01)
    async with sim_cluster_module.Cluster(settings) as cluster:
        await cluster.store.create("jobs.batch", job("huge", completions=700, parallelism=700), "default")
        assert await until(lambda: "Complete" in true_conditions(cluster, "huge"), 60)
        status = cluster.store.peek("jobs.batch", "default", "huge")["status"]
        assert status["succeeded"] == 700 and status["uncountedTerminatedPods"] == {}
        assert len(job_pods(cluster, "huge")) == 700


# --- Indexed completion mode ------------------------------------------------------------------

@pytest.mark.parametrize(("text", "indexes"), [
    pytest.param("", set(), id="none"),
    pytest.param("0", {0}, id="one"),
    pytest.param("0-2,4,6-7", {0, 1, 2, 4, 6, 7}, id="intervals"),
])
def test_completed_indexes_read_and_write_as_intervals(text: str, indexes: set[int]) -> None:
    assert jobcontrolling.parse_indexes(text) == indexes
    assert jobcontrolling.format_indexes(indexes) == text


def test_an_indexed_pod_carries_its_index_as_annotation_label_hostname_and_env() -> None:
    job = {"metadata": {"name": "js-workers-0", "uid": "u-1"}, "spec": {
        "completionMode": "Indexed", "completions": 3, "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"subdomain": "js", "containers": [{"name": "c", "image": "i"}]}}}}
    pod = jobcontrolling.pod_from_template(job, 2)
    assert pod["metadata"]["generateName"] == "js-workers-0-2-"
    assert pod["metadata"]["labels"] == {"a": "b", jobcontrolling.INDEX_KEY: "2"}
    assert pod["metadata"]["annotations"] == {jobcontrolling.INDEX_KEY: "2"}
    assert pod["spec"]["hostname"] == "js-workers-0-2" and pod["spec"]["subdomain"] == "js"
    assert pod["spec"]["containers"][0]["env"] == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {
        "fieldRef": {"fieldPath": f"metadata.labels['{jobcontrolling.INDEX_KEY}']"}}}]
    assert "hostname" not in job["spec"]["template"]["spec"], "the Job's template is left as it was"


def test_a_long_job_name_is_cut_before_its_index_as_generated_names_are() -> None:
    job = {"metadata": {"name": "x" * 63, "uid": "u"}, "spec": {"template": {"spec": {"containers": []}}}}
    name = jobcontrolling.pod_from_template(job, 12)["metadata"]["generateName"]
    assert len(name) == jobcontrolling.MAX_GENERATED_NAME and name.endswith("x-12-")


async def test_an_indexed_job_runs_one_pod_per_index_and_records_completed_indexes(
        sim_cluster: sim_cluster_module.Cluster) -> None:
    await sim_cluster.store.create(
        "jobs.batch", job("idx", completions=4, parallelism=2, completionMode="Indexed"), "default")
    assert await until(lambda: "Complete" in true_conditions(sim_cluster, "idx"))
    status = sim_cluster.store.peek("jobs.batch", "default", "idx")["status"]
    assert status["completedIndexes"] == "0-3" and status["succeeded"] == 4
    pods = job_pods(sim_cluster, "idx")
    indexes = sorted(int(p["metadata"]["labels"][jobcontrolling.INDEX_KEY]) for p in pods)
    assert indexes == [0, 1, 2, 3]
    for pod in pods:
        index = pod["metadata"]["annotations"][jobcontrolling.INDEX_KEY]
        assert pod["metadata"]["name"].startswith(f"idx-{index}-") and pod["spec"]["hostname"] == f"idx-{index}"


async def test_a_failed_index_is_made_again_until_the_backoff_limit(sim_cluster: sim_cluster_module.Cluster) -> None:
    annotations = {"sim.kto.dev/exit-code": "1", "sim.kto.dev/duration": "50ms"}
    await sim_cluster.store.create("jobs.batch", job(
        "idx-flaky", annotations, completions=1, parallelism=1, completionMode="Indexed", backoffLimit=1), "default")
    assert await until(lambda: "Failed" in true_conditions(sim_cluster, "idx-flaky"))
    pods = job_pods(sim_cluster, "idx-flaky")
    assert [p["metadata"]["labels"][jobcontrolling.INDEX_KEY] for p in pods] == ["0", "0"]
    assert not sim_cluster.store.peek("jobs.batch", "default", "idx-flaky")["status"].get("completedIndexes")
