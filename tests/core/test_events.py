"""Upstream's child and pod Events (spec §9.2) as pure functions, Kueue's word on a job's Workload as an
Event on the job, and how a recorder combines them."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core import events
from shared.core.events import Event
from shared.kube import recording


def test_children_get_upstreams_reasons_and_messages() -> None:
    assert events.created("PyTorchJob", "Pod", "a-master-0") == Event("Normal", "SuccessfulCreatePod", "Created pod: a-master-0")
    assert events.created("TFJob", "Service", "t-ps-0") == Event("Normal", "SuccessfulCreateService", "Created service: t-ps-0")
    assert events.created("MPIJob", "Pod", "pi-launcher") == Event("Normal", "MPIJobRunning", "launcher pod created success: pi-launcher")
    assert events.created("MPIJob", "Pod", "pi-worker-1") == Event("Normal", "SuccessfulCreatePod", "Created worker pod: pi-worker-1")
    assert events.created("MPIJob", "ConfigMap", "pi-config") is None
    assert events.create_failed("JAXJob", "Pod", "j-worker-0", "quota") == Event("Warning", "FailedCreatePod", "Error creating: quota")
    assert events.deleted("PaddleJob", "Service", "p-worker-0", "p") == [Event("Normal", "SuccessfulDeleteService", "Deleted service: p-worker-0")]
    assert [e.reason for e in events.deleted("PyTorchJob", "PodGroup", "x", "x")] == ["JobTerminated", "SuccessfulDeletePodGroup"]
    assert events.ttl_deleted("PyTorchJob", "x") == Event("Normal", "SuccessfulDeletePod", "Deleted job: x")
    assert events.ttl_deleted("TFJob", "x") == Event("Normal", "SuccessfulDeleteJob", "Deleted job: x")


def pod(name: str, phase: str, **container: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
            "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "restartCount": 0, **container}]}}


def test_pods_say_their_exit_once_per_incarnation_and_abnormal_states_while_active() -> None:
    found = events.pod_events([
        pod("a", "Succeeded", state={"terminated": {"exitCode": 0}}),
        pod("b", "Running", state={"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "oom"}}),
        pod("c", "Pending", state={"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}),
        pod("d", "Running", state={"running": {}}),
    ], "pytorch")
    said = [e for _, e in found]
    assert Event("Normal", "ExitedWithCode", "Pod: ns.a exited with code 0") in said
    assert Event("Warning", "OOMKilled", "Error pod b container pytorch exitCode: 137 terminated message: oom") in said
    assert Event("Warning", "ImagePullBackOff", "Error pod c container pytorch waiting message: no such image") in said
    assert len({mark for mark, _ in found}) == len(found) == 4  # b also exited (ExitedWithCode 137)


def test_a_recorder_combines_one_reason_into_one_event() -> None:
    combined = recording.combined([
        Event("Normal", "SuccessfulCreatePod", "Created pod: a"), Event("Normal", "SuccessfulCreateService", "Created service: a"),
        Event("Normal", "SuccessfulCreatePod", "Created pod: b"),
        Event("Normal", "ExitedWithCode", "Pod: ns.a exited with code 0"), Event("Normal", "ExitedWithCode", "Pod: ns.b exited with code 1"),
    ])
    assert combined == [
        Event("Normal", "SuccessfulCreatePod", "Created pod: a, b"), Event("Normal", "SuccessfulCreateService", "Created service: a"),
        Event("Normal", "ExitedWithCode", "Pod: ns.a exited with code 0; Pod: ns.b exited with code 1"),
    ]


def workload(*conditions: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "pytorchjob-p-1a2b3", "namespace": "ns", "uid": "u-wl"},
            "status": {"conditions": list(conditions)}}


def quota_reserved(status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": "QuotaReserved", "status": status, "reason": reason, "message": message}


MISSING_QUEUE = "LocalQueue missing doesn't exist"
NO_GPU_FLAVOUR = "couldn't assign flavors to pod set master: resource nvidia.com/gpu unavailable in ClusterQueue"


@pytest.mark.parametrize("conditions, said", [
    pytest.param([quota_reserved("False", "Inadmissible", MISSING_QUEUE)],
                 [Event("Warning", "Inadmissible", MISSING_QUEUE)], id="no-such-local-queue"),
    pytest.param([quota_reserved("False", "Pending", NO_GPU_FLAVOUR)],
                 [Event("Warning", "Pending", NO_GPU_FLAVOUR)], id="no-flavour-for-the-gpus"),
    pytest.param([quota_reserved("True", "QuotaReserved", "Quota reserved in ClusterQueue team-a")], [],
                 id="admitted-says-nothing"),
    pytest.param([quota_reserved("False", "Pending", "")], [], id="no-message-nothing-to-say"),
    pytest.param([{"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted"}], [],
                 id="eviction-is-kueues-own-stopped-event"),
])
def test_kueue_says_why_a_job_waits_on_its_workload_and_the_job_gets_it_as_kueue_wrote_it(
    conditions: list[dict[str, str]], said: list[Event],
) -> None:
    assert [event for _, event in events.queue_events([workload(*conditions)])] == said


def test_each_reason_a_workload_gives_is_said_once() -> None:
    first = events.queue_events([workload(quota_reserved("False", "Inadmissible", MISSING_QUEUE))])
    again = events.queue_events([workload(quota_reserved("False", "Inadmissible", MISSING_QUEUE))])
    other = events.queue_events([workload(quota_reserved("False", "Pending", NO_GPU_FLAVOUR))])
    assert [mark for mark, _ in first] == [mark for mark, _ in again]
    assert {mark for mark, _ in first}.isdisjoint(mark for mark, _ in other)
