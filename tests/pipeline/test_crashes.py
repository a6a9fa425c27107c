"""Worker processes killed with SIGKILL mid-run and restarted: the reconciler leaves no duplicate
and no missing pod; the status worker loses no status change it was holding back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from shared.bus import reading, records
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_pipeline import job


async def start_reconciler_process(pipeline: Pipeline) -> subprocess.Popen[str]:
    return await start_worker_process(pipeline, "reconciler", f"kto-reconciler-{pipeline.kafka.jobs_topic}")


async def start_worker_process(pipeline: Pipeline, command: str, group: str, *args: str) -> subprocess.Popen[str]:
    # The tier's own group timing: on Tansu a 2 s session (it answers a JoinGroup only after half of it,
    # so a longer one holds every join and a killed member's partitions for seconds), on Kafka 6 s (its
    # least, group.min.session.timeout.ms); 0.3 s heartbeats on both.
    env = {**os.environ, **pipeline.kafka.to_env()}
    process = subprocess.Popen(
        [sys.executable, "-m", "kto", command, "--kubeconfig", str(pipeline.services_config), "--group", group, *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert process.stdout is not None
    line = await asyncio.get_running_loop().run_in_executor(None, process.stdout.readline)
    assert line.startswith("ready"), line
    return process


@contextlib.asynccontextmanager
async def killed_and_replaced(
    first: subprocess.Popen[str], start: Callable[[], Awaitable[subprocess.Popen[str]]],
) -> AsyncIterator[None]:
    """SIGKILL ``first`` and start its successor; the successor is stopped on leaving."""
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    second = await start()
    try:
        yield
    finally:
        second.terminate()
        second.wait(timeout=30)


async def test_a_reconciler_killed_mid_run_and_restarted_leaves_no_duplicate_and_no_missing_pod(
    pipeline: Pipeline,
) -> None:
    await pipeline.stop("reconciler")
    first = await start_reconciler_process(pipeline)
    try:
        manifest: dict[str, Any] = job("JAXJob", "crash", {"Worker": (12, "Never")}, "jax")
        manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "3s"
        await pipeline.submit(manifest)

        async def some_pods() -> bool:
            return len(await pipeline.pods("crash")) >= 1

        await pipeline.eventually(some_pods, what="the first pods")
        async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
            await pipeline.wait_for("JAXJob", "crash", "Succeeded", timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    pods = await pipeline.pods("crash")
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(f"crash-worker-{i}" for i in range(12))
    # Each pod created once.
    creates = [r for r in pipeline.requests()
               if r["verb"] == "create" and r["resource"] == "pods" and r["namespace"] == pipeline.namespace]
    if pipeline.tier == "sim":
        assert [r["code"] for r in creates].count(201) == 12
    else:
        # kube-apiserver logs a create whose client was killed while it was in flight as 504,
        # whether or not the pod was made: no name is created twice, and the 201s and such 504s
        # together account for every pod.
        created = [str(r["name"]) for r in creates if r["code"] == 201]
        in_doubt = [str(r["name"]) for r in creates if r["code"] == 504]
        assert len(created) == len(set(created)) <= 12, sorted(created)
        assert len(set(created) | set(in_doubt)) == 12, (sorted(created), sorted(in_doubt))
    history = await reading.read_history(pipeline.kafka, pipeline.key("JAXJob", "crash"))
    created_names = [r.child_name for r in history if isinstance(r, records.Decision) and r.action == "child_created" and r.child_kind == "Pod"]
    assert set(created_names) == {f"crash-worker-{i}" for i in range(12)}


async def test_a_status_worker_killed_while_holding_a_write_back_loses_nothing(pipeline: Pipeline) -> None:
    """The first write of a job waits for the write interval (5 s here) with its
    records' offsets uncommitted; killed meanwhile, the worker's successor gets
    those records again and writes the status (well before any resync)."""
    group = f"kto-status-{pipeline.kafka.jobs_topic}"
    await pipeline.stop("status")
    first = await start_worker_process(pipeline, "status-service", group, "--write-interval", "5")
    try:
        manifest: dict[str, Any] = job("JAXJob", "held", {"Worker": (2, "Never")}, "jax")
        manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "60s"
        await pipeline.submit(manifest)

        async def running_pods() -> bool:
            pods = await pipeline.pods("held")
            return len(pods) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in pods)

        await pipeline.eventually(running_pods, what="both pods Running")
        await asyncio.sleep(1.5)  # the records are taken in and the write is held back
        assert not (await pipeline.job("JAXJob", "held")).get("status"), "nothing written yet"
        async with killed_and_replaced(first, lambda: start_worker_process(pipeline, "status-service", group)):
            done = await pipeline.wait_for("JAXJob", "held", "Running", timeout=20)
    finally:
        if first.poll() is None:
            first.kill()
    assert done["status"]["replicaStatuses"]["Worker"]["active"] == 2
