"""Kafka with authentication and ACLs (realparts/kafka.py's SecuredKafkaBroker): SCRAM-SHA-512 over
SASL_SSL and mutual TLS, authorized by KRaft's StandardAuthorizer with kto's ACLs.

The watcher's principal writes ``kto.jobs``; the reconciler's and the status service's read it in
their groups and write decisions and dead letters; any other principal, a wrong password and a
certificate of another CA are refused, and kto's commands say so in one line. The three workers run
a PyTorchJob to Succeeded over each. No fakes: a Kafka JVM (CI requires it; ``KTO_SKIP_REAL=1``
skips it elsewhere, tests/fixtures/kafka.py) and the sim cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import errors as kafka_errors

from realparts import certifying, kafka
from shared.bus import authenticating, errors, producing, records
from shared.bus.settings import KafkaSettings, client_options
from shared.kube import clients
from sim import cluster as sim_cluster
from sim.settings import SimSettings
from tests.fixtures.pipeline import CLUSTER, Pipeline, apply_crds
from tests.pipeline.test_otlp_traces import _start
from tests.pipeline.test_pipeline import job

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
VIAS = [pytest.param("scram", id="scram"), pytest.param("mtls", id="mtls")]


def observation(key: str) -> records.Observation:
    return records.Observation(key=key, resource_version="1", object_kind="Pod", event="ADDED",
                               object={"metadata": {"name": "p"}})


def a_key() -> str:
    return f"{CLUSTER}/default/PyTorchJob/auth-{uuid.uuid4().hex[:8]}"


async def take(settings: KafkaSettings, group: str, key: str) -> records.Record:
    """Join ``group`` on the jobs topic, read until ``key``'s record, commit it."""
    consumer = AIOKafkaConsumer(settings.jobs_topic, **client_options(settings), group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=settings.session_timeout_ms,
                                heartbeat_interval_ms=settings.heartbeat_interval_ms)
    await consumer.start()
    try:
        async with asyncio.timeout(60):
            while True:
                message = await consumer.getone()
                record = records.decode(message.value)
                if str(record.key) == key:
                    await consumer.commit()
                    return record
    finally:
        await consumer.stop()


def stranger_of_another_ca(tmp_path: pathlib.Path, settings: KafkaSettings) -> KafkaSettings:
    """``settings`` with a certificate named ``kto-watcher`` that another CA signed."""
    issued = certifying.Authority(tmp_path / "other-ca", "another CA").issue("kto-watcher")
    return dataclasses.replace(settings, ssl_certfile=str(issued.cert), ssl_keyfile=str(issued.key))


def with_wrong_password(tmp_path: pathlib.Path, settings: KafkaSettings) -> KafkaSettings:
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    return dataclasses.replace(settings, sasl_password_file=str(wrong))


REFUSED = [
    pytest.param(lambda broker, tmp: broker.settings_of("kto-stranger", "scram"),
                 "does not let 'kto-stranger' describe topic kto.jobs (TopicAuthorizationFailed)",
                 id="no-acls-scram"),
    pytest.param(lambda broker, tmp: broker.settings_of("kto-stranger", "mtls"),
                 "kto-stranger.crt describe topic kto.jobs (TopicAuthorizationFailed)", id="no-acls-mtls"),
    pytest.param(lambda broker, tmp: with_wrong_password(tmp, broker.settings_of("kto-watcher", "scram")),
                 "refused the SCRAM-SHA-512 login of 'kto-watcher'", id="wrong-password"),
    pytest.param(lambda broker, tmp: stranger_of_another_ca(tmp, broker.settings_of("kto-watcher", "mtls")),
                 "refused this client's certificate KTO_KAFKA_SSL_CERTFILE=", id="certificate-of-another-ca"),
]


# --- the broker ---------------------------------------------------------------------


def test_certificates_keys_and_passwords_are_the_owners_only(secured_kafka: kafka.SecuredKafkaBroker) -> None:
    directory = secured_kafka.tls_dir
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = sorted(directory.iterdir())
    assert {f.name for f in files} >= {"ca.crt", "ca.key", "kto-broker.pem", "kto-watcher.key", "kto-status.password"}
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}


