"""Real Apache Kafka (KRaft, one node) from Maven Central, run with the machine's Java.

In: a state directory, optional port and :class:`~shared.bus.settings.KafkaSettings`;
``java`` and ``mvn`` on PATH (or ``$KTO_JAVA`` naming the java executable).
Out: :func:`ensure_kafka`, the directory of Kafka's jars (built once per machine
into ``$KTO_CACHE_DIR/kafka-<version>/libs`` by ``mvn dependency:copy-dependencies``),
and :class:`KafkaBroker`, one JVM that is broker and controller at once, with its
log on disk under the state directory, so records and committed offsets survive a
stop (SIGTERM) or a crash (SIGKILL) and a start on the same directory.

And :class:`SecuredKafkaBroker`, the same broker authenticating every client (SCRAM-SHA-512
over SASL_SSL, mutual TLS) and authorizing every request (KRaft's StandardAuthorizer with the
ACLs of each :class:`Grant`, kto's by default: :func:`kto_grants`), with the certificates and
passwords it makes under ``<state_dir>/tls``; :meth:`SecuredKafkaBroker.settings_of` gives each
principal's settings.

Files under the state directory: ``kto-kafka.json`` (cluster id and the two
ports, three with SASL, reused on every start), ``server.properties`` and ``log4j2.properties``
(written on every start), ``data/`` (Kafka's log and metadata log, formatted on
the first start only), ``kafka.log`` (the JVM's output, appended) and, secured, ``tls/``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import pathlib
import secrets
import subprocess
import time
import uuid
from typing import Any

from realparts import caching, certifying, ports
from shared import lifecycle
from shared.bus import errors, topics
from shared.bus.settings import KafkaSettings
from supervising import processes

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
    sasl_port: int = 0
    """The SASL_SSL listener's port (:class:`SecuredKafkaBroker`); 0: none."""

    def ports(self) -> tuple[int, ...]:
        return tuple(port for port in (self.port, self.controller_port, self.sasl_port) if port)


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

    _sasl_listener = False
    """Whether the broker has a SASL_SSL listener (a third port in its state)."""

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
        self._process: processes.Process | None = None
        """The JVM while it runs (None once stopped or killed)."""
        self._launched: processes.Process | None = None
        """The JVM of the last start, running or not (whose output tells why it ended)."""
        self._settings: KafkaSettings | None = None
        self._state: _State | None = None

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
        return self._running().port

    def _running(self) -> _State:
        if self._state is None or self._settings is None:
            raise errors.BrokerError("the Kafka broker is not running")
        return self._state

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
            await asyncio.shield(self.stop())
            raise

    async def _start(self) -> None:
        java = java_binary()
        jars = await asyncio.to_thread(ensure_kafka)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        state, fresh_ports = self._load_state()
        attempts = 3 if fresh_ports else 1
        for attempt in range(1, attempts + 1):
            for port in state.ports():
                if ports.in_use(port):
                    if attempt < attempts:
                        break
                    raise caching.PartError(
                        f"port {port} on 127.0.0.1 is in use (Kafka's state in {self.state_dir} "
                        f"uses ports {' and '.join(map(str, state.ports()))})"
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
                    await self.kill()
                    if attempt == attempts or not self._bind_failed():
                        raise
                else:
                    return
            state = _State(state.cluster_id, ports.free(), ports.free(), ports.free() if state.sasl_port else 0)

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
        sasl_port = stored.get("sasl_port")
        if not isinstance(sasl_port, int) or not sasl_port:
            sasl_port = 0
            while self._sasl_listener and sasl_port in (0, port, controller_port):
                sasl_port = ports.free()
        if not isinstance(cluster_id, str):
            if (self.data_dir / "meta.properties").is_file():
                raise caching.PartError(f"{path} is missing but {self.data_dir} is formatted; remove {self.state_dir}")
            cluster_id = _cluster_id()
        assert isinstance(port, int)
        return _State(cluster_id, port, controller_port, sasl_port), fresh

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
            "controller.listener.names": "CONTROLLER",
            **self._listener_properties(state),
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

    def _listener_properties(self, state: _State) -> dict[str, str]:
        """One PLAINTEXT listener for clients and brokers, a PLAINTEXT one for the controller."""
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{state.port},CONTROLLER://127.0.0.1:{state.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{state.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }

    def _ready_settings(self, state: _State) -> KafkaSettings:
        """What readiness asks with (and ``settings`` hands out): the client port, PLAINTEXT."""
        return dataclasses.replace(self._base, bootstrap=f"127.0.0.1:{state.port}", security_protocol="PLAINTEXT")

    def _java_command(self, java: str, jars: pathlib.Path, main: str, *args: str) -> list[str]:
        return [
            java, *self._jvm_options,
            f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
            "-cp", f"{jars}/*", main, *args,
        ]

    async def _format(self, java: str, jars: pathlib.Path, state: _State) -> None:
        command = self._java_command(java, jars, "kafka.tools.StorageTool", "format",
                                     "-t", state.cluster_id, "-c", str(self.state_dir / "server.properties"),
                                     *self._format_arguments())
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

    def _format_arguments(self) -> tuple[str, ...]:
        """More arguments of the first start's ``kafka-storage format`` (none here)."""
        return ()

    def _launch(self, java: str, jars: pathlib.Path) -> None:
        command = self._java_command(java, jars, "kafka.Kafka", str(self.state_dir / "server.properties"))
        with self.log_path.open("ab") as log:
            log.write(f"--- kto: starting Kafka {KAFKA_VERSION} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        self._process = self._launched = processes.Process("Kafka", processes.Command(
            tuple(command), log=self.log_path, append=True, cwd=self.state_dir,
        ))
        try:
            self._process.start()
        except OSError as exc:
            raise caching.PartError(f"cannot run {java}: {exc}") from exc

    def _output(self) -> str:
        """The JVM's output since this start."""
        return self._launched.output() if self._launched is not None else ""

    def _bind_failed(self) -> bool:
        return "Address already in use" in self._output()

    async def _until_ready(self, state: _State) -> None:
        process = self._process
        assert process is not None
        settings = self._ready_settings(state)
        deadline = time.monotonic() + self._start_timeout

        def died() -> caching.PartError:
            return caching.PartError(
                f"Kafka exited with {process.returncode} before it was ready "
                f"(log: {self.log_path}): {_tail(self._output())}"
            )

        # First the port: the JVM takes a few seconds to bind it.
        try:
            if not await ports.until_accepts(state.port, deadline, lambda: process.returncode is None, 0.1):
                raise died()
        except TimeoutError:
            raise caching.PartError(
                f"Kafka did not listen on port {state.port} within {self._start_timeout:.0f}s "
                f"(log: {self.log_path}): {_tail(self._output())}"
            ) from None
        # Then Kafka requests: creating the topics succeeds once the broker has
        # caught up with the metadata log and is unfenced.
        creating = asyncio.ensure_future(
            topics.ensure_topics(settings, timeout=max(1.0, deadline - time.monotonic()))
        )
        try:
            while not creating.done():
                if process.returncode is not None:
                    raise died()
                await asyncio.wait({creating}, timeout=0.2)
            try:
                creating.result()
            except errors.BrokerError as exc:
                if process.returncode is not None:
                    raise died() from exc
                raise caching.PartError(f"Kafka did not become ready: {exc} (log: {self.log_path})") from exc
        finally:
            if not creating.done():
                creating.cancel()
                with contextlib.suppress(BaseException):
                    await creating
        self._settings = settings

    # --- stop ------------------------------------------------------------

    async def stop(self) -> None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after ``stop_timeout``;
        safe to call twice."""
        process, self._process = self._process, None
        self._settings = None
        if process is not None and await process.stop(self._stop_timeout):
            with self.log_path.open("ab") as log:
                log.write(f"--- kto: killed Kafka after {self._stop_timeout}s\n".encode())

    async def kill(self) -> None:
        """SIGKILL the JVM at once, as a crash would; safe to call twice."""
        process, self._process = self._process, None
        self._settings = None
        if process is not None:
            process.kill()
            await process.stop(self._stop_timeout)

    async def restart(self) -> None:
        """Stop (SIGTERM) and start again on the same state directory and ports."""
        await self.stop()
        await self.start()


# --- authentication and ACLs ----------------------------------------------------

BROKER_PRINCIPAL = "kto-broker"
"""The broker's own certificate's name: it dials its controller and itself with it (a super user)."""

ADMIN_PRINCIPAL = "kto-admin"
"""The super user that makes the topics and the ACLs (and whom ``SecuredKafkaBroker.settings`` names)."""

SCRAM_MECHANISM = "SCRAM-SHA-512"

# Kafka's codes for CreateAcls (org.apache.kafka.common.resource / acl).
_TOPIC, _GROUP = 2, 3
_LITERAL = 3
_READ, _WRITE, _DESCRIBE = 3, 4, 8
_ALLOW = 3
_OPERATION_NAMES = {_READ: "Read", _WRITE: "Write", _DESCRIBE: "Describe"}


@dataclasses.dataclass(frozen=True)
class Grant:
    """The ACLs of one principal (``User:<principal>``, from any host): the topics it may write,
    the topics it may read, and the consumer groups it may read in. Each topic it may read or
    write it may also describe."""

    principal: str
    writes: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def acls(self) -> list[tuple[int, str, int]]:
        """(resource type, literal resource name, operation), each once."""
        wanted = [(_TOPIC, topic, _WRITE) for topic in self.writes]
        wanted += [(_TOPIC, topic, _READ) for topic in self.reads]
        wanted += [(_TOPIC, topic, _DESCRIBE) for topic in (*self.writes, *self.reads)]
        wanted += [(_GROUP, group, _READ) for group in self.groups]
        return list(dict.fromkeys(wanted))


def kto_grants(
    settings: KafkaSettings, reconciler_group: str = "kto-reconciler", status_group: str = "kto-status",
) -> tuple[Grant, ...]:
    """kto's ACL table (docs/bus.md, Kafka with SCRAM or mTLS): the watcher writes the jobs topic; the
    reconciler and status workers read it in their groups and write their decisions to it and
    records they cannot process to the dead-letter topic."""
    jobs, dlq = settings.jobs_topic, settings.dlq_topic
    return (
        Grant("kto-watcher", writes=(jobs,)),
        Grant("kto-reconciler", writes=(jobs, dlq), reads=(jobs,), groups=(reconciler_group,)),
        Grant("kto-status", writes=(jobs, dlq), reads=(jobs,), groups=(status_group,)),
    )


class SecuredKafkaBroker(KafkaBroker):
    """Apache Kafka that authenticates every client and authorizes every request.

    Listeners, all on 127.0.0.1: ``port`` is SSL with ``ssl.client.auth=required`` (mutual TLS:
    a client's principal is its certificate's common name; the broker talks to itself there),
    ``sasl_port`` is SASL_SSL with SCRAM-SHA-512, and the controller's listener is mutual TLS too.
    There is no PLAINTEXT listener. KRaft's StandardAuthorizer refuses what no ACL allows
    (``allow.everyone.if.no.acl.found=false``); ``kto-broker`` and ``kto-admin`` are super users.

    On the first start it makes, under ``<state_dir>/tls`` (mode 0700, every file 0600), a CA,
    the broker's certificate (for 127.0.0.1 and localhost), and for every principal (those of
    ``grants``, ``principals`` and ``kto-admin``) a client certificate and a SCRAM password
    (``<principal>.password``), whose SCRAM-SHA-512 credentials the storage is formatted with.
    On every start it makes the topics (as ``kto-admin``) and the ACLs of ``grants`` (default
    :func:`kto_grants`). :meth:`settings_of` says how a principal reaches the broker;
    ``settings`` is the admin's (mutual TLS).
    """

    _sasl_listener = True

    def __init__(
        self,
        state_dir: pathlib.Path,
        port: int = 0,
        *,
        grants: tuple[Grant, ...] | None = None,
        principals: tuple[str, ...] = (),
        **options: Any,
    ) -> None:
        """``options``: those of :class:`KafkaBroker` (settings, timeouts, JVM options)."""
        super().__init__(state_dir, port, **options)
        self.grants = kto_grants(self._base) if grants is None else grants
        names = [ADMIN_PRINCIPAL, *(grant.principal for grant in self.grants), *principals]
        self.principals = tuple(dict.fromkeys(names))
        """Every principal with a certificate and a SCRAM password (made on the first start)."""

    @property
    def tls_dir(self) -> pathlib.Path:
        """The CA, certificates, keys and passwords (0700, files 0600)."""
        return self.state_dir / "tls"

    @property
    def ca_file(self) -> pathlib.Path:
        """The CA that signs the broker's and the clients' certificates."""
        return self.tls_dir / "ca.crt"

    @property
    def sasl_port(self) -> int:
        """The SASL_SSL (SCRAM-SHA-512) listener's port of the running broker."""
        return self._running().sasl_port

    def settings_of(self, principal: str, via: str) -> KafkaSettings:
        """Settings of ``principal`` on the running broker: ``via="scram"``, SASL_SSL with its
        password from its file (``sasl_password_file``); ``via="mtls"``, SSL with its certificate."""
        if principal not in self.principals:
            raise ValueError(f"{principal!r} is none of this broker's principals {self.principals}")
        base = dataclasses.replace(self._base, ssl_cafile=str(self.ca_file))
        if via == "scram":
            return dataclasses.replace(
                base, bootstrap=f"127.0.0.1:{self.sasl_port}", security_protocol="SASL_SSL",
                sasl_mechanism=SCRAM_MECHANISM, sasl_username=principal, sasl_password=None,
                sasl_password_file=str(self.tls_dir / f"{principal}.password"))
        if via == "mtls":
            return dataclasses.replace(
                base, bootstrap=f"127.0.0.1:{self.port}", security_protocol="SSL",
                ssl_certfile=str(self.tls_dir / f"{principal}.crt"), ssl_keyfile=str(self.tls_dir / f"{principal}.key"))
        raise ValueError(f"via {via!r}: use 'scram' or 'mtls'")

    def _ensure_credentials(self) -> None:
        """The CA, the broker's key store and every principal's certificate and password, made once."""
        authority = certifying.Authority(self.tls_dir, "kto Kafka test CA")
        broker = authority.issue(BROKER_PRINCIPAL, server=True)
        keystore = self.tls_dir / f"{BROKER_PRINCIPAL}.pem"
        if not keystore.is_file():
            certifying.write_private(keystore, broker.key_then_chain())
        for principal in self.principals:
            authority.issue(principal)
            password = self.tls_dir / f"{principal}.password"
            if not password.is_file():
                certifying.write_private(password, secrets.token_hex(24).encode())

    def _listener_properties(self, state: _State) -> dict[str, str]:
        self._ensure_credentials()
        scram = SCRAM_MECHANISM.lower()
        return {
            "listeners": f"SSL://127.0.0.1:{state.port},SASL_SSL://127.0.0.1:{state.sasl_port},"
                         f"CONTROLLER://127.0.0.1:{state.controller_port}",
            "advertised.listeners": f"SSL://127.0.0.1:{state.port},SASL_SSL://127.0.0.1:{state.sasl_port}",
            "inter.broker.listener.name": "SSL",
            "listener.security.protocol.map": "SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls_dir / f"{BROKER_PRINCIPAL}.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "ssl.client.auth": "required",
            "listener.name.sasl_ssl.ssl.client.auth": "none",
            # A certificate's principal is its common name, as Strimzi's (CN=kto-watcher → kto-watcher).
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]*)$/$1/,DEFAULT",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{scram}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{BROKER_PRINCIPAL};User:{ADMIN_PRINCIPAL}",
        }

    def _format_arguments(self) -> tuple[str, ...]:
        """Each principal's SCRAM-SHA-512 credentials, written into the metadata log by the format."""
        arguments: list[str] = []
        for principal in self.principals:
            password = (self.tls_dir / f"{principal}.password").read_text()
            arguments += ["--add-scram", f"{SCRAM_MECHANISM}=[name={principal},password={password}]"]
        return tuple(arguments)

    def _ready_settings(self, state: _State) -> KafkaSettings:
        """The admin, over mutual TLS on the client port."""
        return dataclasses.replace(
            self._base, bootstrap=f"127.0.0.1:{state.port}", security_protocol="SSL", ssl_cafile=str(self.ca_file),
            ssl_certfile=str(self.tls_dir / f"{ADMIN_PRINCIPAL}.crt"),
            ssl_keyfile=str(self.tls_dir / f"{ADMIN_PRINCIPAL}.key"))

    async def _until_ready(self, state: _State) -> None:
        await super()._until_ready(state)
        try:
            await create_acls(self.settings, self.grants)
        except errors.BrokerError as exc:
            raise caching.PartError(f"{exc} (log: {self.log_path})") from exc


async def create_acls(admin: KafkaSettings, grants: tuple[Grant, ...]) -> None:
    """Allow each grant's ACLs (an ACL that exists already is left as it is), as ``admin``;
    BrokerError naming the ACL the broker refused."""
    from aiokafka import errors as kafka_errors
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.admin import CreateAclsRequest

    from shared.bus import settings as bus_settings

    client = AIOKafkaClient(**bus_settings.client_options(admin))
    try:
        await client.bootstrap()
        for grant in grants:
            for resource_type, name, operation in grant.acls():
                request = CreateAclsRequest(resource_type, name, _LITERAL, f"User:{grant.principal}", "*",
                                            operation, _ALLOW)
                response = await client.send(client.get_random_node(), request)
                for code, message in response.creation_responses:
                    if code:
                        kind = "topic" if resource_type == _TOPIC else "group"
                        raise errors.BrokerError(
                            f"cannot allow {_OPERATION_NAMES[operation]} on {kind} {name} to User:{grant.principal}: "
                            f"{kafka_errors.for_code(code).__name__}: {message}")
    except kafka_errors.KafkaError as exc:
        raise errors.BrokerError(f"cannot create ACLs on {admin.bootstrap}: {exc!r}") from exc
    finally:
        await client.close()
