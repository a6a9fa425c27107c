"""`kto bench --scale-out` and `--concurrency-sweep`: the same load on a fresh sim/ + Tansu stack per value.

Small sweeps as a user starts them (the stack's real processes, a fresh one per run): every run's figures
and its materialised jobs/s over the first run's. Bad values are refused in one line naming the option.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from bench import pipeline, scaleout
from tests.bench import commands

TINY = ("--jobs", "4", "--replicas", "2", "--pod-duration", "0.2s", "--ceiling-creates", "50", "--api-latency", "5",
        "--timeout", "60")
"""A load of a few seconds: four 2-pod jobs, all at once, 5 ms a request."""


def sweep(tmp_path: pathlib.Path, *args: str) -> tuple[dict[str, Any], str]:
    result = commands.kto("bench", *args, *TINY, "--state-dir", str(tmp_path / "bench"))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


def test_a_scale_out_runs_each_count_of_workers_on_a_fresh_stack_and_gives_the_ratio(tmp_path: pathlib.Path) -> None:
    figures, stderr = sweep(tmp_path, "--scale-out", "1,2")
    assert (figures["lever"], figures["option"], figures["values"]) == ("workers", "--scale-out", [1, 2])
    runs = figures["runs"]
    assert [(r["reconcilers"], r["status_workers"], r["concurrency"]) for r in runs] == [(1, 1, 32), (2, 2, 32)]
    assert [r["keys_at_once"] for r in runs] == [16, 32]
    assert all(r["jobs_completed"] == 4 and r["materialized_jobs_per_s"] > 0 for r in runs), runs
    assert runs[0]["ratio_vs_first"] == 1.0
    assert figures["ratio_last_vs_first"] == runs[1]["ratio_vs_first"] == round(
        runs[1]["materialized_jobs_per_s"] / runs[0]["materialized_jobs_per_s"], 2)
    assert set(runs[1]["cpu_ms_per_job"]) >= {"reconciler-1", "reconciler-2", "status-1", "status-2"}
    assert all(len(r["load_average"]) == 3 for r in runs)
    assert (figures["parameters"]["rate"], figures["parameters"]["api_latency_ms"]) == (0.0, 5.0), \
        "a sweep submits all at once unless told a rate"
    assert "--scale-out 1,2: materialised jobs/s" in stderr, "the table is printed for a reader"


def test_a_concurrency_sweep_runs_one_reconciler_at_each_concurrency(tmp_path: pathlib.Path) -> None:
    figures, _ = sweep(tmp_path, "--concurrency-sweep", "1,4")
    runs = figures["runs"]
    assert [(r["reconcilers"], r["status_workers"], r["concurrency"]) for r in runs] == [(1, 1, 1), (1, 1, 4)]
    assert [r["keys_at_once"] for r in runs] == [1, 2], "one cluster's keys hold half a reconciler's slots"
    assert runs[0]["ratio_vs_first"] == 1.0 and runs[1]["ratio_vs_first"] > 0


@pytest.mark.parametrize(("args", "error"), [
    pytest.param(["--scale-out", "0"], "--scale-out takes counts of at least 1 separated by commas, such as 1,2,4: "
                 "not '0'", id="no workers"),
    pytest.param(["--scale-out", "1,-2"], "--scale-out takes counts of at least 1 separated by commas, such as "
                 "1,2,4: not '1,-2'", id="a negative count"),
    pytest.param(["--concurrency-sweep", "8 32"], "--concurrency-sweep takes counts of at least 1 separated by "
                 "commas, such as 1,2,4: not '8 32'", id="not a list"),
    pytest.param(["--scale-out", "1,2", "--reconcilers", "3"],
                 "--scale-out runs a sweep of its own: not with --reconcilers", id="with the count it sets"),
    pytest.param(["--concurrency-sweep", "1,2", "--reconciler-concurrency", "4"],
                 "--concurrency-sweep runs a sweep of its own: not with --reconciler-concurrency",
                 id="with the concurrency it sets"),
    pytest.param(["--scale-out", "1,2", "--concurrency-sweep", "4"],
                 "--scale-out runs a sweep of its own: not with --concurrency-sweep", id="both levers at once"),
    pytest.param(["--scale-out", "1,2", "--freeze", "5"], "--scale-out runs a sweep of its own: not with --freeze",
                 id="with a freeze"),
    pytest.param(["--live-jobs", "5", "--scale-out", "1,2"], "--live-jobs runs a load of its own: not with "
                 "--scale-out", id="with live jobs"),
])
def test_bad_sweeps_are_refused_in_one_line_naming_the_option(args: list[str], error: str) -> None:
    result = commands.kto("bench", *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"kto bench: error: {error}"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("lever", "text", "values"), [
    pytest.param("workers", "1,2,4", (1, 2, 4), id="counts"),
    pytest.param("concurrency", " 8, 32 ,128", (8, 32, 128), id="spaces around the commas"),
    pytest.param("workers", "3", (3,), id="one count"),
])
def test_a_sweep_is_read_from_counts_separated_by_commas(lever: str, text: str, values: tuple[int, ...]) -> None:
    assert scaleout.parse(lever, text) == scaleout.Sweep(lever, values)


@pytest.mark.parametrize("text", [
    pytest.param("", id="empty"), pytest.param("1,,2", id="an empty count"), pytest.param("1.5", id="a fraction"),
    pytest.param("0,1", id="zero"),
])
def test_a_sweep_of_anything_else_is_refused(text: str) -> None:
    with pytest.raises(pipeline.BenchError, match="^--scale-out takes counts of at least 1"):
        scaleout.parse("workers", text)


@pytest.mark.parametrize(("lever", "value", "shape"), [
    pytest.param("workers", 4, scaleout.Shape(4, 4, 2), id="workers: reconcilers and status workers"),
    pytest.param("concurrency", 16, scaleout.Shape(1, 1, 16), id="concurrency: each reconciler's"),
])
def test_each_value_of_a_sweep_sets_its_lever_only(lever: str, value: int, shape: scaleout.Shape) -> None:
    assert scaleout.Sweep(lever, (value,)).shape(value, scaleout.Shape(1, 1, 2)) == shape


@pytest.mark.parametrize(("shape", "keys"), [
    pytest.param(scaleout.Shape(1, 1, 1), 1, id="one slot"),
    pytest.param(scaleout.Shape(1, 1, 2), 1, id="half of two"),
    pytest.param(scaleout.Shape(4, 4, 32), 64, id="four reconcilers, half of 32 each"),
])
def test_keys_at_once_are_the_reconcilers_times_one_clusters_share_of_their_slots(
    shape: scaleout.Shape, keys: int,
) -> None:
    assert shape.keys_at_once == keys
