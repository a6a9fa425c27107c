"""`kto bench --live-jobs`: jobs whose pods keep running, materialised and held on sim/ + Tansu, and measured.

A small run as a user starts it (the stack's real processes: Tansu, a sim, a watcher, a reconciler, a
status worker): every job materialises, every process's memory and CPU is reported, the records'
bytes on the jobs topic are counted. Bad input is refused in one line.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from bench import live
from tests.bench import commands


def test_a_small_live_run_materialises_every_job_and_measures_every_process(tmp_path: pathlib.Path) -> None:
    result = commands.kto("bench", "--live-jobs", "20", "--replicas", "2", "--hold", "1", "--timeout", "60",
                          "--state-dir", str(tmp_path / "bench"))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    assert (figures["live_jobs"], figures["live_pods"], figures["objects"]) == (20, 40, 100)
    assert 0 < figures["first_submit_to_all_pods_created_s"] <= 60
    assert 0 < figures["first_submit_to_all_running_s"] <= 60
    assert set(figures["rss_mb"]) == {"broker", "sim-kto-1", "watcher-kto-1", "reconciler-1", "status-1"}
    assert all(mb > 0 for mb in figures["rss_mb"].values()), figures["rss_mb"]
    assert all(ms > 0 for ms in figures["cpu_ms_per_job"].values()), figures["cpu_ms_per_job"]
    assert figures["topic"]["records"] > 0 and figures["topic"]["bytes_per_job"] > 0
    assert figures["topic"]["disk_bytes"] is None, "Tansu keeps its log in memory"
    # Each job's 2 pods and 2 Services were created by kto, nothing more deleted: they stay live.
    writes = figures["costs"]["api_requests_per_job"]["kto-1"]["by_kind"]
    assert writes["create pods"] == writes["create services"] == 2, writes
    assert "delete pods" not in writes, writes
    assert "20 live jobs, 40 pods" in result.stderr, "the table is printed for a reader"


def test_a_live_run_that_times_out_says_how_far_it_got_and_what_each_process_holds(tmp_path: pathlib.Path) -> None:
    result = commands.kto("bench", "--live-jobs", "50", "--replicas", "2", "--timeout", "0.5",
                          "--state-dir", str(tmp_path / "bench"))
    assert result.returncode == 1, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "of 50 jobs materialised within 0.5s" in last, last
    assert all(f"{name} " in last.partition("RSS MB ")[2]
               for name in ("broker", "sim-kto-1", "watcher-kto-1", "reconciler-1", "status-1")), last
    assert "CPU s since the first POST" in last, last


@pytest.mark.parametrize(("args", "error"), [
    pytest.param(["--live-jobs", "0"], "--live-jobs must be at least 1", id="no jobs"),
    pytest.param(["--live-jobs", "5", "--jobs", "3", "--rate", "0"],
                 "--live-jobs runs a load of its own: not with --jobs, --rate", id="with the rate run's flags"),
    pytest.param(["--live-jobs", "5", "--replicas", "0"], "--replicas must be at least 1", id="no replicas"),
])
def test_bad_live_runs_are_refused_in_one_line(args: list[str], error: str) -> None:
    result = commands.kto("bench", *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"kto bench: error: {error}"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("jobs", "replicas", "clusters", "nodes"), [
    pytest.param(20, 2, 1, 8, id="few pods: the usual 8 nodes"),
    pytest.param(1000, 8, 1, 80, id="8,000 pods on one cluster"),
    pytest.param(10000, 8, 1, 800, id="80,000 pods on one cluster"),
    pytest.param(10000, 8, 3, 267, id="spread over three clusters"),
])
def test_a_live_run_gets_nodes_enough_for_every_pod(jobs: int, replicas: int, clusters: int, nodes: int) -> None:
    assert live.nodes_for(live.LiveSettings(jobs=jobs, replicas=replicas), clusters) == nodes
