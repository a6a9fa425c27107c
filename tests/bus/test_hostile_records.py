"""Hostile bytes and hostile objects on the bus: every undecodable record is refused with a reason (and
dead-lettered by a consumer that goes on), every record written fits and carries no literal secret."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry import context as otel_context

from shared.bus import producing, records
from shared.bus.settings import KafkaSettings
from tests.bus.test_consuming import decision, key, read_topic, start, until
from tests.hostile import nested

KEY = "prod/team-a/PyTorchJob/mnist"


def envelope(**obj: Any) -> bytes:
    return json.dumps({"schema_version": 1, "key": KEY, "type": "observation", "object_kind": "Pod",
                       "event": "ADDED", "object": obj}).encode()


HOSTILE = [
    pytest.param(b"[" * 100_000, "nested too deep", id="100k-brackets"),
    pytest.param(b'{"a":' * 100_000, "nested too deep", id="100k-objects"),
    pytest.param(b'{"schema_version": 1, "n": ' + b"9" * 5000 + b"}", "4300 digits", id="5000-digit-int"),
    pytest.param(b"x" * (records.MAX_RECORD_BYTES + 1), "more than the limit of 1000000", id="oversized"),
    pytest.param(envelope(deep=nested(records.MAX_RECORD_DEPTH + 5)), "levels deep", id="object-too-deep"),
    pytest.param(b'{"schema_version": 1, "key": "\\ud800/a/b/c", "type": "decision", "action": "x"}', "surrogate",
                 id="lone-surrogate"),
    pytest.param(b'{"schema_version": NaN}', "unknown schema_version", id="nan"),
]


@pytest.mark.parametrize(("data", "reason"), HOSTILE)
def test_decoding_hostile_bytes_raises_only_malformed_record_with_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(records.MalformedRecord) as caught:
        records.decode(data)
    assert reason in caught.value.reason


def observation(obj: dict[str, Any], kind: str = "Pod") -> records.Observation:
    return records.Observation(key=KEY, object_kind=kind, event="ADDED", object=obj)


def pod(*env: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u", "resourceVersion": "7"},
            "spec": {"initContainers": [{"name": "i", "env": [{"name": "token", "value": "t0k"}]}],
                     "containers": [{"name": "c", "env": list(env)}]},
            "status": {"phase": "Running"}}


def test_literal_env_values_are_redacted_before_a_record_is_written() -> None:
    obj = pod({"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "Api_Key", "value": "k3y"},
              {"name": "GITHUB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "gh", "key": "token"}}},
              {"name": "CLIENT_SECRET", "value": ""}, {"name": "MODEL", "value": "llama"})
    data = records.encode(observation(obj))
    assert b"hunter2" not in data and b"k3y" not in data and b"t0k" not in data and b"llama" not in data
    decoded = records.decode(data)
    assert isinstance(decoded, records.Observation)
    env = decoded.object["spec"]["containers"][0]["env"]
    assert [e.get("value") for e in env] == [records.REDACTED, records.REDACTED, None, "", records.REDACTED]
    assert env[2]["valueFrom"] == {"secretKeyRef": {"name": "gh", "key": "token"}}
    assert decoded.redacted == ["spec.containers[0].env[0].value", "spec.containers[0].env[1].value",
                                "spec.containers[0].env[4].value", "spec.initContainers[0].env[0].value"]
    assert obj["spec"]["containers"][0]["env"][0]["value"] == "hunter2", "the caller's object is left alone"


def test_a_record_without_literal_values_is_written_as_before() -> None:
    obj = pod({"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model"}}})
    del obj["spec"]["initContainers"]
    data = records.encode(observation(obj))
    assert b'"redacted"' not in data and b'"omitted"' not in data


@pytest.mark.parametrize("bulk", [
    pytest.param({"extra": nested(300)}, id="300-levels"),
    pytest.param({"metadata": {"name": "p", "uid": "u", "resourceVersion": "7",
                               "annotations": {"blob": "x" * 1_200_000}}}, id="1.2MB-annotation"),
])
def test_an_object_too_large_or_too_deep_for_a_record_is_replaced_by_a_stand_in(bulk: dict[str, Any]) -> None:
    data = records.encode(observation({**pod(), **bulk}))
    assert len(data) <= records.MAX_RECORD_BYTES
    decoded = records.decode(data)
    assert isinstance(decoded, records.Observation)
    assert decoded.omitted.endswith("the object is on the API server")
    assert decoded.object == {"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": "p", "uid": "u", "resourceVersion": "7"},
                              "status": {"phase": "Running"}}


@pytest.mark.parametrize(("bulk", "why"), [
    pytest.param({"extra": nested(records.MAX_RECORD_DEPTH + 1)}, "the object is nested more than 200 levels deep", id="201-levels"),
    pytest.param({"extra": 10 ** 4300}, "the object holds an integer of more than 4,200 digits",
                 id="4301-digit-int"),
])
def test_an_object_decode_would_refuse_is_carried_as_a_stand_in_that_says_why(bulk: dict[str, Any], why: str) -> None:
    decoded = records.decode(records.encode(observation({**pod(), **bulk})))
    assert isinstance(decoded, records.Observation)
    assert decoded.omitted.startswith(why) and "extra" not in decoded.object


def test_an_object_of_many_shallow_containers_is_written_whole_and_read_back() -> None:
    """More containers than the depth limit, none deep: the walks that measure depth run and find nothing."""
    shallow = {"items": [{"n": [i]} for i in range(records.MAX_RECORD_DEPTH)]}
    data = records.encode(observation({**pod(), **shallow}))
    assert data.count(b"{") + data.count(b"[") > records.MAX_RECORD_DEPTH
    decoded = records.decode(data)
    assert isinstance(decoded, records.Observation)
    assert not decoded.omitted and decoded.object["items"] == shallow["items"]


def test_a_decision_too_large_for_a_record_keeps_a_shortened_message() -> None:
    record = records.Decision(key=KEY, action="job_validation_failed", message="m" * 2_000_000,
                              detail={"blob": "x" * 2_000_000})
    decoded = records.decode(records.encode(record))
    assert isinstance(decoded, records.Decision)
    assert len(decoded.message) == records.MAX_DECISION_MESSAGE + 1 and decoded.detail["omitted"]


async def test_undecodable_records_are_dead_lettered_with_their_offsets_and_the_partition_moves_on(
    bus: KafkaSettings,
) -> None:
    """Issue 10: `[` × 100,000 or a 5,000-digit integer used to kill every consumer (RecursionError and
    ValueError escaped decode), and each replacement died the same way."""
    handled: list[int] = []

    async def handle(record: records.Record, _: otel_context.Context) -> None:
        assert isinstance(record, records.Decision)
        handled.append(record.detail["seq"])

    k = key("hostile")
    hostile = [b"[" * 100_000, b'{"schema_version": 1, "n": ' + b"9" * 5000 + b"}", b'{"a":' * 50_000]
    async with producing.Publisher(bus, "test", "test") as publisher:
        await publisher.publish(decision(k, 0))
        sent = [await publisher.send_raw(bus.jobs_topic, value, key=k.encode(), headers=[]) for value in hostile]
        for seq in (1, 2, 3):
            await publisher.publish(decision(k, seq))
    running = await start(bus, handle, group="hostile")
    await until(lambda: handled == [0, 1, 2, 3])
    await running.stop()
    dead = sorted(await read_topic(bus, bus.dlq_topic), key=lambda m: m.offset)  # type: ignore[attr-defined]
    assert [m.value for m in dead] == hostile  # type: ignore[attr-defined]
    for message, original in zip(dead, sent):
        headers = dict(message.headers)  # type: ignore[attr-defined]
        assert headers["kto-source-offset"] == str(original.offset).encode()
        assert headers["kto-error"].startswith(b"MalformedRecord: not JSON this reader can parse")
