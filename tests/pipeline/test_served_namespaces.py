"""Served namespaces (``KTO_NAMESPACES``), on both tiers: a watcher given two namespaces lists and
watches each and publishes the jobs of both; a reconciler and a status worker serving one of them
run its job to the end and skip every record of the other (a log line with the reason), so no pod
and no status is written there."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest

from shared.bus import reading, records
from shared.kube import clients, resources
from tests.fixtures.pipeline import Pipeline


def pytorchjob(name: str, namespace: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"sim.kto.dev/duration": "1s"}},
                "spec": {"containers": [{"name": "pytorch", "image": "pytorch:latest"}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}}}


async def test_workers_serving_one_namespace_skip_the_jobs_of_another_the_watcher_watches(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture,
) -> None:
    served, other = pipeline.namespace, f"{pipeline.namespace}-other"
    await pipeline.client.create(resources.NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                              "metadata": {"name": other}})
    try:
        for name in ("watcher", "reconciler", "status"):
            await pipeline.stop(name)
        pipeline.start_watcher(namespace=f"{served},{other}")
        pipeline.start_reconciler(namespaces=(served,))
        pipeline.start_status(namespaces=(served,))
        caplog.set_level(logging.WARNING)
        for namespace in (served, other):
            await pipeline.client.create(resources.JOB_TYPES["PyTorchJob"], namespace, pytorchjob("job", namespace))
        await pipeline.wait_for("PyTorchJob", "job", "Succeeded", timeout=60)

        foreign = f"{pipeline.key('PyTorchJob', 'job').replace(f'/{served}/', f'/{other}/')}"
        history = await reading.read_history(pipeline.kafka, foreign)
        assert [r for r in history if isinstance(r, records.Observation) and r.object_kind == "PyTorchJob"], \
            "the watcher watches the second namespace too"
        assert not [r for r in history if isinstance(r, records.Decision)], "nothing was decided for it"
        assert not await pipeline.pods("job", namespace=other)
        assert not (await pipeline.job("PyTorchJob", "job", namespace=other)).get("status")
        skipped = {r.name.rsplit(".", 2)[1] for r in caplog.records
                   if r.getMessage() == f"{foreign}: record skipped: namespace {other!r} is not served "
                                        f"(KTO_NAMESPACES: {served})"}
        assert skipped == {"reconciler", "status"}, [r.getMessage() for r in caplog.records]
    finally:
        with contextlib.suppress(clients.ApiError):
            await pipeline.client.delete(resources.NAMESPACES, None, other)
