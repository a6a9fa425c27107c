"""The launcher's Role of a TrainingJob names exactly the workers it may exec into, and follows
them through scale-outs, scale-ins, replaced workers and the end of the job (kto's own:
upstream's ``pods/exec`` rule names no pod, docs/elastic-core.md)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core.elastic import steps, planning
from tests.core.elastic.world import T0, World, scaler, training_job

JOB = "elastic-training"
W = [f"{JOB}-worker-{i}" for i in range(8)]
LAUNCHER = f"{JOB}-launcher"


def role(world: World) -> dict[str, Any]:
    return world.children[("Role", LAUNCHER)]


def exec_names(world: World) -> list[str] | None:
    """The pods named by the Role's pods/exec rules; None when a rule names none (every pod)."""
    names: list[str] = []
    for rule in role(world)["rules"]:
        if "pods/exec" in rule["resources"]:
            if not rule.get("resourceNames"):
                return None
            names += rule["resourceNames"]
    return names


def test_the_role_made_with_the_launcher_names_the_running_workers_and_no_other_pod(world: World) -> None:
    world.start()
    assert exec_names(world) == W[:2]
    assert LAUNCHER not in (exec_names(world) or [])
    world.settle()
    assert not [line for line in world.log if line.startswith("update")], "a settled job updates nothing"


def test_a_scale_out_names_its_workers_in_the_pass_that_creates_them_before_any_hostfile_names_them(
    world: World,
) -> None:
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 2}))
    world.settle()
    assert exec_names(world) == W[:4]
    world.run_all()
    world.settle()
    assert world.hostfiles()[-1] == "".join(f"{w}:1\n" for w in W[:4])
    creates = [i for i, line in enumerate(world.log) if line in (f"create Pod/{W[2]}", f"create Pod/{W[3]}")]
    update = world.log.index(f"update Role/{LAUNCHER}")
    assert max(creates) < update < world.log.index("exec hostfile")


def test_a_scale_in_drops_the_removed_worker_from_the_role(world: World) -> None:
    world.running(*W[:4])
    world.settle()
    assert exec_names(world) == W[:4]
    world.add(scaler("ScaleIn", "in", created=T0.replace(hour=1), toDelete={"count": 1}))
    world.settle()
    assert world.get("in").status is not None and world.get("in").status.phase == "ScaleSucceeded"
    assert exec_names(world) == W[:3]


def test_a_replaced_worker_is_named_with_the_pass_that_creates_it(world: World) -> None:
    world.job = training_job(worker={"restartPolicy": "OnFailure"})
    world.start()
    world.set_phase(W[1], "Failed")
    decision = world.decide()
    assert [m["metadata"]["name"] for m in decision.creates if m["kind"] == "Pod"] == [W[2]]
    assert [m["metadata"]["name"] for m in decision.updates] == [LAUNCHER]
    assert W[2] in (exec_names(world) or [])


def test_a_hostfile_naming_a_worker_the_role_does_not_name_waits_for_the_role(world: World) -> None:
    world.start()
    world.add(scaler("ScaleOut", "out", toAdd={"count": 1}))
    world.settle()
    world.run_all()
    # The Role's update was lost (another writer put the old rules back).
    role(world)["rules"] = planning.role(world.job, W[:2])["rules"]
    decision = world.decide()
    assert not world.execs, "no hostfile names a worker the launcher may not exec into"
    assert [m["metadata"]["name"] for m in decision.updates] == [LAUNCHER]
    assert f"waiting {LAUNCHER}: the launcher's Role does not name {W[2]} yet" in map(str, decision.steps)
    assert decision.requeue_after is not None
    world.settle()
    assert world.hostfiles()[-1] == "".join(f"{w}:1\n" for w in W[:3])


def test_a_role_as_upstream_writes_it_is_narrowed_to_the_workers(world: World) -> None:
    world.start()
    role(world)["rules"][1] = {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"]}
    assert exec_names(world) is None
    world.decide()
    assert exec_names(world) == W[:2]


@pytest.mark.parametrize("policy", [pytest.param("Running", id="cleanPodPolicy-Running"),
                                    pytest.param("All", id="cleanPodPolicy-All")])
def test_a_finished_job_whose_workers_are_cleaned_up_keeps_no_exec_rule(world: World, policy: str) -> None:
    world.job = training_job(cleanPodPolicy=policy)
    world.start()
    world.set_phase(LAUNCHER, "Succeeded")
    world.settle()
    assert world.status.phase == "Succeeded"
    assert not [n for n in world.names("Pod") if n != LAUNCHER]
    assert exec_names(world) == []
    assert [s for s in world.steps if s.kind == steps.STEP_ROLE_FOLLOWS][-1].detail == \
        "pods/exec into no pod (no worker)"
