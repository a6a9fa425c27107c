"""`kto bench --operator training-operator`: the same benchmark run by Kubeflow's own operator, side by side.

On the real control plane, the training-operator built from the Go module proxy runs the bench's
PyTorchJobs to Succeeded, and its figures come out in the shape of kto's (docs/benchmarks.md has
the measured comparison). Asked for where it cannot run, it says so in one line.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from tests.fixtures import tiers

ROOT = pathlib.Path(__file__).resolve().parents[2]


def kto(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kto", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=1200, check=False)


def test_the_training_operator_runs_the_bench_jobs_on_the_real_control_plane(tmp_path: pathlib.Path) -> None:
    tiers.require_real_tier()
    result = kto("bench", "--operator", "training-operator", "--control-plane", "kube", "--jobs", "6",
                 "--rate", "6", "--replicas", "3", "--state-dir", str(tmp_path / "bench"))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    assert figures["operator"].startswith("kubeflow/training-operator v1.8.1")
    assert figures["jobs_completed"] == 6
    # Its children, as it makes them: a pod and a Service per replica, and its status writes.
    writes = figures["api_writes_by_kind"]
    assert writes["create pods"] == writes["create services"] == 18, writes
    assert writes.get("update pytorchjobs.kubeflow.org/status", 0) >= 6, writes
    assert figures["cpu_ms_per_job"]["training-operator"] > 0
    assert figures["created_to_all_pods_created_ms"]["p50"] is not None


def test_the_training_operator_needs_the_real_control_plane() -> None:
    result = kto("bench", "--operator", "training-operator", "--jobs", "1")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == ("kto bench: error: the training-operator runs on the real control plane, one cluster: "
                         "--control-plane kube --clusters 1"), lines
    assert "Traceback" not in result.stderr
