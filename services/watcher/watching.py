"""List+watch of one cluster's jobs and their children, published as observations.

In: a :class:`~shared.kube.clients.KubeClient` for the cluster, a
:class:`~shared.bus.producing.Publisher`, :class:`~services.watcher.settings.WatcherSettings`.
Out: one :class:`~shared.bus.records.Observation` on the jobs topic per change of
a job (every kind of :data:`WATCHED_TYPES`' job types: the six kubeflow.org/v1 kinds,
MPIJob v2beta1, et-operator's TrainingJob), of a child that carries the job-name
label (:data:`CHILD_TYPES`: pods, Services, ConfigMaps, ServiceAccounts, Roles,
RoleBindings, an MPIJob v2beta1's launcher Job), or of an object tied to a job
otherwise (:data:`UNLABELLED_TYPES`: the HPA and PodGroups it owns, the scalers
naming it), keyed by the job key. Never a Secret. Each object is published, and kept in
the :class:`Inventory`, as its kind's projection (:mod:`shared.api.projections`): a pod
without its containers' specs.

Per resource type: list, then watch from the list's resourceVersion; BOOKMARKs
move the resourceVersion on; a broken connection resumes from the last
resourceVersion with backoff; 410 Gone relists and publishes the differences
against what was last published (ADDED / MODIFIED for new or changed
resourceVersions, DELETED with the last known object for objects that
vanished meanwhile). Every :meth:`Watcher.run` starts with a full list that
also publishes unchanged objects as RESYNCED, so a new leader, or a watcher
whose broker came back, leaves nothing unsaid.

Sends are pipelined: a watch stream hands each record to the producer (in
order) and goes on; a confirming task checks the acknowledgements in order,
up to :data:`MAX_UNCONFIRMED` behind. A record the broker refuses for good is
taken back out of the inventory and ends the run, so the relist says it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import typing
from collections.abc import Iterator
from typing import Any

import tenacity
from opentelemetry import context as otel_context
from opentelemetry import trace

from services.watcher import mapping
from services.watcher.settings import WatcherSettings
from shared import metrics, tracing
from shared.api import jobsets, kueue, projections
from shared.bus import events, producing, records
from shared.kube import clients, resources

log = logging.getLogger("kto.watcher")
_tracer = trace.get_tracer("kto.watcher")

TRACEPARENT_ANNOTATION = "kto.dev/traceparent"
"""A job annotation holding a W3C traceparent: the parent of the job's watch spans."""

CHILD_SELECTOR = mapping.LABEL_JOB_NAME
"""Server-side label selector of the children watched: the job-name label exists."""

OPTIONAL_TYPES: tuple[resources.ResourceType, ...] = (
    resources.VOLCANO_PODGROUPS, resources.PLUGINS_PODGROUPS,
    resources.TRAININGJOBS, *resources.SCALER_TYPES.values(), resources.JOBSETS, resources.TRAINJOBS,
    resources.WORKLOADS,
)
"""Children of gang-scheduled jobs, served only where Volcano or scheduler-plugins
installed their CRDs, et-operator's kinds, served where its CRDs are, and Kueue's Workloads,
served where Kueue is installed (also when it is installed later): a 404
on listing one is not an error (logged once, looked at again every
``discovery_interval``). PodGroups carry no job-name label
(upstream sets none): they are listed unselected and mapped to their job by the
controller ownerReference."""

UNLABELLED_TYPES: tuple[resources.ResourceType, ...] = (
    resources.HPAS, resources.VOLCANO_PODGROUPS, resources.PLUGINS_PODGROUPS, *resources.SCALER_TYPES.values(),
    resources.BATCH_JOBS, resources.WORKLOADS,
)
"""Children upstream gives no job-name label (the elastic HPA, the PodGroups) and the
scalers of TrainingJobs: listed unselected and mapped to their job by the controller
ownerReference (a ScaleIn / ScaleOut by the job it names). The HPA is
watched so that its deletion (on suspend) and edits made to it are seen. Batch Jobs are
unselected too: an MPIJob v2beta1's launcher carries the job-name label, a JobSet's Jobs
carry JobSet's labels only; both are mapped by their controller. So is a Kueue Workload: Kueue makes
the job its controller (a MultiKueue worker's Workload once the job's copy there adopts it)."""


