"""The local stack (kto/stack.py), ``kto up`` and ``kto demo`` against the real broker and sims."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import yaml

from kto import stack
from kto.commands import up
from realparts import ports
from supervising import processes
from tests.fixtures import tiers
from tests.pipeline.test_metrics import scrape
from tests.realparts.test_jobset import DEPENDS_ON

REPO = pathlib.Path(__file__).resolve().parents[2]
KUBECTL = REPO / ".venv" / "bin" / "kubectl"


def _kubectl(kubeconfig: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=60)


def _kto(*args: str) -> list[str]:
    return [sys.executable, "-m", "kto", *args]


async def test_the_stack_serves_every_cluster_and_stops_without_leftovers(tmp_path: pathlib.Path) -> None:
    settings = stack.StackSettings(state_dir=tmp_path / "state", clusters=2, reconcilers=1, status_workers=1,
                                   partitions=4)
    async with stack.Stack(settings) as running:
        pids = running.pids()
        # broker + Tansu, 2 sims, 2 watchers, 1 reconciler, 1 status worker
        assert len(pids) >= 8
        assert processes.alive(pids) == pids

        config = yaml.safe_load(running.kubeconfig.read_text())
        assert [c["name"] for c in config["contexts"]] == ["kto-1", "kto-2"]
        assert config["current-context"] == "kto-1"
        assert set(running.sim_urls) == {"kto-1", "kto-2"}
        assert running.bootstrap.startswith("127.0.0.1:")

        for context in ("kto-1", "kto-2"):
            for plural in ("pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs"):
                result = _kubectl(running.kubeconfig, "--context", context, "get", plural)
                assert result.returncode == 0, result.stderr
            # What Kubeflow Trainer's installation publishes for the kubeflow SDK's TrainerClient.
            result = _kubectl(running.kubeconfig, "--context", context, "get", "configmap", "-n", "kubeflow-system",
                              "kubeflow-trainer-public", "-o", "jsonpath={.data}")
            assert (result.returncode, result.stdout) == (0, '{"kubeflow_trainer_version":"v2.3.0"}'), result.stderr

        with pytest.raises(stack.StackError, match="in use by a running kto stack"):
            async with stack.Stack(settings):
                pass
        second = subprocess.run(_kto("up", "--state-dir", str(settings.state_dir)),
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert "in use by a running kto stack" in second.stderr
        assert running.exits() == []

        reconciler = next(child for child in running.children if child.name == "reconciler-1")
        assert reconciler.pid is not None
        os.kill(reconciler.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        ended: list[stack.Exit] = []
        while not ended and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            ended = running.exits()
        assert [(e.name, e.code, e.log.name) for e in ended] == [("reconciler-1", -9, "reconciler-1.log")]
        assert any(line.startswith("ready ") for line in ended[0].tail)
        assert running.exits() == []  # reported once

    assert processes.alive(pids) == set()
    # The directory is free again.
    assert (settings.state_dir / "logs" / "broker.log").exists()
    assert sorted(p.name for p in (settings.state_dir / "logs").iterdir()) == [
        "broker.log", "reconciler-1.log", "sim-kto-1.log", "sim-kto-2.log", "status-1.log",
        "watcher-kto-1.log", "watcher-kto-2.log",
    ]


def _free_run(count: int) -> int:
    """The first of ``count`` consecutive ports nobody listens on now."""
    for _ in range(50):
        base = ports.free()
        if base + count <= 65535 and not any(ports.in_use(base + i) for i in range(count)):
            return base
    raise AssertionError(f"no {count} consecutive free ports")


async def test_every_service_of_the_stack_serves_its_own_metrics_and_prometheus_gets_a_config(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A KTO_METRICS_PORT in the environment is not taken by every child at once.
    monkeypatch.setenv("KTO_METRICS_PORT", str(ports.free()))
    base = _free_run(4)
    settings = stack.StackSettings(state_dir=tmp_path / "state", clusters=2, partitions=4, metrics_port_base=base)
    async with stack.Stack(settings) as running:
        assert running.metrics_targets == {
            "watcher-kto-1": f"127.0.0.1:{base}", "watcher-kto-2": f"127.0.0.1:{base + 1}",
            "reconciler-1": f"127.0.0.1:{base + 2}", "status-1": f"127.0.0.1:{base + 3}",
        }
        config = yaml.safe_load(running.scrape_config.read_text())
        (job,) = config["scrape_configs"]
        assert [(c["targets"], c["labels"]["service"]) for c in job["static_configs"]] == [
            ([f"127.0.0.1:{base}"], "watcher"), ([f"127.0.0.1:{base + 1}"], "watcher"),
            ([f"127.0.0.1:{base + 2}"], "reconciler"), ([f"127.0.0.1:{base + 3}"], "status")]
        expected = {"watcher": "training_operator_jobs_deleted", "reconciler": "controller_runtime_reconcile",
                    "status": "kto_status_writes"}
        for name, target in running.metrics_targets.items():
            scraped = await scrape(int(target.rsplit(":", 1)[1]))
            assert expected[name.split("-", 1)[0]] in scraped.families, (name, sorted(scraped.families))
        assert running.exits() == []
    with pytest.raises(stack.StackError, match="metrics port base 80"):
        stack.StackSettings(state_dir=tmp_path / "other", metrics_port_base=80)


def test_kto_up_prints_ready_and_stops_on_sigterm(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    process = subprocess.Popen(_kto("up", "--state-dir", str(state), "--partitions", "4"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    watchdog = threading.Timer(90, process.terminate)  # a hung `kto up` must not hang the suite
    watchdog.start()
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith(f"ready kubeconfig={state.resolve() / 'kubeconfig'} bootstrap=127.0.0.1:"), (
            first + (process.stderr.read() if process.poll() is not None and process.stderr else ""))
        assert "kubectl --kubeconfig" in process.stdout.readline()
        children = processes.descendants(process.pid)
        assert len(children) >= 5
        result = _kubectl(state / "kubeconfig", "get", "pytorchjobs")
        assert result.returncode == 0, result.stderr
        shown: list[str] = []
        while "(no jobs yet)\n" not in shown and process.poll() is None:
            shown.append(process.stdout.readline())
        assert "(no jobs yet)\n" in shown, shown
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.terminate()  # `kto up` stops its children on SIGTERM
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0
    assert "stopped" in rest
    deadline = time.monotonic() + 5
    while processes.alive(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes.alive(children) == set()


def test_kto_demo_runs_the_job_to_succeeded_in_well_under_a_minute(tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    result = subprocess.run(_kto("demo", "--state-dir", str(tmp_path / "demo")),
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PyTorchJob pytorch-demo: Succeeded" in result.stdout
    assert "decision     child_created    Pod/pytorch-demo-worker-1" in result.stdout
    assert "all pods created (last child_created)" in result.stdout
    assert "not in the history" not in result.stdout
    assert took < 60


@pytest.mark.parametrize(("api_latency_ms", "faults", "expected"), [
    pytest.param(0, "", "", id="no faults"),
    pytest.param(20, "", "latency=*:20ms", id="latency only"),
    pytest.param(2.5, "error_rate=0.1", "latency=*:2.5ms;error_rate=0.1", id="latency and more faults"),
])
def test_the_sims_get_the_latency_as_a_fault_spec(api_latency_ms: float, faults: str, expected: str) -> None:
    settings = stack.StackSettings(api_latency_ms=api_latency_ms, faults=faults)
    assert settings.fault_spec == expected


def test_a_real_control_plane_takes_latency_and_faults_through_its_proxy() -> None:
    settings = stack.StackSettings(control_plane="kube", api_latency_ms=20, faults="error_rate=0.1")
    assert settings.fault_spec == "latency=*:20ms;error_rate=0.1"  # no longer refused: a proxy adds it


def test_the_upstream_jobset_controller_needs_the_real_control_plane() -> None:
    with pytest.raises(stack.StackError, match="the upstream JobSet controller runs on a real control plane"):
        stack.StackSettings(jobset_controller="upstream")
    with pytest.raises(stack.StackError, match="JobSet controller 'volcano' is not one of kto, upstream"):
        stack.StackSettings(control_plane="kube", jobset_controller="volcano")


@pytest.mark.parametrize(("given", "error"), [
    pytest.param({"kueue": True}, "Kueue runs on a real control plane: add --control-plane kube to --kueue",
                 id="kueue-on-sims"),
    pytest.param({"multikueue": True, "clusters": 3},
                 "Kueue runs on a real control plane: add --control-plane kube to --multikueue",
                 id="multikueue-on-sims"),
    pytest.param({"multikueue": True, "control_plane": "kube"},
                 "MultiKueue needs a manager and at least one worker: --clusters 1 with --multikueue, "
                 "give --clusters 2 or more", id="multikueue-on-one-cluster"),
])
def test_kueue_needs_real_control_planes_and_multikueue_a_worker(given: dict[str, Any], error: str) -> None:
    with pytest.raises(stack.StackError) as raised:
        stack.StackSettings(**given)
    assert str(raised.value) == error


def test_kto_up_with_the_upstream_jobset_controller_leaves_jobsets_to_it(tmp_path: pathlib.Path) -> None:
    """``kto up --control-plane kube --jobset-controller upstream``: the real JobSet controller runs a
    JobSet to Completed, kto's services run with ``KTO_SERVE_JOBSETS=false``, and Ctrl-C stops it too."""
    tiers.require_real_tier()
    state = tmp_path / "state"
    process = subprocess.Popen(_kto("up", "--state-dir", str(state), "--partitions", "4", "--control-plane", "kube",
                                    "--jobset-controller", "upstream"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    watchdog = threading.Timer(300, process.terminate)  # a hung `kto up` must not hang the suite
    watchdog.start()
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("ready kubeconfig="), (
            first + (process.stderr.read() if process.poll() is not None and process.stderr else ""))
        kubeconfig = state / "kubeconfig"
        controller = [pid for pid in processes.descendants(process.pid)
                      if pathlib.Path(f"/proc/{pid}/exe").resolve().name == "jobset-controller"]
        assert len(controller) == 1
        services = [pid for pid in processes.descendants(process.pid)
                    if {b"reconciler", b"watcher"} & set(pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))]
        assert len(services) == 2
        for pid in services:
            assert b"KTO_SERVE_JOBSETS=false" in pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        applied = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
                                 input=DEPENDS_ON, capture_output=True, text=True, timeout=60)
        assert applied.returncode == 0, applied.stderr
        waited = _kubectl(kubeconfig, "wait", "--for=condition=Completed", "--timeout=120s", "jobset/depends")
        assert waited.returncode == 0, waited.stderr
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=90)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0
    assert "stopped" in rest
    assert processes.alive(set(controller)) == set()


def test_settings_refuse_an_empty_pipeline() -> None:
    with pytest.raises(stack.StackError, match="reconcilers must be at least 1"):
        stack.StackSettings(reconcilers=0)


@pytest.mark.parametrize(("seconds", "age"), [
    pytest.param(5, "5s", id="seconds"),
    pytest.param(185, "3m5s", id="minutes and seconds"),
    pytest.param(900, "15m", id="minutes"),
    pytest.param(7500, "2h5m", id="hours"),
])
def test_ages_read_as_kubectl_prints_them(seconds: float, age: str) -> None:
    assert up._age(seconds) == age


def test_the_jobs_table_pads_columns() -> None:
    table = up.format_table([["CLUSTER", "NAME", "STATE"], ["kto-1", "a-long-name", "Running"]])
    assert table.splitlines() == ["CLUSTER   NAME          STATE", "kto-1     a-long-name   Running"]


def test_one_descendant_tree_is_found_from_proc() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in processes.descendants(os.getpid())
    finally:
        child.kill()
        child.wait()
