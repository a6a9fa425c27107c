"""The services' decisions as pure functions of what they saw, shared by the services
and by ``kto replay``, which makes them again from the audit log and compares.

In: a rebuilt :class:`shared.core.basis.Inputs` (or, in the services, the view).
Out: a pass's *plan* — the JSON-shaped summary of a reconcile decision that goes on
the ``reconcile_pass`` record before it is acted on (:func:`v1_plan`,
:func:`mpi_v2_plan`, :func:`elastic_plan`) — and a status write's *detail*
(:func:`status_detail`). Equal inputs give equal plans: a plan names what is created,
updated and deleted (kind and name), counted and decided, not the manifests' bodies,
which hold generated SSH keys and env values the log carries redacted.
No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shared.api import common, elastic, jobs, mpijobs
from shared.core import basis, conditions, defaulting, reconciling, statuses, validating
from shared.core import settings as operator_settings
from shared.core.elastic import decisions as et_decisions
from shared.core.elastic import planning as et_planning
from shared.core.elastic import reconciling as et
from shared.core.elastic.settings import ElasticSettings
from shared.core.mpi_v2 import reconciling as mpi_v2
from shared.core.mpi_v2 import sshkeys

Manifest = dict[str, Any]

PASS_ACTION = "reconcile_pass"
"""The decision record of one acting reconcile pass: its plan and its basis."""

ACTS = {
    "child_created": "creates", "child_create_failed": "creates", "child_deleted": "deletes",
    "replica_restarted": "deletes", "child_updated": "updates", "job_deleted_ttl": "delete_job",
}
"""A reconciler's act → the field of its pass's plan that must hold it. Each act names its
pass in ``detail.pass`` (the ``reconcile_pass`` record's id)."""


class Unreplayable(ValueError):
    """A basis whose decision cannot be made again (a job that no longer loads, settings
    of another shape)."""


def _named(manifests: Sequence[Manifest]) -> list[str]:
    return [f"{m.get('kind')}/{(m.get('metadata') or {}).get('name')}" for m in manifests]


def _deleted(refs: Sequence[Any]) -> list[str]:
    return [f"{r.kind}/{r.name}" + (f":{r.reason}" if getattr(r, "reason", "") else "") for r in refs]


# --- the reconciler ------------------------------------------------------------------


def acts(decision: reconciling.Decision) -> bool:
    """Whether a kubeflow.org/v1 pass does anything (warnings alone are not an act)."""
    return not decision.empty or decision.plan_error is not None or decision.restarts is not None


def v1_plan(decision: reconciling.Decision) -> dict[str, Any]:
    return {
        "creates": _named(decision.creates), "updates": _named(decision.updates),
        "deletes": _deleted(decision.deletes), "restarts": decision.restarts,
        "verdict": decision.verdict.reason if decision.verdict is not None else None,
        "delete_job": decision.delete_job, "plan_error": decision.plan_error,
        "warnings": [w.reason for w in decision.warnings],
    }


def mpi_v2_plan(decision: mpi_v2.Decision) -> dict[str, Any]:
    return {
        "creates": _named(decision.creates), "status_updates": _named(decision.status_updates),
        "updates": _named(decision.updates), "deletes": _deleted(decision.deletes),
        "error": decision.error, "steps": list(decision.steps),
    }


def elastic_acts(decision: et_decisions.Decision) -> bool:
    return bool(decision.creates or decision.updates or decision.deletes or decision.scalers
                or decision.status is not None or decision.steps)


def elastic_plan(decision: et_decisions.Decision) -> dict[str, Any]:
    return {
        "creates": _named(decision.creates), "updates": _named(decision.updates), "deletes": _deleted(decision.deletes),
        "scalers": [f"{u.kind}/{u.name}" + (":owner" if u.owner_reference is not None else "")
                    + (f":{u.status.phase}" if u.status is not None else "") for u in decision.scalers],
        "status": decision.status.dump() if decision.status is not None else None,
        "steps": [f"{s.kind}:{s.subject}" for s in decision.steps],
    }


def summary(plan: Mapping[str, Any]) -> str:
    """One line for ``kto history``: what the pass does."""
    parts = []
    for field in ("creates", "updates", "status_updates", "deletes", "scalers"):
        if plan.get(field):
            parts.append(f"{field.replace('_', ' ')} {', '.join(plan[field])}")
    for field in ("verdict", "plan_error", "error"):
        if plan.get(field):
            parts.append(f"{field.replace('_', ' ')} {plan[field]}")
    if plan.get("restarts") is not None:
        parts.append(f"restarts counted {plan['restarts']}")
    if plan.get("delete_job"):
        parts.append("delete the job")
    if plan.get("steps") and not parts:
        parts.append(f"{len(plan['steps'])} steps")
    text = "; ".join(parts) or "status"
    return text if len(text) <= 2000 else text[:2000] + "…"


def previous_version(previous: Manifest | None, current: Manifest) -> jobs.Job | None:
    """The job as the last decision saw it, when ``current`` is an update of it
    (same uid, another spec); None otherwise, or if it cannot be loaded."""
    if previous is None or previous is current:
        return None
    before, now = previous.get("metadata") or {}, current.get("metadata") or {}
    if before.get("uid") != now.get("uid") or previous.get("spec") == current.get("spec"):
        return None
    try:
        return jobs.load(previous)
    except jobs.LoadError:
        return None


def split_scalers(children: Sequence[Manifest]) -> tuple[list[elastic.Scaler], list[Manifest], list[str]]:
    """A TrainingJob's children as (its scalers loaded, the other children, why scalers
    that do not load were left out)."""
    scalers: list[elastic.Scaler] = []
    others: list[Manifest] = []
    problems: list[str] = []
    for child in children:
        if child.get("kind") not in (elastic.ScaleIn.KIND, elastic.ScaleOut.KIND):
            others.append(child)
            continue
        try:
            scalers.append(elastic.load_scaler(child))
        except elastic.LoadError as exc:
            problems.append(f"{child.get('kind')} {(child.get('metadata') or {}).get('name')} does not load: {exc}")
    return scalers, others, problems


def exec_result(result: et_decisions.ExecResult) -> dict[str, Any]:
    command = result.exec
    return {"namespace": command.namespace, "pod": command.pod, "container": command.container,
            "command": list(command.command), "purpose": command.purpose, "ok": result.ok, "output": result.output}


def _exec_result(raw: Mapping[str, Any]) -> et_decisions.ExecResult:
    command = et_decisions.Exec(str(raw["namespace"]), str(raw["pod"]), str(raw["container"]),
                                tuple(str(c) for c in raw["command"]), str(raw["purpose"]))
    return et_decisions.ExecResult(command, bool(raw["ok"]), str(raw.get("output", "")))


def _settings(cls: Any, raw: Any) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise Unreplayable(f"settings {raw!r} are not an object")
    known = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in known})
    except TypeError as exc:
        raise Unreplayable(f"settings do not fit {cls.__name__}: {exc}") from None


