"""MPIJob kubeflow.org/v2beta1 end to end (spec Part A), on both tiers: the launcher is a
``batch/v1`` Job (run by sim/'s Job controller or kube-controller-manager's), the workers are
pods behind one headless Service, the SSH Secret and the ConfigMap with the hostfile and
``discover_hosts.sh`` are created first; the job reaches Succeeded with the exact env and
hostfile of each MPI implementation, and elastic Horovod workers follow ``replicas``."""

from __future__ import annotations

from typing import Any

import pytest

from shared.kube import clients, resources
from tests.fixtures.pipeline import Pipeline

MPIJOBS = resources.MPIJOBS_V2BETA1


def mpijob(name: str, implementation: str | None, workers: int, launcher_run: str = "2s",
           **spec: Any) -> dict[str, Any]:
    def template(container: str, run: str, command: list[str]) -> dict[str, Any]:
        return {
            "metadata": {"annotations": {"sim.kto.dev/duration": run}},
            "spec": {"containers": [{"name": container, "image": "mpioperator/mpi-pi:openmpi", "command": command}]},
        }

    body: dict[str, Any] = {
        "slotsPerWorker": 1,
        "runPolicy": {"cleanPodPolicy": "Running"},
        "sshAuthMountPath": "/home/mpiuser/.ssh",
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": template("mpi-launcher", launcher_run, ["mpirun", "-n", "2", "/home/mpiuser/pi"])},
            "Worker": {"replicas": workers, "template": template("mpi-worker", "600s", ["/usr/sbin/sshd", "-De"])},
        },
        **spec,
    }
    if implementation is not None:
        body["mpiImplementation"] = implementation
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name}, "spec": body}


async def get(pipeline: Pipeline, rt: resources.ResourceType, name: str) -> dict[str, Any] | None:
    try:
        return await pipeline.client.get(rt, pipeline.namespace, name)
    except clients.ApiError as exc:
        if exc.not_found:
            return None
        raise


async def present(pipeline: Pipeline, rt: resources.ResourceType, name: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def check() -> bool:
        obj = await get(pipeline, rt, name)
        if obj is not None:
            found["obj"] = obj
        return obj is not None

    await pipeline.eventually(check, what=f"{rt.kind} {name}")
    return found["obj"]


async def live_workers(pipeline: Pipeline, job: str) -> dict[str, str]:
    items, _ = await pipeline.client.list(
        resources.PODS, pipeline.namespace,
        label_selector=f"training.kubeflow.org/job-name={job},training.kubeflow.org/job-role=worker")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items if not p["metadata"].get("deletionTimestamp")}


def hosts(names: list[str], job: str, namespace: str, line: str) -> str:
    return "".join(line.format(host=f"{name}.{job}.{namespace}.svc") + "\n" for name in names)


