"""Kubeflow Trainer v2's SDK (the ``kubeflow`` package 0.5.x, ``TrainerClient`` with its Kubernetes
backend), unchanged, against kto on both tiers, call by call.

The client starts by reading the ConfigMap ``kubeflow-trainer-public`` kto publishes; ``list_runtimes``
and ``get_runtime`` read upstream's built-in runtimes, applied unchanged; ``train`` creates a TrainJob
from a function (``CustomTrainer``: the SDK's generated ``bash -c`` heredoc, then ``python`` or
``torchrun``) or from a container (``CustomTrainerContainer``); ``list_jobs`` and ``get_job`` find its
steps (``node-0``, ``node-1`` …, the initializers) from the pods' JobSet labels; ``get_job_logs`` reads
a step's container log, following it too; ``wait_for_job_status``, ``get_job_events``,
``get_runtime_packages`` and ``delete_job``; and the same client against a real ``kto up``. The nodes run pods as local processes (sim/node/processes.py), so the logs are what
the training code printed; initializer containers, which have no command, are simulated. With torch
installed, a ``CustomTrainer`` trains with DDP (gloo, CPU) across two nodes through torchrun, node 1
reaching node 0 at ``PET_MASTER_ADDR``.
"""

from __future__ import annotations

import importlib.util
import logging
import pathlib
from typing import Any

import pytest

from kto import stack
from shared.kube import resources
from tests.fixtures.pipeline import Pipeline
from tests.sdk import test_kubeflow_sdk
from tests.sdk.conftest import call, trainer_client

pytest.importorskip("kubeflow.trainer", reason="the kubeflow SDK is not installed (pip install -e '.[test]')")

FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
BACKEND_LOGGER = "kubeflow.trainer.backends.kubernetes.backend"


def runtime(name: str, framework: str, ml_policy: dict[str, Any], *replicated_jobs: dict[str, Any]) -> dict[str, Any]:
    """A namespaced TrainingRuntime."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": name, "labels": {FRAMEWORK_LABEL: framework}},
            "spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": list(replicated_jobs)}}}}


def replicated_job(name: str, step: str, container: dict[str, Any], *, pod_spec: dict[str, Any] | None = None,
                   **job_spec: Any) -> dict[str, Any]:
    """A replicated Job of a runtime: ``step`` is its ``trainjob-ancestor-step`` label."""
    return {"name": name, "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
        "spec": {**job_spec, "template": {"spec": {**(pod_spec or {}), "containers": [container]}}}}}


def initialized_runtime() -> dict[str, Any]:
    """A runtime shaped as upstream's torchtune runtimes (dataset and model initializers, then the nodes
    once both are Complete), with no ML framework of its own (plain ML: the SDK runs a function with
    ``python``)."""
    # Upstream's initializers must mount the volume "initializer" (its torchtune runtimes claim one).
    initializers = [replicated_job(step, step, {"name": step, "image": f"ghcr.io/kubeflow/trainer/{step}",
                                                "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]},
                                   pod_spec={"volumes": [{"name": "initializer", "emptyDir": {}}]})
                    for step in ("dataset-initializer", "model-initializer")]
    node = dict(replicated_job("node", "trainer", {"name": "node", "image": "python:3.11"}),
                dependsOn=[{"name": step["name"], "status": "Complete"} for step in initializers])
    return runtime("python-initialized", "python", {"numNodes": 1}, *initializers, node)


def fail_fast_runtime() -> dict[str, Any]:
    """Upstream's torch-distributed, its node Job failing at the first failed pod (upstream's runtime
    keeps the Job's default backoffLimit, 6 retries with back-off)."""
    node = replicated_job("node", "trainer", {"name": "node", "image": "pytorch/pytorch:2.7.1"},
                          pod_spec={"restartPolicy": "Never"}, backoffLimit=0)
    return runtime("torch-fail-fast", "torch", {"numNodes": 1, "torch": {}}, node)


def report_task(greeting):  # type: ignore[no-untyped-def]  # its source runs alone in the pod
    import os

    print(greeting, "from task", os.environ["DMLC_TASK_ID"], "of", os.environ["DMLC_NUM_WORKER"], flush=True)


def read_dataset():  # type: ignore[no-untyped-def]  # its source runs alone in the pod
    print("training on what the initializers left in /workspace", flush=True)


