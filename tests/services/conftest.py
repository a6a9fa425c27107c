"""Fixtures of the services' unit tests: a client of the sim fixture's cluster, the CRDs applied."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.kube import clients, connecting
from sim import cluster as sim_cluster_module
from tests.fixtures.pipeline import apply_crds


@pytest.fixture
async def client(sim_cluster: sim_cluster_module.Cluster) -> AsyncIterator[clients.KubeClient]:
    """A client of the sim cluster, with kto's CRDs applied."""
    clusters = connecting.ClusterClients(sim_cluster.kubeconfig)
    client = await clusters.get(sim_cluster.settings.context)
    await apply_crds(client)
    yield client
    await clusters.close()
