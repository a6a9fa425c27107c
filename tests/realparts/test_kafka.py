"""Real Apache Kafka (realparts/kafka.py): the idempotent producer, records and committed
offsets across a SIGTERM stop and a SIGKILL crash, and ``kto broker --engine kafka``.

No fakes: every test but the settings ones runs a Kafka JVM. A broker that cannot be
built or started fails (CI) or, with ``KTO_SKIP_REAL=1``, skips (tests/fixtures/kafka.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from realparts import kafka
from shared.bus import topics
from shared.bus import errors, producing, reading, records
from shared.bus.settings import KafkaSettings, SettingsError
from tests.fixtures.kafka import settings_for_tests, start_or_give_up

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def observation(key: str, n: int) -> records.Observation:
    return records.Observation(
        key=key, resource_version=str(n), object_kind="Pod", event="MODIFIED",
        object={"metadata": {"name": f"p{n}"}, "n": n},
    )


async def own_topics(settings: KafkaSettings) -> KafkaSettings:
    suffix = uuid.uuid4().hex[:10]
    mine = dataclasses.replace(settings, jobs_topic=f"kto.jobs.{suffix}", dlq_topic=f"kto.dlq.{suffix}")
    await topics.ensure_topics(mine)
    return mine


def numbers(history: list[records.Record]) -> list[int]:
    return [r.object["n"] for r in history if isinstance(r, records.Observation)]


async def read_key(settings: KafkaSettings, key: str) -> list[int]:
    """The ``n`` of every record of ``key``'s partition, oldest first (up to its end offset).

    Not ``reading.read_history``: that one finds partitions in the consumer's bootstrap
    metadata, which lists every topic on Tansu but none on Kafka (see the xfail below).
    """
    tp = TopicPartition(settings.jobs_topic, reading.partition_for_key(key, settings.partitions))
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        found: list[int] = []
        async with asyncio.timeout(30):
            while await consumer.position(tp) < end:
                for message in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                    record = records.decode(message.value)
                    if isinstance(record, records.Observation) and str(record.key) == key:
                        found.append(record.object["n"])
        return found
    finally:
        await consumer.stop()


async def committed(settings: KafkaSettings, group: str, key: str) -> int | None:
    """The offset ``group`` committed on ``key``'s partition of the jobs topic.

    Asked again for up to 10 s while the answer is "none": just after a broker start
    the group coordinator is still loading ``__consumer_offsets``, and aiokafka reads
    OffsetFetch's top-level COORDINATOR_LOAD_IN_PROGRESS (v2+) as "nothing committed".
    """
    tp = TopicPartition(settings.jobs_topic, reading.partition_for_key(key, settings.partitions))
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        deadline = time.monotonic() + 10
        while True:
            offset: int | None = await consumer.committed(tp)
            if offset is not None or time.monotonic() > deadline:
                return offset
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()


async def publish(settings: KafkaSettings, key: str, start: int, count: int) -> None:
    async with producing.Publisher(settings, "test", "test") as publisher:
        for n in range(start, start + count):
            await publisher.publish(observation(key, n))


async def consume_and_commit(settings: KafkaSettings, group: str, count: int) -> list[int]:
    """Join ``group``, take ``count`` records of the jobs topic, commit after the last one."""
    consumer = AIOKafkaConsumer(
        settings.jobs_topic, bootstrap_servers=settings.bootstrap, group_id=group,
        enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
        heartbeat_interval_ms=300,
    )
    await consumer.start()
    try:
        taken: list[int] = []
        async with asyncio.timeout(60):
            while len(taken) < count:
                batch = await consumer.getmany(timeout_ms=500, max_records=count - len(taken))
                for tp, messages in batch.items():
                    for message in messages:
                        taken.append(message.offset)
                        await consumer.commit({TopicPartition(tp.topic, tp.partition): message.offset + 1})
        return taken
    finally:
        await consumer.stop()


def listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (from /proc)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


@pytest.fixture
async def own_broker(tmp_path: pathlib.Path) -> AsyncIterator[kafka.KafkaBroker]:
    """A broker of this test only (it gets stopped and killed), in ``tmp_path / "kafka"``."""
    broker = kafka.KafkaBroker(tmp_path / "kafka", settings=settings_for_tests())
    await start_or_give_up(broker)
    try:
        yield broker
    finally:
        await broker.stop()


# --- settings ----------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ("true", True), ("1", True), ("YES", True), ("false", False), ("0", False), ("no", False),
])
def test_idempotence_comes_from_the_environment(raw: str, expected: bool) -> None:
    assert KafkaSettings.from_env({"KTO_KAFKA_IDEMPOTENCE": raw}).idempotence is expected
    assert KafkaSettings.from_env({}).idempotence is None  # unset: as the broker allows


def test_a_bad_idempotence_value_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="KTO_KAFKA_IDEMPOTENCE='maybe': not a boolean"):
        KafkaSettings.from_env({"KTO_KAFKA_IDEMPOTENCE": "maybe"})


def test_the_embedded_tansu_broker_hands_out_a_non_idempotent_producer(broker: KafkaSettings) -> None:
    assert broker.idempotence is False


async def test_an_idempotent_producer_on_tansu_fails_with_the_fix_in_the_message(broker: KafkaSettings) -> None:
    settings = dataclasses.replace(broker, idempotence=True)
    publisher = producing.Publisher(settings, "test", "test")
    try:
        with pytest.raises(errors.PublishError, match="KTO_KAFKA_IDEMPOTENCE=false"):
            await publisher.start()
    finally:
        await publisher.stop()


@pytest.mark.parametrize("wanted", [pytest.param(None, id="unset"), pytest.param(True, id="true")])
def test_a_producer_id_refused_for_another_reason_fails_the_start_whatever_the_setting(wanted: bool | None) -> None:
    """Only a broker without InitProducerId is worked around; an ACL that refuses one is the user's to fix."""
    from aiokafka import errors as kafka_errors

    refused = kafka_errors.ClusterAuthorizationFailedError()
    assert not isinstance(refused, producing._NO_PRODUCER_IDS)
    assert producing._refused("kafka-1:9092", refused, wanted) == (
        f"cannot start an idempotent producer on kafka-1:9092: InitProducerId answered ClusterAuthorizationFailedError "
        f"({refused}); KTO_KAFKA_IDEMPOTENCE=false starts one that asks for no producer id")


