"""The pipeline benchmark's arithmetic (bench/pipeline.py), without a cluster."""

from __future__ import annotations

import collections

import pytest

from bench import pipeline


@pytest.mark.parametrize(("values", "q", "expected"), [
    pytest.param([], 50, None, id="no values"),
    pytest.param([3.0], 99, 3.0, id="one value"),
    pytest.param([float(v) for v in range(1, 101)], 50, 50.0, id="median of 1..100"),
    pytest.param([float(v) for v in range(1, 101)], 99, 99.0, id="p99 of 1..100"),
    pytest.param([1.0, 2.0, 3.0, 100.0], 95, 100.0, id="p95 of four is the largest"),
])
def test_percentiles_use_the_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert pipeline.percentile(values, q) == expected


def test_a_job_has_one_master_and_replicas_minus_one_workers() -> None:
    job = pipeline.job_manifest("bench-00001", "default", 8, "1s")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 7)
    assert specs["Worker"]["template"]["metadata"]["annotations"] == {"sim.kto.dev/duration": "1s"}


def test_transitions_are_matched_to_the_first_status_reflecting_them() -> None:
    job = pipeline._Job("kto-1", "j", submitted=10.0, pods_seen={"j-master-0": 10.05, "j-worker-0": 10.1})
    job.transitions = [(11.0, "master", "Running", 1), (11.2, "worker", "Running", 1),
                       (12.0, "master", "Succeeded", 1)]
    job.statuses = [
        (11.1, {"Master": {"active": 1}}),
        (11.5, {"Master": {"active": 1}, "Worker": {"active": 1}}),
        (12.3, {"Master": {"succeeded": 1}, "Worker": {"active": 1}}),
    ]
    job.succeeded = 12.3
    settings = pipeline.PipelineSettings(jobs=1, replicas=2)
    result = pipeline.Result(settings, 1, 10.0, 12.3, {("kto-1", "j"): job},
                             collections.Counter({"create pods": 2, "create services": 2, "update pytorchjobs/status": 3}),
                             lease_writes=4)
    figures = result.figures()
    assert figures["created_to_all_pods_created_ms"]["p99"] == 100.0
    assert figures["pod_phase_to_condition_written_ms"]["p99"] == 300.0
    assert figures["pod_phase_to_condition_written_ms"]["transitions"] == 3
    assert figures["api_writes_per_job"] == 7
    assert figures["api_writes_goal_per_job"] == 7
    assert figures["lease_writes"] == 4
    assert figures["jobs_completed"] == 1
