"""`kto sim` starts fast, prints one ready line, serves kubectl, and stops cleanly on SIGTERM."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import time

from tests.fixtures import sim as sim_fixtures


def test_kto_sim_serves_until_sigterm(tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kto", "sim", "--port", "0", "--nodes", "2", "--gpus-per-node", "4",
         "--kubeconfig", str(kubeconfig), "--faults", "latency=get:1ms"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        # How fast it starts is measured by the benchmarks; here only that it does (on a loaded CI machine).
        assert time.monotonic() - started < 30.0, "kto sim printed no ready line in 30 s"
        word, url, path = line.split()
        assert word == "ready" and url.startswith("http://127.0.0.1:") and path == str(kubeconfig)
        nodes = subprocess.run(
            [str(sim_fixtures.KUBECTL), f"--kubeconfig={kubeconfig}", f"--cache-dir={tmp_path / 'cache'}",
             "get", "nodes", "-o", "jsonpath={.items[*].status.capacity.nvidia\\.com/gpu}"],
            capture_output=True, text=True, timeout=30, check=True,
        )
        assert nodes.stdout.split() == ["4", "4"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        rest = proc.stdout.read() if proc.stdout else ""
        assert rest == "", "exactly one line on stdout"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kto_sim_rejects_a_bad_fault_spec() -> None:
    result = subprocess.run([sys.executable, "-m", "kto", "sim", "--faults", "error_rate=7"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "error_rate=7" in result.stderr
