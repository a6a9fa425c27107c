"""et-operator's TrainingJob with ScaleOut / ScaleIn end to end (spec Part B), on both tiers:
the hostfile in the running launcher (read back by exec, as Horovod reads it) follows every
scale step, workers that stay are never restarted, a worker lost above minReplicas shrinks the
job, a ScaleIn below minReplicas fails with a message naming the bound, scalers run one at a
time in creation order, and every step is on the topic."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.bus import reading, records
from shared.kube import resources
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_crashes import killed_and_replaced, start_reconciler_process
from tests.pipeline.test_run_policy import killing_on

JOB = "et"
LAUNCHER = f"{JOB}-launcher"


def training_job(workers: int, minimum: int = 1, maximum: int = 5) -> dict[str, Any]:
    def template(name: str, **annotations: str) -> dict[str, Any]:
        return {"metadata": {"annotations": {"sim.kto.dev/duration": "600s", **annotations}},
                "spec": {"containers": [{"name": name, "image": "docker.io/example/horovod:elastic"}]}}

    return {
        "apiVersion": "kai.alibabacloud.com/v1alpha1", "kind": "TrainingJob", "metadata": {"name": JOB},
        "spec": {
            "cleanPodPolicy": "Running",
            "etReplicaSpecs": {
                # The simulated launcher runs one ssh per host of its hostfile, as horovodrun does.
                "launcher": {"replicas": 1, "template": template(
                    "launcher", **{"sim.kto.dev/ssh-hosts-file": "/etc/edl/hostfile"})},
                "worker": {"replicas": workers, "minReplicas": minimum, "maxReplicas": maximum,
                           "template": template("worker")},
            },
        },
    }


def scaler(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kai.alibabacloud.com/v1alpha1", "kind": kind, "metadata": {"name": name},
            "spec": {"selector": {"name": JOB}, **spec}}


def worker(index: int) -> str:
    return f"{JOB}-worker-{index}"


async def trainingjob(pipeline: Pipeline) -> dict[str, Any]:
    return await pipeline.client.get(resources.TRAININGJOBS, pipeline.namespace, JOB)


async def phase_is(pipeline: Pipeline, phase: str, timeout: float = 60.0) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def check() -> bool:
        seen["job"] = await trainingjob(pipeline)
        return (seen["job"].get("status") or {}).get("phase") == phase

    try:
        await pipeline.eventually(check, timeout=timeout)
    except AssertionError:
        raise AssertionError(f"TrainingJob never {phase}: status {seen.get('job', {}).get('status')}") from None
    return seen["job"]


async def hostfile(pipeline: Pipeline) -> str:
    answer = await pipeline.client.exec(pipeline.namespace, LAUNCHER, "launcher", ["cat", "/etc/edl/hostfile"])
    assert answer.exit_code == 0, answer.stderr
    return answer.stdout


async def hostfile_is(pipeline: Pipeline, indices: list[int]) -> None:
    expected = "".join(f"{worker(i)}:1\n" for i in indices)
    seen: dict[str, str] = {}

    async def check() -> bool:
        seen["text"] = await hostfile(pipeline)
        return seen["text"].strip("\n") == expected.strip("\n")

    try:
        await pipeline.eventually(check, timeout=60)
    except AssertionError:
        raise AssertionError(f"hostfile {seen.get('text')!r}, expected {expected!r}") from None


async def workers(pipeline: Pipeline) -> dict[str, str]:
    items, _ = await pipeline.client.list(resources.PODS, pipeline.namespace,
                                          label_selector=f"training-job-name={JOB},training-job-role=worker")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items if not p["metadata"].get("deletionTimestamp")}


async def workers_are(pipeline: Pipeline, indices: list[int]) -> dict[str, str]:
    seen: dict[str, str] = {}

    async def check() -> bool:
        seen.clear()
        seen.update(await workers(pipeline))
        return set(seen) == {worker(i) for i in indices}

    try:
        await pipeline.eventually(check, timeout=60)
    except AssertionError:
        raise AssertionError(f"workers {sorted(seen)}, expected {[worker(i) for i in indices]}") from None
    return dict(seen)


async def scaler_done(pipeline: Pipeline, kind: str, name: str, phase: str = "ScaleSucceeded") -> dict[str, Any]:
    rt = resources.SCALER_TYPES[kind]
    seen: dict[str, Any] = {}

    async def check() -> bool:
        seen["obj"] = await pipeline.client.get(rt, pipeline.namespace, name)
        return (seen["obj"].get("status") or {}).get("phase") == phase

    try:
        await pipeline.eventually(check, timeout=90)
    except AssertionError:
        raise AssertionError(f"{kind} {name} never {phase}: {seen.get('obj', {}).get('status')}") from None
    return seen["obj"]


async def test_a_training_job_scales_2_4_3_with_the_launchers_hostfile_following_each_step(pipeline: Pipeline) -> None:
    await pipeline.submit(training_job(2))
    job = await phase_is(pipeline, "Running")
    assert job["status"]["currentWorkers"] == [worker(0), worker(1)]
    await hostfile_is(pipeline, [0, 1])
    first = await workers_are(pipeline, [0, 1])

    await pipeline.submit(scaler("ScaleOut", "out", toAdd={"count": 2}))
    await scaler_done(pipeline, "ScaleOut", "out")
    grown = await workers_are(pipeline, [0, 1, 2, 3])
    assert {n: grown[n] for n in first} == first, "a worker that stays was restarted"
    await hostfile_is(pipeline, [0, 1, 2, 3])
    added = await pipeline.client.get(resources.PODS, pipeline.namespace, worker(3))
    assert added["metadata"]["labels"]["scaleout-name"] == "out"

    await pipeline.submit(scaler("ScaleIn", "in", toDelete={"count": 1}))
    await scaler_done(pipeline, "ScaleIn", "in")
    shrunk = await workers_are(pipeline, [0, 1, 2])
    assert {n: shrunk[n] for n in grown if n != worker(3)} == {n: grown[n] for n in grown if n != worker(3)}
    await hostfile_is(pipeline, [0, 1, 2])
    job = await phase_is(pipeline, "Running")
    assert job["status"]["currentWorkers"] == [worker(0), worker(1), worker(2)]

    # The scaling story, in order, on the job's key.
    steps = [r for r in await pipeline_records(pipeline) if r.get("action") == "step"]
    kinds = [s["reason"] for s in steps]
    assert "worker-added" in kinds and "worker-removed" in kinds and "hostfile-rewritten" in kinds
    assert kinds.index("worker-added") < kinds.index("worker-removed")


async def test_a_scale_in_below_min_replicas_fails_naming_the_bound_and_removes_nothing(pipeline: Pipeline) -> None:
    await pipeline.submit(training_job(3, minimum=2))
    await phase_is(pipeline, "Running")
    before = await workers_are(pipeline, [0, 1, 2])
    await pipeline.submit(scaler("ScaleIn", "too-many", toDelete={"count": 2}))
    failed = await scaler_done(pipeline, "ScaleIn", "too-many", phase="ScaleFailed")
    messages = " ".join(c.get("message", "") for c in failed["status"].get("conditions") or [])
    assert "minReplicas 2" in messages, messages
    await asyncio.sleep(1.0)
    assert await workers(pipeline) == before
    await hostfile_is(pipeline, [0, 1, 2])


async def test_two_scalers_run_one_at_a_time_in_creation_order(pipeline: Pipeline) -> None:
    await pipeline.submit(training_job(1))
    await phase_is(pipeline, "Running")
    await pipeline.submit(scaler("ScaleOut", "first", toAdd={"count": 1}))
    await pipeline.submit(scaler("ScaleOut", "second", toAdd={"count": 1}))
    first = await scaler_done(pipeline, "ScaleOut", "first")
    second = await scaler_done(pipeline, "ScaleOut", "second")

    def finished_at(obj: dict[str, Any]) -> str:
        return next(c["lastTransitionTime"] for c in obj["status"]["conditions"] if c["type"] == "ScaleSucceeded")

    def started_at(obj: dict[str, Any]) -> str:
        return next(c["lastTransitionTime"] for c in obj["status"]["conditions"] if c["type"] == "Scaling")

    assert finished_at(first) <= started_at(second)
    await workers_are(pipeline, [0, 1, 2])
    await hostfile_is(pipeline, [0, 1, 2])


async def test_a_worker_lost_above_min_replicas_shrinks_the_job_which_runs_on(pipeline: Pipeline) -> None:
    await pipeline.submit(training_job(3, minimum=1))
    await phase_is(pipeline, "Running")
    await workers_are(pipeline, [0, 1, 2])
    await pipeline.client.delete(resources.PODS, pipeline.namespace, worker(1))

    async def shrunk() -> bool:
        status = (await trainingjob(pipeline)).get("status") or {}
        return status.get("phase") == "Running" and status.get("currentWorkers") == [worker(0), worker(2)]

    await pipeline.eventually(shrunk, timeout=60, what="the job running on workers 0 and 2")
    await hostfile_is(pipeline, [0, 2])


async def test_a_training_job_whose_workers_never_run_at_once_starts_its_launcher_and_succeeds(
    pipeline: Pipeline,
) -> None:
    """Workers of a second each that fit on their node one at a time: no pass can see them both
    Running. Upstream's WorkersReady (all Running at once) would hold the job in Created for ever,
    as it held the et-operator example on a loaded CI machine (pods of a second, a pass slower than
    their overlap). Each counts as come up once it ended; the launcher runs and the job succeeds."""
    job = training_job(2)
    for role in ("launcher", "worker"):
        job["spec"]["etReplicaSpecs"][role]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "1s"
    template = job["spec"]["etReplicaSpecs"]["worker"]["template"]["spec"]
    template["nodeSelector"] = {"kubernetes.io/hostname": "sim-node-0"}
    template["containers"][0]["resources"] = {"requests": {"cpu": "20"}}  # of the node's 32
    await pipeline.submit(job)
    done = await phase_is(pipeline, "Succeeded", timeout=90)
    ready = next(c for c in done["status"]["conditions"] if c["type"] == "WorkersReady")
    assert "all workers (2) came up" in ready["message"], ready


async def pipeline_records(pipeline: Pipeline) -> list[dict[str, Any]]:
    """The decision records of this test's job, from kto.jobs, in log order."""
    found: list[dict[str, Any]] = []
    for record in await reading.read_history(pipeline.kafka, pipeline.key("TrainingJob", JOB)):
        if isinstance(record, records.Decision):
            found.append({"action": record.action, "reason": record.reason, "message": record.message})
    return found


