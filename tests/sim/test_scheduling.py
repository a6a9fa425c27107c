"""The scheduler's decisions: which node fits a pod, which wins, and when a gang goes at once."""

from __future__ import annotations

from typing import Any

import pytest

from sim import quantities
from sim import settings as sim_settings
from sim.apiserver import scheduling
from sim.node import nodes

SETTINGS = sim_settings.SimSettings(nodes=4, gpus_per_node=8, cpu_per_node="32", memory_per_node="256Gi")


def node(index: int = 0, **changes: Any) -> dict[str, Any]:
    made = nodes.make_node(SETTINGS, index, "2026-01-01T00:00:00Z")
    made["spec"].update(changes.pop("spec", {}))
    if "labels" in changes:
        made["metadata"]["labels"].update(changes.pop("labels"))
    if "ready" in changes:
        made["status"]["conditions"][0]["status"] = changes.pop("ready")
    assert not changes
    return made


def pod(
    name: str = "p",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    init: list[dict[str, str]] | None = None,
    node_name: str | None = None,
    phase: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}], **spec},
        "status": {"phase": phase} if phase else {},
    }
    if init:
        body["spec"]["initContainers"] = [
            {"name": f"init{i}", "image": "x", "resources": {"requests": r}} for i, r in enumerate(init)
        ]
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


@pytest.mark.parametrize(
    ("candidate", "target", "others", "expected"),
    [
        pytest.param(pod(requests={"cpu": "1"}), node(), [], None, id="small-pod-fits-empty-node"),
        pytest.param(pod(), node(), [], None, id="best-effort-pod-fits"),
        pytest.param(pod(requests={"cpu": "32"}), node(), [], None, id="exactly-the-capacity-fits"),
        pytest.param(pod(requests={"cpu": "33"}), node(), [], "Insufficient cpu", id="too-much-cpu"),
        pytest.param(
            pod(requests={"cpu": "16"}), node(), [pod("a", requests={"cpu": "16500m"})], "Insufficient cpu",
            id="cpu-taken-by-others",
        ),
        pytest.param(
            pod(requests={"cpu": "16"}), node(), [pod("a", requests={"cpu": "30"}, phase="Succeeded")], None,
            id="finished-pods-free-their-cpu",
        ),
        pytest.param(
            pod(requests={"memory": "257Gi"}), node(), [], "Insufficient memory", id="too-much-memory"
        ),
        pytest.param(
            pod(limits={"nvidia.com/gpu": "9"}), node(), [], "Insufficient nvidia.com/gpu",
            id="gpu-limit-counts-as-request",
        ),
        pytest.param(
            pod(limits={"nvidia.com/gpu": "4"}), node(), [pod("a", limits={"nvidia.com/gpu": "4"})], None,
            id="gpus-fill-up-exactly",
        ),
        pytest.param(
            pod(limits={"nvidia.com/gpu": "1"}), node(), [pod("a", limits={"nvidia.com/gpu": "8"})],
            "Insufficient nvidia.com/gpu", id="gpus-all-taken",
        ),
        pytest.param(
            pod(requests={"cpu": "40", "nvidia.com/gpu": "9"}), node(), [],
            "Insufficient cpu, Insufficient nvidia.com/gpu", id="every-missing-resource-is-named",
        ),
        pytest.param(
            pod(requests={"example.com/fpga": "1"}), node(), [], "Insufficient example.com/fpga",
            id="unknown-extended-resource",
        ),
        pytest.param(
            pod(requests={"cpu": "1"}, init=[{"cpu": "33"}]), node(), [], "Insufficient cpu",
            id="an-init-container-bigger-than-the-node",
        ),
        pytest.param(
            pod(requests={"cpu": "20"}, init=[{"cpu": "30"}]), node(), [pod("a", requests={"cpu": "2"})],
            None, id="init-and-main-containers-do-not-add-up",
        ),
        pytest.param(
            pod(), node(), [pod(f"p{i}") for i in range(110)], "Too many pods", id="pod-count-limit"
        ),
        pytest.param(
            pod(nodeSelector={"gpu": "a100"}), node(labels={"gpu": "a100"}), [], None, id="selector-matches"
        ),
        pytest.param(
            pod(nodeSelector={"gpu": "a100"}), node(labels={"gpu": "h100"}), [],
            "node(s) didn't match Pod's node affinity/selector", id="selector-value-differs",
        ),
        pytest.param(
            pod(nodeSelector={"gpu": "a100"}), node(), [],
            "node(s) didn't match Pod's node affinity/selector", id="selector-label-missing",
        ),
        pytest.param(
            pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["sim-node-1"]}]}
            ]}}}),
            node(0), [], "node(s) didn't match Pod's node affinity/selector", id="affinity-in-other-node",
        ),
        pytest.param(
            pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["sim-node-0"]}]}
            ]}}}),
            node(0), [], None, id="affinity-match-fields-on-name",
        ),
        pytest.param(
            pod(), node(spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}), [],
            "node(s) had untolerated taint {dedicated: gpu}", id="untolerated-noschedule-taint",
        ),
        pytest.param(
            pod(), node(spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}), [],
            "node(s) had untolerated taint {dedicated: gpu}", id="untolerated-noexecute-taint",
        ),
        pytest.param(
            pod(), node(spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}]}),
            [], None, id="prefer-no-schedule-is-only-a-preference",
        ),
        pytest.param(
            pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
            node(spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}), [], None,
            id="equal-toleration",
        ),
        pytest.param(
            pod(tolerations=[{"key": "dedicated", "value": "cpu"}]),
            node(spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}), [],
            "node(s) had untolerated taint {dedicated: gpu}", id="equal-toleration-other-value",
        ),
        pytest.param(
            pod(tolerations=[{"key": "dedicated", "operator": "Exists"}]),
            node(spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}), [], None,
            id="exists-toleration-any-value-any-effect",
        ),
        pytest.param(
            pod(tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]),
            node(spec={"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}), [],
            "node(s) had untolerated taint {dedicated: gpu}", id="toleration-for-another-effect",
        ),
        pytest.param(
            pod(tolerations=[{"operator": "Exists"}]),
            node(spec={"taints": [{"key": "anything", "value": "v", "effect": "NoSchedule"}]}), [], None,
            id="exists-without-key-tolerates-everything",
        ),
        pytest.param(
            pod(), node(spec={"unschedulable": True}), [], "node(s) were unschedulable", id="cordoned-node"
        ),
        pytest.param(
            pod(), node(ready="False"), [], "node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
            id="not-ready-node",
        ),
        pytest.param(
            pod(), node(ready="Unknown"), [],
            "node(s) had untolerated taint {node.kubernetes.io/unreachable: }", id="unreachable-node",
        ),
        pytest.param(
            pod(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]), node(ready="False"),
            [], None, id="not-ready-tolerated",
        ),
    ],
)
def test_a_pod_fits_a_node_or_says_why_not(
    candidate: dict[str, Any], target: dict[str, Any], others: list[dict[str, Any]], expected: str | None
) -> None:
    assert scheduling.fit(candidate, target, others) == expected