@dataclasses.dataclass(frozen=True)
class Selected(resources.ResourceType):
    """A type watched a second time, under a label selector and an inventory slot of its own."""

    selector: str = ""


JOBSET_PODS = Selected("", "v1", "pods", "Pod", selector=jobsets.JOBSET_NAME_LABEL)
"""A JobSet's pods (jobset-name label; its Jobs are their controller), keyed by the JobSet."""

CHILD_TYPES: tuple[resources.ResourceType, ...] = (
    resources.PODS, resources.SERVICES, resources.CONFIGMAPS,
    resources.SERVICEACCOUNTS, resources.ROLES, resources.ROLEBINDINGS,
    *UNLABELLED_TYPES,
    JOBSET_PODS,
)
"""Kinds of children watched (label-selected, except :data:`UNLABELLED_TYPES`). Not Secrets:
RBAC cannot grant a list or watch of the job-labelled ones only, and no decision waits for a
Secret to change; the reconciler reads the SSH Secret it made by name
(``shared.kube.hydrating``), so the watcher may not read any Secret."""

WATCHED_TYPES: tuple[resources.ResourceType, ...] = (*resources.JOB_TYPES.values(), *CHILD_TYPES)
"""Everything one watcher lists and watches."""

SOURCE = "watcher"
"""The ``source`` of every record the watcher publishes."""


def _slot_of(rt: resources.ResourceType) -> str:
    """The inventory slot of a watched type (a :class:`Selected` type's its own)."""
    if isinstance(rt, Selected):
        return f"{rt.kind}@{rt.selector}"
    return slot(rt.kind, rt.api_version)


def slot(kind: str, api_version: str = "") -> str:
    """The inventory slot of a kind: the kind, except for the two PodGroup kinds,
    which share a kind name but not a group (``PodGroup.<group>``)."""
    if kind != "PodGroup":
        return kind
    return f"{kind}.{api_version.partition('/')[0]}"


def _type_name(rt: resources.ResourceType, namespace: str | None = None) -> str:
    name = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    if isinstance(rt, Selected):
        name += f" ({rt.selector})"
    return name if namespace is None else f"{name} in {namespace}"


def selector_for(rt: resources.ResourceType) -> str | None:
    """The server-side label selector of a watched type (None for the job kinds and PodGroups)."""
    if isinstance(rt, Selected):
        return rt.selector
    return None if rt.kind in resources.JOB_TYPES or rt in UNLABELLED_TYPES else CHILD_SELECTOR


def workload_trace(namespace: str, workload: str) -> otel_context.Context:
    """The trace of every watch span of a job Kueue manages, derived from its namespace and the name of
    its Workload (:func:`shared.api.kueue.workload_of`). Under MultiKueue the manager's job, the worker's
    copy and both Workloads share that name, so what kto does with the job in every cluster is one trace."""
    return tracing.derived(f"{kueue.API_VERSION}/{kueue.WORKLOAD_KIND}/{namespace}/{workload}")


@dataclasses.dataclass(frozen=True)
class Known:
    """An object as last published: its kind's projection (:mod:`shared.api.projections`), packed."""

    uid: str
    resource_version: str
    packed: projections.Packed
    key: records.JobKey | None

    @classmethod
    def of(cls, uid: str, resource_version: str, obj: dict[str, Any], key: records.JobKey | None) -> Known:
        return cls(uid, resource_version, projections.pack(obj), key)

    @property
    def object(self) -> dict[str, Any]:
        """The object as published (a new copy on every read)."""
        return projections.unpack(self.packed)


