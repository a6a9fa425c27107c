"""`kto chaos` as a user runs it, short and seeded, on each tier: every invariant holds, forged records included.

And the planning it rests on, without a cluster: the same seed gives the same jobs and faults, every
case and fault kind is in the mix.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

from bench import chaos
from tests.fixtures import tiers

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_same_seed_gives_the_same_jobs_and_faults() -> None:
    def plan(seed: int) -> tuple[list[str], list[chaos.Fault]]:
        rng = random.Random(seed)
        jobs = chaos.plan_jobs(rng, 60)
        faults = chaos.plan_faults(rng, chaos.ChaosSettings(jobs=60, seed=seed), 2, 2, ["watcher-kto-1"])
        return [j.name for j in jobs], faults

    assert plan(7) == plan(7)
    assert plan(7) != plan(8)


def test_the_load_holds_every_case_and_the_schedule_every_fault() -> None:
    rng = random.Random(1)
    jobs = chaos.plan_jobs(rng, 100)
    cases = {j.case.split("-")[0] if j.case.startswith("hostile") else j.case for j in jobs}
    assert cases == {"succeed", "restart-within", "restart-over", "restart-master", "permanent", "onfailure",
                     "deleted", "clean-all",
                     "clean-running", "ttl", "deadline", "suspend", "hostile"}
    assert {j.kind for j in jobs} == {"PyTorchJob", "TFJob", "XGBoostJob", "MPIJob", "PaddleJob", "JAXJob"}
    sim_faults = {f.what for f in chaos.plan_faults(rng, chaos.ChaosSettings(), 2, 2, ["watcher-kto-1"])}
    assert sim_faults == {"kill", "broker-restart", "garbage", "forge", "api-faults", "api-faults-off"}
    real = {f.what for f in chaos.plan_faults(rng, chaos.ChaosSettings(real_tier=True), 2, 2, ["watcher-kto-1"])}
    assert real == {"kill", "broker-restart", "garbage", "forge", "apiserver-kill", "api-faults", "api-faults-off"}


def created(name: str, times: int) -> list[dict[str, object]]:
    return [{"verb": "create", "resource": "pods", "name": name, "code": 201}] * times


def test_a_pod_name_created_twice_is_a_duplicate_though_the_job_has_no_more_creates_than_replicas() -> None:
    job = chaos.PlannedJob("JAXJob", "j", "deleted", {}, "deleted", 2)
    violations: dict[str, list[str]] = {"duplicate_pods": []}
    chaos._check_duplicates([job], created("j-worker-0", 2), violations)
    assert len(violations["duplicate_pods"]) == 1 and "j-worker-0 created 2 times" in violations["duplicate_pods"][0]


def test_restarts_and_a_resume_explain_a_name_made_again() -> None:
    restarting = chaos.PlannedJob("PyTorchJob", "r", "restart-master", {}, "Succeeded", 2)
    resumed = chaos.PlannedJob("JAXJob", "s", "suspend", {}, "Succeeded", 1, resume_after=2.0)
    violations: dict[str, list[str]] = {"duplicate_pods": []}
    chaos._check_duplicates([restarting, resumed], created("r-master-0", 3) + created("s-worker-0", 2), violations)
    assert violations["duplicate_pods"] == []


@pytest.mark.parametrize(("counted", "ok"), [
    pytest.param("2", True, id="each-failure-once"),
    pytest.param("3", False, id="a-failure-counted-twice"),
    pytest.param(None, False, id="never-counted"),
])
def test_the_restart_count_a_job_ends_with_is_the_one_its_failures_make(counted: str | None, ok: bool) -> None:
    job = chaos.PlannedJob("PyTorchJob", "m", "restart-master", {}, "Succeeded", 2, restarts=(2, 2))
    job.final, job.counted = "Succeeded", counted
    violations: dict[str, list[str]] = {"restart_counts": []}
    chaos._check_restart_counts([job], violations)
    assert (violations["restart_counts"] == []) is ok


@pytest.mark.parametrize("tier", [pytest.param(("sim", "tansu"), id="sim-tansu"),
                                  pytest.param(("kube", "kafka"), id="kube-kafka")])
def test_a_short_seeded_chaos_run_keeps_every_invariant(tier: tuple[str, str], tmp_path: pathlib.Path) -> None:
    control_plane, broker = tier
    if control_plane == "kube":
        tiers.require_real_tier()
    # A 20 s fault window still holds every fault of the schedule (reconciler kills, the status worker's
    # and the watcher's, the broker restart, both garbage and forge rounds, the API-fault window, kube's
    # API server kill); the faults are injected one after another, so a longer one mostly waits.
    result = subprocess.run(
        [sys.executable, "-m", "kto", "chaos", "--control-plane", control_plane, "--broker", broker,
         "--jobs", "100", "--seed", "11", "--fault-seconds", "20", "--state-dir", str(tmp_path / "chaos")],
        capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=900,
        check=False,
    )
    assert result.stdout.strip(), result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["invariants"] == {name: 0 for name in summary["invariants"]}, "\n".join(summary["violations"])
    assert result.returncode == 0
    assert summary["injected"]["kill"] >= 3 and summary["injected"]["broker-restart"] == 1
    assert summary["injected"]["malformed_records"] == 12
    assert summary["injected"]["forged_records"] > 0 and "forged_acts" in summary["invariants"]
    assert summary["injected"]["api_faults_answered"] > 0, "API faults on each tier (kube: through the proxy)"
    assert summary["convergence_s"] is not None and summary["convergence_s"] <= chaos.CONVERGENCE_GOAL_S
