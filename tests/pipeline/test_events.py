"""Issue 13, item 2: the Events of a job as upstream records them (spec §9.2), per kind, on both tiers,
within the write budget (≤ N+3 Event writes for an N-replica job), written by the service that acts."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from shared.kube import resources
from tests.fixtures.pipeline import Pipeline
from tests.pipeline.test_pipeline import job
from tests.pipeline.test_replay import restarting

SUCCEEDING = [
    pytest.param(job("PyTorchJob", "pt", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")}, "pytorch"),
                 id="pytorchjob"),
    pytest.param(job("TFJob", "tf", {"Chief": (1, "Never"), "Worker": (2, "Never")}, "tensorflow"), id="tfjob"),
    pytest.param(job("XGBoostJob", "xgb", {"Master": (1, "Never"), "Worker": (2, "ExitCode")}, "xgboost"),
                 id="xgboostjob"),
    pytest.param(job("PaddleJob", "paddle", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")}, "paddle"),
                 id="paddlejob"),
    pytest.param(job("JAXJob", "jax", {"Worker": (2, "Never")}, "jax"), id="jaxjob"),
    pytest.param(job("MPIJob", "pi", {"Launcher": (1, "Never"), "Worker": (2, "Never")}, "mpi"), id="mpijob"),
]


async def events_of(pipeline: Pipeline, name: str) -> list[dict[str, Any]]:
    items, _ = await pipeline.client.list(resources.EVENTS, pipeline.namespace)
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]


def table(events: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """reason → (type, message)."""
    return {e["reason"]: (e["type"], e["message"]) for e in events}


def names_in(message: str) -> set[str]:
    return set(message.partition(": ")[2].split(", "))


@pytest.mark.parametrize("manifest", SUCCEEDING)
async def test_a_succeeding_job_records_upstreams_events_within_the_budget(
    pipeline: Pipeline, manifest: dict[str, Any],
) -> None:
    manifest = copy.deepcopy(manifest)
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    await pipeline.submit(manifest)
    await pipeline.wait_for(kind, name, "Succeeded", timeout=90)

    async def complete() -> bool:
        reasons = set(table(await events_of(pipeline, name)))
        return f"{kind}Succeeded" in reasons and "ExitedWithCode" in reasons
    await pipeline.eventually(complete, timeout=20, what="the success Events")
    await asyncio.sleep(1.0)
    events = await events_of(pipeline, name)
    seen = table(events)
    pods = sorted(p["metadata"]["name"] for p in await pipeline.pods(name))
    replicas = len(pods)
    if kind == "MPIJob":
        launcher = f"{name}-launcher"
        workers = {p for p in pods if p != launcher}
        assert set(seen) == {"MPIJobRunning", "SuccessfulCreatePod", "ExitedWithCode", "MPIJobSucceeded"}, seen
        assert seen["MPIJobRunning"] == ("Normal", f"launcher pod created success: {launcher}")
        assert seen["SuccessfulCreatePod"][1].startswith("Created worker pod: ")
        assert names_in(seen["SuccessfulCreatePod"][1]) == workers
    else:
        assert set(seen) == {"SuccessfulCreatePod", "SuccessfulCreateService", "ExitedWithCode", f"{kind}Succeeded"}, seen
        assert seen["SuccessfulCreatePod"][0] == "Normal" and seen["SuccessfulCreatePod"][1].startswith("Created pod: ")
        assert names_in(seen["SuccessfulCreatePod"][1]) == set(pods)
        assert seen["SuccessfulCreateService"][1].startswith("Created service: ")
    exited = " ".join(e["message"] for e in events if e["reason"] == "ExitedWithCode")
    for pod in pods:
        assert f"Pod: {pipeline.namespace}.{pod} exited with code 0" in exited, exited
    assert all(e["source"]["component"] == f"{kind.lower()}-controller" for e in events)
    writes = len(events) + sum(max(0, int(e.get("count") or 1) - 1) for e in events)
    assert writes <= replicas + 3, f"{writes} Event writes for {replicas} replicas: {seen}"


async def test_a_restart_and_a_ttl_deletion_record_their_events(pipeline: Pipeline) -> None:
    await pipeline.submit(restarting("bumpy"))
    await pipeline.wait_for("JAXJob", "bumpy", "Succeeded", timeout=120)
    ttl = job("PyTorchJob", "brief", {"Master": (1, "OnFailure")}, "pytorch",
              runPolicy={"ttlSecondsAfterFinished": 1})
    await pipeline.submit(ttl)

    async def recorded(name: str, reason: str) -> bool:
        return reason in table(await events_of(pipeline, name))
    await pipeline.eventually(lambda: recorded("bumpy", "JAXJobSucceeded"), timeout=30, what="JAXJobSucceeded")
    seen = table(await events_of(pipeline, "bumpy"))
    assert seen["JAXJobRestarting"][0] == "Warning", seen
    assert seen["SuccessfulDeletePod"][1].startswith("Deleted pod: bumpy-worker-"), seen
    assert "exited with code 137" in " ".join(e["message"] for e in await events_of(pipeline, "bumpy")
                                             if e["reason"] == "ExitedWithCode")
    async def deleted() -> bool:
        return await recorded("brief", "SuccessfulDeletePod") and await recorded("brief", "PyTorchJobSucceeded")
    await pipeline.eventually(deleted, timeout=60, what="the TTL deletion's Event")
    messages = [e["message"] for e in await events_of(pipeline, "brief") if e["reason"] == "SuccessfulDeletePod"]
    assert "Deleted job: brief" in messages, messages
