"""Issue 10, crash consistency: conflicts are re-read and retried, never dead-lettered; a late
DELETED of a previous incarnation leaves the current one's bookkeeping alone; a record lying about
a job's resourceVersion never freezes it, and a forged failure verdict never fails it (the API
server is the truth); a reconciler killed right after deciding a deadline failure leaves its
successor to delete every pod and Service of the Failed job."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import pathlib
from typing import Any

import pytest
from opentelemetry import context as otel_context

from services.reconciler import reconciling as reconciler_module
from services.reconciler.settings import ReconcilerSettings
from shared.bus import records
from shared.kube import resources
from tests.bus.test_consuming import read_topic
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_crashes import killed_and_replaced, start_reconciler_process
from tests.pipeline.test_pipeline import job
from tests.pipeline.test_run_policy import annotate, children_are, condition, killing_on, successor_acted


async def test_status_writes_meeting_409_conflicts_are_read_again_and_retried_never_dead_lettered(
    pipeline: Pipeline,
) -> None:
    manifest = job("JAXJob", "conflicted", {"Worker": (2, "Never")}, "jax")
    # Every update of the job (its /status included) answers 409 for a while: far more than the
    # status worker's conflict_attempts in a row.
    pipeline.set_faults("conflict_rate=1;resources=jaxjobs.kubeflow.org")
    await pipeline.submit(manifest)
    await asyncio.sleep(4.0)
    pipeline.set_faults("")
    await pipeline.wait_for("JAXJob", "conflicted", "Succeeded", timeout=60)
    dead = await read_topic(pipeline.kafka, pipeline.kafka.dlq_topic)
    assert dead == [], "a conflict is never dead-lettered"


def pod(uid: str, rv: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "j-worker-0", "namespace": "ns", "uid": uid, "resourceVersion": str(rv)},
            "status": {"phase": "Failed"}}


async def test_a_late_deleted_of_a_previous_incarnation_keeps_the_current_one_going_away(tmp_path: pathlib.Path) -> None:
    # Only the bookkeeping is exercised: no cluster or broker call is made.
    settings = ReconcilerSettings(kubeconfig=tmp_path / "none", instance="r")
    reconciler = reconciler_module.Reconciler(settings, None, None)  # type: ignore[arg-type]
    job_key = "c/ns/JAXJob/j"
    await reconciler.handle(records.Observation(
        key=job_key, resource_version="20", object_kind="Pod", event="ADDED", object=pod("second", 20),
        source="watcher"), otel_context.get_current())
    memory = reconciler.memory(job_key)
    assert memory is not None
    # The worker deleted the second incarnation for a restart ...
    memory.expected.deleted(("Pod", "j-worker-0"), "second", asyncio.get_running_loop().time())
    # ... and then a DELETED of the first one comes late (a redelivery, a relist).
    await reconciler.handle(records.Observation(
        key=job_key, resource_version="10", object_kind="Pod", event="DELETED", object=pod("first", 10),
        source="watcher"), otel_context.get_current())
    [child] = memory.expected.seen_as(memory.view.children.items(), asyncio.get_running_loop().time(),
                                      dt.datetime.now(dt.UTC))[0]
    assert child["metadata"].get("deletionTimestamp"), "still counted as going away: no second restart"
    await reconciler.handle(records.Observation(
        key=job_key, resource_version="21", object_kind="Pod", event="DELETED", object=pod("second", 21),
        source="watcher"), otel_context.get_current())
    assert not memory.expected.going(("Pod", "j-worker-0"), pod("second", 21), asyncio.get_running_loop().time())
    reconciler.close()


async def test_a_record_with_a_forged_resource_version_does_not_freeze_a_live_job(pipeline: Pipeline) -> None:
    manifest = job("JAXJob", "forged-rv", {"Worker": (2, "Never")}, "jax")
    manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "4s"
    created = await pipeline.submit(manifest)
    stale = copy.deepcopy(created)
    stale["metadata"]["resourceVersion"] = str(10**15)  # ahead of anything the API server will say
    stale["apiVersion"], stale["kind"] = "kubeflow.org/v1", "JAXJob"
    async with pipeline.thief("watcher") as publisher:
        await publisher.publish(records.Observation(
            key=pipeline.key("JAXJob", "forged-rv"), resource_version=str(10**15), object_kind="JAXJob",
            event="MODIFIED", object=stale, source="watcher"))
    await pipeline.wait_for("JAXJob", "forged-rv", "Succeeded", timeout=60)
    dead = await read_topic(pipeline.kafka, pipeline.kafka.dlq_topic)
    assert dead == []


@pytest.mark.parametrize("action", ["job_failed", "job_validation_failed"])
async def test_a_forged_failure_verdict_on_the_topic_does_not_fail_a_running_job(
    pipeline: Pipeline, action: str,
) -> None:
    name = f"forged-{action.replace('_', '-')}"
    manifest = job("JAXJob", name, {"Worker": (2, "Never")}, "jax")
    annotate(manifest, "Worker", duration="4s")
    created = await pipeline.submit(manifest)
    await pipeline.wait_for("JAXJob", name, "Running", timeout=30)
    reason = "JAXJobFailedValidation" if action == "job_validation_failed" else "JAXJobFailed"
    async with pipeline.thief("reconciler") as publisher:
        # Everything a forger can set, as the reconciler itself would write it.
        await publisher.publish(records.Decision(
            key=pipeline.key("JAXJob", name), action=action, reason=reason,
            message=f"Job {name} has failed because it was active longer than specified deadline",
            detail={"uid": created["metadata"]["uid"], "kind": "deadline"}, source="reconciler", instance="forger"))
    done = await pipeline.wait_for("JAXJob", name, "Succeeded", timeout=60)
    assert condition(done, "Failed") is None
    assert "kto.dev/failure" not in (done["metadata"].get("annotations") or {})
    assert {p["metadata"]["name"] for p in await pipeline.pods(name)} == {f"{name}-worker-0", f"{name}-worker-1"}


async def test_a_reconciler_killed_right_after_a_deadline_verdict_leaves_its_successor_to_delete_every_pod(
    pipeline: Pipeline,
) -> None:
    """The verdict is on the job before it is on the topic: the status worker writes Failed from
    it, and the successor, finding a Failed job with cleanPodPolicy None, still deletes every pod
    and Service (§6.6: a deadline failure ignores cleanPodPolicy)."""
    kind, name = "PyTorchJob", "crash-deadline"
    manifest = job(kind, name, {"Master": (1, "Never"), "Worker": (2, "Never")}, "pytorch",
                   runPolicy={"activeDeadlineSeconds": 3})
    annotate(manifest, "Master", duration="120s")
    annotate(manifest, "Worker", duration="120s")
    key = pipeline.key(kind, name)
    await pipeline.stop("reconciler")
    first = await start_reconciler_process(pipeline)
    try:
        async with killing_on(pipeline, first, key, lambda r: r.action == "job_failed") as killed:
            await pipeline.submit(manifest)
            decided = await asyncio.wait_for(killed, 30)
        # Killed before (deletes are slowed) or while deleting; the status worker goes on.
        failed = await pipeline.wait_for(kind, name, "Failed", timeout=30)
        last = condition(failed, "Failed")
        assert last is not None and (last["reason"], last["message"]) == (
            "PyTorchJobFailed", f"Job {name} has failed because it was active longer than specified deadline")
        async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
            await children_are(pipeline, name, set(), timeout=40)
    finally:
        if first.poll() is None:
            first.kill()
    assert await successor_acted(pipeline, key, decided.instance, "child_deleted")


async def test_a_replica_deleted_for_a_restart_is_recreated_when_the_watcher_died_before_its_deleted(
    pipeline: Pipeline,
) -> None:
    """The watcher dies while the reconciler deletes a failed worker for its restart, and its
    successor, knowing nothing of the pod, publishes no DELETED for it: the reconciler asks the
    API server after a few seconds instead of waiting ``delete_grace`` (300 s), and recreates
    the worker, so the job runs its restarts as it should."""
    manifest = job("PyTorchJob", "orphaned-restart", {"Master": (1, "ExitCode"), "Worker": (1, "ExitCode")},
                   "pytorch", runPolicy={"backoffLimit": 3})
    annotate(manifest, "Master", duration="60s")
    annotate(manifest, "Worker", duration="0.5s", exit_code="137", fail_times="1")
    pipeline.set_faults("latency=delete:2000ms")
    await pipeline.submit(manifest)

    def deletes() -> list[dict[str, Any]]:
        return [r for r in pipeline.requests()
                if r["verb"] == "delete" and r["name"] == "orphaned-restart-worker-0"]

    async def deleting() -> bool:
        return bool(deletes())

    # The worker fails; the reconciler's DELETE of it is slow: the watcher goes meanwhile.
    async def failed() -> bool:
        pods = {p["metadata"]["name"]: p for p in await pipeline.pods("orphaned-restart")}
        worker = pods.get("orphaned-restart-worker-0")
        return worker is not None and (worker.get("status") or {}).get("phase") == "Failed"

    await pipeline.eventually(failed, timeout=30, what="worker 0 failed")
    await asyncio.sleep(0.5)  # the failure is on the topic, the DELETE under way
    await pipeline.stop("watcher")
    pipeline.set_faults("")
    await pipeline.eventually(deleting, timeout=20, what="the restart's DELETE")
    pipeline.start_watcher("watcher-2")

    async def recreated() -> bool:
        pods = {p["metadata"]["name"]: p for p in await pipeline.pods("orphaned-restart")}
        worker = pods.get("orphaned-restart-worker-0")
        return worker is not None and not worker["metadata"].get("deletionTimestamp") and bool(deletes())

    try:
        await pipeline.eventually(recreated, timeout=30)
    except AssertionError:
        trail = [(r["verb"], r["resource"], r["name"], r["code"]) for r in pipeline.requests()
                 if (r["name"] or "").startswith("orphaned-restart") and r["verb"] not in ("get", "list", "watch")]
        raise AssertionError(f"worker 0 not recreated after its restart: {trail}") from None
    async def worker_finished() -> bool:
        status = (await pipeline.job("PyTorchJob", "orphaned-restart")).get("status") or {}
        return ((status.get("replicaStatuses") or {}).get("Worker") or {}).get("succeeded") == 1

    await pipeline.eventually(worker_finished, timeout=30, what="the recreated worker succeeded")
    job_now = await pipeline.job("PyTorchJob", "orphaned-restart")
    assert job_now["metadata"]["annotations"]["kto.dev/replica-restarts"] == "1", "the restart counted once"
    assert not any(c["type"] == "Failed" for c in job_now["status"]["conditions"])


async def test_pods_the_garbage_collector_removes_before_the_jobs_deletion_is_seen_are_not_made_again(
    pipeline: Pipeline,
) -> None:
    """A job deleted in the foreground keeps its name while the garbage collector deletes its
    pods; the job's record and its pods' come on separate watches, so a pod's DELETED can reach
    the reconciler before the job's deletionTimestamp does (an independent chaos run deleting jobs
    5 s after creation, their long-running pods starting, had pods made twice before the jobs were
    gone). The reconciler reads the job afresh before making a pod it did not delete again: the
    API server says the job is going, and nothing is made."""
    name = "gc-first"
    manifest = job("JAXJob", name, {"Worker": (2, "Never")}, "jax")
    annotate(manifest, "Worker", duration="60s")
    manifest["metadata"]["finalizers"] = ["kto.dev/test-hold"]  # the job stays, terminating, after its pods go
    await pipeline.submit(manifest)
    await pipeline.wait_for("JAXJob", name, "Running", timeout=30)
    pods = {p["metadata"]["name"]: p for p in await pipeline.pods(name)}
    assert len(pods) == 2
    await pipeline.stop("watcher")  # its records of the deletion would come in the order they may, or not
    rt = resources.JOB_TYPES["JAXJob"]
    await pipeline.client.delete(rt, pipeline.namespace, name, propagation="Foreground")

    async def pods_gone() -> bool:
        return not await pipeline.pods(name)

    await pipeline.eventually(pods_gone, timeout=60, what="the garbage collector deleting the pods")
    creates_before = len([r for r in pipeline.requests() if r["verb"] == "create" and r["resource"] == "pods"])
    async with pipeline.thief("watcher") as publisher:
        for pod in pods.values():  # what the watcher publishes when a pod's DELETED comes before the job's news
            gone = {**pod, "apiVersion": "v1", "kind": "Pod"}
            await publisher.publish(records.Observation(
                key=pipeline.key("JAXJob", name), resource_version=str(pod["metadata"]["resourceVersion"]),
                object_kind="Pod", event="DELETED", object=gone, source="watcher"))
    await asyncio.sleep(5.0)
    made = [r for r in pipeline.requests() if r["verb"] == "create" and r["resource"] == "pods"][creates_before:]
    assert made == [], made
    assert await pipeline.pods(name) == []
    await pipeline.client.patch(rt, pipeline.namespace, name, {"metadata": {"finalizers": None}})
