"""Scaling a running TrainingJob (spec B.10–B.14, and kto's own rules on top)."""

from __future__ import annotations

import pytest

from shared.core.elastic import steps
from tests.core.elastic.world import T0, World, scaler, training_job

JOB = "elastic-training"
W = [f"{JOB}-worker-{i}" for i in range(8)]
LAUNCHER = f"{JOB}-launcher"


def hostfile(*names: str) -> str:
    return "".join(f"{name}:1\n" for name in names)


def test_the_hostfile_at_each_step_of_a_scale_from_two_to_four_to_three(world: World) -> None:
    world.start()
    assert world.children[("ConfigMap", f"{JOB}-config")]["data"]["hostfile"] == hostfile(*W[:2])
    world.add(scaler("ScaleOut", "out", toAdd={"count": 2}))
    world.settle()
    assert world.hostfiles() == [], "no rewrite before the added workers run"
    world.run_all()
    world.settle()
    assert world.hostfiles() == [hostfile(*W[:4])]
    world.add(scaler("ScaleIn", "in", created=T0.replace(hour=1), toDelete={"count": 1}))
    world.settle()
    assert world.hostfiles() == [hostfile(*W[:4]), hostfile(*W[:3])]
    assert world.log.index("delete Pod/" + W[3]) > world.log.index("exec hostfile", 1), "rewritten before removal"
    assert world.status.target_workers == W[:3] and world.status.current_workers == W[:3]
    assert world.names("Pod") == [LAUNCHER, *W[:3]]
    world.settle()
    assert len(world.hostfiles()) == 2, "a settled job rewrites nothing"


def test_every_scale_step_is_in_the_decision_record(world: World) -> None:
    world.start()
    world.steps.clear()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 1}))
    world.settle()
    world.run_all()
    world.settle()
    assert [str(s) for s in world.steps if s.subject in ("ScaleOut:default/out", W[2], LAUNCHER)] == [
        "scaler-bound ScaleOut:default/out: bound to TrainingJob default/elastic-training",
        "scaler-phase ScaleOut:default/out: Scaling",
        f"scaler-targets ScaleOut:default/out: adds {W[2]}",
        f"worker-added {W[2]}: added by ScaleOut:default/out",
        "waiting ScaleOut:default/out: 0 of 1 added workers Running",
        # In the pass that creates the worker: the launcher may exec into it before it runs.
        f"launcher-role-follows {LAUNCHER}: pods/exec into {', '.join(W[:3])}",
        "waiting ScaleOut:default/out: 0 of 1 added workers Running",
        f"hostfile-rewritten {LAUNCHER}: for ScaleOut:default/out: {', '.join(W[:3])}",
        "scaler-phase ScaleOut:default/out: ScaleSucceeded: ScaleOut:default/out has Succeeded",
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"count": 2}, ".spec.toDelete would leave 1 workers, fewer than "
                     "spec.etReplicaSpecs.worker.minReplicas 2", id="a-count-below-minReplicas"),
        pytest.param({"podNames": [W[0], W[2]]}, ".spec.toDelete would leave 1 workers, fewer than "
                     "spec.etReplicaSpecs.worker.minReplicas 2", id="names-below-minReplicas"),
    ],
)
def test_a_scale_in_below_min_replicas_is_refused_with_a_clear_message(
    world: World, spec: dict[str, object], message: str
) -> None:
    world.job = training_job(replicas=3, worker={"minReplicas": 2})
    world.start()
    world.add(scaler("ScaleIn", "in", toDelete=spec))
    world.settle()
    status = world.get("in").status
    assert status is not None and status.phase == "ScaleFailed"
    assert status.conditions and status.conditions[-1].message == (
        f"ScaleIn:default/in get to delete workers name failed, error: {message}")
    assert world.conditions()[-1] == "ScaleFailed" and world.status.phase == "Running"
    assert world.names("Pod") == [LAUNCHER, *W[:3]] and world.hostfiles() == []


def test_a_scale_out_above_max_replicas_is_refused_with_a_clear_message(world: World) -> None:
    world.job = training_job(worker={"maxReplicas": 3})
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 2}))
    world.settle()
    status = world.get("out").status
    assert status is not None and status.phase == "ScaleFailed"
    assert status.conditions and status.conditions[-1].message == (
        ".spec.toAdd.count 2 would make 4 workers, more than spec.etReplicaSpecs.worker.maxReplicas 3")
    assert world.names("Pod") == [LAUNCHER, *W[:2]]