def usages(count: int = 4, placed: dict[int, list[dict[str, Any]]] | None = None) -> list[scheduling.NodeUsage]:
    return [scheduling.NodeUsage.of(node(i), (placed or {}).get(i, [])) for i in range(count)]


def test_the_least_allocated_node_wins() -> None:
    placed = {0: [pod("a", requests={"cpu": "8"})], 1: [pod("b", requests={"cpu": "2"})], 2: [pod("c", requests={"cpu": "4"})]}
    candidate = pod(requests={"cpu": "1"})
    chosen, message = scheduling.choose_node(candidate, quantities.pod_requests(candidate), usages(3, placed))
    assert (chosen and chosen.name, message) == ("sim-node-1", "")


def test_equal_nodes_are_filled_in_turn() -> None:
    spread = usages(4)
    chosen = []
    for i in range(8):
        candidate = pod(f"p{i}", requests={"cpu": "1"})
        request = quantities.pod_requests(candidate)
        usage, _ = scheduling.choose_node(candidate, request, spread)
        assert usage is not None
        usage.assume(request)
        chosen.append(usage.name)
    assert sorted(chosen) == sorted([f"sim-node-{i}" for i in range(4)] * 2)


def test_an_unschedulable_pod_gets_kubes_message() -> None:
    candidate = pod(limits={"nvidia.com/gpu": "9"})
    chosen, message = scheduling.choose_node(candidate, quantities.pod_requests(candidate), usages(4))
    assert chosen is None
    assert message == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_the_message_counts_each_reason_sorted() -> None:
    spread = [
        scheduling.NodeUsage.of(node(0, spec={"unschedulable": True})),
        scheduling.NodeUsage.of(node(1), [pod("a", requests={"cpu": "32"})]),
        scheduling.NodeUsage.of(node(2), [pod("b", requests={"cpu": "32"})]),
    ]
    candidate = pod(requests={"cpu": "1"})
    _, message = scheduling.choose_node(candidate, quantities.pod_requests(candidate), spread)
    assert message == "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."


