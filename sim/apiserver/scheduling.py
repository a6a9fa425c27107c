"""The local cluster's scheduler: pending pods in, bindings out.

In: pods without `spec.nodeName`, the nodes, the pods already bound, and the
PodGroups of gang-scheduled pods (Volcano `podgroups.scheduling.volcano.sh`,
scheduler-plugins `podgroups.scheduling.x-k8s.io`).
Out, through the store: `spec.nodeName` and condition `PodScheduled=True` on
bound pods; `PodScheduled=False` / `Unschedulable` with kube's message
(`0/4 nodes are available: 4 Insufficient nvidia.com/gpu.`) on the others,
written only when it changes; PodGroup `status.phase` (Volcano Pending →
Inqueue → Running, scheduler-plugins Pending → Scheduled → Running).

The decisions are pure functions (`fit`, `node_reasons`, `choose_node`,
`plan_gang`, `unschedulable_message`, `volcano_group_status`,
`coscheduling_group_status`); `NodeOrder` keeps the nodes in the order
`choose_node` prefers them, so that placing a pod reads the first nodes, not
all of them, with `choose_node`'s answer; `Scheduler` keeps a cache fed by one watch per
resource and does the writes. It schedules every pod whatever its
`schedulerName`: it is the only scheduler of the local cluster.

Filters, in kube's order: unschedulable node, taints (NoSchedule/NoExecute,
plus the implicit `node.kubernetes.io/not-ready` taint of a NotReady node),
node selector and required node affinity, pod count, resources (effective
request = max(sum of containers, each init container) + overhead, requests
defaulting to limits). Score: least allocated (mean free fraction of cpu,
memory and, when requested, GPUs), ties to the node with fewer pods, then by
name.

Gangs: a pod with annotation `scheduling.k8s.io/group-name` (Volcano) or
label `scheduling.x-k8s.io/pod-group` (scheduler-plugins) belongs to that
PodGroup of its namespace. Its pending pods are bound together only when at
least `spec.minMember` members are pending or bound and all pending ones fit
at once; otherwise none is, and each gets `PodScheduled=False`. A pod whose
PodGroup does not exist waits, as with both real schedulers. A pod with
`spec.schedulingGates` waits (PodScheduled=False, reason SchedulingGated)
until its gates are removed.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from sim import errors, listwatching, objects, quantities
from sim import settings as sim_settings
from sim.apiserver import store as sim_store

log = logging.getLogger(__name__)

VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
"""Annotation naming a pod's Volcano PodGroup."""

COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""Label naming a pod's scheduler-plugins (coscheduling) PodGroup."""

VOLCANO_PODGROUPS = "podgroups.scheduling.volcano.sh"
COSCHEDULING_PODGROUPS = "podgroups.scheduling.x-k8s.io"

RETRY_INTERVAL = 0.5
"""Seconds at least between two retries of the unschedulable pods (each one after a change)."""

GROUP_STATUS_DELAY = 0.02
"""Seconds PodGroup status writes wait so that a burst of member changes makes one write."""

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_SCORED = ("cpu", "memory")
_NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
_UNREACHABLE_TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


# --------------------------------------------------------------------------
# Pure decisions
# --------------------------------------------------------------------------