async def logs(client: Any, name: str, **kwargs: Any) -> list[str]:
    """``get_job_logs``'s lines (a generator: read to the end in the thread)."""
    return await call(lambda: list(client.get_job_logs(name, **kwargs)))


async def node_steps(client: Any, name: str) -> dict[str, tuple[str | None, str]]:
    """step name → (status, pod name) of a TrainJob, as ``get_job`` gives them."""
    job = await call(client.get_job, name)
    return {step.name: (step.status, step.pod_name) for step in job.steps}


async def test_the_trainer_client_reads_the_trainer_version_kto_publishes(
        trainer_pipeline: Pipeline, caplog: pytest.LogCaptureFixture) -> None:
    config_map = await trainer_pipeline.client.get(resources.CONFIGMAPS, "kubeflow-system", "kubeflow-trainer-public")
    assert config_map["data"] == {"kubeflow_trainer_version": "v2.3.0"}

    with caplog.at_level(logging.WARNING, logger=BACKEND_LOGGER):
        await call(trainer_client, trainer_pipeline.kubeconfig, trainer_pipeline.namespace)
    assert not [r.getMessage() for r in caplog.records if r.name == BACKEND_LOGGER]


async def test_kto_up_serves_the_trainer_client_its_runtimes_and_a_train_call(tmp_path: pathlib.Path) -> None:
    """``kto up --runtime process`` as a new user starts it: the SDK finds the Trainer version and upstream's
    runtimes it applied, and a TrainJob on torch-distributed (the SDK's default runtime) runs its nodes."""
    from kubeflow.trainer import options
    from kubeflow.trainer.types import types

    settings = stack.StackSettings(state_dir=tmp_path / "state", runtime="process", trainer_runtimes=True,
                                   webhooks=1, pod_duration=1.0)
    async with stack.Stack(settings) as running:
        client = await call(trainer_client, running.kubeconfig)
        assert {"torch-distributed", "xgboost-distributed"} <= {r.name for r in await call(client.list_runtimes)}
        name = await call(client.train, trainer=types.CustomTrainerContainer(image="pytorch/pytorch", num_nodes=2),
                          options=[options.TrainerCommand(command=["bash", "-c", "echo node $PET_NODE_RANK"])])
        job = await call(client.wait_for_job_status, name, timeout=120, polling_interval=1)
        assert (job.status, job.runtime.name) == ("Complete", "torch-distributed")
        assert [await logs(client, name, step=f"node-{i}") for i in (0, 1)] == [["node 0"], ["node 1"]]


async def test_list_runtimes_and_get_runtime_read_upstreams_built_in_runtimes(trainer_pipeline: Pipeline) -> None:
    from kubeflow.trainer.constants import constants
    from kubeflow.trainer.types import types

    pipe = trainer_pipeline
    client = await call(trainer_client, pipe.kubeconfig, pipe.namespace)
    built_in = {doc["metadata"]["name"]: doc["metadata"]["labels"][FRAMEWORK_LABEL] for doc in stack.trainer_runtimes()}
    assert {"torch-distributed", "deepspeed-distributed", "mlx-distributed", "jax-distributed",
            "xgboost-distributed", "torch-distributed-with-cache"} <= set(built_in)

    listed = {runtime.name: runtime for runtime in await call(client.list_runtimes)}
    assert set(built_in) <= set(listed), sorted(set(built_in) - set(listed))
    for name, framework in built_in.items():
        runtime = await call(client.get_runtime, name)
        assert (runtime.kind, runtime.trainer.framework) == (types.RuntimeKind.CLUSTER_TRAINING_RUNTIME, framework)
        assert listed[name].trainer == runtime.trainer
    torch = await call(client.get_runtime, "torch-distributed")
    assert torch.trainer.command == constants.TORCH_COMMAND and torch.trainer.num_nodes == 1
    assert torch.trainer.trainer_type == types.TrainerType.CUSTOM_TRAINER
    deepspeed = await call(client.get_runtime, "deepspeed-distributed")
    assert deepspeed.trainer.command == constants.MPI_COMMAND

    # A TrainingRuntime of the namespace comes before a ClusterTrainingRuntime of the same name.
    await pipe.submit(dict(initialized_runtime(), metadata={"name": "torch-distributed",
                                                            "labels": {FRAMEWORK_LABEL: "python"}}))
    mine = await call(client.get_runtime, "torch-distributed")
    assert (mine.kind, mine.trainer.framework) == (types.RuntimeKind.TRAINING_RUNTIME, "python")
    listed = {runtime.name: runtime for runtime in await call(client.list_runtimes)}
    assert listed["torch-distributed"].kind == types.RuntimeKind.TRAINING_RUNTIME

    with pytest.raises(RuntimeError, match="Failed to get Runtime: no-such-runtime"):
        await call(client.get_runtime, "no-such-runtime")