def test_the_acl_table_is_the_documented_one() -> None:
    grants = {g.principal: g for g in kafka.kto_grants(KafkaSettings())}
    assert grants["kto-watcher"] == kafka.Grant("kto-watcher", writes=("kto.jobs",))
    for service in ("reconciler", "status"):
        assert grants[f"kto-{service}"] == kafka.Grant(
            f"kto-{service}", writes=("kto.jobs", "kto.dlq"), reads=("kto.jobs",), groups=(f"kto-{service}",))
    assert (REPO_ROOT / "docs" / "bus.md").read_text().count("| `kto-reconciler` |") == 1


# --- what each principal may do ----------------------------------------------------------


@pytest.mark.parametrize("via", VIAS)
async def test_the_watcher_principal_publishes_to_the_jobs_topic(
    secured_kafka: kafka.SecuredKafkaBroker, via: str,
) -> None:
    settings = secured_kafka.settings_of("kto-watcher", via)
    await authenticating.check_access(settings)
    key = a_key()
    async with producing.Publisher(settings, "watcher", "test") as publisher:
        assert publisher.settings.idempotence is True  # Write on a topic is enough for a producer id
        sent = await publisher.publish(observation(key))
    assert sent.topic == "kto.jobs"
    record = await take(secured_kafka.settings_of("kto-reconciler", via), "kto-reconciler", key)
    assert isinstance(record, records.Observation) and record.source == "watcher"


@pytest.mark.parametrize("via", VIAS)
async def test_the_watcher_principal_may_neither_read_the_jobs_topic_nor_write_the_dead_letter_topic(
    secured_kafka: kafka.SecuredKafkaBroker, via: str,
) -> None:
    settings = secured_kafka.settings_of("kto-watcher", via)
    with pytest.raises((kafka_errors.GroupAuthorizationFailedError, kafka_errors.TopicAuthorizationFailedError)):
        await take(settings, "kto-reconciler", a_key())
    async with producing.Publisher(settings, "watcher", "test") as publisher:
        with pytest.raises(errors.PublishError, match="TopicAuthorizationFailed"):
            await publisher.publish(observation(a_key()), topic="kto.dlq")


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("service", ["reconciler", "status"])
async def test_a_worker_principal_consumes_in_its_group_and_publishes_a_decision_and_a_dead_letter(
    secured_kafka: kafka.SecuredKafkaBroker, via: str, service: str,
) -> None:
    key = a_key()
    async with producing.Publisher(secured_kafka.settings_of("kto-watcher", via), "watcher", "test") as watcher:
        await watcher.publish(observation(key))
    settings = secured_kafka.settings_of(f"kto-{service}", via)
    await authenticating.check_access(settings)
    assert isinstance(await take(settings, f"kto-{service}", key), records.Observation)
    decision = records.Decision(key=key, action="Tested", reason="Test", message="over an authenticated bus")
    async with producing.Publisher(settings, service, "test") as publisher:
        assert (await publisher.publish(decision)).topic == "kto.jobs"
        assert (await publisher.publish(decision, topic="kto.dlq")).topic == "kto.dlq"
    other = "kto-status" if service == "reconciler" else "kto-reconciler"
    with pytest.raises(kafka_errors.GroupAuthorizationFailedError):
        await take(settings, other, key)  # the other service's group is not its to join


@pytest.mark.parametrize(("refused", "said"), REFUSED)
async def test_a_client_the_broker_does_not_let_in_is_refused_in_one_line(
    secured_kafka: kafka.SecuredKafkaBroker, tmp_path: pathlib.Path, refused: object, said: str,
) -> None:
    settings = refused(secured_kafka, tmp_path)  # type: ignore[operator]
    with pytest.raises(authenticating.AccessRefused) as caught:
        await authenticating.check_access(settings)
    assert said in str(caught.value) and "\n" not in str(caught.value)


async def test_a_principal_without_acls_gets_no_producer_id(secured_kafka: kafka.SecuredKafkaBroker) -> None:
    publisher = producing.Publisher(secured_kafka.settings_of("kto-stranger", "scram"), "stranger", "test")
    try:
        with pytest.raises(errors.PublishError, match="ClusterAuthorizationFailed"):
            await publisher.start()
    finally:
        await publisher.stop()


# --- kto's commands ---------------------------------------------------------------------