async def test_a_producer_left_to_the_broker_on_tansu_goes_on_without_idempotence_and_says_so_once(
    broker: KafkaSettings, caplog: pytest.LogCaptureFixture,
) -> None:
    settings = await own_topics(dataclasses.replace(broker, idempotence=None))
    with caplog.at_level("INFO"):
        async with producing.Publisher(settings, "test", "test") as publisher:
            assert publisher.settings.idempotence is False  # what the process's other clients are handed
            sent = await publisher.publish(observation("tansu/default/PyTorchJob/unset", 0))
    assert sent.offset == 0
    said = [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert [(r.name, r.levelname) for r in said] == [("kto.bus", "WARNING")], [r.getMessage() for r in said]
    assert said[0].getMessage() == (
        f"the broker at {broker.bootstrap} grants no producer id (InitProducerId answered UnknownError): "
        "publishing without idempotence, as kto up does on Tansu; a retried send may write a record twice, and "
        "consumers drop the copy by its record id (KTO_KAFKA_IDEMPOTENCE=false starts so at once, =true makes "
        "this an error)")


# --- the session broker ---------------------------------------------------------


async def test_an_idempotent_producer_writes_and_a_consumer_reads_everything_back(
    real_kafka: KafkaSettings,  # noqa: F811
) -> None:
    settings = await own_topics(real_kafka)
    assert settings.idempotence is None
    key = "kafka/default/PyTorchJob/idem"
    async with producing.Publisher(settings, "test", "test") as publisher:
        assert publisher.settings.idempotence is True  # unset, and Kafka grants a producer id
        first = [await publisher.publish(observation(key, n)) for n in range(5)]
        futures = [await publisher.submit(observation(key, n)) for n in range(5, 10)]
        pipelined = [await f for f in futures]
        many = await publisher.publish_many(observation(key, n) for n in range(10, 20))
        producer = publisher._producer  # the broker gave it a producer id: it is idempotent
        assert producer is not None and producer._txn_manager is not None
        assert producer._txn_manager.producer_id >= 0
    offsets = [s.offset for s in first + pipelined + many]
    assert offsets == list(range(20))  # one partition, in order, no duplicate
    assert {s.partition for s in first + pipelined + many} == {reading.partition_for_key(key, settings.partitions)}
    assert await read_key(settings, key) == list(range(20))


async def test_read_history_finds_the_topic_on_kafka(real_kafka: KafkaSettings) -> None:
    settings = await own_topics(real_kafka)
    key = "kafka/default/PyTorchJob/history"
    await publish(settings, key, 0, 2)
    assert numbers(await reading.read_history(settings, key)) == [0, 1]


# --- restarts -------------------------------------------------------------------


async def test_a_sigterm_stop_and_start_keeps_every_record_and_the_committed_offset(
    own_broker: kafka.KafkaBroker,
) -> None:
    settings = await own_topics(own_broker.settings)
    key = "kafka/default/PyTorchJob/restart"
    await publish(settings, key, 0, 30)
    assert await consume_and_commit(settings, "kto-restart-test", 12) == list(range(12))
    port, pid = own_broker.port, own_broker.pid
    assert pid is not None

    started = time.monotonic()
    await own_broker.stop()
    stopped_in = time.monotonic() - started
    assert not pathlib.Path(f"/proc/{pid}").exists()
    assert not listening(port)
    assert stopped_in < 10, f"Kafka's controlled shutdown took {stopped_in:.1f}s"
    await own_broker.stop()  # safe twice

    await start_or_give_up(own_broker)
    assert own_broker.port == port  # the same port, from the state dir
    settings = dataclasses.replace(settings, bootstrap=own_broker.bootstrap)
    assert await read_key(settings, key) == list(range(30))
    assert await committed(settings, "kto-restart-test", key) == 12
    # The group goes on where it was, and the producer writes after the old records.
    await publish(settings, key, 30, 3)
    assert await consume_and_commit(settings, "kto-restart-test", 21) == list(range(12, 33))


async def test_a_sigkill_crash_and_start_keeps_every_acknowledged_record(
    own_broker: kafka.KafkaBroker,
) -> None:
    settings = await own_topics(own_broker.settings)
    key = "kafka/default/PyTorchJob/crash"
    async with producing.Publisher(settings, "test", "test") as publisher:
        futures = [await publisher.submit(observation(key, n)) for n in range(200)]
        acknowledged = [await f for f in futures]
    assert len(acknowledged) == 200
    assert await consume_and_commit(settings, "kto-crash-test", 50) == list(range(50))
    pid = own_broker.pid
    await own_broker.kill()
    assert pid is not None and not pathlib.Path(f"/proc/{pid}").exists()
    await own_broker.kill()  # safe twice

    await start_or_give_up(own_broker)
    assert await read_key(settings, key) == list(range(200))
    assert await committed(settings, "kto-crash-test", key) == 50


# --- kto broker --engine kafka ------------------------------------------------


def kto(*args: str) -> list[str]:
    return [sys.executable, "-m", "kto", *args]


async def test_kto_broker_engine_kafka_serves_and_leaves_nothing_behind_on_sigterm(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "KTO_KAFKA_JOBS_TOPIC": "cli.jobs"}
    process = subprocess.Popen(
        kto("broker", "--engine", "kafka", "--state-dir", str(state), "--partitions", "3"),
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 180)
        if not line.startswith("ready"):
            process.wait(timeout=30)
            assert process.stderr is not None
            pytest.fail(f"no ready line: {line!r}; stderr: {process.stderr.read()[-2000:]}")
        assert line.startswith("ready 127.0.0.1:"), line
        bootstrap = line.split()[1]
        port = int(bootstrap.rsplit(":", 1)[1])
        assert (state / "kafka.log").is_file() and (state / "data" / "meta.properties").is_file()
        jvms = processes_mentioning(str(state / "server.properties"))
        assert jvms, "no Kafka JVM found in /proc"
        settings = dataclasses.replace(settings_for_tests(), bootstrap=bootstrap, jobs_topic="cli.jobs",
                                       partitions=3)
        key = "kafka/default/PyTorchJob/cli"
        await publish(settings, key, 0, 3)
        assert await read_key(settings, key) == [0, 1, 2]

        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0
        assert process.stdout.read() == ""
        assert processes_mentioning(str(state / "server.properties")) == []
        assert all(not pathlib.Path(f"/proc/{pid}").exists() for pid in jvms)
        assert not listening(port)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in processes_mentioning(str(state / "server.properties")):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("how", ["KTO_JAVA", "PATH"])
def test_kto_broker_engine_kafka_without_java_says_so_in_one_line(tmp_path: pathlib.Path, how: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KTO_JAVA"}
    if how == "KTO_JAVA":
        env["KTO_JAVA"] = str(tmp_path / "no-such-java")
    else:
        env["PATH"] = str(tmp_path)  # no java (and no mvn) on it
    result = subprocess.run(
        kto("broker", "--engine", "kafka", "--state-dir", str(tmp_path / "state")),
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kto broker: error: "), result.stderr
    assert ("KTO_JAVA=" if how == "KTO_JAVA" else "java is not installed") in lines[0]
    assert not (tmp_path / "state").exists()


def test_kto_broker_engine_kafka_on_a_port_in_use_says_so_in_one_line(tmp_path: pathlib.Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            kto("broker", "--engine", "kafka", "--state-dir", str(tmp_path / "state"), "--port", str(port)),
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
        )
    if "is not installed" in result.stderr or "mvn could not" in result.stderr:
        from tests.fixtures.kafka import unavailable

        unavailable(result.stderr.strip())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kto broker: error: port {port} on 127.0.0.1 is in use"), \
        result.stderr
