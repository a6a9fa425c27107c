"""ScaleIn and ScaleOut: binding, selection, and the two algorithms (spec B.11–B.14).

In: a ``deciding.Pass`` of a TrainingJob in phase Running (selection) or
Scaling (execution), or a scaler alone with its job or None (binding). Out:
scaler and job status changes, creates, deletes and steps in the pass's
decision.

The order that keeps training consistent: a scale-in rewrites the
launcher's hostfile (or runs the scaler's script) **before** any worker
goes, and removes a worker only once no launcher process is attached to
it; a scale-out rewrites it **after** every added worker is Running. The
workers a scaler removes or adds are written to its status (``toDeletePods``
/ ``addPods``) in a pass of their own before any of them is touched, so a
pass cut short is resumed from what was recorded and never removes or adds
a second set.

Where kto differs from upstream (docs/elastic-core.md): pending scalers run
in creation order by default (``ElasticSettings.scaler_order``); a ScaleIn
that would leave fewer than ``minReplicas`` workers (or none) and a ScaleOut
that would exceed ``maxReplicas`` fail; a ScaleIn naming a worker that does
not exist fails naming it (upstream drops unknown names, and deletes every
worker when none is left); a ScaleOut that timed out is failed before any
missing worker is created again; a scaler that finished while its job's
status was not yet written is caught up with.
"""

from __future__ import annotations

import datetime as dt

from shared.api import elastic, objects
from shared.api.objects import labels_of, name_of
from shared.core import effects, owners, reports
from shared.core.elastic import steps, naming, planning, statuses, validating
from shared.core.elastic.working import Pass

ScalerStatus = elastic.ScaleInStatus | elastic.ScaleOutStatus


def _status_copy(scaler: elastic.Scaler) -> ScalerStatus:
    if isinstance(scaler, elastic.ScaleIn):
        return scaler.status.model_copy(deep=True) if scaler.status else elastic.ScaleInStatus()
    return scaler.status.model_copy(deep=True) if scaler.status else elastic.ScaleOutStatus()


def _write(decision: effects.Effects, scaler: elastic.Scaler, status: ScalerStatus) -> None:
    if statuses.differs(scaler.status, status):
        decision.child(elastic.API_VERSION, scaler.KIND, scaler.namespace, scaler.name).status = status


def is_deleting(scaler: elastic.Scaler) -> bool:
    return scaler.metadata.deletion_timestamp is not None


def is_bound(scaler: elastic.Scaler) -> bool:
    return bool(scaler.metadata.owner_references)


# ---------------------------------------------------------------------------
# Binding (B.11)
# ---------------------------------------------------------------------------


def bind_into(decision: effects.Effects, scaler: elastic.Scaler, job: elastic.TrainingJob | None,
              now: dt.datetime) -> bool:
    """Bind an unfinished scaler without ownerReferences to its TrainingJob: controller
    ownerReference and condition ``Created``; True when it does. Without the job it stays
    unbound and waits (spec C.54: no ownerReference, no status); the decision says so in a step."""
    if is_bound(scaler) or is_deleting(scaler) or statuses.is_scale_finished(scaler.status):
        return False
    if job is None or job.name != scaler.target_name or job.namespace != scaler.namespace:
        wanted = f"{scaler.namespace}/{scaler.target_name}" if scaler.target_name else "(spec.selector.name is empty)"
        decision.step(steps.STEP_SCALER_WAITING, scaler.full_name,
                      f"TrainingJob {wanted} not found; the scaler stays unbound until it exists")
        return False
    status = _status_copy(scaler)
    statuses.initialized(status)
    statuses.set_condition(status, statuses.CREATED, "",
                           f"Scaling job {scaler.full_name} created, match the training job {job.namespace}/{job.name}",
                           now)
    update = decision.child(elastic.API_VERSION, scaler.KIND, scaler.namespace, scaler.name)
    update.owner_reference = owners.reference(job)
    update.status = status
    decision.step(steps.STEP_SCALER_BOUND, scaler.full_name, f"bound to TrainingJob {job.namespace}/{job.name}")
    return True


def bind(scaler: elastic.Scaler, job: elastic.TrainingJob | None, now: dt.datetime) -> effects.Effects:
    """The decision for a scaler seen on its own (its job looked up by ``spec.selector.name``
    in the scaler's namespace; None when there is none)."""
    decision = effects.Effects()
    bind_into(decision, scaler, job, now)
    return decision


# ---------------------------------------------------------------------------
# Selection (B.11)
# ---------------------------------------------------------------------------


