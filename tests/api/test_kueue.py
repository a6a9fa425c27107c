"""Kueue's API as kto reads it (shared/api/kueue.py): the Workload name Kueue derives from a job (as
Kueue's own tests expect it), the one both copies of a MultiKueue job name, and the steps of a
Workload's history from its observations, on Workloads as Kueue v0.17.0 writes them."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import kueue
from tests.api import kueue_objects as real

LONG = ("marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-social-"
        "media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-senior-"
        "architect-validation-checked-approved-by-legal-and-ops-dept")


@pytest.mark.parametrize(("kind", "group", "name", "uid", "expected"), [
    pytest.param("Job", "batch", "name", "uid", "job-name-ef3a1", id="kueue's own example"),
    pytest.param("Job", "batch", LONG, "uid", f"job-{LONG[:243]}-218b8", id="a long name cut as kueue cuts it"),
    pytest.param("PyTorchJob", "kubeflow.org", "mnist", real.JOB_UID, real.WORKLOAD, id="a pytorchjob's"),
])
def test_the_workload_name_is_the_one_kueue_derives(kind: str, group: str, name: str, uid: str,
                                                    expected: str) -> None:
    assert kueue.workload_name(kind, group, name, uid) == expected


@pytest.mark.parametrize(("job", "expected"), [
    pytest.param(real.MANAGER_JOB, real.WORKLOAD, id="the manager's job: kueue's name for its own"),
    pytest.param(real.WORKER_COPY, real.WORKLOAD, id="the worker's copy: the prebuilt workload it names"),
    pytest.param({**real.MANAGER_JOB, "metadata": {**real.MANAGER_JOB["metadata"], "labels": {}}}, "",
                 id="a job in no queue: none"),
    pytest.param(None, "", id="no job: none"),
])
def test_both_copies_of_a_multikueue_job_name_one_workload(job: Any, expected: str) -> None:
    assert kueue.workload_of(job) == expected


def test_a_workload_is_read_as_kueue_wrote_it() -> None:
    found = kueue.Workload.of(real.manager_run()[2])
    assert (found.name, found.queue, found.cluster_queue, found.cluster_name) == (
        real.WORKLOAD, "user-queue", "cluster-queue", "worker1")
    assert found.flavor_text() == "master: cpu=default-flavor; worker: cpu=default-flavor"
    assert found.holds(kueue.ADMITTED) and not found.holds(kueue.FINISHED)
    assert found.checks == (("multikueue", "Ready", 'The workload got reservation on "worker1"',
                             "2026-11-27T17:00:05Z"),)


def steps(*seen: tuple[str, str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    observed = [kueue.Seen(f"2026-11-27T17:02:{i:02d}.500Z", cluster, event, obj)
                for i, (cluster, event, obj) in enumerate(seen)]
    return [(m.cluster, m.event, m.detail) for m in kueue.moments(observed)]


def test_a_manager_workload_is_queued_reserved_dispatched_admitted_and_finished() -> None:
    run = real.manager_run()
    assert steps(*(("manager", "MODIFIED", w) for w in run)) == [
        ("manager", "queued", "in LocalQueue user-queue: Pending: couldn't assign flavors to pod set worker: "
                              "insufficient unused quota for cpu in flavor default-flavor, 1 more needed"),
        ("manager", "quota-reserved", "in ClusterQueue cluster-queue"),
        ("manager", "check", "admission check multikueue Pending"),
        ("manager", "check", 'admission check multikueue Ready: The workload got reservation on "worker1"'),
        ("manager", "dispatched", "to worker cluster worker1 (MultiKueue)"),
        ("manager", "admitted", "by ClusterQueue cluster-queue with flavours master: cpu=default-flavor; "
                                "worker: cpu=default-flavor"),
        ("manager", "finished", "Succeeded: PyTorchJob team-a/mnist successfully completed."),
    ]


def test_a_workload_first_seen_admitted_says_every_step_its_status_shows_at_their_times() -> None:
    worker = real.worker_run()
    found = kueue.moments([kueue.Seen("2026-11-27T17:00:09Z", "worker-1", "MODIFIED", worker[0])])
    assert [(m.time, m.event) for m in found] == [
        ("2026-11-27T17:00:04Z", "quota-reserved"), ("2026-11-27T17:00:04Z", "admitted")]


def test_a_preempted_workload_is_evicted_requeued_and_re_admitted() -> None:
    admitted = real.workload("100", [real.RESERVED, real.ADMITTED], admitted=True)
    preempted = real.workload("120", real.PREEMPTED_CONDITIONS)
    again = real.workload("140", real.READMITTED_CONDITIONS, admitted=True)
    events = [event for _, event, _ in steps(("c", "ADDED", admitted), ("c", "MODIFIED", preempted),
                                             ("c", "MODIFIED", again))]
    assert events == ["quota-reserved", "admitted", "queued", "evicted", "preempted", "requeued",
                      "quota-reserved", "re-admitted"]
    evicted = steps(("c", "MODIFIED", preempted))
    assert ("c", "evicted", f"Preempted: {real.PREEMPTION}") in evicted


def test_an_unchanged_workload_says_nothing_more_and_its_deletion_is_a_step() -> None:
    run = real.manager_run()
    found = steps(("m", "ADDED", run[-1]), ("m", "RESYNCED", run[-1]), ("m", "DELETED", run[-1]))
    assert [event for _, event, _ in found].count("finished") == 1 and found[-1][1] == "deleted"


def test_the_steps_of_two_clusters_are_one_history_in_time_order() -> None:
    seen = [kueue.Seen(f"2026-11-27T17:00:{s:02d}Z", "manager", "MODIFIED", w)
            for s, w in zip((1, 3, 5, 70), real.manager_run(), strict=True)]
    seen[3:3] = [kueue.Seen("2026-11-27T17:00:09Z", "worker-1", "MODIFIED", real.worker_run()[0]),
                 kueue.Seen("2026-11-27T17:01:09Z", "worker-1", "MODIFIED", real.worker_run()[1])]
    found = kueue.moments(seen)
    assert [(m.cluster, m.event) for m in found if m.event in ("dispatched", "admitted", "finished")] == [
        ("worker-1", "admitted"), ("manager", "dispatched"), ("manager", "admitted"),
        ("worker-1", "finished"), ("manager", "finished")]
    assert [m.time for m in found] == sorted([m.time for m in found])
