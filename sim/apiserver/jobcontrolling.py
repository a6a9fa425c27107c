"""The Job controller of the local cluster, as kube-controller-manager v1.37 runs batch/v1 Jobs.

In: every Job and every pod, through two informers of the store; the wall clock, for the
backoff after pod failures and for ``activeDeadlineSeconds``. Out, through the store:

- pods made from a Job's template (``generateName: <job>-``, the template's labels and
  annotations, the ``batch.kubernetes.io/job-tracking`` finalizer, a controller
  ownerReference with ``blockOwnerDeletion``), as many as ``parallelism`` allows and
  ``completions`` still needs; a failed pod replaced after 10 s, doubled per further
  failure (``SimSettings.job_backoff``);
- pods deleted when the Job is suspended (finalizer removed first, so they do not count
  as failures), has too many, has failed or ran past its deadline (finalizer kept until
  they are counted);
- the finalizer removed from each finished pod once the Job's status accounts for it, and
  from pods whose Job is gone or finished (deleted Jobs' pods then go);
- the Job's status: ``startTime``, ``active``, ``ready``, ``terminating``, ``succeeded``,
  ``failed``, ``uncountedTerminatedPods``, the conditions ``Suspended``, then
  ``SuccessCriteriaMet`` followed by ``Complete`` (reason ``CompletionsReached``) or
  ``FailureTarget`` followed by ``Failed`` (``BackoffLimitExceeded``, ``DeadlineExceeded``),
  the terminal one only once no pod is uncounted or terminating, and ``completionTime``.

The upstream sequence of status writes is kept (finished pods go to
``uncountedTerminatedPods`` first, their finalizers are removed, then they are counted), so
a watcher sees the same intermediate states.

Indexed completion mode (``completionMode: Indexed``): one pod per index ``0..completions-1``
not yet succeeded (at most ``parallelism`` at once), named ``<job>-<index>-<random>``, with the
``batch.kubernetes.io/job-completion-index`` annotation and label, the hostname
``<job>-<index>`` and the ``JOB_COMPLETION_INDEX`` env (a fieldRef to that label) in every
container; the indexes that succeeded in ``completedIndexes`` (``0-2,4``); the Job complete when
every index succeeded; a failed index made again (the Job's backoffLimit counts every failure);
pods of a succeeded or duplicated index deleted. Pod failure policies, success policies and
per-index backoff limits are not implemented.

Cheap by design: pods are indexed by their Job's uid as they come, a sync reads only its
Job's pods, and pod events reach a Job at most once per ``BATCH`` seconds.
"""

from __future__ import annotations

import asyncio
import calendar
import collections
import copy
import dataclasses
import logging
import time
from collections.abc import Iterable
from typing import Any

from sim import errors, listwatching, objects
from sim import settings as sim_settings
from sim.apiserver import store as sim_store

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name)."""
Item = tuple[str, str, str]
"""Work: ("job" | "orphan", namespace, name); an orphan is a pod whose finalizer no Job will remove."""

JOBS = sim_store.JOBS
FINALIZER = "batch.kubernetes.io/job-tracking"
BATCH = 0.05
"""Seconds pod events (and the Job's own status writes) wait to be synced together;
kube-controller-manager waits a second, which the sim's short pod lives cannot afford."""
MAX_BACKOFF = 600.0
"""Seconds at most between a failure and the replacement pod (upstream: 10 minutes)."""
MAX_UNCOUNTED = 500
"""Finished pods one status write takes into uncountedTerminatedPods, as upstream."""
MAX_CREATE = 500
"""Pods created or deleted in one sync, as upstream."""
RETRY = 0.2
"""Seconds before a sync that failed (other than by a conflict) is tried again."""

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
"""Annotation and label of an Indexed Job's pod: its completion index."""
INDEX_ENV = "JOB_COMPLETION_INDEX"
MAX_GENERATED_NAME = 58
"""apimachinery's names.MaxGeneratedNameLength: a generateName longer than this is cut."""

COMPLETE = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")


# --- pure helpers -----------------------------------------------------------------------------

def _now() -> str:
    return sim_store.now()


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def controller_of(obj: Obj) -> Obj | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in objects.metadata(obj).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def _job_ref(pod: Obj) -> Obj | None:
    ref = controller_of(pod)
    if ref is not None and ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
        return ref
    return None


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _terminal(pod: Obj) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def _deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _tracked(pod: Obj) -> bool:
    return FINALIZER in (pod["metadata"].get("finalizers") or ())


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _active(pod: Obj) -> bool:
    return not _terminal(pod) and not _deleting(pod)


def _uid(obj: Obj) -> str:
    return str(obj["metadata"].get("uid") or "")


def finished(job: Obj) -> bool:
    """Complete or Failed: nothing more happens to the Job."""
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or ())