def pending(p: Pass) -> list[elastic.Scaler]:
    """Unfinished scalers controlled by the job, not being deleted: ScaleOuts, then ScaleIns."""
    ordered = sorted(p.scalers, key=lambda s: (0 if isinstance(s, elastic.ScaleOut) else 1, s.name))
    return [s for s in ordered if owners.controls(p.job, {"metadata": s.metadata.dump()})
            and not statuses.is_scale_finished(s.status) and not is_deleting(s)]


def next_scaler(p: Pass) -> elastic.Scaler | None:
    """The scaler to run next: the oldest (kto) or the newest (upstream) by creationTimestamp;
    on a tie the first in ``pending`` order."""
    chosen: elastic.Scaler | None = None
    for scaler in pending(p):
        if chosen is None:
            chosen = scaler
            continue
        mine, best = scaler.metadata.creation_timestamp, chosen.metadata.creation_timestamp
        if mine is None or best is None:
            continue
        if (mine < best) if p.settings.scaler_order == "oldest-first" else (mine > best):
            chosen = scaler
    return chosen


def select(p: Pass) -> None:
    """Start the next scaler: ``Scaling`` on job and scaler, the job's ``currentScaler``."""
    scaler = next_scaler(p)
    if scaler is None:
        return
    message = f"trainingJobob({p.job.namespace}/{p.job.name}) execute {scaler.full_name}"
    status = _status_copy(scaler)
    statuses.initialized(status)
    _set_state(p, scaler, status, statuses.SCALING, statuses.REASON_SCALING_START, message)
    _write(p.decision, scaler, status)
    waiting = [s.full_name for s in pending(p) if s is not scaler]
    detail = "Scaling" + (f"; queued after it: {', '.join(waiting)}" if waiting else "")
    p.decision.step(steps.STEP_SCALER_PHASE, scaler.full_name, detail)
    p.requeue(0)


def _set_state(p: Pass, scaler: elastic.Scaler, status: ScalerStatus, type_: str, reason: str, message: str) -> None:
    """Upstream updateScalerState: the same condition on job and scaler; the job goes back to
    Running (and forgets the scaler) on a terminal condition."""
    terminal = type_ in (statuses.SCALE_SUCCEEDED, statuses.SCALE_FAILED)
    statuses.set_condition(p.status, type_, reason, message, p.now)
    p.status.phase = elastic.PHASE_RUNNING if terminal else elastic.PHASE_SCALING
    p.status.current_scaler = "" if terminal else scaler.full_name
    statuses.set_condition(status, type_, reason, message, p.now)
    status.phase = type_


def _finish(p: Pass, scaler: elastic.Scaler, status: ScalerStatus, message: str | None) -> None:
    """ScaleSucceeded (``message`` None) or ScaleFailed with ``message``, on both objects."""
    if message is None:
        type_, reason, text = statuses.SCALE_SUCCEEDED, f"{scaler.SCALE_TYPE}Succeeded", f"{scaler.full_name} has Succeeded"
        p.event("Normal", reason, text)
    else:
        type_, reason, text = statuses.SCALE_FAILED, f"{scaler.SCALE_TYPE}Failed", message
        p.event("Warning", reason, text)
    _set_state(p, scaler, status, type_, reason, text)
    p.decision.step(steps.STEP_SCALER_PHASE, scaler.full_name, f"{type_}: {text}")


# ---------------------------------------------------------------------------
# Execution (B.12)
# ---------------------------------------------------------------------------


def _current(p: Pass) -> elastic.Scaler | None:
    for scaler in p.scalers:
        if scaler.full_name == p.status.current_scaler:
            return scaler
    return None


def execute(p: Pass) -> None:
    """One pass of the job's current scaler (the job is in phase Scaling)."""
    if not p.status.current_scaler:
        p.status.phase = elastic.PHASE_RUNNING
        return
    if statuses.is_finished(p.status):
        return
    scaler = _current(p)
    if scaler is None or statuses.is_scale_finished(scaler.status):
        if scaler is not None:
            _catch_up(p, scaler)
        p.decision.step(steps.STEP_JOB_PHASE, p.job.name,
                        f"Running: {p.status.current_scaler} is gone or finished")
        p.status.current_scaler = ""
        p.status.phase = elastic.PHASE_RUNNING
        return
    if is_deleting(scaler):
        return
    status = _status_copy(scaler)
    statuses.initialized(status)
    report = validating.validate_scaler(scaler)
    if not report.ok:
        _finish(p, scaler, status, f"{scaler.full_name} is invalid: {reports.describe(report)}")
    elif isinstance(scaler, elastic.ScaleIn):
        assert isinstance(status, elastic.ScaleInStatus)
        _scale_in(p, scaler, status)
    else:
        assert isinstance(status, elastic.ScaleOutStatus)
        _scale_out(p, scaler, status)
    _write(p.decision, scaler, status)


