"""The reconciler's acts: a decided pass carried out on the job's cluster, each act
said on the topic.

In: a job key, its :class:`~services.reconciler.memories.KeyMemory`, and a pass a
family decided (:class:`Decided`: its :class:`~shared.core.effects.Effects`, the same
shape for every family, with the children it was decided from). Out: commands run in a
pod, creates, updates, deletes and status writes on the cluster (409 AlreadyExists and 404 NotFound count
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

from shared.api import jobs, objects
from shared.bus import producing, records
from shared.core import basis, effects, families, outcomes, plans, deciding, views
from shared.core import events as child_events
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
class Decided:
    """A pass decided: the family that decided it, on what, with what, and its effects."""

    family: families.Family[Any]
    document: dict[str, Any]
    seen: Seen
    context: effects.Context
    effects: effects.Effects


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
    client: clients.KubeClient, command: effects.Exec, timeout: float,
) -> effects.ExecResult:
    """Run one command a TrainingJob's decision asks for: its output as the client reads it
    back (each stream capped at ``clients.EXEC_OUTPUT_LIMIT``); failed on a non-zero exit, an
    API error, or no end within ``timeout`` seconds (the exec is then abandoned)."""
    try:
        answer = await client.exec(command.namespace, command.pod, command.container, list(command.command),
                                   timeout=timeout)
    except clients.ApiError as exc:
        if exc.reason == "Timeout":
            return effects.ExecResult(
                command, False, f"the {command.purpose} command did not end within the exec time limit of "
                                f"{timeout:g} s and counts as failed")
        return effects.ExecResult(command, False, exc.message or str(exc))
    if answer.exit_code != 0:
        return effects.ExecResult(command, False, answer.stderr or answer.stdout or f"exit code {answer.exit_code}")
    return effects.ExecResult(command, True, answer.stdout)


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

    async def apply(self, key: records.JobKey, memory: memories.KeyMemory, decided: Decided) -> None:
        """Carry out a decided pass in the order :mod:`shared.core.effects` gives: the commands
        it asks for first (each result fed back to the family until it asks for none, each
        command on the topic), then, when it acts, its plan on the topic and its writes; its
        warnings and announcements whether or not it acts; then look again when it says."""
        view = memory.view
        memory.decided_on = view.job
        client = await self._clusters.get(key.cluster)
        decision, executed = decided.effects, list[effects.ExecResult]()
        while decision.execs and len(executed) < MAX_EXECS:
            for command in decision.execs:
                result = await self._exec(client, key, command)
                executed.append(result)
                await self.say(key, memory, "launcher_exec", child_kind="Pod", child_name=command.pod,
                               reason=command.purpose, message=command.script[:4000],
                               detail={"ok": result.ok, "output": result.output[:2000]})
                if not result.ok:
                    break
            decision = decided.family.decide(decided.document, decided.seen.children,
                                             dataclasses.replace(decided.context, executed=tuple(executed)))
        for problem in decision.problems:
            log.warning("%s: %s", key, problem)
        acting = decision.acts or bool(executed)
        if acting:
            extra: dict[str, Any] = {"settings": decision.settings}
            if executed:
                extra["executed"] = [result.dump() for result in executed]
            await self._pass(key, memory, decided.seen, decided.context.now, decision.plan(), old=decision.previous,
                             **extra)
        def refused(refusals: tuple[effects.Refusal, ...]) -> effects.Effects:
            return decided.family.decide(decided.document, decided.seen.children,
                                         dataclasses.replace(decided.context, refused=refusals))

        if not await self._carry_out(client, key, memory, decision, decided.context.now, acting, refused):
            return
        self._look_again(key, memory, decision.requeue_after)

    async def _carry_out(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, decision: effects.Effects,
        now: dt.datetime, acting: bool, refused: Callable[[tuple[effects.Refusal, ...]], effects.Effects],
    ) -> bool:
        """The writes of a pass, in order (see :mod:`shared.core.effects`); False when the job
        turned out gone (nothing more is done for it). When the API server refuses a child, the
        job's status is the one the family decides knowing it (``refused``)."""
        job = decision.regarding
        told = job if decision.child_events else None
        if decision.verdict is not None:
            # On the job first, then on the topic, then the deletes: whoever reads the
            # job next (a successor, the status worker) finishes what this pass starts.
            if not await self._record_failure(client, key, memory, decision.verdict, now):
                return False
            await self.announce(key, memory, decision.verdict)
        elif decision.announce is not None:
            await self.announce(key, memory, decision.announce)
        if decision.error is not None:
            log.warning("%s: %s", key, decision.error)
            await self.say(key, memory, "child_create_failed", reason=decision.error_reason or "PlanError",
                           message=decision.error)
        if job is not None:
            await self._warn(client, memory, job, decision.warnings, now)
        versions: dict[tuple[str, str], str] = {}
        for write in decision.child_writes:
            if write.owner_reference is not None:
                await self._adopt(client, key, memory, write, versions)
        refusals = await self._create_all(client, key, memory, decision.creates, told)
        if refusals:
            knowing = refused(tuple(refusals))
            decision.status, decision.requeue_after = knowing.status, knowing.requeue_after
        await self._write_statuses(client, key, memory, [w for w in decision.child_writes if w.before_update],
                                   versions)
        for manifest in decision.updates:
            await self._update(client, key, memory, manifest, versions)
        if decision.restarts is not None and not await self._count_restarts(client, key, memory, decision):
            return False
        for ref in decision.deletes:
            await self._delete(client, key, memory, ref, told)
        if decision.delete_job:
            await self._delete_job(client, key, memory, job)
        await self._write_statuses(client, key, memory, [w for w in decision.child_writes if not w.before_update],
                                   versions)
        view = memory.view
        if decision.status is not None and view.job is not None:
            rt = resources.JOB_TYPES[key.kind]
            written = await client.request("PUT", rt.path(key.namespace, key.name, "status"),
                                           body={**view.job, "status": decision.status.dump()},
                                           route=f"{rt.plural}/status")
            view.replace_job(written)
        if job is not None:
            await self._events.record(client, job, decision.events, now)
        if acting:
            for step in decision.steps:
                await self.say(key, memory, "step", child_name=step.subject, reason=step.kind, message=step.detail)
        return True

    async def _exec(
        self, client: clients.KubeClient, key: records.JobKey, command: effects.Exec,
    ) -> effects.ExecResult:
        """Run a command in the job's own namespace: the job key's, whatever the job object says."""
        return await run_in_launcher(client, dataclasses.replace(command, namespace=key.namespace),
                                     self._settings.exec_timeout)

    async def _adopt(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, write: effects.ChildWrite,
        versions: dict[tuple[str, str], str],
    ) -> None:
        """Make the job the child's controller (a metadata patch, in the key's namespace)."""
        rt = resources.for_manifest({"apiVersion": write.api_version, "kind": write.kind})
        written = await client.patch(rt, key.namespace, write.name,
                                     {"metadata": {"ownerReferences": [write.owner_reference]}})
        memory.view.observe_child(written, deleted=False)
        versions[(write.kind, write.name)] = objects.resource_version_of(written)

    async def _write_statuses(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory,
        writes: list[effects.ChildWrite], versions: dict[tuple[str, str], str],
    ) -> None:
        """Write each child's ``/status`` (the whole subresource) over the child as the view
        holds it; a child gone meanwhile is skipped."""
        view = memory.view
        for write in writes:
            status = write.status_value()
            current = view.children.get((write.kind, write.name))
            if status is None or current is None:
                continue
            rt = resources.for_manifest({"apiVersion": write.api_version, "kind": write.kind})
            written = await client.request("PUT", rt.path(key.namespace, write.name, "status"),
                                           body={**current, "status": status}, route=f"{rt.plural}/status")
            view.observe_child(written, deleted=False)
            versions[(write.kind, write.name)] = objects.resource_version_of(written)

    async def _warn(
        self, client: clients.KubeClient, memory: memories.KeyMemory, job: recording.Regarding,
        warnings: list[child_events.Event],
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
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, verdict: outcomes.Verdict,
        now: dt.datetime,
    ) -> bool:
        """Write ``verdict`` onto the job (:data:`outcomes.FAILURE_ANNOTATION`), on
        the version it was decided on (a 409 makes settle read afresh and decide
        again). False if the job is gone."""
        annotation = {outcomes.FAILURE_ANNOTATION: outcomes.failure_annotation(verdict, now)}
        return await self._annotate(client, key, memory, annotation)

    async def announce(self, key: records.JobKey, memory: memories.KeyMemory, verdict: outcomes.Verdict) -> None:
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
        manifests: list[dict[str, Any]], job: recording.Regarding | None = None,
    ) -> list[effects.Refusal]:
        """Decide, then act: every ``child_created`` decision is published first
        (write-ahead), with an id fixed by (job uid, child), so a worker that dies
        between the two leaves a log that still names the child, and its
        successor's repeat is deduplicated. Children other than pods and services
        (MPI's ConfigMap, ServiceAccount, Role, RoleBinding) are created first, in
        plan order, since pods refer to them; pods and services then go out
        concurrently (``create_concurrency`` at a time). A retriable failure is
        raised after the others are done, so the record is retried. For a
        kubeflow.org/v1 ``job``, upstream's Events say what was created (combined:
        ``Created pod: a, b``) and what failed. Out: the creates the API server refused."""
        view = memory.view
        refusals: list[effects.Refusal] = []
        if not manifests:
            return refusals
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
        said: list[child_events.Event | None] = []
        for rt, manifest in first:
            said.append(await self._create(client, key, memory, rt, manifest, job, refusals))
        slots = asyncio.Semaphore(self._settings.create_concurrency)

        async def create(rt: resources.ResourceType, manifest: dict[str, Any]) -> child_events.Event | None:
            async with slots:
                return await self._create(client, key, memory, rt, manifest, job, refusals)

        results = await asyncio.gather(*(create(rt, m) for rt, m in rest), return_exceptions=True)
        said.extend(o for o in results if not isinstance(o, BaseException))
        if job is not None:
            await self._events.record(client, job, [e for e in said if e is not None], _now())
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return refusals

    async def _create(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory,
        rt: resources.ResourceType, manifest: dict[str, Any], job: recording.Regarding | None,
        refusals: list[effects.Refusal],
    ) -> child_events.Event | None:
        """Create one child; the Event upstream records for it (None: none, or it existed); a
        refusal of the API server is added to ``refusals``."""
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
            refusals.append(effects.Refusal(rt.kind, name, exc.reason or "CreateFailed", exc.message or str(exc)))
            return None if job is None else child_events.create_failed(job.KIND, rt.kind, name, exc.message or str(exc))
        created.setdefault("apiVersion", rt.api_version)
        created.setdefault("kind", rt.kind)
        memory.expected.created((rt.kind, name))
        view.observe_child(created, deleted=False)
        return None if job is None else child_events.created(job.KIND, rt.kind, name)

    async def _update(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, manifest: dict[str, Any],
        versions: dict[tuple[str, str], str],
    ) -> None:
        """Write ``manifest`` over the child, on the resourceVersion it was decided on, or the one
        an earlier write of this pass to the same child returned."""
        view = memory.view
        rt = resources.for_manifest(manifest)
        version = versions.get((rt.kind, manifest["metadata"]["name"]))
        if version:
            manifest = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}
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
        versions[(rt.kind, manifest["metadata"]["name"])] = objects.resource_version_of(updated)
        await self.say(key, memory, "child_updated", child_kind=rt.kind, child_name=manifest["metadata"]["name"])

    async def _delete(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, ref: effects.ChildRef,
        job: recording.Regarding | None = None,
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
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory, decision: effects.Effects,
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
            deciding.RESTARTS_ANNOTATION: str(decision.restarts),
            deciding.COUNTED_ANNOTATION: ",".join(decision.counted)})

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
        patched.setdefault("apiVersion", resources.JOB_TYPES[key.kind].api_version)
        patched.setdefault("kind", key.kind)
        view.replace_job(patched)
        return True

    async def _delete_job(
        self, client: clients.KubeClient, key: records.JobKey, memory: memories.KeyMemory,
        job: recording.Regarding | None,
    ) -> None:
        view = memory.view
        uid = objects.uid_of(view.job)
        try:
            await client.delete(resources.JOB_TYPES[key.kind], key.namespace, key.name, uid=uid)
        except clients.ApiError as exc:
            if not (exc.not_found or exc.conflict) and job is not None:
                await self._events.record(client, job, [child_events.Event(
                    "Warning", "FailedDeleteJob" if key.kind in child_events.TTL_JOB_REASON_KINDS else "FailedDeletePod",
                    f"Error deleting: {exc.message or exc}")], _now())
            if not (exc.not_found or exc.conflict):
                raise
        else:
            if job is not None:
                await self._events.record(client, job, [child_events.ttl_deleted(key.kind, key.name)], _now())
        await self.say(
            key, memory, "job_deleted_ttl", reason="TTLExpired",
            message=f"Deleted job: {key.name}",
        )

