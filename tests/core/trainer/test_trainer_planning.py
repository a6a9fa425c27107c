"""A TrainJob and its runtime → the JobSet (and PodGroup, MPI hostfile) Trainer v2.3 builds,
field by field against upstream's plugins and their unit tests' expected objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.core import errors
from shared.core.trainer import patching, planning

from . import trainer_builders as b

INDEX = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


def test_the_jobset_is_named_as_the_trainjob_and_controlled_by_it() -> None:
    jobset = planning.build(b.train_job("mnist"), b.runtime("torch-distributed")).jobset
    assert (jobset["apiVersion"], jobset["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert jobset["metadata"]["name"] == "mnist" and jobset["metadata"]["namespace"] == "default"
    assert jobset["metadata"]["ownerReferences"] == [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "mnist", "uid": "uid-1",
        "controller": True, "blockOwnerDeletion": True}]


def test_torch_sets_upstreams_pet_env_after_the_trainers_own_and_opens_the_rendezvous_port() -> None:
    job = b.train_job("mnist", trainer={"numNodes": 2, "image": "me/train:1", "command": ["torchrun", "t.py"],
                                        "args": ["--epochs", "1"], "env": [{"name": "A", "value": "1"}],
                                        "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})
    jobset = planning.build(job, b.runtime("torch-distributed")).jobset
    rjob = jobset["spec"]["replicatedJobs"][0]
    assert rjob["replicas"] == 1
    assert (rjob["template"]["spec"]["parallelism"], rjob["template"]["spec"]["completions"]) == (2, 2)
    node = b.container(jobset, "node")
    assert (node["image"], node["command"], node["args"]) == ("me/train:1", ["torchrun", "t.py"], ["--epochs", "1"])
    assert list(b.env(node).items()) == [
        ("A", "1"), ("PET_NNODES", "2"), ("PET_NPROC_PER_NODE", "auto"), ("PET_NODE_RANK", INDEX),
        ("PET_MASTER_ADDR", "mnist-node-0-0.mnist"), ("PET_MASTER_PORT", "29500")]
    assert node["ports"] == [{"containerPort": 29500}]
    assert node["resources"] == {"limits": {"nvidia.com/gpu": 2}}


@pytest.mark.parametrize(("resources", "nproc", "expected"), [
    pytest.param({"limits": {"cpu": "2.5"}}, None, "3", id="auto-is-the-cpu-limit-rounded-up"),
    pytest.param({"requests": {"cpu": "500m"}}, None, "1", id="auto-is-at-least-one"),
    pytest.param({}, None, "1", id="auto-without-resources-is-one"),
    pytest.param({"requests": {"nvidia.com/gpu": 4}}, None, "auto", id="auto-stays-auto-with-gpus"),
    pytest.param({"requests": {"cpu": "8"}}, 3, "3", id="an-explicit-count-wins"),
])
def test_torch_resolves_the_processes_per_node_as_upstream(resources: dict[str, Any], nproc: int | None,
                                                           expected: str) -> None:
    trainer: dict[str, Any] = {"resourcesPerNode": resources}
    if nproc is not None:
        trainer["numProcPerNode"] = nproc
    jobset = planning.build(b.train_job(trainer=trainer), b.runtime("torch-distributed")).jobset
    assert b.env(b.container(jobset, "node"))["PET_NPROC_PER_NODE"] == expected


def test_runtime_patches_merge_into_the_jobset_and_its_metadata_as_upstreams_example() -> None:
    runtime, job = b.runtime("torch-distributed"), b.example("02-runtime-patches.yaml")[0]
    job["metadata"].update(namespace="default", uid="u")
    jobset = planning.build(job, runtime).jobset
    assert jobset["metadata"]["labels"] == {"team": "ml-platform", "cost-center": "research"}
    assert jobset["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"}
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "training-sa" and pod["nodeSelector"] == {"node-type": "training"}
    assert pod["tolerations"][0]["key"] == "training-workload"
    node = b.container(jobset, "node")
    assert node["image"] == runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["containers"][0]["image"]
    assert node["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
    assert b.env(node)["PET_NPROC_PER_NODE"] == "2"


def test_a_strategic_merge_patch_merges_lists_by_their_keys_and_replaces_the_others() -> None:
    original = {"replicatedJobs": [{"name": "a", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}], "tolerations": [{"key": "old"}]}}}}},
        {"name": "b"}]}
    patch = {"replicatedJobs": [{"name": "a", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "node", "env": [{"name": "Y", "value": "2"}]}, {"name": "side"}],
        "tolerations": [{"key": "new"}]}}}}}]}
    merged = patching.merge(original, patch)
    pod = merged["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["containers"] == [{"name": "node", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
                                 {"name": "side"}]
    assert pod["tolerations"] == [{"key": "new"}]
    assert [r["name"] for r in merged["replicatedJobs"]] == ["a", "b"]
    assert original["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["tolerations"] == [{"key": "old"}]


def test_initializers_get_the_storage_uri_env_and_secret_of_the_trainjob() -> None:
    runtime, job = b.example("05-multi-step.yaml")
    job["metadata"].update(namespace="default", uid="u")
    job["spec"]["initializer"]["dataset"].update(env=[{"name": "HF", "value": "x"}], secretRef={"name": "hf"})
    jobset = planning.build(job, runtime).jobset
    init = b.container(jobset, "dataset-initializer", "dataset-initializer")
    assert list(b.env(init).items()) == [("STORAGE_URI", "hf://tatsu-lab/alpaca"), ("HF", "x")]
    assert init["envFrom"] == [{"secretRef": {"name": "hf"}}]
    assert jobset["spec"]["replicatedJobs"][0]["replicas"] == 1
    assert jobset["spec"]["replicatedJobs"][1]["dependsOn"] == [{"name": "dataset-initializer", "status": "Complete"}]
    assert jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] == 2


def test_mpi_with_the_launcher_as_a_node_sizes_the_nodes_writes_the_hostfile_and_mounts_the_ssh_key() -> None:
    job = b.train_job("ds", "deepspeed-distributed", trainer={"numNodes": 3,
                                                              "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})
    plan = planning.build(job, b.runtime("deepspeed-distributed"))
    node, launcher = plan.jobset["spec"]["replicatedJobs"]
    assert node["template"]["spec"]["parallelism"] == 2 and launcher["template"]["spec"]["parallelism"] == 1
    assert plan.mpi and plan.hostfile is not None
    assert plan.hostfile["metadata"]["name"] == "ds-mpi-hostfile"
    assert plan.hostfile["data"] == {"hostfile": "ds-node-0-0.ds slots=2\nds-node-0-1.ds slots=2\n"
                                                 "ds-launcher-0-0.ds slots=2\n"}
    launcher_node = b.container(plan.jobset, "launcher")
    assert b.env(launcher_node) == {"OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                                    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                                    "OMPI_MCA_orte_set_default_slots": "2",
                                    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10"}
    assert launcher_node["volumeMounts"] == [{"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"},
                                             {"name": "mpi-hostfile", "mountPath": "/etc/mpi"}]
    assert b.container(plan.jobset, "node")["volumeMounts"] == [{"name": "mpi-ssh-auth",
                                                                 "mountPath": "/home/mpiuser/.ssh"}]
    volume = node["template"]["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == "ds-mpi-ssh-auth" and volume["secret"]["defaultMode"] == 0o400
    secret = planning.ssh_secret(job, b.KEYS)
    assert (secret["type"], secret["immutable"], sorted(secret["data"])) == (
        "kubernetes.io/ssh-auth", True, ["ssh-privatekey", "ssh-publickey"])


@pytest.mark.parametrize(("runtime", "expected"), [
    pytest.param("jax-distributed", {"JAX_NUM_PROCESSES": "3", "JAX_PROCESS_ID": INDEX,
                                     "JAX_COORDINATOR_ADDRESS": "job-node-0-0.job:29500"}, id="jax"),
    pytest.param("xgboost-distributed", {"DMLC_TRACKER_URI": "job-node-0-0.job", "DMLC_TRACKER_PORT": "29500",
                                         "DMLC_TASK_ID": INDEX, "DMLC_NUM_WORKER": "3"}, id="xgboost"),
])
def test_jax_and_xgboost_set_their_coordinator_env(runtime: str, expected: dict[str, Any]) -> None:
    jobset = planning.build(b.train_job(trainer={"numNodes": 3}), b.runtime(runtime)).jobset
    node = b.container(jobset, "node")
    assert b.env(node) == expected and node["ports"] == [{"containerPort": 29500}]


def test_coscheduling_labels_the_pods_and_sums_the_gang_into_a_podgroup() -> None:
    runtime = b.runtime("torch-distributed")
    runtime["spec"]["podGroupPolicy"] = {"coscheduling": {}}
    job = b.train_job(trainer={"numNodes": 3, "resourcesPerNode": {"requests": {"cpu": "2", "memory": "1Gi"}}})
    plan = planning.build(job, runtime)
    pod_labels = plan.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels == {"scheduling.x-k8s.io/pod-group": "job"}
    assert plan.pod_group is not None and plan.pod_group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert plan.pod_group["spec"] == {"minMember": 3, "minResources": {"cpu": "6", "memory": "3Gi"},
                                      "scheduleTimeoutSeconds": 60}


def test_volcano_annotates_the_pods_and_its_podgroup_takes_the_queue_and_topology() -> None:
    runtime, job = b.example("04-volcano-integration.yaml")
    runtime["spec"]["template"]["metadata"] = {"annotations": {"scheduling.volcano.sh/queue-name": "q"}}
    runtime["spec"]["podGroupPolicy"]["volcano"] = {"networkTopology": {"mode": "hard", "highestTierAllowed": 1}}
    job["metadata"].update(namespace="default", uid="u")
    plan = planning.build(job, runtime)
    template = plan.jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": "volcano-example"}
    assert plan.pod_group is not None and plan.pod_group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert plan.pod_group["spec"]["minMember"] == 4 and plan.pod_group["spec"]["queue"] == "q"
    assert plan.pod_group["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}


def test_suspend_is_carried_to_the_jobset() -> None:
    assert planning.build(b.train_job(suspend=True), b.runtime("torch-distributed")).jobset["spec"]["suspend"] is True
    assert "suspend" not in planning.build(b.train_job(), b.runtime("torch-distributed")).jobset["spec"]


def test_torchtune_completes_the_tune_run_command_with_the_recipe_and_config_of_the_runtimes_model() -> None:
    job = b.train_job("tune", "torchtune-llama3.2-1b", trainer={
        "command": ["tune", "run"], "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})
    node = b.container(planning.build(job, b.runtime("torchtune-llama3.2-1b")).jobset, "node")
    assert node["command"][:5] == ["tune", "run", "--rdzv_endpoint=tune-node-0-0.tune:29500",
                                   "full_finetune_distributed", "--config"]
    assert node["command"][5] == "llama3_2/1B_full"
    assert "PET_MASTER_ADDR" not in b.env(node)


@pytest.mark.parametrize(("change", "field"), [
    pytest.param(lambda r, j: r["spec"]["mlPolicy"].update(mpi={}), "spec.mlPolicy", id="two-ml-policies"),
    pytest.param(lambda r, j: r["spec"]["mlPolicy"].update(torch=None, flux={}), "spec.mlPolicy.flux",
                 id="flux-not-run-by-kto"),
    pytest.param(lambda r, j: r["spec"]["mlPolicy"]["torch"].update(
        envInjection={"targets": [{"jobName": "node", "containerNames": ["ghost"]}]}),
        "spec.mlPolicy.torch.envInjection.targets[0]", id="env-injection-into-a-missing-container"),
    pytest.param(lambda r, j: j["spec"]["trainer"].update(resourcesPerNode={"limits": {"cpu": "lots"}}),
                 "resources.limits[cpu]", id="a-quantity-that-does-not-parse"),
])
def test_a_plan_that_cannot_be_made_names_the_field(change: Any, field: str) -> None:
    runtime, job = b.runtime("torch-distributed"), b.train_job(trainer={})
    change(runtime, job)
    with pytest.raises(errors.PlanError) as raised:
        planning.build(job, runtime)
    assert raised.value.field == field


def test_the_runtime_snapshot_gives_back_the_runtime_it_holds_and_refuses_another_jobs() -> None:
    job, runtime = b.train_job(), b.runtime("torch-distributed")
    config_map = planning.snapshot(job, runtime)
    assert config_map["metadata"]["name"] == "job-runtime-snapshot"
    assert planning.from_snapshot(job, config_map)["spec"] == runtime["spec"]
    stranger = copy.deepcopy(config_map)
    stranger["metadata"]["ownerReferences"][0]["uid"] = "another"
    with pytest.raises(errors.PlanError, match="owned by another object"):
        planning.from_snapshot(job, stranger)
    renamed = b.train_job(runtime_name="jax-distributed")
    with pytest.raises(errors.PlanError, match="refers to the wrong runtime"):
        planning.from_snapshot(renamed, config_map)


def test_building_leaves_the_trainjob_and_runtime_as_they_were() -> None:
    job = b.train_job("tune", "torchtune-llama3.2-1b", trainer={"command": ["tune", "run"]})
    runtime = b.runtime("torchtune-llama3.2-1b")
    before = copy.deepcopy((job, runtime))
    planning.build(job, runtime)
    assert (job, runtime) == before


@pytest.mark.parametrize("name", [
    "torch-distributed", "deepspeed-distributed", "mlx-distributed", "jax-distributed", "xgboost-distributed",
    "torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b", "torch-distributed-with-cache",
])
def test_every_builtin_runtime_of_upstream_makes_a_jobset_whose_trainer_step_is_sized(name: str) -> None:
    trainer: dict[str, Any] = {"command": ["tune", "run"]} if name.startswith("torchtune") else {"numNodes": 2}
    plan = planning.build(b.train_job("j", name, trainer=trainer), b.runtime(name))
    steps = {r["name"]: r["template"]["spec"]["parallelism"] for r in plan.jobset["spec"]["replicatedJobs"]}
    if name.startswith("torchtune"):
        assert steps["node"] == 1
    elif plan.mpi:
        assert steps == {"node": 1, "launcher": 1}, "runLauncherAsNode: one node is the launcher"
    else:
        assert steps["node"] == 2
