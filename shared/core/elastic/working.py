"""The working state of one ``decide`` call on a TrainingJob.

In: the defaulted job, its observed children and scalers, results of
launcher commands already run, ``now`` and the settings. Out: a ``Pass`` that
the phase handlers (``deciding``) and the scaler rules (``scaling``) read
and fill: the job status being built and the ``Decision``. Pure: a launcher
command whose result is not known yet interrupts the pass (``NeedExec``)
instead of being run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Literal

from shared.api import common, elastic
from shared.api.objects import is_deleting, labels_of, name_of
from shared.core import effects
from shared.core.elastic import steps, naming, planning
from shared.core.elastic.settings import ElasticSettings
from shared.core.events import Event

Manifest = common.Manifest


class NeedExec(Exception):
    """A launcher command must run before the pass can go on; ``decide`` answers with it."""

    def __init__(self, command: effects.Exec) -> None:
        super().__init__(command.script)
        self.command = command


@dataclasses.dataclass
class Pass:
    job: elastic.TrainingJob
    """Defaulted and validated."""
    status: elastic.TrainingJobStatus
    """The status being built (a copy of the stored one)."""
    children: list[Manifest]
    """The observed children in the job's namespace that it controls (and Secrets by name)."""
    scalers: list[elastic.Scaler]
    """The observed ScaleIns and ScaleOuts of the job's namespace naming this job."""
    now: dt.datetime
    settings: ElasticSettings
    executed: Sequence[effects.ExecResult]
    key_pair: Callable[[], planning.KeyPair]
    decision: effects.Effects = dataclasses.field(default_factory=effects.Effects)

    # -- children ----------------------------------------------------------

    def of_kind(self, kind: str) -> list[Manifest]:
        return [c for c in self.children if c.get("kind") == kind]

    def child(self, kind: str, name: str) -> Manifest | None:
        for child in self.of_kind(kind):
            if name_of(child) == name:
                return child
        return None

    def workers(self) -> list[Manifest]:
        """The job's worker pods (any phase, also those being deleted), as upstream lists them."""
        return [p for p in self.of_kind("Pod") if labels_of(p).get(naming.LABEL_ROLE) == naming.ROLE_WORKER]

    def worker_services(self) -> list[Manifest]:
        return [s for s in self.of_kind("Service") if labels_of(s).get(naming.LABEL_ROLE) == naming.ROLE_WORKER]

    def launcher(self) -> Manifest | None:
        return self.child("Pod", naming.launcher_name(self.job))

    def exec_targets(self) -> list[str]:
        """The workers the launcher's Role must let it exec into, sorted by index: every
        worker pod of the job not being deleted, with those this decision creates and
        without those it deletes."""
        deleted = {ref.name for ref in self.decision.deletes if ref.kind == "Pod"}
        names = {name_of(pod) for pod in self.workers() if not is_deleting(pod)}
        names |= {name_of(m) for m in self.decision.creates
                  if m.get("kind") == "Pod" and labels_of(m).get(naming.LABEL_ROLE) == naming.ROLE_WORKER}
        return naming.sorted_workers(self.job.name, names - deleted)

    def waits_for_role(self, hosts: Sequence[str]) -> bool:
        """True, and the decision waits, while the launcher's Role as observed does not let
        it exec into every one of ``hosts``: the launcher reaches a host as soon as its
        hostfile or a scaler's script names it. No Role observed: nothing to wait for."""
        observed = self.child("Role", naming.launcher_name(self.job))
        allowed = planning.exec_allowed(observed) if observed is not None else None
        refused = [] if allowed is None else [host for host in hosts if host not in allowed]
        if not refused:
            return False
        self.decision.step(steps.STEP_WAITING, naming.launcher_name(self.job),
                           f"the launcher's Role does not name {', '.join(refused)} yet")
        self.requeue()
        return True

    # -- effects -------------------------------------------------------------

    def create(self, manifest: Manifest, step: str, detail: str) -> None:
        self.decision.creates.append(manifest)
        self.decision.step(step, name_of(manifest), detail)

    def create_worker(self, name: str, detail: str, scale_out: str | None = None) -> None:
        """Worker ``name`` and its Service, each unless observed (the Service also for a pod
        that exists: upstream creates a missing one right after its pod)."""
        if self.child("Pod", name) is None:
            self.create(planning.worker_pod(self.job, name, scale_out), steps.STEP_WORKER_ADDED, detail)
        if self.child("Service", name) is None:
            self.decision.creates.append(planning.worker_service(self.job, name))

    def delete_workers(self, names: Sequence[str] | None, reason: str, detail: str) -> None:
        """Services first, then pods (grace period 0), of the named workers, or of all of
        them when ``names`` is None. An empty list deletes nothing (upstream's nil = all
        hazard, B.13, cannot happen here: "all" is only ever asked for explicitly)."""
        wanted = None if names is None else set(names)
        for service in self.worker_services():
            if (wanted is None or name_of(service) in wanted) and not is_deleting(service):
                self.decision.deletes.append(effects.ChildRef.of(service, reason))
        for pod in self.workers():
            if (wanted is None or name_of(pod) in wanted) and not is_deleting(pod):
                self.decision.deletes.append(effects.ChildRef.of(pod, reason))
                self.decision.step(steps.STEP_WORKER_REMOVED, name_of(pod), detail)

    def delete_launcher(self, reason: str) -> None:
        launcher = self.launcher()
        if launcher is not None and not is_deleting(launcher):
            self.decision.deletes.append(effects.ChildRef.of(launcher, reason))

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))

    def requeue(self, seconds: float | None = None) -> None:
        wanted = self.settings.requeue_seconds if seconds is None else seconds
        current = self.decision.requeue_after
        self.decision.requeue_after = wanted if current is None else min(current, wanted)

    # -- the launcher --------------------------------------------------------

    def run(self, purpose: str, script: str) -> effects.ExecResult | None:
        """The result of running ``script`` in the launcher's first container. None when
        there is no launcher pod (upstream skips the command silently). Raises ``NeedExec``
        when it has not been run yet in this chain."""
        launcher = self.launcher()
        if launcher is None:
            return None
        containers = (launcher.get("spec") or {}).get("containers") or [{}]
        command = effects.Exec(
            self.job.namespace, name_of(launcher), str(containers[0].get("name", "")),
            ("/bin/sh", "-c", script), purpose)
        for result in self.executed:
            if result.exec == command:
                return result
        raise NeedExec(command)
