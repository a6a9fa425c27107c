"""The simulated kubelet of every sim node: bound pods in, pod status and logs out.

In: pods bound (`spec.nodeName`) to a `sim-node-<i>`, through one watch of all
pods; `fail_node`, `recover_node` and `evict` calls from the admin API or a
test; all through the API server of sim/node/apis.py. Out, through the status
subresource (resourceVersion checked, re-read and retried on 409): each pod's life, and a few deterministic log
lines per pod (`logs`).

A pod's life:

1. Bound → phase Pending, containers waiting `ContainerCreating`, hostIP.
2. After `settings.startup_delay` → init containers (if any) have run and
   completed, containers run: phase Running, a unique podIP `10.<i+1>.x.y`,
   startTime, ready, conditions Initialized / ContainersReady / Ready.
3. After the duration (annotation `sim.kto.dev/duration`, e.g. `3s`,
   `500ms`, `1m`; default `settings.pod_duration`) the containers exit with
   the exit code (annotation `sim.kto.dev/exit-code`, default
   `settings.pod_exit_code`). With `sim.kto.dev/fail-times: N` the first N
   runs fail (with the exit code, or 1 when that is 0) and the next ones
   exit 0. Failures are counted per namespace/name across pod incarnations,
   so an operator that recreates a failed pod under the same name sees it
   fail N times in all, then succeed.
4. What follows depends on `spec.restartPolicy`:
   - Never: phase Succeeded (exit 0) or Failed (reason `Error`).
   - OnFailure: exit 0 → Succeeded; otherwise the container restarts in
     place: waiting `CrashLoopBackOff` with `lastState.terminated`,
     restartCount + 1, and after `startup_delay` running again.
   - Always (the API default): a pod with none of the `sim.kto.dev/`
     annotations runs until deleted, like a server; one with any of them
     exits as above and is restarted in place whatever its exit code, as
     kube does.

A pod given a deletionTimestamp (the store keeps pods with finalizers) has
its containers stopped (exit 143) after its grace period, capped at
`MAX_TERMINATION_GRACE`, and gets a terminal phase; the store removes it once
its finalizers are gone.

`fail_node` takes a node down: Ready=Unknown, the `unreachable` taints, and
every pod on it Failed with reason `NodeLost` (containers terminated, exit
137, `ContainerStatusUnknown`). The pods are kept, not deleted, so that an
operator sees the failure and replaces them, as with kube's pod GC of pods
on lost nodes; pods that are being deleted there are removed. `evict` fails
one pod with reason `Evicted` and the DisruptionTarget condition, like the
kubelet's memory-pressure eviction.

How a pod's containers run is its runtime's (sim/node/runtimes.py), chosen
when the kubelet takes the pod up: `SimulatedRuntime`, the life above; or, on a
node labelled `sim.kto.dev/runtime: process` and for a pod whose containers
all have a command, `ProcessRuntime`, each container a local process
(sim/node/processes.py). The kubelet keeps what is common: the pod's stages,
init containers, deletion, lost nodes, evictions and every status write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import pathlib
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from sim import errors, listwatching, objects, statuswriting
from sim import settings as sim_settings
from sim.node import apis, execing, nodes, processes, runtimes, shelling

log = logging.getLogger(__name__)

DURATION_ANNOTATION = "sim.kto.dev/duration"
EXIT_CODE_ANNOTATION = "sim.kto.dev/exit-code"
FAIL_TIMES_ANNOTATION = "sim.kto.dev/fail-times"
SIM_ANNOTATIONS = (DURATION_ANNOTATION, EXIT_CODE_ANNOTATION, FAIL_TIMES_ANNOTATION)

MAX_TERMINATION_GRACE = 0.1
"""Seconds at most that a deleted pod's containers take to stop (its own grace period is shorter or this)."""

WRITERS = 4
"""Tasks writing pod statuses; writes of one pod are serial, of different pods concurrent."""

MAX_CONFLICT_RETRIES = 20

LOGGED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG")
LOGGED_ENV_PREFIXES = ("PET_", "JAX_", "OMPI_", "PMIX_")
"""Environment variables a pod's log summarises (literal values only)."""

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

CONFIG_RETRY = 1.0
"""Seconds before a process container whose env cannot be made (CreateContainerConfigError) is tried again."""


# --------------------------------------------------------------------------
# Pure decisions
# --------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str) -> float:
    """`3s`, `500ms`, `1.5m`, `1h`, or plain seconds (`2`, `0.5`) → seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r}: expected a number with an optional unit ms, s, m or h")
    return float(match[1]) * _UNITS[match[2]]


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """How a pod's containers behave, from its annotations and the settings."""

    duration: float
    exit_code: int
    fail_times: int
    restart_policy: str
    scripted: bool
    """True when any `sim.kto.dev/` annotation is set (decides whether an Always pod ever exits)."""

    @classmethod
    def of(cls, pod: Mapping[str, Any], settings: sim_settings.SimSettings) -> Behaviour:
        annotations = objects.metadata(pod).get("annotations") or {}
        duration = settings.pod_duration
        exit_code = settings.pod_exit_code
        fail_times = 0
        if DURATION_ANNOTATION in annotations:
            duration = parse_duration(str(annotations[DURATION_ANNOTATION]))
        if EXIT_CODE_ANNOTATION in annotations:
            exit_code = _parse_int(EXIT_CODE_ANNOTATION, annotations[EXIT_CODE_ANNOTATION])
        if FAIL_TIMES_ANNOTATION in annotations:
            fail_times = _parse_int(FAIL_TIMES_ANNOTATION, annotations[FAIL_TIMES_ANNOTATION])
        return cls(
            duration=duration,
            exit_code=exit_code,
            fail_times=fail_times,
            restart_policy=(pod.get("spec") or {}).get("restartPolicy") or "Always",
            scripted=any(name in annotations for name in SIM_ANNOTATIONS),
        )

    @property
    def runs_forever(self) -> bool:
        return self.restart_policy == "Always" and not self.scripted

    def exit_code_after(self, failures: int) -> int:
        """The exit code of the next run, given how many runs of this pod name failed before."""
        if self.fail_times <= 0:
            return self.exit_code
        if failures < self.fail_times:
            return self.exit_code if self.exit_code != 0 else 1
        return 0


def _parse_int(name: str, value: object) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"invalid annotation {name}: {value!r} is not an integer") from None


def after_exit(restart_policy: str, exit_code: int) -> str:
    """What follows a container exit: "restart", "Succeeded" or "Failed"."""
    if restart_policy == "Always":
        return "restart"
    if restart_policy == "OnFailure" and exit_code != 0:
        return "restart"
    return "Succeeded" if exit_code == 0 else "Failed"


