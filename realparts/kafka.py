"""Real Apache Kafka (KRaft, one node) from Maven Central, run with the machine's Java.

In: a state directory, optional port and :class:`~shared.bus.settings.KafkaSettings`;
``java`` and ``mvn`` on PATH (or ``$KTO_JAVA`` naming the java executable).
Out: :func:`ensure_kafka`, the directory of Kafka's jars (built once per machine
into ``$KTO_CACHE_DIR/kafka-<version>/libs`` by ``mvn dependency:copy-dependencies``),
and :class:`KafkaBroker`, one JVM that is broker and controller at once, with its
log on disk under the state directory, so records and committed offsets survive a
stop (SIGTERM) or a crash (SIGKILL) and a start on the same directory.

Files under the state directory: ``kto-kafka.json`` (cluster id and the two
ports, reused on every start), ``server.properties`` and ``log4j2.properties``
(written on every start), ``data/`` (Kafka's log and metadata log, formatted on
the first start only) and ``kafka.log`` (the JVM's output, appended).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import time
import uuid
from typing import IO

from realparts import caching, ports
from shared.bus import broker as bus_broker
from shared import lifecycle
from shared.bus import errors
from shared.bus.settings import KafkaSettings

KAFKA_VERSION = "4.1.1"
SLF4J_VERSION = "2.0.17"
LOG4J_VERSION = "2.24.3"

JAVA_ENV = "KTO_JAVA"
"""Names the java executable to run Kafka with (default: ``java`` on PATH)."""

JAVA_HINT = "install a Java 17+ runtime (apt-get install openjdk-17-jre-headless) or set KTO_JAVA"
MVN_HINT = "install Maven (apt-get install maven); it fetches Kafka's jars from Maven Central once"

JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",  # one GC thread: the machine's cores are for the tests
    "-XX:TieredStopAtLevel=1",  # C1 only: starts faster, compiles less
    "-XX:-UsePerfData",  # no /tmp/hsperfdata_* file left behind
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
"""How the broker JVM is run: light on a 2-core machine (see docs/bus.md, Real Kafka)."""

_STATE_FILE = "kto-kafka.json"
_LOG_TAIL_LINES = 20

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.kto</groupId>
  <artifactId>kto-kafka-runtime</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{SLF4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
"""


def java_binary() -> str:
    """The java executable: ``$KTO_JAVA`` if set (it must be an executable file),
    else ``java`` on PATH; PartError saying how to get one otherwise."""
    configured = os.environ.get(JAVA_ENV, "").strip()
    if configured:
        path = pathlib.Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise caching.PartError(f"{JAVA_ENV}={configured} is not an executable file: {JAVA_HINT}")
        return str(path)
    return caching.require_tool("java", JAVA_HINT)


def ensure_kafka() -> pathlib.Path:
    """The directory of Kafka's jars (``<cache>/kafka-<version>/libs``), fetched
    with Maven the first time on this machine; PartError if that fails."""
    return caching.cached(f"kafka-{KAFKA_VERSION}", _build) / "libs"


