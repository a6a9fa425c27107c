"""kto's elastic TrainJob (mlPolicy.torch.elasticPolicy, after KEP-2903): torchrun's elastic env, the node
job sized by numNodes and scaled in place while it runs, the HPA, the scale subresource's status."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.api import jobsets
from shared.core import effects, settings
from shared.core.trainer import deciding, family, planning

from . import trainer_builders as b

HPA_METRICS = [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                           "averageUtilization": 80}}}]


def elastic_runtime(**policy: Any) -> dict[str, Any]:
    runtime = b.runtime("torch-distributed")
    runtime["spec"]["mlPolicy"]["torch"]["elasticPolicy"] = {"minNodes": 1, "maxNodes": 4, **policy}
    return runtime


def elastic_job(num_nodes: int = 2, **spec: Any) -> dict[str, Any]:
    return b.train_job(trainer={"numNodes": num_nodes}, **spec)


def decide(job: dict[str, Any], *children: dict[str, Any], now: dt.datetime = b.NOW) -> effects.Effects:
    return deciding.decide(job, list(children), now, lambda: b.KEYS)


def node_spec(jobset: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")["template"]["spec"]  # type: ignore[no-any-return]


def started(job: dict[str, Any], runtime: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JobSet and snapshot of a job that started (as the API server returned them)."""
    return (b.owned(job, planning.build(job, runtime).jobset), b.owned(job, planning.snapshot(job, runtime)))


def test_an_elastic_runtime_gives_torchrun_min_max_nodes_and_a_c10d_rendezvous_on_node_0() -> None:
    plan = planning.build(elastic_job(), elastic_runtime(maxRestarts=3))
    env = b.env(b.container(plan.jobset, "node"))
    assert {k: env[k] for k in ("PET_NNODES", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_ID",
                                "PET_MAX_RESTARTS")} == {
        "PET_NNODES": "1:4", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-node-0-0.job:29500",
        "PET_RDZV_ID": "uid-1", "PET_MAX_RESTARTS": "3"}
    assert (node_spec(plan.jobset)["parallelism"], node_spec(plan.jobset)["completions"]) == (2, 2)
    assert plan.elastic and plan.hpa is None


def test_a_runtime_without_an_elastic_policy_plans_as_upstream() -> None:
    plan = planning.build(elastic_job(), b.runtime("torch-distributed"))
    env = b.env(b.container(plan.jobset, "node"))
    assert env["PET_NNODES"] == "2" and "PET_RDZV_BACKEND" not in env and "PET_MAX_RESTARTS" not in env
    assert not plan.elastic and plan.hpa is None


def test_metrics_give_an_hpa_named_as_the_trainjob_scaling_it_between_the_bounds() -> None:
    plan = planning.build(elastic_job(), elastic_runtime(minNodes=2, metrics=HPA_METRICS))
    assert plan.hpa == {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "job", "namespace": "default", "ownerReferences": [
            {"apiVersion": b.API_VERSION, "kind": "TrainJob", "name": "job", "uid": "uid-1", "controller": True,
             "blockOwnerDeletion": True}]},
        "spec": {"scaleTargetRef": {"kind": "TrainJob", "name": "job", "apiVersion": b.API_VERSION},
                 "minReplicas": 2, "maxReplicas": 4, "metrics": HPA_METRICS}}
    assert planning.build(elastic_job(suspend=True), elastic_runtime(minNodes=2, metrics=HPA_METRICS)).hpa is None


def test_a_new_elastic_job_gets_its_hpa_and_the_scale_status() -> None:
    decision = decide(elastic_job(), elastic_runtime(metrics=HPA_METRICS))
    assert [m["kind"] for m in decision.creates] == ["ConfigMap", "HorizontalPodAutoscaler", "JobSet"]
    assert decision.status is not None
    assert decision.status.dump() == {"selector": f"{jobsets.JOBSET_NAME_LABEL}=job,{jobsets.REPLICATED_JOB_LABEL}=node"}


