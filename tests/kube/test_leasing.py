"""Leader election on a Lease of the local cluster (sim/), as client-go does it; a leader that cannot
renew on both tiers (sim/ and kube-apiserver), its renewals refused by the faulting proxy."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import time
from collections.abc import AsyncIterator, Callable

import pytest

from shared.kube import clients, leasing, resources
from sim import cluster as sim_cluster
from sim.settings import SimSettings
from tests.fixtures import faulted as faulted_fixture

NAMESPACE = "default"
LEASE = "kto-test-lease"
TIMING = {"lease_duration": 1.5, "renew_deadline": 1.0, "retry_period": 0.2}
SLACK = 1.5
"""Seconds a loaded two-core CI machine may add to a bound the lease timing sets."""


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[sim_cluster.Cluster]:
    async with sim_cluster.Cluster(SimSettings(kubeconfig=tmp_path / "kubeconfig", nodes=1)) as running:
        yield running


@pytest.fixture
async def client(cluster: sim_cluster.Cluster) -> AsyncIterator[clients.KubeClient]:
    async with await clients.KubeClient.connect(cluster.kubeconfig) as connected:
        yield connected


class Candidate:
    """An elector run as a task, recording whether its work is running."""

    def __init__(self, client: clients.KubeClient, identity: str, release_on_cancel: bool = True,
                 namespace: str = NAMESPACE) -> None:
        self.elector = leasing.LeaderElector(
            client, namespace, LEASE, identity, release_on_cancel=release_on_cancel, **TIMING)
        self.leading = asyncio.Event()
        self.terms = 0
        self.stepped_down = 0
        """Terms whose work was cancelled (counted as it ends, so a quick next term cannot hide it)."""
        self.task: asyncio.Task[None] = asyncio.create_task(self.elector.run(self._work), name=f"elect {identity}")

    async def _work(self) -> None:
        self.terms += 1
        self.leading.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.leading.clear()
            self.stepped_down += 1

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def _lease(client: clients.KubeClient) -> dict[str, object]:
    spec: dict[str, object] = (await client.get(resources.LEASES, NAMESPACE, LEASE))["spec"]
    return spec


async def _until(check: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not true within {timeout}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def test_a_lone_candidate_creates_the_lease_and_leads(client: clients.KubeClient) -> None:
    candidate = Candidate(client, "alpha")
    try:
        await asyncio.wait_for(candidate.leading.wait(), 5)
        spec = await _lease(client)
        assert spec["holderIdentity"] == "alpha"
        assert spec["leaseDurationSeconds"] == 2
        assert spec["leaseTransitions"] == 0
        assert spec["acquireTime"] and spec["renewTime"]
        first_renewal = spec["renewTime"]
        await asyncio.sleep(0.6)
        assert (await _lease(client))["renewTime"] != first_renewal, "the leader renews every retry period"
        assert candidate.elector.is_leader
    finally:
        await candidate.stop()


async def test_of_two_candidates_only_one_leads(client: clients.KubeClient) -> None:
    alpha, beta = Candidate(client, "alpha"), Candidate(client, "beta")
    try:
        await _until(lambda: alpha.leading.is_set() or beta.leading.is_set(), 5)
        for _ in range(15):
            assert alpha.leading.is_set() != beta.leading.is_set()
            await asyncio.sleep(0.1)
        leader = "alpha" if alpha.leading.is_set() else "beta"
        assert (await _lease(client))["holderIdentity"] == leader
    finally:
        await alpha.stop()
        await beta.stop()


async def test_a_standby_takes_over_a_crashed_leader_within_the_lease_duration(client: clients.KubeClient) -> None:
    alpha = Candidate(client, "alpha", release_on_cancel=False)
    await asyncio.wait_for(alpha.leading.wait(), 5)
    beta = Candidate(client, "beta")
    try:
        await asyncio.sleep(0.5)
        assert not beta.leading.is_set()
        await alpha.stop()  # no release: as if the process were killed
        took = await _until(beta.leading.is_set, 5)
        assert took <= TIMING["lease_duration"] + 2 * TIMING["retry_period"] + SLACK
        spec = await _lease(client)
        assert spec["holderIdentity"] == "beta"
        assert spec["leaseTransitions"] == 1
    finally:
        await beta.stop()


async def test_a_leader_stopped_cleanly_hands_over_at_once(client: clients.KubeClient) -> None:
    alpha = Candidate(client, "alpha")
    await asyncio.wait_for(alpha.leading.wait(), 5)
    beta = Candidate(client, "beta")
    try:
        await asyncio.sleep(0.3)
        await alpha.stop()
        assert not alpha.leading.is_set(), "the work is cancelled before run() returns"
        took = await _until(beta.leading.is_set, 5)
        assert took < TIMING["lease_duration"]
    finally:
        await beta.stop()


async def test_a_leader_that_sees_another_holder_steps_down_and_stands_by(client: clients.KubeClient) -> None:
    alpha = Candidate(client, "alpha")
    try:
        await asyncio.wait_for(alpha.leading.wait(), 5)
        while True:  # the leader renews meanwhile: retry our write on conflict
            lease = await client.get(resources.LEASES, NAMESPACE, LEASE)
            lease["spec"]["holderIdentity"] = "intruder"
            try:
                await client.replace(resources.LEASES, NAMESPACE, lease)
                break
            except clients.ApiError as exc:
                if not exc.conflict:
                    raise
        await _until(lambda: alpha.stepped_down == 1, 3)
        # The intruder never renews: alpha takes the lease back after it expires.
        await _until(lambda: alpha.terms == 2 and alpha.leading.is_set(), 5)
        assert alpha.elector.is_leader and alpha.stepped_down == 1
        assert (await _lease(client))["holderIdentity"] == "alpha"
    finally:
        await alpha.stop()


async def test_a_leader_that_cannot_renew_steps_down_by_the_renew_deadline(faulted: faulted_fixture.Faulted) -> None:
    async with await clients.KubeClient.connect(faulted.kubeconfig, faulted.context) as client:
        alpha = Candidate(client, "alpha", namespace=faulted.namespace)
        try:
            await asyncio.wait_for(alpha.leading.wait(), 5)
            # Every write to the Lease now fails with 409: renewal is impossible.
            faulted.set_faults("conflict_rate=1;resources=leases.coordination.k8s.io")
            took = await _until(lambda: not alpha.leading.is_set(), 5)
            assert took <= TIMING["renew_deadline"] + TIMING["retry_period"] + SLACK
            assert faulted.injected("conflict") >= 1
        finally:
            await alpha.stop()


async def test_work_that_returns_ends_the_campaign_and_releases_the_lease(client: clients.KubeClient) -> None:
    ran = asyncio.Event()

    async def work() -> None:
        ran.set()

    elector = leasing.LeaderElector(client, NAMESPACE, LEASE, "alpha", **TIMING)
    await asyncio.wait_for(elector.run(work), 5)
    assert ran.is_set()
    assert (await _lease(client))["holderIdentity"] == ""


def test_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        leasing.LeaderElector(None, NAMESPACE, LEASE, "x", lease_duration=1, renew_deadline=2)  # type: ignore[arg-type]
