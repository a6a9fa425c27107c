"""The status worker: records of a job key in, status writes and Events out.

In: records from ``kto.jobs`` in log order per job key: observations of the
job and its pods (``handle`` takes each into the key's view; ``settle`` acts
once per burst), and of the job's Kueue Workloads. A failure verdict is taken from the job itself (the
reconciler's ``kto.dev/failure`` annotation, as the API server returned it),
never from a Decision record, which anyone who can write to the topic could forge. Out: the job's
``/status`` written only when it changed and at most once per write interval
(optimistic concurrency, re-read and recompute on 409), Kubernetes Events for transitions, and a ``status_written``
Decision record, and the reason Kueue gives on a Workload for keeping the job waiting copied to an
Event on the job (``events.queue_events``: Kueue writes it to the Workload only). The status itself is computed by the job's family
(:data:`shared.core.families.REGISTRY`; ``shared.core.statuses.compute`` for the
kubeflow.org/v1 kinds, the sync's decision for MPIJob v2beta1), pure. This worker
is the only writer of the status of the families whose ``status_writer`` it is; a
TrainingJob's status is the reconciler's (docs/architecture.md says why).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from typing import Any

from opentelemetry import context as otel_context

from shared.api import common, jobs, kueue, objects
from shared import metrics
from shared.bus import producing, records
from shared.core import basis, conditions, families, outcomes, preparing, views
from shared.core import events as child_events
from shared.kube import clients, connecting, hydrating, recording, resources
from services.status.settings import StatusSettings

log = logging.getLogger(__name__)

CONFLICT_RETRY_AFTER = 0.5
"""Seconds before a status write that kept meeting 409 Conflict is tried again, read afresh."""


@dataclasses.dataclass
class _Pace:
    """When a key was first seen and last written (event-loop time)."""

    first_seen: float
    last_write: float | None = None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


_uid = objects.uid_of


class StatusAggregator:
    """Holds every key's view; ``handle`` is the KeyedConsumer handler."""

    def __init__(
        self, settings: StatusSettings, clusters: connecting.ClusterClients, publisher: producing.Publisher,
        service_metrics: metrics.ServiceMetrics,
    ) -> None:
        self._settings = settings
        self._clusters = clusters
        self._publisher = publisher
        self._metrics = service_metrics
        self._views: dict[str, views.JobView] = {}
        self._paces: dict[str, _Pace] = {}
        self._prepared: dict[int, preparing.Prepared] = {}
        """id(view) → its job prepared for computing (see ``_prepare``)."""
        self._events = recording.Recorder(settings.instance)
        self._released: dict[str, views.Released] = {}
        """Job key → (uid, version) of the finished job whose view was let go: a record of it as
        it was then (a resync) is passed over, not read afresh (``_release_if_finished``)."""
        self._said: dict[str, set[tuple[str, ...]]] = {}
        """Job key → marks of the pod and queue Events this process recorded (see ``_pod_events``)."""
        self._workloads: dict[str, dict[str, dict[str, Any]]] = {}
        """Job key → those of its Kueue Workloads whose last record says why the job waits, by name (see
        ``_queue_events``)."""

    def accepts(self, type_tag: str) -> bool:
        """Which records (by ``kto-type`` header) the status worker reads:
        observations of jobs, pods, (an MPIJob v2beta1's launcher) batch Jobs and Kueue's Workloads (of any
        job kind: only why the job waits is read of them), and the wake-ups of keys that waited for their
        cluster (:func:`shared.workers.waiting_for_clusters`)."""
        kind, _, what = type_tag.partition(":")
        if kind == "decision":
            return what == records.WAKE_ACTION
        return kind == "observation" and (
            what in STATUS_CHILD_KINDS or what == kueue.WORKLOAD_KIND or what in families.REGISTRY.status_kinds)

    async def handle(self, record: records.Record, parent: otel_context.Context) -> bool:
        """Take one record into the key's view (the KeyedConsumer handler); True if
        it may change the status."""
        key = records.JobKey.parse(record.key)
        if (skipped := self._settings.refusal(key.namespace)) is not None:
            log.warning("%s: record skipped: %s", record.key, skipped)
            return False
        if isinstance(record, records.Observation) and record.object_kind == kueue.WORKLOAD_KIND:
            return self._observe_workload(key, record)
        if key.kind not in families.REGISTRY.status_kinds:
            return False
        if isinstance(record, records.Decision):
            return records.is_wake(record, "status")
        job_kinds = families.REGISTRY.status_kinds
        if (record.object_kind in job_kinds and record.event != "DELETED" and record.key not in self._views
                and views.seen_before(record.object, self._released.get(record.key))):
            return False  # the finished job, released, as it was then (a resync): nothing to read or write
        if record.object_kind in job_kinds or record.object_kind in STATUS_CHILD_KINDS:
            # A record's word is in the view now: a terminal status is read back before it is written.
            self._view(record.key).read_back = False
        if not record.omitted and record.event != "DELETED" and (
                record.object_kind in job_kinds or record.object_kind in STATUS_CHILD_KINDS):
            self._view(record.key).note_logged(record.object, record.object_kind in job_kinds)
        if record.object_kind in job_kinds:
            view = self._view(record.key)
            view.observe_job(record.object, record.event == "DELETED")
            if record.omitted and record.event != "DELETED":
                view.hydrated = False  # too large or deep for a record: read it from the API server
        elif record.object_kind in STATUS_CHILD_KINDS:
            view = self._view(record.key)
            # Scheduling, conditions and IPs do not change the status: nothing to settle.
            return view.observe_child(record.object, record.event == "DELETED") or not view.hydrated
        else:
            return False
        return True

    def _view(self, job_key: str) -> views.JobView:
        view = self._views.get(job_key)
        if view is None:
            view = self._views[job_key] = views.JobView()
            self._paces[job_key] = _Pace(first_seen=self._clock())
        return view

    async def settle(self, job_key: str, parent: otel_context.Context, flush: bool) -> float | None:
        """Write the key's status if it changed, at most once per ``write_interval``
        (the first write too waits that long after the key was first seen), so a
        burst of pod transitions becomes one write. Returns the seconds until a
        held-back write is due; ``flush`` writes at once."""
        view = self._views.get(job_key)
        key = records.JobKey.parse(job_key)
        if view is None:
            if job_key in self._workloads and self._settings.record_events:
                # Why Kueue keeps the job waiting, whoever writes its status.
                await self._queue_events(await self._clusters.get(key.cluster), key)
            return None
        client = await self._clusters.get(key.cluster)
        if view.reread or view.unconfirmed(outcomes.FAILURE_ANNOTATION):
            # A record older than the view, or one bringing a failure verdict the API
            # server has not shown this worker: the API server settles it.
            view.hydrated = False
        if not view.hydrated:
            await self._hydrate(client, key, view)
        if view.job is None:
            self.forget({job_key})
            return None
        if self._settings.record_events:
            await self._pod_events(client, job_key, view)
            await self._queue_events(client, key)
        pace = self._paces[job_key]
        due = (pace.last_write if pace.last_write is not None else pace.first_seen) + self._settings.write_interval
        wait = due - self._clock()
        if wait > 0 and not flush:
            computed = self._compute(view)
            if computed is None or not outcomes.differs(computed[0].status, computed[1].status):
                self._metrics.status_write_skipped(key.kind)
                self._release_if_finished(job_key, view)
                return None
            return wait
        try:
            written = await self._write(client, key, view)
        except clients.ApiError as exc:
            if not exc.conflict:
                raise
            # Optimistic concurrency at work, not an error: read afresh, try again
            # shortly (the records stay held), never dead-letter.
            log.info("%s: %s; reading it afresh and trying again", job_key, exc)
            view.hydrated = False
            return CONFLICT_RETRY_AFTER
        if written:
            pace.last_write = self._clock()
        self._release_if_finished(job_key, view)
        return None

    def _release_if_finished(self, job_key: str, view: views.JobView) -> None:
        """Let go of the view of a job whose stored status says it finished and needs no write
        (docs/architecture.md, "Views of finished jobs"). The marks of the pod Events said stay
        (the tombstone), so a later record, taken into a view read afresh from the API server,
        repeats none."""
        if view.job is None or not views.finished(view.job) or view.unconfirmed(outcomes.FAILURE_ANNOTATION):
            return
        computed = self._compute(view)
        if computed is not None and outcomes.differs(computed[0].status, computed[1].status):
            return
        self._views.pop(job_key, None)
        self._paces.pop(job_key, None)
        self._prepared.pop(id(view), None)
        mark = views.released_mark(view.job)
        if mark is not None:
            self._released[job_key] = mark

    async def _hydrate(self, client: clients.KubeClient, key: records.JobKey, view: views.JobView) -> None:
        """The job and its pods as the API server has them, into the view (a job the API server
        does not have leaves the view without one, whatever a record said: the key is forgotten)."""
        held = set(view.children)
        job, pods = await hydrating.hydrate(client, key.kind, key.namespace, key.name, pods_only=True)
        view.replace_job(job)
        if job is not None:
            view.replace_children(pods, held)
            view.read_back = True
        view.hydrated = True

    async def _pod_events(self, client: clients.KubeClient, job_key: str, view: views.JobView) -> None:
        """``ExitedWithCode`` and the abnormal-pod warnings (spec §9.2) of the pods of a job
        its family prepares (kubeflow.org/v1), each once per pod incarnation and restart
        (upstream repeats them on every reconcile), combined into one Event per reason."""
        assert view.job is not None
        prepared = self._prepare(view)
        if prepared is None:
            return
        job = prepared.job
        pods = [p for p in view.children.values() if p.get("kind", "Pod") == "Pod"]
        said = self._said.setdefault(job_key, set())
        new = [(mark, event) for mark, event in child_events.pod_events(pods, job.DEFAULT_CONTAINER) if mark not in said]
        if not new:
            return
        said.update(mark for mark, _ in new)
        await self._events.record(client, job, [event for _, event in new], _now())

    def _observe_workload(self, key: records.JobKey, record: records.Observation) -> bool:
        """A Workload of a job kto serves (Kueue's, keyed by the watcher under the job that controls it)
        into the key's waiting Workloads; True when it says why the job waits (``settle`` says it)."""
        if families.REGISTRY.resolve(key.kind) is None:
            return False
        workloads = self._workloads.setdefault(record.key, {})
        name = objects.name_of(record.object)
        if record.event == "DELETED" or record.omitted or not child_events.queue_events([record.object]):
            workloads.pop(name, None)  # only what says why the job waits is kept
            if not workloads:
                self._workloads.pop(record.key, None)
                if key.kind not in families.REGISTRY.status_kinds and record.event == "DELETED":
                    self._said.pop(record.key, None)  # no view keeps the key: its marks go with its Workload
            return False
        workloads[name] = record.object
        return True

    async def _queue_events(self, client: clients.KubeClient, key: records.JobKey) -> None:
        """Why Kueue keeps the job waiting, as its Workloads say it, each reason and message once per
        Workload (``events.queue_events``), on the job: Kueue writes it to the Workload alone, where
        the job's user does not look. The job is the one the API server has, and the Event is said
        only when a Workload's controller ownerReference names it (its uid): a record's word alone
        names no object."""
        job_key = str(key)
        said = self._said.setdefault(job_key, set())
        workloads = list(self._workloads.get(job_key, {}).values())
        new = [(mark, event, workload) for workload in workloads
               for mark, event in child_events.queue_events([workload]) if mark not in said]
        if not new:
            return
        try:
            job = await client.get(resources.JOB_TYPES[key.kind], key.namespace, key.name)
        except clients.ApiError as exc:  # best effort, as every Event: said at a later record
            if not exc.not_found:
                log.warning("%s: Kueue's reason not said on the job: %s", key, exc)
            return
        family = families.REGISTRY.resolve(key.kind, job)
        uid = objects.uid_of(job)
        for mark, event, workload in new:
            owner = next((ref for ref in objects.owner_refs_of(workload)
                          if ref.get("controller") and uid and ref.get("uid") == uid), None)
            if owner is None or family is None:
                continue
            subject = recording.Subject(
                key.kind, family.controllers.get(key.kind, ""), str(owner.get("apiVersion") or ""),
                common.ObjectMeta(name=key.name, namespace=key.namespace, uid=uid,
                                  resource_version=objects.resource_version_of(job) or None))
            said.add(mark)
            await self._events.record(client, subject, [event], _now())

    def forget(self, job_keys: set[str]) -> None:
        """Drop what is kept for keys that are gone or whose partitions went to
        another worker (hydrated afresh if they come back)."""
        for job_key in job_keys:
            self._said.pop(job_key, None)
            self._workloads.pop(job_key, None)
            self._released.pop(job_key, None)
            view = self._views.pop(job_key, None)
            self._paces.pop(job_key, None)
            if view is not None:
                self._prepared.pop(id(view), None)

    def _clock(self) -> float:
        return asyncio.get_running_loop().time()

    def _prepare(self, view: views.JobView) -> preparing.Prepared | None:
        """The job loaded, validated and defaulted, once per resourceVersion of it; None when
        its family prepares nothing ahead."""
        assert view.job is not None
        family = families.REGISTRY.resolve(str(view.job.get("kind") or ""), view.job)
        if family is None:
            return None
        version = objects.resource_version_of(view.job)
        cached = self._prepared.get(id(view))
        if cached is not None and version and cached.version == version and cached.source is view.job:
            return cached
        prepared: preparing.Prepared | None = family.prepare(view.job)
        if prepared is not None:
            self._prepared[id(view)] = prepared
        return prepared

    def _compute(
        self, view: views.JobView, now: dt.datetime | None = None,
    ) -> tuple[Any, outcomes.Outcome] | None:
        assert view.job is not None
        # The job as it is now failing validation comes first (it cannot be defaulted);
        # then the verdict the reconciler recorded on it, once the API server showed it.
        unconfirmed = view.unconfirmed(outcomes.FAILURE_ANNOTATION)
        return families.REGISTRY.status_of(view.job, list(view.children.values()), now or _now(), unconfirmed=unconfirmed,
                                           prepared=self._prepare(view))

    async def _write(self, client: clients.KubeClient, key: records.JobKey, view: views.JobView) -> bool:
        """Write the status if it differs from the stored one; True if written."""
        for _ in range(self._settings.conflict_attempts):
            now = _now()
            computed = self._compute(view, now)
            if computed is None:
                return False
            job, outcome = computed
            if not outcomes.differs(job.status, outcome.status):
                self._metrics.status_write_skipped(key.kind)
                return False
            if _newly_finished(job.status, outcome.status) and not view.read_back:
                # A terminal verdict rests on the job and the pods as the API server has them,
                # never on records alone (a forged pod phase would end a running job).
                await self._hydrate(client, key, view)
                again = None if view.job is None else self._compute(view, now)
                overruled = again is None or not _newly_finished(again[0].status, again[1].status)
                self._metrics.confirmed("status", overruled)
                if overruled:
                    log.info("%s: the API server's job and pods do not end the job where the records did "
                             "(stale or forged)", key)
                if view.job is None:
                    return False
                continue
            body = dict(view.job or {})
            body["status"] = outcome.status.dump()
            try:
                job_type = resources.JOB_TYPES[key.kind]
                written = await client.request(
                    "PUT", job_type.path(key.namespace, key.name, "status"), body=body,
                    route=f"{job_type.plural}/status",
                )
            except clients.ApiError as exc:
                if exc.not_found:
                    return False
                if not exc.conflict:
                    raise
                fresh, _ = await hydrating.hydrate(client, key.kind, key.namespace, key.name, pods_only=True)
                if fresh is None:
                    return False
                view.replace_job(fresh)
                continue
            written.setdefault("apiVersion", jobs.API_VERSION)
            written.setdefault("kind", key.kind)
            self._metrics.status_written(str(key), job.status, outcome.status, kueue.queue_of(view.job))
            the_basis = basis.describe(view.job or body, list(view.children.values()), now, logged=basis.logged_in(view),
                                       unconfirmed=view.unconfirmed(outcomes.FAILURE_ANNOTATION))
            view.replace_job(written)
            await self._announce(client, key, job, outcome, written, the_basis)
            return True
        raise clients.ApiError(409, "Conflict", f"status of {key}: still conflicting after retries")

    async def _announce(
        self, client: clients.KubeClient, key: records.JobKey, job: Any,
        outcome: outcomes.Outcome,
        written: dict[str, Any],
        the_basis: dict[str, Any],
    ) -> None:
        latest = (outcome.status.conditions or [common.JobCondition(type="", status="Unknown")])[-1]
        await self._publisher.publish(
            records.Decision(
                key=str(key), action="status_written", reason=latest.reason or "", message=latest.message or "",
                resource_version=objects.resource_version_of(written),
                detail={**outcomes.status_detail(outcome), "basis": the_basis},
                source="status", instance=self._settings.instance,
            )
        )
        if not self._settings.record_events:
            return
        await self._events.record(client, job, outcome.events, _now())

    def close(self) -> None:
        """Nothing to release: held-back writes are flushed by the consumer on stop."""



def _newly_finished(before: Any, after: Any) -> bool:
    """Whether ``after`` says Succeeded or Failed where ``before`` did not."""
    return conditions.is_finished(after) and not conditions.is_finished(before)


STATUS_CHILD_KINDS = frozenset({"Pod", "Job"})
"""Children a status is computed from: pods, and an MPIJob v2beta1's launcher ``batch/v1`` Job."""