def _no_key() -> sshkeys.KeyPair:
    return sshkeys.KeyPair(b"", b"")


def _no_et_key() -> et_planning.KeyPair:
    return et_planning.KeyPair("", "")


SameCommand = Callable[[Sequence[str], Sequence[str]], bool]
"""Whether a command as recorded (its strings possibly replaced on the log) is the one asked for."""


def _same(recorded: Sequence[str], asked: Sequence[str]) -> bool:
    return tuple(recorded) == tuple(asked)


def _replayed_chain(training_job: elastic.TrainingJob, children: list[Manifest], scalers: list[elastic.Scaler],
                    inputs: basis.Inputs, same_command: SameCommand) -> et_decisions.Decision:
    """The pass's last decision, its chain of commands answered by the results it recorded, in
    order, as the reconciler runs them (stopping at the first failure): each command asked for
    takes the first unused result of the same pod, container and purpose whose command
    ``same_command`` accepts."""
    recorded = [_exec_result(r) for r in inputs.extra.get("executed") or []]
    settings = _settings(ElasticSettings, inputs.extra.get("settings"))
    executed: list[et_decisions.ExecResult] = []
    while True:
        decision = et.decide(training_job, children, scalers, inputs.now, key_pair=_no_et_key,
                             settings=settings, executed=executed)
        answered = False
        for command in decision.execs:
            found = next((r for r in recorded if (r.exec.namespace, r.exec.pod, r.exec.container, r.exec.purpose)
                          == (command.namespace, command.pod, command.container, command.purpose)
                          and same_command(r.exec.command, command.command)), None)
            if found is None:
                break
            recorded.remove(found)
            executed.append(et_decisions.ExecResult(command, found.ok, found.output))
            answered = True
            if not found.ok:
                break
        if not answered:
            return decision


def replan(kind: str, inputs: basis.Inputs, *, same_command: SameCommand = _same) -> dict[str, Any]:
    """The plan a reconcile pass of a ``kind`` job makes from ``inputs``; ``same_command``
    matches a TrainingJob pass's recorded commands (equality unless told otherwise)."""
    if kind == elastic.TrainingJob.KIND:
        try:
            training_job = elastic.load_training_job(inputs.job)
        except elastic.LoadError as exc:
            raise Unreplayable(f"the TrainingJob does not load: {exc}") from None
        scalers, children, _ = split_scalers(inputs.children)
        return elastic_plan(_replayed_chain(training_job, children, scalers, inputs, same_command))
    settings = _settings(operator_settings.OperatorSettings, inputs.extra.get("settings"))
    if kind == mpijobs.KIND and mpijobs.is_v2beta1(inputs.job):
        try:
            v2 = mpijobs.load({**inputs.job, "apiVersion": mpijobs.API_VERSION})
        except mpijobs.LoadError as exc:
            raise Unreplayable(f"the MPIJob does not load: {exc}") from None
        return mpi_v2_plan(mpi_v2.decide(v2, inputs.children, inputs.now, settings, _no_key))
    try:
        job = jobs.load(inputs.job)
    except jobs.LoadError as exc:
        raise Unreplayable(f"the {kind} does not load: {exc}") from None
    old = previous_version(inputs.old, inputs.job)
    return v1_plan(reconciling.decide(job, inputs.children, inputs.now, settings, old))


