"""A job applied to the cluster becomes pods and an up-to-date status, through Kafka only."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from shared.bus import producing, reading, records
from shared.kube import clients, resources
from tests.bus.test_consuming import read_topic
from tests.fixtures.pipeline import Pipeline

SIM = {"sim.kto.dev/duration": "1s"}


def template(container: str, annotations: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {**SIM, **(annotations or {})}},
        "spec": {"containers": [{"name": container, "image": "busybox", **extra}]},
    }


def job(kind: str, name: str, specs: dict[str, tuple[int, str]], container: str, **spec: Any) -> dict[str, Any]:
    field = {
        "PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs",
        "MPIJob": "mpiReplicaSpecs", "PaddleJob": "paddleReplicaSpecs", "JAXJob": "jaxReplicaSpecs",
    }[kind]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            field: {
                rt: {"replicas": n, "restartPolicy": policy, "template": template(container)}
                for rt, (n, policy) in specs.items()
            },
            **spec,
        },
    }


SIX_KINDS = [
    pytest.param(
        job("PyTorchJob", "pt", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")}, "pytorch"),
        ["pt-master-0", "pt-worker-0", "pt-worker-1"], {"pt-worker-1": {"RANK": "2", "WORLD_SIZE": "3"}},
        id="pytorchjob",
    ),
    pytest.param(
        job("TFJob", "tf", {"Chief": (1, "Never"), "PS": (1, "Never"), "Worker": (2, "Never")}, "tensorflow"),
        ["tf-chief-0", "tf-ps-0", "tf-worker-0", "tf-worker-1"], {},
        id="tfjob",
    ),
    pytest.param(
        job("XGBoostJob", "xgb", {"Master": (1, "Never"), "Worker": (2, "ExitCode")}, "xgboost"),
        ["xgb-master-0", "xgb-worker-0", "xgb-worker-1"], {"xgb-master-0": {"MASTER_ADDR": "xgb-master-0"}},
        id="xgboostjob",
    ),
    pytest.param(
        job("MPIJob", "pi", {"Launcher": (1, "Never"), "Worker": (2, "Never")}, "mpi", slotsPerWorker=2),
        ["pi-launcher", "pi-worker-0", "pi-worker-1"],
        {"pi-launcher": {"OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile"}},
        id="mpijob",
    ),
    pytest.param(
        job("PaddleJob", "paddle", {"Master": (1, "OnFailure"), "Worker": (2, "OnFailure")}, "paddle"),
        ["paddle-master-0", "paddle-worker-0", "paddle-worker-1"], {"paddle-worker-0": {"PADDLE_NNODES": "3"}},
        id="paddlejob",
    ),
    pytest.param(
        job("JAXJob", "jax", {"Worker": (2, "Never")}, "jax"),
        ["jax-worker-0", "jax-worker-1"], {"jax-worker-1": {"PROCESS_ID": "1", "NUM_PROCESSES": "2"}},
        id="jaxjob",
    ),
]


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


@pytest.mark.parametrize(("manifest", "pod_names", "env"), SIX_KINDS)
async def test_each_kind_goes_created_running_succeeded_with_the_planned_children(
    pipeline: Pipeline, manifest: dict[str, Any], pod_names: list[str], env: dict[str, dict[str, str]]
) -> None:
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    await pipeline.submit(manifest)
    seen: dict[str, dict[str, Any]] = {}

    async def all_pods_created() -> bool:
        for pod in await pipeline.pods(name):
            seen[pod["metadata"]["name"]] = pod
        return set(pod_names) <= set(seen)

    await pipeline.eventually(all_pods_created, what=f"pods of {name}")
    for pod_name, expected in env.items():
        assert expected.items() <= env_of(seen[pod_name]).items()
    if kind != "MPIJob":
        # Pods and Services go out concurrently: the last Service may follow the last pod.
        services: list[dict[str, Any]] = []

        async def all_services_created() -> bool:
            services[:], _ = await pipeline.client.list(
                resources.SERVICES, pipeline.namespace, f"training.kubeflow.org/job-name={name}")
            return {s["metadata"]["name"] for s in services} == set(pod_names)

        await pipeline.eventually(all_services_created, what=f"services of {name}")
        assert all(s["spec"]["clusterIP"] == "None" for s in services)
    done = await pipeline.wait_for(kind, name, "Succeeded")
    types = [c["type"] for c in done["status"]["conditions"]]
    assert types[0] == "Created" and types[-1] == "Succeeded"
    assert done["status"]["startTime"] and done["status"]["completionTime"]
    history = await reading.read_history(pipeline.kafka, pipeline.key(kind, name))
    actions = [r.action for r in history if isinstance(r, records.Decision)]
    assert actions.count("child_created") >= len(pod_names)
    assert "status_written" in actions


async def test_a_replica_exiting_non_zero_under_never_fails_the_job_with_the_upstream_reason(pipeline: Pipeline) -> None:
    manifest = job("PyTorchJob", "bad", {"Master": (1, "Never"), "Worker": (1, "Never")}, "pytorch")
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    worker["metadata"]["annotations"]["sim.kto.dev/exit-code"] = "1"
    master = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    master["metadata"]["annotations"]["sim.kto.dev/duration"] = "30s"
    await pipeline.submit(manifest)
    failed = await pipeline.wait_for("PyTorchJob", "bad", "Failed")
    last = failed["status"]["conditions"][-1]
    assert last["reason"] == "PyTorchJobFailed"
    assert last["message"] == "PyTorchJob bad is failed because 1 Worker replica(s) failed."


async def test_an_invalid_job_is_marked_failed_with_field_paths_and_not_reconciled(pipeline: Pipeline) -> None:
    manifest = job("PyTorchJob", "invalid", {"Master": (2, "OnFailure")}, "pytorch")
    await pipeline.submit(manifest)
    failed = await pipeline.wait_for("PyTorchJob", "invalid", "Failed")
    last = failed["status"]["conditions"][-1]
    assert last["reason"] == "PyTorchJobFailedValidation"
    assert "spec.pytorchReplicaSpecs[Master].replicas" in last["message"]
    assert await pipeline.pods("invalid") == []


async def test_deleting_a_job_removes_its_children(pipeline: Pipeline) -> None:
    manifest = job("TFJob", "gone", {"Worker": (2, "Never")}, "tensorflow")
    manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "60s"
    await pipeline.submit(manifest)
    await pipeline.wait_for("TFJob", "gone", "Running")
    await pipeline.client.delete(resources.JOB_TYPES["TFJob"], pipeline.namespace, "gone", propagation="Background")

    async def no_children() -> bool:
        services, _ = await pipeline.client.list(resources.SERVICES, pipeline.namespace, "training.kubeflow.org/job-name=gone")
        return not await pipeline.pods("gone") and not services

    await pipeline.eventually(no_children, what="children garbage-collected")


async def test_two_reconcilers_share_the_partitions_and_every_job_completes(pipeline: Pipeline) -> None:
    pipeline.start_reconciler("reconciler-2")
    names = [f"many-{i}" for i in range(6)]
    for name in names:
        await pipeline.submit(job("JAXJob", name, {"Worker": (2, "Never")}, "jax"))
    for name in names:
        await pipeline.wait_for("JAXJob", name, "Succeeded", timeout=45)
    for name in names:
        pods = await pipeline.pods(name)
        assert sorted(p["metadata"]["name"] for p in pods) == [f"{name}-worker-0", f"{name}-worker-1"]


async def test_a_poison_record_goes_to_the_dead_letter_topic_and_the_partition_moves_on(pipeline: Pipeline) -> None:
    key = pipeline.key("JAXJob", "after-poison")
    async with producing.Publisher(pipeline.kafka, "test", "test") as publisher:
        await publisher.send_raw(pipeline.kafka.jobs_topic, b"{not json", key=key.encode(), headers=[])
    await pipeline.submit(job("JAXJob", "after-poison", {"Worker": (1, "Never")}, "jax"))
    await pipeline.wait_for("JAXJob", "after-poison", "Succeeded")
    dead = await read_topic(pipeline.kafka, pipeline.kafka.dlq_topic)
    assert any(getattr(message, "value", None) == b"{not json" for message in dead)


async def test_status_is_not_written_again_when_nothing_changed(pipeline: Pipeline) -> None:
    await pipeline.submit(job("JAXJob", "quiet", {"Worker": (1, "Never")}, "jax"))
    try:
        await pipeline.wait_for("JAXJob", "quiet", "Succeeded")
    except AssertionError:
        print("PODS", await pipeline.pods("quiet"))
        raise
    await asyncio.sleep(1.0)

    def status_writes() -> int:
        return sum(
            1 for r in pipeline.requests()
            if r["verb"] in ("update", "patch") and r["subresource"] == "status" and r["name"] == "quiet"
        )

    before = status_writes()
    job_type = resources.JOB_TYPES["JAXJob"]
    await pipeline.client.patch(job_type, pipeline.namespace, "quiet", {"metadata": {"labels": {"touched": uuid.uuid4().hex}}})
    await asyncio.sleep(1.5)
    assert status_writes() == before


async def test_an_mpijob_gets_its_launcher_rbac_and_configmap_before_any_pod(pipeline: Pipeline) -> None:
    """Pods and services go out concurrently; what pods refer to (the launcher's
    ServiceAccount, its Role and RoleBinding, the hostfile ConfigMap) is created first."""
    await pipeline.submit(job("MPIJob", "ordered", {"Launcher": (1, "Never"), "Worker": (3, "Never")}, "mpi"))
    await pipeline.wait_for("MPIJob", "ordered", "Succeeded")
    creates = [  # the only job of this cluster: every child create is one of its
        r["resource"].split(".")[0] for r in pipeline.requests() if r["verb"] == "create" and r["code"] == 201
    ]
    first_pod = creates.index("pods")
    before = set(creates[:first_pod])
    assert {"configmaps", "serviceaccounts", "roles", "rolebindings"} <= before, creates


async def test_a_jobs_status_writes_are_paced_and_a_burst_of_pod_changes_is_written_once(
    pipeline: Pipeline,
) -> None:
    """Four pods starting together and finishing together: Created and Running are
    written together, then Succeeded (the sim starts pods well within the write interval)."""
    await pipeline.submit(job("PyTorchJob", "paced", {"Master": (1, "OnFailure"), "Worker": (3, "OnFailure")}, "pytorch"))
    done = await pipeline.wait_for("PyTorchJob", "paced", "Succeeded")
    assert done["status"]["replicaStatuses"]["Worker"]["succeeded"] == 3
    await asyncio.sleep(1.0)
    writes = [
        r["time"] for r in pipeline.requests()
        if r["verb"] == "update" and r["subresource"] == "status" and r["name"] == "paced"
    ]
    assert 2 <= len(writes) <= 3, writes
    assert all(later - earlier >= 0.45 for earlier, later in zip(writes, writes[1:])), writes


async def test_a_job_deleted_while_no_watcher_ran_is_noticed_and_its_deletion_published(
    pipeline: Pipeline,
) -> None:
    await pipeline.stop("reconciler")
    pipeline.start_reconciler("checker", check_after=1.0)
    manifest = job("JAXJob", "unseen-delete", {"Worker": (1, "Never")}, "jax")
    manifest["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "60s"
    await pipeline.submit(manifest)
    await pipeline.wait_for("JAXJob", "unseen-delete", "Running")
    await pipeline.stop("watcher")
    await pipeline.client.delete(resources.JOB_TYPES["JAXJob"], pipeline.namespace, "unseen-delete")
    key = pipeline.key("JAXJob", "unseen-delete")

    async def deletion_published() -> bool:
        history = await reading.read_history(pipeline.kafka, key)
        return any(isinstance(r, records.Observation) and r.event == "DELETED" and r.source == "reconciler"
                   and r.object_kind == "JAXJob" for r in history)

    await pipeline.eventually(deletion_published, timeout=30, what="the reconciler's DELETED observation")
    history = await reading.read_history(pipeline.kafka, key)
    assert any(isinstance(r, records.Decision) and r.action == "job_check_due" for r in history)


async def test_an_mpijob_configmap_deleted_by_hand_is_put_back(pipeline: Pipeline) -> None:
    manifest = job("MPIJob", "hostfile", {"Launcher": (1, "Never"), "Worker": (2, "Never")}, "mpi")
    for spec in manifest["spec"]["mpiReplicaSpecs"].values():
        spec["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "60s"
    await pipeline.submit(manifest)
    await pipeline.wait_for("MPIJob", "hostfile", "Running")
    first = await pipeline.client.get(resources.CONFIGMAPS, pipeline.namespace, "hostfile-config")
    assert first["metadata"]["labels"] == {"app": "hostfile", "training.kubeflow.org/job-name": "hostfile"}
    await pipeline.client.delete(resources.CONFIGMAPS, pipeline.namespace, "hostfile-config")

    async def put_back() -> bool:
        try:
            again = await pipeline.client.get(resources.CONFIGMAPS, pipeline.namespace, "hostfile-config")
        except clients.ApiError as exc:
            if exc.not_found:
                return False
            raise
        return bool(again["metadata"]["uid"] != first["metadata"]["uid"])

    await pipeline.eventually(put_back, what="the ConfigMap re-created")


async def test_a_replica_failing_retryably_is_restarted_backoff_limit_times_then_the_job_fails(
    pipeline: Pipeline,
) -> None:
    """Upstream restarts such a pod for ever (its operator restarts do not count, §6.7);
    kto counts them on the job and fails it with upstream's backoff reason."""
    manifest = job("PyTorchJob", "flaky", {"Master": (1, "ExitCode"), "Worker": (1, "ExitCode")}, "pytorch",
                   runPolicy={"backoffLimit": 2})
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["template"]["metadata"]["annotations"]["sim.kto.dev/duration"] = "60s"
    specs["Worker"]["template"]["metadata"]["annotations"].update(
        {"sim.kto.dev/exit-code": "137", "sim.kto.dev/duration": "0.3s"})
    await pipeline.submit(manifest)
    failed = await pipeline.wait_for("PyTorchJob", "flaky", "Failed", timeout=45)
    last = failed["status"]["conditions"][-1]
    assert last["reason"] == "PyTorchJobFailed"
    assert last["message"] == "Job flaky has failed because it has reached the specified backoff limit"
    assert failed["metadata"]["annotations"]["kto.dev/replica-restarts"] == "2"
    worker_creates = [
        r for r in pipeline.requests()
        if r["verb"] == "create" and r["resource"] == "pods" and r["code"] == 201
    ]
    assert len(worker_creates) == 1 + 3, "the master once, the worker once and twice again"


async def test_when_the_active_watcher_stops_a_standby_takes_over_and_jobs_go_on(pipeline: Pipeline) -> None:
    """Two watchers of one cluster: the lease holder publishes; stopped, the standby takes the lease
    and publishes what changed since (on both tiers: the lease is a real coordination.k8s.io Lease)."""
    await pipeline.submit(job("JAXJob", "before", {"Worker": (1, "Never")}, "jax"))
    await pipeline.wait_for("JAXJob", "before", "Succeeded")  # published by the first watcher: it holds the lease
    pipeline.start_watcher("standby")
    await asyncio.sleep(1.0)
    await pipeline.stop("watcher")
    await pipeline.submit(job("JAXJob", "after", {"Worker": (2, "Never")}, "jax"))
    await pipeline.wait_for("JAXJob", "after", "Succeeded", timeout=45)
    before = await reading.read_history(pipeline.kafka, pipeline.key("JAXJob", "before"))
    after = await reading.read_history(pipeline.kafka, pipeline.key("JAXJob", "after"))
    first = next(r for r in before if isinstance(r, records.Observation) and r.source == "watcher")
    assert first.instance == "watcher"
    assert {r.instance for r in after if isinstance(r, records.Observation) and r.source == "watcher"} == {"standby"}
