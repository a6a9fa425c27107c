"""A JobSet served by kto end to end, on both tiers: two replicated jobs, the second depending on
the first's completion, run as Indexed Jobs (sim/'s Job controller or kube-controller-manager's) on
nodes whose pods are local processes; the pods are labelled as JobSet's, each resolves the others as
``<jobset>-<replicatedJob>-<job>-<pod>.<subdomain>``, and the JobSet reaches Completed; ``kto replay``
decides every recorded pass again without a divergence."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import yaml

from shared.api import jobsets
from shared.core import settings as operator_settings
from shared.kube import resources
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_pipeline import job as v1_job
from tests.pipeline.test_replay import kto
from tests.sdk import conftest as sdk_conftest
from tests.sdk.conftest import label_nodes

ROOT = pathlib.Path(__file__).resolve().parents[2]
INDEX = "batch.kubernetes.io/job-completion-index"
RESOLVE = ("import socket, sys\n"
           "for name in sys.argv[1:]:\n"
           "    print(name, socket.gethostbyname(name))\n")


def replicated(name: str, replicas: int, pods: int, resolve: list[str], **fields: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "python:3.11", "command": ["python3", "-c", RESOLVE, *resolve]}
    return {"name": name, "replicas": replicas, **fields, "template": {"spec": {
        "parallelism": pods, "completions": pods, "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}}


async def test_a_jobset_with_depends_on_runs_to_completed(pipeline: Pipeline) -> None:
    await label_nodes(pipeline, "process")
    await asyncio.sleep(sdk_conftest.NODE_WATCH)
    try:
        names = ["js-a-0-0.js", "js-a-0-1.js", "js-b-1-1.js", f"js-b-0-0.js.{pipeline.namespace}.svc"]
        await pipeline.submit({
            "apiVersion": jobsets.API_VERSION, "kind": "JobSet", "metadata": {"name": "js"},
            "spec": {"replicatedJobs": [
                replicated("a", 1, 2, ["js-a-0-1.js"]),
                replicated("b", 2, 2, names, dependsOn=[{"name": "a", "status": "Complete"}]),
            ]}})
        done = await pipeline.wait_for("JobSet", "js", "Completed", timeout=90)
    finally:
        await label_nodes(pipeline, "simulated")
    status = done["status"]
    assert status["terminalState"] == "Completed" and status["restarts"] == 0
    assert sorted((s["name"], s["succeeded"]) for s in status["replicatedJobsStatus"]) == [("a", 1), ("b", 2)]
    completed = next(c for c in status["conditions"] if c["type"] == "Completed")
    assert (completed["reason"], completed["message"]) == ("AllJobsCompleted", "jobset completed successfully")

    jobs, _ = await pipeline.client.list(resources.BATCH_JOBS, pipeline.namespace,
                                         label_selector=f"{jobsets.JOBSET_NAME_LABEL}=js")
    by_name = {j["metadata"]["name"]: j for j in jobs}
    assert sorted(by_name) == ["js-a-0", "js-b-0", "js-b-1"]
    a_done = by_name["js-a-0"]["status"]["completionTime"]
    assert all(by_name[n]["metadata"]["creationTimestamp"] >= a_done for n in ("js-b-0", "js-b-1")), \
        "b's Jobs are made once a completed"

    pods, _ = await pipeline.client.list(resources.PODS, pipeline.namespace,
                                         label_selector=f"{jobsets.JOBSET_NAME_LABEL}=js")
    assert len(pods) == 6
    for pod in pods:
        labels = pod["metadata"]["labels"]
        job = f"js-{labels[jobsets.REPLICATED_JOB_LABEL]}-{labels[jobsets.JOB_INDEX_LABEL]}"
        assert pod["metadata"]["name"].startswith(f"{job}-{labels[INDEX]}-")
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"{job}-{labels[INDEX]}", "js")
        # Each pod resolved its names or exited 1, which (backoffLimit 0) would have failed the JobSet.
        assert pod["status"]["phase"] == "Succeeded"
    service = await pipeline.client.get(resources.SERVICES, pipeline.namespace, "js")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {jobsets.JOBSET_NAME_LABEL: "js"}

    await asyncio.sleep(2.0)  # the last pass and its observation reach the log
    replay = await kto(pipeline, "replay", "--all", "-n", pipeline.namespace, "-o", "json")
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    reports = {r["key"]: r for r in json.loads(replay.stdout)["jobs"]}
    report = reports[pipeline.key("JobSet", "js")]
    assert report["ok"] and report["divergence"] is None and report["passes"] >= 3, report


async def test_a_jobset_is_left_to_the_real_controller_when_kto_does_not_serve_jobsets(pipeline: Pipeline) -> None:
    """``KTO_SERVE_JOBSETS=false``: nothing under a JobSet's key, no Job, no status; a JobSet whose
    controller is a job (here a suspended PyTorchJob) is still published under that job's key."""
    await pipeline.stop("watcher")
    await pipeline.stop("reconciler")
    pipeline.start_watcher(serve_jobsets=False)
    pipeline.start_reconciler(operator=operator_settings.OperatorSettings(serve_jobsets=False))
    trainer = await pipeline.submit(v1_job("PyTorchJob", "trainer", {"Master": (1, "OnFailure")}, "pytorch",
                                           runPolicy={"suspend": True}))
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "trainer",
             "uid": trainer["metadata"]["uid"], "controller": True}
    for name, owners in (("theirs", []), ("owned", [owner])):
        await pipeline.submit({"apiVersion": jobsets.API_VERSION, "kind": "JobSet",
                               "metadata": {"name": name, "ownerReferences": owners},
                               "spec": {"replicatedJobs": [replicated("a", 1, 1, [])]}})
    found: dict[str, set[tuple[str, str]]] = {}

    async def published() -> bool:
        history = await kto(pipeline, "history", "--all", "-n", pipeline.namespace, "-o", "json")
        rows = json.loads(history.stdout)["records"] if history.returncode == 0 else []
        found["seen"] = {(row["key"], row["record"].get("object_kind", "")) for row in rows if "record" in row}
        return (pipeline.key("PyTorchJob", "trainer"), "JobSet") in found["seen"]

    try:
        await pipeline.eventually(published, timeout=30)
    except AssertionError:
        raise AssertionError(sorted(found.get("seen", ()))) from None
    assert not any("/JobSet/" in key for key, _ in found["seen"]), sorted(found["seen"])
    jobs, _ = await pipeline.client.list(resources.BATCH_JOBS, pipeline.namespace)
    assert jobs == [] and "status" not in await pipeline.job("JobSet", "theirs")