def bigger_node(index: int) -> dict[str, Any]:
    """A node with twice the cpu of the others: a class of its own in a ``NodeOrder``."""
    made = node(index)
    for field in ("capacity", "allocatable"):
        made["status"][field]["cpu"] = "64"
    return made


@pytest.mark.parametrize(
    ("spread", "candidates"),
    [
        pytest.param([node(i) for i in range(4)], [pod(f"p{i}", requests={"cpu": "3"}) for i in range(24)],
                     id="equal-nodes-filled-until-full"),
        pytest.param([node(0), bigger_node(1), node(2), bigger_node(3)],
                     [pod(f"p{i}", requests={"cpu": "5", "memory": "1Gi"}) for i in range(30)],
                     id="two-classes-of-node"),
        pytest.param([node(0, spec={"unschedulable": True}), node(1, ready="False"), node(2), node(3)],
                     [pod(f"p{i}", limits={"nvidia.com/gpu": "3"}) for i in range(7)],
                     id="unschedulable-and-not-ready-nodes-and-gpus"),
        pytest.param([node(i, labels={"zone": str(i % 2)}) for i in range(4)],
                     [pod(f"p{i}", requests={"cpu": "1"}, nodeSelector={"zone": "1"}) for i in range(6)]
                     + [pod(f"q{i}", requests={"cpu": "2"}) for i in range(6)],
                     id="node-selector-and-mixed-requests"),
    ],
)
def test_a_node_order_chooses_as_choose_node_does(
    spread: list[dict[str, Any]], candidates: list[dict[str, Any]],
) -> None:
    every = [scheduling.NodeUsage.of(made) for made in spread]
    ordered = {usage.name: usage.copy() for usage in every}
    order = scheduling.NodeOrder()
    for usage in ordered.values():
        order.update(usage)
    for candidate in candidates:
        request = quantities.pod_requests(candidate)
        expected, expected_message = scheduling.choose_node(candidate, request, every)
        chosen, message = order.choose(candidate, request)
        assert (chosen and chosen.name, message) == (expected and expected.name, expected_message)
        if expected is not None and chosen is not None:
            expected.assume(request)
            chosen.assume(request)
            order.update(chosen)


def gang(count: int, gpus: str) -> list[tuple[dict[str, Any], quantities.Resources]]:
    members = [pod(f"w{i}", limits={"nvidia.com/gpu": gpus}) for i in range(count)]
    return [(member, quantities.pod_requests(member)) for member in members]


@pytest.mark.parametrize(
    ("pending", "bound", "minimum", "placed", "admitted", "message"),
    [
        pytest.param(gang(4, "8"), 0, 4, {}, True, "", id="whole-gang-fits"),
        pytest.param(
            gang(5, "8"), 0, 5, {}, False,
            "pod group ns/g cannot be placed: pod w4: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            id="one-too-many-none-bound",
        ),
        pytest.param(
            gang(2, "8"), 0, 4, {}, False, "pod group ns/g is not ready: 2 member(s) of minMember 4 exist",
            id="too-few-members-yet",
        ),
        pytest.param(gang(2, "8"), 2, 4, {}, True, "", id="rest-of-a-gang-already-half-bound"),
        pytest.param(
            gang(4, "4"), 0, 4, {0: [pod("x", limits={"nvidia.com/gpu": "8"})], 1: [pod("y", limits={"nvidia.com/gpu": "8"})]},
            True, "", id="gang-packs-into-remaining-gpus",
        ),
        pytest.param(
            gang(4, "8"), 0, 4, {3: [pod("x", limits={"nvidia.com/gpu": "1"})]}, False,
            "pod group ns/g cannot be placed: pod w3: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            id="one-gpu-taken-blocks-the-gang",
        ),
        pytest.param(gang(3, "1"), 0, 1, {}, True, "", id="more-members-than-min-all-bound"),
    ],
)
def test_a_gang_is_bound_all_together_or_not_at_all(
    pending: list[tuple[dict[str, Any], quantities.Resources]],
    bound: int,
    minimum: int,
    placed: dict[int, list[dict[str, Any]]],
    admitted: bool,
    message: str,
) -> None:
    cluster = usages(4, placed)
    before = [(u.requested, u.pods) for u in cluster]
    plan = scheduling.plan_gang("ns/g", minimum, pending, bound, cluster)
    assert (bool(plan.placements), plan.message) == (admitted, message)
    if admitted:
        assert set(plan.placements) == {p["metadata"]["name"] for p, _ in pending}
    assert [(u.requested, u.pods) for u in cluster] == before


