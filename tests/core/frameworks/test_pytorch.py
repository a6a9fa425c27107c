"""PyTorchJob plugin: env (§5.1), init-pytorch, elastic env and HPA (§8); cases 22–25."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import jobs
from shared.core import defaulting, errors, planning, settings
from shared.core.frameworks import pytorch

OPERATOR = settings.OperatorSettings()


def replica(replicas: int, port: int | None = None, port_name: str = "pytorchjob-port") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "pytorch", "image": "pytorch:latest"}
    if port is not None:
        container["ports"] = [{"name": port_name, "containerPort": port}]
    return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}


def make_job(name: str = "test-job", **spec: Any) -> jobs.Job:
    document = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": spec}
    return defaulting.set_defaults(jobs.load(document))


def env_of(job: jobs.Job, replica_type: str, index: int) -> list[tuple[str, str]]:
    return [(var["name"], var["value"]) for var in pytorch.PyTorch().cluster_env(job, replica_type, index, OPERATOR)]


MASTER_WORKER = {"Master": replica(1), "Worker": replica(2)}


def test_case_22_master_env_in_upstream_order() -> None:
    job = make_job("mnist", pytorchReplicaSpecs=MASTER_WORKER)
    assert env_of(job, "Master", 0) == [
        ("PYTHONUNBUFFERED", "1"),
        ("MASTER_PORT", "23456"),
        ("PET_MASTER_PORT", "23456"),
        ("MASTER_ADDR", "mnist-master-0"),
        ("PET_MASTER_ADDR", "mnist-master-0"),
        ("WORLD_SIZE", "3"),
        ("RANK", "0"),
        ("PET_NODE_RANK", "0"),
        ("PET_NPROC_PER_NODE", "auto"),
        ("PET_NNODES", "3"),
    ]


@pytest.mark.parametrize("index", [pytest.param(0, id="worker-0"), pytest.param(1, id="worker-1")])
def test_case_22_worker_rank_is_index_plus_one(index: int) -> None:
    env = dict(env_of(make_job("mnist", pytorchReplicaSpecs=MASTER_WORKER), "Worker", index))
    assert env["RANK"] == env["PET_NODE_RANK"] == str(index + 1)


def test_numeric_nproc_per_node_multiplies_world_size() -> None:
    env = dict(env_of(make_job(pytorchReplicaSpecs=MASTER_WORKER, nprocPerNode="2"), "Master", 0))
    assert (env["WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == ("6", "2")


def test_custom_master_port_case_21() -> None:
    job = make_job(pytorchReplicaSpecs={"Master": replica(1, 8080), "Worker": replica(2, 8080)})
    env = dict(env_of(job, "Master", 0))
    assert (env["MASTER_PORT"], env["MASTER_ADDR"], env["PET_NPROC_PER_NODE"]) == ("8080", "test-job-master-0", "auto")


def test_worker_only_job_gets_no_master_addr_rank_or_world_size() -> None:
    job = make_job(pytorchReplicaSpecs={"Worker": replica(2)})
    assert env_of(job, "Worker", 1) == [("PYTHONUNBUFFERED", "1"), ("PET_NPROC_PER_NODE", "auto"), ("PET_NNODES", "2")]


def test_case_23_elastic_worker_env() -> None:
    job = make_job(
        "elastic-job",
        pytorchReplicaSpecs={"Worker": replica(1, 8080)},
        elasticPolicy={"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 3, "maxRestarts": 3,
                       "metrics": [{"type": "Resource", "resource": {"name": "cpu"}}]},
    )
    env = env_of(job, "Worker", 0)
    assert env == [
        ("PYTHONUNBUFFERED", "1"),
        ("PET_NPROC_PER_NODE", "auto"),
        ("PET_RDZV_ENDPOINT", "elastic-job-worker-0:8080"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_NNODES", "1:3"),
        ("PET_MAX_RESTARTS", "3"),
    ]


def test_case_24_elastic_generator_gives_exactly_six_vars() -> None:
    job = make_job(
        pytorchReplicaSpecs={"Worker": replica(1)},
        elasticPolicy={
            "rdzvHost": "localhost", "rdzvPort": 1234, "rdzvId": "rdzv-id", "rdzvBackend": "c10d",
            "minReplicas": 1, "maxReplicas": 3, "maxRestarts": 3,
            "rdzvConf": [{"key": "rdzv-conf-name", "value": "rdzv-conf-value"},
                         {"key": "rdzv-conf-name-1", "value": "rdzv-conf-value-1"}],
        },
    )
    assert {(v["name"], v["value"]) for v in pytorch.elastic_env(job)} == {
        ("PET_MAX_RESTARTS", "3"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_RDZV_ENDPOINT", "localhost:1234"),
        ("PET_RDZV_ID", "rdzv-id"),
        ("PET_RDZV_CONF", "rdzv-conf-name=rdzv-conf-value,rdzv-conf-name-1=rdzv-conf-value-1"),
        ("PET_NNODES", "1:3"),
    }


def test_case_24_no_elastic_policy_no_elastic_vars() -> None:
    assert pytorch.elastic_env(make_job(pytorchReplicaSpecs={"Worker": replica(1)})) == []


def test_deprecated_nproc_and_standalone_come_last_in_the_elastic_block() -> None:
    job = make_job(pytorchReplicaSpecs={"Worker": replica(2)}, elasticPolicy={"standalone": True, "nProcPerNode": 4})
    assert env_of(job, "Worker", 0)[-2:] == [("PET_NPROC_PER_NODE", "4"), ("PET_STANDALONE", "")]
    assert [name for name, _ in env_of(job, "Worker", 0)].count("PET_NPROC_PER_NODE") == 1


@pytest.mark.parametrize(
    ("specs", "replica_type", "expected"),
    [
        pytest.param({"Worker": replica(2)}, "Worker", 0, id="worker-only-worker-pod"),
        pytest.param(MASTER_WORKER, "Worker", 1, id="master-worker-worker-pod"),
        pytest.param(MASTER_WORKER, "Master", 0, id="master-worker-master-pod"),
    ],
)
def test_case_25_init_container_only_on_workers_of_jobs_with_a_master(
    specs: dict[str, Any], replica_type: str, expected: int
) -> None:
    job = make_job(pytorchReplicaSpecs=specs)
    assert len(pytorch.PyTorch().init_containers(job, replica_type, 0, OPERATOR)) == expected


def test_init_container_waits_for_master_with_configured_image_and_tries() -> None:
    operator = settings.OperatorSettings(pytorch_init_container_image="busybox:1", pytorch_init_container_max_tries=7)
    [init] = pytorch.PyTorch().init_containers(make_job("mnist", pytorchReplicaSpecs=MASTER_WORKER), "Worker", 0, operator)
    assert init == {
        "name": "init-pytorch",
        "image": "busybox:1",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
        "command": [
            "sh",
            "-c",
            "err=1;for i in $(seq 7); do if nslookup mnist-master-0; then err=0 && break; fi;"
            "echo waiting for master; sleep 2; done; exit $err",
        ],
    }


@pytest.mark.parametrize(
    ("specs", "replica_type", "index", "expected"),
    [
        pytest.param(MASTER_WORKER, "Master", 0, True, id="master"),
        pytest.param(MASTER_WORKER, "Worker", 0, False, id="worker-0-with-master"),
        pytest.param({"Worker": replica(2)}, "Worker", 0, True, id="worker-0-without-master"),
        pytest.param({"Worker": replica(2)}, "Worker", 1, False, id="worker-1-without-master"),
    ],
)
def test_master_role(specs: dict[str, Any], replica_type: str, index: int, expected: bool) -> None:
    assert pytorch.PyTorch().is_master_role(make_job(pytorchReplicaSpecs=specs), replica_type, index) is expected


def test_master_without_default_port_fails_with_port_not_found() -> None:
    job = make_job(pytorchReplicaSpecs=MASTER_WORKER)
    assert job.replica_specs is not None
    master = job.replica_specs["Master"]
    assert master is not None
    master.template["spec"]["containers"][0]["ports"] = [{"name": "other", "containerPort": 1}]
    with pytest.raises(errors.PlanError, match="port not found") as caught:
        pytorch.PyTorch().cluster_env(job, "Master", 0, OPERATOR)
    assert caught.value.field == "spec.pytorchReplicaSpecs[Master].template.spec.containers"


def test_case_23_hpa_scales_the_job_between_elastic_bounds() -> None:
    metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    job = make_job("elastic-job", pytorchReplicaSpecs={"Worker": replica(1, 8080)},
                   elasticPolicy={"minReplicas": 1, "maxReplicas": 3, "metrics": metrics})
    job.metadata.uid = "uid-9"
    [hpa] = pytorch.PyTorch().auxiliary_children(job, OPERATOR, ())
    assert hpa == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "elastic-job",
            "namespace": "default",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "elastic-job",
                                 "uid": "uid-9", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "scaleTargetRef": {"kind": "PyTorchJob", "name": "elastic-job", "apiVersion": "kubeflow.org/v1"},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": metrics,
        },
    }
    assert hpa["spec"]["metrics"] is not metrics


@pytest.mark.parametrize(
    ("elastic", "run_policy"),
    [
        pytest.param({"minReplicas": 1, "maxReplicas": 3}, {}, id="no-metrics"),
        pytest.param({"metrics": []}, {"suspend": True}, id="suspended"),
    ],
)
def test_no_hpa_without_metrics_or_when_suspended(elastic: dict[str, Any], run_policy: dict[str, Any]) -> None:
    job = make_job(pytorchReplicaSpecs={"Worker": replica(2)}, elasticPolicy=elastic, runPolicy=run_policy)
    assert [c for c in planning.plan(job, OPERATOR) if c["kind"] == "HorizontalPodAutoscaler"] == []


@pytest.mark.parametrize(
    ("replicas", "expected", "warned"),
    [
        pytest.param(3, 3, False, id="within-the-bounds"),
        pytest.param(6, 4, True, id="above-max-held-at-max"),
        pytest.param(0, 1, True, id="below-min-held-at-min"),
    ],
)
def test_an_elastic_job_runs_its_worker_replicas_held_within_min_and_max(
    replicas: int, expected: int, warned: bool,
) -> None:
    job = make_job(pytorchReplicaSpecs={"Worker": replica(replicas)},
                   elasticPolicy={"minReplicas": 1, "maxReplicas": 4})
    workers = [p for p in planning.plan(job, OPERATOR)
               if p["kind"] == "Pod" and p["metadata"]["name"].startswith("test-job-worker-")]
    assert len(workers) == expected
    reasons = {reason: message for reason, message in planning.template_warnings(job, OPERATOR)}
    assert (pytorch.ELASTIC_RANGE_REASON in reasons) is warned
    if warned:
        assert reasons[pytorch.ELASTIC_RANGE_REASON].startswith(
            f"spec.pytorchReplicaSpecs.Worker.replicas: {replicas} is outside spec.elasticPolicy [minReplicas 1, maxReplicas 4]")