def _condition(conditions: list[Obj], kind: str) -> Obj | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _new_condition(kind: str, status: str, reason: str, message: str) -> Obj:
    stamp = _now()
    return {"type": kind, "status": status, "lastProbeTime": stamp, "lastTransitionTime": stamp,
            "reason": reason, "message": message}


def ensure_condition(conditions: list[Obj], kind: str, status: str, reason: str, message: str) -> bool:
    """Set condition ``kind``; a False one is only ever changed to, never added. True when changed."""
    current = _condition(conditions, kind)
    if current is not None:
        if (current.get("status"), current.get("reason"), current.get("message")) == (status, reason, message):
            return False
        conditions[conditions.index(current)] = _new_condition(kind, status, reason, message)
        return True
    if status == "False":
        return False
    conditions.append(_new_condition(kind, status, reason, message))
    return True


def _counts_as_failed(pod: Obj, spec: Obj) -> bool:
    """Failed, or (unless only failed pods are replaced) deleted before it succeeded."""
    if _phase(pod) == "Failed":
        return True
    if spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy"):
        return False
    return _deleting(pod) and _phase(pod) != "Succeeded"


def _finished_at(pod: Obj) -> float:
    """When a pod finished: its last container's exit, else its deletion, else now (as upstream)."""
    status = pod.get("status") or {}
    ends = [_epoch(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]]
    known = [e for e in ends if e is not None]
    if known:
        return max(known)
    return _epoch(pod["metadata"].get("deletionTimestamp")) or time.time()


def _past_backoff_on_failure(spec: Obj, pods: Iterable[Obj]) -> bool:
    """restartPolicy OnFailure: the containers' restarts have reached backoffLimit."""
    if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for pod in pods:
        if _phase(pod) in ("Running", "Pending"):
            status = pod.get("status") or {}
            restarts += sum(int(c.get("restartCount") or 0) for c in
                            [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())])
    limit = int(spec.get("backoffLimit") or 0)
    return restarts > 0 if limit == 0 else restarts >= limit


def _removal_order(pod: Obj) -> tuple[int, int, int, str]:
    """Which active pods go first when there are too many: unscheduled, pending, not ready ones."""
    return (1 if (pod.get("spec") or {}).get("nodeName") else 0, 1 if _phase(pod) == "Running" else 0,
            1 if _ready(pod) else 0, str(pod["metadata"].get("creationTimestamp") or ""))


def status_body(status: Obj) -> Obj:
    """A JobStatus as Go serialises it: zero counters, empty lists and unset times left out."""
    out: Obj = {}
    if status.get("conditions"):
        out["conditions"] = status["conditions"]
    if status.get("completedIndexes"):
        out["completedIndexes"] = status["completedIndexes"]
    for field in ("startTime", "completionTime"):
        if status.get(field):
            out[field] = status[field]
    for field in ("active", "succeeded", "failed"):
        if status.get(field):
            out[field] = status[field]
    out["terminating"] = status.get("terminating") or 0
    uncounted = status.get("uncountedTerminatedPods") or {}
    out["uncountedTerminatedPods"] = {k: list(uncounted[k]) for k in ("succeeded", "failed") if uncounted.get(k)}
    out["ready"] = status.get("ready") or 0
    return out


def indexed(spec: Obj) -> bool:
    """Whether a Job runs in Indexed completion mode (with its completions set, as validation wants)."""
    return spec.get("completionMode") == "Indexed" and isinstance(spec.get("completions"), int)


def index_of(pod: Obj) -> int | None:
    """An Indexed Job pod's completion index (its annotation), None when it has none that parses."""
    value = (objects.metadata(pod).get("annotations") or {}).get(INDEX_KEY)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def parse_indexes(text: str | None) -> set[int]:
    """``completedIndexes`` (``1,3-5,7``) as a set; nothing for what does not parse."""
    found: set[int] = set()
    for part in (text or "").split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            found.update(range(int(first), int(last or first) + 1))
    return found


