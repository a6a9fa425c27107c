"""The envelope: encode/decode round trips, malformed bytes, job keys, settings."""

from __future__ import annotations

import datetime
import json

import pytest

from shared.bus import records, settings

KEY = "prod/team-a/PyTorchJob/mnist"


def test_an_observation_survives_a_round_trip() -> None:
    record = records.Observation(
        key=KEY, resource_version="42", source="watcher", instance="w-1",
        object_kind="Pod", event="MODIFIED", object={"metadata": {"name": "mnist-master-0"}},
    )
    decoded = records.decode(records.encode(record))
    assert decoded == record
    assert isinstance(decoded, records.Observation)


def test_a_decision_survives_a_round_trip_with_an_unknown_action() -> None:
    record = records.Decision(
        key=KEY, action="something_new", child_kind="Pod", child_name="mnist-worker-1",
        reason="BackoffLimitExceeded", message="m", detail={"exitCode": 137},
    )
    assert records.decode(records.encode(record)) == record


def test_observed_at_is_rfc3339_utc_on_the_wire() -> None:
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    record = records.Decision(key=KEY, action="job_failed", observed_at=at)
    wire = json.loads(records.encode(record))
    assert wire["observed_at"] == "2026-01-02T01:04:05.000000Z"
    assert wire["schema_version"] == 1 and wire["type"] == "decision"
    assert records.decode(records.encode(record)).observed_at == at


def test_deterministic_ids_repeat_and_random_ids_do_not() -> None:
    assert records.deterministic_id("a", "b") == records.deterministic_id("a", "b")
    assert records.deterministic_id("a", "b") != records.deterministic_id("ab")
    assert records.Decision(key=KEY, action="x").id != records.Decision(key=KEY, action="x").id


def _envelope(**changes: object) -> bytes:
    raw = json.loads(records.encode(records.Decision(key=KEY, action="job_failed")))
    raw.update(changes)
    return json.dumps({k: v for k, v in raw.items() if v is not ...}).encode()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"{not json", "not JSON", id="bad-json"),
        pytest.param(b"\xff\xfe", "not JSON", id="not-utf8"),
        pytest.param(b"[1, 2]", "not a JSON object", id="array"),
        pytest.param(None, "tombstone", id="tombstone"),
        pytest.param(_envelope(schema_version=...), "missing schema_version", id="no-version"),
        pytest.param(_envelope(schema_version=2), "unknown schema_version 2", id="version-2"),
        pytest.param(_envelope(key=...), "key", id="missing-key"),
        pytest.param(_envelope(key="a/b/c"), "cluster/namespace/kind/name", id="bad-key"),
        pytest.param(_envelope(type="rumour"), "type", id="unknown-type"),
        pytest.param(_envelope(action=...), "action", id="missing-action"),
        pytest.param(_envelope(observed_at="2026-01-01T00:00:00"), "time zone", id="naive-time"),
    ],
)
def test_bytes_that_are_not_an_envelope_are_malformed(data: bytes | None, reason: str) -> None:
    with pytest.raises(records.MalformedRecord) as caught:
        records.decode(data)
    assert reason in caught.value.reason


def test_a_job_key_parses_and_prints_back() -> None:
    key = records.JobKey.parse(KEY)
    assert (key.cluster, key.namespace, key.kind, key.name) == ("prod", "team-a", "PyTorchJob", "mnist")
    assert str(key) == KEY


@pytest.mark.parametrize("text", ["a/b/c", "a/b/c/d/e", "a//c/d", "", "a/b/c/ d"])
def test_a_bad_job_key_is_refused_clearly(text: str) -> None:
    with pytest.raises(records.InvalidJobKey, match="cluster/namespace/kind/name"):
        records.JobKey.parse(text)


def test_settings_come_from_the_environment() -> None:
    s = settings.KafkaSettings.from_env({
        "KTO_KAFKA_BOOTSTRAP": "k1:9093,k2:9093", "KTO_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "KTO_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KTO_KAFKA_SASL_USERNAME": "kto",
        "KTO_KAFKA_SASL_PASSWORD": "secret", "KTO_KAFKA_PARTITIONS": "32",
    })
    assert (s.bootstrap, s.security_protocol, s.partitions) == ("k1:9093,k2:9093", "SASL_SSL", 32)
    assert "secret" not in repr(s)
    options = settings.client_options(s)
    assert options["sasl_mechanism"] == "SCRAM-SHA-512" and options["ssl_context"] is not None


