"""Issue 10, hostile input: one bad record or one bad job must not stop the pipeline. Each test puts the bad
thing in first, then 16 good jobs that must all succeed, and checks the bad one is refused with a clear
message (a field path and the limit, or a record offset) and that no service died (``wait_for`` fails as
soon as one stops)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml

from shared.api import limits
from shared.bus import producing, reading, records
from shared.kube import clients, resources
from tests.bus.test_consuming import read_topic
from tests.fixtures.pipeline import ROOT, Pipeline
from tests.pipeline.test_pipeline import job
from tests.hostile import nested

GOOD_JOBS = 16


async def sixteen_good_jobs_succeed(pipeline: Pipeline, prefix: str, timeout: float = 60.0) -> None:
    names = [f"{prefix}-{i}" for i in range(GOOD_JOBS)]
    for name in names:
        await pipeline.submit(job("JAXJob", name, {"Worker": (1, "Never")}, "jax"))
    for name in names:
        await pipeline.wait_for("JAXJob", name, "Succeeded", timeout=timeout)


def failed_message(found: dict[str, Any]) -> str:
    last = found["status"]["conditions"][-1]
    assert last["type"] == "Failed" and last["reason"] == f"{found['kind']}FailedValidation", last
    return str(last["message"])


async def test_undecodable_records_kill_no_worker_and_the_jobs_after_them_succeed(pipeline: Pipeline) -> None:
    """Before: json.loads raised RecursionError for `[` × 100,000 and ValueError for a 5,000-digit integer;
    neither was a MalformedRecord, so the consumer's task group died in every reconciler and status worker."""
    hostile = [b"[" * 100_000, b'{"schema_version": 1, "n": ' + b"7" * 5000 + b"}"]
    async with producing.Publisher(pipeline.kafka, "test", "test") as publisher:
        # Signed with a stolen key: past the signature check, decoding is what refuses them.
        sent = [await publisher.send_raw(pipeline.kafka.jobs_topic, value,
                                         key=pipeline.key("JAXJob", f"good-{i}").encode(),
                                         headers=pipeline.signed(pipeline.key("JAXJob", f"good-{i}"), value))
                for i, value in enumerate(hostile)]
    await sixteen_good_jobs_succeed(pipeline, "good")
    dead = await read_topic(pipeline.kafka, pipeline.kafka.dlq_topic)
    for original in sent:
        copies = [m for m in dead if dict(m.headers).get("kto-source-offset") == str(original.offset).encode()  # type: ignore[attr-defined]
                  and m.partition == original.partition]  # type: ignore[attr-defined]
        assert {dict(m.headers)["kto-group"] for m in copies} == {  # type: ignore[attr-defined]
            f"kto-reconciler-{pipeline.kafka.jobs_topic}".encode(), f"kto-status-{pipeline.kafka.jobs_topic}".encode()}
        assert all(dict(m.headers)["kto-error"].startswith(b"MalformedRecord: not JSON this reader can parse")  # type: ignore[attr-defined]
                   for m in copies)


async def test_a_job_nested_300_levels_deep_fails_validation_and_kills_no_watcher(pipeline: Pipeline) -> None:
    """Before: pydantic could not serialise the 300-level object (its limit is 255), the watcher's publish
    raised, and the watcher and its replacement died on it: no job of the cluster moved any more."""
    manifest = job("JAXJob", "deep", {"Worker": (1, "Never")}, "jax")
    manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["x"] = "y"
    manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["extra"] = nested(300)
    await pipeline.submit(manifest)
    await sixteen_good_jobs_succeed(pipeline, "after-deep")
    message = failed_message(await pipeline.wait_for("JAXJob", "deep", "Failed"))
    assert message.startswith("JAXJob deep failed validation because spec.jaxReplicaSpecs[Worker].template.spec.extra.a")
    assert f"kto's limit is {limits.MAX_OBJECT_DEPTH} levels" in message
    assert await pipeline.pods("deep") == []


async def test_a_job_of_1_2_mb_fails_validation_and_stops_nothing(pipeline: Pipeline) -> None:
    """Before: the broker refused the 1.2 MB record; the watcher relisted in a loop (the record was refused
    every time) and the jobs listed after it were never published."""
    manifest = job("JAXJob", "huge", {"Worker": (1, "Never")}, "jax")
    manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["blob"] = "x" * 1_200_000
    await pipeline.submit(manifest)
    await sixteen_good_jobs_succeed(pipeline, "after-huge")
    message = failed_message(await pipeline.wait_for("JAXJob", "huge", "Failed"))
    assert message.startswith(
        "JAXJob huge failed validation because spec.jaxReplicaSpecs[Worker].template.metadata.annotations.blob: ")
    assert f"kto's limit is {limits.MAX_OBJECT_BYTES} bytes" in message
    history = await reading.read_history(pipeline.kafka, pipeline.key("JAXJob", "huge"))
    stand_ins = [r for r in history if isinstance(r, records.Observation) and r.object_kind == "JAXJob"]
    assert stand_ins and all(r.omitted and "x" * 1000 not in json.dumps(r.object) for r in stand_ins)


