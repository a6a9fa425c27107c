"""Upstream's child and pod Events (spec §9.2) as pure functions, and how a recorder combines them."""

from __future__ import annotations

from typing import Any

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