def test_timing_settings_come_from_the_environment() -> None:
    s = settings.KafkaSettings.from_env({
        "KTO_KAFKA_LINGER_MS": "0", "KTO_KAFKA_FETCH_MAX_WAIT_MS": "250",
        "KTO_KAFKA_REQUEST_TIMEOUT_MS": "5000",
    })
    assert (s.linger_ms, s.fetch_max_wait_ms, s.request_timeout_ms) == (0, 250, 5000)
    assert settings.client_options(s)["request_timeout_ms"] == 5000


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        pytest.param({"KTO_KAFKA_PARTITIONS": "many"}, "KTO_KAFKA_PARTITIONS", id="not-int"),
        pytest.param({"KTO_KAFKA_PARTITIONS": "0"}, "KTO_KAFKA_PARTITIONS", id="zero"),
        pytest.param({"KTO_KAFKA_LINGER_MS": "-1"}, "KTO_KAFKA_LINGER_MS", id="negative-linger"),
        pytest.param({"KTO_KAFKA_FETCH_MAX_WAIT_MS": "0"}, "KTO_KAFKA_FETCH_MAX_WAIT_MS", id="zero-wait"),
        pytest.param({"KTO_KAFKA_SECURITY_PROTOCOL": "TLS"}, "KTO_KAFKA_SECURITY_PROTOCOL", id="protocol"),
        pytest.param({"KTO_KAFKA_BOOTSTRAP": "nohost"}, "KTO_KAFKA_BOOTSTRAP", id="bootstrap"),
        pytest.param({"KTO_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "KTO_KAFKA_SASL_USERNAME",
                     id="sasl-without-user"),
        pytest.param({"KTO_KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"}, "KTO_KAFKA_SSL_CAFILE", id="cafile"),
    ],
)
def test_a_bad_variable_is_named_in_the_error(env: dict[str, str], variable: str) -> None:
    with pytest.raises(settings.SettingsError, match=variable):
        settings.KafkaSettings.from_env(env)


def test_settings_given_to_a_child_process_as_variables_come_back_the_same() -> None:
    given = settings.KafkaSettings(
        bootstrap="k1:9093,k2:9093", security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
        sasl_username="kto", sasl_password="pw", jobs_topic="j", dlq_topic="d", partitions=3, idempotence=False,
    )
    assert settings.KafkaSettings.from_env(given.to_env()) == given


def test_a_broker_answering_unknown_server_error_is_tried_again() -> None:
    # Tansu answers produces with UNKNOWN_SERVER_ERROR while it comes back empty (chaos
    # broker restarts); a bounded retry keeps the record out of the dead-letter topic.
    from aiokafka import errors as kafka_errors

    from shared.bus import errors

    assert errors.is_retriable(kafka_errors.UnknownError())
    assert not errors.is_retriable(kafka_errors.RecordTooLargeError())


def test_a_secrets_values_never_reach_the_log_and_neither_do_those_a_basis_carries() -> None:
    import json as json_module

    from shared.bus import records as recs

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pi-ssh", "namespace": "ns"},
              "data": {"ssh-privatekey": "LS0tLS1CRUdJTi", "ssh-publickey": "ZWNkc2Et"}, "stringData": {"x": "y"}}
    observed = recs.decode(recs.encode(recs.Observation(key="c/ns/MPIJob/pi", object_kind="Secret", event="ADDED",
                                                        object=secret)))
    assert isinstance(observed, recs.Observation)
    assert observed.object["data"] == {"ssh-privatekey": recs.REDACTED, "ssh-publickey": recs.REDACTED}
    assert observed.redacted == ["data.ssh-privatekey", "data.ssh-publickey", "stringData.x"]
    decision = recs.Decision(key="c/ns/MPIJob/pi", action="reconcile_pass", detail={"plan": {}, "basis": {
        "now": "2026-11-24T00:00:00+00:00", "job": {"kind": "MPIJob", "name": "pi", "rv": "1", "uid": "u"},
        "children": [{"kind": "Secret", "name": "pi-ssh", "rv": "2", "uid": "s", "object": secret}]}})
    wire = recs.encode(decision)
    assert b"LS0tLS1CRUdJTi" not in wire
    child = json_module.loads(wire)["detail"]["basis"]["children"][0]
    assert child["object"]["data"]["ssh-privatekey"] == recs.REDACTED and child["rv"] == "2"
    assert secret["data"]["ssh-privatekey"] == "LS0tLS1CRUdJTi", "the caller's object is left alone"
