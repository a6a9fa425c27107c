"""Fixtures of the SDK tests: a pipeline (both tiers) whose nodes run pods as local processes, with
upstream's built-in Trainer v2 runtimes applied for the ``kubeflow`` SDK's TrainerClient."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kto import stack
from sim.node import nodes
from sim.node.nodeagent import NODES
from tests.fixtures import pipeline as pipeline_fixture
from tests.fixtures.pipeline import Pipeline


NODE_WATCH = 2.0
"""Seconds the kubelet is given to see its nodes' new runtime label (its node watch; under a loaded
machine half a second was not always enough, and a pod started before ran simulated)."""


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
    await asyncio.sleep(NODE_WATCH)
    try:
        yield pipeline
    finally:
        await label_nodes(pipeline, "simulated")


def training_client(pipe: Pipeline) -> Any:
    """Upstream's TrainingClient, unchanged, on the pipeline's cluster and namespace."""
    from kubeflow.training import TrainingClient

    return TrainingClient(config_file=str(pipe.kubeconfig), context="kto-1", namespace=pipe.namespace)


async def call(function: Any, *args: Any, **kwargs: Any) -> Any:
    """A blocking SDK call, off the event loop that runs kto's services."""
    return await asyncio.to_thread(function, *args, **kwargs)


@pytest.fixture
async def trainer_pipeline(process_pipeline: Pipeline) -> AsyncIterator[Pipeline]:
    """The process pipeline with upstream's built-in runtimes applied unchanged (cluster-scoped: on the
    shared real cluster, those already there are left as they are)."""
    manifests = await asyncio.to_thread(stack.trainer_runtimes)
    await pipeline_fixture.create_all(process_pipeline.client, manifests)
    yield process_pipeline


def trainer_client(kubeconfig: pathlib.Path, namespace: str = "default") -> Any:
    """Kubeflow Trainer v2's TrainerClient (the ``kubeflow`` SDK, Kubernetes backend), unchanged, on the
    first cluster of ``kubeconfig`` and ``namespace``. Its constructor reads the ConfigMap
    ``kubeflow-trainer-public``: make it in a thread (``await call(trainer_client, ...)``)."""
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    return TrainerClient(KubernetesBackendConfig(config_file=str(kubeconfig), context="kto-1", namespace=namespace))
