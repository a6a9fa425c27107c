"""Children of an MPIJob v2beta1 (A.8–A.10): acceptance cases 12–17, env and hostfile per implementation."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from shared.core import settings
from shared.core.mpi_v2 import planning, sshkeys

import mpi_v2_builders as b

OMPI = [
    {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
    {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
    {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
    {"name": "OMPI_MCA_orte_set_default_slots", "value": "1"},
]
NVIDIA = [{"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}]
ROLE = {"name": "K_MPI_JOB_ROLE", "value": "launcher"}


@pytest.mark.parametrize(
    ("implementation", "slots", "as_worker", "expected"),
    [
        pytest.param("OpenMPI", 1, False, [ROLE, *OMPI, *NVIDIA], id="openmpi"),
        pytest.param("OpenMPI", 4, True, [ROLE, *OMPI[:3], {"name": "OMPI_MCA_orte_set_default_slots", "value": "4"}],
                     id="openmpi-launcher-as-worker"),
        pytest.param("Intel", 5, False, [
            ROLE,
            {"name": "I_MPI_HYDRA_HOST_FILE", "value": "/etc/mpi/hostfile"},
            {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "value": "-o ConnectionAttempts=10"},
            {"name": "I_MPI_PERHOST", "value": "5"},
            *NVIDIA,
        ], id="intel"),
        pytest.param("MPICH", 5, False, [
            ROLE,
            {"name": "HYDRA_HOST_FILE", "value": "/etc/mpi/hostfile"},
            {"name": "HYDRA_LAUNCH_EXTRA_ARGS", "value": "-o ConnectionAttempts=10"},
            *NVIDIA,
        ], id="mpich-has-no-slots-variable"),
    ],
)
def test_the_launcher_gets_its_implementation_s_env_after_the_user_s(
    implementation: str, slots: int, as_worker: bool, expected: list[dict[str, str]]
) -> None:
    job = b.defaulted(mpiImplementation=implementation, slotsPerWorker=slots, runLauncherAsWorker=as_worker,
                      launcher={"env": [{"name": "FOO", "value": "bar"}]})
    template = planning.desired_launcher_template(job, b.OPERATOR)
    assert template["spec"]["containers"][0]["env"] == [{"name": "FOO", "value": "bar"}, *expected]


def test_case_12_launcher_job_and_worker_pod_with_defaults() -> None:
    job = b.defaulted("foo", "bar", workers=1)
    launcher = planning.desired_launcher(job, b.OPERATOR)
    owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "foo", "uid": "uid-job",
             "controller": True, "blockOwnerDeletion": True}
    ssh_volume = {"name": "ssh-auth", "secret": {"secretName": "foo-ssh", "defaultMode": 0o600, "items": [
        {"key": "ssh-privatekey", "path": "id_rsa"}, {"key": "ssh-publickey", "path": "id_rsa.pub"},
        {"key": "ssh-publickey", "path": "authorized_keys"}]}}
    assert launcher == {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "foo-launcher", "namespace": "bar",
                     "labels": {"app": "foo", "training.kubeflow.org/job-name": "foo"}, "ownerReferences": [owner]},
        "spec": {
            "podReplacementPolicy": "Failed",
            "template": {
                "metadata": {"labels": {"training.kubeflow.org/operator-name": "mpi-operator",
                                        "training.kubeflow.org/job-name": "foo",
                                        "training.kubeflow.org/job-role": "launcher"},
                             "ownerReferences": [owner]},
                "spec": {
                    "hostname": "foo-launcher", "subdomain": "foo", "restartPolicy": "OnFailure",
                    "containers": [{
                        "name": "launcher", "image": "mpi", "command": ["mpirun"],
                        "env": [ROLE, *OMPI, *NVIDIA],
                        "volumeMounts": [{"name": "ssh-auth", "mountPath": "/root/.ssh"},
                                         {"name": "mpi-job-config", "mountPath": "/etc/mpi"}],
                    }],
                    "volumes": [ssh_volume, {"name": "mpi-job-config", "configMap": {"name": "foo-config", "items": [
                        {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                        {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555}]}}],
                },
            },
        },
    }
    assert planning.desired_worker(job, 0, b.OPERATOR) == {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "foo-worker-0", "namespace": "bar",
                     "labels": {"training.kubeflow.org/operator-name": "mpi-operator",
                                "training.kubeflow.org/job-name": "foo", "training.kubeflow.org/job-role": "worker",
                                "training.kubeflow.org/replica-index": "0"},
                     "ownerReferences": [owner]},
        "spec": {
            "hostname": "foo-worker-0", "subdomain": "foo", "dnsConfig": {"searches": ["foo.bar.svc.cluster.local"]},
            "restartPolicy": "Never",
            "containers": [{"name": "worker", "image": "mpi", "command": ["/usr/sbin/sshd", "-De"],
                            "env": [{"name": "K_MPI_JOB_ROLE", "value": "worker"}],
                            "volumeMounts": [{"name": "ssh-auth", "mountPath": "/root/.ssh"}]}],
            "volumes": [ssh_volume],
        },
    }


def test_case_13_run_launcher_as_worker_shifts_the_worker_indices() -> None:
    job = b.defaulted("foo", "bar", workers=1, runLauncherAsWorker=True)
    template = planning.desired_launcher_template(job, b.OPERATOR)
    assert template["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "0"
    assert template["spec"]["containers"][0]["env"] == [ROLE, *OMPI]
    worker = planning.desired_worker(job, 0, b.OPERATOR)
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    assert planning.desired_service(job)["spec"]["publishNotReadyAddresses"] is True


def test_case_14_overrides_are_carried_over() -> None:
    job = b.defaulted(
        "bar", "foo", workers=13, sshAuthMountPath="/home/mpiuser/.ssh", slotsPerWorker=5, mpiImplementation="Intel",
        run_policy={"ttlSecondsAfterFinished": 1, "activeDeadlineSeconds": 2, "backoffLimit": 3},
        launcher={"env": [{"name": "FOO", "value": "bar"}]}, launcher_pod_spec={"hostNetwork": True},
        worker={"command": ["/entrypoint.sh"]}, worker_pod_spec={"hostNetwork": True},
    )
    launcher = planning.desired_launcher(job, b.OPERATOR)
    spec = launcher["spec"]
    assert (spec["ttlSecondsAfterFinished"], spec["activeDeadlineSeconds"], spec["backoffLimit"]) == (1, 2, 3)
    pod = spec["template"]["spec"]
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert [e["name"] for e in pod["containers"][0]["env"]] == [
        "FOO", "K_MPI_JOB_ROLE", "I_MPI_HYDRA_HOST_FILE", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "I_MPI_PERHOST",
        "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"]
    assert pod["containers"][0]["env"][4] == {"name": "I_MPI_PERHOST", "value": "5"}
    assert pod["volumes"][0]["secret"].get("defaultMode") is None
    assert pod["containers"][0]["volumeMounts"][0] == {"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh"}
    worker = planning.desired_worker(job, 12, b.OPERATOR)
    assert worker["metadata"]["name"] == "bar-worker-12"
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "12"
    assert worker["spec"]["containers"][0]["command"] == ["/entrypoint.sh"]
    assert worker["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert worker["spec"]["dnsConfig"]["searches"] == ["bar.foo.svc.cluster.local"]


def test_the_replica_restart_policy_overrides_the_template_s_and_the_template_is_not_changed() -> None:
    job = b.defaulted(launcher_pod_spec={"restartPolicy": "Always"})
    assert planning.launcher_template_sets_restart_policy(job)
    assert planning.desired_launcher_template(job, b.OPERATOR)["spec"]["restartPolicy"] == "OnFailure"
    assert job.replica("Launcher") is not None
    assert "env" not in job.spec.dump()["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


DOMAIN = settings.OperatorSettings(cluster_domain="cluster.local")


@pytest.mark.parametrize(
    ("job", "operator", "expected"),
    [
        pytest.param(b.defaulted("openmpi-without-slots", "tenant-a", runLauncherAsWorker=True), b.OPERATOR,
                     "openmpi-without-slots-launcher.openmpi-without-slots.tenant-a.svc slots=1\n"
                     "openmpi-without-slots-worker-0.openmpi-without-slots.tenant-a.svc slots=1\n"
                     "openmpi-without-slots-worker-1.openmpi-without-slots.tenant-a.svc slots=1\n",
                     id="case-15-openmpi-launcher-as-worker"),
        pytest.param(b.defaulted("pi", "default", workers=1, runLauncherAsWorker=True), DOMAIN,
                     "pi-launcher.pi.default.svc.cluster.local slots=1\npi-worker-0.pi.default.svc.cluster.local slots=1\n",
                     id="case-15-cluster-domain"),
        pytest.param(b.defaulted("pi", "default", workers=None, runLauncherAsWorker=True), b.OPERATOR,
                     "pi-launcher.pi.default.svc slots=1\n", id="case-15-no-workers"),
        pytest.param(b.defaulted("intelmpi-with-slots", "project-x", workers=1, slotsPerWorker=10,
                                 mpiImplementation="Intel"), b.OPERATOR,
                     "intelmpi-with-slots-worker-0.intelmpi-with-slots.project-x.svc:10\n", id="case-16-intel"),
        pytest.param(b.defaulted("intelmpi-with-slots", "project-x", workers=1, slotsPerWorker=10,
                                 mpiImplementation="MPICH"), b.OPERATOR,
                     "intelmpi-with-slots-worker-0.intelmpi-with-slots.project-x.svc:10\n", id="case-16-mpich"),
        pytest.param(b.defaulted("pi", "default", workers=2), b.OPERATOR,
                     "pi-worker-0.pi.default.svc slots=1\npi-worker-1.pi.default.svc slots=1\n", id="a9-example"),
    ],
)
def test_the_hostfile_lists_every_host_in_its_implementation_s_syntax(job: Any, operator: Any, expected: str) -> None:
    assert planning.hostfile(job, operator) == expected


def running(job: Any, *indices: int, phase: str = "Running") -> list[dict[str, Any]]:
    return [b.worker(job, i, phase) for i in indices]


@pytest.mark.parametrize(
    ("as_worker", "pods", "expected"),
    [
        pytest.param(False, [2, 0, 1], "#!/bin/sh\necho test-job-worker-0.test-job.default.svc\n"
                     "echo test-job-worker-1.test-job.default.svc\necho test-job-worker-2.test-job.default.svc\n",
                     id="case-17-sorted"),
        pytest.param(False, [], "#!/bin/sh\n", id="case-17-no-pods"),
        pytest.param(True, [0], "#!/bin/sh\necho test-job-launcher.test-job.default.svc\n"
                     "echo test-job-worker-0.test-job.default.svc\n", id="case-17-launcher-first"),
        pytest.param(False, [10, 2], "#!/bin/sh\necho test-job-worker-10.test-job.default.svc\n"
                     "echo test-job-worker-2.test-job.default.svc\n", id="string-order"),
    ],
)
def test_case_17_discover_hosts_lists_running_workers(as_worker: bool, pods: list[int], expected: str) -> None:
    job = b.defaulted("test-job", workers=11, runLauncherAsWorker=as_worker)
    observed = running(job, *pods) + running(job, 3, phase="Pending") + running(job, 4, phase="Failed")
    assert planning.discover_hosts(job, observed, b.OPERATOR) == expected


def test_the_ssh_secret_holds_the_key_pair_base64_encoded() -> None:
    secret = planning.desired_secret(b.defaulted(), b.KEYS)
    assert secret["type"] == "kubernetes.io/ssh-auth" and secret["metadata"]["name"] == "foo-ssh"
    assert base64.b64decode(secret["data"]["ssh-privatekey"]) == b.KEYS.private_pem
    assert base64.b64decode(secret["data"]["ssh-publickey"]) == b.KEYS.public_openssh
    assert planning.secret_is_complete(secret)
    assert not planning.secret_is_complete({**secret, "data": {"ssh-privatekey": "eA=="}})


def test_resuming_syncs_scheduling_directives_onto_the_launcher_template() -> None:
    job = b.defaulted(launcher_pod_spec={"nodeSelector": {"zone": "a"}, "tolerations": [{"key": "k"}]})
    current = b.launcher(job, suspend=True)
    template = current["spec"]["template"]
    template["metadata"]["labels"]["kueue"] = "kept"
    template["spec"]["schedulingGates"] = [{"name": "gone"}]
    template["spec"]["nodeSelector"] = {"zone": "b"}
    resumed = planning.resumed_launcher(job, current, b.OPERATOR)
    assert resumed["spec"]["suspend"] is False
    assert resumed["spec"]["template"]["metadata"]["labels"]["kueue"] == "kept"
    assert resumed["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
    assert "schedulingGates" not in resumed["spec"]["template"]["spec"]
    assert current["spec"]["suspend"] is True, "the observed object is not changed"