@dataclasses.dataclass
class NodeUsage:
    """A node with what is already placed on it: the scheduler's view of one node."""

    node: dict[str, Any]
    allocatable: quantities.Resources
    requested: quantities.Resources = dataclasses.field(default_factory=dict)
    pods: int = 0

    @classmethod
    def of(cls, node: dict[str, Any], pods_on_node: Iterable[dict[str, Any]] = ()) -> NodeUsage:
        """The usage of `node` given the pods bound to it (terminal pods free their share)."""
        status = node.get("status") or {}
        usage = cls(node, quantities.parse_list(status.get("allocatable") or status.get("capacity")))
        for pod in pods_on_node:
            if (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                usage.assume(quantities.pod_requests(pod))
        return usage

    @property
    def name(self) -> str:
        return str(self.node["metadata"]["name"])

    def assume(self, request: Mapping[str, Fraction]) -> None:
        """Count a pod with `request` as placed here."""
        self.requested = quantities.add(self.requested, request)
        self.pods += 1

    def forget(self, request: Mapping[str, Fraction]) -> None:
        """Undo `assume`."""
        for name, value in request.items():
            self.requested[name] = self.requested.get(name, Fraction(0)) - value
        self.pods -= 1

    def copy(self) -> NodeUsage:
        return NodeUsage(self.node, self.allocatable, dict(self.requested), self.pods)


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """True when one of the pod's tolerations tolerates `taint` (kube's ToleratesTaint)."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif operator == "Equal":
            if key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
                return True
    return False


def _node_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's taints plus those kube's node lifecycle controller would add for its conditions."""
    taints: list[Mapping[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
    keys = {taint.get("key") for taint in taints}
    ready = "Unknown"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = condition.get("status") or "Unknown"
    if ready == "False" and _NOT_READY_TAINT["key"] not in keys:
        taints.append(_NOT_READY_TAINT)
    elif ready == "Unknown" and _UNREACHABLE_TAINT["key"] not in keys:
        taints.append(_UNREACHABLE_TAINT)
    return taints


def _match_expression(expression: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator", "")
    wanted = [str(v) for v in expression.get("values") or []]
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, limit = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > limit if operator == "Gt" else have < limit
    return False


def matches_node(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """`spec.nodeSelector` and required node affinity (matchExpressions, matchFields on name)."""
    spec = pod.get("spec") or {}
    labels = objects.metadata(node).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    )
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": objects.metadata(node).get("name", "")}
    # Terms are ORed; the expressions of one term are ANDed; an empty term matches nothing.
    for term in terms:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue
        if all(_match_expression(e, labels) for e in expressions) and all(
            _match_expression(e, fields) for e in field_expressions
        ):
            return True
    return False


def node_reasons(pod: Mapping[str, Any], request: Mapping[str, Fraction], usage: NodeUsage) -> list[str]:
    """Why `pod` (whose effective request is `request`) cannot go to the node; [] when it can.

    The first failing filter wins, as in kube; the resource filter lists every
    insufficient resource.
    """
    node = usage.node
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not tolerates(tolerations, _UNSCHEDULABLE_TAINT):
        return ["node(s) were unschedulable"]
    for taint in _node_taints(node):
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return [f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"]
    if not matches_node(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    max_pods = usage.allocatable.get("pods")
    if max_pods is not None and usage.pods + 1 > max_pods:
        return ["Too many pods"]
    reasons = []
    for name in sorted(request):
        wanted = request[name]
        if wanted <= 0 or name == "pods":
            continue
        free = usage.allocatable.get(name, Fraction(0)) - usage.requested.get(name, Fraction(0))
        if wanted > free:
            reasons.append(f"Insufficient {name}")
    return reasons


def fit(pod: dict[str, Any], node: dict[str, Any], pods_on_node: Iterable[dict[str, Any]]) -> str | None:
    """None when `pod` fits on `node` next to `pods_on_node`, else why not (kube's wording)."""
    reasons = node_reasons(pod, quantities.pod_requests(pod), NodeUsage.of(node, pods_on_node))
    return ", ".join(reasons) or None


def score(request: Mapping[str, Fraction], usage: NodeUsage) -> Fraction:
    """Least-allocated score: the mean fraction left free after placing `request` (higher is better)."""
    scored = list(_SCORED) + [name for name in request if name not in _SCORED and request[name] > 0]
    total = Fraction(0)
    counted = 0
    for name in scored:
        allocatable = usage.allocatable.get(name, Fraction(0))
        if allocatable <= 0:
            continue
        used = usage.requested.get(name, Fraction(0)) + request.get(name, Fraction(0))
        total += (allocatable - used) / allocatable
        counted += 1
    return total / counted if counted else Fraction(0)


def unschedulable_message(node_count: int, reasons: Iterable[Sequence[str]]) -> str:
    """kube's FitError message: `0/4 nodes are available: 1 Insufficient cpu, 3 Too many pods.`"""
    counts: dict[str, int] = {}
    for node_reasons_ in reasons:
        for reason in node_reasons_:
            counts[reason] = counts.get(reason, 0) + 1
    if node_count == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{count} {reason}" for reason, count in counts.items())
    return f"0/{node_count} nodes are available: {', '.join(parts)}."


def choose_node(
    pod: Mapping[str, Any], request: Mapping[str, Fraction], usages: Sequence[NodeUsage]
) -> tuple[NodeUsage | None, str]:
    """The best node for `pod` and "", or None and the unschedulable message."""
    return _pick(pod, request, ([usage] for usage in usages), len(usages))


def _pick(
    pod: Mapping[str, Any], request: Mapping[str, Fraction], runs: Iterable[Iterable[NodeUsage]], node_count: int,
) -> tuple[NodeUsage | None, str]:
    """The best node of the first that fits in each of ``runs`` (each run in the order in which
    its first fitting node is its best) and "", or None and the unschedulable message."""
    best: NodeUsage | None = None
    best_key: tuple[Fraction, int, str] | None = None
    all_reasons = []
    for run in runs:
        for usage in run:
            reasons = node_reasons(pod, request, usage)
            if reasons:
                all_reasons.append(reasons)
                continue
            # Higher score first, then fewer pods, then name: negate to use min-ordering.
            key = (-score(request, usage), usage.pods, usage.name)
            if best_key is None or key < best_key:
                best, best_key = usage, key
            break
    if best is not None:
        return best, ""
    return None, unschedulable_message(node_count, all_reasons)


def _scored_names(request: Mapping[str, Fraction]) -> frozenset[str]:
    """The resources ``score`` averages over for ``request``: cpu, memory and any other it asks for."""
    return frozenset(_SCORED).union(name for name, value in request.items() if value > 0)


OrderKey = tuple[Fraction, int, str]
"""A node's place in a :class:`NodeOrder`: (minus its free share, its pods, its name)."""


class NodeOrder:
    """The nodes kept sorted as :func:`choose_node` prefers them, so that a pod is placed by reading
    the first nodes, not all of them.

    For one request, ``score`` differs between two nodes of equal allocatable only by what is already
    requested on them: the request's share of the node is the same on both. So the nodes are kept per
    class of equal allocatable, each class sorted by (minus the free share summed over the scored
    resources, pods, name) — one sorted list per set of scored resources asked for so far. A pod's
    best node is then the first that passes :func:`node_reasons` in each class, the best of those by
    ``choose_node``'s own key; only when no node fits is every node read (for the message).
    ``update`` after every change to a node's usage; ``remove`` when the node goes.
    """

    def __init__(self) -> None:
        self._usages: dict[str, NodeUsage] = {}
        self._classes: dict[str, tuple[tuple[str, Fraction], ...]] = {}
        """Node → its allocatable, as the class it belongs to."""
        self._sorted: dict[frozenset[str], dict[tuple[tuple[str, Fraction], ...], list[OrderKey]]] = {}
        """Scored resources → class → the class's nodes in order."""
        self._keys: dict[tuple[frozenset[str], str], OrderKey] = {}

    def __len__(self) -> int:
        return len(self._usages)

    @staticmethod
    def _key(scored: frozenset[str], usage: NodeUsage) -> OrderKey:
        free = Fraction(0)
        for name in scored:
            allocatable = usage.allocatable.get(name, Fraction(0))
            if allocatable > 0:
                free += (allocatable - usage.requested.get(name, Fraction(0))) / allocatable
        return (-free, usage.pods, usage.name)

    def _place(self, scored: frozenset[str], usage: NodeUsage) -> None:
        klass = self._classes[usage.name]
        key = self._key(scored, usage)
        self._keys[(scored, usage.name)] = key
        bisect.insort(self._sorted[scored].setdefault(klass, []), key)

    def _unplace(self, scored: frozenset[str], name: str) -> None:
        key = self._keys.pop((scored, name))
        ordered = self._sorted[scored][self._classes[name]]
        del ordered[bisect.bisect_left(ordered, key)]
        if not ordered:
            del self._sorted[scored][self._classes[name]]

    def update(self, usage: NodeUsage) -> None:
        """The node is new, or its allocatable, requests or pod count changed."""
        name = usage.name
        klass = tuple(sorted(usage.allocatable.items()))
        if name in self._usages:
            for scored in self._sorted:
                self._unplace(scored, name)
        self._usages[name] = usage
        self._classes[name] = klass
        for scored in self._sorted:
            self._place(scored, usage)

    def remove(self, name: str) -> None:
        if name in self._usages:
            for scored in self._sorted:
                self._unplace(scored, name)
            del self._usages[name]
            del self._classes[name]

    def choose(self, pod: Mapping[str, Any], request: Mapping[str, Fraction]) -> tuple[NodeUsage | None, str]:
        """What ``choose_node(pod, request, every node)`` answers."""
        scored = _scored_names(request)
        if scored not in self._sorted:
            self._sorted[scored] = {}
            for usage in self._usages.values():
                self._place(scored, usage)
        runs = ((self._usages[name] for _, _, name in ordered) for ordered in self._sorted[scored].values())
        return _pick(pod, request, runs, len(self._usages))


@dataclasses.dataclass(frozen=True)
class GangPlan:
    """The outcome of planning a gang: where each pending pod goes, or why none goes."""

    placements: dict[str, str]
    """Pending pod name → node name; empty when the gang is not admitted."""
    message: str
    """Why the gang is not admitted ("" when it is)."""


def plan_gang(
    group_name: str,
    min_member: int,
    pending: Sequence[tuple[Mapping[str, Any], Mapping[str, Fraction]]],
    bound: int,
    usages: Sequence[NodeUsage],
) -> GangPlan:
    """Place all `pending` (pod, request) pairs of a gang at once, or none of them.

    `bound` counts the group's members already bound and not finished. The
    usages are not changed.
    """
    if len(pending) + bound < min_member:
        return GangPlan(
            {},
            f"pod group {group_name} is not ready: {len(pending) + bound} member(s) of "
            f"minMember {min_member} exist",
        )
    trial = [usage.copy() for usage in usages]
    placements: dict[str, str] = {}
    # Biggest first so that a gang which fits is not defeated by fragmentation from small members.
    order = sorted(pending, key=lambda pair: (-sum(pair[1].values()), pair[0]["metadata"]["name"]))
    for pod, request in order:
        usage, message = choose_node(pod, request, trial)
        if usage is None:
            name = pod["metadata"]["name"]
            return GangPlan({}, f"pod group {group_name} cannot be placed: pod {name}: {message}")
        usage.assume(request)
        placements[pod["metadata"]["name"]] = usage.name
    return GangPlan(placements, "")


GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
"""kube's PodScheduled message for a pod with spec.schedulingGates."""


def is_gated(pod: Mapping[str, Any]) -> bool:
    """True when the pod has scheduling gates (spec.schedulingGates, e.g. Kueue's): it waits."""
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def pod_group_ref(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(PodGroup resource, name) a pod belongs to, or None for a pod outside any gang."""
    metadata = objects.metadata(pod)
    volcano = (metadata.get("annotations") or {}).get(VOLCANO_GROUP_ANNOTATION)
    if volcano:
        return VOLCANO_PODGROUPS, str(volcano)
    coscheduling = (metadata.get("labels") or {}).get(COSCHEDULING_GROUP_LABEL)
    if coscheduling:
        return COSCHEDULING_PODGROUPS, str(coscheduling)
    return None


def min_member(group: Mapping[str, Any]) -> int:
    """`spec.minMember` of a PodGroup (1 when unset, as both APIs default)."""
    value = (group.get("spec") or {}).get("minMember")
    return int(value) if value is not None else 1


@dataclasses.dataclass(frozen=True)
class MemberCounts:
    """How a PodGroup's member pods stand."""

    pending: int = 0
    """Not yet bound."""
    bound: int = 0
    """Bound, not yet running."""
    running: int = 0
    succeeded: int = 0
    failed: int = 0


def count_members(pods: Iterable[Mapping[str, Any]]) -> MemberCounts:
    """Tally member pods by where they stand."""
    pending = bound = running = succeeded = failed = 0
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Succeeded":
            succeeded += 1
        elif phase == "Failed":
            failed += 1
        elif phase == "Running":
            running += 1
        elif (pod.get("spec") or {}).get("nodeName"):
            bound += 1
        else:
            pending += 1
    return MemberCounts(pending, bound, running, succeeded, failed)


def fits_free_capacity(min_resources: Mapping[str, Fraction], usages: Sequence[NodeUsage]) -> bool:
    """True when the cluster's free capacity, summed over schedulable nodes, covers `min_resources`."""
    free: quantities.Resources = {}
    for usage in usages:
        if (usage.node.get("spec") or {}).get("unschedulable") or not objects.is_ready(usage.node):
            continue
        for name, value in usage.allocatable.items():
            free[name] = free.get(name, Fraction(0)) + value - usage.requested.get(name, Fraction(0))
    return all(free.get(name, Fraction(0)) >= value for name, value in min_resources.items() if value > 0)


def volcano_group_status(
    group: Mapping[str, Any], counts: MemberCounts, usages: Sequence[NodeUsage]
) -> dict[str, Any]:
    """The Volcano PodGroup status the scheduler would write.

    Pending until `spec.minResources` fit the free capacity (Volcano's enqueue
    action), then Inqueue (an operator waiting for admission creates its pods
    now), Running once minMember members are bound or running, Completed once
    minMember have succeeded. A group never goes back from Inqueue to Pending.
    """
    status = dict(group.get("status") or {})
    phase = status.get("phase") or "Pending"
    minimum = min_member(group)
    allocated = counts.bound + counts.running
    if counts.succeeded >= minimum and allocated == 0:
        phase = "Completed"
    elif allocated + counts.succeeded >= minimum and allocated > 0:
        phase = "Running"
    elif phase in ("Pending", ""):
        min_resources = quantities.parse_list((group.get("spec") or {}).get("minResources"))
        phase = "Inqueue" if fits_free_capacity(min_resources, usages) else "Pending"
    elif phase == "Running":
        phase = "Inqueue"
    status["phase"] = phase
    status["running"] = counts.running
    status["succeeded"] = counts.succeeded
    status["failed"] = counts.failed
    return status


def coscheduling_group_status(group: Mapping[str, Any], counts: MemberCounts) -> dict[str, Any]:
    """The scheduler-plugins PodGroup status: Pending → Scheduled → Running → Finished / Failed."""
    status = dict(group.get("status") or {})
    minimum = min_member(group)
    scheduled = counts.bound + counts.running + counts.succeeded
    if counts.failed and counts.running + counts.bound == 0:
        phase = "Failed"
    elif counts.succeeded >= minimum and counts.running + counts.bound == 0:
        phase = "Finished"
    elif counts.running + counts.succeeded >= minimum:
        phase = "Running"
    elif scheduled >= minimum:
        phase = "Scheduled"
    else:
        phase = "Pending"
    status["phase"] = phase
    status["scheduled"] = scheduled
    status["running"] = counts.running
    status["succeeded"] = counts.succeeded
    status["failed"] = counts.failed
    return status


def scheduled_condition(status: str, reason: str | None, message: str | None, now: str) -> dict[str, Any]:
    """A PodScheduled condition."""
    condition: dict[str, Any] = {
        "type": "PodScheduled",
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def get_condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def now_rfc3339(clock: float) -> str:
    """A kube timestamp (second precision, UTC) for the epoch time `clock`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock))


# --------------------------------------------------------------------------
# Effects
# --------------------------------------------------------------------------

Key = tuple[str, str]
"""(namespace, name) of a pod or PodGroup."""


def _key(obj: Mapping[str, Any]) -> Key:
    metadata = obj["metadata"]
    return metadata.get("namespace") or "", metadata["name"]


@dataclasses.dataclass
class _Bound:
    node: str
    request: quantities.Resources


class Scheduler:
    """Binds pending pods to the simulated nodes; `run()` until cancelled."""

    def __init__(self, store: sim_store.Store, settings: sim_settings.SimSettings) -> None:
        self._store = store
        self._settings = settings
        self._nodes: dict[str, dict[str, Any]] = {}
        self._usages: dict[str, NodeUsage] = {}
        self._order = NodeOrder()
        """The usages, sorted for placing a pod: updated after every change to one."""
        self._bound: dict[Key, _Bound] = {}
        self._pending: dict[Key, dict[str, Any]] = {}
        self._requests: dict[Key, quantities.Resources] = {}
        self._unschedulable: set[Key] = set()
        self._assumed: set[Key] = set()
        self._gated: set[Key] = set()
        """Pending pods with scheduling gates: not scheduled until the gates are removed."""
        """Bound by us, the watch not yet showing spec.nodeName: older events must not undo it."""
        self._messages: dict[Key, str] = {}
        """The Unschedulable message last written (or seen) per pending pod."""
        self._groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._members: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._dirty_groups: set[tuple[str, str, str]] = set()
        self._changed = asyncio.Event()
        """Set when room may have appeared (node change, pod gone or finished, PodGroup change)."""
        self._groups_changed = asyncio.Event()
        """Set when a PodGroup or one of its members changed: its status may need a write."""
        self._ready = asyncio.Event()

    async def run(self) -> None:
        """Watch nodes, pods and PodGroups; schedule until cancelled."""
        informers = [
            listwatching.Informer(self._store, "nodes", self._on_node, name="sim-scheduler-nodes"),
            listwatching.Informer(
                self._store,
                VOLCANO_PODGROUPS,
                lambda kind, group: self._on_group(VOLCANO_PODGROUPS, kind, group),
                name="sim-scheduler-volcano-groups",
            ),
            listwatching.Informer(
                self._store,
                COSCHEDULING_PODGROUPS,
                lambda kind, group: self._on_group(COSCHEDULING_PODGROUPS, kind, group),
                name="sim-scheduler-coscheduling-groups",
            ),
            listwatching.Informer(self._store, "pods", self._on_pod, name="sim-scheduler-pods"),
        ]
        async with asyncio.TaskGroup() as tasks:
            for informer in informers:
                tasks.create_task(informer.run(), name=informer.name)
            tasks.create_task(self._schedule_forever(), name="sim-scheduler-binding")
            tasks.create_task(self._retry_forever(), name="sim-scheduler-retry")
            tasks.create_task(self._group_status_forever(), name="sim-scheduler-podgroup-status")

    # -- cache ---------------------------------------------------------

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._nodes.pop(name, None)
            self._usages.pop(name, None)
            self._order.remove(name)
        else:
            self._nodes[name] = node
            usage = self._usages.get(name)
            allocatable = quantities.parse_list(
                (node.get("status") or {}).get("allocatable") or (node.get("status") or {}).get("capacity")
            )
            if usage is None:
                usage = NodeUsage(node, allocatable)
                for bound in self._bound.values():
                    if bound.node == name:
                        usage.assume(bound.request)
                self._usages[name] = usage
            else:
                usage.node, usage.allocatable = node, allocatable
            self._order.update(usage)
        self._wake_all()

    def _on_group(self, resource: str, kind: str, group: dict[str, Any]) -> None:
        namespace, name = _key(group)
        gkey = (resource, namespace, name)
        if kind == "DELETED":
            self._groups.pop(gkey, None)
        else:
            self._groups[gkey] = group
            self._dirty_groups.add(gkey)
            self._groups_changed.set()
        for member in self._members.get(gkey, {}).values():
            mkey = _key(member)
            if mkey in self._pending:
                self._enqueue(mkey)
        self._changed.set()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key = _key(pod)
        ref = pod_group_ref(pod)
        gkey = (ref[0], key[0], ref[1]) if ref else None
        if gkey is not None:
            if kind == "DELETED":
                self._members.get(gkey, {}).pop(key[1], None)
            else:
                self._members.setdefault(gkey, {})[key[1]] = pod
            self._dirty_groups.add(gkey)
            self._groups_changed.set()
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        terminated = kind == "DELETED" or phase in TERMINAL_PHASES
        node = spec.get("nodeName")
        if key in self._assumed:
            if not (terminated or node):
                return  # an event older than our binding
            self._assumed.discard(key)
        if terminated or node:
            self._pending.pop(key, None)
            self._unschedulable.discard(key)
            self._messages.pop(key, None)
            self._gated.discard(key)
        old = self._bound.get(key)
        if old is not None and (terminated or node != old.node):
            self._bound.pop(key)
            usage = self._usages.get(old.node)
            if usage is not None:
                usage.forget(old.request)
                self._order.update(usage)
            self._wake_all()
        if terminated:
            self._requests.pop(key, None)
            self._assumed.discard(key)
            return
        if node:
            if key not in self._bound:
                request = self._request(key, pod)
                self._bound[key] = _Bound(node, request)
                usage = self._usages.get(node)
                if usage is not None:
                    usage.assume(request)
                    self._order.update(usage)
            return
        if objects.metadata(pod).get("deletionTimestamp"):
            self._pending.pop(key, None)
            return
        self._pending[key] = pod
        if key not in self._messages:
            current = get_condition(pod, "PodScheduled")
            if current is not None and current.get("reason") in ("Unschedulable", "SchedulingGated"):
                self._messages[key] = str(current.get("message") or "")
        if is_gated(pod):
            if key not in self._gated:
                self._gated.add(key)
                self._enqueue(key)
            return
        if key in self._gated:
            self._gated.discard(key)
            self._enqueue(key)
        if kind == "ADDED" or key not in self._unschedulable:
            self._enqueue(key)

    def _request(self, key: Key, pod: dict[str, Any]) -> quantities.Resources:
        request = self._requests.get(key)
        if request is None:
            try:
                request = quantities.pod_requests(pod)
            except ValueError as exc:
                log.warning("pod %s/%s has an invalid resource quantity: %s", *key, exc)
                request = {}
            self._requests[key] = request
        return request

    def _enqueue(self, key: Key) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def _wake_all(self) -> None:
        self._changed.set()

    # -- loops ---------------------------------------------------------

    async def _retry_forever(self) -> None:
        """Requeue unschedulable pods when the cluster changed, at most every RETRY_INTERVAL."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                for key in list(self._unschedulable):
                    if key in self._pending:
                        self._enqueue(key)
                for gkey, group in self._groups.items():
                    if gkey[0] == VOLCANO_PODGROUPS and (group.get("status") or {}).get("phase") in (None, "", "Pending"):
                        # Pending for want of capacity: the change may have made room.
                        self._dirty_groups.add(gkey)
                        self._groups_changed.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sim scheduler: retrying unschedulable pods failed")
            await asyncio.sleep(RETRY_INTERVAL)

    async def _schedule_forever(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            try:
                await self._schedule(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sim scheduler: scheduling pod %s/%s failed", *key)

    async def _group_status_forever(self) -> None:
        """Write changed PodGroup statuses, coalescing bursts of member changes."""
        while True:
            await self._groups_changed.wait()
            await asyncio.sleep(GROUP_STATUS_DELAY)
            self._groups_changed.clear()
            try:
                await self._update_groups()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sim scheduler: updating PodGroup status failed")

    async def _schedule(self, key: Key) -> None:
        pod = self._pending.get(key)
        if pod is None:
            return
        if key in self._gated:
            await self._mark_unschedulable(key, pod, GATED_MESSAGE, reason="SchedulingGated")
            self._unschedulable.discard(key)
            return
        ref = pod_group_ref(pod)
        if ref is None:
            request = self._request(key, pod)
            usage, message = self._order.choose(pod, request)
            if usage is None:
                await self._mark_unschedulable(key, pod, message)
                return
            usage.assume(request)
            self._order.update(usage)
            self._assume(key, usage.name, request)
            await self._bind(key, pod, usage.name)
            return
        resource, group_name = ref
        gkey = (resource, key[0], group_name)
        group = self._groups.get(gkey)
        if group is None:
            await self._mark_unschedulable(key, pod, f'podgroup "{group_name}" not found')
            return
        usages = [self._usages[name] for name in sorted(self._usages)]
        members = list(self._members.get(gkey, {}).values())
        pending = []
        bound = 0
        for member in members:
            mkey = _key(member)
            if mkey in self._pending and mkey not in self._gated:
                pending.append((self._pending[mkey], self._request(mkey, self._pending[mkey])))
            elif mkey in self._bound:
                bound += 1
        plan = plan_gang(f"{key[0]}/{group_name}", min_member(group), pending, bound, usages)
        if not plan.placements:
            for member, _ in pending:
                await self._mark_unschedulable(_key(member), member, plan.message)
            return
        binds = []
        for member, request in pending:
            mkey = _key(member)
            node = plan.placements[mkey[1]]
            self._usages[node].assume(request)
            self._order.update(self._usages[node])
            self._assume(mkey, node, request)
            binds.append(self._bind(mkey, member, node))
        self._dirty_groups.add(gkey)
        self._groups_changed.set()
        await asyncio.gather(*binds)

    def _assume(self, key: Key, node: str, request: quantities.Resources) -> None:
        self._bound[key] = _Bound(node, request)
        self._assumed.add(key)
        self._pending.pop(key, None)
        self._unschedulable.discard(key)
        self._messages.pop(key, None)

    async def _bind(self, key: Key, pod: dict[str, Any], node: str) -> None:
        """Set spec.nodeName, then PodScheduled=True; a vanished pod gives its place back."""
        namespace, name = key
        try:
            await self._store.patch("pods", namespace, name, {"spec": {"nodeName": node}}, "merge")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Give the place back; a pod that still exists is tried again.
            self._assumed.discard(key)
            bound = self._bound.pop(key, None)
            if bound is not None and bound.node in self._usages:
                self._usages[bound.node].forget(bound.request)
                self._order.update(self._usages[bound.node])
            if isinstance(exc, errors.ApiError) and exc.code == 404:
                return
            self._pending[key] = pod
            self._unschedulable.add(key)
            self._changed.set()
            raise
        condition = scheduled_condition("True", None, None, now_rfc3339(time.time()))
        try:
            await self._set_condition(namespace, name, condition)
        except errors.ApiError as exc:
            if exc.code != 404:
                raise

    async def _set_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        """Replace the pod's PodScheduled condition through the status subresource (re-read on 409)."""
        def replace(pod: dict[str, Any]) -> bool:
            status = pod.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != condition["type"]]
            conditions.append(condition)
            status["conditions"] = conditions
            status.setdefault("phase", "Pending")
            return True

        if not await self._store.change_status("pods", namespace, name, replace, 10):
            log.warning("sim scheduler: gave up setting %s on pod %s/%s after conflicts", condition["type"], namespace, name)

    async def _mark_unschedulable(
        self, key: Key, pod: dict[str, Any], message: str, reason: str = "Unschedulable"
    ) -> None:
        self._unschedulable.add(key)
        if self._messages.get(key) == message:
            return
        # Remembered before writing so that a retry meanwhile does not write it again.
        self._messages[key] = message
        condition = scheduled_condition("False", reason, message, now_rfc3339(time.time()))
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
        # One merge patch of the status against the version seen (409 if it is stale), rather
        # than a read and an update: most pods are written only once, here.
        body = {
            "metadata": {"resourceVersion": objects.metadata(pod).get("resourceVersion")},
            "status": {"conditions": [*conditions, condition]},
        }
        try:
            try:
                await self._store.patch("pods", *key, body, "merge", subresource="status")
            except errors.ApiError as exc:
                if exc.code != 409:
                    raise
                await self._set_condition(*key, condition)
        except errors.ApiError as exc:
            if exc.code != 404:
                raise

    async def _update_groups(self) -> None:
        """Write the PodGroup statuses that changed."""
        dirty, self._dirty_groups = self._dirty_groups, set()
        usages = [self._usages[name] for name in sorted(self._usages)]
        for gkey in sorted(dirty):
            group = self._groups.get(gkey)
            if group is None:
                continue
            resource = gkey[0]
            counts = count_members(self._members.get(gkey, {}).values())
            if resource == VOLCANO_PODGROUPS:
                status = volcano_group_status(group, counts, usages)
            else:
                status = coscheduling_group_status(group, counts)
            if status == (group.get("status") or {}):
                continue
            updated = dict(group)
            updated["status"] = status
            try:
                written = await self._store.update(resource, updated, subresource="status")
            except errors.ApiError as exc:
                if exc.code in (404, 409):
                    if exc.code == 409:
                        # The watch brings the newer version; write again after it.
                        self._dirty_groups.add(gkey)
                        self._groups_changed.set()
                    continue
                raise
            self._groups[gkey] = written
