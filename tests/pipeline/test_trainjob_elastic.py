"""kto's elastic TrainJob end to end (mlPolicy.torch.elasticPolicy, kto's extension after KEP-2903): a
running TrainJob scaled through its scale subresource grows and shrinks its JobSet's node job in place,
the nodes that stay keep running; on the real tier kube-controller-manager's HPA controller does the
scaling."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import pytest

from realparts import trainer as upstream
from shared.api import jobsets
from shared.kube import clients, resources
from tests.fixtures.pipeline import CLUSTER, Pipeline
from tests.fixtures.sim import Kubectl
from tests.pipeline.test_replay import kto

LONG = {"sim.kto.dev/duration": "600s"}
"""The nodes run until the test is over: only a scale starts or stops one."""
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
METRICS = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                       "averageUtilization": 80}}}]


def elastic_runtime(name: str, **policy: Any) -> dict[str, Any]:
    """Upstream's torch-distributed ClusterTrainingRuntime, renamed, with an elastic policy."""
    for path in upstream.runtime_files():
        for document in upstream.documents(path):
            if document["metadata"]["name"] == "torch-distributed":  # type: ignore[index]
                runtime = copy.deepcopy(dict(document))
                runtime["metadata"] = {"name": name}
                runtime["spec"]["mlPolicy"]["torch"] = {"elasticPolicy": {"minNodes": 1, "maxNodes": 4, **policy}}
                return runtime
    raise LookupError("torch-distributed")


def elastic_job(name: str, runtime: str, num_nodes: int) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": num_nodes},
                     "runtimePatches": [{"manager": "kto.dev/tests", "trainingRuntimeSpec": {"template": {"spec": {
                         "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
                             "metadata": {"annotations": LONG}}}}}]}}}}]}}


async def start(pipeline: Pipeline, runtime: dict[str, Any], job: dict[str, Any]) -> None:
    try:
        await pipeline.client.create(resources.CLUSTERTRAININGRUNTIMES, None, runtime)
    except clients.ApiError as exc:
        if not exc.already_exists:
            raise
    await pipeline.submit(job)


