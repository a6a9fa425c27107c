"""The reconciler's acts: a decided pass carried out on the job's cluster, each act
said on the topic.

In: a job key, its :class:`~services.reconciler.memories.KeyMemory`, and a family's
decision with the children it was made from (:class:`Seen`). Out: creates, updates,
deletes and status writes on the cluster (409 AlreadyExists and 404 NotFound count
as done; a 409 Conflict propagates, so settle reads afresh and decides again), Events
on the job, and on ``kto.jobs`` the pass's plan before it acts (write-ahead) and a
Decision record for each act. The deletes it makes are told to the key's
:class:`~shared.core.expectations.Expectations`. When time alone may change the
decision it asks the reconciler to look again (``look_again``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from shared import keygen
from shared.api import common, elastic, jobs, objects
from shared.bus import producing, records
from shared.core import basis, conditions, kubeflow_v1, plans, reconciling, statuses, views
from shared.core import events as child_events
from shared.core.elastic import decisions as et_decisions
from shared.core.elastic import family as et_family
from shared.core.elastic import reconciling as et
from shared.core.mpi_v2 import family as mpi_v2_family
from shared.core.mpi_v2 import reconciling as mpi_v2
from shared.kube import clients, connecting, recording, resources
from services.reconciler import memories
from services.reconciler.settings import ReconcilerSettings

log = logging.getLogger(__name__)

CONCURRENT_KINDS = frozenset({"Pod", "Service"})
"""Children created concurrently; the others are created first, one by one, in plan order."""
MAX_EXECS = 4
"""Commands one TrainingJob pass may run in its launcher (the core asks for at most two)."""

LookAgain = Callable[[records.JobKey, memories.KeyMemory, "float | None"], None]
"""The reconciler's hook: look at the key again after the seconds given (None: when a record comes)."""


@dataclasses.dataclass(frozen=True)
class Seen:
    """The children a decision was made from, and those of them it saw going away because
    this worker deleted them (given a ``deletionTimestamp`` for it; see
    :class:`shared.core.expectations.Expectations`)."""

    children: list[dict[str, Any]]
    going: frozenset[views.ChildKey] = frozenset()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def status_of(job: dict[str, Any]) -> dict[str, Any]:
    """The job's status as an object (empty when it has none or a malformed one)."""
    status = job.get("status")
    return status if isinstance(status, dict) else {}


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


