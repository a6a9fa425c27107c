"""A cluster that stops answering, as a worker's client sees it (shared/kube/reaching.py): on both
tiers (sim/ and kube-apiserver) with its API made to hang by the faulting proxy in front of it, or
a port nobody listens on."""

from __future__ import annotations

import asyncio
import pathlib
import socket
from collections.abc import AsyncIterator

import pytest
import yaml

from shared.kube import clients, reaching, resources
from sim import cluster as sim_cluster
from sim.settings import SimSettings
from tests.fixtures import faulted as faulted_fixture

QUICK = reaching.ReachSettings(request_timeout=0.5, initial_backoff=0.3, max_backoff=0.6, jitter=0.0)


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[sim_cluster.Cluster]:
    async with sim_cluster.Cluster(SimSettings(kubeconfig=tmp_path / "kubeconfig", nodes=1)) as running:
        yield running


async def namespace(client: clients.KubeClient) -> None:
    await client.get(resources.NAMESPACES, None, "default")


async def test_requests_nothing_answers_are_cut_then_refused_at_once_until_a_probe_is_answered(
    faulted: faulted_fixture.Faulted,
) -> None:
    reach = reaching.Reachability("kto-1", QUICK)
    loop = asyncio.get_running_loop()
    async with await clients.KubeClient.connect(faulted.kubeconfig, faulted.context, guard=reach) as client:
        await namespace(client)
        with pytest.raises(clients.ApiError) as missing:
            await client.get(resources.NAMESPACES, None, "never")
        assert missing.value.not_found and reach.reachable, "any answer is an answer"

        faulted.set_faults("latency=get:30s")
        started = loop.time()
        hanging = await asyncio.gather(*(namespace(client) for _ in range(3)), return_exceptions=True)
        # One request waits out request_timeout; the others are cut with it, and no retry
        # in place waits again (the client's eight attempts would take 4 s).
        assert loop.time() - started < 1.5
        assert all(isinstance(e, clients.ApiError) and e.code == 0 for e in hanging), hanging
        assert not reach.reachable

        started = loop.time()
        with pytest.raises(clients.ClusterUnreachable) as refused:
            await namespace(client)
        assert loop.time() - started < 0.1, "not sent at all"
        assert refused.value.retriable and 0 < (refused.value.retry_after or 0) <= QUICK.initial_backoff

        faulted.set_faults("")
        await asyncio.sleep(refused.value.retry_after or 0)
        await namespace(client)  # the probe: answered
        assert reach.reachable
        await namespace(client)


async def test_a_refused_connection_marks_the_cluster_unreachable_at_once_and_probes_back_off(
    cluster: sim_cluster.Cluster, tmp_path: pathlib.Path,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # free again once closed: nothing listens there
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{closed}"
    nowhere = tmp_path / "nowhere"
    nowhere.write_text(yaml.safe_dump(config))
    reach = reaching.Reachability("kto-9", QUICK)
    loop = asyncio.get_running_loop()
    async with await clients.KubeClient.connect(nowhere, guard=reach) as client:
        started = loop.time()
        with pytest.raises(clients.ClusterUnreachable):
            await namespace(client)  # refused, then not tried again in place
        assert loop.time() - started < 0.5
        waits = []
        for _ in range(3):
            with pytest.raises(clients.ClusterUnreachable) as refused:
                await namespace(client)
            waits.append(refused.value.retry_after or 0.0)
            await asyncio.sleep(waits[-1])
            with pytest.raises(clients.ApiError):
                await namespace(client)  # the probe, refused: the backoff doubles up to its cap
        assert waits[0] <= QUICK.initial_backoff < waits[-1] <= QUICK.max_backoff
