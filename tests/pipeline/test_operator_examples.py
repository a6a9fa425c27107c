"""The mpi-operator and et-operator examples under examples/, applied unchanged with the real
kubectl, reach the conditions upstream gives them, on both tiers."""

from __future__ import annotations

import pathlib

import pytest

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