def test_a_gang_placement_never_overcommits_a_node() -> None:
    pending = gang(8, "4")
    plan = scheduling.plan_gang("ns/g", 8, pending, 0, usages(4))
    per_node: dict[str, int] = {}
    for name in plan.placements.values():
        per_node[name] = per_node.get(name, 0) + 4
    assert per_node and max(per_node.values()) <= 8


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        pytest.param({"annotations": {"scheduling.k8s.io/group-name": "g"}}, ("podgroups.scheduling.volcano.sh", "g"), id="volcano"),
        pytest.param({"labels": {"scheduling.x-k8s.io/pod-group": "g"}}, ("podgroups.scheduling.x-k8s.io", "g"), id="coscheduling"),
        pytest.param({}, None, id="no-gang"),
    ],
)
def test_a_pod_names_its_pod_group(meta: dict[str, Any], expected: tuple[str, str] | None) -> None:
    assert scheduling.pod_group_ref({"metadata": {"name": "p", **meta}}) == expected


@pytest.mark.parametrize(
    ("spec", "current", "counts", "phase"),
    [
        pytest.param({"minMember": 2}, None, scheduling.MemberCounts(), "Inqueue", id="admitted-without-min-resources"),
        pytest.param(
            {"minMember": 2, "minResources": {"nvidia.com/gpu": "33"}}, None, scheduling.MemberCounts(), "Pending",
            id="min-resources-exceed-free-capacity",
        ),
        pytest.param(
            {"minMember": 2, "minResources": {"nvidia.com/gpu": "32"}}, None, scheduling.MemberCounts(), "Inqueue",
            id="min-resources-fit",
        ),
        pytest.param({"minMember": 2}, "Inqueue", scheduling.MemberCounts(bound=1, running=1), "Running", id="members-bound"),
        pytest.param({"minMember": 2}, "Inqueue", scheduling.MemberCounts(pending=1, bound=1), "Inqueue", id="half-bound"),
        pytest.param({"minMember": 2}, "Running", scheduling.MemberCounts(succeeded=2), "Completed", id="all-done"),
    ],
)
def test_a_volcano_pod_group_moves_through_its_phases(
    spec: dict[str, Any], current: str | None, counts: scheduling.MemberCounts, phase: str
) -> None:
    group = {"metadata": {"name": "g", "namespace": "ns"}, "spec": spec, "status": {"phase": current} if current else {}}
    assert scheduling.volcano_group_status(group, counts, usages(4))["phase"] == phase


@pytest.mark.parametrize(
    ("counts", "phase"),
    [
        pytest.param(scheduling.MemberCounts(pending=2), "Pending", id="pending"),
        pytest.param(scheduling.MemberCounts(bound=2), "Scheduled", id="scheduled"),
        pytest.param(scheduling.MemberCounts(running=2), "Running", id="running"),
        pytest.param(scheduling.MemberCounts(succeeded=2), "Finished", id="finished"),
        pytest.param(scheduling.MemberCounts(succeeded=1, failed=1), "Failed", id="failed"),
    ],
)
def test_a_coscheduling_pod_group_moves_through_its_phases(counts: scheduling.MemberCounts, phase: str) -> None:
    group = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2}}
    assert scheduling.coscheduling_group_status(group, counts)["phase"] == phase


def test_member_pods_are_counted_by_where_they_stand() -> None:
    members = [
        pod("a"),
        pod("b", node_name="sim-node-0"),
        pod("c", node_name="sim-node-0", phase="Running"),
        pod("d", node_name="sim-node-0", phase="Succeeded"),
        pod("e", node_name="sim-node-0", phase="Failed"),
    ]
    assert scheduling.count_members(members) == scheduling.MemberCounts(1, 1, 1, 1, 1)
