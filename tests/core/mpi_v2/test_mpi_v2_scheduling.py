"""Gang scheduling of MPIJob v2beta1 (A.17): acceptance cases 32–35."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core.mpi_v2 import planning, scheduling

import mpi_v2_builders as b


def gang_job(**kwargs: Any) -> Any:
    return b.defaulted(
        "test", workers=2, annotations={"scheduling.volcano.sh/queue-name": "project-x"},
        launcher={"resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
        launcher_pod_spec={"priorityClassName": "high"},
        worker={"resources": {"requests": {"cpu": "10"}, "limits": {"cpu": "20", "memory": "20Gi"}}},
        **kwargs,
    )


OWNER = {"kind": "MPIJob"}


def test_case_32_volcano_pod_group_from_defaults() -> None:
    group = scheduling.desired_pod_group(gang_job(), b.VOLCANO, OWNER, {})
    assert group == {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "test", "namespace": "default", "ownerReferences": [OWNER]},
        "spec": {"minMember": 3, "queue": "project-x", "priorityClassName": "high",
                 "minResources": {"cpu": "21", "memory": "42Gi"}},
    }


def test_case_32_scheduler_plugins_pod_group_from_defaults() -> None:
    group = scheduling.desired_pod_group(gang_job(), b.PLUGINS, OWNER, {})
    assert group is not None
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 0, "minResources": {"cpu": "21", "memory": "42Gi"}}


def test_case_33_the_scheduling_policy_wins() -> None:
    policy = {"minAvailable": 2, "queue": "project-y", "priorityClass": "higher", "minResources": {"cpu": "5"},
              "scheduleTimeoutSeconds": 100}
    job = gang_job(run_policy={"schedulingPolicy": policy})
    volcano = scheduling.desired_pod_group(job, b.VOLCANO, OWNER, {})
    plugins = scheduling.desired_pod_group(job, b.PLUGINS, OWNER, {})
    assert volcano is not None and plugins is not None
    assert volcano["spec"] == {"minMember": 2, "queue": "project-y", "priorityClassName": "higher",
                               "minResources": {"cpu": "5"}}
    assert plugins["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 100, "minResources": {"cpu": "5"}}


@pytest.mark.parametrize(
    ("workers", "policy", "expected"),
    [
        pytest.param(99, None, 100, id="workers-plus-launcher"),
        pytest.param(99, {"minAvailable": 2}, 2, id="policy"),
    ],
)
def test_case_34_min_available(workers: int, policy: dict[str, Any] | None, expected: int) -> None:
    run_policy = {"schedulingPolicy": policy} if policy else None
    assert scheduling.min_available(b.defaulted(workers=workers, run_policy=run_policy)) == expected


@pytest.mark.parametrize(
    ("min_available", "priorities", "expected"),
    [
        pytest.param(2, {}, {"cpu": "11", "memory": "22Gi"}, id="tie-counts-one-worker-fewer"),
        pytest.param(2, {"high": 10}, {"cpu": "11", "memory": "22Gi"}, id="launcher-higher-counts-the-workers-less"),
        pytest.param(0, {}, None, id="no-members-no-resources"),
    ],
)
def test_min_resources_count_the_lower_priority_type_min_member_minus_one_times(
    min_available: int, priorities: dict[str, int], expected: dict[str, str] | None
) -> None:
    job = gang_job(run_policy={"schedulingPolicy": {"minAvailable": min_available}})
    assert scheduling.min_resources(job, min_available, priorities) == expected


def test_min_resources_when_workers_outrank_the_launcher() -> None:
    job = gang_job(run_policy={"schedulingPolicy": {"minAvailable": 2}}, worker_pod_spec={"priorityClassName": "top"})
    # Workers first (priority 100), then the launcher counted minMember - 1 = 1 time.
    assert scheduling.min_resources(job, 2, {"top": 100, "high": 10}) == {"cpu": "21", "memory": "42Gi"}


@pytest.mark.parametrize(
    ("operator", "label", "annotation"),
    [
        pytest.param(b.VOLCANO, None, "test", id="volcano"),
        pytest.param(b.PLUGINS, "test", None, id="scheduler-plugins"),
    ],
)
def test_case_35_pods_are_decorated_for_the_gang_scheduler(operator: Any, label: str | None, annotation: str | None) -> None:
    job = b.defaulted("test", worker_pod_spec={"schedulerName": "mine"})
    for pod in (planning.desired_worker(job, 0, operator), planning.desired_launcher_template(job, operator)):
        assert pod["spec"]["schedulerName"] == ("volcano" if operator is b.VOLCANO else "scheduler-plugins-scheduler")
        assert pod["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") == label
        assert (pod["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name") == annotation


def test_without_gang_scheduling_there_is_no_pod_group() -> None:
    assert scheduling.desired_pod_group(gang_job(), b.OPERATOR, OWNER, {}) is None