@pytest.mark.parametrize("num_nodes", [pytest.param(3, id="up"), pytest.param(1, id="down")])
def test_a_new_num_nodes_scales_the_running_jobset_in_place_and_nothing_else(num_nodes: int) -> None:
    job, runtime = elastic_job(2), elastic_runtime()
    jobset, snapshot = started(job, runtime)
    job["spec"]["trainer"]["numNodes"] = num_nodes
    decision = decide(job, jobset, snapshot)
    [updated] = decision.updates
    assert decision.creates == [] and decision.deletes == []
    assert (node_spec(updated)["parallelism"], node_spec(updated)["completions"]) == (num_nodes, num_nodes)
    assert {**updated, "spec": None} == {**jobset, "spec": None}, "the same JobSet: its uid and resourceVersion"
    node_spec(updated).update(parallelism=2, completions=2)
    assert updated["spec"] == jobset["spec"], "env, template and the rest stay: the staying nodes run on"
    assert decision.status is not None and decision.status.dump()["numNodes"] == 2


def test_the_scale_status_counts_the_nodes_the_jobset_runs() -> None:
    job, runtime = elastic_job(3), elastic_runtime()
    jobset, snapshot = started(job, runtime)
    decision = decide(job, jobset, snapshot)
    assert decision.updates == []
    assert decision.status is not None and decision.status.dump()["numNodes"] == 3


def test_a_finished_jobset_is_not_scaled() -> None:
    job, runtime = elastic_job(2), elastic_runtime()
    jobset, snapshot = started(job, runtime)
    jobset["status"] = b.jobset_status(("Completed", "AllJobsCompleted", "jobset completed successfully"))
    job["spec"]["trainer"]["numNodes"] = 3
    assert decide(job, jobset, snapshot).updates == []


def test_a_scale_past_the_bounds_leaves_the_running_jobset_and_says_why_without_failing() -> None:
    job, runtime = elastic_job(2), elastic_runtime()
    jobset, snapshot = started(job, runtime)
    job["spec"]["trainer"]["numNodes"] = 5
    decision = decide(job, jobset, snapshot)
    assert decision.creates == [] and decision.updates == []
    message = ("spec.trainer.numNodes: Invalid value: 5: numNodes must be between the runtime's elasticPolicy "
               "minNodes (1) and maxNodes (4)")
    assert [(e.type, e.reason, e.message) for e in decision.events] == [
        ("Warning", "TrainJobResourcesCreationFailed", f"TrainJob resources reconciliation failed: {message}")]
    assert decision.status is None or "conditions" not in decision.status.dump()


def test_a_new_job_past_the_bounds_fails_naming_the_field() -> None:
    decision = decide(elastic_job(5), elastic_runtime())
    assert decision.creates == []
    assert decision.status is not None
    [failed] = decision.status.dump()["conditions"]
    assert (failed["type"], failed["reason"]) == ("Failed", "TrainJobResourcesCreationFailed")
    assert failed["message"].startswith("spec.trainer.numNodes: Invalid value: 5:")


def test_a_suspended_elastic_job_syncs_its_whole_jobset_as_upstream() -> None:
    job, runtime = elastic_job(2, suspend=True), elastic_runtime()
    jobset, snapshot = started(job, runtime)
    job["spec"]["trainer"]["numNodes"] = 3
    [updated] = decide(job, jobset, snapshot).updates
    assert node_spec(updated)["parallelism"] == 3 and updated["spec"]["suspend"] is True


def test_suspending_an_elastic_job_deletes_its_hpa() -> None:
    job, runtime = elastic_job(2), elastic_runtime(metrics=HPA_METRICS)
    jobset, snapshot = started(job, runtime)
    hpa = b.owned(job, planning.build(job, runtime).hpa or {})
    job["spec"]["suspend"] = True
    decision = decide(job, jobset, snapshot, hpa)
    assert [(d.kind, d.name, d.reason) for d in decision.deletes] == [("HorizontalPodAutoscaler", "job", "suspend")]


def test_kto_plan_of_an_elastic_trainjob_shows_its_hpa_beside_its_jobset() -> None:
    runtime = elastic_runtime(metrics=HPA_METRICS)
    planned = family.FAMILY.dry_run(elastic_job(), settings.OperatorSettings(), "<key>", b.NOW, [runtime])
    assert planned.errors == [] and [c["kind"] for c in planned.children] == ["HorizontalPodAutoscaler", "JobSet"]