def termination_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


def env_summary(pod: Mapping[str, Any]) -> str:
    """`RANK=0 WORLD_SIZE=2 …` from the first container's literal env values ("" when none)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return ""
    values = {}
    for var in containers[0].get("env") or []:
        name = var.get("name") or ""
        if "value" in var and (name in LOGGED_ENV or name.startswith(LOGGED_ENV_PREFIXES)):
            values[name] = var["value"]
    ordered = [n for n in LOGGED_ENV if n in values] + sorted(n for n in values if n not in LOGGED_ENV)
    return " ".join(f"{name}={values[name]}" for name in ordered)


def timestamp(clock: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock))


def container_id(uid: str, container: str, attempt: int) -> str:
    digest = hashlib.sha256(f"{uid}/{container}/{attempt}".encode()).hexdigest()
    return f"containerd://{digest}"


# --------------------------------------------------------------------------
# One pod's run
# --------------------------------------------------------------------------

Key = tuple[str, str]


@dataclasses.dataclass(slots=True)
class Run:
    """What the kubelet knows of one pod it runs; `status()` renders it."""

    key: Key
    uid: str
    node: str
    host_ip: str
    pod: dict[str, Any]
    behaviour: Behaviour | None
    runtime: runtimes.Runtime
    """How its containers run: the simulated lifecycle, or processes once the process runtime takes it up."""
    stage: str = "creating"
    """creating | running | backoff | terminated."""
    phase: str = "Pending"
    pod_ip: str | None = None
    start_time: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    init_done_at: str | None = None
    restart_count: int = 0
    attempt: int = 0
    exit_code: int | None = None
    exit_reason: str | None = None
    exit_message: str | None = None
    last_terminated: dict[str, Any] | None = None
    reason: str | None = None
    message: str | None = None
    extra_conditions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    dirty: bool = False
    adopted: bool = False
    """Seen already finished when the kubelet started: its status is not rewritten."""
    remove: bool = False
    """Delete the pod once its terminal status is written."""
    logs: list[str] = dataclasses.field(default_factory=list)
    init_failed: tuple[int, int] | None = None
    """The init container that failed last (index, exit code), until the init containers all succeed."""
    init_restarts: int = 0
    initialising: bool = False
    """The init containers' commands are running (sim/node/execing.py)."""
    transitions: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    """Condition type → (status, lastTransitionTime) as last written."""
    sandbox: processes.Pod | None = None
    """Set when the pod's containers run as local processes (sim/node/processes.py)."""

    def cancel_timer(self) -> None:
        """Drop the step waiting on a timer, if any."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def transition(self, kind: str, status: str, clock: str) -> str:
        """lastTransitionTime of a condition: kept while its status stays."""
        previous = self.transitions.get(kind)
        if previous is None or previous[0] != status:
            self.transitions[kind] = (status, clock)
        return self.transitions[kind][1]

    def status(self, current: Mapping[str, Any], clock: str) -> dict[str, Any]:
        """The pod status to write, keeping fields and conditions owned by others."""
        spec = self.pod.get("spec") or {}
        containers = spec.get("containers") or []
        init_containers = spec.get("initContainers") or []
        status: dict[str, Any] = {
            k: v
            for k, v in current.items()
            if k not in ("phase", "conditions", "containerStatuses", "initContainerStatuses", "reason", "message")
        }
        status["phase"] = self.phase
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        status["hostIP"] = self.host_ip
        status["hostIPs"] = [{"ip": self.host_ip}]
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.start_time:
            status["startTime"] = self.start_time
        running = self.stage == "running" and self.runtime.ready(self)
        initialized = self.init_done_at is not None or not init_containers
        ready_reason = None
        if self.stage == "terminated":
            ready_reason = "PodCompleted"
        elif not running:
            ready_reason = "ContainersNotReady"
        owned = {
            "PodReadyToStartContainers": self.stage != "creating" or self.phase in TERMINAL_PHASES,
            "Initialized": initialized,
            "ContainersReady": running,
            "Ready": running,
        }
        conditions = [
            c
            for c in current.get("conditions") or []
            if c.get("type") not in owned and c.get("type") not in {e["type"] for e in self.extra_conditions}
        ]
        for kind, ok in owned.items():
            condition: dict[str, Any] = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": self.transition(kind, "True" if ok else "False", clock),
            }
            if not ok:
                if kind in ("Ready", "ContainersReady") and ready_reason:
                    condition["reason"] = ready_reason
                    if ready_reason == "ContainersNotReady":
                        names = ", ".join(c.get("name", "") for c in containers)
                        condition["message"] = f"containers with unready status: [{names}]"
                elif kind == "Initialized":
                    condition["reason"] = "ContainersNotInitialized"
            conditions.append(condition)
        conditions.extend(self.extra_conditions)
        if not any(c.get("type") == "PodScheduled" for c in conditions):
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": self.start_time or clock,
                }
            )
        status["conditions"] = conditions
        if init_containers:
            status["initContainerStatuses"] = [self._init_status(i, c) for i, c in enumerate(init_containers)]
        status["containerStatuses"] = self.runtime.container_statuses(self)
        return status

    def _init_status(self, index: int, container: Mapping[str, Any]) -> dict[str, Any]:
        name = container.get("name", "")
        entry = _base_status(container)
        if self.init_failed is not None and self.init_done_at is None:
            entry.update(_failed_init_status(self, index, name))
            return entry
        if self.init_done_at is not None:
            entry["state"] = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": self.init_done_at,
                    "finishedAt": self.init_done_at,
                    "containerID": container_id(self.uid, name, 0),
                }
            }
            entry["containerID"] = container_id(self.uid, name, 0)
        elif self.stage == "terminated":
            entry["state"] = {"terminated": {"exitCode": self.exit_code or 0, "reason": self.exit_reason or "Error"}}
        else:
            entry["state"] = {"waiting": {"reason": "PodInitializing"}}
        entry["started"] = False
        return entry

    def container_status(self, container: Mapping[str, Any]) -> dict[str, Any]:
        """A simulated container's status (one state for all the pod's containers)."""
        name = container.get("name", "")
        entry = _base_status(container)
        entry["restartCount"] = self.restart_count
        cid = container_id(self.uid, name, self.attempt)
        if self.init_failed is not None and self.init_done_at is None:
            entry["state"] = {"waiting": {"reason": "PodInitializing"}}
        elif self.stage == "running":
            entry["state"] = {"running": {"startedAt": self.started_at}}
            entry["ready"] = True
            entry["started"] = True
            entry["containerID"] = cid
        elif self.stage == "terminated":
            terminated: dict[str, Any] = {
                "exitCode": self.exit_code if self.exit_code is not None else 0,
                "reason": self.exit_reason or termination_reason(self.exit_code or 0),
                "finishedAt": self.finished_at,
            }
            if self.exit_message:
                terminated["message"] = self.exit_message
            if self.started_at:
                terminated["startedAt"] = self.started_at
                terminated["containerID"] = cid
                entry["containerID"] = cid
            entry["state"] = {"terminated": terminated}
        elif self.stage == "backoff":
            entry["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off restarting failed container={name} pod={self.key[1]}_{self.key[0]}({self.uid})",
                }
            }
        elif self.init_done_at is None and (self.pod.get("spec") or {}).get("initContainers"):
            entry["state"] = {"waiting": {"reason": "PodInitializing"}}
        else:
            entry["state"] = {"waiting": {"reason": "ContainerCreating"}}
        if self.last_terminated is not None:
            entry["lastState"] = {"terminated": dict(self.last_terminated, containerID=container_id(self.uid, name, self.attempt - 1))}
        return entry


def _failed_init_status(run: Run, index: int, name: str) -> dict[str, Any]:
    """An init container's status once one of them has failed (its index and exit code in run.init_failed)."""
    assert run.init_failed is not None
    failed, code = run.init_failed
    cid = container_id(run.uid, name, run.init_restarts)
    if index < failed:
        return {"state": {"terminated": {"exitCode": 0, "reason": "Completed", "containerID": cid}}, "containerID": cid}
    if index > failed:
        return {"state": {"waiting": {"reason": "PodInitializing"}}}
    terminated = {"exitCode": code, "reason": "Error", "startedAt": run.start_time, "finishedAt": run.finished_at or
                  run.start_time, "containerID": cid}
    if run.stage == "terminated":
        return {"state": {"terminated": terminated}, "containerID": cid, "restartCount": run.init_restarts}
    return {
        "state": {"waiting": {
            "reason": "CrashLoopBackOff",
            "message": f"back-off restarting failed container={name} pod={run.key[1]}_{run.key[0]}({run.uid})",
        }},
        "lastState": {"terminated": terminated},
        "containerID": cid,
        "restartCount": run.init_restarts,
    }