def test_two_scalers_of_one_job_run_one_at_a_time_in_creation_order(world: World) -> None:
    world.start()
    world.add(scaler("ScaleIn", "second", created=T0.replace(hour=2), toDelete={"count": 1}),
              scaler("ScaleOut", "first", created=T0.replace(hour=1), toAdd={"count": 2}))
    world.decide()
    world.decide()
    assert world.status.current_scaler == "ScaleOut:default/first"
    selected = [s for s in world.steps if s.kind == steps.STEP_SCALER_PHASE]
    assert str(selected[-1]) == "scaler-phase ScaleOut:default/first: Scaling; queued after it: ScaleIn:default/second"
    world.settle()
    second = world.get("second").status
    assert second is not None and second.phase is None, "the second waits while the first runs"
    world.run_all()
    world.settle()
    phases = [(s.subject, s.detail.split(";")[0].split(":")[0]) for s in world.steps if s.kind == steps.STEP_SCALER_PHASE]
    assert phases == [("ScaleOut:default/first", "Scaling"), ("ScaleOut:default/first", "ScaleSucceeded"),
                      ("ScaleIn:default/second", "Scaling"), ("ScaleIn:default/second", "ScaleSucceeded")]
    assert world.status.target_workers == W[:3]


def test_a_pass_that_binds_a_scaler_asks_for_the_next_pass_at_once(world: World) -> None:
    """The binding pass cannot select the scaler it binds, and the echo of the binding is no
    news to the worker that wrote it: without a requeue a lone ScaleOut waited for a resync."""
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 1}))
    binding = world.decide()
    assert [s.kind for s in binding.steps] == [steps.STEP_SCALER_BOUND]
    assert binding.requeue_after == 0
    selecting = world.decide()
    assert [s.kind for s in selecting.steps] == [steps.STEP_SCALER_PHASE]
    assert world.get("out").status is not None and world.get("out").status.phase == "Scaling"  # type: ignore[union-attr]


def test_a_scale_in_naming_a_missing_worker_fails_naming_it(world: World) -> None:
    world.start()
    world.add(scaler("ScaleIn", "in", toDelete={"podNames": [W[1], f"{JOB}-worker-9"]}))
    world.settle()
    status = world.get("in").status
    assert status is not None and status.conditions
    assert status.conditions[-1].message == (
        f"ScaleIn:default/in get to delete workers name failed, error: "
        f".spec.toDelete.podNames names workers that do not exist: {JOB}-worker-9")
    assert world.names("Pod") == [LAUNCHER, *W[:2]]


def test_a_scaler_for_a_missing_job_waits_and_says_so(world: World) -> None:
    world.start()
    world.add(scaler("ScaleIn", "elsewhere", job="other-job", toDelete={"count": 1}))
    decision = world.decide()
    assert decision.child_writes == [], "a scaler naming another job is not this job's business"
    from shared.core.elastic import scaling
    waiting = scaling.bind(world.get("elsewhere"), None, T0)
    assert [s.kind for s in waiting.steps] == ["scaler-waiting"]
    assert "TrainingJob default/other-job not found" in waiting.steps[0].detail


def test_a_worker_lost_while_min_replicas_remain_shrinks_the_job_instead_of_failing_it(world: World) -> None:
    world.job = training_job(replicas=3, worker={"minReplicas": 2})
    world.start()
    world.set_phase(W[2], "Failed")
    world.decide()
    assert world.status.phase == "Running"
    assert world.status.current_workers == W[:2] and world.hostfiles() == [hostfile(*W[:2])]
    assert f"worker-removed {W[2]}: left Running; the job continues on 2 workers" in map(str, world.steps)
    assert not [s for s in world.steps if s.kind == steps.STEP_BELOW_MINIMUM]


def test_falling_below_min_replicas_is_announced_once_and_not_fatal(world: World) -> None:
    world.job = training_job(replicas=2, worker={"minReplicas": 2})
    world.start()
    world.set_phase(W[1], "Failed")
    world.settle()
    assert world.status.phase == "Running"
    below = [e for e in world.events if "TrainingJobWorkersBelowMinimum" in e]
    assert below == [f"Warning TrainingJobWorkersBelowMinimum: trainingjob(default/{JOB}): 1 workers Running, "
                     "fewer than minReplicas 2"]