def _catch_up(p: Pass, scaler: elastic.Scaler) -> None:
    """A scaler finished but the job's status was not written after it (a pass cut short
    between the two writes): give the job what the scaler did. Idempotent."""
    assert scaler.status is not None
    last = next((c for c in reversed(scaler.status.conditions or []) if c.type in
                 (statuses.SCALE_SUCCEEDED, statuses.SCALE_FAILED)), None)
    if last is not None:
        statuses.set_condition(p.status, last.type, last.reason or "", last.message or "", p.now)
    if not statuses.has(scaler.status, statuses.SCALE_SUCCEEDED):
        return
    pods = scaler.pod_names
    target = statuses.names(p.status.target_workers)
    if isinstance(scaler, elastic.ScaleOut):
        p.status.target_workers = target + [pod for pod in pods if pod not in target]
    else:
        p.status.target_workers = [w for w in target if w not in pods]
        p.status.current_workers = [w for w in statuses.names(p.status.current_workers) if w not in pods]


def _run_script(p: Pass, scaler: elastic.Scaler, status: ScalerStatus, workers: list[str]) -> str | None:
    """The scaler's script, or the hostfile rewrite to ``workers``, unless already done
    (``ScriptExecuted``). Returns the error text of a failed run."""
    if statuses.has(status, statuses.SCRIPT_EXECUTED):
        return None
    slot_count = planning.slots(p.job)
    custom = bool(scaler.spec.script)
    script = (planning.scaler_script(scaler, scaler.pod_names, slot_count) if custom
              else planning.hostfile_script(workers, slot_count))
    result = p.run("script" if custom else "hostfile", script)
    if result is not None and not result.ok:
        return result.output or "the command failed"
    message = f"trainingjob({p.job.namespace}/{p.job.name}): execute script on launcher for {scaler.full_name}"
    statuses.set_condition(status, statuses.SCRIPT_EXECUTED, "", message, p.now)
    if result is None:
        p.decision.step(steps.STEP_WAITING, scaler.full_name, "no launcher pod: the script is skipped")
    elif custom:
        p.decision.step(steps.STEP_SCRIPT_RUN, scaler.full_name, script)
    else:
        p.decision.step(steps.STEP_HOSTFILE_REWRITTEN, naming.launcher_name(p.job),
                        f"for {scaler.full_name}: {', '.join(workers) or '(no workers)'}")
    return None


# ---------------------------------------------------------------------------
# ScaleIn (B.13)
# ---------------------------------------------------------------------------


def _to_delete(p: Pass, scaler: elastic.ScaleIn) -> list[str]:
    """Which workers go: the named ones (each must exist) or the ``count`` with the highest
    indices. Raises ValueError with upstream's (or kto's) sentence."""
    pods = naming.sorted_workers(p.job.name, [name_of(w) for w in p.workers() if not objects.is_deleting(w)])
    wanted = scaler.spec.to_delete
    if wanted is not None and wanted.pod_names is not None:
        unknown = [name for name in wanted.pod_names if name not in pods]
        if unknown:
            raise ValueError(f".spec.toDelete.podNames names workers that do not exist: {', '.join(unknown)}")
        if not wanted.pod_names:
            raise ValueError(".spec.toDelete.podNames is empty")
        chosen = [pod for pod in pods if pod in wanted.pod_names]
    elif wanted is not None and wanted.count is not None and wanted.count > 0:
        if wanted.count >= len(pods):
            raise ValueError(f".spec.toDelete.count should be less than current replicas {len(pods)}")
        chosen = pods[len(pods) - wanted.count:]
    else:
        raise ValueError(".spec.toDelete.count or .spec.toDelete.podNames, only one of them should be set")
    remaining = len(pods) - len(chosen)
    minimum = p.job.worker.min_replicas
    if minimum is not None and remaining < minimum:
        raise ValueError(f".spec.toDelete would leave {remaining} workers, fewer than "
                         f"spec.etReplicaSpecs.worker.minReplicas {minimum}")
    if remaining < 1:
        raise ValueError(".spec.toDelete would leave no worker")
    return chosen