ObjectId = tuple[str, str]
"""(namespace, name)."""


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _ident(obj: dict[str, Any]) -> ObjectId:
    meta = _meta(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Inventory:
    """What the watcher last published, per kind: the baseline a relist is diffed against.

    It outlives one :meth:`Watcher.run`, so a watcher that stops (lost
    leadership, broker away) and runs again publishes what changed meanwhile,
    deletions included.
    """

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[ObjectId, Known]] = {}

    def of(self, kind: str) -> dict[ObjectId, Known]:
        return self._by_kind.setdefault(kind, {})

    def jobs(self) -> Iterator[Known]:
        """Every live job known, kind by kind."""
        for kind in resources.JOB_TYPES:
            yield from list(self.of(kind).values())

    def job(self, key: records.JobKey) -> Known | None:
        return self._by_kind.get(key.kind, {}).get((key.namespace, key.name))

    def shared_key(self, key: records.JobKey | None) -> records.JobKey | None:
        """``key``, or the equal one its job's entry already holds: a job's children share one
        key object instead of one each (a key is a pydantic model of about half a kilobyte)."""
        if key is None:
            return None
        job = self.job(key)
        return job.key if job is not None and job.key == key else key


class BrokerOutage:
    """A bus hook that notices the broker being away and then back.

    ``recovered`` is set at the first successful send after a failed one: the
    watcher then relists and republishes everything (records sent while the
    broker was away may be lost, e.g. an in-memory broker that restarted).
    """

    def __init__(self) -> None:
        self._down = False
        self.recovered = asyncio.Event()

    def __call__(self, event: events.BusEvent) -> None:
        if event.name in (events.BROKER_UNREACHABLE, events.SEND_ERROR):
            if not self._down:
                log.warning("broker unreachable: %s", event.attributes.get("error"))
            self._down = True
        elif event.name == events.SEND_DONE and self._down:
            self._down = False
            log.info("broker reachable again")
            self.recovered.set()


MAX_PARENTS_REMEMBERED = 4096
"""Jobs whose trace parent a watcher keeps after they are gone; the oldest is forgotten first."""

MAX_UNCONFIRMED = 2048
"""Records handed to the producer but not yet confirmed before a watch stream waits."""


@dataclasses.dataclass(frozen=True)
class _Pending:
    sent: asyncio.Future[producing.Sent]
    kind: str
    """The inventory slot (:func:`slot`)."""
    ident: ObjectId
    resource_version: str
    event: str
    known: Known | None
    """For a deletion: the object as it was in the inventory (put back if the record is refused)."""


@dataclasses.dataclass
class _Cursor:
    resource_version: str = ""


def _reconnecting(rt: resources.ResourceType) -> tenacity.AsyncRetrying:
    """Retry a list or watch of ``rt`` forever on API errors, with capped backoff
    (except a 404 of an optional kind: not served, see :data:`OPTIONAL_TYPES`)."""

    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("%s: list/watch failed (attempt %d), retrying in %.1fs: %s",
                    rt.plural, state.attempt_number, wait, error)

    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(
            lambda exc: isinstance(exc, clients.ApiError) and not (exc.not_found and rt in OPTIONAL_TYPES)
        ),
        wait=tenacity.wait_exponential(multiplier=0.2, max=30.0) + tenacity.wait_random(0, 0.2),
        stop=tenacity.stop_never,
        before_sleep=before_sleep,
        reraise=True,
    )