async def test_a_scale_interrupted_by_a_reconciler_sigkill_resumes_without_doubling_a_worker(
    pipeline: Pipeline,
) -> None:
    """SIGKILL the reconciler the moment it has decided to create the first worker a ScaleOut
    adds (its write-ahead record is on the topic), and again when it has removed the worker a
    ScaleIn takes away: its successor finishes each scale from the log and the cluster, with
    exactly the workers asked for and the hostfile to match."""
    await pipeline.stop("reconciler")
    first = await start_reconciler_process(pipeline)
    key = pipeline.key("TrainingJob", JOB)
    try:
        await pipeline.submit(training_job(2))
        await phase_is(pipeline, "Running")
        await hostfile_is(pipeline, [0, 1])
        adding = (lambda r: r.action == "child_created" and r.child_kind == "Pod" and r.child_name == worker(2))
        async with killing_on(pipeline, first, key, adding) as killed:
            await pipeline.submit(scaler("ScaleOut", "out", toAdd={"count": 2}))
            await asyncio.wait_for(killed, 60)
        async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
            await scaler_done(pipeline, "ScaleOut", "out")
            await workers_are(pipeline, [0, 1, 2, 3])
            await hostfile_is(pipeline, [0, 1, 2, 3])
            # The launcher, two workers, then the two the ScaleOut added: a pod created twice would
            # have met 409 AlreadyExists, one added twice would show as a fifth worker.
            creates = [r for r in pipeline.requests() if r["verb"] == "create" and r["code"] == 201
                       and r["resource"].split(".")[0] == "pods"]
            assert len(creates) == 5, creates
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