def _scale_in(p: Pass, scaler: elastic.ScaleIn, status: elastic.ScaleInStatus) -> None:
    if not status.to_delete_pods:
        try:
            chosen = _to_delete(p, scaler)
        except ValueError as exc:
            _finish(p, scaler, status, f"{scaler.full_name} get to delete workers name failed, error: {exc}")
            return
        status.to_delete_pods = chosen
        p.decision.step(steps.STEP_SCALER_TARGETS, scaler.full_name, f"removes {', '.join(chosen)}")
        p.requeue(0)
        return
    to_delete = list(status.to_delete_pods)
    remaining = [w for w in statuses.names(p.status.current_workers) if w not in to_delete]
    error = _run_script(p, scaler, status, remaining)
    if error is not None:
        _finish(p, scaler, status, f"{scaler.full_name} execute script failed, error: {error}")
        return
    existing = {name_of(w) for w in p.workers()}
    removable = [w for w in to_delete if w in existing]
    processes_left = False
    if not scaler.spec.script and removable:
        probe = p.run("probe", planning.probe_script(p.job))
        if probe is not None and not probe.ok:
            p.decision.step(steps.STEP_WAITING, scaler.full_name, f"listing the launcher's processes failed: {probe.output}")
            p.requeue()
            return
        shut = planning.shut_down(p.job, probe.output if probe is not None else "", removable)
        processes_left = len(shut) < len(removable)
        if processes_left:
            attached = ", ".join(w for w in removable if w not in shut)
            p.decision.step(steps.STEP_WAITING, scaler.full_name, f"launcher processes still attached to {attached}")
        removable = shut
    if removable:
        p.delete_workers(removable, "scale-in", f"removed by {scaler.full_name}")
    if not any(w in existing for w in to_delete):
        p.status.target_workers = [w for w in statuses.names(p.status.target_workers) if w not in to_delete]
        p.status.current_workers = remaining
        _finish(p, scaler, status, None)
    elif processes_left or removable:
        p.requeue()


# ---------------------------------------------------------------------------
# ScaleOut (B.14)
# ---------------------------------------------------------------------------


def _to_add(p: Pass, scaler: elastic.ScaleOut) -> list[str]:
    wanted = scaler.spec.to_add
    if wanted is None or wanted.count is None:
        raise ValueError(".spec.toAdd.count shouldn't be empty")
    if wanted.count <= 0:
        raise ValueError(".spec.toAdd.count shouldn be greater than 0")
    target = statuses.names(p.status.target_workers)
    maximum = p.job.worker.max_replicas
    if maximum is not None and len(target) + wanted.count > maximum:
        raise ValueError(f".spec.toAdd.count {wanted.count} would make {len(target) + wanted.count} workers, "
                         f"more than spec.etReplicaSpecs.worker.maxReplicas {maximum}")
    first = naming.max_index(target) + 1
    return [naming.worker_name(p.job.name, first + i) for i in range(wanted.count)]


def _scale_out_failed(p: Pass, scaler: elastic.ScaleOut, status: elastic.ScaleOutStatus, message: str) -> None:
    _finish(p, scaler, status, message)
    p.delete_workers(scaler.pod_names, "scale-out-failed", f"added by {scaler.full_name}, which failed")


def _scale_out(p: Pass, scaler: elastic.ScaleOut, status: elastic.ScaleOutStatus) -> None:
    if not status.add_pods:
        try:
            status.add_pods = _to_add(p, scaler)
        except ValueError as exc:
            _finish(p, scaler, status, str(exc))
            return
        p.decision.step(steps.STEP_SCALER_TARGETS, scaler.full_name, f"adds {', '.join(status.add_pods)}")
        p.requeue(0)
        return
    added = list(status.add_pods)
    mine = [w for w in p.workers() if labels_of(w).get(naming.LABEL_SCALE_OUT) == scaler.name]
    counts = statuses.worker_counts(mine)
    statuses.replica(status, statuses.WORKER)
    assert status.replica_statuses is not None
    status.replica_statuses[statuses.WORKER] = counts
    if (counts.active or 0) < len(added):
        started = statuses.scaling_started(status)
        if started is not None and (p.now - started).total_seconds() > scaler.timeout:
            _scale_out_failed(p, scaler, status, f"scaleout job {scaler.full_name} execution timeout")
            return
        for name in added:
            p.create_worker(name, f"added by {scaler.full_name}", scale_out=scaler.name)
        p.decision.step(steps.STEP_WAITING, scaler.full_name,
                        f"{counts.active or 0} of {len(added)} added workers Running")
        p.requeue()
        return
    current = statuses.names(p.status.current_workers)
    hosts = current + [w for w in added if w not in current]
    if not statuses.has(status, statuses.SCRIPT_EXECUTED) and p.waits_for_role(hosts):
        return
    error = _run_script(p, scaler, status, hosts)
    if error is not None:
        _scale_out_failed(p, scaler, status, f"{scaler.full_name} execute script failed, error: {error}")
        return
    target = statuses.names(p.status.target_workers)
    p.status.target_workers = target + [w for w in added if w not in target]
    # The launcher now knows every added worker: upstream leaves currentWorkers to the next
    # Running pass, which rewrites the hostfile once more with the same lines.
    p.status.current_workers = naming.sorted_workers(p.job.name, hosts)
    _finish(p, scaler, status, None)