async def test_a_job_of_a_million_replicas_is_refused_and_slows_no_other_job(pipeline: Pipeline) -> None:
    """Before: nothing limited replicas; the reconciler planned a million pods (37 s for every other job, and
    once its memory ran out)."""
    await pipeline.submit(job("JAXJob", "million", {"Worker": (1_000_000, "Never")}, "jax"))
    started = asyncio.get_running_loop().time()
    await sixteen_good_jobs_succeed(pipeline, "after-million", timeout=30.0)
    assert asyncio.get_running_loop().time() - started < 30.0
    message = failed_message(await pipeline.wait_for("JAXJob", "million", "Failed"))
    assert ("spec.jaxReplicaSpecs[Worker].replicas: Invalid value: 1000000: "
            f"kto's limit is {limits.MAX_REPLICAS} replicas per replica type") in message


async def permissive_crd(client: clients.KubeClient, plural: str) -> None:
    """The kind's CRD with an untyped spec, as some clusters install it (no schema beyond
    x-kubernetes-preserve-unknown-fields): the API server then accepts wrongly typed fields."""
    crd = yaml.safe_load((ROOT / "deploy" / "crds" / f"kubeflow.org_{plural}.yaml").read_text())
    current = await client.get(resources.CRDS, None, crd["metadata"]["name"])
    for version in current["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"] = {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    await client.replace(resources.CRDS, None, current)
    await asyncio.sleep(1.0)  # the API server picks the new schema up


WRONGLY_TYPED = [
    pytest.param(lambda spec: spec["tfReplicaSpecs"]["Worker"].update(replicas="three"),
                 "spec.tfReplicaSpecs[Worker].replicas: Input should be a valid integer", id="replicas-three"),
    pytest.param(lambda spec: spec["tfReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"),
                 "spec.tfReplicaSpecs[Worker].restartPolicy: Input should be 'Always', 'OnFailure', 'Never' or 'ExitCode'",
                 id="restart-policy-sometimes"),
    pytest.param(lambda spec: spec.update(runPolicy={"backoffLimit": {"x": 1}}),
                 "spec.runPolicy.backoffLimit: Input should be a valid integer", id="backoff-limit-object"),
]


@pytest.mark.parametrize(("spoil", "expected"), WRONGLY_TYPED)
async def test_a_job_with_a_wrongly_typed_field_gets_a_failed_condition_naming_the_field(
    pipeline: Pipeline, spoil: Any, expected: str,
) -> None:
    """Before: the reconciler published the validation verdict, but the status worker could not load the job
    and never wrote any condition. With kto's CRDs the API server refuses such a job itself (the real
    tier, where CRDs are shared by every test, checks that); with an untyped CRD (the sim tier) kto must."""
    manifest = job("TFJob", "typo", {"Worker": (1, "Never")}, "tensorflow")
    spoil(manifest["spec"])
    if pipeline.tier == "kube":
        with pytest.raises(clients.ApiError) as refused:
            await pipeline.submit(manifest)
        assert refused.value.code == 422
        assert expected.split(":")[0].rsplit(".", 1)[-1] in refused.value.message
        return
    await permissive_crd(pipeline.client, "tfjobs")
    await pipeline.submit(manifest)
    message = failed_message(await pipeline.wait_for("TFJob", "typo", "Failed"))
    assert message.startswith("TFJob typo failed validation because ")
    assert expected in message
    assert await pipeline.pods("typo") == []


async def test_secret_looking_literal_env_values_never_reach_the_topic_or_the_dead_letter_topic(
    pipeline: Pipeline,
) -> None:
    """Before: literal env values (passwords, tokens) were copied verbatim into every record of the job and
    of its pods, and into the dead-letter topic with any record dead-lettered."""
    secrets = {"DB_PASSWORD": "hunter2-literal", "hf_token": "hf-literal-token", "API_KEY": "k3y-literal"}
    manifest = job("JAXJob", "secretive", {"Worker": (1, "Never")}, "jax")
    container = manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": n, "value": v} for n, v in secrets.items()] + [
        {"name": "MODEL", "value": "llama"},
        {"name": "S3_SECRET", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "secret"}}}]
    await pipeline.submit(manifest)
    [pod] = await _pods_eventually(pipeline, "secretive")
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert {n: env[n]["value"] for n in secrets} == secrets, "pods get the literal values"
    assert env["S3_SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "s3", "key": "secret"}}
    await pipeline.wait_for("JAXJob", "secretive", "Succeeded")
    written = [m.value for topic in (pipeline.kafka.jobs_topic, pipeline.kafka.dlq_topic)  # type: ignore[attr-defined]
               for m in await read_topic(pipeline.kafka, topic)]
    assert any(b"secretive" in value for value in written)
    for value in written:
        for literal in secrets.values():
            assert literal.encode() not in value
    history = await reading.read_history(pipeline.kafka, pipeline.key("JAXJob", "secretive"))
    redacted = {p for r in history if isinstance(r, records.Observation) for p in r.redacted}
    assert "spec.jaxReplicaSpecs[Worker].template.spec.containers[0].env[0].value" in redacted


async def _pods_eventually(pipeline: Pipeline, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    async def some() -> bool:
        found[:] = await pipeline.pods(name)
        return bool(found)

    await pipeline.eventually(some, what=f"pods of {name}")
    return found
