"""Elastic PyTorchJob end to end (spec §8, §5.1), on both tiers: the job is scaled through its
scale subresource — by `kubectl scale` and by the PATCH the HPA controller sends — and its
autoscaling/v2 HPA is created, updated, deleted on suspend and recreated on resume. Workers
that stay are never restarted; the count is held within [minReplicas, maxReplicas]."""

from __future__ import annotations

import pathlib
from typing import Any

from shared.core.frameworks import pytorch
from shared.kube import clients, resources
from tests.fixtures.pipeline import Pipeline
from tests.fixtures.sim import Kubectl
from tests.pipeline.test_pipeline import job
from tests.pipeline.test_run_policy import annotate, names, patch_run_policy

NAME = "ept"
METRICS = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
PYTORCHJOBS = resources.JOB_TYPES["PyTorchJob"]


def elastic_job(workers: int) -> dict[str, Any]:
    manifest = job("PyTorchJob", NAME, {"Worker": (workers, "OnFailure")}, "pytorch",
                   elasticPolicy={"minReplicas": 1, "maxReplicas": 4, "metrics": METRICS})
    return annotate(manifest, "Worker", duration="600s")


async def worker_uids(pipeline: Pipeline) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in await pipeline.pods(NAME)
            if not p["metadata"].get("deletionTimestamp")}


async def workers_are(pipeline: Pipeline, expected: set[str], timeout: float = 30.0) -> dict[str, str]:
    seen: dict[str, str] = {}

    async def check() -> bool:
        seen.clear()
        seen.update(await worker_uids(pipeline))
        return set(seen) == expected

    await pipeline.eventually(check, timeout=timeout, what=f"workers {sorted(expected)} (seen {sorted(seen)})")
    return dict(seen)


async def hpa(pipeline: Pipeline) -> dict[str, Any] | None:
    try:
        return await pipeline.client.get(resources.HPAS, pipeline.namespace, NAME)
    except clients.ApiError as exc:
        if exc.not_found:
            return None
        raise


async def hpa_is(pipeline: Pipeline, present: bool, max_replicas: int = 4) -> dict[str, Any] | None:
    found: dict[str, Any] = {}

    async def check() -> bool:
        current = await hpa(pipeline)
        found["hpa"] = current
        if not present:
            return current is None
        return current is not None and current["spec"].get("maxReplicas") == max_replicas

    try:
        await pipeline.eventually(check)
    except AssertionError:
        job = await pipeline.job("PyTorchJob", NAME)
        raise AssertionError(f"HPA present={present} maxReplicas={max_replicas}: HPA {found.get('hpa')}, "
                             f"job spec {job['spec']}, status {job.get('status')}") from None
    return found["hpa"]


async def test_an_elastic_pytorchjob_is_scaled_through_its_scale_subresource_and_its_hpa_follows_the_job(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
    await pipeline.submit(elastic_job(2))
    first = await workers_are(pipeline, {"ept-worker-0", "ept-worker-1"})
    created = await hpa_is(pipeline, True)
    assert created is not None
    assert created["spec"]["scaleTargetRef"] == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": NAME}
    assert (created["spec"]["minReplicas"], created["spec"]["metrics"]) == (1, METRICS)
    owner = created["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("PyTorchJob", NAME, True)
    pod = next(p for p in await pipeline.pods(NAME) if p["metadata"]["name"] == "ept-worker-0")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "1:4" and env["PET_RDZV_ENDPOINT"].startswith("ept-worker-0:")

    # What the HPA controller sends: a merge patch of the scale subresource.
    scale = await pipeline.client.patch(PYTORCHJOBS, pipeline.namespace, NAME, {"spec": {"replicas": 3}},
                                        subresource="scale")
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 3)
    grown = await workers_are(pipeline, {"ept-worker-0", "ept-worker-1", "ept-worker-2"})
    assert {n: grown[n] for n in first} == first, "a worker that stays was restarted"

    # The scale subresource reports the active workers and their selector, as the HPA reads them.
    async def scale_reports_three() -> bool:
        current = await pipeline.client.request(
            "GET", PYTORCHJOBS.path(pipeline.namespace, NAME, "scale"), route="pytorchjobs/scale")
        return current["status"].get("replicas") == 3 and "training.kubeflow.org/job-name=ept" in (
            current["status"].get("selector") or "")
    await pipeline.eventually(scale_reports_three, what="scale status replicas 3 with the workers' selector")

    await kubectl("-n", pipeline.namespace, "scale", "pytorchjob", NAME, "--replicas=1")
    shrunk = await workers_are(pipeline, {"ept-worker-0"})
    assert shrunk["ept-worker-0"] == first["ept-worker-0"], "worker 0 was restarted by a scale-down"
    # The Services go after the pods (each delete with its Event): wait for the last of them.
    async def services_follow() -> bool:
        return await names(pipeline, resources.SERVICES, NAME) == {"ept-worker-0"}
    await pipeline.eventually(services_follow, timeout=20, what="the scaled-down workers' Services deleted")

    # Past maxReplicas: held at the bound, and said so in a Warning Event.
    await kubectl("-n", pipeline.namespace, "scale", "pytorchjob", NAME, "--replicas=9")
    held = await workers_are(pipeline, {f"ept-worker-{i}" for i in range(4)})
    assert held["ept-worker-0"] == first["ept-worker-0"]

    async def warned() -> bool:
        items, _ = await pipeline.client.list(resources.EVENTS, pipeline.namespace)
        return any(e.get("reason") == pytorch.ELASTIC_RANGE_REASON and e["involvedObject"]["name"] == NAME
                   and "9 is outside spec.elasticPolicy" in e.get("message", "") for e in items)
    await pipeline.eventually(warned, what=f"a {pytorch.ELASTIC_RANGE_REASON} Warning Event")

    # The HPA follows elasticPolicy; it goes with suspend and comes back with resume.
    await pipeline.client.patch(PYTORCHJOBS, pipeline.namespace, NAME,
                                {"spec": {"elasticPolicy": {"maxReplicas": 5}}})
    await hpa_is(pipeline, True, max_replicas=5)
    await patch_run_policy(pipeline, "PyTorchJob", NAME, {"suspend": True})
    await hpa_is(pipeline, False)
    await workers_are(pipeline, set())
    await patch_run_policy(pipeline, "PyTorchJob", NAME, {"suspend": False})
    await hpa_is(pipeline, True, max_replicas=5)
    await workers_are(pipeline, {f"ept-worker-{i}" for i in range(5)})