# --- the status worker ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A kubeflow.org/v1 job loaded, validated and defaulted for computing its status."""

    version: str
    source: Manifest
    """The job dict it was made from."""
    job: jobs.Job
    invalid: tuple[str, str] | None
    """(reason, message) when the job fails validation."""
    defaulted: jobs.Job | None


def prepare(document: Manifest) -> Prepared | None:
    """``document`` prepared; None when it cannot even be read as a job of a known kind."""
    version = str((document.get("metadata") or {}).get("resourceVersion") or "")
    try:
        job = jobs.load(document)
    except jobs.LoadError as exc:
        # A wrongly typed field: the job is Failed, with the field paths, from its
        # kind, metadata and status alone (the same message as the reconciler's verdict).
        skeleton = jobs.skeleton(document)
        if skeleton is None:
            return None
        failed = (f"{skeleton.KIND}FailedValidation", f"{skeleton.KIND} {skeleton.name} failed validation because {exc}")
        return Prepared(version, document, skeleton, failed, None)
    report = validating.validate(job)
    # A job of another controller is not ours to judge (only the reconciler's
    # verdict on an update that handed it over counts, see statuses.compute).
    invalid = None if report.ok or statuses.is_managed_externally(job) else (
        f"{job.KIND}FailedValidation", f"{job.KIND} {job.name} failed validation because {validating.describe(report)}",
    )
    return Prepared(version, document, job, invalid, None if invalid else defaulting.set_defaults(job))


def job_status(prepared: Prepared, children: Sequence[Manifest], now: Any, *,
               unconfirmed: bool) -> tuple[jobs.Job, statuses.Outcome]:
    """The status of a kubeflow.org/v1 job: its validation first, then the failure verdict
    the reconciler recorded on it (unless ``unconfirmed``: the API server has not shown it),
    then its pods."""
    job = prepared.job
    recorded = None if unconfirmed else statuses.recorded_verdict(job)
    verdict = statuses.Verdict(*prepared.invalid, "validation") if prepared.invalid else recorded
    if verdict is not None and verdict.kind == "validation":
        return job, statuses.compute(job, [], now, verdict)
    pods = [p for p in children if p.get("kind", "Pod") == "Pod"]
    defaulted = prepared.defaulted or defaulting.set_defaults(job)
    owned = [p for p in pods if _controller_uid(p) in (job.metadata.uid, None) or not job.metadata.uid]
    return job, statuses.compute(defaulted, owned, now, verdict)


def mpi_v2_status(job: mpijobs.MPIJob, children: Sequence[Manifest], now: Any) -> statuses.Outcome:
    """The status and Events of mpi-operator's sync, from the same pure decision the
    reconciler applies children from (the SSH key and the operator settings play no
    part in the status)."""
    decision = mpi_v2.decide(job, list(children), now, operator_settings.OperatorSettings(), _no_key)
    status = decision.status if decision.status is not None else job.status or common.JobStatus()
    return statuses.Outcome(status, decision.events)


def as_mpi_v2(document: Manifest) -> mpijobs.MPIJob | None:
    """The job as an MPIJob v2beta1 when it is one that loads."""
    if not mpijobs.is_v2beta1(document):
        return None
    try:
        return mpijobs.load({**document, "apiVersion": mpijobs.API_VERSION})
    except mpijobs.LoadError:
        return None


def status_of(document: Manifest, children: Sequence[Manifest], now: Any, *, unconfirmed: bool,
              prepared: Prepared | None = None) -> tuple[jobs.Job | mpijobs.MPIJob, statuses.Outcome] | None:
    """What the status worker computes for a job from its view (``prepared``: a cached
    :func:`prepare` of ``document``)."""
    v2 = as_mpi_v2(document)
    if v2 is not None:
        return v2, mpi_v2_status(v2, children, now)
    prepared = prepared or prepare(document)
    if prepared is None:
        return None
    return job_status(prepared, children, now, unconfirmed=unconfirmed)


def status_detail(outcome: statuses.Outcome) -> dict[str, Any]:
    """The ``status_written`` record's detail: what was written, without its times."""
    return {
        "conditions": [[c.type, c.status] for c in outcome.status.conditions or []],
        "replicaStatuses": {rt: rs.dump() for rt, rs in (outcome.status.replica_statuses or {}).items()},
        "finished": conditions.is_finished(outcome.status),
    }


def restatus(inputs: basis.Inputs) -> dict[str, Any]:
    """The ``status_written`` detail the status worker computes from ``inputs``."""
    computed = status_of(inputs.job, inputs.children, inputs.now, unconfirmed=bool(inputs.extra.get("unconfirmed")))
    if computed is None:
        raise Unreplayable("the job cannot be read as a job of a kind kto serves")
    return status_detail(computed[1])


def _controller_uid(pod: Manifest) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None
