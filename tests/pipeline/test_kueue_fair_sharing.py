"""kto under the real Kueue v0.17.0 with Fair Sharing on (issue 23), on the real tier: two teams
whose ClusterQueues own no GPU (nominal quota 0) borrow the GPUs their Cohort holds; team A fills
the cohort, team B submits, and Kueue preempts one of team A's jobs so the two teams' weighted
shares are equal. kto deletes the preempted job's pods and keeps the job, suspended; team B's job
runs to Succeeded, and team A's preempted job is re-admitted and runs to Succeeded too.

Only Fair Sharing explains it: without it, Kueue's classical preemption reclaims within a cohort
only for a ClusterQueue that gets back under its own quota (or for a higher priority), and team B,
owning nothing and of team A's priority, would wait until team A's jobs ended.

One Kueue with ``fairSharing`` on serves the module (tests/fixtures/kueue.py); the queue helpers
are tests/pipeline/test_kueue.py's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.pipeline import Pipeline
from tests.pipeline import test_kueue

pytestmark = [pytest.mark.parametrize("tier", ["kube"], indirect=True),
              pytest.mark.usefixtures("real_kueue_fair_sharing")]

KIND = "PyTorchJob"
GPU = test_kueue.GPU
PODS = 2
"""Pods (and GPUs) per job: a Master and one Worker, one GPU each."""


async def weighted_shares(pipeline: Pipeline, *cluster_queues: str) -> tuple[int | None, ...]:
    """Each ClusterQueue's ``status.fairSharing.weightedShare`` as Kueue reports it (None before it does)."""
    found = []
    for name in cluster_queues:
        cq: dict[str, Any] = await pipeline.client.get(test_kueue.CLUSTER_QUEUES, None, name)
        found.append(((cq.get("status") or {}).get("fairSharing") or {}).get("weightedShare"))
    return tuple(found)


async def until_shares(pipeline: Pipeline, cluster_queues: tuple[str, str], expected: tuple[int, int]) -> None:
    seen: dict[str, tuple[int | None, ...]] = {}

    async def check() -> bool:
        seen["shares"] = await weighted_shares(pipeline, *cluster_queues)
        return seen["shares"] == expected
    try:
        await pipeline.eventually(check, timeout=30, what=f"weighted shares {expected} of {cluster_queues}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: Kueue reports {seen.get('shares')}") from None


async def test_a_team_owning_no_gpus_gets_its_fair_share_of_the_cohorts_gpus_by_preemption(
        pipeline: Pipeline) -> None:
    async with test_kueue.queues(pipeline) as q:
        flavor = await q.flavor()
        await q.cohort("gpus", flavor, {GPU: 2 * PODS})
        reclaim = {"reclaimWithinCohort": "Any"}
        team_a = await q.cluster_queue("team-a", flavor, {GPU: 0}, cohort="gpus", preemption=reclaim)
        team_b = await q.cluster_queue("team-b", flavor, {GPU: 0}, cohort="gpus", preemption=reclaim)
        for cq in (team_a, team_b):
            await q.active(cq)
        lq_a, lq_b = await q.local_queue("team-a", team_a), await q.local_queue("team-b", team_b)

        # Team B is idle: team A borrows all the cohort's GPUs (weighted share 4 of 4 lendable = 1000).
        for name in ("a-1", "a-2"):
            await test_kueue.submit(pipeline, test_kueue.queued(test_kueue.pytorchjob(name, "12s"), lq_a))
            await test_kueue.running_pods(pipeline, KIND, name, PODS)
        await until_shares(pipeline, (team_a, team_b), (1000, 0))

        # Team B submits: its share with its job (2 of 4 = 500) is no more than team A's without one
        # of its jobs (500), so Kueue preempts one of team A's jobs.
        await test_kueue.submit(pipeline, test_kueue.queued(test_kueue.pytorchjob("b-1", "4s"), lq_b))
        await test_kueue.running_pods(pipeline, KIND, "b-1", PODS)
        held = {name: test_kueue.KINDS[KIND].suspended(await test_kueue.get(pipeline, KIND, name))
                for name in ("a-1", "a-2")}
        assert sorted(held.values()) == [False, True], f"one of team A's jobs is preempted: {held}"
        preempted = next(name for name, suspended in held.items() if suspended)
        found = test_kueue.conditions(await test_kueue.workload_of(pipeline, KIND, preempted))
        assert found.get("Evicted", {}).get("reason") == "Preempted", found.get("Evicted")
        assert found.get("Preempted", {}).get("reason") == "InCohortFairSharing", found.get("Preempted")
        await until_shares(pipeline, (team_a, team_b), (500, 500))

        suspended = await test_kueue.until(pipeline, KIND, preempted, "Suspended")
        assert test_kueue.conditions(suspended)["Suspended"]["reason"] == "PyTorchJobSuspended"

        async def gone() -> bool:
            return not await test_kueue.pods(pipeline, KIND, preempted)
        await pipeline.eventually(gone, timeout=30, what=f"the pods of the preempted {preempted} deleted")

        await test_kueue.until(pipeline, KIND, "b-1", "Succeeded")
        await test_kueue.until(pipeline, KIND, preempted, "Suspended", status="False")
        for name in ("a-1", "a-2"):
            await test_kueue.until(pipeline, KIND, name, "Succeeded")
        await until_shares(pipeline, (team_a, team_b), (0, 0))