async def test_train_with_a_function_call_by_call(trainer_pipeline: Pipeline) -> None:
    from kubeflow.trainer.types import types

    pipe = trainer_pipeline
    client = await call(trainer_client, pipe.kubeconfig, pipe.namespace)

    name = await call(client.train, runtime="xgboost-distributed", trainer=types.CustomTrainer(
        func=report_task, func_args={"greeting": "hello"}, num_nodes=2))

    assert [job.name for job in await call(client.list_jobs)] == [name]
    job = await call(client.wait_for_job_status, name, timeout=180, polling_interval=1)
    assert (job.status, job.num_nodes, job.runtime.name) == ("Complete", 2, "xgboost-distributed")
    steps = await node_steps(client, name)
    assert sorted(steps) == ["node-0", "node-1"]
    for index in (0, 1):
        status, pod = steps[f"node-{index}"]
        assert status == "Succeeded" and pod.startswith(f"{name}-node-0-{index}-"), steps

    assert await logs(client, name) == ["hello from task 0 of 2"]
    assert await logs(client, name, step="node-1") == ["hello from task 1 of 2"]
    # Following a log whose container has ended gives the whole log, then ends (as kubectl logs -f).
    assert await logs(client, name, follow=True) == ["hello from task 0 of 2"]

    events = await call(client.get_job_events, name)
    resources_of_job = {name, *(step.name for step in (await call(client.get_job, name)).steps),
                        *(pod for _, pod in steps.values())}
    assert events and all(e.involved_object_kind in {"TrainJob", "JobSet", "Job", "Pod"}
                          and e.involved_object_name in resources_of_job for e in events), events
    assert [e.event_time for e in events] == sorted(e.event_time for e in events)

    await call(client.delete_job, name)

    async def gone() -> bool:
        return not await call(client.list_jobs)

    await pipe.eventually(gone, what=f"{name} gone from list_jobs")
    with pytest.raises(RuntimeError, match=f"Failed to get TrainJob: {pipe.namespace}/{name}"):
        await call(client.get_job, name)


async def test_train_with_a_container_runs_the_command_given_with_the_torch_policys_env_and_follows_its_log(
        trainer_pipeline: Pipeline) -> None:
    from kubeflow.trainer import options
    from kubeflow.trainer.types import types

    pipe = trainer_pipeline
    client = await call(trainer_client, pipe.kubeconfig, pipe.namespace)
    script = ('for step in 1 2 3; do echo "node $PET_NODE_RANK of $PET_NNODES master $PET_MASTER_ADDR:$PET_MASTER_PORT'
              ' procs $PET_NPROC_PER_NODE $GREETING step $step"; sleep 1; done')

    name = await call(client.train, runtime="torch-distributed",
                      trainer=types.CustomTrainerContainer(image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                                                           num_nodes=2, env={"GREETING": "hi"}),
                      options=[options.TrainerCommand(command=["bash", "-c", script]), options.Name(name="container")])
    assert name == "container"

    await call(client.wait_for_job_status, name, status={"Running", "Complete"}, timeout=120, polling_interval=1)
    followed = await logs(client, name, follow=True)
    master = f"{name}-node-0-0.{name}:29500"
    assert followed == [f"node 0 of 2 master {master} procs 1 hi step {step}" for step in (1, 2, 3)]
    job = await call(client.wait_for_job_status, name, timeout=120, polling_interval=1)
    assert job.status == "Complete" and job.runtime.trainer.framework == "torch"
    assert await logs(client, name, step="node-1") == [
        f"node 1 of 2 master {master} procs 1 hi step {step}" for step in (1, 2, 3)]
    await call(client.delete_job, name)


