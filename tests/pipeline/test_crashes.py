"""A reconciler process killed with SIGKILL mid-run and restarted leaves no duplicate and no missing pod."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

from shared.bus import reading, records
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_pipeline import job


async def start_reconciler_process(pipeline: Pipeline) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "KTO_KAFKA_BOOTSTRAP": pipeline.kafka.bootstrap,
        "KTO_KAFKA_JOBS_TOPIC": pipeline.kafka.jobs_topic,
        "KTO_KAFKA_DLQ_TOPIC": pipeline.kafka.dlq_topic,
        "KTO_KAFKA_PARTITIONS": str(pipeline.kafka.partitions),
        "KTO_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "KTO_KAFKA_HEARTBEAT_INTERVAL_MS": "300",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "kto", "reconciler", "--kubeconfig", str(pipeline.kubeconfig),
         "--group", f"kto-reconciler-{pipeline.kafka.jobs_topic}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert process.stdout is not None
    line = await asyncio.get_running_loop().run_in_executor(None, process.stdout.readline)
    assert line.startswith("ready"), line
    return process


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
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        second = await start_reconciler_process(pipeline)
        try:
            await pipeline.wait_for("JAXJob", "crash", "Succeeded", timeout=60)
        finally:
            second.terminate()
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    pods = await pipeline.pods("crash")
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(f"crash-worker-{i}" for i in range(12))
    created = [
        r for r in pipeline.cluster.requests
        if r["verb"] == "create" and r["resource"] == "pods" and r["code"] == 201 and r["namespace"] == "default"
    ]
    assert len(created) == 12
    history = await reading.read_history(pipeline.kafka, "kto-1/default/JAXJob/crash")
    created_names = [r.child_name for r in history if isinstance(r, records.Decision) and r.action == "child_created" and r.child_kind == "Pod"]
    assert set(created_names) == {f"crash-worker-{i}" for i in range(12)}