def _base_status(container: Mapping[str, Any]) -> dict[str, Any]:
    image = container.get("image", "")
    return {
        "name": container.get("name", ""),
        "image": image,
        "imageID": f"{image}@sha256:{hashlib.sha256(str(image).encode()).hexdigest()}",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {},
        "lastState": {},
    }


# --------------------------------------------------------------------------
# The kubelet
# --------------------------------------------------------------------------


class Kubelet:
    """Runs the pods bound to the simulated nodes; `run()` until cancelled."""

    def __init__(self, api: apis.NodeApi, settings: sim_settings.SimSettings) -> None:
        self._api = api
        self._settings = settings
        self._node_ips = {nodes.node_name(i): nodes.node_ip(i) for i in range(settings.nodes)}
        self._failed_nodes: set[str] = set()
        self._runs: dict[Key, Run] = {}
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._writing: set[Key] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.filesystems = execing.Filesystems(api)
        """The files of the pods that are exec'd or run init commands (sim/node/execing.py)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._node_runtime: dict[str, str] = {}
        """Node → its ``sim.kto.dev/runtime`` label as last seen."""
        self._simulated = SimulatedRuntime(self, settings)
        self._processes = ProcessRuntime(self, api, settings)

    # -- public --------------------------------------------------------

    async def run(self) -> None:
        """Register the nodes, then run the pods bound to them until cancelled."""
        self._loop = asyncio.get_running_loop()
        await self._register_nodes()
        informers = [
            listwatching.Informer(self._api, "nodes", self._on_node, name="sim-kubelet-nodes"),
            listwatching.Informer(self._api, "services", self._processes.on_service, name="sim-kubelet-services"),
            listwatching.Informer(self._api, "pods", self._on_pod, name="sim-kubelet-pods"),
        ]
        try:
            async with asyncio.TaskGroup() as tasks:
                for informer in informers:
                    tasks.create_task(informer.run(), name=informer.name)
                for index in range(WRITERS):
                    tasks.create_task(self._write_forever(), name=f"sim-kubelet-writer-{index}")
        finally:
            await asyncio.shield(self._stop_runtimes())

    async def _stop_runtimes(self) -> None:
        await self._simulated.stop()
        await self._processes.stop()

    def logs(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> str:
        """The log of a pod the kubelet runs or ran: a simulated pod's lifecycle lines, a process
        container's output; "" for a pod not started here."""
        return self.read_log(namespace, name, container, previous).decode(errors="replace")

    def read_log(self, namespace: str, name: str, container: str | None = None, previous: bool = False,
                 offset: int = 0) -> bytes:
        """The log from byte ``offset`` on. A simulated pod has one log for all its containers (``previous``
        changes nothing); a process container has one per run, ``previous`` the one before the latest
        (400 when it has none, as the kubelet answers)."""
        run = self._runs.get((namespace, name))
        if run is None:
            return b""
        return run.runtime.read_log(run, container, previous, offset)

    def process_exited(self, namespace: str, name: str, container: str | None = None) -> bool:
        """True when the container runs as a process and the run whose log is read has ended (a follow
        of its log ends there, as ``kubectl logs -f`` does); False for simulated pods."""
        run = self._runs.get((namespace, name))
        return run is not None and run.runtime.exited(run, container)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as this kubelet last saw it, if it runs (or ran) here."""
        run = self._runs.get((namespace, name))
        return run.pod if run is not None else None

    def finished(self, namespace: str, name: str) -> bool:
        """True once the pod's containers have stopped for good (or it is not here)."""
        run = self._runs.get((namespace, name))
        return run is None or run.stage == "terminated"

    def exec_pod(self, namespace: str, name: str, container: str) -> dict[str, Any]:
        """The pod to exec into, if ``container`` runs here; ``execing.ExecRefused`` as the kubelet answers otherwise."""
        run = self._runs.get((namespace, name))
        if run is None:
            raise execing.ExecRefused(404, "pod does not exist")
        names = [c.get("name") for c in (run.pod.get("spec") or {}).get("containers") or []]
        if run.stage != "running" or container not in names:
            raise execing.ExecRefused(500, f'container not found ("{container}")')
        return run.pod

    async def exec(self, namespace: str, name: str, container: str, argv: list[str],
                   stdin: bytes = b"") -> shelling.Result:
        """Run ``argv`` in a running container of a pod this kubelet runs (its sleeps waited out)."""
        result = await self.filesystems.exec(self.exec_pod(namespace, name, container), container, argv, stdin)
        if result.slept:
            await asyncio.sleep(result.slept)
        return result

    async def fail_node(self, name: str) -> None:
        """Take node `name` down: Ready=Unknown, unreachable taints, its pods Failed with NodeLost."""
        self._require_node(name)
        self._failed_nodes.add(name)
        clock = timestamp(time.time())
        await self._update_node(name, self._node_down, clock)
        for run in list(self._runs.values()):
            if run.node == name:
                self._lose(run, clock)

    async def recover_node(self, name: str) -> None:
        """Bring node `name` back: Ready=True, taints removed; new pods run there again."""
        self._require_node(name)
        self._failed_nodes.discard(name)
        await self._update_node(name, self._node_up, timestamp(time.time()))

    async def evict(self, namespace: str, name: str) -> None:
        """Evict a running pod as the kubelet does under memory pressure: Failed, reason Evicted."""
        run = self._runs.get((namespace, name))
        if run is None:
            await self._evict_unstarted(namespace, name)
            return
        if run.phase in TERMINAL_PHASES:
            return
        message = "The node was low on resource: memory. "
        containers = (run.pod.get("spec") or {}).get("containers") or []
        if containers:
            message += (
                f"Threshold quantity: 100Mi, available: 51200Ki. Container {containers[0].get('name', '')} "
                "was using 1Gi, request is 0, has larger consumption of memory. "
            )
        clock = timestamp(time.time())
        run.extra_conditions = [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "The node was low on resource: memory. ",
                "lastProbeTime": None,
                "lastTransitionTime": clock,
            }
        ]
        self.terminate(run, 137, "Error", clock, phase="Failed", reason="Evicted", message=message)

    async def _evict_unstarted(self, namespace: str, name: str) -> None:
        """Evict a pod no sim node runs (not bound yet): Failed, reason Evicted; 404 if it does not exist."""
        def evict(pod: dict[str, Any]) -> bool:
            status = pod.setdefault("status", {})
            if status.get("phase") in TERMINAL_PHASES:
                return False
            status.update(phase="Failed", reason="Evicted", message="The pod was evicted before it started.")
            return True

        await statuswriting.change_status(self._api, "pods", namespace, name, evict, MAX_CONFLICT_RETRIES)

    # -- nodes ---------------------------------------------------------

    def _require_node(self, name: str) -> None:
        if name not in self._node_ips:
            raise errors.not_found("nodes", name)

    async def _register_nodes(self) -> None:
        clock = timestamp(time.time())
        for node in nodes.make_nodes(self._settings, clock):
            try:
                await self._api.create("nodes", node)
            except errors.ApiError as exc:
                if exc.code != 409:
                    raise
                # Registered before (an earlier agent on a kept control plane): take this agent's runtime.
                existing = await self._api.get("nodes", None, node["metadata"]["name"])
                labels = objects.metadata(existing).get("labels") or {}
                if labels.get(nodes.RUNTIME_LABEL) != self._settings.runtime:
                    await self._update_node(node["metadata"]["name"], self._label_runtime, clock)

    def _label_runtime(self, node: dict[str, Any], clock: str) -> None:
        node.setdefault("metadata", {}).setdefault("labels", {})[nodes.RUNTIME_LABEL] = self._settings.runtime

    @staticmethod
    def _node_down(node: dict[str, Any], clock: str) -> None:
        spec = node.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") != "node.kubernetes.io/unreachable"]
        for effect in ("NoSchedule", "NoExecute"):
            taints.append({"key": "node.kubernetes.io/unreachable", "effect": effect, "timeAdded": clock})
        spec["taints"] = taints
        for condition in (node.get("status") or {}).get("conditions") or []:
            condition.update(
                status="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
                lastTransitionTime=clock,
            )

    @staticmethod
    def _node_up(node: dict[str, Any], clock: str) -> None:
        spec = node.setdefault("spec", {})
        spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != "node.kubernetes.io/unreachable"]
        if not spec["taints"]:
            del spec["taints"]
        for condition in (node.get("status") or {}).get("conditions") or []:
            ready = condition.get("type") == "Ready"
            condition.update(
                status="True" if ready else "False",
                reason="KubeletReady" if ready else condition.get("reason"),
                message="kubelet is posting ready status" if ready else condition.get("message"),
                lastTransitionTime=clock,
                lastHeartbeatTime=clock,
            )

    async def _update_node(self, name: str, change: Callable[[dict[str, Any], str], None], clock: str) -> None:
        """Apply `change` to the node's spec (main resource) and status (subresource), retrying on 409."""
        for subresource in (None, "status"):
            for _ in range(MAX_CONFLICT_RETRIES):
                try:
                    node = await self._api.get("nodes", None, name)
                except errors.ApiError as exc:
                    if exc.code != 404:
                        raise
                    # Not registered yet (run() just started) or deleted: register it now.
                    index = nodes.node_index(name) or 0
                    node = await self._api.create("nodes", nodes.make_node(self._settings, index, clock))
                change(node, clock)
                try:
                    await self._api.update("nodes", node, subresource=subresource)
                    break
                except errors.ApiError as exc:
                    if exc.code != 409:
                        raise

    # -- watch ---------------------------------------------------------

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        metadata = objects.metadata(node)
        name = metadata.get("name") or ""
        if kind == "DELETED":
            self._node_runtime.pop(name, None)
            return
        label = (metadata.get("labels") or {}).get(nodes.RUNTIME_LABEL)
        if label in processes.RUNTIMES:
            self._node_runtime[name] = label
        else:
            self._node_runtime.pop(name, None)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        metadata = objects.metadata(pod)
        key = (metadata.get("namespace") or "", metadata.get("name") or "")
        self._processes.track_subdomain(kind, key, pod)
        run = self._runs.get(key)
        if kind == "DELETED":
            if run is not None:
                self._forget(run)
            return
        if run is not None and run.uid != metadata.get("uid"):
            self._forget(run)
            run = None
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in self._node_ips:
            return
        if run is None:
            run = self._start_run(key, pod, node)
            if run is None:
                return
        else:
            run.pod = pod
        if metadata.get("deletionTimestamp") and not run.remove:
            self._begin_deletion(run, pod)

    def _start_run(self, key: Key, pod: dict[str, Any], node: str) -> Run | None:
        metadata = pod["metadata"]
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        try:
            behaviour: Behaviour | None = Behaviour.of(pod, self._settings)
        except ValueError as exc:
            behaviour = None
            log.warning("sim kubelet: pod %s/%s: %s", *key, exc)
        run = Run(key, metadata.get("uid") or "", node, self._node_ips[node], pod, behaviour, self._simulated)
        self._runs[key] = run
        if phase in TERMINAL_PHASES:
            # Finished before the kubelet (re)started: nothing to run.
            run.stage, run.phase, run.adopted = "terminated", phase, True
            return run
        clock = timestamp(time.time())
        if node in self._failed_nodes:
            self._lose(run, clock)
            return run
        if self._node_runtime.get(node, self._settings.runtime) == processes.PROCESS:
            why = processes.unrunnable(pod)
            if why is None:
                self._processes.begin(run, clock)
                return run
            run.logs.append(f"sim: node {node} runs processes, but {why}: simulated")
        self._simulated.begin(run, clock)
        return run

    def _forget(self, run: Run) -> None:
        run.cancel_timer()
        self._runs.pop(run.key, None)
        run.runtime.discard(run)
        self.filesystems.forget(run.key)

    # -- transitions (synchronous: state change, then a write is queued) --

    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the kubelet runs in (its timers and tasks)."""
        return self._loop or asyncio.get_running_loop()

    def after(self, run: Run, delay: float, step: Callable[[Run], None]) -> None:
        """Call ``step(run)`` in ``delay`` seconds, unless the pod's run is replaced or another step set first."""
        run.cancel_timer()
        run.timer = self.loop().call_later(max(0.0, delay), self._fire, run.key, run.uid, step)

    def _fire(self, key: Key, uid: str, step: Callable[[Run], None]) -> None:
        run = self._runs.get(key)
        if run is None or run.uid != uid:
            return
        run.timer = None
        try:
            step(run)
        except Exception:
            log.exception("sim kubelet: pod %s/%s: transition failed", *key)

    def start_containers(self, run: Run) -> None:
        """Run the init containers' commands if they have any, then start the containers (the pod's runtime)."""
        if run.init_done_at is None and execing.has_init_commands(run.pod):
            if not run.initialising:
                run.initialising = True
                task = self.loop().create_task(self._initialise(run),
                                               name=f"sim-kubelet-init-{run.key[0]}-{run.key[1]}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            return
        run.runtime.start_containers(run)

    async def _initialise(self, run: Run) -> None:
        """Run the init containers' commands; start the containers, or fail or back off as a kubelet does."""
        start = run.init_failed[0] if run.init_failed else 0
        try:
            outcome = await self.filesystems.initialise(run.pod, start)
        except errors.ApiError as exc:
            log.warning("sim kubelet: pod %s/%s: reading its volumes failed: %s", *run.key, exc)
            outcome = None
        finally:
            run.initialising = False
        if self._runs.get(run.key) is not run or run.stage == "terminated":
            return
        if outcome is None:
            self.after(run, self._settings.startup_delay, self.start_containers)
            return
        run.logs.extend(outcome.logs)
        if outcome.failed is None:
            run.init_failed = None
            run.init_done_at = timestamp(time.time())
            self.start_containers(run)
            return
        run.init_failed = outcome.failed
        clock = timestamp(time.time())
        run.finished_at = clock
        if (run.pod.get("spec") or {}).get("restartPolicy") == "Never":
            self.terminate(run, outcome.failed[1], "Error", clock, phase="Failed")
            return
        run.init_restarts += 1
        self.mark(run)
        self.after(run, self._settings.startup_delay, self.start_containers)

    def terminate(
        self,
        run: Run,
        code: int,
        exit_reason: str,
        clock: str,
        *,
        phase: str,
        reason: str | None = None,
        message: str | None = None,
        exit_message: str | None = None,
    ) -> None:
        """The pod's run ends for good: its runtime ends what still runs, its terminal status is queued."""
        run.cancel_timer()
        run.runtime.end(run, code, exit_reason, exit_message, clock)
        run.stage, run.phase = "terminated", phase
        run.exit_code, run.exit_reason, run.exit_message = code, exit_reason, exit_message
        run.finished_at = clock
        run.reason, run.message = reason, message
        run.adopted = False
        if reason:
            run.logs.append(f"sim: pod {phase}: {reason}" + (f": {message.strip()}" if message else ""))
        self.mark(run)

    def _lose(self, run: Run, clock: str) -> None:
        if run.phase in TERMINAL_PHASES and run.stage == "terminated":
            if objects.metadata(run.pod).get("deletionTimestamp"):
                run.remove = True
                self.mark(run)
            return
        message = f"Node {run.node} which was running pod {run.key[1]} is unresponsive"
        self.terminate(
            run,
            137,
            "ContainerStatusUnknown",
            clock,
            phase="Failed",
            reason="NodeLost",
            message=message,
            exit_message="The container could not be located when the pod was terminated",
        )
        if objects.metadata(run.pod).get("deletionTimestamp"):
            run.remove = True

    def _begin_deletion(self, run: Run, pod: dict[str, Any]) -> None:
        run.remove = True
        if run.stage == "terminated" or run.node in self._failed_nodes:
            run.cancel_timer()
            self.mark(run)
            return
        grace = objects.metadata(pod).get("deletionGracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        run.runtime.delete(run, float(grace or 0))

    def current(self, run: Run) -> bool:
        """True while ``run`` is the pod's run here and has not terminated."""
        return self._runs.get(run.key) is run and run.stage != "terminated"

    # -- writes --------------------------------------------------------

    def mark(self, run: Run) -> None:
        """Queue a write of the run's status."""
        run.dirty = True
        if run.key not in self._queued:
            self._queued.add(run.key)
            self._queue.put_nowait(run.key)

    async def _write_forever(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            run = self._runs.get(key)
            if run is None or not run.dirty or key in self._writing:
                continue  # the writer busy with this pod queues it again when done
            self._writing.add(key)
            try:
                run.dirty = False
                await self._write(run)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sim kubelet: writing the status of pod %s/%s failed", *key)
            finally:
                self._writing.discard(key)
            if run.dirty and self._runs.get(key) is run:
                self._queued.add(key)
                self._queue.put_nowait(key)

    async def _write(self, run: Run) -> None:
        """Write the run's status with the last resourceVersion seen; on 409 re-read and retry."""
        namespace, name = run.key
        pod = run.pod
        for _ in range(MAX_CONFLICT_RETRIES):
            if self._runs.get(run.key) is not run:
                return
            clock = timestamp(time.time())
            metadata = objects.metadata(pod)
            if metadata.get("uid") != run.uid:
                return
            if not run.adopted:
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "resourceVersion": metadata.get("resourceVersion"),
                    },
                    "status": run.status(pod.get("status") or {}, clock),
                }
                try:
                    pod = await self._api.update_shared("pods", body, subresource="status")
                except errors.ApiError as exc:
                    if exc.code == 404:
                        return
                    if exc.code != 409:
                        raise
                    try:
                        pod = await self._api.get("pods", namespace, name)
                    except errors.ApiError as again:
                        if again.code == 404:
                            return
                        raise
                    continue
                run.pod = pod
            if run.remove and run.stage == "terminated":
                try:
                    await self._api.delete(
                        "pods", namespace, name, preconditions={"uid": run.uid}
                    )
                except errors.ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
            return
        log.warning("sim kubelet: gave up writing pod %s/%s after %d conflicts", namespace, name, MAX_CONFLICT_RETRIES)


# --------------------------------------------------------------------------
# The two runtimes (sim/node/runtimes.py)
# --------------------------------------------------------------------------


class SimulatedRuntime:
    """The scripted lifecycle: no process; the containers run for the pod's :class:`Behaviour` and exit with
    its exit code; the log is the kubelet's own lines; pod IPs ``10.<i+1>.x.y`` from the node's range."""

    def __init__(self, kubelet: Kubelet, settings: sim_settings.SimSettings) -> None:
        self._kubelet = kubelet
        self._settings = settings
        self._failures: dict[Key, int] = {}
        """Failed runs per namespace/name, across the pod's incarnations (``sim.kto.dev/fail-times``)."""
        self._ips_used: set[str] = set()
        self._next_ip: dict[str, int] = {}

    def begin(self, run: Run, clock: str) -> None:
        if run.behaviour is None:
            message = f"invalid sim annotation: {self._invalid_reason(run.pod)}"
            self._kubelet.terminate(run, 128, "StartError", clock, phase="Failed", reason="StartError",
                                    message=message)
            return
        if (run.pod.get("status") or {}).get("phase") == "Running":
            # Running when the kubelet started: take it up from now on.
            self._kubelet.start_containers(run)
            return
        run.start_time = clock
        run.logs.append(f"sim: pod {run.key[0]}/{run.key[1]} scheduled to {run.node}")
        self._kubelet.mark(run)
        self._kubelet.after(run, self._settings.startup_delay, self._kubelet.start_containers)

    def _invalid_reason(self, pod: dict[str, Any]) -> str:
        try:
            Behaviour.of(pod, self._settings)
        except ValueError as exc:
            return str(exc)
        return ""

    def start_containers(self, run: Run) -> None:
        clock = timestamp(time.time())
        behaviour = run.behaviour
        assert behaviour is not None
        if run.start_time is None:
            run.start_time = clock
        if (run.pod.get("spec") or {}).get("initContainers") and run.init_done_at is None:
            run.init_done_at = clock
            for container in run.pod["spec"]["initContainers"]:
                run.logs.append(f"sim: init container {container.get('name', '')} completed")
        if run.pod_ip is None:
            run.pod_ip = self._allocate_ip(run.node)
        run.stage, run.phase = "running", "Running"
        run.started_at = clock
        run.attempt += 1
        names = ", ".join(c.get("name", "") for c in (run.pod.get("spec") or {}).get("containers") or [])
        run.logs.append(f"sim: started container(s) {names} (run {run.attempt})")
        summary = env_summary(run.pod)
        if summary:
            run.logs.append(f"sim: env {summary}")
        self._kubelet.mark(run)
        if not behaviour.runs_forever:
            self._kubelet.after(run, behaviour.duration, self._exit)

    def _exit(self, run: Run) -> None:
        behaviour = run.behaviour
        assert behaviour is not None
        clock = timestamp(time.time())
        failures = self._failures.get(run.key, 0)
        code = behaviour.exit_code_after(failures)
        if code != 0:
            self._failures[run.key] = failures + 1
        run.logs.append(f"sim: container(s) exited with code {code}")
        outcome = after_exit(behaviour.restart_policy, code)
        if outcome == "restart":
            run.last_terminated = {
                "exitCode": code,
                "reason": termination_reason(code),
                "startedAt": run.started_at,
                "finishedAt": clock,
            }
            run.restart_count += 1
            run.stage = "backoff"
            self._kubelet.mark(run)
            self._kubelet.after(run, self._settings.startup_delay, self._kubelet.start_containers)
            return
        message = None
        reason = None
        if outcome == "Failed":
            names = ", ".join(c.get("name", "") for c in (run.pod.get("spec") or {}).get("containers") or [])
            reason = "Error"
            message = f"container(s) {names} exited with code {code}"
        self._kubelet.terminate(run, code, termination_reason(code), clock, phase=outcome, reason=reason,
                                message=message)

    def ready(self, run: Run) -> bool:
        return True

    def container_statuses(self, run: Run) -> list[dict[str, Any]]:
        return [run.container_status(c) for c in (run.pod.get("spec") or {}).get("containers") or []]

    def read_log(self, run: Run, container: str | None, previous: bool, offset: int) -> bytes:
        """One log for all the pod's containers (``previous`` changes nothing)."""
        return "".join(line + "\n" for line in run.logs).encode()[offset:]

    def exited(self, run: Run, container: str | None) -> bool:
        return False

    def end(self, run: Run, code: int, exit_reason: str, exit_message: str | None, clock: str) -> None:
        """Nothing runs: the kubelet's terminal status is all there is."""

    def delete(self, run: Run, grace: float) -> None:
        self._kubelet.after(run, min(grace, MAX_TERMINATION_GRACE), self._stop_deleted)

    def _stop_deleted(self, run: Run) -> None:
        clock = timestamp(time.time())
        run.logs.append("sim: stopping container(s): pod deleted")
        started = run.started_at is not None and run.stage in ("running", "backoff")
        code = 143 if started else 0
        phase = "Succeeded" if run.phase == "Succeeded" else "Failed"
        self._kubelet.terminate(run, code, "Error" if code else "Completed", clock, phase=phase)

    def discard(self, run: Run) -> None:
        if run.pod_ip:
            self._ips_used.discard(run.pod_ip)

    async def stop(self) -> None:
        """Nothing runs."""

    def _allocate_ip(self, node: str) -> str:
        index = nodes.node_index(node) or 0
        counter = self._next_ip.get(node, 0)
        for _ in range(254 * 256):
            ip = f"10.{index + 1}.{counter // 254 % 256}.{counter % 254 + 1}"
            counter += 1
            if ip not in self._ips_used:
                self._next_ip[node] = counter
                self._ips_used.add(ip)
                return ip
        raise RuntimeError(f"node {node} has no pod IP address left")


class ProcessRuntime:
    """Each container a local process (sim/node/processes.py): started through the launcher, its output the
    log (one file per run), its exit code the container's; restarts with back-off per ``restartPolicy``."""

    def __init__(self, kubelet: Kubelet, api: apis.NodeApi, settings: sim_settings.SimSettings) -> None:
        self._kubelet = kubelet
        self._api = api
        self._settings = settings
        self._runs: dict[Key, Run] = {}
        """The pods this runtime took up and that are not gone from the API yet."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._services: dict[str, set[str]] = {}
        """Namespace → its Services' names (the process pods' hosts files)."""
        self._subdomain_hosts: dict[str, dict[str, tuple[str, str]]] = {}
        """Namespace → pod name → (hostname, subdomain) of its pods that have a subdomain."""
        self._own_pods_dir: str | None = None
        self._machine_hosts = processes.machine_hosts()

    def begin(self, run: Run, clock: str) -> None:
        """A pod of a process node whose containers all have a command: run them here."""
        namespace, name = run.key
        containers = [processes.Container(str(c.get("name", "")), str(c.get("image", "")))
                      for c in (run.pod.get("spec") or {}).get("containers") or []]
        run.sandbox = processes.Pod(processes.PodDir(self._pods_root(), namespace, name, run.uid), containers)
        run.runtime = self
        self._runs[run.key] = run
        run.host_ip = run.pod_ip = processes.POD_IP
        run.start_time = clock
        if (run.pod.get("status") or {}).get("phase") == "Running":
            # Running before this kubelet started: its processes went with the last one.
            message = "The container could not be located when the node agent restarted"
            if (run.pod.get("spec") or {}).get("restartPolicy") == "Never":
                self._kubelet.terminate(run, 137, "ContainerStatusUnknown", clock, phase="Failed", reason="Error",
                                        message=message, exit_message=message)
                return
            for container in containers:
                container.restart_count = 1
        run.logs.append(f"sim: pod {namespace}/{name} scheduled to {run.node} (process runtime)")
        self._kubelet.mark(run)
        self._kubelet.after(run, self._settings.startup_delay, self._kubelet.start_containers)

    def start_containers(self, run: Run) -> None:
        assert run.sandbox is not None
        clock = timestamp(time.time())
        if (run.pod.get("spec") or {}).get("initContainers") and run.init_done_at is None:
            run.init_done_at = clock
        run.stage = "running"
        self._kubelet.mark(run)
        for container in run.sandbox.containers:
            self._spawn(run, self._run_container(run, container), container.name)

    def ready(self, run: Run) -> bool:
        assert run.sandbox is not None
        return run.sandbox.all_running()

    def container_statuses(self, run: Run) -> list[dict[str, Any]]:
        assert run.sandbox is not None
        return [c.status(run.uid) for c in run.sandbox.containers]

    def read_log(self, run: Run, container: str | None, previous: bool, offset: int) -> bytes:
        """One log per container and run; ``previous``, the one before the latest (400 when it has none, as
        the kubelet answers)."""
        assert run.sandbox is not None
        state = run.sandbox.container(container)
        if state is None:
            return b""
        index = state.log_index - 1 if previous else state.log_index
        if index < 0:
            if previous:
                raise errors.bad_request(
                    f'previous terminated container "{state.name}" in pod "{run.key[1]}" not found')
            return b""
        try:
            with run.sandbox.dir.log(state.name, index).open("rb") as handle:
                handle.seek(offset)
                return handle.read()
        except FileNotFoundError:
            return b""

    def exited(self, run: Run, container: str | None) -> bool:
        assert run.sandbox is not None
        state = run.sandbox.container(container)
        return state is None or (state.log_index >= 0 and state.state != "running")

    def end(self, run: Run, code: int, exit_reason: str, exit_message: str | None, clock: str) -> None:
        """The pod ends (settled, evicted, its node lost): its containers still going end with it."""
        assert run.sandbox is not None
        for container in run.sandbox.containers:
            processes.signal_tree(container.process, signal.SIGKILL)
            if container.done:
                continue
            container.done = True
            if container.state != "terminated":
                container.state, container.exit_code, container.reason = "terminated", code, exit_reason
                container.message, container.finished_at = exit_message, clock

    def delete(self, run: Run, grace: float) -> None:
        run.cancel_timer()
        self._spawn(run, self._stop_deleted_processes(run, min(grace, processes.MAX_GRACE)), "stop")

    def discard(self, run: Run) -> None:
        """A pod gone from the API: kill what still runs, drop its tasks and directory."""
        if self._runs.get(run.key) is run:
            del self._runs[run.key]
        sandbox = run.sandbox
        assert sandbox is not None
        for container in sandbox.containers:
            processes.signal_tree(container.process, signal.SIGKILL)
        for task in list(sandbox.tasks):
            task.cancel()

        async def remove() -> None:
            await processes.stop(sandbox.processes, 0)
            await asyncio.to_thread(sandbox.dir.remove)

        loop = self._kubelet.loop()
        task = loop.create_task(remove(), name=f"sim-kubelet-remove-{sandbox.dir.path.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """The kubelet stops: every process pod's processes are stopped (SIGTERM, 2 s, SIGKILL)."""
        running = [p for run in self._runs.values() if run.sandbox is not None for p in run.sandbox.processes]
        await processes.stop(running, 2.0)
        if self._own_pods_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._own_pods_dir, True)
            self._own_pods_dir = None

    def on_service(self, kind: str, service: dict[str, Any]) -> None:
        metadata = objects.metadata(service)
        namespace, name = metadata.get("namespace") or "", metadata.get("name") or ""
        names = self._services.setdefault(namespace, set())
        before = len(names)
        if kind == "DELETED":
            names.discard(name)
        else:
            names.add(name)
        if len(names) != before:
            self._refresh_hosts(namespace)

    def track_subdomain(self, kind: str, key: Key, pod: dict[str, Any]) -> None:
        """Keep the ``hostname.subdomain`` names of the namespace's pods (for process pods' hosts files)."""
        spec = pod.get("spec") or {}
        hosts = self._subdomain_hosts.get(key[0])
        entry = (processes.hostname(pod), str(spec["subdomain"])) if spec.get("subdomain") else None
        if kind == "DELETED" or entry is None:
            if hosts is not None and hosts.pop(key[1], None) is not None:
                self._refresh_hosts(key[0])
            return
        hosts = self._subdomain_hosts.setdefault(key[0], {})
        if hosts.get(key[1]) != entry:
            hosts[key[1]] = entry
            self._refresh_hosts(key[0])

    def _pods_root(self) -> pathlib.Path:
        if self._settings.pods_dir is not None:
            return self._settings.pods_dir
        if self._own_pods_dir is None:
            self._own_pods_dir = tempfile.mkdtemp(prefix="kto-pods-")
        return pathlib.Path(self._own_pods_dir)

    def _spawn(self, run: Run, work: Coroutine[Any, Any, None], what: str) -> None:
        assert run.sandbox is not None
        loop = self._kubelet.loop()
        task: asyncio.Task[None] = loop.create_task(work, name=f"sim-kubelet-process-{run.key[0]}-{run.key[1]}-{what}")
        run.sandbox.tasks.add(task)
        self._tasks.add(task)
        task.add_done_callback(run.sandbox.tasks.discard)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._report_crash)

    @staticmethod
    def _report_crash(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("sim kubelet: %s failed", task.get_name(), exc_info=task.exception())

    async def _run_container(self, run: Run, container: processes.Container) -> None:
        """One container's life: start, wait for the exit, restart per restartPolicy with back-off."""
        spec = next(c for c in run.pod["spec"]["containers"] if c.get("name", "") == container.name)
        policy = (run.pod.get("spec") or {}).get("restartPolicy") or "Always"
        while self._kubelet.current(run) and not run.remove:
            container.log_index = container.restart_count
            container.attempts += 1
            try:
                process = await self._launch(run, spec, container)
            except processes.StartFailure as failure:
                if not self._kubelet.current(run):
                    return
                if failure.reason != "StartError":
                    container.state, container.reason, container.message = "waiting", failure.reason, failure.message
                    container.attempts -= 1
                    self._kubelet.mark(run)
                    await asyncio.sleep(CONFIG_RETRY)
                    continue
                container.state, container.reason, container.message = "terminated", failure.reason, failure.message
                container.exit_code, container.started_at = processes.START_ERROR_CODE, None
            else:
                container.process = process
                container.state, container.reason, container.message = "running", "", None
                container.started_at = timestamp(time.time())
                run.phase = "Running"
                self._kubelet.mark(run)
                returncode = await process.wait()
                container.process = None
                code = processes.exit_code(returncode)
                container.state, container.exit_code, container.message = "terminated", code, None
                container.reason = termination_reason(code)
            container.finished_at = timestamp(time.time())
            if not self._kubelet.current(run):
                return
            code = container.exit_code or 0
            if run.remove or after_exit(policy, code) != "restart":
                container.done = True
                self._kubelet.mark(run)
                self._settle_processes(run)
                return
            container.last_terminated = dict(container.terminated(), containerID=processes.container_id(
                run.uid, container.name, container.attempts - 1))
            container.restart_count += 1
            delay = processes.backoff(container.restart_count, self._settings.crash_backoff)
            container.state, container.reason = "waiting", "CrashLoopBackOff"
            container.message = (f"back-off {delay:g}s restarting failed container={container.name} "
                                 f"pod={run.key[1]}_{run.key[0]}({run.uid})")
            if run.phase == "Pending":
                run.phase = "Running"
            self._kubelet.mark(run)
            await asyncio.sleep(delay)

    async def _launch(self, run: Run, spec: dict[str, Any], container: processes.Container) -> Any:
        """Resolve the container's env, command and directory, write the hosts file, start the process."""
        assert run.sandbox is not None
        directory = run.sandbox.dir
        try:
            await directory.prepare()
            allocatable = {"cpu": self._settings.cpu_per_node, "memory": self._settings.memory_per_node,
                           "ephemeral-storage": "1Ti"}

            async def lookup(kind: str, namespace: str, name: str) -> dict[str, str] | None:
                try:
                    return await processes.lookup_in(self._api, kind, namespace, name)
                except errors.ApiError as exc:
                    raise processes.StartFailure("CreateContainerConfigError", f"reading {kind} {name}: {exc}")

            env = await processes.container_env(run.pod, spec, directory.base_env(run.pod), pod_ip=processes.POD_IP,
                                                host_ip=processes.POD_IP, allocatable=allocatable, lookup=lookup)
            argv = processes.argv_of(spec, env)
            cwd = pathlib.Path(spec["workingDir"]) if spec.get("workingDir") else directory.work
            if not cwd.is_dir():
                raise processes.StartFailure(
                    "StartError", f'chdir to cwd ("{cwd}") set in config.json failed: no such file or directory')
            executable = processes.find_executable(argv[0], env.get("PATH", os.defpath), cwd)
            self._write_hosts(run)
            return await processes.launch(argv, executable, env, cwd, directory.hosts,
                                          directory.log(container.name, container.log_index))
        except OSError as exc:
            raise processes.StartFailure("StartError", f"starting container {container.name}: {exc}") from exc

    def _settle_processes(self, run: Run) -> None:
        """Once every container is done for good: the pod's phase, from their exit codes."""
        assert run.sandbox is not None
        if not run.sandbox.settled() or not self._kubelet.current(run):
            return
        clock = timestamp(time.time())
        failed = [c for c in run.sandbox.containers if (c.exit_code or 0) != 0]
        if not failed:
            self._kubelet.terminate(run, 0, "Completed", clock, phase="Succeeded")
            return
        first = failed[0]
        if first.reason == "StartError":
            self._kubelet.terminate(run, first.exit_code or 0, first.reason, clock, phase="Failed", reason="StartError",
                            message=f"container {first.name}: {first.message}")
            return
        names = ", ".join(c.name for c in failed)
        self._kubelet.terminate(run, first.exit_code or 0, "Error", clock, phase="Failed", reason="Error",
                        message=f"container(s) {names} exited with code {first.exit_code}")

    async def _stop_deleted_processes(self, run: Run, grace: float) -> None:
        """A deleted process pod: SIGTERM, the grace period, SIGKILL; then its final status is written."""
        assert run.sandbox is not None
        await processes.stop(run.sandbox.processes, grace)
        await asyncio.sleep(0)  # let the containers' own tasks record their exits first
        clock = timestamp(time.time())
        for container in run.sandbox.containers:
            if not container.done and container.process is None:
                container.done = True
                if container.state != "terminated":
                    container.state, container.exit_code, container.reason = "terminated", 0, "Completed"
                    container.finished_at = clock
        self._settle_processes(run)

    def _write_hosts(self, run: Run) -> None:
        assert run.sandbox is not None
        namespace = run.key[0]
        names = processes.cluster_names(namespace, self._services.get(namespace, ()),
                                        self._subdomain_hosts.get(namespace, {}).values())
        run.sandbox.dir.write_hosts(processes.hosts_text(self._machine_hosts, run.pod, names))

    def _refresh_hosts(self, namespace: str) -> None:
        """The namespace's names changed: rewrite the hosts files of its running process pods."""
        for run in self._runs.values():
            if run.key[0] == namespace and run.sandbox is not None and run.stage == "running":
                try:
                    self._write_hosts(run)
                except OSError as exc:
                    log.warning("sim kubelet: pod %s/%s: writing its hosts file failed: %s", *run.key, exc)