async def test_the_initializers_are_steps_of_the_job_and_run_before_the_nodes(trainer_pipeline: Pipeline) -> None:
    from kubeflow.trainer.types import types

    pipe = trainer_pipeline
    await pipe.submit(initialized_runtime())
    client = await call(trainer_client, pipe.kubeconfig, pipe.namespace)

    name = await call(client.train, runtime="python-initialized", trainer=types.CustomTrainer(func=read_dataset),
                      initializer=types.Initializer(
                          dataset=types.HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca"),
                          model=types.HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B")))
    job = await call(client.wait_for_job_status, name, timeout=180, polling_interval=1)

    assert job.status == "Complete"
    assert {step.name: step.status for step in job.steps} == {
        "dataset-initializer": "Succeeded", "model-initializer": "Succeeded", "node-0": "Succeeded"}
    assert await logs(client, name) == ["training on what the initializers left in /workspace"]
    # An initializer's container has no command: the sim simulates it, and its log says so.
    initializer_log = await logs(client, name, step="dataset-initializer")
    assert initializer_log and all(line.startswith("sim: ") for line in initializer_log), initializer_log
    await call(client.delete_job, name)


async def test_get_runtime_packages_runs_a_one_node_job_that_prints_the_nodes_python_and_packages(
        trainer_pipeline: Pipeline, capsys: pytest.CaptureFixture[str]) -> None:
    client = await call(trainer_client, trainer_pipeline.kubeconfig, trainer_pipeline.namespace)
    runtime = await call(client.get_runtime, "xgboost-distributed")

    await call(client.get_runtime_packages, runtime)  # train, wait, print the logs, delete

    printed = capsys.readouterr().out
    # The process runtime's "image" is kto's own Python environment: its packages are the node's.
    assert printed.startswith("Python: 3.") and "aiokafka" in printed, printed
    assert not await call(client.list_jobs)


async def test_wait_for_job_status_raises_when_a_node_fails(trainer_pipeline: Pipeline) -> None:
    from kubeflow.trainer import options
    from kubeflow.trainer.types import types

    await trainer_pipeline.submit(fail_fast_runtime())
    client = await call(trainer_client, trainer_pipeline.kubeconfig, trainer_pipeline.namespace)
    name = await call(client.train, runtime="torch-fail-fast",
                      trainer=types.CustomTrainerContainer(image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"),
                      options=[options.TrainerCommand(command=["bash", "-c", "echo out of memory; exit 3"])])

    with pytest.raises(RuntimeError, match=f"TrainJob {name} is Failed"):
        await call(client.wait_for_job_status, name, timeout=180, polling_interval=1)
    assert (await call(client.get_job, name)).status == "Failed"
    assert await logs(client, name) == ["out of memory"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed: pip install -e '.[torch]' to run the two-node DDP training")
async def test_a_function_trains_with_ddp_across_two_nodes_through_torchrun(trainer_pipeline: Pipeline) -> None:
    from kubeflow.trainer.types import types

    client = await call(trainer_client, trainer_pipeline.kubeconfig, trainer_pipeline.namespace)
    # examples/sandbox/train_ddp.py's function: torchrun starts it once per node (PET_NPROC_PER_NODE 1:
    # no CPU request), node 1's process reaching node 0's c10d store at PET_MASTER_ADDR.
    name = await call(client.train, runtime="torch-distributed", trainer=types.CustomTrainer(
        func=test_kubeflow_sdk.example_train_func(), num_nodes=2))
    job = await call(client.wait_for_job_status, name, timeout=300, polling_interval=1)
    assert job.status == "Complete", job

    weights = set()
    for step in ("node-0", "node-1"):
        text = "\n".join(await logs(client, name, step=step))
        losses = [float(m[3]) for m in test_kubeflow_sdk.LOSS.finditer(text)]
        assert len(losses) == 10, f"{step}: {text}"
        assert losses[-1] < losses[0] / 10, f"{step}: the loss did not fall: {losses}"
        found = test_kubeflow_sdk.MODEL.search(text)
        assert found is not None, text
        weights.add((found[2], found[3]))
    assert len(weights) == 1, weights  # one model: the all-reduced gradients kept the ranks' weights equal
    weight, bias = (float(v) for v in weights.pop())
    assert abs(weight - 3) < 0.2 and abs(bias + 1) < 0.1
    await call(client.delete_job, name)
