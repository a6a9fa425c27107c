"""MPIJob plugin (legacy v1): GPU launcher, ConfigMap, RBAC, launcher env (§5.6, A.18); cases 31–33, legacy 36–37."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import jobs
from shared.core import defaulting, planning, settings
from shared.core.frameworks import mpi

OPERATOR = settings.OperatorSettings()


def make_job(
    name: str = "mpi",
    workers: int = 2,
    launcher_limits: dict[str, Any] | None = None,
    launcher_env: list[dict[str, str]] | None = None,
    uid: str = "uid-1",
    **spec: Any,
) -> jobs.Job:
    launcher: dict[str, Any] = {"name": "mpi", "image": "mpi", "command": ["mpirun"]}
    if launcher_limits is not None:
        launcher["resources"] = {"limits": launcher_limits}
    if launcher_env is not None:
        launcher["env"] = launcher_env
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [{"name": "mpi", "image": "mpi"}]}}},
            },
            **spec,
        },
    }
    return defaulting.set_defaults(jobs.load(document))


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param({"nvidia.com/gpu": 1}, True, id="nvidia"),
        pytest.param({"vendor-domain/gpu": 1}, True, id="vendor-gpu"),
        pytest.param({"vendor-domain/resourcetype": 1}, False, id="not-gpu"),
        pytest.param(None, False, id="no-limits"),
    ],
)
def test_case_32_gpu_launcher_detection(limits: dict[str, Any] | None, expected: bool) -> None:
    assert mpi.is_gpu_launcher(make_job(launcher_limits=limits)) is expected


def test_case_33_hostfile_and_kubexec() -> None:
    job = make_job()
    assert mpi.hostfile(job) == "mpi-worker-0 slots=1\nmpi-worker-1 slots=1\n"
    assert mpi.kubexec_script(job) == (
        '#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n/opt/kube/kubectl exec ${POD_NAME} -- /bin/sh -c "$*"'
    )


def test_main_container_is_passed_to_kubectl_exec() -> None:
    assert mpi.kubexec_script(make_job(mainContainer="trainer")).endswith(
        '/opt/kube/kubectl exec ${POD_NAME} --container trainer -- /bin/sh -c "$*"'
    )


def test_legacy_37_gpu_launcher_is_listed_first_in_hostfile_and_discover_hosts() -> None:
    job = make_job(launcher_limits={"nvidia.com/gpu": 1}, slotsPerWorker=2, workers=1)
    assert mpi.hostfile(job) == "mpi-launcher slots=2\nmpi-worker-0 slots=2\n"
    assert mpi.discover_hosts_script(job, ()) == "#!/bin/sh\necho mpi-launcher:2\n"


def worker_pod(name: str, phase: str, uid: str = "uid-1", job_name: str = "mpi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {
                "training.kubeflow.org/operator-name": "mpijob-controller",
                "training.kubeflow.org/job-name": job_name,
                "training.kubeflow.org/replica-type": "worker",
            },
            "ownerReferences": [{"uid": uid, "controller": True}],
        },
        "status": {"phase": phase},
    }


def test_discover_hosts_lists_running_controlled_workers_sorted_by_name() -> None:
    observed = [
        worker_pod("mpi-worker-1", "Running"),
        worker_pod("mpi-worker-0", "Running"),
        worker_pod("mpi-worker-2", "Pending"),
        worker_pod("mpi-worker-3", "Running", uid="someone-else"),
        worker_pod("other-worker-0", "Running", job_name="other"),
    ]
    assert mpi.discover_hosts_script(make_job(), observed) == "#!/bin/sh\necho mpi-worker-0:1\necho mpi-worker-1:1"


@pytest.mark.parametrize(
    ("user_env", "expected_tail"),
    [
        pytest.param(
            [{"name": "X_MPI_HYDRA_BOOTSTRAP", "value": "foo"}],
            [("I_MPI_HYDRA_BOOTSTRAP", "rsh"), ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh")],
            id="neither-set",
        ),
        pytest.param(
            [{"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "RSH"}],
            [("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh")],
            id="bootstrap-kept",
        ),
        pytest.param(
            [{"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC", "value": "/script.sh"}],
            [("I_MPI_HYDRA_BOOTSTRAP", "rsh")],
            id="exec-kept",
        ),
        pytest.param(
            [{"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "RSH"}, {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC", "value": "/s"}],
            [],
            id="both-kept",
        ),
    ],
)
def test_case_31_legacy_36_intel_mpi_bootstrap_vars(
    user_env: list[dict[str, str]], expected_tail: list[tuple[str, str]]
) -> None:
    pod = planning.desired_pod(make_job(launcher_env=user_env), "Launcher", 0, OPERATOR)
    env = [(v["name"], v["value"]) for v in pod["spec"]["containers"][0]["env"]]
    assert env == [
        *((v["name"], v["value"]) for v in user_env),
        ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("NVIDIA_VISIBLE_DEVICES", ""),
        ("NVIDIA_DRIVER_CAPABILITIES", ""),
        *expected_tail,
    ]


def test_legacy_37_gpu_launcher_keeps_nvidia_vars() -> None:
    env = mpi.launcher_env(make_job(launcher_limits={"example.com/gpu": 1}), [])
    assert "NVIDIA_VISIBLE_DEVICES" not in [v["name"] for v in env]


READ_PODS = {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}


@pytest.mark.parametrize("workers, rules", [
    pytest.param(2, [READ_PODS, {"verbs": ["create", "get"], "apiGroups": [""], "resources": ["pods/exec"],
                                 "resourceNames": ["pi-worker-0", "pi-worker-1"]}], id="two-workers-each-named"),
    pytest.param(1, [READ_PODS, {"verbs": ["create", "get"], "apiGroups": [""], "resources": ["pods/exec"],
                                 "resourceNames": ["pi-worker-0"]}], id="one-worker"),
    # Upstream writes the exec rule with no resourceNames here: exec into every pod of the namespace.
    pytest.param(0, [READ_PODS], id="no-workers-no-exec-rule"),
])
def test_role_grants_exec_only_into_the_workers_each_named(workers: int, rules: list[dict[str, Any]]) -> None:
    assert mpi.desired_role(make_job("pi", workers=workers))["rules"] == rules


def test_every_exec_rule_of_the_role_names_its_pods() -> None:
    for workers in range(4):
        for rule in mpi.desired_role(make_job("pi", workers=workers))["rules"]:
            if "pods/exec" in rule["resources"]:
                assert rule["resourceNames"], rule


def test_template_service_account_is_used_and_not_planned() -> None:
    job = make_job("pi")
    assert job.replica_specs is not None
    launcher = job.replica_specs["Launcher"]
    assert launcher is not None
    launcher.template["spec"]["serviceAccountName"] = "mine"
    kinds = [child["kind"] for child in mpi.MPI().auxiliary_children(job, OPERATOR, ())]
    assert kinds == ["ConfigMap", "Role", "RoleBinding"]
    assert mpi.desired_role_binding(job)["subjects"] == [{"kind": "ServiceAccount", "name": "mine", "namespace": "ns"}]
    assert planning.desired_pod(job, "Launcher", 0, OPERATOR)["spec"]["serviceAccountName"] == "mine"


def test_worker_keeps_its_own_command() -> None:
    job = make_job()
    assert job.replica_specs is not None
    worker = job.replica_specs["Worker"]
    assert worker is not None
    worker.template["spec"]["containers"][0]["command"] = ["sshd"]
    container = planning.desired_pod(job, "Worker", 0, OPERATOR)["spec"]["containers"][0]
    assert container["command"] == ["sshd"]
    assert "args" not in container


@pytest.mark.parametrize(
    ("template", "gang", "expected"),
    [
        pytest.param({}, "", [], id="nothing"),
        pytest.param({"restartPolicy": "Always"}, "", [("SettedPodTemplateRestartPolicy",
                     "Restart policy in pod template will be overwritten by restart policy in replica spec")],
                     id="launcher-restart-policy"),
        pytest.param({}, "volcano", [("SettedPodTemplateSchedulerName",
                     "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten")],
                     id="inverted-scheduler-check-warns-when-none-set"),
        pytest.param({"schedulerName": "volcano"}, "volcano", [], id="gang-scheduler-named"),
    ],
)
def test_template_warnings(template: dict[str, Any], gang: str, expected: list[tuple[str, str]]) -> None:
    job = make_job()
    assert job.replica_specs is not None
    launcher = job.replica_specs["Launcher"]
    assert launcher is not None
    launcher.template["spec"].update(template)
    operator = settings.OperatorSettings(gang_scheduler_name=gang)
    assert planning.template_warnings(job, operator) == expected
