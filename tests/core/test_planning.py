"""The child planner (spec §4, §5 worked examples, §6.9 gang scheduling, §8 HPA)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.api import jobs
from shared.core import defaulting, errors, frameworks, planning, settings

OPERATOR = settings.OperatorSettings()
UID = "6f2e1c1a-0000-4000-8000-000000000001"


def load(kind: str, name: str, namespace: str | None, specs: dict[str, Any], **spec: Any) -> jobs.Job:
    metadata: dict[str, Any] = {"name": name, "uid": UID}
    if namespace is not None:
        metadata["namespace"] = namespace
    field = jobs.KINDS[kind].REPLICA_FIELD_ALIAS
    document = {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": metadata, "spec": {field: specs, **spec}}
    return defaulting.set_defaults(jobs.load(document))


def replica(replicas: int, name: str, container: dict[str, Any] | None = None, **template_spec: Any) -> dict[str, Any]:
    containers = [{"name": name, "image": f"{name}:latest", **(container or {})}]
    return {"replicas": replicas, "template": {"spec": {"containers": containers, **template_spec}}}


def owner(kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "name": name, "uid": UID,
            "controller": True, "blockOwnerDeletion": True}


def labels(controller: str, job: str, rt: str, index: int | None, master: bool = False) -> dict[str, str]:
    out = {"training.kubeflow.org/operator-name": controller, "training.kubeflow.org/job-name": job,
           "training.kubeflow.org/replica-type": rt}
    if index is not None:
        out["training.kubeflow.org/replica-index"] = str(index)
    if master:
        out["training.kubeflow.org/job-role"] = "master"
    return out


def by_name(children: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["kind"], c["metadata"]["name"]): c for c in children}


def env_pairs(container: dict[str, Any]) -> list[tuple[str, str]]:
    return [(v["name"], v["value"]) for v in container.get("env", [])]


# ---------------------------------------------------------------------------
# §5.1 worked example: PyTorchJob mnist
# ---------------------------------------------------------------------------


def mnist() -> jobs.Job:
    return load("PyTorchJob", "mnist", "ns", {"Master": replica(1, "pytorch"), "Worker": replica(2, "pytorch")})


def pytorch_env(rank: int) -> list[tuple[str, str]]:
    return [
        ("PYTHONUNBUFFERED", "1"), ("MASTER_PORT", "23456"), ("PET_MASTER_PORT", "23456"),
        ("MASTER_ADDR", "mnist-master-0"), ("PET_MASTER_ADDR", "mnist-master-0"), ("WORLD_SIZE", "3"),
        ("RANK", str(rank)), ("PET_NODE_RANK", str(rank)), ("PET_NPROC_PER_NODE", "auto"), ("PET_NNODES", "3"),
    ]


def test_pytorch_mnist_children_in_order() -> None:
    names = [(c["kind"], c["metadata"]["name"]) for c in planning.plan(mnist(), OPERATOR)]
    assert names == [
        ("Pod", "mnist-master-0"), ("Service", "mnist-master-0"),
        ("Pod", "mnist-worker-0"), ("Pod", "mnist-worker-1"),
        ("Service", "mnist-worker-0"), ("Service", "mnist-worker-1"),
    ]


def test_pytorch_mnist_master_pod_exactly() -> None:
    pod = planning.desired_pod(mnist(), "Master", 0, OPERATOR)
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "mnist-master-0",
            "namespace": "ns",
            "labels": labels("pytorchjob-controller", "mnist", "master", 0, master=True),
            "ownerReferences": [owner("PyTorchJob", "mnist")],
        },
        "spec": {
            "containers": [{
                "name": "pytorch",
                "image": "pytorch:latest",
                "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                "env": [{"name": n, "value": v} for n, v in pytorch_env(0)],
            }],
            "restartPolicy": "OnFailure",
        },
    }


@pytest.mark.parametrize("index", [pytest.param(0, id="worker-0"), pytest.param(1, id="worker-1")])
def test_pytorch_mnist_worker_pods(index: int) -> None:
    pod = planning.desired_pod(mnist(), "Worker", index, OPERATOR)
    assert pod["metadata"]["labels"] == labels("pytorchjob-controller", "mnist", "worker", index)
    assert env_pairs(pod["spec"]["containers"][0]) == pytorch_env(index + 1)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["init-pytorch"]
    assert "nslookup mnist-master-0;" in pod["spec"]["initContainers"][0]["command"][2]
    assert pod["spec"]["restartPolicy"] == "OnFailure"


def test_pytorch_mnist_services_are_headless_with_the_default_port() -> None:
    service = planning.desired_service(mnist(), "Worker", 1)
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "mnist-worker-1",
            "namespace": "ns",
            "labels": labels("pytorchjob-controller", "mnist", "worker", 1),
            "ownerReferences": [owner("PyTorchJob", "mnist")],
        },
        "spec": {
            "clusterIP": "None",
            "selector": labels("pytorchjob-controller", "mnist", "worker", 1),
            "ports": [{"name": "pytorchjob-port", "port": 23456}],
        },
    }


def test_env_reaches_every_container_after_the_users_own() -> None:
    master = replica(1, "pytorch", container={"env": [{"name": "RANK", "value": "user"}]})
    master["template"]["spec"]["containers"].append({"name": "sidecar", "image": "s"})
    job = load("PyTorchJob", "mnist", "ns", {"Master": master, "Worker": replica(2, "pytorch")})
    pod = planning.desired_pod(job, "Master", 0, OPERATOR)
    main, sidecar = pod["spec"]["containers"]
    assert env_pairs(main) == [("RANK", "user"), *pytorch_env(0)]
    assert env_pairs(sidecar) == pytorch_env(0)


# ---------------------------------------------------------------------------
# §5.2 worked example: TFJob dist
# ---------------------------------------------------------------------------

DIST_CLUSTER = (
    '{"cluster":{"chief":["dist-chief-0.kubeflow.svc:2222"],"ps":["dist-ps-0.kubeflow.svc:2222"],'
    '"worker":["dist-worker-0.kubeflow.svc:2222","dist-worker-1.kubeflow.svc:2222"]}'
)


def dist() -> jobs.Job:
    return load("TFJob", "dist", "kubeflow",
                {"Worker": replica(2, "tensorflow"), "PS": replica(1, "tensorflow"), "Chief": replica(1, "tensorflow")})


@pytest.mark.parametrize(
    ("rt", "index", "name", "master"),
    [
        pytest.param("Chief", 0, "dist-chief-0", True, id="chief-0"),
        pytest.param("PS", 0, "dist-ps-0", False, id="ps-0"),
        pytest.param("Worker", 0, "dist-worker-0", False, id="worker-0"),
        pytest.param("Worker", 1, "dist-worker-1", False, id="worker-1"),
    ],
)
def test_tf_dist_pods(rt: str, index: int, name: str, master: bool) -> None:
    children = by_name(planning.plan(dist(), OPERATOR))
    pod = children[("Pod", name)]
    assert pod["metadata"]["labels"] == labels("tfjob-controller", "dist", rt.lower(), index, master=master)
    assert env_pairs(pod["spec"]["containers"][0]) == [
        ("TF_CONFIG", DIST_CLUSTER + f',"task":{{"type":"{rt.lower()}","index":{index}}},"environment":"cloud"}}'),
    ]
    assert pod["spec"]["restartPolicy"] == "Never"
    service = children[("Service", name)]
    assert service["spec"]["ports"] == [{"name": "tfjob-port", "port": 2222}]
    assert service["metadata"]["ownerReferences"] == [owner("TFJob", "dist")]


def test_tf_dist_order_follows_the_canonical_replica_types() -> None:
    assert [c["metadata"]["name"] for c in planning.plan(dist(), OPERATOR) if c["kind"] == "Pod"] == [
        "dist-ps-0", "dist-worker-0", "dist-worker-1", "dist-chief-0",
    ]


def test_tf_unknown_replica_types_come_last_sorted() -> None:
    job = load("TFJob", "dist", None, {"Zeta": replica(1, "tensorflow"), "Alpha": replica(1, "tensorflow"),
                                       "Worker": replica(1, "tensorflow")})
    pods = [c["metadata"]["name"] for c in planning.plan(job, OPERATOR) if c["kind"] == "Pod"]
    assert pods == ["dist-worker-0", "dist-alpha-0", "dist-zeta-0"]


# ---------------------------------------------------------------------------
# §5.3 worked example: XGBoostJob xgb
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rt", "index", "rank"),
    [pytest.param("Master", 0, 0, id="master-0"), pytest.param("Worker", 0, 1, id="worker-0"),
     pytest.param("Worker", 1, 2, id="worker-1")],
)
def test_xgboost_xgb_example(rt: str, index: int, rank: int) -> None:
    job = load("XGBoostJob", "xgb", None, {"Master": replica(1, "xgboost"), "Worker": replica(2, "xgboost")})
    pod = planning.desired_pod(job, rt, index, OPERATOR)
    assert pod["metadata"]["name"] == f"xgb-{rt.lower()}-{index}"
    assert pod["metadata"]["namespace"] == "default"
    assert env_pairs(pod["spec"]["containers"][0]) == [
        ("MASTER_PORT", "9999"), ("MASTER_ADDR", "xgb-master-0"), ("WORLD_SIZE", "3"), ("RANK", str(rank)),
        ("PYTHONUNBUFFERED", "1"), ("WORKER_PORT", "9999"), ("WORKER_ADDRS", "xgb-worker-0,xgb-worker-1"),
    ]
    assert planning.desired_service(job, rt, index)["spec"]["ports"] == [{"name": "xgboostjob-port", "port": 9999}]


# ---------------------------------------------------------------------------
# §5.6 worked example: MPIJob pi
# ---------------------------------------------------------------------------


def pi() -> jobs.Job:
    launcher = replica(1, "mpi", container={"command": ["mpirun", "-n", "4", "python", "pi.py"]})
    worker = replica(2, "mpi", container={"command": ["/usr/sbin/sshd", "-De"]})
    return load("MPIJob", "pi", "ns", {"Launcher": launcher, "Worker": worker}, slotsPerWorker=2)


def running_worker(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": labels("mpijob-controller", "pi", "worker", 0),
                         "ownerReferences": [owner("MPIJob", "pi")]},
            "status": {"phase": "Running"}}


def test_mpi_pi_children_in_order_without_services() -> None:
    names = [(c["kind"], c["metadata"]["name"]) for c in planning.plan(pi(), OPERATOR)]
    assert names == [
        ("ServiceAccount", "pi-launcher"), ("ConfigMap", "pi-config"), ("Role", "pi-launcher"),
        ("RoleBinding", "pi-launcher"), ("Pod", "pi-worker-0"), ("Pod", "pi-worker-1"), ("Pod", "pi-launcher"),
    ]


def test_mpi_pi_rbac_and_config_map() -> None:
    observed = [running_worker("pi-worker-1"), running_worker("pi-worker-0")]
    children = by_name(planning.plan(pi(), OPERATOR, observed))
    app = {"name": "pi-launcher", "namespace": "ns", "labels": {"app": "pi", "training.kubeflow.org/job-name": "pi"},
           "ownerReferences": [owner("MPIJob", "pi")]}
    assert children[("ServiceAccount", "pi-launcher")] == {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": app}
    assert children[("Role", "pi-launcher")]["rules"][1]["resourceNames"] == ["pi-worker-0", "pi-worker-1"]
    assert children[("RoleBinding", "pi-launcher")] == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": app,
        "subjects": [{"kind": "ServiceAccount", "name": "pi-launcher", "namespace": "ns"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pi-launcher"},
    }
    config = children[("ConfigMap", "pi-config")]
    assert config["metadata"] == {**app, "name": "pi-config"}
    assert config["data"] == {
        "discover_hosts.sh": "#!/bin/sh\necho pi-worker-0:2\necho pi-worker-1:2",
        "hostfile": "pi-worker-0 slots=2\npi-worker-1 slots=2\n",
        "kubexec.sh": '#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n/opt/kube/kubectl exec ${POD_NAME} -- /bin/sh -c "$*"',
    }


def test_mpi_pi_worker_pod_exactly() -> None:
    assert planning.desired_pod(pi(), "Worker", 1, OPERATOR) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pi-worker-1",
            "namespace": "ns",
            "labels": labels("mpijob-controller", "pi", "worker", 1),
            "ownerReferences": [owner("MPIJob", "pi")],
        },
        "spec": {
            "containers": [{
                "name": "mpi",
                "image": "mpi:latest",
                "command": ["/usr/sbin/sshd", "-De"],
                "volumeMounts": [{"name": "mpi-job-config", "mountPath": "/etc/mpi"}],
            }],
            "volumes": [{"name": "mpi-job-config", "configMap": {
                "name": "pi-config", "items": [{"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555}]}}],
            "restartPolicy": "Never",
        },
    }


def test_mpi_worker_without_command_sleeps() -> None:
    job = load("MPIJob", "pi", "ns", {"Launcher": replica(1, "mpi"), "Worker": replica(1, "mpi")})
    container = planning.desired_pod(job, "Worker", 0, OPERATOR)["spec"]["containers"][0]
    assert (container["command"], container["args"]) == (["sleep"], ["365d"])


def test_mpi_pi_launcher_pod_exactly() -> None:
    assert planning.desired_pod(pi(), "Launcher", 0, OPERATOR) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pi-launcher",
            "namespace": "ns",
            "labels": labels("mpijob-controller", "pi", "launcher", None, master=True),
            "ownerReferences": [owner("MPIJob", "pi")],
        },
        "spec": {
            "containers": [{
                "name": "mpi",
                "image": "mpi:latest",
                "command": ["mpirun", "-n", "4", "python", "pi.py"],
                "env": [
                    {"name": "OMPI_MCA_plm_rsh_agent", "value": "/etc/mpi/kubexec.sh"},
                    {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": ""},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""},
                    {"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "rsh"},
                    {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC", "value": "/etc/mpi/kubexec.sh"},
                ],
                "volumeMounts": [
                    {"name": "mpi-job-kubectl", "mountPath": "/opt/kube"},
                    {"name": "mpi-job-config", "mountPath": "/etc/mpi"},
                ],
            }],
            "initContainers": [{
                "name": "kubectl-delivery",
                "image": "kubeflow/kubectl-delivery:latest",
                "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "TARGET_DIR", "value": "/opt/kube"}, {"name": "NAMESPACE", "value": "ns"}],
                "volumeMounts": [
                    {"name": "mpi-job-kubectl", "mountPath": "/opt/kube"},
                    {"name": "mpi-job-config", "mountPath": "/etc/mpi"},
                ],
                "resources": {
                    "limits": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
                    "requests": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
                },
            }],
            "serviceAccountName": "pi-launcher",
            "volumes": [
                {"name": "mpi-job-kubectl", "emptyDir": {}},
                {"name": "mpi-job-config", "configMap": {"name": "pi-config", "items": [
                    {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555},
                    {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                ]}},
            ],
            "restartPolicy": "Never",
        },
    }


def test_mpi_has_no_services() -> None:
    with pytest.raises(errors.PlanError, match="no per-replica Services"):
        planning.desired_service(pi(), "Worker", 0)


# ---------------------------------------------------------------------------
# Pods: restart policy, labels and annotations, finalizers, resources
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replica_policy", "pod_policy"),
    [
        pytest.param("ExitCode", "Never", id="exit-code-is-never"),
        pytest.param("Never", "Never", id="never"),
        pytest.param("Always", "Always", id="always"),
        pytest.param("OnFailure", "OnFailure", id="on-failure"),
    ],
)
def test_case_44_pod_restart_policy_mapping(replica_policy: str, pod_policy: str) -> None:
    worker = {**replica(1, "tensorflow", restartPolicy="Always"), "restartPolicy": replica_policy}
    job = load("TFJob", "tf", None, {"Worker": worker})
    assert planning.desired_pod(job, "Worker", 0, OPERATOR)["spec"]["restartPolicy"] == pod_policy
    assert planning.pod_restart_policy(replica_policy) == pod_policy  # type: ignore[arg-type]


def test_case_35_template_labels_annotations_and_finalizers_are_copied_operator_labels_win() -> None:
    worker = replica(1, "tensorflow", container={"resources": {"limits": {"nvidia.com/gpu": 2}}})
    worker["template"]["metadata"] = {
        "name": "ignored",
        "labels": {"label1": "1", "training.kubeflow.org/replica-index": "9"},
        "annotations": {"annotation1": "1"},
        "finalizers": ["example.com/keep"],
    }
    pod = planning.desired_pod(load("TFJob", "tf", None, {"Worker": worker}), "Worker", 0, OPERATOR)
    assert pod["metadata"]["labels"] == {"label1": "1", **labels("tfjob-controller", "tf", "worker", 0, master=True)}
    assert pod["metadata"]["annotations"] == {"annotation1": "1"}
    assert pod["metadata"]["finalizers"] == ["example.com/keep"]
    assert pod["metadata"]["name"] == "tf-worker-0"
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 2}}


def test_planning_never_changes_the_job() -> None:
    job = mnist()
    before = job.model_dump(mode="json")
    planning.plan(job, settings.OperatorSettings(gang_scheduler_name="volcano"))
    assert job.model_dump(mode="json") == before


def test_same_input_gives_the_same_bytes() -> None:
    operator = settings.OperatorSettings(gang_scheduler_name="volcano")
    first = json.dumps(planning.plan(dist(), operator))
    assert all(json.dumps(planning.plan(dist(), operator)) == first for _ in range(3))


@pytest.mark.parametrize(
    ("rt", "index", "expected"),
    [pytest.param("Worker", 0, 2, id="present"), pytest.param("PS", 0, 0, id="absent")],
)
def test_replica_count(rt: str, index: int, expected: int) -> None:
    job = load("TFJob", "tf", None, {"Worker": replica(2, "tensorflow")})
    assert planning.replica_count(job, rt) == expected


# ---------------------------------------------------------------------------
# Services (§4.6, cases 36–37)
# ---------------------------------------------------------------------------


def test_case_36_service_for_an_empty_replica_type() -> None:
    job = load("TFJob", "test-tfjob", None, {"": replica(1, "tensorflow", container={
        "ports": [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]})})
    service = planning.desired_service(job, "", 0)
    expected_labels = labels("tfjob-controller", "test-tfjob", "", 0)
    assert service["metadata"]["name"] == "test-tfjob--0"
    assert service["metadata"]["labels"] == service["spec"]["selector"] == expected_labels
    assert service["spec"] == {"clusterIP": "None", "selector": expected_labels,
                               "ports": [{"name": "tfjob-port", "port": 2222}]}


def test_case_37_every_child_has_exactly_one_owner_reference() -> None:
    operator = settings.OperatorSettings(gang_scheduler_name="volcano")
    for child in planning.plan(dist(), operator):
        assert child["metadata"]["ownerReferences"] == [owner("TFJob", "dist")]


def test_service_ports_keep_template_order() -> None:
    ports = [{"name": "zeta", "containerPort": 1}, {"name": "alpha", "containerPort": 2}]
    job = load("TFJob", "tf", None, {"Worker": replica(1, "tensorflow", container={"ports": ports})})
    assert planning.desired_service(job, "Worker", 0)["spec"]["ports"] == [
        {"name": "zeta", "port": 1}, {"name": "alpha", "port": 2}, {"name": "tfjob-port", "port": 2222},
    ]


def test_service_without_the_default_container_fails() -> None:
    job = load("TFJob", "tf", None, {"Worker": replica(1, "tensorflow")})
    assert job.replica_specs is not None
    worker = job.replica_specs["Worker"]
    assert worker is not None
    worker.template["spec"]["containers"][0]["name"] = "other"
    with pytest.raises(errors.PlanError, match="failed to find the port"):
        planning.desired_service(job, "Worker", 0)


# ---------------------------------------------------------------------------
# Gang scheduling (§6.9)
# ---------------------------------------------------------------------------


def gang_job(**run_policy: Any) -> jobs.Job:
    master = replica(1, "pytorch", container={"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}})
    worker = replica(2, "pytorch", container={"resources": {"limits": {"cpu": "1", "memory": "512Mi",
                                                                       "nvidia.com/gpu": "1"}}})
    job = load("PyTorchJob", "mnist", "ns", {"Master": master, "Worker": worker}, runPolicy=run_policy)
    job.metadata.annotations = {"team": "a"}
    return job


VOLCANO = settings.OperatorSettings(gang_scheduler_name="Volcano")
PLUGINS = settings.OperatorSettings(gang_scheduler_name="scheduler-plugins-scheduler")


def test_volcano_pod_group_comes_first() -> None:
    children = planning.plan(gang_job(schedulingPolicy={"priorityClass": "high"}), VOLCANO)
    assert children[0] == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "mnist", "namespace": "ns", "annotations": {"team": "a"},
                     "ownerReferences": [owner("PyTorchJob", "mnist")]},
        "spec": {
            "minMember": 3,
            "queue": "default",
            "priorityClassName": "high",
            "minResources": {"cpu": "2500m", "memory": "2Gi", "nvidia.com/gpu": "2"},
        },
    }


def test_volcano_pods_are_decorated() -> None:
    pod = planning.desired_pod(gang_job(), "Worker", 1, VOLCANO)
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": "mnist", "volcano.sh/task-spec": "worker"}


def test_volcano_keeps_an_existing_queue() -> None:
    existing = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "mnist", "namespace": "ns"}, "spec": {"queue": "team-a"}}
    children = planning.plan(gang_job(schedulingPolicy={"queue": "other"}), VOLCANO, [existing])
    assert children[0]["spec"]["queue"] == "team-a"


def test_scheduler_plugins_pod_group_and_pod_label() -> None:
    job = gang_job(schedulingPolicy={"minAvailable": 2, "scheduleTimeoutSeconds": 60})
    children = planning.plan(job, PLUGINS)
    assert children[0] == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "mnist", "namespace": "ns", "annotations": {"team": "a"},
                     "ownerReferences": [owner("PyTorchJob", "mnist")]},
        "spec": {
            "minMember": 2,
            "minResources": {"cpu": "1500m", "memory": "1536Mi", "nvidia.com/gpu": "1"},
            "scheduleTimeoutSeconds": 60,
        },
    }
    pod = by_name(children)[("Pod", "mnist-master-0")]
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "mnist"
    assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert "annotations" not in pod["metadata"]


def test_explicit_min_resources_and_template_scheduler_name_are_kept() -> None:
    job = gang_job(schedulingPolicy={"minResources": {"cpu": "10"}})
    assert job.replica_specs is not None
    master = job.replica_specs["Master"]
    assert master is not None
    master.template["spec"]["schedulerName"] = "mine"
    children = by_name(planning.plan(job, VOLCANO))
    assert children[("PodGroup", "mnist")]["spec"]["minResources"] == {"cpu": "10"}
    assert children[("Pod", "mnist-master-0")]["spec"]["schedulerName"] == "mine"
    assert planning.template_warnings(job, VOLCANO) == [(
        "SetPodTemplateSchedulerName",
        "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten",
    )]


@pytest.mark.parametrize(
    ("operator", "run_policy"),
    [pytest.param(OPERATOR, {}, id="gang-off"), pytest.param(VOLCANO, {"suspend": True}, id="suspended")],
)
def test_no_pod_group(operator: settings.OperatorSettings, run_policy: dict[str, Any]) -> None:
    assert [c for c in planning.plan(gang_job(**run_policy), operator) if c["kind"] == "PodGroup"] == []


def test_mpi_pod_group_counts_launcher_and_workers() -> None:
    children = planning.plan(pi(), VOLCANO)
    assert (children[0]["kind"], children[0]["spec"]["minMember"]) == ("PodGroup", 3)
    launcher = by_name(children)[("Pod", "pi-launcher")]
    assert launcher["metadata"]["annotations"]["volcano.sh/task-spec"] == "launcher"


@pytest.mark.parametrize(
    ("quantities", "expected"),
    [
        pytest.param(["100m", "900m"], "1", id="milli-to-unit"),
        pytest.param(["1", "500m"], "1500m", id="unit-plus-milli"),
        pytest.param(["1Gi", "512Mi"], "1536Mi", id="binary"),
        pytest.param(["1G", "1G"], "2G", id="decimal-si"),
        pytest.param(["1Gi", "1G"], "2073741824", id="binary-first-not-divisible"),
        pytest.param([1, 0.5], "1500m", id="yaml-numbers"),
        pytest.param(["1e3", "1e3"], "2e3", id="exponent"),
    ],
)
def test_min_resources_sum_like_kubernetes_quantities(quantities: list[Any], expected: str) -> None:
    containers = [{"name": "pytorch", "image": "x", "resources": {"requests": {"cpu": q}}} for q in quantities]
    job = load("PyTorchJob", "q", None, {"Worker": {"replicas": 1, "template": {"spec": {"containers": containers}}}})
    assert planning.min_resources(job, 1) == {"cpu": expected}


# ---------------------------------------------------------------------------
# HPA (§8) and template warnings (§4.5)
# ---------------------------------------------------------------------------


def test_elastic_job_with_metrics_plans_an_hpa_before_its_pods() -> None:
    job = load("PyTorchJob", "elastic-job", None, {"Worker": replica(1, "pytorch")},
               elasticPolicy={"minReplicas": 1, "maxReplicas": 3, "metrics": [{"type": "Resource"}]})
    kinds = [(c["kind"], c["metadata"]["name"]) for c in planning.plan(job, OPERATOR)]
    assert kinds == [("HorizontalPodAutoscaler", "elastic-job"), ("Pod", "elastic-job-worker-0"),
                     ("Service", "elastic-job-worker-0")]


@pytest.mark.parametrize(
    ("template_spec", "expected"),
    [
        pytest.param({}, [], id="none"),
        pytest.param({"restartPolicy": "Always"}, [("SetPodTemplateRestartPolicy",
                     "Restart policy in pod template will be overwritten by restart policy in replica spec")],
                     id="restart-policy"),
    ],
)
def test_template_warnings(template_spec: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    job = load("TFJob", "tf", None, {"Worker": replica(2, "tensorflow", **template_spec), "PS": replica(1, "tensorflow", **template_spec)})
    assert planning.template_warnings(job, OPERATOR) == expected


# ---------------------------------------------------------------------------
# Controller-level cases, checked on the plan (21, 30) and the registry
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "name", "specs", "port_name", "env"),
    [
        pytest.param(
            "PyTorchJob", "test-job-master-0",
            {"Master": replica(1, "pytorch", container={"ports": [{"name": "pytorchjob-port", "containerPort": 8080}]}),
             "Worker": replica(2, "pytorch", container={"ports": [{"name": "pytorchjob-port", "containerPort": 8080}]})},
            "pytorchjob-port",
            {"MASTER_PORT": "8080", "MASTER_ADDR": "test-job-master-0", "PET_NPROC_PER_NODE": "auto"},
            id="case-21-pytorch-custom-port",
        ),
        pytest.param(
            "PaddleJob", "test-job-master-0",
            {"Master": replica(1, "paddle", container={"ports": [{"name": "master", "containerPort": 8080}]}),
             "Worker": replica(2, "paddle", container={"ports": [{"name": "master", "containerPort": 8080}]})},
            "master",
            {"PADDLE_MASTER": "$(POD_IP_DUMMY):8080"},
            id="case-30-paddle-master",
        ),
    ],
)
def test_master_pod_and_service_with_a_custom_port(
    kind: str, name: str, specs: dict[str, Any], port_name: str, env: dict[str, str]
) -> None:
    children = by_name(planning.plan(load(kind, "test-job", None, specs), OPERATOR))
    pod, service = children[("Pod", name)], children[("Service", name)]
    pod_env = {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}
    assert {key: pod_env[key] for key in env} == env
    assert service["spec"]["ports"] == [{"name": port_name, "port": 8080}]
    assert pod["metadata"]["ownerReferences"] == service["metadata"]["ownerReferences"] == [owner(kind, "test-job")]


def test_every_kind_has_a_plugin() -> None:
    assert set(frameworks.REGISTRY) == set(jobs.KINDS)
    assert all(frameworks.REGISTRY[kind].kind == kind for kind in jobs.KINDS)
