"""Provisioning (spec B.8) when worker pods come and go faster than passes see them: a TrainingJob
waits until every worker has come up, not until all of them are Running at one instant, so
workers that ended before a pass saw them all Running do not hold the job in Created for ever."""

from __future__ import annotations

import pytest

from shared.core.elastic import steps

from tests.core.elastic.world import World, training_job

JOB = "elastic-training"
W0, W1, W2 = (f"{JOB}-worker-{i}" for i in range(3))
LAUNCHER = f"{JOB}-launcher"


@pytest.mark.parametrize(("restart_policy", "phases", "ready"), [
    pytest.param("Never", {W0: "Running", W1: "Running"}, True, id="all-running"),
    pytest.param("Never", {W0: "Succeeded", W1: "Running"}, True, id="one-ended-before-the-other-came-up"),
    pytest.param("Never", {W0: "Succeeded", W1: "Succeeded"}, True, id="both-ended-before-a-pass-saw-them"),
    pytest.param("Never", {W0: "Failed", W1: "Running"}, True, id="one-failed-and-is-not-replaced"),
    pytest.param("Never", {W0: "Succeeded", W1: "Pending"}, False, id="one-still-pending"),
    pytest.param("Never", {W0: "Pending", W1: "Pending"}, False, id="both-pending"),
    pytest.param("OnFailure", {W0: "Failed", W1: "Running"}, False, id="a-failed-one-waits-for-its-successor"),
])
def test_the_workers_are_ready_once_none_is_still_to_come_up(
    restart_policy: str, phases: dict[str, str], ready: bool,
) -> None:
    world = World(training_job(worker={"restartPolicy": restart_policy}))
    world.decide()
    for name, phase in phases.items():
        world.set_phase(name, phase)
    world.decide()
    assert ("WorkersReady" in world.conditions()) is ready, world.conditions()


def test_a_job_whose_workers_ended_before_a_pass_saw_them_running_starts_its_launcher_and_succeeds() -> None:
    """The CI run's stall: pods that live a second, a pass that saw one Running, the next one
    both Succeeded. Upstream's rule (all Running at once) would wait for ever."""
    world = World(training_job())
    world.decide()
    world.set_phase(W1, "Running")
    world.decide()
    assert "WorkersReady" not in world.conditions()
    world.set_phase(W0, "Succeeded")
    world.set_phase(W1, "Succeeded")
    world.decide()
    assert world.conditions()[-1] == "WorkersReady" and world.status.current_workers == []
    assert [s.subject for s in world.steps if s.kind == steps.STEP_WORKER_REMOVED] == [f"{W0}, {W1}"]
    world.decide()
    assert world.conditions()[-1] == "LauncherCreated" and ("Pod", LAUNCHER) in world.children
    assert world.children[("ConfigMap", f"{JOB}-config")]["data"]["hostfile"] == ""
    world.set_phase(LAUNCHER, "Succeeded")
    world.decide()
    assert world.status.phase == "Succeeded"


def test_a_worker_that_ended_before_the_others_came_up_leaves_the_launcher_the_running_ones() -> None:
    world = World(training_job(replicas=3, worker={"minReplicas": 3}))
    world.decide()
    world.set_phase(W0, "Running")
    world.set_phase(W1, "Succeeded")
    world.set_phase(W2, "Running")
    world.decide()
    assert world.status.current_workers == [W0, W2]
    assert any("2 workers Running, fewer than minReplicas 3" in e for e in world.events), world.events
    world.decide()
    assert world.children[("ConfigMap", f"{JOB}-config")]["data"]["hostfile"] == f"{W0}:1\n{W2}:1\n"
