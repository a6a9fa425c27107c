"""One sync of an MPIJob v2beta1 (spec A.7, A.11, A.13–A.16) as a pure decision.

In: the MPIJob as stored (un-defaulted), every object observed for it — the
Service ``<job>``, ConfigMap ``<job>-config``, Secret ``<job>-ssh``, Job
``<job>-launcher``, PodGroup ``<job>``, and the pods of the job's namespace
labelled ``training.kubeflow.org/job-name=<job>`` (workers, and the launcher
Job's pods) — ``now``, the operator settings, a source of SSH key pairs
(called only when a Secret must be made) and the values of PriorityClasses
the templates name (gang scheduling only). Out: its :class:`~shared.core.effects.Effects`
(``steps`` say the sync in words, in upstream's order of work; ``error`` where it stopped).

Level-triggered: the same inputs give the same decision, so a repeated
record or a restarted worker changes nothing. The clock and the key source
are arguments; nothing is read inside.

Where kto differs from upstream (docs/mpi-v2-core.md):
* scale-down picks workers by the index in their *name*, among pods the job
  controls: upstream compares the ``replica-index`` label, which is shifted
  by one under ``runLauncherAsWorker`` (worker ``replicas-1`` was deleted and
  recreated), gives up silently on a pod without the label, and deletes a
  labelled pod it does not own;
* ``WaitForWorkersReady`` is honoured after a suspension too (mpi-operator#615):
  a suspended launcher Job is unsuspended only once every worker is Ready;
* pods already being deleted are not deleted again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence

from shared.api import common, mpijobs, objects
from shared.core import conditions, effects, events, naming, owners, settings
from shared.core.mpi_v2 import defaulting, planning, scheduling, sshkeys, statuses, validating

Manifest = common.Manifest
Event = events.Event

RESOURCE_EXISTS_REASON = "ErrResourceExists"
RESTART_POLICY_REASON = "SetPodTemplateRestartPolicy"
RESTART_POLICY_MESSAGE = "Restart policy in pod template overridden by restart policy in replica spec"


@dataclasses.dataclass
class Observed:
    """The children of one job found among the observed objects."""

    service: Manifest | None = None
    config_map: Manifest | None = None
    secret: Manifest | None = None
    launcher: Manifest | None = None
    pod_group: Manifest | None = None
    pods: dict[str, Manifest] = dataclasses.field(default_factory=dict)
    """Every observed pod of the job's namespace, by name."""
    launcher_pods: list[Manifest] = dataclasses.field(default_factory=list)
    """Pods the launcher Job controls."""


def _subject(job: mpijobs.MPIJob) -> str:
    """How a step names the job: ``MPIJob namespace/name``."""
    return f"{mpijobs.KIND} {job.namespace}/{job.name}"


_name = objects.name_of


def _ours(job: mpijobs.MPIJob, child: Manifest) -> bool:
    return owners.controls(job, child)


def observe(job: mpijobs.MPIJob, children: Sequence[Manifest]) -> Observed:
    found = Observed()
    wanted = {
        ("Service", planning.service_name(job)): "service",
        ("ConfigMap", planning.config_name(job)): "config_map",
        ("Secret", planning.secret_name(job)): "secret",
        ("Job", planning.launcher_name(job)): "launcher",
        ("PodGroup", job.name): "pod_group",
    }
    for child in children:
        if (objects.namespace_of(child) or job.namespace) != job.namespace:
            continue
        kind = child.get("kind")
        if kind == "Pod":
            found.pods[_name(child)] = child
        elif (kind, _name(child)) in wanted:
            setattr(found, wanted[(str(kind), _name(child))], child)
    if found.launcher is not None:
        uid = objects.uid_of(found.launcher)
        found.launcher_pods = [
            pod for pod in found.pods.values() if owners.is_controlled_by(pod, "Job", planning.launcher_name(job), uid)
        ]
    return found


def resource_exists(child: Manifest) -> Event:
    return Event("Warning", RESOURCE_EXISTS_REASON,
                 f'Resource "{_name(child)}" of Kind "{child.get("kind")}" already exists and is not managed by MPIJob')


def creation_failed(child: Manifest, error: str) -> Event:
    """The Warning the service layer records when creating a worker pod or the launcher Job fails."""
    what = "launcher pod" if child.get("kind") == "Job" else "worker pod"
    return Event("Warning", statuses.FAILED_REASON, f"{what} created failed: {error}")


def _foreign(decision: effects.Effects, child: Manifest) -> effects.Effects:
    event = resource_exists(child)
    return decision.stop(effects.subject_of(child), event.message, event)


