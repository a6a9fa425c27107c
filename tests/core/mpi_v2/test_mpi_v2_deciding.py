"""One sync of an MPIJob v2beta1 as a pure decision (A.7, A.11–A.16): acceptance cases 10–31."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import mpijobs
from shared.core import effects, settings
from shared.core.mpi_v2 import deciding

import mpi_v2_builders as b

Decision = effects.Effects


def decide(job: mpijobs.MPIJob, children: list[dict[str, Any]], operator: settings.OperatorSettings = b.OPERATOR,
           **kwargs: Any) -> Decision:
    return deciding.decide(job, children, b.NOW, operator, b.new_key, **kwargs)


def names(manifests: list[dict[str, Any]]) -> list[str]:
    return [f"{m['kind']}/{m['metadata']['name']}" for m in manifests]


def deleted(decision: Decision) -> list[str]:
    return [f"{ref.kind}/{ref.name}" for ref in decision.deletes]


def test_case_10_an_invalid_job_is_left_alone_with_one_warning() -> None:
    job = mpijobs.load({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                        "metadata": {"name": "foo", "namespace": "bar"}, "spec": {}})
    decision = decide(job, [])
    assert decision.empty and decision.error is None
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "ValidationError")]


@pytest.mark.parametrize("implementation", ["OpenMPI", "Intel", "MPICH"])
def test_case_11_a_new_job_gets_every_child_in_upstream_order(implementation: str) -> None:
    decision = decide(b.job(workers=5, mpiImplementation=implementation), [])
    assert names(decision.creates) == [
        "Service/foo", "ConfigMap/foo-config", "Secret/foo-ssh",
        *[f"Pod/foo-worker-{i}" for i in range(5)], "Job/foo-launcher",
    ]
    config = decision.creates[1]["data"]
    assert config["discover_hosts.sh"] == "#!/bin/sh\n" and config["hostfile"].count("\n") == 5
    status = b.status_of(decision.status)
    assert b.reasons(status) == [("Created", "True", "MPIJobCreated")]
    assert status["conditions"][0]["message"] == "MPIJob default/foo is created."
    assert status["replicaStatuses"] == {"Launcher": {}, "Worker": {}}
    assert status["startTime"] == "2024-01-02T03:04:05Z"
    assert [(e.reason, e.message) for e in decision.events] == [("MPIJobCreated", "MPIJob default/foo is created.")]


@pytest.mark.parametrize(
    "which",
    ["Job/foo-launcher", "ConfigMap/foo-config", "Service/foo", "Secret/foo-ssh", "Pod/foo-worker-1"],
)
def test_case_21_a_child_the_job_does_not_control_stops_the_sync(which: str) -> None:
    job = b.job(workers=2)
    children = [*b.auxiliaries(job), b.worker(job, 0), b.worker(job, 1), b.launcher(job)]
    children = [b.foreign(c) if f"{c['kind']}/{c['metadata']['name']}" == which else c for c in children]
    decision = decide(job, children)
    assert decision.error == f'Resource "{which.split("/")[1]}" of Kind "{which.split("/")[0]}" already exists ' \
                             "and is not managed by MPIJob"
    assert decision.status is None
    assert ("Warning", "ErrResourceExists") in [(e.type, e.reason) for e in decision.events]


def finished(job_kwargs: dict[str, Any], cleanup: str) -> tuple[mpijobs.MPIJob, Decision]:
    status = b.created_status(completionTime=b.EARLIER)
    status["conditions"].append(b.condition("Succeeded", reason="MPIJobSucceeded"))
    job = b.job(workers=8, run_policy={"cleanPodPolicy": cleanup}, status=status, **job_kwargs)
    pods = [b.worker(job, i, phase) for i, phase in enumerate(["Running", "Pending", "Succeeded", "Failed"] * 2)]
    return job, decide(job, [*pods, b.launcher(job, b.condition("Complete"))])


@pytest.mark.parametrize(
    ("cleanup", "expected"),
    [
        pytest.param("All", [f"Pod/foo-worker-{i}" for i in range(8)], id="case-22-all"),
        pytest.param("Running", ["Pod/foo-worker-0", "Pod/foo-worker-1", "Pod/foo-worker-4", "Pod/foo-worker-5"],
                     id="running-and-pending-only"),
    ],
)
def test_case_22_a_finished_job_cleans_up_workers_by_clean_pod_policy(cleanup: str, expected: list[str]) -> None:
    job, decision = finished({}, cleanup)
    assert deleted(decision) == expected and {ref.reason for ref in decision.deletes} == {"clean-pod-policy"}
    assert not decision.creates and not decision.updates
    assert b.status_of(decision.status)["replicaStatuses"] == {"Worker": {}}


def test_a_finished_job_under_clean_pod_policy_none_is_left_as_it_is() -> None:
    _, decision = finished({}, "None")
    assert decision.empty and not decision.events


def test_cleanup_also_deletes_the_pod_group_never_the_launcher() -> None:
    status = b.created_status(completionTime=b.EARLIER)
    status["conditions"].append(b.condition("Failed", reason="BackoffLimitExceeded"))
    job = b.job(workers=1, run_policy={"cleanPodPolicy": "All"}, status=status)
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "foo", "namespace": "default",
                          "ownerReferences": [{"kind": "MPIJob", "uid": "uid-job", "controller": True}]}}
    decision = decide(job, [b.worker(job, 0), group, b.launcher(job, b.condition("Failed"))], b.VOLCANO)
    assert deleted(decision) == ["Pod/foo-worker-0", "PodGroup/foo"]


@pytest.mark.parametrize("implementation", ["OpenMPI", "Intel", "MPICH"])
def test_case_23_a_job_created_suspended_gets_a_suspended_launcher_and_no_pods(implementation: str) -> None:
    decision = decide(b.job(workers=8, mpiImplementation=implementation, run_policy={"suspend": True}), [])
    assert names(decision.creates) == ["Service/foo", "ConfigMap/foo-config", "Secret/foo-ssh", "Job/foo-launcher"]
    assert decision.creates[-1]["spec"]["suspend"] is True
    status = b.status_of(decision.status)
    assert b.reasons(status) == [("Created", "True", "MPIJobCreated"), ("Suspended", "True", "MPIJobSuspended"),
                                 ("Running", "False", "MPIJobSuspended")]
    assert [c["message"] for c in status["conditions"][1:]] == ["MPIJob suspended", "MPIJob default/foo is suspended."]
    assert "startTime" not in status


def running_status() -> dict[str, Any]:
    status = b.created_status(startTime=b.EARLIER)
    status["conditions"].append(b.condition("Running", reason="MPIJobRunning", message="MPIJob default/foo is running."))
    return status


def test_case_24_suspending_a_running_job_suspends_the_launcher_and_deletes_every_worker() -> None:
    job = b.job(workers=8, run_policy={"suspend": True}, status=running_status())
    children = [*b.auxiliaries(job), *b.workers(job, 8), b.launcher(job, suspend=False),
                b.launcher_pod("foo-launcher-x", "Running")]
    decision = decide(job, children)
    assert [u["spec"]["suspend"] for u in decision.updates if u["kind"] == "Job"] == [True]
    assert deleted(decision) == [f"Pod/foo-worker-{i}" for i in range(8)]
    assert {ref.reason for ref in decision.deletes} == {"suspend"}
    status = b.status_of(decision.status)
    assert ("Suspended", "True", "MPIJobSuspended") in b.reasons(status)
    assert ("Running", "False", "MPIJobSuspended") in b.reasons(status)
    assert status["replicaStatuses"] == {"Launcher": {"active": 1}, "Worker": {}}


def suspended_status() -> dict[str, Any]:
    status = b.created_status()
    status["conditions"] += [b.condition("Suspended", reason="MPIJobSuspended", message="MPIJob suspended"),
                             b.condition("Running", "False", "MPIJobSuspended")]
    return status


@pytest.mark.parametrize("started", [False, True], ids=["launcher-never-started", "launcher-had-started"])
def test_case_25_resuming_recreates_workers_and_unsuspends_the_launcher(started: bool) -> None:
    job = b.job(workers=8, status=suspended_status(), launcher_pod_spec={"nodeSelector": {"zone": "a"}})
    launcher = b.launcher(job, suspend=True, **({"startTime": b.EARLIER} if started else {}))
    decision = decide(job, [*b.auxiliaries(job), launcher])
    assert names(decision.creates) == [f"Pod/foo-worker-{i}" for i in range(8)]
    assert [u["spec"]["suspend"] for u in decision.updates] == [False]
    assert decision.updates[0]["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
    if started:
        assert [w.status for w in decision.child_writes if w.before_update] == [{}]
        assert "startTime" not in decision.updates[0]["status"]
    else:
        assert not any(w.before_update for w in decision.child_writes)
    status = b.status_of(decision.status)
    assert ("Suspended", "False", "MPIJobResumed") in b.reasons(status)
    assert status["startTime"] == "2024-01-02T03:04:05Z"
    assert ("Normal", "MPIJobResumed") in [(e.type, e.reason) for e in decision.events]
    assert launcher["spec"]["suspend"] is True, "the observed launcher is not changed (case 26)"


@pytest.mark.parametrize(
    ("worker_phase", "expected_conditions", "worker_active"),
    [
        pytest.param("Pending", [("Created", "True", "MPIJobCreated")], None, id="case-27-workers-pending"),
        pytest.param("Running", [("Created", "True", "MPIJobCreated"), ("Running", "True", "MPIJobRunning")], 8,
                     id="case-27-workers-running"),
    ],
)
def test_case_27_the_job_runs_once_the_launcher_and_every_worker_run(
    worker_phase: str, expected_conditions: list[tuple[str, str, str]], worker_active: int | None
) -> None:
    job = b.job(workers=8, status=b.created_status(startTime=b.EARLIER))
    children = [*b.auxiliaries(job, b.workers(job, 8, worker_phase)), *b.workers(job, 8, worker_phase),
                b.launcher(job), b.launcher_pod("foo-launcher-x", "Running")]
    decision = decide(job, children)
    status = b.status_of(decision.status)
    assert b.reasons(status) == expected_conditions
    assert status["replicaStatuses"]["Launcher"] == {"active": 1}
    assert status["replicaStatuses"]["Worker"].get("active") == worker_active
    if worker_active:
        assert status["conditions"][-1]["message"] == "MPIJob default/foo is running."


def test_case_28_with_at_startup_the_launcher_does_not_wait_for_workers() -> None:
    job = b.job(workers=16, status=b.created_status(startTime=b.EARLIER))
    pods = b.workers(job, 16)
    decision = decide(job, [*b.auxiliaries(job, pods), *pods])
    assert names(decision.creates) == ["Job/foo-launcher"]
    status = b.status_of(decision.status)
    assert status["replicaStatuses"]["Worker"] == {"active": 16}
    assert "Running" not in [c["type"] for c in status["conditions"]]


@pytest.mark.parametrize(
    ("ready", "launcher_created"),
    [pytest.param(False, False, id="running-not-ready"), pytest.param(True, True, id="ready")],
)
def test_case_29_wait_for_workers_ready_creates_the_launcher_once_every_worker_is_ready(
    ready: bool, launcher_created: bool
) -> None:
    job = b.job("job", workers=2, launcherCreationPolicy="WaitForWorkersReady")
    pods = b.workers(job, 2, ready=ready)
    decision = decide(job, [*b.auxiliaries(job, pods), *pods])
    assert ("Job/job-launcher" in names(decision.creates)) is launcher_created
    assert any(step.kind == "wait" for step in decision.steps) is not launcher_created


def test_wait_for_workers_ready_is_honoured_after_a_suspension() -> None:
    job = b.job(workers=2, status=suspended_status(), launcherCreationPolicy="WaitForWorkersReady")
    decision = decide(job, [*b.auxiliaries(job), b.launcher(job, suspend=True)])
    assert names(decision.creates) == ["Pod/foo-worker-0", "Pod/foo-worker-1"] and decision.updates == []
    pods = b.workers(job, 2, ready=True)
    ready = decide(job, [*b.auxiliaries(job, pods), *pods, b.launcher(job, suspend=True)])
    assert [u["spec"]["suspend"] for u in ready.updates] == [False]


def test_case_30_a_failed_launcher_pod_is_not_a_failed_job_until_the_launcher_job_fails() -> None:
    job = b.job(workers=2, run_policy={"cleanPodPolicy": "Running"}, status=b.created_status(startTime=b.EARLIER))
    pods = b.workers(job, 2)
    retrying = decide(job, [*b.auxiliaries(job, pods), *pods, b.launcher(job, failed=1)])
    status = b.status_of(retrying.status)
    assert status["replicaStatuses"]["Launcher"] == {"failed": 1}
    assert "Failed" not in [c["type"] for c in status["conditions"]]

    failed = decide(job, [*pods, b.launcher(job, b.condition("Failed"), failed=2)])
    status = b.status_of(failed.status)
    assert ("Failed", "True", "MPIJobFailed") in b.reasons(status)
    assert ("Warning", "MPIJobFailed") in [(e.type, e.reason) for e in failed.events]
    assert status["completionTime"] == "2024-01-02T03:04:05Z"
    # The next sync sees a finished job and applies cleanPodPolicy Running.
    after = decide(job.model_copy(update={"status": failed.status}), [*pods, b.launcher(job, b.condition("Failed"))])
    assert deleted(after) == ["Pod/foo-worker-0", "Pod/foo-worker-1"]


@pytest.mark.parametrize("managed_by", ["kueue.x-k8s.io/multikueue", "example.com/other"])
def test_case_31_a_job_managed_elsewhere_is_not_touched(managed_by: str) -> None:
    decision = decide(b.job(run_policy={"managedBy": managed_by}), [])
    assert decision.empty and not decision.events


def test_a_job_managed_by_mpi_operator_is_ours() -> None:
    assert decide(b.job(run_policy={"managedBy": "kubeflow.org/mpi-operator"}), []).creates


@pytest.mark.parametrize(
    ("before", "after", "created", "deleted_pods", "discover"),
    [
        pytest.param(2, 4, ["Pod/foo-worker-2", "Pod/foo-worker-3"], [], [0, 1], id="scale-up"),
        pytest.param(4, 2, [], ["Pod/foo-worker-2", "Pod/foo-worker-3"], [0, 1, 2, 3], id="scale-down"),
        pytest.param(12, 10, [], ["Pod/foo-worker-10", "Pod/foo-worker-11"], list(range(12)), id="scale-down-past-9"),
    ],
)
def test_elastic_workers_follow_replicas_and_discover_hosts_follows_running_workers(
    before: int, after: int, created: list[str], deleted_pods: list[str], discover: list[int]
) -> None:
    old = b.job(workers=before, status=b.created_status(startTime=b.EARLIER))
    job = b.job(workers=after, status=b.created_status(startTime=b.EARLIER))
    pods = b.workers(old, before)
    decision = decide(job, [*b.auxiliaries(old, pods), *pods, b.launcher(old)])
    assert names(decision.creates) == created
    assert deleted(decision) == deleted_pods and {r.reason for r in decision.deletes} <= {"scale-down"}
    [config] = [u for u in decision.updates if u["kind"] == "ConfigMap"]
    hosts = sorted(f"foo-worker-{i}" for i in discover)
    assert config["data"]["discover_hosts.sh"] == "#!/bin/sh\n" + "".join(f"echo {h}.foo.default.svc\n" for h in hosts)
    assert config["data"]["hostfile"] == "".join(f"foo-worker-{i}.foo.default.svc slots=1\n" for i in range(after))


def test_scale_down_with_the_launcher_as_worker_keeps_the_last_worker() -> None:
    old = b.job(workers=3, runLauncherAsWorker=True, status=b.created_status(startTime=b.EARLIER))
    job = b.job(workers=2, runLauncherAsWorker=True, status=b.created_status(startTime=b.EARLIER))
    pods = b.workers(old, 3)
    decision = decide(job, [*b.auxiliaries(job, pods), *pods, b.launcher(job)])
    assert deleted(decision) == ["Pod/foo-worker-2"] and decision.creates == []


def test_a_worker_that_is_running_again_is_not_recreated_and_a_deleting_pod_is_not_deleted_again() -> None:
    old = b.job(workers=3)
    job = b.job(workers=1, status=b.created_status(startTime=b.EARLIER))
    pods = b.workers(old, 3)
    pods[2]["metadata"]["deletionTimestamp"] = b.EARLIER
    decision = decide(job, [*pods, b.launcher(job)])
    assert deleted(decision) == ["Pod/foo-worker-1"]


def test_a_secret_missing_a_key_is_regenerated_and_a_complete_one_is_kept() -> None:
    job = b.job(workers=1, status=b.created_status(startTime=b.EARLIER))
    service, config, secret = b.auxiliaries(job, [b.worker(job, 0)])
    broken = {**secret, "data": {"ssh-privatekey": secret["data"]["ssh-privatekey"]}}
    decision = decide(job, [service, config, broken, b.worker(job, 0), b.launcher(job)])
    assert [(u["kind"], sorted(u["data"])) for u in decision.updates] == [("Secret", ["ssh-privatekey", "ssh-publickey"])]

    def no_key() -> Any:
        raise AssertionError("a complete Secret needs no new key")

    assert deciding.decide(job, [service, config, secret, b.worker(job, 0), b.launcher(job)], b.NOW, b.OPERATOR,
                              no_key).updates == []


def test_the_service_is_updated_when_its_selector_or_publishing_differs() -> None:
    job = b.job(workers=1, runLauncherAsWorker=True, status=b.created_status(startTime=b.EARLIER))
    service, config, secret = b.auxiliaries(b.job(workers=1))
    decision = decide(job, [service, config, secret, b.worker(job, 0), b.launcher(job)])
    [update] = [u for u in decision.updates if u["kind"] == "Service"]
    assert update["spec"]["publishNotReadyAddresses"] is True


def test_a_template_restart_policy_is_warned_about_when_the_launcher_is_made() -> None:
    decision = decide(b.job(launcher_pod_spec={"restartPolicy": "Never"}), [])
    assert ("Warning", "SetPodTemplateRestartPolicy") in [(e.type, e.reason) for e in decision.events]


def test_gang_scheduling_creates_the_pod_group_before_the_workers_and_deletes_it_on_suspend() -> None:
    job = b.job(workers=1)
    decision = decide(job, [], b.VOLCANO)
    assert names(decision.creates)[3:5] == ["PodGroup/foo", "Pod/foo-worker-0"]
    group = decision.creates[3]
    suspended = b.job(workers=1, run_policy={"suspend": True}, status=b.created_status())
    assert deleted(decide(suspended, [*b.auxiliaries(job), group, b.launcher(job)], b.VOLCANO)) == ["PodGroup/foo"]


def test_a_job_being_deleted_is_left_alone() -> None:
    job = b.job()
    job.metadata.deletion_timestamp = b.NOW
    assert decide(job, []).empty


def test_the_same_observations_give_the_same_decision_and_a_settled_job_needs_nothing() -> None:
    job = b.job(workers=2)
    first = decide(job, [])
    assert decide(job, []) == first
    settled = job.model_copy(update={"status": first.status})
    pods = b.workers(job, 2)
    again = decide(settled, [*b.auxiliaries(job, pods), *pods, b.launcher(job)])
    assert again.creates == [] and again.updates == [] and again.deletes == []