async def nodes(pipeline: Pipeline, name: str) -> dict[int, str]:
    """The TrainJob's running node pods (not deleting): completion index → uid."""
    pods, _ = await pipeline.client.list(
        resources.PODS, pipeline.namespace,
        label_selector=f"{jobsets.JOBSET_NAME_LABEL}={name},{jobsets.REPLICATED_JOB_LABEL}=node")
    return {int(p["metadata"]["labels"][INDEX_LABEL]): p["metadata"]["uid"] for p in pods
            if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") == "Running"}


async def wait_for_nodes(pipeline: Pipeline, name: str, count: int, timeout: float = 60.0) -> dict[int, str]:
    async def there() -> bool:
        return sorted(await nodes(pipeline, name)) == list(range(count))
    await pipeline.eventually(there, timeout, f"{count} running nodes of {name}")
    return await nodes(pipeline, name)


async def status_nodes(pipeline: Pipeline, name: str) -> int | None:
    job = await pipeline.job("TrainJob", name)
    found = (job.get("status") or {}).get("numNodes")
    return found if isinstance(found, int) else None


@pytest.mark.parametrize("tier", ["sim"], indirect=True)
async def test_kubectl_scale_grows_and_shrinks_a_running_elastic_trainjob_in_place(
        pipeline: Pipeline, tmp_path: pathlib.Path) -> None:
    await start(pipeline, elastic_runtime("torch-elastic"), elastic_job("grow", "torch-elastic", 2))
    first = await wait_for_nodes(pipeline, "grow", 2)
    jobset = await pipeline.client.get(resources.JOBSETS, pipeline.namespace, "grow")
    kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
    await kubectl("--context", CLUSTER, "-n", pipeline.namespace, "scale", "trainjob/grow", "--replicas=3")
    grown = await wait_for_nodes(pipeline, "grow", 3)
    assert {i: grown[i] for i in (0, 1)} == first, "nodes 0 and 1 keep running"
    scaled = await pipeline.client.get(resources.JOBSETS, pipeline.namespace, "grow")
    assert scaled["metadata"]["uid"] == jobset["metadata"]["uid"], "the same JobSet, scaled in place"

    async def counted() -> bool:
        return await status_nodes(pipeline, "grow") == 3
    await pipeline.eventually(counted, 30, "status.numNodes 3")
    shown = await kubectl("--context", CLUSTER, "-n", pipeline.namespace, "get", "trainjob/grow", "-o",
                          "jsonpath={.spec.trainer.numNodes} {.status.numNodes} {.status.selector}")
    assert shown.stdout == (f"3 3 {jobsets.JOBSET_NAME_LABEL}=grow,{jobsets.REPLICATED_JOB_LABEL}=node")
    await kubectl("--context", CLUSTER, "-n", pipeline.namespace, "scale", "trainjob/grow", "--replicas=2")
    assert await wait_for_nodes(pipeline, "grow", 2) == first, "node 2 goes, nodes 0 and 1 are the first ones"
    job = await pipeline.job("TrainJob", "grow")
    assert not any(c["type"] == "Failed" for c in (job.get("status") or {}).get("conditions") or [])
    replay = await kto(pipeline, "replay", "-n", pipeline.namespace, "trainjob/grow", "-o", "json")
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    (report,) = json.loads(replay.stdout)["jobs"]
    assert report["ok"] and report["divergence"] is None, report


@pytest.mark.parametrize("tier", ["sim"], indirect=True)
async def test_an_elastic_runtime_with_metrics_gives_the_trainjob_its_hpa(pipeline: Pipeline) -> None:
    await start(pipeline, elastic_runtime("torch-elastic-metrics", metrics=METRICS),
                elastic_job("auto", "torch-elastic-metrics", 1))

    async def made() -> bool:
        try:
            await pipeline.client.get(resources.HPAS, pipeline.namespace, "auto")
        except clients.ApiError as exc:
            if exc.not_found:
                return False
            raise
        return True
    await pipeline.eventually(made, 30, "the HPA")
    hpa = await pipeline.client.get(resources.HPAS, pipeline.namespace, "auto")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                             "name": "auto"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"], hpa["spec"]["metrics"]) == (1, 4, METRICS)
    assert hpa["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"


@pytest.mark.parametrize("tier", ["kube"], indirect=True)
async def test_kube_controller_managers_hpa_scales_an_elastic_trainjob_through_its_scale_subresource(
        pipeline: Pipeline) -> None:
    """The issue's "Done when": the elastic extension scaled by an HPA on the real tier.

    The cluster has no metrics server, so no metric ever gives the HPA a reading. But the HPA
    controller enforces ``minReplicas`` before it reads any metric (kube-controller-manager's
    ``reconcileAutoscaler``: a target below minReplicas is scaled to it, no metric needed), so an
    HPA whose minReplicas (3) is above the job's numNodes (2) scales the TrainJob up through its
    scale subresource: the HPA controller reads the Scale (spec.trainer.numNodes, status.numNodes,
    status.selector) and writes spec.trainer.numNodes = 3, through the CRD's rule that keeps the
    rest of ``trainer`` immutable. The HPA is the test's, not the policy's: kto's own HPA takes
    minReplicas from minNodes, which numNodes may not be below."""
    await scaled_by_an_hpa(pipeline)


async def scaled_by_an_hpa(pipeline: Pipeline) -> None:
    """An elastic TrainJob of 2 nodes, an HPA of minReplicas 3 on it: 3 nodes, 0 and 1 the first ones;
    the rest of ``trainer`` stays immutable."""
    name = "scaled"
    runtime = f"torch-elastic-{pipeline.namespace}"
    await start(pipeline, elastic_runtime(runtime), elastic_job(name, runtime, 2))
    first = await wait_for_nodes(pipeline, name, 2, timeout=120)
    await pipeline.client.create(resources.HPAS, pipeline.namespace, {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": pipeline.namespace},
        "spec": {"scaleTargetRef": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name},
                 "minReplicas": 3, "maxReplicas": 4, "metrics": METRICS}})
    grown = await wait_for_nodes(pipeline, name, 3, timeout=120)
    assert {i: grown[i] for i in (0, 1)} == first, "nodes 0 and 1 keep running"
    job = await pipeline.job("TrainJob", name)
    assert job["spec"]["trainer"]["numNodes"] == 3
    hpa = await pipeline.client.get(resources.HPAS, pipeline.namespace, name)
    assert hpa["status"]["desiredReplicas"] == 3
    job["spec"]["trainer"]["image"] = "other:image"
    with pytest.raises(clients.ApiError) as refused:
        await pipeline.client.replace(resources.TRAINJOBS, pipeline.namespace, job)
    assert "field is immutable except numNodes" in str(refused.value)
    try:
        await pipeline.client.delete(resources.CLUSTERTRAININGRUNTIMES, None, runtime)
    except clients.ApiError as exc:
        if not exc.not_found:
            raise
