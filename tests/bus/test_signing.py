"""Signed records: a consumer with a keyring hands only authentic records to its handler; every other
one (unsigned, forged, altered, cut, signed with an unknown or retired key, or by a role that may not
write it) is dead-lettered with its reason and counted, and the partition goes on."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from opentelemetry import context as otel_context

from shared import metrics
from shared.bus import events, producing, records, signing
from shared.bus.settings import KafkaSettings
from tests.bus.test_consuming import read_topic, start, until

KEY = "prod/team-a/PyTorchJob/mnist"


def pod(phase: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mnist-worker-0", "uid": "u1"},
            "status": {"phase": phase}}


def observation(phase: str = "Running", source: str = "watcher") -> records.Observation:
    return records.Observation(key=KEY, object_kind="Pod", event="MODIFIED", object=pod(phase), source=source)


@pytest.fixture
def keyring(tmp_path: pathlib.Path) -> signing.Keyring:
    signing.new_keyring(tmp_path / "keys.json", "one")
    return signing.Keyring([tmp_path / "keys.json"])


def entries(path: pathlib.Path) -> list[dict[str, Any]]:
    document: dict[str, Any] = json.loads(path.read_text())
    return list(document["keys"])


def test_a_keyring_file_is_written_for_its_owner_only(keyring: signing.Keyring) -> None:
    path = keyring.paths[0]
    assert path.stat().st_mode & 0o777 == 0o600
    assert {k.role for k in keyring.keys().values()} == set(signing.ROLES)


@pytest.mark.parametrize(("document", "problem"), [
    pytest.param("not json", "not JSON", id="not-json"),
    pytest.param({"keys": {}}, "a list 'keys'", id="keys-not-a-list"),
    pytest.param({"keys": [{"id": "a", "role": "admin", "public": "AA=="}]}, "keys[0].role", id="unknown-role"),
    pytest.param({"keys": [{"id": "a", "role": "watcher", "public": "AA=="}]}, "keys[0].public: 1 bytes",
                 id="short-key"),
    pytest.param({"keys": [{"id": "a", "role": "watcher", "public": "%%"}]}, "keys[0].public: not base64",
                 id="not-base64"),
    pytest.param({"keys": [{"id": "a", "role": "watcher", "state": "old", "public": "AA=="}]}, "keys[0].state",
                 id="unknown-state"),
])
def test_a_bad_keyring_is_refused_naming_the_file_and_field(
    tmp_path: pathlib.Path, document: Any, problem: str,
) -> None:
    path = tmp_path / "keys.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(signing.KeyringError) as caught:
        signing.Keyring([path])
    assert str(path) in str(caught.value) and problem in str(caught.value)


def test_a_private_key_that_is_not_the_public_keys_pair_is_refused(tmp_path: pathlib.Path) -> None:
    one, two = signing.new_key("a", "watcher"), signing.new_key("b", "watcher")
    path = tmp_path / "keys.json"
    signing.write_keyring(path, [{**one, "private": two["private"]}])
    with pytest.raises(signing.KeyringError, match=r"keys\[0\].private: does not belong"):
        signing.Keyring([path])


def test_a_signer_needs_exactly_one_active_private_key_of_its_role(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "keys.json"
    public_only = {k: v for k, v in signing.new_key("w", "watcher").items() if k != "private"}
    signing.write_keyring(path, [public_only])
    with pytest.raises(signing.KeyringError, match="no active key with a private part for role 'watcher'"):
        signing.Keyring([path]).signer("watcher")


def signed(keyring: signing.Keyring, role: str, record: records.Record) -> tuple[bytes, bytes, list[Any]]:
    value, key, tag = records.encode(record), record.key.encode(), records.type_tag(record).encode()
    return value, key, [(records.TYPE_HEADER, tag), *keyring.signer(role).headers(key, tag, value)]


def test_a_signature_covers_the_job_key_the_type_and_every_byte_of_the_value(keyring: signing.Keyring) -> None:
    value, key, headers = signed(keyring, "watcher", observation())
    assert keyring.verify(key, value, headers).authentic
    assert keyring.verify(key, value, headers).role == "watcher"
    for what, (k, v, h) in {
        "another job": (b"prod/team-a/PyTorchJob/other", value, headers),
        "altered": (key, value.replace(b"Running", b"Succeed"), headers),
        "cut": (key, value[:-1], headers),
        "retyped": (key, value, [(records.TYPE_HEADER, b"observation:Service"), *headers[1:]]),
    }.items():
        verdict = keyring.verify(k, v, h)
        assert not verdict.authentic and verdict.code == "bad_signature", what


def test_a_retired_key_is_no_longer_trusted_but_still_says_who_signed(
    keyring: signing.Keyring, tmp_path: pathlib.Path,
) -> None:
    value, key, headers = signed(keyring, "watcher", observation())
    path = keyring.paths[0]
    signing.write_keyring(path, [{**e, "state": "retired"} if e["role"] == "watcher" else e for e in entries(path)])
    verdict = signing.Keyring([path]).verify(key, value, headers)
    assert not verdict.authentic and verdict.retired and verdict.code == "retired_key"
    assert verdict.role == "watcher"


@pytest.mark.parametrize(("role", "record", "allowed"), [
    pytest.param("watcher", observation(), True, id="watcher-observes"),
    pytest.param("reconciler", observation(source="reconciler"), False, id="reconciler-may-not-observe-a-pod"),
    pytest.param("reconciler", records.Observation(key=KEY, object_kind="PyTorchJob", event="DELETED", object={},
                                                   source="reconciler"), True, id="reconciler-job-gone"),
    pytest.param("status", records.Decision(key=KEY, action="status_written", source="status"), True,
                 id="status-decides"),
    pytest.param("watcher", records.Decision(key=KEY, action="job_succeeded", source="watcher"), False,
                 id="watcher-may-not-decide"),
    pytest.param("status", records.Decision(key=KEY, action="timer_fired", source="reconciler"), False,
                 id="status-key-reconciler-source"),
])
def test_each_role_may_write_only_its_own_records(role: str, record: records.Record, allowed: bool) -> None:
    assert (signing.permits(role, record, records.type_tag(record).encode()) == "") is allowed


async def test_a_consumer_with_a_keyring_handles_only_authentic_records_and_dead_letters_the_rest(
    bus: KafkaSettings, keyring: signing.Keyring, tmp_path: pathlib.Path,
) -> None:
    handled: list[records.Record] = []
    rejected: list[str] = []

    async def handler(record: records.Record, _: otel_context.Context) -> None:
        handled.append(record)

    def hook(event: events.BusEvent) -> None:
        if event.name == events.REJECTED:
            rejected.append(event.attributes["reason"])

    counted = metrics.ServiceMetrics(bus.dlq_topic)
    other = tmp_path / "other.json"
    signing.new_keyring(other, "stranger")
    stranger = signing.Keyring([other])
    async with producing.Publisher(bus, "watcher", "w", signer=keyring.signer("watcher")) as watcher, \
            producing.Publisher(bus, "forger", "f") as forger, \
            producing.Publisher(bus, "reconciler", "r", signer=keyring.signer("reconciler")) as reconciler, \
            producing.Publisher(bus, "watcher", "s", signer=stranger.signer("watcher")) as impostor:
        await forger.publish(observation("Succeeded"))                      # unsigned
        await impostor.publish(observation("Succeeded"))                    # a key nobody trusts
        await reconciler.publish(observation("Failed", source="reconciler"))  # a role that may not observe pods
        value, key, headers = signed(keyring, "watcher", observation("Running"))
        await forger.send_raw(bus.jobs_topic, value.replace(b"Running", b"Failed!"), key=key, headers=headers)
        await watcher.publish(observation("Running"))                       # the one authentic record
        running = await start(bus, handler, keyring=keyring, on_event=[hook, counted.on_bus_event])
        try:
            await until(lambda: len(handled) == 1 and len(rejected) == 4)
        finally:
            await running.stop()
    assert [r.object["status"]["phase"] for r in handled if isinstance(r, records.Observation)] == ["Running"]
    assert sorted(rejected) == ["bad_signature", "role", "unknown_key", "unsigned"]
    for reason in rejected:
        assert counted.registry.get_sample_value(metrics.RECORDS_REJECTED, {"reason": reason}) == 1
    dead = await read_topic(bus, bus.dlq_topic)
    reasons = [dict(m.headers)["kto-error"].decode() for m in dead]  # type: ignore[attr-defined]
    assert len(reasons) == 4 and all(r.startswith("NotAuthentic (") for r in reasons), reasons