def format_indexes(indexes: Iterable[int]) -> str:
    """A set of indexes as ``completedIndexes`` writes them: ordered intervals."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _with_index(name: str, template: Obj, index: int) -> str:
    """The template as an Indexed Job's pod of ``index`` gets it; its generateName."""
    meta = template.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), INDEX_KEY: str(index)}
    meta["labels"] = {**(meta.get("labels") or {}), INDEX_KEY: str(index)}
    spec = template.setdefault("spec", {})
    spec["hostname"] = f"{name}-{index}"
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            env = container.setdefault("env", [])
            if not any(isinstance(e, dict) and e.get("name") == INDEX_ENV for e in env):
                env.append({"name": INDEX_ENV,
                            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{INDEX_KEY}']"}}})
    suffix = f"-{index}-"
    prefix = name + suffix
    return prefix if len(prefix) <= MAX_GENERATED_NAME else name[:MAX_GENERATED_NAME - len(suffix)] + suffix


def pod_from_template(job: Obj, index: int | None = None) -> Obj:
    """A new pod of ``job``: its template's labels, annotations, finalizers (plus job-tracking) and
    spec; of completion ``index`` for an Indexed Job."""
    meta = job["metadata"]
    template = copy.deepcopy(job["spec"].get("template") or {})
    generate_name = f"{meta['name']}-" if index is None else _with_index(meta["name"], template, index)
    template_meta = objects.metadata(template)
    pod_meta: Obj = {"generateName": generate_name}
    for field in ("labels", "annotations"):
        if template_meta.get(field):
            pod_meta[field] = dict(template_meta[field])
    finalizers = list(template_meta.get("finalizers") or ())
    if FINALIZER not in finalizers:
        finalizers.append(FINALIZER)
    pod_meta["finalizers"] = finalizers
    pod_meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
                                    "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Pod failures of a Job since its last success, and when the last one ended (epoch seconds)."""

    failures: int = 0
    last_failure: float = 0.0

    def after(self, succeeded: list[Obj], failed: list[Obj]) -> Backoff:
        """The record once the newly finished pods are taken into account."""
        if not succeeded:
            if not failed:
                return self
            return Backoff(self.failures + len(failed), max(_finished_at(p) for p in failed))
        last_success = max(_finished_at(p) for p in succeeded)
        later = [_finished_at(p) for p in failed if _finished_at(p) > last_success]
        return Backoff(len(later), max(later)) if later else Backoff()

    def remaining(self, base: float, now: float) -> float:
        """Seconds until a replacement pod may be created."""
        if self.failures == 0:
            return 0.0
        delay = min(base * float(2 ** (self.failures - 1)), MAX_BACKOFF)
        return max(0.0, delay - (now - self.last_failure))


@dataclasses.dataclass
class _Sync:
    """What one sync of a Job knows and decides (upstream's syncJobCtx)."""

    job: Obj
    status: Obj
    pods: list[Obj]
    active: int
    ready: int
    terminating: int
    succeeded: int
    backoff: Backoff
    completed: set[int] | None = None
    """An Indexed Job's indexes that succeeded (None for a NonIndexed Job)."""
    finished: tuple[str, str, str] | None = None
    """(condition type, reason, message) the Job is heading for."""


# --- the controller ---------------------------------------------------------------------------

class JobController:
    """Runs the Jobs of one store; ``run()`` until cancelled."""

    def __init__(self, store: sim_store.Store, settings: sim_settings.SimSettings) -> None:
        self._store = store
        self._settings = settings
        self._pods: dict[str, set[Key]] = collections.defaultdict(set)
        """Job uid → its pods (by controller ownerReference)."""
        self._owners: dict[Key, tuple[str, str]] = {}
        """Pod → (Job uid, Job name), to find the Job of a pod that is gone."""
        self._generations: dict[Key, int] = {}
        self._backoffs: dict[str, Backoff] = {}
        self._due: dict[Item, float] = {}
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        pods = listwatching.Informer(self._store, "pods", self._on_pod, name="sim-job-controller-pods")
        jobs = listwatching.Informer(self._store, JOBS, self._on_job, name="sim-job-controller-jobs")
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(pods.run(), name=pods.name)
            tasks.create_task(jobs.run(), name=jobs.name)
            tasks.create_task(self._work(), name="sim-job-controller-worker")

    # -- events (synchronous: index, then queue) --

    def _on_job(self, kind: str, job: Obj) -> None:
        meta = objects.metadata(job)
        key = (meta.get("namespace") or "", meta.get("name") or "")
        if kind == "DELETED":
            self._generations.pop(key, None)
            uid = meta.get("uid")
            if uid:
                self._backoffs.pop(uid, None)
                for pod_key in self._pods.get(uid, ()):
                    self._enqueue(("orphan", *pod_key))
            return
        generation = int(meta.get("generation") or 0)
        previous = self._generations.get(key)
        self._generations[key] = generation
        # A new Job or a changed spec is synced at once; status writes (ours) are batched.
        self._enqueue(("job", *key), 0.0 if previous != generation else BATCH)
        if finished(job):
            self._backoffs.pop(str(meta.get("uid")), None)
            for pod_key in self._pods.get(str(meta.get("uid")), ()):
                pod = self._store.peek("pods", *pod_key)
                if pod is not None and _tracked(pod):
                    self._enqueue(("orphan", *pod_key))

    def _on_pod(self, kind: str, pod: Obj) -> None:
        meta = objects.metadata(pod)
        key = (meta.get("namespace") or "", meta.get("name") or "")
        previous = self._owners.get(key)
        ref = None if kind == "DELETED" else _job_ref(pod)
        current = (str(ref.get("uid")), str(ref.get("name"))) if ref is not None else None
        if previous is not None and previous != current:
            self._unindex(key, previous)
            self._enqueue(("job", key[0], previous[1]), BATCH)
        if current is None:
            if kind != "DELETED" and _tracked(pod):
                self._enqueue(("orphan", *key))
            return
        self._owners[key] = current
        self._pods[current[0]].add(key)
        self._enqueue(("job", key[0], current[1]), BATCH)
        if _tracked(pod):
            job = self._store.peek(JOBS, key[0], current[1])
            if job is None or _uid(job) != current[0] or finished(job):
                self._enqueue(("orphan", *key))

    def _unindex(self, key: Key, owner: tuple[str, str]) -> None:
        self._owners.pop(key, None)
        keys = self._pods.get(owner[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._pods[owner[0]]

    def _enqueue(self, item: Item, delay: float = 0.0) -> None:
        loop = self._loop or asyncio.get_running_loop()
        due = loop.time() + delay
        if self._due.get(item, float("inf")) <= due:
            return
        self._due[item] = due
        if delay <= 0:
            self._queue.put_nowait(item)
        else:
            loop.call_later(delay, self._release, item, due)

    def _release(self, item: Item, due: float) -> None:
        if self._due.get(item) == due:
            self._queue.put_nowait(item)

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await self._queue.get()
            due = self._due.get(item)
            if due is None or due > loop.time():
                continue  # stale: synced already, or moved to later
            del self._due[item]
            kind, namespace, name = item
            try:
                if kind == "job":
                    await self._sync(namespace, name)
                else:
                    await self._release_orphan(namespace, name)
            except asyncio.CancelledError:
                raise
            except errors.ApiError as exc:
                if exc.code != 404:
                    # A conflict means someone wrote first: sync again from what is stored now.
                    log.debug("sim job controller: %s %s/%s: %s", kind, namespace, name, exc)
                    self._enqueue(item, BATCH if exc.code == 409 else RETRY)
            except Exception:
                log.exception("sim job controller: %s %s/%s failed", kind, namespace, name)
                self._enqueue(item, RETRY)

    # -- orphans --

    async def _release_orphan(self, namespace: str, name: str) -> None:
        """Remove the finalizer of a pod whose Job is gone or finished."""
        pod = self._store.peek("pods", namespace, name)
        if pod is None or not _tracked(pod):
            return
        ref = controller_of(pod)
        if ref is not None:
            if ref.get("kind") != "Job" or ref.get("apiVersion") != "batch/v1":
                return
            job = self._store.peek(JOBS, namespace, str(ref.get("name")))
            if job is not None and _uid(job) == ref.get("uid") and not finished(job):
                return
        await self._drop_finalizer(pod)

    async def _drop_finalizer(self, pod: Obj) -> None:
        """The job-tracking finalizer removed (a pod already gone is fine)."""
        meta = pod["metadata"]
        try:
            await self._store.patch("pods", meta["namespace"], meta["name"],
                                    {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}, "strategic")
        except errors.ApiError as exc:
            if exc.code != 404:
                raise

    # -- one Job --

    async def _sync(self, namespace: str, name: str) -> None:
        job = self._store.peek(JOBS, namespace, name)
        if job is None or finished(job):
            return
        uid = _uid(job)
        spec = job.get("spec") or {}
        status: Obj = copy.deepcopy(job.get("status") or {})
        pods = [p for k in sorted(self._pods.get(uid, ()))
                if (p := self._store.peek("pods", *k)) is not None and (_job_ref(p) or {}).get("uid") == uid]
        uncounted = status.setdefault("uncountedTerminatedPods", {})
        counted_succeeded = set(uncounted.get("succeeded") or ())
        counted_failed = set(uncounted.get("failed") or ())
        tracked = [p for p in pods if _tracked(p)]
        new_succeeded = [p for p in tracked if _uid(p) not in counted_succeeded and _phase(p) == "Succeeded"]
        new_failed = [p for p in tracked if _uid(p) not in counted_failed and _counts_as_failed(p, spec)]
        active_pods = [p for p in pods if _active(p)]
        suspended = bool(spec.get("suspend"))
        if not status.get("startTime") and not suspended:
            status["startTime"] = _now()
        ctx = _Sync(job=job, status=status, pods=pods, active=len(active_pods),
                    ready=sum(1 for p in active_pods if _ready(p)),
                    terminating=sum(1 for p in pods if not _terminal(p) and _deleting(p)),
                    succeeded=int(status.get("succeeded") or 0) + len(new_succeeded) + len(counted_succeeded),
                    backoff=self._backoffs.get(uid, Backoff()).after(new_succeeded, new_failed))
        if indexed(spec):
            ctx.completed = parse_indexes(status.get("completedIndexes")) | {
                i for p in pods if _phase(p) == "Succeeded" and (i := index_of(p)) is not None
                and i < int(spec["completions"])}
            ctx.succeeded = len(ctx.completed)
            status["completedIndexes"] = format_indexes(ctx.completed)
        failed = int(status.get("failed") or 0) + len(new_failed) + len(counted_failed)
        conditions: list[Obj] = status.setdefault("conditions", [])
        met = _condition(conditions, "SuccessCriteriaMet")
        target = _condition(conditions, "FailureTarget")
        if met is not None and met.get("status") == "True":
            ctx.finished = ("SuccessCriteriaMet", met.get("reason", ""), met.get("message", ""))
        elif target is not None and target.get("status") == "True":
            ctx.finished = ("Failed", target.get("reason", ""), target.get("message", ""))
        elif failed > int(spec.get("backoffLimit") or 0) or _past_backoff_on_failure(spec, pods):
            ctx.finished = ("FailureTarget", *BACKOFF_EXCEEDED)
        elif self._past_deadline(spec, status):
            ctx.finished = ("FailureTarget", *DEADLINE_EXCEEDED)
        elif spec.get("activeDeadlineSeconds") is not None and not suspended and status.get("startTime"):
            started = _epoch(status["startTime"]) or time.time()
            self._enqueue(("job", namespace, name),
                          max(BATCH, float(spec["activeDeadlineSeconds"]) - (time.time() - started)))

        suspend_changed = False
        if ctx.finished is not None:
            await self._delete(ctx, active_pods, keep_finalizer=True)
        else:
            managed = not job["metadata"].get("deletionTimestamp")
            if managed:
                await self._manage(ctx, active_pods)
            completions = spec.get("completions")
            if ctx.active == 0 and (ctx.succeeded > 0 if completions is None else ctx.succeeded >= completions):
                ctx.finished = ("SuccessCriteriaMet", *COMPLETE)
            elif managed and suspended:
                suspend_changed = ensure_condition(conditions, "Suspended", "True", "JobSuspended", "Job suspended")
                if suspend_changed:
                    # A suspended Job starts afresh when resumed (its deadline counts from then).
                    status.pop("startTime", None)
            elif managed:
                suspend_changed = ensure_condition(conditions, "Suspended", "False", "JobResumed", "Job resumed")
                if suspend_changed:
                    status["startTime"] = _now()

        changed = suspend_changed or (ctx.active, ctx.ready, ctx.terminating) != (
            int(status.get("active") or 0), status.get("ready"), status.get("terminating"))
        status["active"], status["ready"], status["terminating"] = ctx.active, ctx.ready, ctx.terminating
        await self._track(ctx, changed)

    def _past_deadline(self, spec: Obj, status: Obj) -> bool:
        deadline = spec.get("activeDeadlineSeconds")
        started = _epoch(status.get("startTime"))
        if deadline is None or started is None or spec.get("suspend"):
            return False
        return time.time() - started >= float(deadline)

    async def _manage(self, ctx: _Sync, active_pods: list[Obj]) -> None:
        """Create or delete pods so that the right number run (upstream's manageJob)."""
        spec = ctx.job["spec"]
        if spec.get("suspend"):
            await self._delete(ctx, sorted(active_pods, key=_removal_order), keep_finalizer=False)
            return
        parallelism = int(spec.get("parallelism") or 0)
        completions = spec.get("completions")
        if ctx.completed is not None:
            await self._manage_indexes(ctx, active_pods, int(completions), parallelism)
            return
        if completions is None:
            wanted = ctx.active if ctx.succeeded > 0 else parallelism
        else:
            wanted = max(0, min(int(completions) - ctx.succeeded, parallelism))
        surplus = ctx.active - wanted
        if surplus > 0:
            await self._delete(ctx, sorted(active_pods, key=_removal_order)[:min(surplus, MAX_CREATE)],
                               keep_finalizer=False)
            return
        # Replacing only failed pods, pods still terminating hold their places.
        holding = ctx.terminating if spec.get("podReplacementPolicy") == "Failed" else 0
        missing = wanted - holding - ctx.active
        if missing <= 0:
            return
        if self._backing_off(ctx):
            return
        namespace = ctx.job["metadata"]["namespace"]
        for _ in range(min(missing, MAX_CREATE)):
            pod = await self._store.create("pods", pod_from_template(ctx.job), namespace)
            # Indexed now rather than when the event comes: the next sync must see it.
            self._on_pod("ADDED", pod)
            ctx.active += 1

    def _backing_off(self, ctx: _Sync) -> bool:
        """Whether the Job waits out its backoff before a new pod (then synced again after it)."""
        wait = ctx.backoff.remaining(self._settings.job_backoff, time.time())
        if wait <= 0:
            return False
        self._enqueue(("job", ctx.job["metadata"]["namespace"], ctx.job["metadata"]["name"]), max(wait, BATCH))
        # Upstream reports no active pods while it waits out the backoff.
        ctx.active = 0
        return True

    async def _manage_indexes(self, ctx: _Sync, active_pods: list[Obj], completions: int, parallelism: int) -> None:
        """Indexed mode: pods of a succeeded, duplicated or unknown index go; the lowest indexes
        with no pod and no success get one, up to ``parallelism`` active."""
        completed = ctx.completed or set()
        running: set[int] = set()
        surplus: list[Obj] = []
        for pod in sorted(active_pods, key=_removal_order, reverse=True):
            index = index_of(pod)
            if index is None or index >= completions or index in completed or index in running:
                surplus.append(pod)
            else:
                running.add(index)
        if surplus:
            await self._delete(ctx, surplus[:MAX_CREATE], keep_finalizer=False)
            return
        pending = [i for i in range(completions) if i not in completed and i not in running]
        room = min(parallelism, completions - len(completed)) - ctx.active
        if not pending or room <= 0:
            return
        if self._backing_off(ctx):
            return
        meta = ctx.job["metadata"]
        for index in pending[:min(room, MAX_CREATE)]:
            pod = await self._store.create("pods", pod_from_template(ctx.job, index), meta["namespace"])
            self._on_pod("ADDED", pod)
            ctx.active += 1

    async def _delete(self, ctx: _Sync, pods: list[Obj], *, keep_finalizer: bool) -> None:
        """Delete active ``pods``, which then count as terminating. Without ``keep_finalizer``
        the finalizer goes first, so that they are never counted as failed."""
        for pod in pods:
            meta = pod["metadata"]
            if not keep_finalizer and _tracked(pod):
                await self._drop_finalizer(pod)
            try:
                await self._store.delete("pods", meta["namespace"], meta["name"])
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
            ctx.active -= 1
            ctx.terminating += 1
            ctx.ready -= 1 if _ready(pod) else 0

    async def _track(self, ctx: _Sync, flush: bool) -> None:
        """Finished pods into uncountedTerminatedPods, their finalizers removed, then counted;
        the interim and the terminal condition (upstream's trackJobStatusAndRemoveFinalizers)."""
        job, status = ctx.job, ctx.status
        spec = job["spec"]
        uncounted = status["uncountedTerminatedPods"]
        with_finalizer = {_uid(p) for p in ctx.pods if _tracked(p)}
        flush = self._count_released(status, with_finalizer) or flush
        releasing: list[Obj] = []
        succeeded_uids = list(uncounted.get("succeeded") or ())
        failed_uids = list(uncounted.get("failed") or ())
        capped = False
        for pod in ctx.pods:
            if not _tracked(pod):
                continue
            failed = _counts_as_failed(pod, spec)
            if not (job["metadata"].get("deletionTimestamp") or ctx.finished or _phase(pod) == "Succeeded" or failed):
                continue
            releasing.append(pod)
            uid = _uid(pod)
            if _phase(pod) == "Succeeded" and uid not in failed_uids:
                if uid not in succeeded_uids:
                    succeeded_uids.append(uid)
                    flush = True
            elif failed or (ctx.finished is not None and ctx.finished[0] != "SuccessCriteriaMet"):
                if uid not in failed_uids:
                    failed_uids.append(uid)
                    flush = True
            if len(succeeded_uids) + len(failed_uids) >= MAX_UNCOUNTED:
                # The rest in a later sync (the writes bring one): the Job cannot finish before.
                capped = True
                break
        uncounted["succeeded"], uncounted["failed"] = succeeded_uids, failed_uids
        conditions = status["conditions"]
        if ctx.finished is not None and ctx.finished[0] == "FailureTarget":
            conditions.append(_new_condition("FailureTarget", "True", ctx.finished[1], ctx.finished[2]))
            flush = True
            ctx.finished = ("Failed", ctx.finished[1], ctx.finished[2])
        if ctx.finished is not None and ctx.finished[0] == "SuccessCriteriaMet":
            if _condition(conditions, "SuccessCriteriaMet") is None:
                conditions.append(_new_condition("SuccessCriteriaMet", "True", ctx.finished[1], ctx.finished[2]))
                flush = True
            ctx.finished = ("Complete", ctx.finished[1], ctx.finished[2])
        if flush:
            job = await self._write(job, status)
            self._backoffs[_uid(job)] = ctx.backoff
            flush = False
        for pod in releasing:
            await self._drop_finalizer(pod)
            with_finalizer.discard(_uid(pod))
        flush = self._count_released(status, with_finalizer) or flush
        if ctx.finished is not None and not capped and not uncounted.get("succeeded") \
                and not uncounted.get("failed") and ctx.terminating == 0:
            ensure_condition(conditions, ctx.finished[0], "True", ctx.finished[1], ctx.finished[2])
            if ctx.finished[0] == "Complete":
                status["completionTime"] = (_condition(conditions, "Complete") or {}).get("lastTransitionTime")
            flush = True
        if flush:
            await self._write(job, status)

    @staticmethod
    def _count_released(status: Obj, with_finalizer: set[str]) -> bool:
        """Move uncounted pods whose finalizer is gone into the counters; True when any moved."""
        uncounted = status["uncountedTerminatedPods"]
        moved = False
        for field in ("succeeded", "failed"):
            uids = list(uncounted.get(field) or ())
            keep = [u for u in uids if u in with_finalizer]
            if len(keep) != len(uids):
                status[field] = int(status.get(field) or 0) + len(uids) - len(keep)
                uncounted[field] = keep
                moved = True
        return moved

    async def _write(self, job: Obj, status: Obj) -> Obj:
        """The status written through /status, against the Job's resourceVersion (409 if it moved)."""
        body = dict(job, status=status_body(status))
        return await self._store.update(JOBS, body, subresource="status")