class Applier:
    """Carries out the passes the reconciler decided (see the module)."""

    def __init__(
        self, settings: ReconcilerSettings, clusters: connecting.ClusterClients, publisher: producing.Publisher,
        look_again: LookAgain,
    ) -> None:
        self._settings = settings
        self._clusters = clusters
        self._publisher = publisher
        self._look_again = look_again
        self._events = recording.Recorder(settings.instance)

    async def apply_v1(
        self, key: records.JobKey, memory: memories.KeyMemory, job: jobs.Job, decision: reconciling.Decision,
        seen: Seen, now: dt.datetime, old: dict[str, Any] | None,
    ) -> None:
        """A kubeflow.org/v1 pass: the verdict on the job, then on the topic; creates, updates,
        the restart count on the job, deletes, the job's TTL deletion."""
        view = memory.view
        memory.decided_on = view.job
        if kubeflow_v1.acts(decision):
            await self._pass(key, memory, seen, now, kubeflow_v1.plan(decision), old=old,
                             settings=dataclasses.asdict(self._settings.operator))
        client = await self._clusters.get(key.cluster)
        if decision.verdict is not None:
            # On the job first, then on the topic, then the deletes: whoever reads the
            # job next (a successor, the status worker) finishes what this pass starts.
            if not await self._record_failure(client, key, memory, decision.verdict, now):
                return
            await self.announce(key, memory, decision.verdict)
        else:
            recorded = statuses.recorded_verdict(job)
            if recorded is not None and not conditions.is_finished(job.status):
                # A predecessor recorded it and may have died before publishing it.
                await self.announce(key, memory, recorded)
        if decision.plan_error is not None:
            await self.say(key, memory, "child_create_failed", reason="PlanError", message=decision.plan_error)
        await self._warn(client, memory, job, decision.warnings, now)
        await self._create_all(client, key, memory, decision.creates, job)
        for manifest in decision.updates:
            await self._update(client, key, memory, manifest)
        if decision.restarts is not None and not await self._count_restarts(client, key, memory, decision):
            return
        for ref in decision.deletes:
            await self._delete(client, key, memory, ref, job)
        if decision.delete_job:
            await self._delete_job(client, key, memory, job)
        self._look_again(key, memory, decision.requeue_after)

    async def apply_mpi_v2(
        self, key: records.JobKey, memory: memories.KeyMemory, decision: mpi_v2.Decision, seen: Seen,
        now: dt.datetime,
    ) -> None:
        """An MPIJob v2beta1 sync: its steps, creates, children's status writes, updates, deletes."""
        if decision.empty:
            return
        await self._pass(key, memory, seen, now, mpi_v2_family.plan(decision),
                         settings=dataclasses.asdict(self._settings.operator))
        client = await self._clusters.get(key.cluster)
        await self.say(key, memory, "mpi_sync", reason="Sync", message="; ".join(decision.steps)[:4000],
                       detail={"steps": decision.steps, "error": decision.error})
        await self._create_all(client, key, memory, decision.creates)
        versions: dict[tuple[str, str], str] = {}
        for manifest in decision.status_updates:
            rt = resources.for_manifest(manifest)
            name = manifest["metadata"]["name"]
            written = await client.request("PUT", rt.path(key.namespace, name, "status"), body=manifest,
                                           route=f"{rt.plural}/status")
            versions[(rt.kind, name)] = objects.resource_version_of(written)
        for manifest in decision.updates:
            rt = resources.for_manifest(manifest)
            version = versions.get((rt.kind, manifest["metadata"]["name"]))
            if version:
                manifest = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}
            await self._update(client, key, memory, manifest)
        for ref in decision.deletes:
            await self._delete(client, key, memory, ref)
        if decision.error is not None:
            # Upstream returns the error and is called again with back-off: a foreign
            # child in the way. Looked at again when anything of the job changes.
            log.warning("%s: %s", key, decision.error)
        self._look_again(key, memory, None)

    async def apply_training_job(
        self, key: records.JobKey, memory: memories.KeyMemory, job: elastic.TrainingJob, decision: et_decisions.Decision,
        every: Seen, scalers: list[elastic.Scaler], children: list[dict[str, Any]], now: dt.datetime,
    ) -> None:
        """A TrainingJob pass: the commands its decision asks for, run in the launcher and fed
        back until it asks for none (each one on the topic), then what it decided."""
        client = await self._clusters.get(key.cluster)
        executed: list[et_decisions.ExecResult] = []
        while decision.execs and len(executed) < MAX_EXECS:
            for command in decision.execs:
                result = await self._exec(client, key, command)
                executed.append(result)
                await self.say(key, memory, "launcher_exec", child_kind="Pod", child_name=command.pod,
                               reason=command.purpose, message=command.script[:4000],
                               detail={"ok": result.ok, "output": result.output[:2000]})
                if not result.ok:
                    break
            decision = et.decide(job, children, scalers, now, key_pair=keygen.training_job_key_pair,
                                 settings=self._settings.elastic, executed=executed)
        if et_family.acts(decision):
            await self._pass(key, memory, every, now, et_family.plan(decision),
                             settings=dataclasses.asdict(self._settings.elastic),
                             executed=[et_family.exec_result(r) for r in executed])
        await self._apply_training_job_decision(client, key, memory, job, decision, now)

    async def _exec(
        self, client: clients.KubeClient, key: records.JobKey, command: et_decisions.Exec,
    ) -> et_decisions.ExecResult:
        """Run a command in the job's own namespace: the job key's, whatever the job object says."""
        return await run_in_launcher(client, dataclasses.replace(command, namespace=key.namespace),
                                     self._settings.exec_timeout)

    async def _apply_training_job_decision(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, job: elastic.TrainingJob,
        decision: et_decisions.Decision, now: dt.datetime,
    ) -> None:
        """In the core's order: scaler ownerReferences, creates, deletes, scaler statuses,
        the job's status; then Events and the steps."""
        view = memory.view
        for update in decision.scalers:
            if update.owner_reference is not None:
                rt = resources.SCALER_TYPES[update.kind]
                written = await client.patch(rt, update.namespace, update.name,
                                             {"metadata": {"ownerReferences": [update.owner_reference]}})
                view.observe_child(written, deleted=False)
        await self._create_all(client, key, memory, decision.creates)
        for manifest in decision.updates:
            await self._update(client, key, memory, manifest)
        for ref in decision.deletes:
            await self._delete(client, key, memory, ref)
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
            await self.say(key, memory, "elastic_step", child_name=step.subject, reason=step.kind,
                           message=step.detail)
        self._look_again(key, memory, decision.requeue_after)

    async def fail_unloadable_training_job(
        self, key: records.JobKey, memory: memories.KeyMemory, exc: elastic.LoadError, now: dt.datetime,
    ) -> None:
        """A TrainingJob whose fields do not load (a wrongly typed field): Failed, naming
        the field paths, once; nothing is created for it."""
        view = memory.view
        assert view.job is not None
        message = f"TrainingJob {key.name} failed validation because {exc}"
        status = status_of(view.job)
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
        await self.announce(key, memory, statuses.Verdict("TrainingJobFailedValidation", message, "validation"))

    async def _warn(
        self, client: clients.KubeClient, memory: memories.KeyMemory, job: jobs.Job, warnings: list[statuses.Event],
        now: dt.datetime,
    ) -> None:
        """Record the decision's Warning Events, each once per job and process: a
        pass that repeats a decision (a re-delivered record) repeats no Event."""
        seen = memory.warned
        for event in warnings:
            mark = (job.metadata.uid or "", event.reason, event.message)
            if mark not in seen:
                seen.add(mark)
                await self._events.record(client, job, [event], now)

    async def _record_failure(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, verdict: statuses.Verdict,
        now: dt.datetime,
    ) -> bool:
        """Write ``verdict`` onto the job (:data:`statuses.FAILURE_ANNOTATION`), on
        the version it was decided on (a 409 makes settle read afresh and decide
        again). False if the job is gone."""
        annotation = {statuses.FAILURE_ANNOTATION: statuses.failure_annotation(verdict, now)}
        return await self._annotate(client, key, memory, annotation)

    async def announce(self, key: records.JobKey, memory: memories.KeyMemory, verdict: statuses.Verdict) -> None:
        """Publish the verdict (``job_failed`` / ``job_validation_failed``) once per
        process, with an id fixed by (job uid, verdict): a successor's repeat is a
        duplicate readers drop. For the audit trail: no worker acts on the record."""
        uid = objects.uid_of(memory.view.job)
        if memory.announced == (uid, verdict.reason, verdict.message):
            return
        action = "job_validation_failed" if verdict.kind == "validation" else "job_failed"
        await self.say(
            key, memory, action, reason=verdict.reason, message=verdict.message,
            detail={"uid": uid, "kind": verdict.kind},
            record_id=records.deterministic_id(str(key), uid or "", action, verdict.reason, verdict.message),
        )
        memory.announced = (uid, verdict.reason, verdict.message)

    def decision(
        self, key: records.JobKey, action: str, *, last_pass: str | None = None, child_kind: str | None = None,
        child_name: str | None = None, reason: str = "", message: str = "", detail: dict[str, Any] | None = None,
        resource_version: str = "", record_id: str | None = None,
    ) -> records.Decision:
        """A decision record of this worker about ``key``; an act names ``last_pass``."""
        ids = {"id": record_id} if record_id is not None else {}
        detail = dict(detail or {})
        if action in plans.ACTS and last_pass is not None:
            detail.setdefault("pass", last_pass)
        return records.Decision(
            **ids, key=str(key), action=action, child_kind=child_kind, child_name=child_name, reason=reason,
            message=message, detail=detail, resource_version=resource_version,
            source="reconciler", instance=self._settings.instance,
        )

    async def say(
        self, key: records.JobKey, memory: memories.KeyMemory, action: str, **fields: Any,
    ) -> None:
        """Publish a decision record of the key (an act names the key's last pass)."""
        await self._publisher.publish(self.decision(key, action, last_pass=memory.last_pass, **fields))

    async def _pass(
        self, key: records.JobKey, memory: memories.KeyMemory, seen: Seen, now: dt.datetime,
        plan: dict[str, Any], *, old: dict[str, Any] | None = None, **extra: Any,
    ) -> None:
        """Before acting (write-ahead), the pass's plan and what it was decided from
        (:mod:`shared.core.basis`), so ``kto replay`` can decide it again and compare."""
        view = memory.view
        assert view.job is not None
        the_basis = basis.describe(view.job, seen.children, now, logged=basis.logged_in(view), old=old,
                                   terminating=seen.going, **extra)
        record = self.decision(key, plans.PASS_ACTION, reason="Reconcile", message=plans.summary(plan),
                               detail={"plan": plan, "basis": the_basis})
        await self._publisher.publish(record)
        memory.last_pass = record.id

    async def _create_all(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory,
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
        view = memory.view
        if not manifests:
            return
        job_uid = objects.uid_of(view.job) or ""
        planned = [(resources.for_manifest(m), m) for m in manifests]
        await self._publisher.publish_many(
            self.decision(
                key, "child_created", last_pass=memory.last_pass, child_kind=rt.kind, child_name=m["metadata"]["name"],
                record_id=records.deterministic_id(str(key), job_uid, "child_created", rt.kind, m["metadata"]["name"]),
            )
            for rt, m in planned
        )
        first = [(rt, m) for rt, m in planned if rt.kind not in CONCURRENT_KINDS]
        rest = [(rt, m) for rt, m in planned if rt.kind in CONCURRENT_KINDS]
        said: list[statuses.Event | None] = []
        for rt, manifest in first:
            said.append(await self._create(client, key, memory, rt, manifest, job))
        slots = asyncio.Semaphore(self._settings.create_concurrency)

        async def create(rt: resources.ResourceType, manifest: dict[str, Any]) -> statuses.Event | None:
            async with slots:
                return await self._create(client, key, memory, rt, manifest, job)

        outcomes = await asyncio.gather(*(create(rt, m) for rt, m in rest), return_exceptions=True)
        said.extend(o for o in outcomes if not isinstance(o, BaseException))
        if job is not None:
            await self._events.record(client, job, [e for e in said if e is not None], _now())
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _create(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory,
        rt: resources.ResourceType, manifest: dict[str, Any], job: jobs.Job | None,
    ) -> statuses.Event | None:
        """Create one child; the Event upstream records for it (None: none, or it existed)."""
        view = memory.view
        name = manifest["metadata"]["name"]
        try:
            created = await client.create(rt, key.namespace, manifest)
        except clients.ApiError as exc:
            if exc.already_exists:
                view.observe_child({**manifest, "apiVersion": rt.api_version, "kind": rt.kind}, deleted=False)
                return None
            if exc.retriable or exc.conflict:
                raise
            await self.say(
                key, memory, "child_create_failed", child_kind=rt.kind, child_name=name,
                reason=exc.reason or "CreateFailed", message=exc.message,
            )
            return None if job is None else child_events.create_failed(job.KIND, rt.kind, name, exc.message or str(exc))
        created.setdefault("apiVersion", rt.api_version)
        created.setdefault("kind", rt.kind)
        memory.expected.created((rt.kind, name))
        view.observe_child(created, deleted=False)
        return None if job is None else child_events.created(job.KIND, rt.kind, name)

    async def _update(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, manifest: dict[str, Any],
    ) -> None:
        view = memory.view
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
        await self.say(key, memory, "child_updated", child_kind=rt.kind, child_name=manifest["metadata"]["name"])

    async def _delete(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, ref: reconciling.ChildRef,
        job: jobs.Job | None = None,
    ) -> None:
        view = memory.view
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
        memory.expected.deleted((ref.kind, ref.name), ref.uid, asyncio.get_running_loop().time())
        action = "replica_restarted" if ref.reason == "restart" else "child_deleted"
        await self.say(key, memory, action, child_kind=ref.kind, child_name=ref.name, reason=ref.reason)

    async def _count_restarts(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, decision: reconciling.Decision,
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
        return await self._annotate(client, key, memory, {
            reconciling.RESTARTS_ANNOTATION: str(decision.restarts),
            reconciling.COUNTED_ANNOTATION: ",".join(decision.counted)})

    async def _annotate(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, annotations: dict[str, str],
    ) -> bool:
        """Merge ``annotations`` into the job on the resourceVersion the view holds (a 409
        makes settle read afresh and decide again); the answer replaces the view. False if
        the job is gone."""
        view = memory.view
        body: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if version := objects.resource_version_of(view.job):
            body["metadata"]["resourceVersion"] = version
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
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, job: jobs.Job,
    ) -> None:
        view = memory.view
        uid = objects.uid_of(view.job)
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
        await self.say(
            key, memory, "job_deleted_ttl", reason="TTLExpired",
            message=f"Deleted job: {key.name}",
        )