class Watcher:
    """Watches one cluster and publishes what it sees; :meth:`run` once per term."""

    def __init__(
        self, client: clients.KubeClient, publisher: producing.Publisher, settings: WatcherSettings,
        service_metrics: metrics.ServiceMetrics,
    ) -> None:
        self._client = client
        self._publisher = publisher
        self._settings = settings
        self._metrics = service_metrics
        self.inventory = Inventory()
        self._parents: dict[records.JobKey, otel_context.Context] = {}
        """The trace parent each job last had (:meth:`_parent`), for its children seen after it is gone."""
        self._unconfirmed: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=MAX_UNCONFIRMED)
        """Records handed to the producer whose acknowledgement is not checked yet, in order."""
        self.unlisted: set[str] = self._all_lists()
        """Watched types (``plural.group``, ``… in <namespace>`` when namespaces are given) this
        term has not listed yet (a type the cluster does not serve counts as listed): readiness
        waits for none to be left."""

    @property
    def settings(self) -> WatcherSettings:
        return self._settings

    def _namespaces(self) -> tuple[str | None, ...]:
        """Where each type is listed and watched: every served namespace on its own, or (None)
        the whole cluster at once."""
        return self._settings.namespaces or (None,)

    def _all_lists(self) -> set[str]:
        return {_type_name(rt, ns) for rt in WATCHED_TYPES for ns in self._namespaces()}

    async def run(self) -> None:
        """Full list of every watched type (publishing everything), then watch forever."""
        self.unlisted = self._all_lists()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._confirm(), name=f"confirm sends of {self._settings.cluster}")
            for rt in WATCHED_TYPES:
                for ns in self._namespaces():
                    where = self._settings.cluster if ns is None else f"{self._settings.cluster}/{ns}"
                    group.create_task(self._watch(rt, ns), name=f"watch {rt.plural} of {where}")

    async def _watch(self, rt: resources.ResourceType, namespace: str | None) -> None:
        missing = False
        while True:
            cursor = _Cursor()
            try:
                async for attempt in _reconnecting(rt):
                    with attempt:
                        cursor.resource_version = await self._relist(rt, namespace, full=True)
                self.unlisted.discard(_type_name(rt, namespace))
                if missing:
                    log.info("%s.%s is served now; watching it", rt.plural, rt.group)
                    missing = False
                while True:  # one watch request per turn; ends when the server closes it
                    async for attempt in _reconnecting(rt):
                        with attempt:
                            await self._stream(rt, namespace, cursor)
            except clients.ApiError as exc:
                if not (exc.not_found and rt in OPTIONAL_TYPES):
                    raise
                self.unlisted.discard(_type_name(rt, namespace))
                if not missing:
                    log.info("%s.%s is not served by this cluster (its CRD is not installed); "
                             "looking again every %gs", rt.plural, rt.group, self._settings.discovery_interval)
                    missing = True
                await asyncio.sleep(self._settings.discovery_interval)

    async def _stream(self, rt: resources.ResourceType, namespace: str | None, cursor: _Cursor) -> None:
        """One watch request from the cursor; a 410 relists and moves the cursor."""
        try:
            stream = self._client.watch(
                rt, namespace, cursor.resource_version, selector_for(rt),
                timeout_seconds=self._settings.watch_timeout,
            )
            try:
                async for event in stream:
                    version = str(_meta(event.object).get("resourceVersion") or "")
                    if event.type != "BOOKMARK":
                        await self._observe(rt, event.type, event.object)
                    if version:
                        cursor.resource_version = version
            finally:
                # Close the stream now (not when it is collected) so its
                # connection goes back to the pool, also when cancelled.
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await asyncio.shield(close())
        except clients.ApiError as exc:
            if not exc.gone:
                raise
            log.info("%s: watch from resourceVersion %s expired (410); relisting", rt.plural,
                     cursor.resource_version)
            cursor.resource_version = await self._relist(rt, namespace, full=False)

    async def _relist(self, rt: resources.ResourceType, namespace: str | None, *, full: bool) -> str:
        """List ``rt`` in ``namespace`` (None: every namespace) and publish the differences
        against the inventory's objects there.

        ``full``: also publish unchanged objects, as RESYNCED.
        Returns the list's resourceVersion.
        """
        items, version = await self._client.list(rt, namespace, selector_for(rt))
        known = self.inventory.of(_slot_of(rt))
        seen: set[ObjectId] = set()
        counts = {"ADDED": 0, "MODIFIED": 0, "RESYNCED": 0, "DELETED": 0}
        for obj in items:
            ident = _ident(obj)
            seen.add(ident)
            meta = _meta(obj)
            old = known.get(ident)
            if old is not None and old.uid and old.uid != str(meta.get("uid") or ""):
                # Deleted and created again while we were away: say both.
                await self._publish_known(rt, "DELETED", ident, old)
                counts["DELETED"] += 1
                old = None
            if old is None:
                event: records.ObservationEvent = "ADDED"
            elif old.resource_version != str(meta.get("resourceVersion") or ""):
                event = "MODIFIED"
            elif full:
                event = "RESYNCED"
            else:
                continue
            await self._observe(rt, event, obj)
            counts[event] += 1
        for ident in [i for i in known if i not in seen and namespace in (None, i[0])]:
            await self._publish_known(rt, "DELETED", ident, known[ident])
            counts["DELETED"] += 1
        log.info("%s: %s list at resourceVersion %s: %d objects; published %s",
                 rt.plural if namespace is None else f"{rt.plural} in {namespace}",
                 "full" if full else "re-", version, len(items),
                 ", ".join(f"{n} {e}" for e, n in counts.items() if n) or "nothing")
        return version

    async def _publish_known(self, rt: resources.ResourceType, event: records.ObservationEvent,
                             ident: ObjectId, old: Known) -> None:
        for key in (old.key, mapping.owner_key(self._settings.cluster, old.object)):
            if key is not None:
                await self.publish(event, rt.kind, old.object, key)
        self.inventory.of(_slot_of(rt)).pop(ident, None)

    async def _observe(self, rt: resources.ResourceType, event: str, obj: dict[str, Any]) -> None:
        """Publish one watch event (or relist finding) and remember it."""
        if event not in ("ADDED", "MODIFIED", "DELETED", "RESYNCED"):
            log.warning("%s: ignoring watch event of type %r", rt.plural, event)
            return
        # Only what kto reads is published and kept (shared.api.projections); the rest of
        # the object is on the API server, and is released here.
        obj = projections.project(obj, rt.kind)
        meta = _meta(obj)
        ident = _ident(obj)
        version = str(meta.get("resourceVersion") or "")
        known = self.inventory.of(_slot_of(rt))
        old = known.get(ident)
        if event in ("ADDED", "MODIFIED") and old is not None and old.resource_version == version:
            return  # already published (e.g. by the list this watch started from)
        key = mapping.job_key(self._settings.cluster, obj, self._settings.unserved_kinds)
        if event == "DELETED" and key is None and old is not None:
            key = old.key
        for published in (key, mapping.owner_key(self._settings.cluster, obj)):
            if published is not None:
                await self.publish(typing.cast(records.ObservationEvent, event), rt.kind, obj, published)
        if event == "DELETED":
            known.pop(ident, None)
        else:
            known[ident] = Known.of(str(meta.get("uid") or ""), version, obj, self.inventory.shared_key(key))

    def _parent(self, key: records.JobKey, kind: str, obj: dict[str, Any]) -> otel_context.Context | None:
        """The parent of a watch span of the job's: the trace context of the job's
        ``kto.dev/traceparent`` annotation; else, for a job Kueue manages, the trace of its Workload
        (:func:`workload_trace`); else none (a trace of its own). Once the job is gone, the parent it
        last had (at most :data:`MAX_PARENTS_REMEMBERED` jobs are remembered)."""
        job = obj if kind == key.kind and mapping.is_job(obj) else None
        if job is None:
            known = self.inventory.job(key)
            job = known.object if known is not None else None
        if job is None:
            # Not seen yet, or gone already (a MultiKueue worker's copy is deleted once it finished,
            # before its pods and Services): the trace its job last had; a Workload's own otherwise.
            remembered = self._parents.get(key)
            if remembered is not None or not kueue.is_workload(obj):
                return remembered
        parent: otel_context.Context | None = None
        value = (_meta(job).get("annotations") or {}).get(TRACEPARENT_ANNOTATION) if job is not None else None
        if isinstance(value, str) and value:
            parent = tracing.extract([("traceparent", value.encode("ascii", "replace"))])
            if not trace.get_current_span(parent).get_span_context().is_valid:
                parent = None
        if parent is None:
            workload = _meta(obj).get("name") if kueue.is_workload(obj) else kueue.workload_of(job)
            parent = workload_trace(key.namespace, str(workload)) if workload else None
        self._parents.pop(key, None)
        if parent is not None:
            if len(self._parents) >= MAX_PARENTS_REMEMBERED:
                self._parents.pop(next(iter(self._parents)))
            self._parents[key] = parent
        return parent

    async def publish(self, event: records.ObservationEvent, kind: str, obj: dict[str, Any],
                      key: records.JobKey) -> None:
        """Publish one observation of ``obj`` under ``key``, in a ``watch <event> <kind>`` span."""
        meta = _meta(obj)
        version = str(meta.get("resourceVersion") or "")
        key_text = str(key)
        if event == "RESYNCED":
            record_id = records.deterministic_id(
                SOURCE, key_text, kind, str(meta.get("uid") or ""), version, event,
                datetime.datetime.now(datetime.UTC).isoformat(),
            )
        else:
            # The same change published twice (a retry, a relist) gets the same id,
            # so consumers drop the copy.
            record_id = records.deterministic_id(
                SOURCE, key_text, kind, str(meta.get("uid") or ""), version, event,
            )
        record = records.Observation(
            id=record_id,
            key=key_text,
            resource_version=version,
            source=SOURCE,
            instance=self._settings.identity,
            object_kind=kind,
            event=event,
            object=obj,
            projection=projections.VERSION if projections.projects(kind) else 0,
        )
        with _tracer.start_as_current_span(
            f"watch {event} {kind}",
            context=self._parent(key, kind, obj),
            attributes={
                "kto.job_key": key_text,
                "kto.cluster": key.cluster,
                "k8s.namespace.name": str(meta.get("namespace") or ""),
                "k8s.object.kind": kind,
                "k8s.object.name": str(meta.get("name") or ""),
                "k8s.object.resource_version": version,
                "kto.observation.event": event,
            },
        ):
            sent = await self._publisher.submit(record)
        self._metrics.job_observed(event, kind, key_text, kueue.queue_of(obj) if kind == key.kind else "")
        kind_slot = slot(kind, str(obj.get("apiVersion") or ""))
        known = self.inventory.of(kind_slot).get(_ident(obj)) if event == "DELETED" else None
        pending = _Pending(sent, kind_slot, _ident(obj), version, event, known)
        sent.add_done_callback(lambda _: self._forget_unsent(pending))
        await self._unconfirmed.put(pending)

    async def _confirm(self) -> None:
        """Check the broker took each record, in order. Sends are pipelined (a watch
        stream does not wait for each acknowledgement); a record the broker refused
        for good is taken out of the inventory (or, for a deletion, put back: see
        :meth:`_forget_unsent`) and :class:`PublishError` ends the run, so the
        relist that follows says it again."""
        while True:
            pending = await self._unconfirmed.get()
            try:
                await asyncio.shield(pending.sent)
            finally:
                self._unconfirmed.task_done()

    def _forget_unsent(self, pending: _Pending) -> None:
        """If the record was refused: make the inventory say it was never published."""
        if pending.sent.cancelled() or pending.sent.exception() is None:
            return
        known = self.inventory.of(pending.kind)
        if pending.event == "DELETED":
            if pending.ident not in known and pending.known is not None:
                known[pending.ident] = pending.known
        else:
            current = known.get(pending.ident)
            if current is not None and current.resource_version == pending.resource_version:
                del known[pending.ident]

    async def flush(self) -> None:
        """Wait until every record handed to the producer so far is confirmed."""
        await self._unconfirmed.join()
