"""The launcher Role of a TrainingJob follows its workers through a ScaleOut and a ScaleIn, on both
tiers: its ``pods/exec`` rule names exactly the worker pods, never the launcher or another pod.
On the real tier, where kube-apiserver authorizes with RBAC, the launcher's own identity (a
token of its ServiceAccount from the TokenRequest API) execs into a worker the ScaleOut added
and is refused exec into any pod the Role does not name."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from shared.kube import clients, resources
from tests.fixtures.pipeline import CLUSTER, Pipeline
from tests.pipeline.test_training_job import (
    JOB, LAUNCHER, hostfile_is, phase_is, scaler, scaler_done, training_job, worker, workers_are,
)


async def exec_names(pipeline: Pipeline) -> list[str]:
    role = await pipeline.client.get(resources.ROLES, pipeline.namespace, LAUNCHER)
    rules = [r for r in role["rules"] if "pods/exec" in r["resources"]]
    assert all(r.get("resourceNames") for r in rules), f"an exec rule names no pod: {rules}"
    return [name for r in rules for name in r["resourceNames"]]


async def role_names(pipeline: Pipeline, indices: list[int]) -> None:
    wanted = [worker(i) for i in indices]
    seen: dict[str, list[str]] = {}

    async def check() -> bool:
        seen["names"] = await exec_names(pipeline)
        return seen["names"] == wanted

    try:
        await pipeline.eventually(check, timeout=60)
    except AssertionError:
        raise AssertionError(f"the launcher Role names {seen.get('names')}, expected {wanted}") from None


async def as_launcher(pipeline: Pipeline, directory: pathlib.Path) -> clients.KubeClient:
    """A client acting as the launcher's ServiceAccount, with a token from the TokenRequest API."""
    path = resources.SERVICEACCOUNTS.path(pipeline.namespace, LAUNCHER, "token")
    answer = await pipeline.client.request(
        "POST", path, body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": 600}}, route="serviceaccounts/token")
    config = yaml.safe_load(pipeline.kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == CLUSTER)
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])
    launcher_config: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config", "current-context": "launcher", "clusters": [cluster],
        "users": [{"name": "launcher", "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "launcher", "context": {"cluster": cluster["name"], "user": "launcher"}}],
    }
    file = directory / "launcher.kubeconfig"
    file.write_text(yaml.safe_dump(launcher_config))
    return await clients.KubeClient.connect(file, "launcher")


async def test_the_launcher_role_names_exactly_the_workers_through_a_scale_out_and_in(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    await pipeline.submit(training_job(2))
    await phase_is(pipeline, "Running")
    await role_names(pipeline, [0, 1])

    await pipeline.submit(scaler("ScaleOut", "out", toAdd={"count": 2}))
    await scaler_done(pipeline, "ScaleOut", "out")
    await workers_are(pipeline, [0, 1, 2, 3])
    await hostfile_is(pipeline, [0, 1, 2, 3])
    await role_names(pipeline, [0, 1, 2, 3])
    pods, _ = await pipeline.client.list(resources.PODS, pipeline.namespace)
    others = {p["metadata"]["name"] for p in pods} - {worker(i) for i in range(4)}
    assert LAUNCHER in others and not others & set(await exec_names(pipeline))

    if pipeline.tier == "kube":  # the sim does not authorize; kube-apiserver does, with RBAC
        async with await as_launcher(pipeline, tmp_path) as launcher:
            answer = await launcher.exec(pipeline.namespace, worker(3), "worker", ["echo", "reached"])
            assert (answer.exit_code, answer.stdout.strip()) == (0, "reached"), answer.stderr
            for pod in sorted(others):
                try:
                    await launcher.exec(pipeline.namespace, pod, pod.removeprefix(f"{JOB}-"), ["true"])
                except clients.ApiError as exc:
                    assert exc.code == 403, exc
                else:
                    raise AssertionError(f"the launcher could exec into {pod}, which its Role does not name")

    await pipeline.submit(scaler("ScaleIn", "in", toDelete={"count": 1}))
    await scaler_done(pipeline, "ScaleIn", "in")
    await workers_are(pipeline, [0, 1, 2])
    await role_names(pipeline, [0, 1, 2])