LAUNCHER_ENV = {
    "OpenMPI": [("OMPI_MCA_orte_keep_fqdn_hostnames", "true"), ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
                ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"), ("OMPI_MCA_orte_set_default_slots", "1")],
    "Intel": [("I_MPI_HYDRA_HOST_FILE", "/etc/mpi/hostfile"),
              ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"), ("I_MPI_PERHOST", "1")],
    "MPICH": [("HYDRA_HOST_FILE", "/etc/mpi/hostfile"), ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10")],
}
HOSTFILE_LINE = {"OpenMPI": "{host} slots=1", "Intel": "{host}:1", "MPICH": "{host}:1"}


@pytest.mark.parametrize("implementation", [
    pytest.param(None, id="openmpi-by-default"),
    pytest.param("Intel", id="intel"),
    pytest.param("MPICH", id="mpich"),
])
async def test_an_mpijob_v2beta1_runs_its_launcher_job_and_succeeds_with_the_env_and_hostfile_of_its_mpi(
    pipeline: Pipeline, implementation: str | None,
) -> None:
    impl = implementation or "OpenMPI"
    ns = pipeline.namespace
    await pipeline.submit(mpijob("pi", implementation, 2))
    config = await present(pipeline, resources.CONFIGMAPS, "pi-config")
    assert config["data"]["hostfile"] == hosts(["pi-worker-0", "pi-worker-1"], "pi", ns, HOSTFILE_LINE[impl])
    secret = await present(pipeline, resources.SECRETS, "pi-ssh")
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert set(secret["data"]) == {"ssh-privatekey", "ssh-publickey"}
    service = await present(pipeline, resources.SERVICES, "pi")
    assert service["spec"]["clusterIP"] == "None"
    launcher = await present(pipeline, resources.BATCH_JOBS, "pi-launcher")
    owner = launcher["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"], owner["name"]) == ("kubeflow.org/v2beta1", "MPIJob", "pi")
    container = launcher["spec"]["template"]["spec"]["containers"][0]
    env = [(e["name"], e.get("value", "")) for e in container.get("env") or []]  # "" is omitted on the wire
    expected = [("K_MPI_JOB_ROLE", "launcher"), *LAUNCHER_ENV[impl],
                ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    assert env == expected

    job = await pipeline.wait_for("MPIJob", "pi", "Succeeded", timeout=60)
    found = {c["type"]: c for c in job["status"]["conditions"]}
    assert job["status"]["conditions"][0]["reason"] == "MPIJobCreated"
    assert (found["Succeeded"]["status"], found["Succeeded"]["reason"]) == ("True", "MPIJobSucceeded")
    # Running is False once it finished; a run that ended between two status writes never
    # showed Running, and mpi-operator then appends Running=False after Succeeded (A.12.2).
    assert found["Running"]["status"] == "False" and found["Running"]["reason"] == "MPIJobRunning"
    served = await pipeline.client.get(MPIJOBS, ns, "pi")
    assert served["apiVersion"] == "kubeflow.org/v2beta1" and served["spec"]["mpiImplementation"] == impl

    async def workers_cleaned() -> bool:
        return not await live_workers(pipeline, "pi")
    await pipeline.eventually(workers_cleaned, what="workers deleted by cleanPodPolicy Running")


async def test_elastic_horovod_workers_follow_replicas_and_discover_hosts_lists_the_running_ones(
    pipeline: Pipeline,
) -> None:
    ns = pipeline.namespace
    await pipeline.submit(mpijob("hvd", None, 2, launcher_run="600s"))

    async def discovered(names: list[str]) -> None:
        expected = "#!/bin/sh\n" + "".join(f"echo {n}.hvd.{ns}.svc\n" for n in names)
        seen: dict[str, Any] = {}

        async def check() -> bool:
            config = await get(pipeline, resources.CONFIGMAPS, "hvd-config")
            seen["script"] = (config or {}).get("data", {}).get("discover_hosts.sh")
            return seen["script"] == expected

        try:
            await pipeline.eventually(check, timeout=30)
        except AssertionError:
            raise AssertionError(f"discover_hosts.sh {seen.get('script')!r}, expected {expected!r}") from None

    await discovered(["hvd-worker-0", "hvd-worker-1"])
    first = await live_workers(pipeline, "hvd")
    await pipeline.client.patch(MPIJOBS, ns, "hvd", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 3}}}})
    await discovered(["hvd-worker-0", "hvd-worker-1", "hvd-worker-2"])
    grown = await live_workers(pipeline, "hvd")
    assert {n: grown[n] for n in first} == first, "a worker that stays was restarted"
    await pipeline.client.patch(MPIJOBS, ns, "hvd", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 1}}}})
    await discovered(["hvd-worker-0"])

    async def shrunk() -> bool:
        return await live_workers(pipeline, "hvd") == {"hvd-worker-0": first["hvd-worker-0"]}
    await pipeline.eventually(shrunk, what="workers 1 and 2 removed, worker 0 kept")
    config = await get(pipeline, resources.CONFIGMAPS, "hvd-config")
    assert config is not None
    assert config["data"]["hostfile"] == f"hvd-worker-0.hvd.{ns}.svc slots=1\n"
