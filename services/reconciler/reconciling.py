"""The reconciler worker: records of a job key in, API writes and decisions out.

In: records from ``kto.jobs`` (one job key at a time, in log order, via the
bus's KeyedConsumer: ``handle`` takes each record into the key's view,
``settle`` reconciles once per burst). Out: creates, updates and deletes on the job's cluster,
and a Decision record on ``kto.jobs`` for each of them. The decision itself is
``shared.core.reconciling.decide`` (pure); this module keeps each key's view,
hydrates keys it has not seen, applies the decision idempotently (409
AlreadyExists and 404 NotFound count as done) and arms a timer for deadlines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import context as otel_context

from shared.api import common, elastic, jobs, mpijobs
from shared import keygen, metrics
from shared.bus import producing, records
from shared.core import basis, conditions, families, kubeflow_v1, plans, reconciling, statuses, views
from shared.core import events as child_events
from shared.core.elastic import decisions as et_decisions
from shared.core.elastic import family as et_family
from shared.core.elastic import reconciling as et
from shared.core.mpi_v2 import family as mpi_v2_family
from shared.core.mpi_v2 import reconciling as mpi_v2
from shared.kube import clients, connecting, hydrating, recording, resources
from services.reconciler.settings import ReconcilerSettings

log = logging.getLogger(__name__)

WANTED_DECISIONS = frozenset({"timer_fired", "job_check_due", records.WAKE_ACTION})
"""Decisions the reconciler reads: its own timers, checks and wake-ups. Not failure verdicts:
a verdict is taken from the job (``kto.dev/failure``), never from a record."""
DELETE_CONFIRM_AFTER = 5.0
"""Seconds after which a child this worker deleted, whose DELETED observation has not come,
is looked up on the API server: a watcher that died right after the delete never publishes it
(its successor does not know the child), and waiting ``delete_grace`` for it would leave, say,
a restarted replica missing for minutes."""
CONFLICT_RETRY_AFTER = 0.5
"""Seconds before a key whose API write met 409 Conflict is read afresh and settled again."""
CONCURRENT_KINDS = frozenset({"Pod", "Service"})
"""Children created concurrently; the others are created first, one by one, in plan order."""
RECONCILED_KINDS = families.REGISTRY.kinds
"""Job kinds of the keys this worker reconciles: every family's."""
MAX_EXECS = 4
"""Commands one TrainingJob pass may run in its launcher (the core asks for at most two)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


async def run_in_launcher(
    client: clients.KubeClient, command: et_decisions.Exec, timeout: float,
) -> et_decisions.ExecResult:
    """Run one command a TrainingJob's decision asks for: its output as the client reads it
    back (each stream capped at ``clients.EXEC_OUTPUT_LIMIT``); failed on a non-zero exit, an
    API error, or no end within ``timeout`` seconds (the exec is then abandoned)."""
    try:
        answer = await client.exec(command.namespace, command.pod, command.container, list(command.command),
                                   timeout=timeout)
    except clients.ApiError as exc:
        if exc.reason == "Timeout":
            return et_decisions.ExecResult(
                command, False, f"the {command.purpose} command did not end within the exec time limit of "
                                f"{timeout:g} s and counts as failed")
        return et_decisions.ExecResult(command, False, exc.message or str(exc))
    if answer.exit_code != 0:
        return et_decisions.ExecResult(command, False, answer.stderr or answer.stdout or f"exit code {answer.exit_code}")
    return et_decisions.ExecResult(command, True, answer.stdout)


class Reconciler:
    """Holds every key's view; ``handle`` is the KeyedConsumer handler."""

    def __init__(
        self, settings: ReconcilerSettings, clusters: connecting.ClusterClients, publisher: producing.Publisher,
        service_metrics: metrics.ServiceMetrics | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = service_metrics
        self._clusters = clusters
        self._publisher = publisher
        self._views: dict[str, views.JobView] = {}
        self._deleted: dict[tuple[str, views.ChildKey], tuple[str | None, float]] = {}
        """(job key, child) → (uid, loop time) of the incarnation this worker deleted; that
        incarnation counts as going away until its DELETED comes or grace ends."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._job_seen: dict[str, float] = {}
        """Job key → loop time its job was last observed (or last checked)."""
        self._checking: set[str] = set()
        """Keys whose ``job_check_due`` record is on its way."""
        self._sweeper: asyncio.Task[None] | None = None
        self._announced: dict[str, tuple[str | None, str, str]] = {}
        """Job key → (uid, reason, message) of the failure verdict this process published."""
        self._decided_on: dict[str, dict[str, Any]] = {}
        """Job key → the job as its last decision saw it: the old object an update is validated against."""
        self._passes: dict[str, str] = {}
        """Job key → id of the last ``reconcile_pass`` record this process wrote for it: every
        act after it names it (``detail.pass``), so replay checks the act against that plan."""
        self._events = recording.Recorder(settings.instance)
        self._warned: dict[str, set[tuple[str, str, str]]] = {}
        """Job key → (uid, reason, message) of the Warning Events this process recorded."""
        operator = settings.operator
        self._podgroups = (
            None if not operator.gang_scheduling
            else resources.VOLCANO_PODGROUPS if operator.volcano else resources.PLUGINS_PODGROUPS
        )
        """The PodGroup kind hydrated in gang mode."""

        self._deciders: dict[str, Callable[[records.JobKey, views.JobView], _Pass]] = {
            kubeflow_v1.FAMILY.name: self._decide_v1,
            mpi_v2_family.FAMILY.name: self._decide_mpi_v2,
            et_family.FAMILY.name: self._decide_training_job,
        }
        """Family → how this worker decides and applies a pass of its jobs."""

    def accepts(self, type_tag: str) -> bool:
        """Which records (by ``kto-type`` header) the reconciler reads: every
        observation, its own timers and checks; not the other decisions."""
        kind, _, what = type_tag.partition(":")
        return kind == "observation" or what in WANTED_DECISIONS

    async def handle(self, record: records.Record, parent: otel_context.Context) -> bool:
        """Take one record in (the KeyedConsumer handler); True if it may change the decision."""
        self._loop = asyncio.get_running_loop()
        if self._sweeper is None and self._settings.check_after > 0:
            self._sweeper = self._loop.create_task(self._sweep_forever(), name="reconciler stale-job sweep")
        key = records.JobKey.parse(record.key)
        if (skipped := self._settings.refusal(key.namespace)) is not None:
            log.warning("%s: record skipped: %s", record.key, skipped)
            return False
        if key.kind not in RECONCILED_KINDS:
            return False
        view = self._views.setdefault(record.key, views.JobView())
        if isinstance(record, records.Decision):
            if record.action == "job_check_due":
                self._checking.discard(record.key)
                view.hydrated = False  # read the job and its children afresh
                return True
            return record.action == "timer_fired" or records.is_wake(record, "reconciler")
        own_delete = record.event == "DELETED" and self._deletion_seen(record.key, record.object)
        # The view now holds a record's word: a pass that would act reads the API server first.
        view.read_back = False
        if not record.omitted and record.event != "DELETED":
            view.note_logged(record.object, record.object_kind in RECONCILED_KINDS)
        if record.object_kind in RECONCILED_KINDS:
            self._job_seen[record.key] = self._loop.time()
            view.observe_job(record.object, record.event == "DELETED")
            if record.omitted and record.event != "DELETED":
                # A stand-in (too large or deep for a record) holds no spec to decide from:
                # read the job from the API server. (Values replaced on the wire change no
                # decision of whether to act, and an act is decided again on what is read.)
                view.hydrated = False
            return True
        # A pod being scheduled or getting an IP changes no decision: no reconcile for it.
        changed = view.observe_child(record.object, record.event == "DELETED")
        if changed and record.event == "DELETED" and not own_delete:
            view.vanished = True
        return changed or not view.hydrated

    def _deletion_seen(self, job_key: str, obj: dict[str, Any]) -> bool:
        """A DELETED observation ends the going-away of the incarnation it names only:
        a late one of a previous incarnation leaves the current one's mark alone. True if
        this worker deleted that incarnation."""
        entry = (job_key, views.child_key(obj))
        marked = self._deleted.get(entry)
        uid = (obj.get("metadata") or {}).get("uid")
        if marked is not None and (marked[0] is None or uid is None or marked[0] == str(uid)):
            del self._deleted[entry]
            return True
        return False

    async def settle(self, job_key: str, parent: otel_context.Context, flush: bool) -> float | None:
        """Reconcile the key once for every record taken in since its last settle.
        A 409 Conflict is the API server saying the view was stale: the key is read
        afresh and settled again shortly (its records stay held), never dead-lettered."""
        view = self._views.get(job_key)
        try:
            await self._settle(job_key)
        except clients.ApiError as exc:
            if not exc.conflict or view is None:
                raise
            log.info("%s: %s; reading it afresh and trying again", job_key, exc)
            view.hydrated = False
            return CONFLICT_RETRY_AFTER
        return None

    async def _settle(self, job_key: str) -> None:
        key = records.JobKey.parse(job_key)
        view = self._views.get(job_key)
        if view is None:
            return
        if view.reread or view.unconfirmed(statuses.FAILURE_ANNOTATION):
            # A record older than the view, or one bringing a failure verdict the API
            # server has not shown this worker: the API server settles it.
            view.hydrated = False
        if view.gone:
            self._forget(job_key)  # its DELETED observation was the last word
            return
        if self._unconfirmed_deletes(job_key):
            view.hydrated = False  # the API server says whether they are gone
        vanished, view.vanished = view.vanished, False
        if vanished:
            view.hydrated = False  # is the job going too? The API server says, before anything is made again
        if not view.hydrated:
            known = view.job
            await self._hydrate(key, view)
            if view.job is None and known is not None and not vanished:
                await self._deleted_unobserved(key, known)
        if view.job is None:
            await self._scalers_wait(key, view)
            self._forget(job_key)
            return
        await self._reconcile(key, view)

    async def _deleted_unobserved(self, key: records.JobKey, job: dict[str, Any]) -> None:
        """The view held a job that the API server no longer has, and no DELETED
        observation came (it was deleted while no watcher ran): say so on the
        topic, as an observation of this worker, so every consumer drops the job
        and the audit trail ends with its deletion."""
        meta = job.get("metadata") or {}
        log.info("%s is gone from the API server without a DELETED observation; publishing one", key)
        await self._publisher.publish(records.Observation(
            id=records.deterministic_id("reconciler", str(key), str(meta.get("uid") or ""), "DELETED"),
            key=str(key), resource_version=str(meta.get("resourceVersion") or ""),
            object_kind=key.kind, event="DELETED", object=job,
            source="reconciler", instance=self._settings.instance,
        ))

    async def _sweep_forever(self) -> None:
        """Every half ``check_after``: a job not observed for ``check_after`` seconds
        (the watcher resyncs live jobs far more often) gets a ``job_check_due``
        record, so it is read afresh in its key's order; one deleted while no
        watcher ran is then found gone."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._settings.check_after / 2)
            now = loop.time()
            due = [k for k, seen in self._job_seen.items()
                   if now - seen >= self._settings.check_after and k not in self._checking and k in self._views]
            for job_key in due:
                self._checking.add(job_key)
                self._job_seen[job_key] = now
                try:
                    await self._publisher.publish(self._decision(
                        records.JobKey.parse(job_key), "job_check_due", reason="NotObservedRecently",
                        message=f"no observation of the job for {self._settings.check_after:g}s; reading it afresh",
                    ))
                except Exception:
                    self._checking.discard(job_key)
                    log.exception("job_check_due for %s not published", job_key)

    async def _hydrate(self, key: records.JobKey, view: views.JobView) -> None:
        client = await self._clusters.get(key.cluster)
        held = set(view.children)
        job, children = await hydrating.hydrate(
            client, key.kind, key.namespace, key.name, podgroups=self._podgroups,
        )
        if job is None:
            view.replace_job(None)
        else:
            view.replace_job(job)
            view.read_back = True
            view.replace_children(children, held)  # the API server's list is the truth
            self._job_seen[str(key)] = asyncio.get_running_loop().time()
        view.hydrated = True

    def forget(self, job_keys: set[str]) -> None:
        """Drop the views of keys whose partitions went to another worker: if they
        come back, they are hydrated afresh instead of trusted stale."""
        for job_key in job_keys:
            self._forget(job_key)

    def _forget(self, job_key: str) -> None:
        self._views.pop(job_key, None)
        self._decided_on.pop(job_key, None)
        self._announced.pop(job_key, None)
        self._passes.pop(job_key, None)
        self._warned.pop(job_key, None)
        self._job_seen.pop(job_key, None)
        self._checking.discard(job_key)
        timer = self._timers.pop(job_key, None)
        if timer is not None:
            timer.cancel()
        for entry in [e for e in self._deleted if e[0] == job_key]:
            del self._deleted[entry]

    def _unconfirmed_deletes(self, job_key: str) -> bool:
        """Whether a child this worker deleted over :data:`DELETE_CONFIRM_AFTER` ago is
        still unconfirmed (its marks are dropped: hydration shows what is left)."""
        now = asyncio.get_running_loop().time()
        stale = [e for e, (_, at) in self._deleted.items() if e[0] == job_key and now - at >= DELETE_CONFIRM_AFTER]
        for entry in stale:
            del self._deleted[entry]
        return bool(stale)

    def _next_look(self, job_key: str, requeue_after: float | None) -> float | None:
        """The decision's requeue, or sooner when a delete of this key waits for confirmation."""
        now = asyncio.get_running_loop().time()
        pending = [at + DELETE_CONFIRM_AFTER - now for e, (_, at) in self._deleted.items() if e[0] == job_key]
        if not pending:
            return requeue_after
        confirm = max(min(pending), 0.0)
        return confirm if requeue_after is None else min(requeue_after, confirm)

    def _children(self, job_key: str, view: views.JobView) -> list[dict[str, Any]]:
        """Observed children, with the ones this worker deleted marked as terminating."""
        loop_time = asyncio.get_running_loop().time()
        result = []
        for child_key, child in view.children.items():
            marked = self._deleted.get((job_key, child_key))
            uid = (child.get("metadata") or {}).get("uid")
            if (marked is not None and (marked[0] is None or uid is None or marked[0] == str(uid))
                    and loop_time - marked[1] < self._settings.delete_grace):
                meta = dict(child.get("metadata") or {})
                meta.setdefault("deletionTimestamp", "deleted-by-kto")
                child = {**child, "metadata": meta}
            result.append(child)
        return result

    async def _reconcile(self, key: records.JobKey, view: views.JobView) -> None:
        """Decide, and act only on what the API server says: a pass that would act on a view
        holding anything taken from a record (which anyone able to write the topic could
        have forged) reads the job and its children from the API server first and decides
        again; the second decision is the one carried out (docs/security.md)."""
        planned = self._decide_pass(key, view)
        if planned.acts and not view.read_back:
            await self._hydrate(key, view)
            if view.job is None:
                self._confirmed(key, overruled=True)
                await self._scalers_wait(key, view)
                self._forget(str(key))
                return
            planned = self._decide_pass(key, view)
            self._confirmed(key, overruled=not planned.acts)
        await planned.apply()

    def _confirmed(self, key: records.JobKey, overruled: bool) -> None:
        if overruled:
            log.info("%s: the API server's answer calls for no act where the records did (stale or forged)", key)
        if self._metrics is not None:
            self._metrics.confirmed("reconciler", overruled)

    def _decide_pass(self, key: records.JobKey, view: views.JobView) -> _Pass:
        """The pass the view calls for, by job family: whether it acts, and how to carry it out."""
        assert view.job is not None
        family = families.REGISTRY.resolve(key.kind, view.job)
        assert family is not None  # handle takes only keys of the registry's kinds
        return self._deciders[family.name](key, view)

    def _failed_validation(self, key: records.JobKey, view: views.JobView, exc: Exception) -> _Pass:
        """Nothing is ever created for a job that does not load, and the status worker reaches the
        same verdict from the job alone: the record is for the audit trail only (no act)."""
        return _Pass(False, lambda: self._announce(key, view, statuses.Verdict(
            f"{key.kind}FailedValidation", f"{key.kind} {key.name} failed validation because {exc}", "validation",
        )))

    def _decide_v1(self, key: records.JobKey, view: views.JobView) -> _Pass:
        assert view.job is not None
        try:
            job = jobs.load(view.job)
        except jobs.LoadError as exc:
            return self._failed_validation(key, view, exc)
        previous = self._decided_on.get(str(key))
        old = kubeflow_v1.previous_version(previous, view.job)
        now = _now()
        children = self._children(str(key), view)
        decision = reconciling.decide(job, children, now, self._settings.operator, old)
        return _Pass(kubeflow_v1.acts(decision), lambda: self._apply_v1(
            key, view, job, decision, children, now, previous if old is not None else None))

    async def _apply_v1(
        self, key: records.JobKey, view: views.JobView, job: jobs.Job, decision: reconciling.Decision,
        children: list[dict[str, Any]], now: dt.datetime, old: dict[str, Any] | None,
    ) -> None:
        job_key = str(key)
        self._decided_on[job_key] = view.job  # type: ignore[assignment]
        if kubeflow_v1.acts(decision):
            await self._pass(key, view, children, now, kubeflow_v1.plan(decision), old=old,
                             settings=dataclasses.asdict(self._settings.operator))
        client = await self._clusters.get(key.cluster)
        if decision.verdict is not None:
            # On the job first, then on the topic, then the deletes: whoever reads the
            # job next (a successor, the status worker) finishes what this pass starts.
            if not await self._record_failure(client, key, view, decision.verdict, now):
                return
            await self._announce(key, view, decision.verdict)
        else:
            recorded = statuses.recorded_verdict(job)
            if recorded is not None and not conditions.is_finished(job.status):
                # A predecessor recorded it and may have died before publishing it.
                await self._announce(key, view, recorded)
        if decision.plan_error is not None:
            await self._decide(key, view, "child_create_failed", reason="PlanError", message=decision.plan_error)
        await self._warn(client, job_key, job, decision.warnings, now)
        await self._create_all(client, key, view, decision.creates, job)
        for manifest in decision.updates:
            await self._update(client, key, view, manifest)
        if decision.restarts is not None and not await self._count_restarts(client, key, view, decision):
            return
        for ref in decision.deletes:
            await self._delete(client, key, view, ref, job)
        if decision.delete_job:
            await self._delete_job(client, key, view, job)
        self._arm_timer(job_key, self._next_look(job_key, decision.requeue_after))

    def _decide_mpi_v2(self, key: records.JobKey, view: views.JobView) -> _Pass:
        """An MPIJob written in kubeflow.org/v2beta1: mpi-operator's sync (spec Part A),
        decided by :func:`shared.core.mpi_v2.reconciling.decide`. This worker applies its
        children (creates, the launcher Job's status and updates, deletes); the status
        worker writes the job's status and Events from the same decision."""
        assert view.job is not None
        try:
            job = mpi_v2_family.load(view.job)
        except mpijobs.LoadError as exc:
            return self._failed_validation(key, view, exc)
        now = _now()
        children = self._children(str(key), view)
        decision = mpi_v2.decide(job, children, now, self._settings.operator, keygen.mpi_key_pair)
        return _Pass(not decision.empty, lambda: self._apply_mpi_v2(key, view, decision, children, now))

    async def _apply_mpi_v2(
        self, key: records.JobKey, view: views.JobView, decision: mpi_v2.Decision, children: list[dict[str, Any]],
        now: dt.datetime,
    ) -> None:
        if decision.empty:
            return
        await self._pass(key, view, children, now, mpi_v2_family.plan(decision),
                         settings=dataclasses.asdict(self._settings.operator))
        client = await self._clusters.get(key.cluster)
        await self._decide(key, view, "mpi_sync", reason="Sync", message="; ".join(decision.steps)[:4000],
                           detail={"steps": decision.steps, "error": decision.error})
        await self._create_all(client, key, view, decision.creates)
        versions: dict[tuple[str, str], str] = {}
        for manifest in decision.status_updates:
            rt = resources.for_manifest(manifest)
            name = manifest["metadata"]["name"]
            written = await client.request("PUT", rt.path(key.namespace, name, "status"), body=manifest,
                                           route=f"{rt.plural}/status")
            versions[(rt.kind, name)] = str((written.get("metadata") or {}).get("resourceVersion") or "")
        for manifest in decision.updates:
            rt = resources.for_manifest(manifest)
            version = versions.get((rt.kind, manifest["metadata"]["name"]))
            if version:
                manifest = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}
            await self._update(client, key, view, manifest)
        for ref in decision.deletes:
            await self._delete(client, key, view, ref)
        if decision.error is not None:
            # Upstream returns the error and is called again with back-off: a foreign
            # child in the way. Looked at again when anything of the job changes.
            log.warning("%s: %s", key, decision.error)
        self._arm_timer(str(key), self._next_look(str(key), None))

    def _decide_training_job(self, key: records.JobKey, view: views.JobView) -> _Pass:
        """An et-operator TrainingJob (spec Part B), decided by
        :func:`shared.core.elastic.reconciling.decide`. Its status is its state machine
        (the phase says which provisioning step comes next), so this worker writes it,
        with its scalers' statuses, after the children; the status worker leaves
        TrainingJobs alone. Commands the decision asks to run in the launcher (the
        hostfile rewrite, a scaler's script, the process probe) are run here and fed
        back until it asks for none; every step goes to the topic as a decision record."""
        assert view.job is not None
        now = _now()
        try:
            job = elastic.load_training_job(view.job)
        except elastic.LoadError as exc:
            error = exc
            return _Pass(_status_of(view.job).get("phase") != "Failed",
                         lambda: self._fail_unloadable_training_job(key, view, error, now))
        every = self._children(str(key), view)
        scalers, children = self._scalers_and_children(key, every)
        decision = et.decide(job, children, scalers, now, key_pair=keygen.training_job_key_pair,
                             settings=self._settings.elastic, executed=[])
        return _Pass(bool(decision.execs) or et_family.acts(decision), lambda: self._apply_training_job(
            key, view, job, decision, every, scalers, children, now))

    async def _apply_training_job(
        self, key: records.JobKey, view: views.JobView, job: elastic.TrainingJob, decision: et_decisions.Decision,
        every: list[dict[str, Any]], scalers: list[elastic.Scaler], children: list[dict[str, Any]], now: dt.datetime,
    ) -> None:
        client = await self._clusters.get(key.cluster)
        executed: list[et_decisions.ExecResult] = []
        while decision.execs and len(executed) < MAX_EXECS:
            for command in decision.execs:
                result = await self._exec(client, key, command)
                executed.append(result)
                await self._decide(key, view, "launcher_exec", child_kind="Pod", child_name=command.pod,
                                   reason=command.purpose, message=command.script[:4000],
                                   detail={"ok": result.ok, "output": result.output[:2000]})
                if not result.ok:
                    break
            decision = et.decide(job, children, scalers, now, key_pair=keygen.training_job_key_pair,
                                 settings=self._settings.elastic, executed=executed)
        if et_family.acts(decision):
            await self._pass(key, view, every, now, et_family.plan(decision),
                             settings=dataclasses.asdict(self._settings.elastic),
                             executed=[et_family.exec_result(r) for r in executed])
        await self._apply_training_job_decision(client, key, view, job, decision, now)

    def _scalers_and_children(
        self, key: records.JobKey, every: list[dict[str, Any]],
    ) -> tuple[list[elastic.Scaler], list[dict[str, Any]]]:
        scalers, children, problems = et_family.split_scalers(every)
        for problem in problems:
            log.warning("%s: %s", key, problem)
        return scalers, children

    async def _scalers_wait(self, key: records.JobKey, view: views.JobView) -> None:
        """Objects waiting for a job that does not exist (scalers naming a TrainingJob not
        there stay unbound, spec B.11): said once on the topic per object, for whoever reads
        the job's history."""
        family = families.REGISTRY.resolve(key.kind)
        if family is None:
            return
        waiting, problems = family.unbound(self._children(str(key), view), _now())
        for problem in problems:
            log.warning("%s: %s", key, problem)
        for step in waiting:
            await self._decide(key, view, "elastic_step", child_kind=step.kind, child_name=step.name,
                               reason=step.reason, message=step.message,
                               record_id=records.deterministic_id(str(key), step.uid, step.reason))

    async def _exec(
        self, client: clients.KubeClient, key: records.JobKey, command: et_decisions.Exec,
    ) -> et_decisions.ExecResult:
        """Run a command in the job's own namespace: the job key's, whatever the job object says."""
        return await run_in_launcher(client, dataclasses.replace(command, namespace=key.namespace),
                                     self._settings.exec_timeout)

    async def _apply_training_job_decision(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView, job: elastic.TrainingJob,
        decision: et_decisions.Decision, now: dt.datetime,
    ) -> None:
        """In the core's order: scaler ownerReferences, creates, deletes, scaler statuses,
        the job's status; then Events and the steps."""
        for update in decision.scalers:
            if update.owner_reference is not None:
                rt = resources.SCALER_TYPES[update.kind]
                written = await client.patch(rt, update.namespace, update.name,
                                             {"metadata": {"ownerReferences": [update.owner_reference]}})
                view.observe_child(written, deleted=False)
        await self._create_all(client, key, view, decision.creates)
        for manifest in decision.updates:
            await self._update(client, key, view, manifest)
        for ref in decision.deletes:
            await self._delete(client, key, view, ref)
        for update in decision.scalers:
            if update.status is None:
                continue
            rt = resources.SCALER_TYPES[update.kind]
            current = view.children.get((update.kind, update.name))
            if current is None:
                continue  # gone meanwhile
            body = {**current, "status": update.status.dump()}
            written = await client.request("PUT", rt.path(update.namespace, update.name, "status"), body=body,
                                           route=f"{rt.plural}/status")
            view.observe_child(written, deleted=False)
        if decision.status is not None and view.job is not None:
            rt = resources.TRAININGJOBS
            written = await client.request("PUT", rt.path(key.namespace, key.name, "status"),
                                           body={**view.job, "status": decision.status.dump()},
                                           route=f"{rt.plural}/status")
            view.replace_job(written)
        await self._events.record(client, job, decision.events, now)
        for step in decision.steps:
            await self._decide(key, view, "elastic_step", child_name=step.subject, reason=step.kind,
                               message=step.detail)
        self._arm_timer(str(key), self._next_look(str(key), decision.requeue_after))

    async def _fail_unloadable_training_job(
        self, key: records.JobKey, view: views.JobView, exc: elastic.LoadError, now: dt.datetime,
    ) -> None:
        """A TrainingJob whose fields do not load (a wrongly typed field): Failed, naming
        the field paths, once; nothing is created for it."""
        assert view.job is not None
        message = f"TrainingJob {key.name} failed validation because {exc}"
        status = _status_of(view.job)
        if status.get("phase") == "Failed":
            return
        client = await self._clusters.get(key.cluster)
        condition = {"type": "Failed", "status": "True", "reason": "TrainingJobFailedValidation",
                     "message": message, "lastUpdateTime": common.format_time(now), "lastTransitionTime": common.format_time(now)}
        body = {**view.job, "status": {**(status or {}), "phase": "Failed",
                                       "conditions": [*((status or {}).get("conditions") or []), condition]}}
        rt = resources.TRAININGJOBS
        written = await client.request("PUT", rt.path(key.namespace, key.name, "status"), body=body,
                                       route=f"{rt.plural}/status")
        view.replace_job(written)
        await self._announce(key, view, statuses.Verdict("TrainingJobFailedValidation", message, "validation"))

    async def _warn(
        self, client: clients.KubeClient, job_key: str, job: jobs.Job, warnings: list[statuses.Event],
        now: dt.datetime,
    ) -> None:
        """Record the decision's Warning Events, each once per job and process: a
        pass that repeats a decision (a re-delivered record) repeats no Event."""
        seen = self._warned.setdefault(job_key, set())
        for event in warnings:
            mark = (job.metadata.uid or "", event.reason, event.message)
            if mark not in seen:
                seen.add(mark)
                await self._events.record(client, job, [event], now)

    async def _record_failure(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView, verdict: statuses.Verdict,
        now: dt.datetime,
    ) -> bool:
        """Write ``verdict`` onto the job (:data:`statuses.FAILURE_ANNOTATION`), on
        the version it was decided on (a 409 makes settle read afresh and decide
        again). False if the job is gone."""
        annotation = {statuses.FAILURE_ANNOTATION: statuses.failure_annotation(verdict, now)}
        return await self._annotate(client, key, view, annotation)

    async def _announce(self, key: records.JobKey, view: views.JobView, verdict: statuses.Verdict) -> None:
        """Publish the verdict (``job_failed`` / ``job_validation_failed``) once per
        process, with an id fixed by (job uid, verdict): a successor's repeat is a
        duplicate readers drop. For the audit trail: no worker acts on the record."""
        uid = ((view.job or {}).get("metadata") or {}).get("uid")
        uid = str(uid) if uid is not None else None
        if self._announced.get(str(key)) == (uid, verdict.reason, verdict.message):
            return
        action = "job_validation_failed" if verdict.kind == "validation" else "job_failed"
        await self._decide(
            key, view, action, reason=verdict.reason, message=verdict.message,
            detail={"uid": uid, "kind": verdict.kind},
            record_id=records.deterministic_id(str(key), uid or "", action, verdict.reason, verdict.message),
        )
        self._announced[str(key)] = (uid, verdict.reason, verdict.message)

    def _decision(
        self, key: records.JobKey, action: str, *, child_kind: str | None = None,
        child_name: str | None = None, reason: str = "", message: str = "", detail: dict[str, Any] | None = None,
        resource_version: str = "", record_id: str | None = None,
    ) -> records.Decision:
        ids = {"id": record_id} if record_id is not None else {}
        detail = dict(detail or {})
        if action in plans.ACTS and str(key) in self._passes:
            detail.setdefault("pass", self._passes[str(key)])
        return records.Decision(
            **ids, key=str(key), action=action, child_kind=child_kind, child_name=child_name, reason=reason,
            message=message, detail=detail, resource_version=resource_version,
            source="reconciler", instance=self._settings.instance,
        )

    async def _decide(
        self, key: records.JobKey, view: views.JobView, action: str, **fields: Any,
    ) -> None:
        await self._publisher.publish(self._decision(key, action, **fields))

    async def _pass(
        self, key: records.JobKey, view: views.JobView, children: list[dict[str, Any]], now: dt.datetime,
        plan: dict[str, Any], *, old: dict[str, Any] | None = None, **extra: Any,
    ) -> None:
        """Before acting (write-ahead), the pass's plan and what it was decided from
        (:mod:`shared.core.basis`), so ``kto replay`` can decide it again and compare."""
        assert view.job is not None
        the_basis = basis.describe(view.job, children, now, logged=basis.logged_in(view), old=old, **extra)
        record = self._decision(key, plans.PASS_ACTION, reason="Reconcile", message=plans.summary(plan),
                                detail={"plan": plan, "basis": the_basis})
        await self._publisher.publish(record)
        self._passes[str(key)] = record.id

    async def _create_all(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView,
        manifests: list[dict[str, Any]], job: jobs.Job | None = None,
    ) -> None:
        """Decide, then act: every ``child_created`` decision is published first
        (write-ahead), with an id fixed by (job uid, child), so a worker that dies
        between the two leaves a log that still names the child, and its
        successor's repeat is deduplicated. Children other than pods and services
        (MPI's ConfigMap, ServiceAccount, Role, RoleBinding) are created first, in
        plan order, since pods refer to them; pods and services then go out
        concurrently (``create_concurrency`` at a time). A retriable failure is
        raised after the others are done, so the record is retried. For a
        kubeflow.org/v1 ``job``, upstream's Events say what was created (combined:
        ``Created pod: a, b``) and what failed."""
        if not manifests:
            return
        job_uid = str(((view.job or {}).get("metadata") or {}).get("uid", ""))
        planned = [(resources.for_manifest(m), m) for m in manifests]
        await self._publisher.publish_many(
            self._decision(
                key, "child_created", child_kind=rt.kind, child_name=m["metadata"]["name"],
                record_id=records.deterministic_id(str(key), job_uid, "child_created", rt.kind, m["metadata"]["name"]),
            )
            for rt, m in planned
        )
        first = [(rt, m) for rt, m in planned if rt.kind not in CONCURRENT_KINDS]
        rest = [(rt, m) for rt, m in planned if rt.kind in CONCURRENT_KINDS]
        said: list[statuses.Event | None] = []
        for rt, manifest in first:
            said.append(await self._create(client, key, view, rt, manifest, job))
        slots = asyncio.Semaphore(self._settings.create_concurrency)

        async def create(rt: resources.ResourceType, manifest: dict[str, Any]) -> statuses.Event | None:
            async with slots:
                return await self._create(client, key, view, rt, manifest, job)

        outcomes = await asyncio.gather(*(create(rt, m) for rt, m in rest), return_exceptions=True)
        said.extend(o for o in outcomes if not isinstance(o, BaseException))
        if job is not None:
            await self._events.record(client, job, [e for e in said if e is not None], _now())
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _create(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView,
        rt: resources.ResourceType, manifest: dict[str, Any], job: jobs.Job | None,
    ) -> statuses.Event | None:
        """Create one child; the Event upstream records for it (None: none, or it existed)."""
        name = manifest["metadata"]["name"]
        try:
            created = await client.create(rt, key.namespace, manifest)
        except clients.ApiError as exc:
            if exc.already_exists:
                view.observe_child({**manifest, "apiVersion": rt.api_version, "kind": rt.kind}, deleted=False)
                return None
            if exc.retriable or exc.conflict:
                raise
            await self._decide(
                key, view, "child_create_failed", child_kind=rt.kind, child_name=name,
                reason=exc.reason or "CreateFailed", message=exc.message,
            )
            return None if job is None else child_events.create_failed(job.KIND, rt.kind, name, exc.message or str(exc))
        created.setdefault("apiVersion", rt.api_version)
        created.setdefault("kind", rt.kind)
        self._deleted.pop((str(key), (rt.kind, name)), None)
        view.observe_child(created, deleted=False)
        return None if job is None else child_events.created(job.KIND, rt.kind, name)

    async def _update(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView, manifest: dict[str, Any],
    ) -> None:
        rt = resources.for_manifest(manifest)
        try:
            updated = await client.replace(rt, key.namespace, manifest)
        except clients.ApiError as exc:
            if exc.not_found:
                return  # gone meanwhile: its deletion is observed, and the next pass creates it
            # A 409 propagates: the child changed since the view saw it (the HPA
            # controller writes its HPA's status, and HPAs are not watched), so
            # settle reads the job afresh and decides again.
            raise
        updated.setdefault("apiVersion", rt.api_version)
        updated.setdefault("kind", rt.kind)
        view.observe_child(updated, deleted=False)
        await self._decide(key, view, "child_updated", child_kind=rt.kind, child_name=manifest["metadata"]["name"])

    async def _delete(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView, ref: reconciling.ChildRef,
        job: jobs.Job | None = None,
    ) -> None:
        rt = resources.for_manifest({"apiVersion": ref.api_version, "kind": ref.kind})
        try:
            await client.delete(rt, key.namespace, ref.name, uid=ref.uid)  # the key's namespace, never a record's
        except clients.ApiError as exc:
            if not exc.not_found:
                failed = None if job is None else child_events.delete_failed(job.KIND, ref.kind, exc.message or str(exc))
                if failed is not None and not (exc.conflict or exc.retriable):
                    await self._events.record(client, job, [failed], _now())  # type: ignore[arg-type]
                raise  # a conflict (another uid, or a stale view): settle reads afresh and decides again
        else:
            if job is not None:
                await self._events.record(client, job, child_events.deleted(job.KIND, ref.kind, ref.name, key.name), _now())
        self._deleted[(str(key), (ref.kind, ref.name))] = (ref.uid, asyncio.get_running_loop().time())
        action = "replica_restarted" if ref.reason == "restart" else "child_deleted"
        await self._decide(key, view, action, child_kind=ref.kind, child_name=ref.name, reason=ref.reason)

    async def _count_restarts(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView, decision: reconciling.Decision,
    ) -> bool:
        """Record on the job how many failed pods were deleted for restart, and which
        of them are still there, before deleting them; backoffLimit is checked against
        the count. A pass cut short after this write (a kill, a delete refused or
        failed) is made again and finds its pods counted, so a failure is counted once.
        Written on the version the count was computed from: a stale view (a worker
        killed after counting, its successor reading an older record) meets 409, and
        settle reads afresh and decides again, so a count never goes back. False if
        the job is gone."""
        assert decision.restarts is not None
        return await self._annotate(client, key, view, {
            reconciling.RESTARTS_ANNOTATION: str(decision.restarts),
            reconciling.COUNTED_ANNOTATION: ",".join(decision.counted)})

    async def _annotate(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView, annotations: dict[str, str],
    ) -> bool:
        """Merge ``annotations`` into the job on the resourceVersion the view holds (a 409
        makes settle read afresh and decide again); the answer replaces the view. False if
        the job is gone."""
        meta = (view.job or {}).get("metadata") or {}
        body: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if meta.get("resourceVersion"):
            body["metadata"]["resourceVersion"] = str(meta["resourceVersion"])
        try:
            patched = await client.patch(resources.JOB_TYPES[key.kind], key.namespace, key.name, body)
        except clients.ApiError as exc:
            if exc.not_found:
                return False
            raise
        patched.setdefault("apiVersion", jobs.API_VERSION)
        patched.setdefault("kind", key.kind)
        view.replace_job(patched)
        return True

    async def _delete_job(
        self, client: clients.KubeClient, key: records.JobKey, view: views.JobView, job: jobs.Job,
    ) -> None:
        uid = ((view.job or {}).get("metadata") or {}).get("uid")
        try:
            await client.delete(resources.JOB_TYPES[key.kind], key.namespace, key.name, uid=uid)
        except clients.ApiError as exc:
            if not (exc.not_found or exc.conflict):
                await self._events.record(client, job, [statuses.Event(
                    "Warning", "FailedDeleteJob" if key.kind in child_events.TTL_JOB_REASON_KINDS else "FailedDeletePod",
                    f"Error deleting: {exc.message or exc}")], _now())
                raise
        else:
            await self._events.record(client, job, [child_events.ttl_deleted(key.kind, key.name)], _now())
        await self._decide(
            key, view, "job_deleted_ttl", reason="TTLExpired",
            message=f"Deleted job: {key.name}",
        )

    def _arm_timer(self, job_key: str, after: float | None) -> None:
        """Publish a ``timer_fired`` record for the key when time alone may change the decision."""
        previous = self._timers.pop(job_key, None)
        if previous is not None:
            previous.cancel()
        if after is None or self._loop is None:
            return
        loop = self._loop

        def fire() -> None:
            self._timers.pop(job_key, None)
            record = records.Decision(
                key=job_key, action="timer_fired", reason="Requeue",
                message="a deadline or TTL is due", source="reconciler", instance=self._settings.instance,
            )
            task = loop.create_task(self._publisher.publish(record), name=f"timer {job_key}")
            task.add_done_callback(_log_failure)

        self._timers[job_key] = loop.call_later(max(after, 0.0) + 0.05, fire)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()


@dataclasses.dataclass(frozen=True)
class _Pass:
    """A reconcile pass decided: whether it acts on the cluster, and how it is carried out."""

    acts: bool
    apply: Callable[[], Awaitable[None]]


def _status_of(job: dict[str, Any]) -> dict[str, Any]:
    status = job.get("status")
    return status if isinstance(status, dict) else {}


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("timer record not published: %r", task.exception())
