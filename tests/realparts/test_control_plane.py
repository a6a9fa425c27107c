"""`kto control-plane` as a user runs it: ready line, real kubectl, fake GPU nodes, pods that run and
exit as annotated, a clean stop that leaves nothing behind, state kept across restarts, and one clear
line for what is missing or broken."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from realparts import kube, ports
from supervising import processes
from tests.fixtures import tiers

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = pathlib.Path(sys.executable).parent / "kubectl"


def children_of(pid: int) -> set[int]:
    """Every live process whose parent is ``pid``."""
    found = set()
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if fields[1] == str(pid) and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def command_line(pid: int) -> str:
    try:
        return (pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")).decode()
    except OSError:
        return ""


class Running:
    def __init__(self, state_dir: pathlib.Path, *extra: str) -> None:
        self.state_dir = state_dir
        self.log = state_dir.parent / f"{state_dir.name}.out"
        with self.log.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kto", "control-plane", "--state-dir", str(state_dir), "--nodes", "2",
                 "--gpus-per-node", "4", "--crds", str(ROOT / "deploy" / "crds"), *extra],
                stdout=output, stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )
        deadline = time.monotonic() + tiers.START_TIMEOUT
        while True:
            text = self.log.read_text(errors="replace")
            lines = [line for line in text.splitlines() if line.startswith("ready ")]
            if lines:
                self.url, kubeconfig = lines[0].split()[1:3]
                self.kubeconfig = pathlib.Path(kubeconfig)
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                tiers.unavailable("kto control-plane", text[-2000:])
            time.sleep(0.2)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run([str(KUBECTL), f"--kubeconfig={self.kubeconfig}", *args], input=input,
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        return self.process.returncode


@pytest.fixture
def plane(tmp_path: pathlib.Path) -> Iterator[Running]:
    tiers.require_real_tier()
    running = Running(tmp_path / "plane")
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait()


POD = """
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  annotations: {sim.kto.dev/duration: 1s, sim.kto.dev/exit-code: "3"}
spec:
  restartPolicy: Never
  containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: 2}}}]
"""


def test_it_serves_kubectl_with_gpu_nodes_runs_pods_as_annotated_and_stops_leaving_nothing(plane: Running) -> None:
    nodes = json.loads(plane.kubectl("get", "nodes", "-o", "json"))["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["sim-node-0", "sim-node-1"]
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "4" for n in nodes)
    assert kube.KUBERNETES_VERSION in plane.kubectl("version")
    assert "pytorchjobs.kubeflow.org" in plane.kubectl("get", "crds")

    plane.kubectl("apply", "-f", "-", input=POD)
    plane.kubectl("wait", "--for=jsonpath={.status.phase}=Failed", "--timeout=60s", "pod/trainer")
    pod = json.loads(plane.kubectl("get", "pod", "trainer", "-o", "json"))
    assert pod["spec"]["nodeName"].startswith("sim-node-"), "bound by kube-scheduler"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3

    parts = children_of(plane.process.pid)
    names = {command_line(pid).split()[0].rsplit("/", 1)[-1] for pid in parts}
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} <= names
    bound = json.loads((plane.state_dir / "ports.json").read_text())

    assert plane.stop() == 0
    assert not processes.alive(parts)
    assert not any(ports.in_use(port) for port in bound.values()), bound


def test_started_again_on_its_state_dir_it_keeps_every_object(plane: Running) -> None:
    plane.kubectl("create", "configmap", "kept", "--from-literal=a=1")
    assert plane.stop() == 0
    again = Running(plane.state_dir)
    try:
        assert again.url == plane.url
        assert again.kubectl("get", "configmap", "kept", "-o", "jsonpath={.data.a}") == "1"
    finally:
        assert again.stop() == 0


def test_a_part_that_dies_stops_the_command_with_its_last_log_lines(plane: Running) -> None:
    parts = children_of(plane.process.pid)
    scheduler = next(pid for pid in parts if "kube-scheduler" in command_line(pid))
    os.kill(scheduler, signal.SIGKILL)
    plane.process.wait(timeout=30)
    output = plane.log.read_text()
    assert plane.process.returncode == 2
    assert "kto control-plane: error: kube-scheduler exited with code" in output
    assert "Traceback" not in output
    assert not processes.alive(parts), "the other parts are stopped too"


def run_command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kto", "control-plane", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60, check=False)


def test_without_go_the_build_says_what_is_missing_in_one_line(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path / "empty"), KTO_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    result = run_command("--build-only", env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2
    assert lines[-1].startswith("kto control-plane: error: go is not installed"), result.stderr
    assert "Traceback" not in result.stderr


def test_a_port_in_use_is_named_in_one_line(tmp_path: pathlib.Path) -> None:
    tiers.require_real_tier()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_command("--state-dir", str(tmp_path / "plane"), "--port", str(port),
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"kto control-plane: error: port {port} (apiserver) on 127.0.0.1 is in use: "
        "stop what holds it or use another --state-dir"
    ]
