"""The reconciler worker: records of a job key in, API writes and decisions out.

In: records from ``kto.jobs`` (one job key at a time, in log order, via the
bus's KeyedConsumer: ``handle`` takes each record into the key's memory,
``settle`` reconciles once per burst). Out: creates, updates and deletes on the
job's cluster, and a Decision record on ``kto.jobs`` for each of them. The
decision itself is the family's pure ``decide`` (the family is found through
:data:`shared.core.families.REGISTRY`); this module keeps each key's memory
(:mod:`services.reconciler.memories`), hydrates keys it has not seen, confirms a
pass that would act on a record's word against the API server, hands the pass to
the applier (:mod:`services.reconciler.applying`) and arms a timer for deadlines.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

from opentelemetry import context as otel_context

from shared import keygen, metrics
from shared.api import kueue, objects
from shared.bus import producing, records
from shared.core import effects, families, outcomes, views
from shared.kube import clients, connecting, hydrating, resources
from services.reconciler import applying, memories
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
RECONCILED_KINDS = families.REGISTRY.kinds
"""Job kinds of the keys this worker reconciles: every family's."""



def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Reconciler:
    """Holds every key's memory; ``handle`` is the KeyedConsumer handler."""

    def __init__(
        self, settings: ReconcilerSettings, clusters: connecting.ClusterClients, publisher: producing.Publisher,
        service_metrics: metrics.ServiceMetrics | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = service_metrics
        self._clusters = clusters
        self._publisher = publisher
        self._memories = memories.Memories(delete_grace=settings.delete_grace, confirm_after=DELETE_CONFIRM_AFTER)
        self._applier = applying.Applier(settings, clusters, publisher, self._look_again)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None
        operator = settings.operator
        self._podgroups = (
            None if not operator.gang_scheduling
            else resources.VOLCANO_PODGROUPS if operator.volcano else resources.PLUGINS_PODGROUPS
        )
        """The PodGroup kind hydrated in gang mode."""

    def accepts(self, type_tag: str) -> bool:
        """Which records (by ``kto-type`` header) the reconciler reads: every
        observation, its own timers and checks; not the other decisions."""
        kind, _, what = type_tag.partition(":")
        return kind == "observation" or what in WANTED_DECISIONS

    def memory(self, job_key: str) -> memories.KeyMemory | None:
        """What this worker keeps of a key (None: nothing, it was never seen or is forgotten)."""
        return self._memories.get(job_key)

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
        if isinstance(record, records.Observation) and record.object_kind == resources.WORKLOADS.kind:
            return False  # Kueue's, for kto history: no decision of kto's reads a Workload
        memory = self._memories.of(record.key)
        # The record is of the job itself only when its kind is the key's: a JobSet is a job of its
        # own family and, under its TrainJob's key, a child.
        is_job = isinstance(record, records.Observation) and record.object_kind == key.kind
        if (memory.released is not None and isinstance(record, records.Observation) and is_job
                and record.event != "DELETED" and views.seen_before(record.object, memory.released)):
            return False  # the finished job, released, as it was then (a resync): nothing to read or decide
        view = memory.view
        if isinstance(record, records.Decision):
            if record.action == "job_check_due":
                memory.checking = False
                view.hydrated = False  # read the job and its children afresh
                return True
            return record.action == "timer_fired" or records.is_wake(record, "reconciler")
        own_delete = record.event == "DELETED" and memory.expected.observed_deleted(
            views.child_key(record.object), record.object)
        # The view now holds a record's word: a pass that would act reads the API server first.
        view.read_back = False
        if not record.omitted and record.event != "DELETED":
            view.note_logged(record.object, is_job)
        if is_job:
            if self._metrics is not None:  # the queue its restarts are counted in
                self._metrics.job_queue(record.key, kueue.queue_of(record.object), gone=record.event == "DELETED")
            memory.job_seen = self._loop.time()
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

    async def settle(self, job_key: str, parent: otel_context.Context, flush: bool) -> float | None:
        """Reconcile the key once for every record taken in since its last settle.
        A 409 Conflict is the API server saying the view was stale: the key is read
        afresh and settled again shortly (its records stay held), never dead-lettered."""
        memory = self._memories.get(job_key)
        try:
            await self._settle(job_key)
        except clients.ApiError as exc:
            if not exc.conflict or memory is None:
                raise
            log.info("%s: %s; reading it afresh and trying again", job_key, exc)
            memory.view.hydrated = False
            return CONFLICT_RETRY_AFTER
        return None

    async def _settle(self, job_key: str) -> None:
        key = records.JobKey.parse(job_key)
        memory = self._memories.get(job_key)
        if memory is None:
            return
        view = memory.view
        if view.reread or view.unconfirmed(outcomes.FAILURE_ANNOTATION):
            # A record older than the view, or one bringing a failure verdict the API
            # server has not shown this worker: the API server settles it.
            view.hydrated = False
        if view.gone:
            self._memories.forget(job_key)  # its DELETED observation was the last word
            return
        if memory.expected.overdue(asyncio.get_running_loop().time()):
            view.hydrated = False  # the API server says whether they are gone
        vanished, view.vanished = view.vanished, False
        if vanished:
            view.hydrated = False  # is the job going too? The API server says, before anything is made again
        if not view.hydrated:
            known = view.job
            await self._hydrate(key, memory)
            if view.job is None and known is not None and not vanished:
                await self._deleted_unobserved(key, known)
        if view.job is None:
            await self._unbound_wait(key, memory)
            self._memories.forget(job_key)
            return
        await self._reconcile(key, memory)

    async def _deleted_unobserved(self, key: records.JobKey, job: dict[str, Any]) -> None:
        """The view held a job that the API server no longer has, and no DELETED
        observation came (it was deleted while no watcher ran): say so on the
        topic, as an observation of this worker, so every consumer drops the job
        and the audit trail ends with its deletion."""
        log.info("%s is gone from the API server without a DELETED observation; publishing one", key)
        await self._publisher.publish(records.Observation(
            id=records.deterministic_id("reconciler", str(key), objects.uid_of(job) or "", "DELETED"),
            key=str(key), resource_version=objects.resource_version_of(job),
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
            for job_key in self._memories.due_for_check(now, self._settings.check_after):
                memory = self._memories.of(job_key)
                memory.checking = True
                memory.job_seen = now
                try:
                    await self._publisher.publish(self._applier.decision(
                        records.JobKey.parse(job_key), "job_check_due", reason="NotObservedRecently",
                        message=f"no observation of the job for {self._settings.check_after:g}s; reading it afresh",
                    ))
                except Exception:
                    memory.checking = False
                    log.exception("job_check_due for %s not published", job_key)

    async def _hydrate(self, key: records.JobKey, memory: memories.KeyMemory) -> None:
        client = await self._clusters.get(key.cluster)
        view = memory.view
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
            memory.job_seen = asyncio.get_running_loop().time()
        view.hydrated = True

    def forget(self, job_keys: set[str]) -> None:
        """Drop the memory of keys whose partitions went to another worker: if they
        come back, they are hydrated afresh instead of trusted stale."""
        for job_key in job_keys:
            self._memories.forget(job_key)

    def _seen(self, memory: memories.KeyMemory, now: dt.datetime) -> applying.Seen:
        """Observed children, with the ones this worker deleted given a ``deletionTimestamp``."""
        children, going = memory.expected.seen_as(
            memory.view.children.items(), asyncio.get_running_loop().time(), now)
        return applying.Seen(children, frozenset(going))

    async def _reconcile(self, key: records.JobKey, memory: memories.KeyMemory) -> None:
        """Decide, and act only on what the API server says: a pass that would act on a view
        holding anything taken from a record (which anyone able to write the topic could
        have forged) reads the job and its children from the API server first and decides
        again; the second decision is the one carried out (docs/security.md)."""
        view = memory.view
        planned = self._decide_pass(key, memory)
        if _acts(planned) and not view.read_back:
            await self._hydrate(key, memory)
            if view.job is None:
                self._confirmed(key, overruled=True)
                await self._unbound_wait(key, memory)
                self._memories.forget(str(key))
                return
            planned = self._decide_pass(key, memory)
            self._confirmed(key, overruled=not _acts(planned))
        await self._applier.apply(key, memory, planned)
        if not _acts(planned) and memory.timer is None and views.finished(view.job):
            # Finished, nothing to do and no time to wait for (a TTL arms the timer): the view
            # is released; a later record is read into a fresh one (docs/architecture.md).
            memory.release()

    def _confirmed(self, key: records.JobKey, overruled: bool) -> None:
        if overruled:
            log.info("%s: the API server's answer calls for no act where the records did (stale or forged)", key)
        if self._metrics is not None:
            self._metrics.confirmed("reconciler", overruled)

    def _decide_pass(self, key: records.JobKey, memory: memories.KeyMemory) -> applying.Decided:
        """The pass the view calls for, decided by the job's family."""
        document = memory.view.job
        assert document is not None
        family = families.REGISTRY.resolve(key.kind, document)
        assert family is not None  # handle takes only keys of the registry's kinds
        now = _now()
        seen = self._seen(memory, now)
        context = effects.Context(now, (self._settings.operator, self._settings.elastic), keygen.MAKERS,
                                  previous=memory.decided_on)
        return applying.Decided(family, document, seen, context, family.decide(document, seen.children, context))

    async def _unbound_wait(self, key: records.JobKey, memory: memories.KeyMemory) -> None:
        """Objects waiting for a job that does not exist (scalers naming a TrainingJob not
        there stay unbound, spec B.11): said once on the topic per object, for whoever reads
        the job's history."""
        family = families.REGISTRY.resolve(key.kind)
        if family is None:
            return
        now = _now()
        waiting, problems = family.unbound(self._seen(memory, now).children, now)
        for problem in problems:
            log.warning("%s: %s", key, problem)
        for step in waiting:
            await self._applier.say(key, memory, "step", child_kind=step.kind, child_name=step.name,
                                    reason=step.reason, message=step.message,
                                    record_id=records.deterministic_id(str(key), step.uid, step.reason))

    def _look_again(self, key: records.JobKey, memory: memories.KeyMemory, requeue_after: float | None) -> None:
        """Arm the key's timer for the decision's requeue, or sooner when a delete waits for confirmation."""
        self._arm_timer(str(key), memory, memory.expected.next_look(asyncio.get_running_loop().time(), requeue_after))

    def _arm_timer(self, job_key: str, memory: memories.KeyMemory, after: float | None) -> None:
        """Publish a ``timer_fired`` record for the key when time alone may change the decision."""
        memory.drop()
        if after is None or self._loop is None:
            return
        loop = self._loop

        def fire() -> None:
            memory.timer = None
            record = records.Decision(
                key=job_key, action="timer_fired", reason="Requeue",
                message="a deadline or TTL is due", source="reconciler", instance=self._settings.instance,
            )
            task = loop.create_task(self._publisher.publish(record), name=f"timer {job_key}")
            task.add_done_callback(_log_failure)

        memory.timer = loop.call_later(max(after, 0.0) + 0.05, fire)

    def close(self) -> None:
        self._memories.close()
        if self._sweeper is not None:
            self._sweeper.cancel()


def _acts(planned: applying.Decided) -> bool:
    """Whether a decided pass would act on the cluster (a command to run is an act)."""
    return planned.effects.acts or bool(planned.effects.execs)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("timer record not published: %r", task.exception())
