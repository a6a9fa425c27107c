"""What to do for one TrainingJob now (spec B.7, B.8, B.10, B.15).

In: the TrainingJob as stored, every child observed for it, the ScaleIns and
ScaleOuts of its namespace, the results of launcher commands already run for
this decision, ``now``, the settings, and where a fresh SSH key pair comes
from. Out: a ``effects.Effects`` (see that module for how to apply it).

Pure and level-triggered: everything is recomputed from the observed state,
so a repeated or interrupted pass resumes where the cluster is. The phase in
``status.phase`` drives it, as upstream's reconcile does:

* ``""`` / ``Created``: initialize, then one provisioning step (B.8): worker
  pods and Services (and the SSH Secret) → wait until all Running →
  ServiceAccount, Role, RoleBinding, ConfigMap, launcher pod → wait for the
  launcher.
* ``Running``: follow the launcher, follow the workers (hostfile rewritten
  when the Running set changes, failed workers replaced per the worker
  restartPolicy), then start the next scaler.
* ``Scaling``: follow the launcher, run the current scaler (``scaling``).
* ``Succeeded`` / ``Failed``: clean up per cleanPodPolicy; a failed job with
  ``restartPolicy: OnFailure`` restarts while ``restartCount < backoffLimit``.
* ``Suspended`` (annotation): delete every worker, Service and the launcher.

Where kto differs from upstream (docs/elastic-core.md): a job that fails
validation is marked Failed (``TrainingJobFailedValidation``) instead of
crashing the controller; a restarted job waits until the old pods are gone
before creating workers of the same names (upstream's QUIRK can stall); a
create that fails is retried (the status is written only after it) instead
of failing the job; a worker that drops out of Running while the job is
Running is announced once, and falling below ``minReplicas`` is announced,
not fatal; the launcher Role's ``pods/exec`` rule names exactly the job's
worker pods and follows them (``updates``), and a hostfile or script that
names a worker waits until the Role does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

from shared.api import common, elastic, objects
from shared.api.objects import name_of
from shared.core import effects, owners, reports
from shared.core.elastic import steps, defaulting, naming, planning, scaling, statuses, validating
from shared.core.elastic.working import NeedExec, Pass
from shared.core.elastic.settings import ElasticSettings

Manifest = common.Manifest


def decide(
    job: elastic.TrainingJob,
    children: Sequence[Manifest],
    scalers: Sequence[elastic.Scaler],
    now: dt.datetime,
    *,
    key_pair: Callable[[], planning.KeyPair],
    settings: ElasticSettings = ElasticSettings(),
    executed: Sequence[effects.ExecResult] = (),
) -> effects.Effects:
    """The decision for ``job`` given everything observed about it.

    ``children``: pods, Services, ConfigMaps, Secrets, ServiceAccounts, Roles and
    RoleBindings seen for the job; only those in its namespace that it controls count
    (and a Secret of the SSH Secret's name, which a user may have made). ``scalers``:
    the ScaleIns and ScaleOuts of its namespace that name it in ``spec.selector.name``
    (others are ignored); unbound ones are bound. ``key_pair`` is called only when the
    SSH Secret must be created. ``executed``: results of the commands earlier answers
    of this chain asked for (``Decision.execs``)."""
    if job.metadata.deletion_timestamp is not None:
        return effects.Effects()
    job = defaulting.set_defaults(job)
    status = job.status.model_copy(deep=True) if job.status is not None else elastic.TrainingJobStatus()
    p = Pass(
        job=job, status=status, children=_owned(job, children),
        scalers=[s for s in scalers if s.namespace == job.namespace and s.target_name == job.name],
        now=now, settings=settings, executed=executed, key_pair=key_pair,
    )
    try:
        bound = [scaler for scaler in p.scalers if scaling.bind_into(p.decision, scaler, job, now)]
        if bound:
            # This pass's selection sees only scalers bound before it; the echo of the binding
            # is no news to the worker that wrote it, so the next pass is asked for here.
            p.requeue(0)
        report = validating.validate(job)
        if report.ok:
            _dispatch(p)
        else:
            _invalid(p, report)
        _follow_role(p)
    except NeedExec as need:
        return effects.Effects(execs=[need.command])
    if statuses.differs(job.status, p.status):
        p.decision.status = p.status
    return p.decision


def _owned(job: elastic.TrainingJob, children: Sequence[Manifest]) -> list[Manifest]:
    """Children in the job's namespace that it controls (upstream lists by label across every
    namespace, spec B.5 HAZARD), plus the SSH Secret by name: a user may have made it."""
    secret = naming.secret_name(job)
    owned = []
    for child in children:
        if (objects.namespace_of(child) or "default") != job.namespace:
            continue
        if owners.controls(job, child) or (child.get("kind") == "Secret" and name_of(child) == secret):
            owned.append(child)
    return owned


def _dispatch(p: Pass) -> None:
    if (p.job.metadata.annotations or {}).get(naming.ANNOTATION_SUSPENDED) == "true":
        statuses.update(p.status, statuses.SUSPENDED, statuses.REASON_SUSPENDED,
                        f"TrainingJob {p.job.name} is waiting resource timeout.", p.now)
    phase = p.status.phase or ""
    if phase in ("", elastic.PHASE_CREATED):
        _initialize(p)
        _provision(p)
    elif phase == elastic.PHASE_RUNNING:
        _sync_launcher(p)
        _sync_workers(p)
        if p.status.phase == elastic.PHASE_RUNNING:
            scaling.select(p)
    elif phase == elastic.PHASE_SCALING:
        _sync_launcher(p)
        scaling.execute(p)
    elif phase == elastic.PHASE_SUCCEEDED:
        _cleanup(p)
    elif phase == elastic.PHASE_FAILED:
        _restart_or_cleanup(p)
    elif phase == elastic.PHASE_SUSPENDED:
        _delete_all(p, "suspend")
    else:
        p.decision.step(steps.STEP_WAITING, p.job.name, f"unknown phase {phase!r}: nothing to do")


def _invalid(p: Pass, report: reports.Report) -> None:
    """A job kto cannot run: Failed once (no restart: it would fail the same way), then
    cleaned up like a finished job."""
    if not statuses.has(p.status, statuses.FAILED):
        statuses.initialized(p.status)
        message = f"TrainingJob {p.job.name} failed validation because {reports.describe(report)}"
        statuses.update(p.status, statuses.FAILED, statuses.REASON_FAILED_VALIDATION, message, p.now)
        p.status.completion_time = p.status.completion_time or p.now
        p.event("Warning", statuses.REASON_FAILED_VALIDATION, message)
        p.decision.step(steps.STEP_JOB_PHASE, p.job.name, f"Failed: {message}")
    _cleanup(p)


def _initialize(p: Pass) -> None:
    if p.status.conditions is None:
        statuses.fresh(p.status)
        statuses.update(p.status, statuses.CREATED, statuses.REASON_CREATED,
                        f"TrainingJob {p.job.name} is created.", p.now)
    statuses.initialized(p.status)
    if p.status.start_time is None:
        p.status.start_time = p.now


# ---------------------------------------------------------------------------
# Provisioning (B.8)
# ---------------------------------------------------------------------------


def _provision(p: Pass) -> None:
    """The first provisioning step whose condition is not True, then stop."""
    if not statuses.has(p.status, statuses.WORKERS_CREATED):
        _create_workers(p)
    elif not statuses.has(p.status, statuses.WORKERS_READY):
        _wait_workers_running(p)
    elif not statuses.has(p.status, statuses.LAUNCHER_CREATED):
        _create_launcher(p)
    elif not statuses.has(p.status, statuses.RUNNING):
        _sync_launcher(p)


def _create_workers(p: Pass) -> None:
    job = p.job
    terminating = [name_of(pod) for pod in p.of_kind("Pod") if objects.is_deleting(pod)]
    if terminating:
        p.decision.step(steps.STEP_WAITING, job.name, f"pods of the previous run still terminating: "
                        f"{', '.join(sorted(terminating))}")
        p.requeue()
        return
    if job.attach_mode == elastic.ATTACH_SSH and p.settings.create_ssh_secret and p.child("Secret", job.name) is None:
        p.create(planning.ssh_secret(job, p.key_pair()), steps.STEP_CHILD_CREATED, "SSH Secret")
    replicas = job.worker.replicas or defaulting.DEFAULT_WORKER_REPLICAS
    names = statuses.names(p.status.target_workers) or [naming.worker_name(job.name, i) for i in range(replicas)]
    p.status.target_workers = names
    for name in names:
        p.create_worker(name, "initial worker")
    statuses.set_condition(p.status, statuses.WORKERS_CREATED, "",
                           f"create trainingjob({job.namespace}/{job.name}) workers", p.now)


_CAME_UP = frozenset({"Running", "Succeeded", "Failed"})
"""Worker pod phases past starting (a failed worker still to be replaced is no longer a target)."""


def _wait_workers_running(p: Pass) -> None:
    """B.8 step 2. Upstream waits until ``replicas`` workers are Running at one time; a worker
    that ends before the others are up (it ran and exited, or failed and is not replaced)
    holds the job in Created for ever. kto waits until no worker is still to come up: each
    is Running or has ended, and the job goes on with the Running ones, as when a worker
    leaves a Running job."""
    job = p.job
    _sync_workers(p)
    running = statuses.names(p.status.current_workers)
    if len(running) >= (job.worker.replicas or defaulting.DEFAULT_WORKER_REPLICAS):
        message = f"trainingjob({job.namespace}/{job.name}) all workers ({len(running)}) are running"
    else:
        target = statuses.names(p.status.target_workers)
        phases = {name_of(pod): objects.phase_of(pod) for pod in p.workers()}
        if not target or any(phases.get(name) not in _CAME_UP for name in target):
            return
        _below_minimum(p, target, running)
        message = (f"trainingjob({job.namespace}/{job.name}) all workers ({len(target)}) came up, "
                   f"{len(running)} still running")
    statuses.set_condition(p.status, statuses.WORKERS_READY, "", message, p.now)


def _create_launcher(p: Pass) -> None:
    job = p.job
    for kind, build in (("ServiceAccount", planning.service_account),
                        ("Role", lambda j: planning.role(j, p.exec_targets())),
                        ("RoleBinding", planning.role_binding)):
        if p.child(kind, naming.launcher_name(job)) is None:
            p.create(build(job), steps.STEP_CHILD_CREATED, kind)
    if p.child("ConfigMap", naming.config_name(job)) is None:
        workers = statuses.names(p.status.current_workers)
        p.create(planning.config_map(job, workers), steps.STEP_CHILD_CREATED,
                 f"hostfile: {', '.join(workers) or '(no workers)'}")
    if p.launcher() is None:
        p.create(planning.launcher_pod(job, p.settings), steps.STEP_CHILD_CREATED, "launcher pod")
    statuses.set_condition(p.status, statuses.LAUNCHER_CREATED, "",
                           f"create trainingjob({job.namespace}/{job.name}) launcher", p.now)


def _sync_launcher(p: Pass) -> None:
    """B.8 step 4: the job follows its launcher pod."""
    job, status = p.job, p.status
    launcher = p.launcher()
    launcher_counts = statuses.replica(status, statuses.LAUNCHER)
    if launcher is None:
        policy = job.launcher.restart_policy
        if policy == "Always":
            p.create(planning.launcher_pod(job, p.settings), steps.STEP_CHILD_CREATED, "launcher pod recreated")
        elif policy == "Never":
            message = f"job({job.namespace}/{job.name}) has failed"
            launcher_counts.failed = 1
            p.event("Warning", statuses.REASON_FAILED, message)
            if not statuses.is_evicted(status) and status.completion_time is None:
                status.completion_time = p.now
            _phase(p, statuses.FAILED, statuses.REASON_FAILED, message)
        return
    phase = objects.phase_of(launcher)
    if phase == "Succeeded":
        message = f"job({job.namespace}/{job.name}) successfully completed."
        launcher_counts.succeeded = 1
        p.event("Normal", statuses.REASON_SUCCEEDED, message)
        status.completion_time = status.completion_time or p.now
        _phase(p, statuses.SUCCEEDED, statuses.REASON_SUCCEEDED, message)
    elif phase == "Failed":
        message = f"job({job.namespace}/{job.name}) has failed"
        launcher_counts.failed = 1
        reason = str((launcher.get("status") or {}).get("reason") or statuses.REASON_FAILED)
        p.event("Warning", reason, message)
        if reason == "Evicted":
            reason = statuses.REASON_EVICTED
        elif not statuses.is_evicted(status) and status.completion_time is None:
            status.completion_time = p.now
        _phase(p, statuses.FAILED, reason, message)
    elif phase == "Running":
        launcher_counts.active = 1
        if not statuses.has(status, statuses.RUNNING):
            message = f"job({job.namespace}/{job.name}) is running."
            _phase(p, statuses.RUNNING, statuses.REASON_RUNNING, message)
            p.event("Normal", statuses.REASON_RUNNING, message)


def _follow_role(p: Pass) -> None:
    """kto's own: the launcher Role's ``pods/exec`` rule names exactly the job's workers,
    as they are once this decision is applied (a scale-out's new workers in the pass that
    creates them, a removed worker gone from it in the pass that deletes it). A Role not
    observed is left to ``_create_launcher``: upstream makes it once, with the launcher."""
    current = p.child("Role", naming.launcher_name(p.job))
    if current is None or objects.is_deleting(current):
        return
    targets = p.exec_targets()
    wanted = planning.role(p.job, targets)["rules"]
    if current.get("rules") == wanted:
        return
    p.decision.updates.append({**current, "rules": wanted})
    p.decision.step(steps.STEP_ROLE_FOLLOWS, naming.launcher_name(p.job),
                    f"pods/exec into {', '.join(targets) or 'no pod (no worker)'}")


def _phase(p: Pass, type_: str, reason: str, message: str) -> None:
    """Condition and phase ``type_``, recorded as a step when the phase changes."""
    if p.status.phase != type_:
        p.decision.step(steps.STEP_JOB_PHASE, p.job.name, f"{type_}: {message}")
    statuses.update(p.status, type_, reason, message, p.now)


# ---------------------------------------------------------------------------
# Workers (B.10)
# ---------------------------------------------------------------------------


def _needs_restart(policy: str, pod: Manifest) -> bool:
    phase = objects.phase_of(pod)
    if policy == "Always":
        return phase in ("Failed", "Unknown", "Succeeded")
    if policy == "OnFailure":
        return phase == "Failed"
    if policy == "ExitCode" and phase == "Failed":
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated is not None:
                return 128 < int(terminated.get("exitCode") or 0) < 255
    return False


def _sync_workers(p: Pass) -> None:
    job, status = p.job, p.status
    pods = p.workers()
    statuses.replica(status, statuses.WORKER)
    assert status.replica_statuses is not None
    status.replica_statuses[statuses.WORKER] = statuses.worker_counts(pods)
    previous = statuses.names(status.current_workers)
    running = naming.sorted_workers(job.name, [name_of(pod) for pod in pods if objects.phase_of(pod) == "Running"])
    for pod in pods:
        phase = objects.phase_of(pod)
        if name_of(pod) in previous and phase in ("Failed", "Unknown", "Succeeded"):
            evicted = (pod.get("status") or {}).get("reason") == "Evicted"
            what = "are evicted" if evicted else f"phase is {phase}"
            p.event("Warning", statuses.REASON_WORKER_FAILED,
                    f"trainingjob({job.namespace}/{job.name}): worker {name_of(pod)} {what}.")
    if running != previous and statuses.has(status, statuses.RUNNING):
        if p.waits_for_role(running):
            return
        result = p.run("hostfile", planning.hostfile_script(running, planning.slots(job)))
        if result is not None and not result.ok:
            p.decision.step(steps.STEP_WAITING, naming.launcher_name(job),
                            f"rewriting the hostfile failed: {result.output}")
            p.requeue()
            return
        if result is not None:
            p.decision.step(steps.STEP_HOSTFILE_REWRITTEN, naming.launcher_name(job),
                            f"Running workers: {', '.join(running) or '(none)'}")
        _below_minimum(p, previous, running)
    if not status.target_workers:
        status.target_workers = list(running)
    status.current_workers = running
    _replace_failed(p, pods, previous)


def _below_minimum(p: Pass, previous: list[str], running: list[str]) -> None:
    """The job goes on with fewer workers; below ``minReplicas`` it is said once (Horovod
    waits for ``--min-np`` hosts and the launcher decides; the job is not failed here)."""
    lost = [w for w in previous if w not in running]
    if lost:
        p.decision.step(steps.STEP_WORKER_REMOVED, ", ".join(lost),
                        f"left Running; the job continues on {len(running)} workers")
    minimum = p.job.worker.min_replicas
    if minimum is not None and len(running) < minimum <= len(previous):
        message = (f"trainingjob({p.job.namespace}/{p.job.name}): {len(running)} workers Running, fewer than "
                   f"minReplicas {minimum}")
        p.event("Warning", statuses.REASON_BELOW_MINIMUM, message)
        p.decision.step(steps.STEP_BELOW_MINIMUM, p.job.name, message)


def _replace_failed(p: Pass, pods: list[Manifest], previous: list[str]) -> None:
    """Failed workers get a successor of a fresh index (indices are never reused, failed pods
    are kept); a missing worker is replaced only under ``Always``."""
    job, status = p.job, p.status
    policy = job.worker.restart_policy or defaulting.DEFAULT_WORKER_RESTART_POLICY
    by_name = {name_of(pod): pod for pod in pods}
    target = statuses.names(status.target_workers)
    replaced = []
    for name in target:
        pod = by_name.get(name)
        if pod is not None:
            if _needs_restart(policy, pod):
                replaced.append(name)
            continue
        if policy == "Always":
            replaced.append(name)
        if name in previous:
            p.event("Warning", statuses.REASON_WORKER_FAILED,
                    f"trainingjob({job.namespace}/{job.name}): worker {name} phase is Deleted.")
    if not replaced:
        return
    first = naming.max_index(target) + 1
    successors = [naming.worker_name(job.name, first + i) for i in range(len(replaced))]
    for old, new in zip(replaced, successors):
        p.create_worker(new, f"replaces failed worker {old}")
    p.event("Normal", statuses.REASON_WORKER_CREATED,
            f"trainingjob({job.namespace}/{job.name}): recreate workers [{' '.join(successors)}] for failed workers")
    status.target_workers = [w for w in target if w not in replaced] + successors


# ---------------------------------------------------------------------------
# Finish, restart, suspend (B.15)
# ---------------------------------------------------------------------------


def _cleanup(p: Pass) -> None:
    """Every worker pod and worker Service go unless ``cleanPodPolicy`` is None (unset counts
    as Running; ``""`` keeps them, as upstream). The launcher, ConfigMap, Secret and RBAC
    objects stay for garbage collection with the job."""
    policy = p.job.spec.clean_pod_policy
    if policy is None or policy in ("Running", "All"):
        p.delete_workers(None, "clean-pod-policy", f"job finished, cleanPodPolicy {policy or 'Running'}")


def _delete_all(p: Pass, reason: str) -> None:
    p.delete_workers(None, reason, f"job {reason}")
    p.delete_launcher(reason)


def _restart_or_cleanup(p: Pass) -> None:
    job, status = p.job, p.status
    count = status.restart_count or 0
    if job.spec.restart_policy != "OnFailure" or count >= (job.spec.backoff_limit or 0):
        _cleanup(p)
        return
    _delete_all(p, "restart")
    status.restart_count = count + 1
    status.conditions = []
    status.current_workers = []
    status.target_workers = []
    statuses.fresh(status)
    statuses.update(status, statuses.CREATED, statuses.REASON_CREATED, f"TrainingJob {job.name} is created.", p.now)
    p.event("Normal", statuses.REASON_SUCCEEDED, "Delete subresource for restart")
    p.decision.step(steps.STEP_JOB_PHASE, job.name,
                    f"Created: restart {count + 1} of {job.spec.backoff_limit} after failure")
    p.requeue()
