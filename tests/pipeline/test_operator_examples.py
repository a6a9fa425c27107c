"""The mpi-operator and et-operator examples under examples/, applied unchanged with the real
kubectl, reach the conditions upstream gives them, on both tiers."""

from __future__ import annotations

import pathlib

import pytest

from shared.kube import resources
from tests.fixtures.pipeline import Pipeline
from tests.fixtures.sim import Kubectl

ROOT = pathlib.Path(__file__).resolve().parents[2]
MPI_EXAMPLES = sorted((ROOT / "examples" / "mpi-operator").glob("*.yaml"))


@pytest.mark.parametrize("path", MPI_EXAMPLES, ids=lambda p: p.stem)
async def test_an_mpi_operator_example_applied_with_kubectl_succeeds(
    pipeline: Pipeline, tmp_path: pathlib.Path, path: pathlib.Path,
) -> None:
    kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
    out = await kubectl("-n", pipeline.namespace, "apply", "-f", str(path))
    name = out.stdout.split()[0].split("/")[-1]
    assert out.stdout.strip() == f"mpijob.kubeflow.org/{name} created"
    job = await pipeline.wait_for("MPIJob", name, "Succeeded", timeout=90)
    states = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert states == {"Created": "True", "Running": "False", "Succeeded": "True"}, job["status"]["conditions"]
    shown = await kubectl("-n", pipeline.namespace, "get", "mpijobs.v2beta1.kubeflow.org", name)
    assert name in shown.stdout
    # Run as mpi-operator runs it: its launcher is a batch/v1 Job, which completed.
    launcher = await kubectl("-n", pipeline.namespace, "get", "job", f"{name}-launcher",
                             "-o", "jsonpath={.status.succeeded}")
    assert launcher.stdout == "1"


ET_EXAMPLES = ROOT / "examples" / "et-operator"


async def test_the_et_operator_examples_applied_with_kubectl_bind_their_scalers_and_the_job_completes(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    """The TrainingJob and its three scalers, applied unchanged. The tiers' simulated pods run
    for a second, so the launcher may finish before or after the scalers' turns (scaling itself
    is tests/pipeline/test_training_job.py), and the workers may end before a pass has seen them
    all Running (they count as come up: docs/elastic-core.md; a fresh CI machine hit that): the
    job ends Succeeded, as upstream's would when its launcher exits 0, and each scaler is bound
    to it with its Created condition. 2-6 s here, also with the CPU loaded."""
    kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
    ns = pipeline.namespace
    out = await kubectl("-n", ns, "apply", "-f", str(ET_EXAMPLES / "training_job.yaml"))
    assert out.stdout.strip() == "trainingjob.kai.alibabacloud.com/elastic-training created"
    for name in ("scale_out.yaml", "scale_in_count.yaml", "scale_in_pod.yaml"):
        await kubectl("-n", ns, "apply", "-f", str(ET_EXAMPLES / name))

    async def succeeded() -> bool:
        job = await pipeline.client.get(resources.TRAININGJOBS, ns, "elastic-training")
        return (job.get("status") or {}).get("phase") == "Succeeded"

    await pipeline.eventually(succeeded, timeout=90, what="TrainingJob elastic-training Succeeded")
    job = await pipeline.client.get(resources.TRAININGJOBS, ns, "elastic-training")
    assert {c["type"]: c["status"] for c in job["status"]["conditions"]}["Succeeded"] == "True"
    for kind, name in (("ScaleOut", "scaleout-example"), ("ScaleIn", "scalein-example"), ("ScaleIn", "scalein-workers")):
        scaler = await pipeline.client.get(resources.SCALER_TYPES[kind], ns, name)
        owner = scaler["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainingJob", "elastic-training", True)
        assert any(c["type"] == "Created" for c in (scaler.get("status") or {}).get("conditions") or [])
    shown = await kubectl("-n", ns, "get", "trainingjobs")
    assert "Succeeded" in shown.stdout
