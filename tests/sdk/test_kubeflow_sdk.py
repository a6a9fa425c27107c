"""Upstream's `kubeflow-training` SDK, unchanged, against kto on both tiers, call by call.

create (a job object, and a train_func), get, list, wait, logs, update and delete; the pods run as
local processes (sim/node/processes.py), so the logs are what the training code printed. With torch
installed, `create_job(train_func=..., num_workers=2)` trains a small model with DDP (gloo, CPU)
across two real worker processes and the loss in their logs falls.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
from typing import Any

import pytest

from tests.fixtures.pipeline import Pipeline
from tests.sdk.conftest import call, training_client

pytest.importorskip("kubeflow.training", reason="the kubeflow-training SDK is not installed (pip install -e '.[test]')")


def rank_job(name: str, namespace: str) -> Any:
    """A PyTorchJob as an upstream model: Master 1 + Worker 1, each printing what kto planned for it."""
    from kubeflow.training import models

    script = ("import os; print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], "
              "'master', os.environ['MASTER_ADDR'] + ':' + os.environ['MASTER_PORT'], flush=True)")
    template = models.V1PodTemplateSpec(spec=models.V1PodSpec(containers=[models.V1Container(
        name="pytorch", image="docker.io/pytorch/pytorch:2.1.2", command=["python3", "-c", script])]))
    return models.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1", kind="PyTorchJob",
        metadata=models.V1ObjectMeta(name=name, namespace=namespace),
        spec=models.KubeflowOrgV1PyTorchJobSpec(
            run_policy=models.KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            pytorch_replica_specs={
                "Master": models.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy="OnFailure", template=template),
                "Worker": models.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy="OnFailure", template=template),
            },
        ),
    )


async def test_the_upstream_sdk_with_a_job_object_call_by_call(process_pipeline: Pipeline) -> None:
    pipe = process_pipeline
    client = training_client(pipe)
    name = "sdk-ranks"

    await call(client.create_job, job=rank_job(name, pipe.namespace))

    job = await call(client.get_job, name)
    assert job.metadata.name == name and job.kind == "PyTorchJob"
    assert [j.metadata.name for j in await call(client.list_jobs)] == [name]

    job = await call(client.wait_for_job_conditions, name, wait_timeout=120, polling_interval=1)
    assert await call(client.is_job_succeeded, name)
    assert [c.type for c in await call(client.get_job_conditions, name)][-1] == "Succeeded"
    assert sorted(await call(client.get_job_pod_names, name, is_master=False)) == [f"{name}-master-0",
                                                                                 f"{name}-worker-0"]

    logs, _ = await call(client.get_job_logs, name, is_master=False)
    assert logs == {f"{name}-master-0": f"rank 0 of 2 master {name}-master-0:23456\n",
                    f"{name}-worker-0": f"rank 1 of 2 master {name}-master-0:23456\n"}
    master_only, _ = await call(client.get_job_logs, name)
    assert list(master_only) == [f"{name}-master-0"]

    job = await call(client.get_job, name)
    job.metadata.labels = {"team": "vision"}
    await call(client.update_job, job, name)
    assert (await call(client.get_job, name)).metadata.labels == {"team": "vision"}

    await call(client.delete_job, name)

    async def gone() -> bool:
        return not await call(client.list_jobs)

    await pipe.eventually(gone, what=f"{name} gone from list_jobs")
    with pytest.raises(RuntimeError, match=f"Failed to get PyTorchJob: {pipe.namespace}/{name}"):
        await call(client.get_job, name)


def hello_train(parameters):  # type: ignore[no-untyped-def]  # its source runs alone in the pod
    import os

    print("training with lr", parameters["lr"], "as rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"])


async def test_the_upstream_sdk_with_a_train_func_runs_it_and_logs_what_it_printed(
        process_pipeline: Pipeline) -> None:
    pipe = process_pipeline
    client = training_client(pipe)

    await call(client.create_job, name="sdk-hello", train_func=hello_train, parameters={"lr": 0.1}, num_workers=1)

    job = await call(client.get_job, "sdk-hello")
    container = job.spec.pytorch_replica_specs["Master"].template.spec.containers[0]
    assert container.command == ["bash", "-c"] and "ephemeral_script.py" in container.args[0]
    await call(client.wait_for_job_conditions, "sdk-hello", wait_timeout=120, polling_interval=1)
    logs, _ = await call(client.get_job_logs, "sdk-hello")
    assert logs == {"sdk-hello-master-0": "training with lr 0.1 as rank 0 of 1\n"}
    await call(client.delete_job, "sdk-hello")


def example_train_func() -> Any:
    """The training function of examples/sandbox/train_ddp.py (docs/sandbox.md): a linear model fitted
    with DDP over gloo on CPU; each rank prints its loss per epoch, then the model it ends with."""
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "sandbox" / "train_ddp.py"
    spec = importlib.util.spec_from_file_location("train_ddp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.train_func


LOSS = re.compile(r"rank (\d)/2 epoch (\d+) loss ([0-9.]+)")
MODEL = re.compile(r"rank (\d)/2 y = (\S+) x \+ (\S+)")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed: pip install -e '.[torch]' to run the two-worker DDP training")
async def test_train_func_trains_with_ddp_across_two_real_worker_processes(process_pipeline: Pipeline) -> None:
    pipe = process_pipeline
    client = training_client(pipe)

    # One process per pod (upstream's default nprocPerNode "auto" starts one per CPU of this machine).
    await call(client.create_job, name="ddp", train_func=example_train_func(), num_workers=2,
               num_procs_per_worker=1)
    await call(client.wait_for_job_conditions, "ddp", wait_timeout=300, polling_interval=1)
    logs, _ = await call(client.get_job_logs, "ddp", is_master=False)

    assert sorted(logs) == ["ddp-master-0", "ddp-worker-0"]
    weights = set()
    for pod, text in logs.items():
        losses = [float(m[3]) for m in LOSS.finditer(text)]
        assert len(losses) == 10, f"{pod}: {text}"
        assert losses[-1] < losses[0] / 10, f"{pod}: the loss did not fall: {losses}"
        found = MODEL.search(text)
        assert found is not None, text
        weights.add((found[2], found[3]))
    # One model: each rank fitted its own half of the data, and the all-reduced gradients kept their
    # weights identical (near y = 3x - 1).
    assert len(weights) == 1, weights
    weight, bias = (float(v) for v in weights.pop())
    assert abs(weight - 3) < 0.2 and abs(bias + 1) < 0.1
    await call(client.delete_job, "ddp")
