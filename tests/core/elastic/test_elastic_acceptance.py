"""Part C's et-operator acceptance cases (38–54) that the pure core can show, one row each,
played against a TrainingJob's small world (conftest.World)."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from shared.api import elastic
from shared.core.elastic import planning, scaling
from shared.core.elastic.settings import ElasticSettings

from tests.core.elastic.world import T0, World, scaler, training_job

JOB = "elastic-training"
W = [f"{JOB}-worker-{i}" for i in range(12)]
LAUNCHER = f"{JOB}-launcher"


def c38_provisioning_follows_upstreams_order(w: World) -> None:
    w.decide()
    assert w.names("Secret") == [JOB]
    secret = w.children[("Secret", JOB)]
    assert sorted(secret["data"]) == ["config", "id_rsa", "id_rsa.pub"]
    assert base64.b64decode(secret["data"]["config"]).decode() == planning.SSH_CONFIG
    assert w.names("Pod") == W[:2] and w.names("Service") == W[:2]
    assert w.status.phase == "Created"
    assert w.conditions() == ["Created", "WorkersCreated"]
    assert w.status.target_workers == W[:2]
    w.decide()
    assert "WorkersReady" not in w.conditions(), "Pending workers are not ready"
    w.run_all()
    w.decide()
    assert w.conditions()[-1] == "WorkersReady" and w.status.current_workers == W[:2]
    w.decide()
    assert w.log[-5:] == [f"create ServiceAccount/{LAUNCHER}", f"create Role/{LAUNCHER}",
                          f"create RoleBinding/{LAUNCHER}", f"create ConfigMap/{JOB}-config", f"create Pod/{LAUNCHER}"]
    data = w.children[("ConfigMap", f"{JOB}-config")]["data"]
    assert data["hostfile"] == f"{W[0]}:1\n{W[1]}:1\n"
    assert data["deepspeed-hostfile"] == f"{W[0]} slots=1\n{W[1]} slots=1\n"
    assert [c["name"] for c in w.pod(LAUNCHER)["spec"]["initContainers"]] == ["init-hostfile"]
    w.set_phase(LAUNCHER, "Running")
    w.decide()
    assert w.status.phase == "Running" and w.conditions()[-1] == "Running"


def c41_scale_in_by_count_rewrites_the_hostfile_then_removes_the_highest_worker(w: World) -> None:
    w.start()
    w.add(scaler("ScaleIn", "si", toDelete={"count": 1}))
    w.decide()
    si = w.get("si")
    assert si.metadata.owner_references and si.metadata.owner_references[0].uid == "job-uid"
    assert w.conditions(si) == ["Created"]
    w.decide()
    assert w.status.phase == "Scaling" and w.status.current_scaler == "ScaleIn:default/si"
    started = w.get("si").status
    assert started is not None and started.phase == "Scaling"
    w.decide()
    assert w.get("si").pod_names == [W[1]]
    w.processes = f"root 1 0 ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no {W[1]} orted"
    w.decide()
    assert w.hostfiles() == [f"{W[0]}:1\n"]
    assert "ScriptExecuted" in w.conditions(w.get("si"))
    assert W[1] in w.names("Pod"), "a worker the launcher still uses stays"
    w.processes = ""
    w.decide()
    assert w.log[-2:] == [f"delete Service/{W[1]}", f"delete Pod/{W[1]}"]
    w.decide()
    assert w.status.target_workers == [W[0]] and w.status.current_workers == [W[0]]
    done = w.get("si").status
    assert done is not None and done.phase == "ScaleSucceeded" and done.conditions
    assert (done.conditions[-1].type, done.conditions[-1].reason) == ("ScaleSucceeded", "ScalingInSucceeded")
    assert (w.status.phase, w.status.current_scaler) == ("Running", "")


def _scale_in_fails(w: World, names: list[str], to_delete: dict[str, object], message: str) -> None:
    w.running(*names)
    w.add(scaler("ScaleIn", "si", toDelete=to_delete))
    w.settle()
    status = w.get("si").status
    assert status is not None and status.phase == "ScaleFailed"
    assert status.conditions and message in (status.conditions[-1].message or "")
    assert w.status.phase == "Running"
    assert not [line for line in w.log if line.startswith("delete")]


def c42_scale_in_takes_the_highest_indices_numerically(w: World) -> None:
    w.running(W[2], W[9], W[10])
    w.add(scaler("ScaleIn", "si", toDelete={"count": 2}))
    w.settle()
    assert w.get("si").pod_names == [W[9], W[10]]
    assert w.names("Pod") == [LAUNCHER, W[2]]


def c43_scale_in_count_too_large_fails(w: World) -> None:
    _scale_in_fails(w, W[:2], {"count": 2}, ".spec.toDelete.count should be less than current replicas 2")


def c43_scale_in_without_count_or_names_fails(w: World) -> None:
    _scale_in_fails(w, W[:2], {}, ".spec.toDelete.count or .spec.toDelete.podNames, only one of them should be set")


def c44_scale_in_by_name_removes_only_that_worker(w: World) -> None:
    w.running(*W[:3])
    w.add(scaler("ScaleIn", "si", toDelete={"podNames": [W[1]]}))
    w.settle()
    assert w.names("Pod") == [LAUNCHER, W[0], W[2]]
    assert w.hostfiles() == [f"{W[0]}:1\n{W[2]}:1\n"]


def c44_scale_in_naming_no_existing_worker_deletes_nothing(w: World) -> None:
    _scale_in_fails(w, W[:2], {"podNames": [f"{JOB}-worker-7"]},
                    f"names workers that do not exist: {JOB}-worker-7")


def c45_scale_out_adds_workers_and_rewrites_the_hostfile_once_they_run(w: World) -> None:
    w.start()
    w.add(scaler("ScaleOut", "so", toAdd={"count": 2}, timeout=300))
    w.decide()
    w.decide()
    w.decide()
    assert w.get("so").pod_names == W[2:4]
    w.decide()
    assert w.names("Pod") == [LAUNCHER, *W[:4]] and w.names("Service") == W[:4]
    assert w.pod(W[2])["metadata"]["labels"]["scaleout-name"] == "so"
    assert w.last is not None and w.last.requeue_after == 5.0
    assert w.hostfiles() == []
    w.run_all(W[2], W[3])
    w.decide()
    assert w.hostfiles() == ["".join(f"{name}:1\n" for name in W[:4])]
    assert w.status.target_workers == W[:4]
    status = w.get("so").status
    assert status is not None and status.phase == "ScaleSucceeded"
    assert status.conditions and status.conditions[-1].reason == "ScalingOutSucceeded"


def c46_a_scale_out_that_times_out_fails_and_removes_what_it_added(w: World) -> None:
    w.start()
    w.add(scaler("ScaleOut", "so", toAdd={"count": 2}))
    for _ in range(4):
        w.decide()
    assert W[2] in w.names("Pod")
    w.tick(61)
    w.decide()
    status = w.get("so").status
    assert status is not None and status.phase == "ScaleFailed"
    assert status.conditions and status.conditions[-1].message == "scaleout job ScaleOut:default/so execution timeout"
    assert w.names("Pod") == [LAUNCHER, *W[:2]] and w.names("Service") == W[:2]
    assert w.status.phase == "Running"


def c46_a_scale_out_of_no_workers_fails_without_creating_any(w: World) -> None:
    w.start()
    w.add(scaler("ScaleOut", "so", toAdd={"count": 0}))
    w.settle()
    status = w.get("so").status
    assert status is not None and status.phase == "ScaleFailed"
    assert status.conditions and status.conditions[-1].message == ".spec.toAdd.count shouldn be greater than 0"
    assert w.names("Pod") == [LAUNCHER, *W[:2]]


def c48_upstreams_order_runs_the_newest_scaler_first(w: World) -> None:
    w.settings = ElasticSettings(scaler_order="newest-first")
    w.start()
    w.add(scaler("ScaleOut", "older", created=T0, toAdd={"count": 1}),
          scaler("ScaleOut", "newer", created=T0.replace(hour=1), toAdd={"count": 1}))
    w.decide()
    w.decide()
    assert w.status.current_scaler == "ScaleOut:default/newer"
    w.settle()
    w.run_all()
    w.settle()
    assert w.status.current_scaler == "ScaleOut:default/older"


def c49_a_failed_worker_is_replaced_under_on_failure(w: World) -> None:
    w.job = training_job(worker={"restartPolicy": "OnFailure"})
    w.start()
    w.set_phase(W[1], "Failed", reason="Evicted")
    w.decide()
    assert w.names("Pod") == [LAUNCHER, *W[:3]] and W[2] in w.names("Service")
    assert w.status.target_workers == [W[0], W[2]]
    assert f"Warning TrainingJobWorkerFailed: trainingjob(default/{JOB}): worker {W[1]} are evicted." in w.events


def c49_a_failed_worker_is_not_replaced_under_never(w: World) -> None:
    w.start()
    w.set_phase(W[1], "Failed")
    w.decide()
    assert w.names("Pod") == [LAUNCHER, *W[:2]]
    assert w.status.target_workers == W[:2]


def c50_the_hostfile_follows_the_running_workers(w: World) -> None:
    w.start()
    w.set_phase(W[1], "Failed")
    w.decide()
    assert w.hostfiles() == [f"{W[0]}:1\n"]
    assert w.execs[-1].script == f"echo '{W[0]}:1\n' > /etc/edl/hostfile"
    assert w.status.current_workers == [W[0]]


def c51_a_succeeded_launcher_finishes_the_job_and_cleans_up_workers(w: World) -> None:
    w.start()
    w.set_phase(LAUNCHER, "Succeeded")
    w.decide()
    assert w.status.phase == "Succeeded" and w.status.completion_time == T0
    w.decide()
    assert w.names("Pod") == [LAUNCHER] and w.names("Service") == []


def c51_clean_pod_policy_none_keeps_the_workers(w: World) -> None:
    w.job = training_job(cleanPodPolicy="None")
    w.start()
    w.set_phase(LAUNCHER, "Succeeded")
    w.settle()
    assert w.names("Pod") == [LAUNCHER, *W[:2]]


def c51_an_evicted_launcher_fails_the_job_without_a_completion_time(w: World) -> None:
    w.start()
    w.set_phase(LAUNCHER, "Failed", reason="Evicted")
    w.decide()
    assert w.status.phase == "Failed" and w.status.completion_time is None
    assert w.status.conditions and w.status.conditions[-1].reason == "TrainingJobEvicted"


def c52_a_failed_job_restarts_under_on_failure(w: World) -> None:
    w.job = training_job(restartPolicy="OnFailure")
    w.start()
    w.set_phase(LAUNCHER, "Failed")
    w.decide()
    w.decide()
    assert (w.status.phase, w.status.restart_count, w.conditions()) == ("Created", 1, ["Created"])
    assert w.names("Pod") == [] and w.names("Service") == []
    w.decide()
    assert w.names("Pod") == W[:2]


def c52_at_the_backoff_limit_a_failed_job_is_only_cleaned_up(w: World) -> None:
    w.job = training_job(restartPolicy="OnFailure", backoffLimit=0)
    w.start()
    w.set_phase(LAUNCHER, "Failed")
    w.settle()
    assert (w.status.phase, w.status.restart_count) == ("Failed", 0)
    assert w.names("Pod") == [LAUNCHER]


def c53_the_suspend_annotation_deletes_launcher_and_workers(w: World) -> None:
    w.start()
    document = w.job.dump()
    document["metadata"]["annotations"] = {"job-supervisor.kube-ai.io/job-suspended": "true"}
    w.job = elastic.load_training_job(document)
    w.decide()
    assert w.status.phase == "Suspended"
    assert w.status.conditions and w.status.conditions[-1].reason == "WaitingResourceTimeout"
    w.decide()
    assert w.names("Pod") == [] and w.names("Service") == []


def c54_a_scaler_for_no_job_stays_unbound(w: World) -> None:
    lonely = scaler("ScaleIn", "si", job="nobody", toDelete={"count": 1})
    decision = scaling.bind(lonely, None, T0)
    assert decision.child_writes == [] and decision.status is None
    assert [str(s) for s in decision.steps] == [
        "scaler-waiting ScaleIn:default/si: TrainingJob default/nobody not found; "
        "the scaler stays unbound until it exists"]


CASES: list[Callable[[World], None]] = [
    c38_provisioning_follows_upstreams_order,
    c41_scale_in_by_count_rewrites_the_hostfile_then_removes_the_highest_worker,
    c42_scale_in_takes_the_highest_indices_numerically,
    c43_scale_in_count_too_large_fails,
    c43_scale_in_without_count_or_names_fails,
    c44_scale_in_by_name_removes_only_that_worker,
    c44_scale_in_naming_no_existing_worker_deletes_nothing,
    c45_scale_out_adds_workers_and_rewrites_the_hostfile_once_they_run,
    c46_a_scale_out_that_times_out_fails_and_removes_what_it_added,
    c46_a_scale_out_of_no_workers_fails_without_creating_any,
    c48_upstreams_order_runs_the_newest_scaler_first,
    c49_a_failed_worker_is_replaced_under_on_failure,
    c49_a_failed_worker_is_not_replaced_under_never,
    c50_the_hostfile_follows_the_running_workers,
    c51_a_succeeded_launcher_finishes_the_job_and_cleans_up_workers,
    c51_clean_pod_policy_none_keeps_the_workers,
    c51_an_evicted_launcher_fails_the_job_without_a_completion_time,
    c52_a_failed_job_restarts_under_on_failure,
    c52_at_the_backoff_limit_a_failed_job_is_only_cleaned_up,
    c53_the_suspend_annotation_deletes_launcher_and_workers,
    c54_a_scaler_for_no_job_stays_unbound,
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case.__name__.replace("_", "-")) for case in CASES])
def test_acceptance(case: Callable[[World], None], world: World) -> None:
    case(world)