def worker_index(job: mpijobs.MPIJob, pod: Manifest) -> int | None:
    """``i`` of a pod named ``<job>-worker-<i>``, else None."""
    prefix = f"{job.name}{naming.MPI_WORKER_SUFFIX}-"
    name = _name(pod)
    digits = name[len(prefix):]
    return int(digits) if name.startswith(prefix) and digits.isdigit() and str(int(digits)) == digits else None


def _get_or_create(decision: effects.Effects, job: mpijobs.MPIJob, current: Manifest | None,
                   desired: Callable[[], Manifest], update: Callable[[Manifest], Manifest | None]) -> bool:
    """Create the ``desired`` child when missing; stop on a foreign one; else update it when
    ``update`` returns a changed copy."""
    if current is None:
        decision.create(desired(), "missing")
        return True
    if not _ours(job, current):
        _foreign(decision, current)
        return False
    updated = update(current)
    if updated is not None:
        decision.update(updated, "differs from the job")
    return True


def _replaced(current: Manifest, field: str, desired: Manifest) -> Manifest | None:
    """``current`` with ``desired[field]``, or None when they already agree."""
    if current.get(field) == desired[field]:
        return None
    return {**current, field: desired[field]}


def _regenerated(job: mpijobs.MPIJob, current: Manifest,
                 new_ssh_key: Callable[[], sshkeys.KeyPair]) -> Manifest | None:
    """A.8.3: a Secret whose data keys are not exactly the two key files gets a new pair; keys
    are never rotated otherwise."""
    if planning.secret_is_complete(current):
        return None
    return {**current, "data": planning.desired_secret(job, new_ssh_key())["data"]}


def _reconcile_workers(decision: effects.Effects, job: mpijobs.MPIJob, found: Observed,
                       operator: settings.OperatorSettings) -> list[Manifest] | None:
    """A.8.4 / A.14: scale down above ``replicas``, create missing indices. The worker list of
    this sync in index order, or None after a foreign pod stopped the sync."""
    if job.replica(mpijobs.WORKER) is None:
        return []
    replicas = job.worker_replicas
    listed = [pod for pod in found.pods.values() if planning.is_worker_pod(job, pod)]
    if len(listed) > replicas:
        for pod in sorted(listed, key=_name):
            index = worker_index(job, pod)
            if index is not None and index >= replicas and _ours(job, pod) and not objects.is_deleting(pod):
                decision.delete(pod, "scale-down", f"index {index} ≥ replicas {replicas}")
    workers: list[Manifest] = []
    for index in range(replicas):
        existing = found.pods.get(planning.worker_name(job, index))
        if existing is None:
            created = planning.desired_worker(job, index, operator)
            decision.create(created, "missing worker")
            workers.append(created)
        elif not _ours(job, existing):
            _foreign(decision, existing)
            return None
        else:
            workers.append(existing)
    return workers


def _clean_up_workers(decision: effects.Effects, job: mpijobs.MPIJob, found: Observed,
                      operator: settings.OperatorSettings, reason: str) -> bool:
    """A.15: delete worker indices ``0..replicas-1`` (under ``Running`` only Running and
    Pending ones) and the PodGroup. False after a foreign object stopped the sync."""
    running_only = job.run_policy.clean_pod_policy == "Running"
    if job.replica(mpijobs.WORKER) is not None:
        for index in range(job.worker_replicas):
            pod = found.pods.get(planning.worker_name(job, index))
            if pod is None:
                continue
            if not _ours(job, pod):
                _foreign(decision, pod)
                return False
            if running_only and objects.phase_of(pod) not in ("Running", "Pending"):
                continue
            if not objects.is_deleting(pod):
                decision.delete(pod, reason, f"cleanPodPolicy {job.run_policy.clean_pod_policy}")
    if operator.gang_scheduling and found.pod_group is not None:
        if not _ours(job, found.pod_group):
            _foreign(decision, found.pod_group)
            return False
        if not objects.is_deleting(found.pod_group):
            decision.delete(found.pod_group, reason, "gang no longer needed")
    return True


def _ready(pod: Manifest) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def _restart_policy_warning(job: mpijobs.MPIJob, decision: effects.Effects) -> None:
    if planning.launcher_template_sets_restart_policy(job):
        decision.events.append(Event("Warning", RESTART_POLICY_REASON, RESTART_POLICY_MESSAGE))


def _write_status(decision: effects.Effects, job: mpijobs.MPIJob, status: common.JobStatus) -> effects.Effects:
    old = job.status.dump() if job.status is not None else {}
    if old != status.dump():
        decision.status = status
    return decision


