"""Fixtures of the SDK tests: a pipeline (both tiers) whose nodes run pods as local processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sim.node import nodes
from sim.node.nodeagent import NODES
from tests.fixtures.pipeline import Pipeline


async def label_nodes(pipe: Pipeline, runtime: str) -> None:
    items, _ = await pipe.client.list(NODES)
    for node in items:
        name = node["metadata"]["name"]
        if nodes.node_index(name) is not None:
            await pipe.client.patch(NODES, None, name, {"metadata": {"labels": {nodes.RUNTIME_LABEL: runtime}}})


@pytest.fixture
async def process_pipeline(pipeline: Pipeline) -> AsyncIterator[Pipeline]:
    """The pipeline with its nodes labelled ``sim.kto.dev/runtime=process`` for the test (the kube tier's
    session cluster gets its label back afterwards)."""
    await label_nodes(pipeline, "process")
    await asyncio.sleep(0.5)  # the kubelet's node watch
    try:
        yield pipeline
    finally:
        await label_nodes(pipeline, "simulated")


def training_client(pipe: Pipeline) -> Any:
    """Upstream's TrainingClient, unchanged, on the pipeline's cluster and namespace."""
    from kubeflow.training import TrainingClient

    return TrainingClient(config_file=str(pipe.kubeconfig), context="kto-1", namespace=pipe.namespace)