def _build(directory: pathlib.Path) -> None:
    java_binary()  # Maven needs Java too: say so before Maven fails obscurely
    mvn = caching.require_tool("mvn", MVN_HINT)
    (directory / "pom.xml").write_text(_POM)
    command = [mvn, "-q", "-B", "dependency:copy-dependencies",
               "-DoutputDirectory=libs", "-DincludeScope=runtime"]
    try:
        done = subprocess.run(command, cwd=directory, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, check=False, timeout=900)
    except subprocess.TimeoutExpired:
        raise caching.PartError("mvn did not fetch Kafka's jars within 15 minutes") from None
    if done.returncode != 0:
        raise caching.PartError(
            f"mvn could not fetch Kafka {KAFKA_VERSION}'s jars (exit {done.returncode}): "
            f"{_tail(done.stdout + done.stderr, 8)}"
        )
    if not (directory / "libs" / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise caching.PartError(f"mvn finished but left no kafka_2.13-{KAFKA_VERSION}.jar in {directory / 'libs'}")


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def _cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 (22 characters), not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclasses.dataclass(frozen=True)
class _State:
    cluster_id: str
    port: int
    controller_port: int


class KafkaBroker(lifecycle.Started):
    """Apache Kafka on ``127.0.0.1:port`` with its log under ``state_dir`` and the kto topics.

    ``async with KafkaBroker(state_dir) as broker:`` builds the jars if needed,
    formats the storage on the first start, starts the JVM (in its own session),
    waits until it answers Kafka requests and creates the topics;
    ``broker.bootstrap`` and ``broker.settings`` say how to reach it (the
    producer is idempotent unless the given settings turn it off). Port 0 takes
    a free port the first time and the same one on every later start on the
    same ``state_dir``. ``stop()`` sends SIGTERM (a controlled shutdown) and
    SIGKILL after ``stop_timeout`` seconds and is safe to call twice; ``kill()``
    sends SIGKILL at once (a crash); ``restart()`` stops and starts again.
    Failures raise :class:`realparts.caching.PartError`.
    """

    def __init__(
        self,
        state_dir: pathlib.Path,
        port: int = 0,
        *,
        settings: KafkaSettings | None = None,
        start_timeout: float = 120.0,
        stop_timeout: float = 15.0,
        jvm_options: tuple[str, ...] = JVM_OPTIONS,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"{port} is not a port number")
        self.state_dir = pathlib.Path(state_dir).resolve()
        self._requested_port = port
        self._base = settings or KafkaSettings()
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._jvm_options = jvm_options
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._settings: KafkaSettings | None = None
        self._state: _State | None = None
        self._log_start = 0

    @property
    def log_path(self) -> pathlib.Path:
        """The JVM's output, appended on every start."""
        return self.state_dir / "kafka.log"

    @property
    def data_dir(self) -> pathlib.Path:
        """Kafka's ``log.dirs`` (records, offsets, the metadata log)."""
        return self.state_dir / "data"

    @property
    def port(self) -> int:
        """The client port (PLAINTEXT listener) of the running broker."""
        if self._state is None or self._settings is None:
            raise errors.BrokerError("the Kafka broker is not running")
        return self._state.port

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        return self._process.pid if self._process is not None else None

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the running broker."""
        return self.settings.bootstrap

    @property
    def settings(self) -> KafkaSettings:
        """The given settings pointed at this broker (PLAINTEXT)."""
        if self._settings is None:
            raise errors.BrokerError("the Kafka broker is not running")
        return self._settings

    # --- start -----------------------------------------------------------

    async def start(self) -> None:
        """Build if needed, format on the first start, start the JVM, wait until it
        serves Kafka requests, create the topics. PartError if any of it fails."""
        if self._process is not None:
            return
        try:
            await self._start()
        except BaseException:
            await asyncio.shield(self._halt(signal.SIGTERM))
            raise

    async def _start(self) -> None:
        java = java_binary()
        jars = await asyncio.to_thread(ensure_kafka)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        state, fresh_ports = self._load_state()
        attempts = 3 if fresh_ports else 1
        for attempt in range(1, attempts + 1):
            for port in (state.port, state.controller_port):
                if ports.in_use(port):
                    if attempt < attempts:
                        break
                    raise caching.PartError(
                        f"port {port} on 127.0.0.1 is in use (Kafka's state in {self.state_dir} "
                        f"uses ports {state.port} and {state.controller_port})"
                    )
            else:
                self._state = state
                self._write_config(state, jars)
                if not (self.data_dir / "meta.properties").is_file():
                    await self._format(java, jars, state)
                self._launch(java, jars)
                try:
                    await self._until_ready(state)
                except caching.PartError:
                    await self._halt(signal.SIGKILL)
                    if attempt == attempts or not self._bind_failed():
                        raise
                else:
                    return
            state = _State(state.cluster_id, ports.free(), ports.free())

    def _load_state(self) -> tuple[_State, bool]:
        """The stored cluster id and ports (new ones the first time, saved); True if the
        ports were chosen here rather than stored or given."""
        path = self.state_dir / _STATE_FILE
        stored: dict[str, object] = {}
        if path.is_file():
            try:
                stored = json.loads(path.read_text())
            except ValueError as exc:
                raise caching.PartError(f"{path} is not JSON ({exc}); remove {self.state_dir} to start afresh") from None
        cluster_id = stored.get("cluster_id")
        port = stored.get("port")
        controller_port = stored.get("controller_port")
        fresh = False
        if self._requested_port:
            port = self._requested_port
        elif not isinstance(port, int):
            port, fresh = ports.free(), True
        if not isinstance(controller_port, int):
            controller_port = ports.free()
            while controller_port == port:
                controller_port = ports.free()
        if not isinstance(cluster_id, str):
            if (self.data_dir / "meta.properties").is_file():
                raise caching.PartError(f"{path} is missing but {self.data_dir} is formatted; remove {self.state_dir}")
            cluster_id = _cluster_id()
        assert isinstance(port, int)
        return _State(cluster_id, port, controller_port), fresh

    def _save_state(self, state: _State) -> None:
        path = self.state_dir / _STATE_FILE
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(dataclasses.asdict(state), indent=2) + "\n")
        temporary.replace(path)

    def _write_config(self, state: _State, jars: pathlib.Path) -> None:
        self._save_state(state)
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{state.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{state.port},CONTROLLER://127.0.0.1:{state.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{state.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self._base.partitions),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "share.coordinator.state.topic.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            # A broker killed with SIGKILL stays registered until its session times
            # out; the restarted one waits for that (9 s by default) before serving.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "2",
            "log.cleaner.threads": "1",
        }
        (self.state_dir / "server.properties").write_text(
            "# written by kto (realparts/kafka.py) on every start\n"
            + "".join(f"{key}={value}\n" for key, value in properties.items())
        )
        (self.state_dir / "log4j2.properties").write_text(_LOG4J2)

    def _java_command(self, java: str, jars: pathlib.Path, main: str, *args: str) -> list[str]:
        return [
            java, *self._jvm_options,
            f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
            "-cp", f"{jars}/*", main, *args,
        ]

    async def _format(self, java: str, jars: pathlib.Path, state: _State) -> None:
        command = self._java_command(java, jars, "kafka.tools.StorageTool", "format",
                                     "-t", state.cluster_id, "-c", str(self.state_dir / "server.properties"))
        process = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), self._start_timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        with self.log_path.open("ab") as log:
            log.write(output)
        if process.returncode != 0:
            raise caching.PartError(
                f"cannot format Kafka's storage in {self.data_dir} (exit {process.returncode}): "
                f"{_tail(output.decode(errors='replace'), 8)}"
            )

    def _launch(self, java: str, jars: pathlib.Path) -> None:
        command = self._java_command(java, jars, "kafka.Kafka", str(self.state_dir / "server.properties"))
        self._log = self.log_path.open("ab")
        self._log.write(f"--- kto: starting Kafka {KAFKA_VERSION} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        self._log.flush()
        self._log_start = self._log.tell()
        try:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,  # Ctrl-C in a terminal reaches kto, not the JVM
            )
        except OSError as exc:
            raise caching.PartError(f"cannot run {java}: {exc}") from exc

    def _output(self) -> str:
        """The JVM's output since this start."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def _bind_failed(self) -> bool:
        return "Address already in use" in self._output()

    async def _until_ready(self, state: _State) -> None:
        process = self._process
        assert process is not None
        settings = dataclasses.replace(
            self._base, bootstrap=f"127.0.0.1:{state.port}", security_protocol="PLAINTEXT",
        )
        deadline = time.monotonic() + self._start_timeout

        def died() -> caching.PartError:
            return caching.PartError(
                f"Kafka exited with {process.returncode} before it was ready "
                f"(log: {self.log_path}): {_tail(self._output())}"
            )

        # First the port: the JVM takes a few seconds to bind it.
        while True:
            if process.poll() is not None:
                raise died()
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", state.port)
            except OSError:
                if time.monotonic() > deadline:
                    raise caching.PartError(
                        f"Kafka did not listen on port {state.port} within {self._start_timeout:.0f}s "
                        f"(log: {self.log_path}): {_tail(self._output())}"
                    ) from None
                await asyncio.sleep(0.1)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            break
        # Then Kafka requests: creating the topics succeeds once the broker has
        # caught up with the metadata log and is unfenced.
        topics = asyncio.ensure_future(
            bus_broker.ensure_topics(settings, timeout=max(1.0, deadline - time.monotonic()))
        )
        try:
            while not topics.done():
                if process.poll() is not None:
                    raise died()
                await asyncio.wait({topics}, timeout=0.2)
            try:
                topics.result()
            except errors.BrokerError as exc:
                if process.poll() is not None:
                    raise died() from exc
                raise caching.PartError(f"Kafka did not become ready: {exc} (log: {self.log_path})") from exc
        finally:
            if not topics.done():
                topics.cancel()
                with contextlib.suppress(BaseException):
                    await topics
        self._settings = settings

    # --- stop ------------------------------------------------------------

    async def stop(self) -> None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after ``stop_timeout``;
        safe to call twice."""
        await self._halt(signal.SIGTERM)

    async def kill(self) -> None:
        """SIGKILL the JVM at once, as a crash would; safe to call twice."""
        await self._halt(signal.SIGKILL)

    async def restart(self) -> None:
        """Stop (SIGTERM) and start again on the same state directory and ports."""
        await self.stop()
        await self.start()

    async def _halt(self, signum: signal.Signals) -> None:
        process, self._process = self._process, None
        output, self._log = self._log, None
        self._settings = None
        try:
            if process is not None and process.poll() is None:
                _signal_group(process, signum)
                try:
                    await asyncio.to_thread(process.wait, self._stop_timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(process, signal.SIGKILL)
                    await asyncio.to_thread(process.wait)
                    if output is not None:
                        output.write(f"--- kto: killed Kafka after {self._stop_timeout}s\n".encode())
        finally:
            if output is not None:
                output.close()


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    """Signal the process group the JVM leads (its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