def _sync_launcher_suspension(decision: effects.Effects, job: mpijobs.MPIJob, launcher: Manifest,
                              workers: list[Manifest], operator: settings.OperatorSettings) -> None:
    """A.7 step 10: align the launcher Job's ``suspend`` with the MPIJob's."""
    launcher_suspended = bool((launcher.get("spec") or {}).get("suspend"))
    if not job.suspended and launcher_suspended:
        if job.spec.launcher_creation_policy != mpijobs.AT_STARTUP and not all(_ready(w) for w in workers):
            decision.step("wait", _subject(job), "the launcher stays suspended until every worker is Ready")
            return
        current = launcher
        if (launcher.get("status") or {}).get("startTime"):
            # A Job's template is immutable once it has a startTime: clear it first.
            current = {**launcher, "status": {k: v for k, v in launcher["status"].items() if k != "startTime"}}
            write = decision.child(str(launcher.get("apiVersion")), str(launcher.get("kind")), job.namespace, _name(launcher))
            write.status, write.before_update = current["status"], True
            decision.step("clear status.startTime of", effects.subject_of(launcher), "resume")
        _restart_policy_warning(job, decision)
        decision.update(planning.resumed_launcher(job, current, operator), "resume")
    elif job.suspended and not launcher_suspended:
        updated = {**launcher, "spec": {**(launcher.get("spec") or {}), "suspend": True}}
        decision.update(updated, "suspend")


def decide(
    job: mpijobs.MPIJob,
    children: Sequence[Manifest],
    now: dt.datetime,
    operator: settings.OperatorSettings,
    new_ssh_key: Callable[[], sshkeys.KeyPair],
    priorities: Mapping[str, int] | None = None,
) -> effects.Effects:
    """The decision of one sync of ``job`` (A.7), given everything observed for it.

    ``new_ssh_key`` is called only when the Secret must be created or regenerated
    (the service layer passes ``shared.keygen.mpi_key_pair``).
    ``priorities``: PriorityClass name → value, for the PodGroup's minResources."""
    job = defaulting.set_defaults(job)
    skipped = effects.left_alone(_subject(job), job.run_policy.managed_by, mpijobs.MANAGED_BY_MPI_OPERATOR,
                                 job.metadata.deletion_timestamp is not None)
    if skipped is not None:
        return skipped
    decision = effects.Effects()
    report = validating.validate(job)
    if not report.ok:
        decision.events.append(validating.event(report))
        decision.step("stop", _subject(job), "invalid (not retried until the job changes)")
        return decision
    found = observe(job, children)
    status = (job.status or common.JobStatus()).model_copy(deep=True)
    decision.events += statuses.created(job, status, now)

    if conditions.is_finished(status) and status.completion_time is not None:
        if job.run_policy.clean_pod_policy in ("All", "Running"):
            if not _clean_up_workers(decision, job, found, operator, "clean-pod-policy"):
                return decision
            status.replica_statuses = {**(status.replica_statuses or {}), mpijobs.WORKER: common.ReplicaStatus()}
            return _write_status(decision, job, status)
        decision.step("stop", _subject(job), "finished")
        return decision

    if status.start_time is None and not job.suspended:
        status.start_time = now
    launcher = found.launcher
    if launcher is not None and not _ours(job, launcher):
        return _foreign(decision, launcher)

    workers: list[Manifest] = []
    if not statuses.launcher_done(launcher):
        config_map = planning.desired_config_map(job, list(found.pods.values()), operator)
        if not (
            _get_or_create(decision, job, found.service, lambda: planning.desired_service(job),
                           lambda current: planning.service_update(job, current))
            and _get_or_create(decision, job, found.config_map, lambda: config_map,
                               lambda current: _replaced(current, "data", config_map))
            and _get_or_create(decision, job, found.secret, lambda: planning.desired_secret(job, new_ssh_key()),
                               lambda current: _regenerated(job, current, new_ssh_key))
        ):
            return decision
        if not job.suspended:
            pod_group = scheduling.desired_pod_group(job, operator, owners.reference(job), priorities or {})
            if pod_group is not None and not _get_or_create(
                decision, job, found.pod_group, lambda: pod_group, lambda current: _replaced(current, "spec", pod_group)
            ):
                return decision
            reconciled = _reconcile_workers(decision, job, found, operator)
            if reconciled is None:
                return decision
            workers = reconciled
        if launcher is None:
            if job.spec.launcher_creation_policy == mpijobs.AT_STARTUP or all(_ready(w) for w in workers):
                launcher = planning.desired_launcher(job, operator)
                _restart_policy_warning(job, decision)
                decision.create(launcher, "missing launcher")
            else:
                decision.step("wait", _subject(job), "the launcher is created once every worker is Ready")

    if found.launcher is not None:
        _sync_launcher_suspension(decision, job, found.launcher, workers, operator)
    if job.suspended and not _clean_up_workers(decision, job, found, operator, "suspend"):
        return decision
    outcome = statuses.compute(job, status, launcher, found.launcher_pods, workers, now)
    decision.events += outcome.events
    return _write_status(decision, job, outcome.status)
