"""kto's JobSets scale their Indexed Jobs in place, as JobSet v0.12.0's ElasticJobSet feature gate does
(``syncJobScaling``): an active Job follows its replicated job's parallelism and completions."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.api import jobsets
from shared.core.jobsets import deciding, planning

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def jobset(parallelism: int, completions: int, suspend: bool = False) -> dict[str, Any]:
    return {"apiVersion": jobsets.API_VERSION, "kind": jobsets.KIND,
            "metadata": {"name": "js", "namespace": "default", "uid": "uid-js", "resourceVersion": "3"},
            "spec": {"suspend": suspend, "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
                "parallelism": parallelism, "completions": completions, "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "node", "image": "i"}]}}}}}]}}


def running_jobs(document: dict[str, Any], parallelism: int, suspended: bool = False) -> list[dict[str, Any]]:
    """The JobSet's headless Service and its Jobs as made when it had ``parallelism`` pods per Job, running."""
    model = jobsets.set_defaults(jobsets.load(document))
    made = [planning.desired_service(model)]
    for rjob in model.replicated_jobs:
        for index in range(rjob.replicas):
            job = planning.desired_job(model, rjob, index)
            job["metadata"].update(uid=f"uid-{index}", resourceVersion="5")
            job["spec"].update(parallelism=parallelism, completions=parallelism, suspend=suspended)
            job["status"] = {"active": parallelism, "ready": parallelism}
            made.append(job)
    return made


@pytest.mark.parametrize("pods", [pytest.param(3, id="up"), pytest.param(1, id="down")])
def test_an_active_job_takes_its_replicated_jobs_new_parallelism_and_completions(pods: int) -> None:
    document = jobset(pods, pods)
    jobs = running_jobs(document, 2)
    decision = deciding.decide(jobsets.load(document), jobs, NOW)
    [updated] = decision.updates
    assert (updated["spec"]["parallelism"], updated["spec"]["completions"]) == (pods, pods)
    assert updated["metadata"] == jobs[1]["metadata"] and decision.creates == [] and decision.deletes == []


def test_jobs_already_at_the_count_are_left_alone() -> None:
    document = jobset(2, 2)
    assert deciding.decide(jobsets.load(document), running_jobs(document, 2), NOW).updates == []


def test_parallelism_unequal_to_completions_is_not_elastic_and_changes_nothing() -> None:
    document = jobset(3, 4)
    assert deciding.decide(jobsets.load(document), running_jobs(document, 2), NOW).updates == []


def test_a_template_without_parallelism_or_completions_leaves_the_api_servers_defaults_alone() -> None:
    document = jobset(1, 1)
    spec = document["spec"]["replicatedJobs"][0]["template"]["spec"]
    del spec["parallelism"], spec["completions"]
    assert deciding.decide(jobsets.load(document), running_jobs(document, 1), NOW).updates == []


def test_a_suspended_jobset_suspends_its_jobs_without_scaling_them() -> None:
    document = jobset(3, 3, suspend=True)
    [updated] = deciding.decide(jobsets.load(document), running_jobs(document, 2), NOW).updates
    assert updated["spec"]["suspend"] is True and updated["spec"]["parallelism"] == 2