async def test_a_failing_jobset_is_restarted_up_to_max_restarts_then_fails(pipeline: Pipeline) -> None:
    """Every Job is made again, one restart attempt higher, after a Job failed; past maxRestarts the
    JobSet fails with upstream's reason and message."""
    failing = replicated("a", 2, 1, [])
    failing["template"]["spec"]["template"]["metadata"] = {
        "annotations": {"sim.kto.dev/exit-code": "1", "sim.kto.dev/duration": "300ms"}}
    await pipeline.submit({"apiVersion": jobsets.API_VERSION, "kind": "JobSet", "metadata": {"name": "flaky"},
                           "spec": {"failurePolicy": {"maxRestarts": 1}, "replicatedJobs": [failing]}})
    done = await pipeline.wait_for("JobSet", "flaky", "Failed", timeout=90)
    status = done["status"]
    assert (status["restarts"], status["restartsCountTowardsMax"], status["terminalState"]) == (1, 1, "Failed")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"].startswith("jobset failed due to reaching max number of restarts (first failed job: flaky-a-")
    restarting = next(c for c in status["conditions"] if c["type"] == "RestartingJobSet")
    assert (restarting["status"], restarting["reason"]) == ("False", "JobSetFailed")
    jobs, _ = await pipeline.client.list(resources.BATCH_JOBS, pipeline.namespace,
                                         label_selector=f"{jobsets.JOBSET_NAME_LABEL}=flaky")
    live = [j for j in jobs if not j["metadata"].get("deletionTimestamp")]
    assert {j["metadata"]["labels"][jobsets.RESTARTS_KEY] for j in live} == {"1"}, "the second attempt's Jobs"


async def test_the_example_jobset_runs_to_completed(pipeline: Pipeline) -> None:
    """examples/jobset/depends-on.yaml as a user applies it: each train pod reads its JOB_COMPLETION_INDEX."""
    example = yaml.safe_load((ROOT / "examples" / "jobset" / "depends-on.yaml").read_text())
    await label_nodes(pipeline, "process")
    await asyncio.sleep(sdk_conftest.NODE_WATCH)
    try:
        await pipeline.submit(example)
        done = await pipeline.wait_for("JobSet", "depends-on", "Completed", timeout=90)
    finally:
        await label_nodes(pipeline, "simulated")
    assert sorted((s["name"], s["succeeded"]) for s in done["status"]["replicatedJobsStatus"]) == [
        ("prepare", 1), ("train", 2)]
