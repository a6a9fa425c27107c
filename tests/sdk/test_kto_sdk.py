"""kto's own SDK module (kto/sdk.py): a job's history, trace id and replay, async and sync, with typed
errors naming the job — on both tiers, against the job's real records on the bus."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kto import sdk
from shared.bus import records
from tests.fixtures.pipeline import Pipeline

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def manifest(name: str) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"sim.kto.dev/duration": "300ms"}},
                "spec": {"containers": [{"name": "pytorch", "image": "pytorch:2"}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "annotations": {"kto.dev/traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure",
                                                        "template": template}}}}


async def test_history_trace_id_and_replay_of_a_finished_job(pipeline: Pipeline) -> None:
    await pipeline.submit(manifest("audited"))
    await pipeline.wait_for("PyTorchJob", "audited", "Succeeded")
    client = sdk.Client(pipeline.kafka, namespace=pipeline.namespace)
    key = pipeline.key("PyTorchJob", "audited")

    async def settled() -> bool:  # the status write of Succeeded is on the bus too
        entries = await client.history("audited")
        return any(isinstance(e.record, records.Decision) and e.record.action == "status_written"
                   and "Succeeded" in str(e.record.detail.get("conditions")) for e in entries)

    await pipeline.eventually(settled, what="the Succeeded status write on the bus")
    entries = await client.history("audited")
    assert {e.key for e in entries} == {key}
    first = entries[0].record
    assert isinstance(first, records.Observation) and (first.event, first.object_kind) == ("ADDED", "PyTorchJob")
    assert [e.offset for e in entries] == sorted(e.offset for e in entries)
    assert await client.trace_id("audited") == TRACE_ID
    report = await client.replay(key)
    assert report.key == key and report.ok and report.passes > 0 and report.statuses > 0

    sync = sdk.SyncClient(pipeline.kafka, namespace=pipeline.namespace)
    job = await pipeline.job("PyTorchJob", "audited")  # a job object works as well as a name or a key
    assert [e.offset for e in await asyncio.to_thread(sync.history, job)][:len(entries)] == [e.offset for e in entries]
    assert await asyncio.to_thread(sync.trace_id, key) == TRACE_ID
    assert (await asyncio.to_thread(sync.replay, "audited")).ok


async def test_a_missing_job_and_a_timeout_raise_typed_errors_naming_the_job(pipeline: Pipeline) -> None:
    client = sdk.Client(pipeline.kafka, namespace=pipeline.namespace)
    missing = pipeline.key("PyTorchJob", "never-submitted")
    with pytest.raises(sdk.JobNotFound) as not_found:
        await client.history("never-submitted")
    assert not_found.value.job == missing and missing in str(not_found.value)
    with pytest.raises(sdk.JobNotFound):
        await asyncio.to_thread(sdk.SyncClient(pipeline.kafka, namespace=pipeline.namespace).replay,
                                "never-submitted")

    impatient = sdk.Client(pipeline.kafka, namespace=pipeline.namespace, timeout=0.001)
    with pytest.raises(sdk.Timeout) as timed_out:
        await impatient.trace_id("never-submitted")
    assert timed_out.value.job == missing
    assert str(timed_out.value) == f"job {missing}: the broker did not answer within 0.001s"


@pytest.mark.parametrize("job, key", [
    pytest.param("mnist", "kto-1/team/PyTorchJob/mnist", id="a-name"),
    pytest.param("kto-2/other/TFJob/dist", "kto-2/other/TFJob/dist", id="a-key"),
    pytest.param({"kind": "TFJob", "metadata": {"name": "dist", "namespace": "ml"}}, "kto-1/ml/TFJob/dist",
                 id="a-job-object"),
])
def test_a_job_is_named_by_name_key_or_object(job: Any, key: str) -> None:
    assert str(sdk.job_key(job, sdk.Defaults("kto-1", "team", "PyTorchJob"))) == key


def test_an_upstream_model_names_its_job() -> None:
    models = pytest.importorskip("kubeflow.training.models", reason="the kubeflow-training SDK is not installed")
    job = models.KubeflowOrgV1PyTorchJob(kind="PyTorchJob", metadata=models.V1ObjectMeta(name="m", namespace="ns"))
    assert str(sdk.job_key(job)) == "kto-1/ns/PyTorchJob/m"


@pytest.mark.parametrize("job, message", [
    pytest.param("a/b", "job key 'a/b' is not cluster/namespace/kind/name (4 non-empty parts): 'a/b'", id="a-bad-key"),
    pytest.param({"metadata": {}}, "not a job: 'kto-1/default/PyTorchJob/'", id="no-name"),
    pytest.param(42, "not a job name, key, object or model: '42'", id="not-a-job"),
])
def test_what_names_no_job_is_refused_in_one_line(job: Any, message: str) -> None:
    with pytest.raises(sdk.InvalidJob) as refused:
        sdk.job_key(job)
    assert str(refused.value) == message


async def test_an_unreachable_broker_is_named_with_the_job() -> None:
    import socket

    from shared.bus.settings import KafkaSettings

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(sdk.BusUnavailable) as unavailable:
        await sdk.Client(KafkaSettings(bootstrap=f"127.0.0.1:{port}")).history("mnist")
    assert unavailable.value.job == "kto-1/default/PyTorchJob/mnist"
    assert f"cannot reach the broker at 127.0.0.1:{port}" in str(unavailable.value)