def dead_end_kubeconfig(tmp_path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig whose cluster never answers: the broker's answer comes first."""
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: {CLUSTER}, cluster: {{server: "http://127.0.0.1:9"}}}}]
users: [{{name: {CLUSTER}, user: {{}}}}]
contexts: [{{name: {CLUSTER}, context: {{cluster: {CLUSTER}, user: {CLUSTER}}}}}]
current-context: {CLUSTER}
""")
    return path


def environment(settings: KafkaSettings) -> dict[str, str]:
    """This process's environment but for Kafka's variables, which come from ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KTO_KAFKA_", "KTO_METRICS", "KTO_HEALTH"))}
    env.update(settings.to_env())
    return env


@pytest.mark.parametrize(("refused", "said"), REFUSED)
@pytest.mark.parametrize("command", [
    pytest.param(["watcher", "--cluster", CLUSTER, "--context", CLUSTER], id="watcher"),
    pytest.param(["reconciler"], id="reconciler"),
    pytest.param(["status-service"], id="status-service"),
])
def test_a_worker_the_broker_does_not_let_in_stops_at_start_in_one_line(
    secured_kafka: kafka.SecuredKafkaBroker, tmp_path: pathlib.Path, refused: object, said: str,
    command: list[str],
) -> None:
    settings = refused(secured_kafka, tmp_path)  # type: ignore[operator]
    result = subprocess.run(
        [sys.executable, "-m", "kto", *command, "--kubeconfig", str(dead_end_kubeconfig(tmp_path))],
        cwd=REPO_ROOT, env=environment(settings), capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"kto {command[0]}: error: the "), result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr, result.stderr


# --- the three workers over each ----------------------------------------------------------


@pytest.fixture
async def sim(tmp_path: pathlib.Path) -> AsyncIterator[tuple[sim_cluster.Cluster, clients.KubeClient, pathlib.Path]]:
    kubeconfig = tmp_path / "kubeconfig"
    async with sim_cluster.Cluster(SimSettings(kubeconfig=kubeconfig, context=CLUSTER, pod_duration=1.0,
                                               nodes=4)) as cluster:
        client = await clients.KubeClient.connect(kubeconfig, context=CLUSTER)
        try:
            await apply_crds(client)
            yield cluster, client, kubeconfig
        finally:
            await client.close()


@contextlib.asynccontextmanager
async def three_workers(broker: kafka.SecuredKafkaBroker, via: str, kubeconfig: pathlib.Path,
                        logs: pathlib.Path) -> AsyncIterator[list[subprocess.Popen[str]]]:
    """``kto watcher``, ``kto reconciler`` and ``kto status-service``, each told only its own principal's
    settings (and its default consumer group); stopped with SIGTERM at the end."""
    commands = {
        "watcher": ["watcher", "--cluster", CLUSTER, "--context", CLUSTER, "--lease-duration", "3"],
        "reconciler": ["reconciler"],
        "status": ["status-service"],
    }
    started: list[subprocess.Popen[str]] = []
    try:
        for service, command in commands.items():
            env = environment(broker.settings_of(f"kto-{service}", via))
            started.append(await _start([*command, "--kubeconfig", str(kubeconfig)], env, logs / f"{service}.log"))
        yield started
    finally:
        for process in started:
            process.terminate()
        await asyncio.gather(*(asyncio.to_thread(process.wait, 30) for process in started))


@pytest.mark.parametrize("via", VIAS)
async def test_the_three_workers_run_a_pytorchjob_to_succeeded_each_as_its_own_principal(
    secured_kafka: kafka.SecuredKafkaBroker,
    sim: tuple[sim_cluster.Cluster, clients.KubeClient, pathlib.Path], tmp_path: pathlib.Path, via: str,
) -> None:
    cluster, client, kubeconfig = sim
    pipeline = Pipeline(cluster, client, secured_kafka.settings_of("kto-watcher", via), kubeconfig, {})
    name = f"over-{via}"
    async with three_workers(secured_kafka, via, kubeconfig, tmp_path) as processes:
        await pipeline.submit(job("PyTorchJob", name, {"Master": (1, "OnFailure"), "Worker": (1, "OnFailure")},
                                  "pytorch"))
        await pipeline.wait_for("PyTorchJob", name, "Succeeded", timeout=90)
        assert len(await pipeline.pods(name)) == 2
    logs = {log.name: log.read_text() for log in tmp_path.glob("*.log")}
    assert [p.returncode for p in processes] == [0, 0, 0], logs
    assert len(logs) == 3 and not [n for n, text in logs.items() if "Traceback" in text or "AuthorizationFailed" in text], \
        logs
