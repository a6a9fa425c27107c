"""The probes deploy/ points the kubelet at: ``/healthz`` and ``/readyz`` of each service, asked of
running ``kto watcher``, ``kto reconciler`` and ``kto status-service`` processes (Tansu and sim/).

Readiness follows what the service can do (its consumer started, the broker and its cluster
answering, the watcher's Lease read and, as leader, every watched type listed); liveness only that
its event loop answers, so an outage of the broker or the cluster never restarts a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence

import aiohttp
import pytest

from shared.bus import settings as bus_settings
from shared.api import jobs
from shared.kube import clients, resources
from sim import cluster as sim_cluster
from sim.settings import SimSettings
from tests.fixtures import pipeline
from tests.fixtures.broker import topics_of_this_test

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTEXT = "kto-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Service:
    process: subprocess.Popen[bytes]
    log: pathlib.Path
    port: int

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])

    async def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(f"http://127.0.0.1:{port or self.port}{path}") as response:
                return response.status, await response.text()

    async def logged(self, line: str, timeout: float = 40.0) -> None:
        """Wait until the service's log has a line ending with ``line``, asking ``/readyz`` meanwhile: a check
        runs, and logs a new reason, when it is asked (on a loaded machine the first answer may be an earlier
        state, e.g. some types not listed yet, and nothing would ask again)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not any(said.endswith(line) for said in self.log.read_text(errors="replace").splitlines()):
            assert asyncio.get_running_loop().time() < deadline, f"never logged {line!r}:\n{self.tail()}"
            with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                await self.get("/readyz")
            await asyncio.sleep(0.2)

    async def until(self, path: str, status: int, timeout: float = 40.0) -> str:
        """The body of ``path`` once it answers ``status``; fails with the last answer and the log."""
        deadline = asyncio.get_running_loop().time() + timeout
        last: tuple[int, str] | str = "no answer"
        while asyncio.get_running_loop().time() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the service exited with {self.process.returncode}:\n{self.tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
                last = await self.get(path)
                if last[0] == status:
                    return last[1]
            await asyncio.sleep(0.2)
        raise AssertionError(f"{path} never answered {status}; last: {last}\n{self.tail()}")


@contextlib.asynccontextmanager
async def service(argv: Sequence[str], kafka: bus_settings.KafkaSettings, log: pathlib.Path,
                  port: int, **extra_env: str) -> AsyncIterator[Service]:
    """The service outside a pod (no ``KUBERNETES_SERVICE_HOST``) unless ``extra_env`` says otherwise."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KTO_KAFKA_", "KTO_METRICS", "KTO_HEALTH", "KUBERNETES_SERVICE_"))}
    env.update(kafka.to_env(), PYTHONPATH=str(ROOT), **extra_env)
    with log.open("wb") as output:
        process = subprocess.Popen([sys.executable, "-m", "kto", *argv], stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT, cwd=str(ROOT), env=env)
    try:
        yield Service(process, log, port)
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 20)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[pathlib.Path]:
    """A sim cluster's kubeconfig (context ``kto-1``); the cluster serves for the test's duration."""
    kubeconfig = tmp_path / "kubeconfig"
    async with sim_cluster.Cluster(SimSettings(kubeconfig=kubeconfig, context=CONTEXT, nodes=1)):
        yield kubeconfig


def lines(body: str) -> set[str]:
    return {line for line in body.splitlines() if line.startswith("[")}


@pytest.mark.parametrize("command", [
    pytest.param("reconciler", id="reconciler"),
    pytest.param("status-service", id="status-service"),
])
async def test_a_worker_is_live_at_once_and_ready_once_its_consumer_broker_and_cluster_are(
    command: str, broker: bus_settings.KafkaSettings, cluster: pathlib.Path, tmp_path: pathlib.Path,
) -> None:
    kafka = await topics_of_this_test(broker)
    health, metrics = free_port(), free_port()
    argv = [command, "--kubeconfig", str(cluster), "--health-port", str(health), "--metrics-port", str(metrics),
            "--group", f"probe-{kafka.jobs_topic}"]
    async with service(argv, kafka, tmp_path / "worker.log", health) as worker:
        assert await worker.until("/healthz", 200) == "ok"
        assert await worker.until("/readyz", 200) == "ok"
        status, body = await worker.get("/readyz?verbose")
        assert status == 200 and lines(body) == {
            "[+]consumer ok", "[+]broker ok", f"[+]cluster {CONTEXT} ok", "[+]clusters ok",
        }, body
        assert body.endswith("readyz check passed\n")
        # The same probes beside /metrics (the metrics port serves them too).
        assert await worker.get("/readyz", metrics) == (200, "ok")
        assert (await worker.get("/metrics", metrics))[0] == 200
        assert (await worker.get("/metrics"))[0] == 404, "the health port serves the probes only"


async def test_a_worker_whose_cluster_goes_away_is_unready_but_live(
    broker: bus_settings.KafkaSettings, tmp_path: pathlib.Path,
) -> None:
    kafka = await topics_of_this_test(broker)
    kubeconfig, health = tmp_path / "kubeconfig", free_port()
    argv = ["reconciler", "--kubeconfig", str(kubeconfig), "--health-port", str(health),
            "--group", f"probe-{kafka.jobs_topic}"]
    async with sim_cluster.Cluster(SimSettings(kubeconfig=kubeconfig, context=CONTEXT, nodes=1)) as sim:
        async with service(argv, kafka, tmp_path / "worker.log", health) as worker:
            await worker.until("/readyz", 200)
            await sim.stop()
            body = await worker.until("/readyz", 503)
            assert f"[-]cluster {CONTEXT} failed: reason withheld (not required)" in body
            assert "[-]clusters failed: reason withheld" in body
            assert "[+]broker ok" in body and "[+]consumer ok" in body
            assert body.endswith("readyz check failed\n")
            assert await worker.get("/healthz") == (200, "ok"), "liveness does not follow the cluster"
            await worker.logged("readiness check clusters failed: none of 1 cluster(s) answers")


async def test_a_worker_without_a_broker_is_live_and_says_why_it_is_not_ready(
    cluster: pathlib.Path, tmp_path: pathlib.Path,
) -> None:
    nobody = free_port()  # nothing listens there
    kafka = bus_settings.KafkaSettings(bootstrap=f"127.0.0.1:{nobody}", idempotence=False)
    health = free_port()
    argv = ["status-service", "--kubeconfig", str(cluster), "--health-port", str(health)]
    async with service(argv, kafka, tmp_path / "worker.log", health) as worker:
        assert await worker.until("/healthz", 200) == "ok"
        body = await worker.until("/readyz", 503)
        assert "[-]broker failed: reason withheld" in body and str(nobody) not in body, "no broker address"
        assert "[-]consumer failed: reason withheld" in body
        assert f"[+]cluster {CONTEXT} ok" in body and "[+]clusters ok" in body
        await worker.logged(f"readiness check broker failed: not connected to 127.0.0.1:{nobody} yet")
        await worker.logged("readiness check consumer failed: the consumer has not started yet")


async def test_the_watcher_and_its_standby_are_ready_once_the_lease_is_read_and_the_leader_has_listed(
    broker: bus_settings.KafkaSettings, cluster: pathlib.Path, tmp_path: pathlib.Path,
) -> None:
    kafka = await topics_of_this_test(broker)
    ports = free_port(), free_port()
    argv = ["watcher", "--cluster", CONTEXT, "--kubeconfig", str(cluster), "--context", CONTEXT,
            "--lease-namespace", "default"]
    async with service([*argv, "--health-port", str(ports[0])], kafka, tmp_path / "leader.log", ports[0]) as leader:
        # The job kinds' CRDs are not installed yet: the leader lists everything else (et-operator's
        # kinds and the PodGroups are optional: not served is fine) and says which it cannot list.
        missing = ", ".join(f"{plural}.kubeflow.org" for plural in sorted(
            resources.JOB_TYPES[kind].plural for kind in jobs.KINDS))
        body = await leader.until("/readyz", 503)
        assert "[-]lease failed: reason withheld\n" in body and "kubeflow.org" not in body, body
        await leader.logged(f"readiness check lease failed: leading; not listed yet: {missing}")
        async with await clients.KubeClient.connect(cluster, context=CONTEXT) as client:
            await pipeline.apply_crds(client)
        async with service([*argv, "--health-port", str(ports[1])], kafka, tmp_path / "standby.log",
                           ports[1]) as standby:
            for watcher in (leader, standby):
                assert await watcher.until("/readyz", 200, timeout=60) == "ok"
                status, body = await watcher.get("/readyz?verbose")
                assert status == 200 and lines(body) == {"[+]broker ok", "[+]cluster ok", "[+]lease ok"}, body
                assert await watcher.get("/healthz") == (200, "ok")


@pytest.mark.parametrize(("flag", "env"), [
    pytest.param(("--health-port", "http"), {}, id="flag"),
    pytest.param((), {"KTO_HEALTH_PORT": "70000"}, id="variable"),
])
def test_a_bad_health_port_is_one_line(flag: tuple[str, ...], env: dict[str, str], tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    done = subprocess.run([sys.executable, "-m", "kto", "reconciler", "--kubeconfig", str(kubeconfig), *flag],
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          cwd=str(ROOT), timeout=60)
    assert done.returncode == 2
    where = "--health-port 'http'" if flag else "KTO_HEALTH_PORT '70000'"
    assert done.stderr.strip() == (
        f"kto reconciler: error: {where}: not a port number (1-65535, or 0 for none of its own)"), done.stderr


def test_a_health_port_in_use_is_one_line(tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "kto", "status-service", "--kubeconfig", str(kubeconfig),
                               "--health-port", str(port)],
                              env={**{k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")},
                                   "PYTHONPATH": str(ROOT), "KTO_KAFKA_BOOTSTRAP": "127.0.0.1:9"},
                              capture_output=True, text=True, cwd=str(ROOT), timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(f"--health-port {port}: cannot listen on 127.0.0.1: Address already in use"), done.stderr


async def connects(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    return True


@pytest.mark.parametrize(("env", "log_says", "on_127_0_0_2"), [
    pytest.param({}, "on 127.0.0.1:", False, id="loopback-outside-a-pod"),
    pytest.param({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, "on *:", True, id="every-address-inside-a-pod"),
    pytest.param({"KTO_METRICS_ADDRESS": "127.0.0.2"}, "on 127.0.0.2:", True, id="the-address-asked-for"),
])
async def test_metrics_and_probes_listen_on_loopback_outside_a_pod_and_every_address_inside_one(
    env: dict[str, str], log_says: str, on_127_0_0_2: bool, broker: bus_settings.KafkaSettings,
    cluster: pathlib.Path, tmp_path: pathlib.Path,
) -> None:
    kafka = await topics_of_this_test(broker)
    health, metrics = free_port(), free_port()
    argv = ["status-service", "--kubeconfig", str(cluster), "--health-port", str(health), "--metrics-port",
            str(metrics), "--group", f"probe-{kafka.jobs_topic}"]
    async with service(argv, kafka, tmp_path / "worker.log", health, **env) as worker:
        await worker.logged(f"serving /healthz, /readyz {log_says}{health}")
        await worker.logged(f"serving /healthz, /metrics, /readyz {log_says}{metrics}")
        for port in (health, metrics):
            assert await connects("127.0.0.2", port) is on_127_0_0_2, port
        if "KTO_METRICS_ADDRESS" not in env:
            assert await worker.get("/healthz") == (200, "ok")


def test_a_bad_metrics_address_is_one_line(tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTO_")}
    done = subprocess.run([sys.executable, "-m", "kto", "reconciler", "--kubeconfig", str(kubeconfig),
                           "--health-port", str(free_port())],
                          env={**env, "KTO_METRICS_ADDRESS": "localhost", "PYTHONPATH": str(ROOT),
                               "KTO_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
                          capture_output=True, text=True, cwd=str(ROOT), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        "KTO_METRICS_ADDRESS 'localhost': not an IP address (or * for every address)"), done.stderr
