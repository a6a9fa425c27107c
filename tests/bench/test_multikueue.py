"""`kto bench --multikueue`: jobs/s through MultiKueue, the workers served by kto or by Kubeflow's
training-operator, side by side (bench/multikueue.py; the measured figures are in
docs/benchmarks.md, "MultiKueue").

At a tiny size on the real tier: every job submitted to the manager is Succeeded there, and the
figures say where each ran. Asked for where it cannot run, it says so in one line.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.bench.test_upstream import kto
from tests.fixtures import tiers


@pytest.mark.parametrize(("operator", "clusters", "named"), [
    pytest.param("kto", "3", "kto", id="kto-two-workers"),
    pytest.param("training-operator", "2", "kubeflow/training-operator v1.8.1", id="training-operator-one-worker"),
])
def test_jobs_submitted_to_the_manager_are_succeeded_there_having_run_on_the_workers(
    operator: str, clusters: str, named: str, tmp_path: pathlib.Path,
) -> None:
    tiers.require_real_tier()
    result = kto("bench", "--multikueue", "--operator", operator, "--control-plane", "kube", "--clusters", clusters,
                 "--jobs", "4", "--replicas", "2", "--nodes", "2", "--timeout", "300",
                 "--state-dir", str(tmp_path / "bench"))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    assert figures["operator"] == named
    assert figures["jobs_completed"] == 4
    workers = [f"kto-{i}" for i in range(2, int(clusters) + 1)]
    assert sum(figures["by_worker"].values()) == 4 and set(figures["by_worker"]) <= set(workers)
    assert figures["jobs_per_s"] > 0
    assert figures["submitted_to_succeeded_ms"]["p50"] is not None
    assert figures["parameters"]["workers"] == len(workers)


@pytest.mark.parametrize(("args", "said"), [
    pytest.param(["--clusters", "3"], "Kueue runs on a real control plane", id="without-kube"),
    pytest.param(["--control-plane", "kube"], "MultiKueue needs a manager and at least one worker", id="one-cluster"),
    pytest.param(["--control-plane", "kube", "--clusters", "3", "--rate", "5"],
                 "--multikueue submits every job at once and times them to Succeeded: not with --rate",
                 id="with-a-rate"),
    pytest.param(["--control-plane", "kube", "--clusters", "3", "--operator", "training-operator"],
                 "--multikueue --operator training-operator takes one worker, --clusters 2",
                 id="two-training-operators"),
])
def test_multikueue_asked_for_where_it_cannot_run_says_why_in_one_line(args: list[str], said: str) -> None:
    result = kto("bench", "--multikueue", "--jobs", "1", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("kto bench: error: ") and said in lines[-1], lines
    assert "Traceback" not in result.stderr