# ---------------------------------------------------------------------------
# Interrupted passes resume from what is observed
# ---------------------------------------------------------------------------


def test_a_scale_in_cut_short_after_its_deletes_never_removes_a_second_worker(world: World) -> None:
    world.running(*W[:4])
    world.add(scaler("ScaleIn", "in", toDelete={"count": 1}))
    for _ in range(3):
        world.decide()
    assert world.get("in").pod_names == [W[3]]
    decision = world.decide(apply=False)
    assert [ref.name for ref in decision.deletes] == [W[3], W[3]]
    # The pass is cut short: the deletes happen, the status writes do not.
    for ref in decision.deletes:
        world.children.pop((ref.kind, ref.name), None)
    world.settle()
    assert world.names("Pod") == [LAUNCHER, *W[:3]]
    assert world.status.target_workers == W[:3]


def test_a_scale_out_cut_short_after_its_creates_adds_no_second_set(world: World) -> None:
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 1}))
    for _ in range(3):
        world.decide()
    decision = world.decide(apply=False)
    for manifest in decision.creates:
        world.children[(manifest["kind"], manifest["metadata"]["name"])] = {**manifest, "status": {"phase": "Running"}}
    world.settle()
    assert world.names("Pod") == [LAUNCHER, *W[:3]]
    assert world.status.target_workers == W[:3]


def test_a_finished_scaler_whose_job_status_was_lost_is_caught_up_with(world: World) -> None:
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 1}))
    world.settle()
    world.run_all()
    decision = world.decide(apply=False)
    assert decision.status is not None and decision.child_writes
    decision.status = None  # the scaler's status was written, the job's was not
    world.apply(decision)
    assert world.status.phase == "Scaling" and world.status.target_workers == W[:2]
    world.settle()
    assert world.status.phase == "Running" and world.status.target_workers == W[:3]


def test_a_failing_hostfile_rewrite_fails_the_scale_in_and_removes_nothing(world: World) -> None:
    world.start()
    world.add(scaler("ScaleIn", "in", toDelete={"count": 1}))
    for _ in range(3):
        world.decide()
    world.failing = "container not found"
    world.decide()
    status = world.get("in").status
    assert status is not None and status.phase == "ScaleFailed"
    assert status.conditions and status.conditions[-1].message == (
        "ScaleIn:default/in execute script failed, error: container not found")
    assert world.names("Pod") == [LAUNCHER, *W[:2]]


def test_a_scaler_with_a_custom_script_runs_it_instead_of_rewriting_the_hostfile(world: World) -> None:
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 1}, script="/s.sh", timeout=30, env=[{"name": "A", "value": "1"}]))
    world.settle()
    world.run_all()
    world.settle()
    assert [e.purpose for e in world.execs] == ["script"], "no hostfile rewrite besides the script"
    assert world.execs[0].script == f"export A=1  && timeout 30 sh /s.sh {W[2]}:1"
    assert world.execs[0].command[:2] == ("/bin/sh", "-c")
    assert world.execs[0].container == "mnist-elastic"


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        pytest.param("ScaleIn", {"toDelete": {"count": 1}}, id="scale-in"),
        pytest.param("ScaleOut", {"toAdd": {"count": 1}}, id="scale-out"),
    ],
)
def test_a_scaler_whose_env_name_is_not_a_shell_identifier_fails_before_anything_runs(
    world: World, kind: str, spec: dict[str, object]
) -> None:
    world.start()
    world.add(scaler(kind, "bad", script="/s.sh", env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"},
                                                       {"name": "X=1;touch /tmp/p #", "value": "3"}], **spec))
    world.settle()
    status = world.get("bad").status
    assert status is not None and status.phase == "ScaleFailed"
    assert status.conditions and status.conditions[-1].message == (
        f"{kind}:default/bad is invalid: spec.env[2].name: Invalid value: must be a shell variable name: a letter "
        "or '_', then letters, digits or '_' ([A-Za-z_][A-Za-z0-9_]*)")
    assert "touch" not in " ".join([*world.log, *map(str, world.steps)]), "the name reached no record of the pass"
    assert world.names("Pod") == [LAUNCHER, *W[:2]] and world.hostfiles() == []
