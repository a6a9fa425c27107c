"""Kubeflow Trainer v2's TrainJob (``trainer.kubeflow.org/v1alpha1``) as a
:class:`shared.core.families.Family`.

In: a TrainJob document, every object observed for it (its JobSet, PodGroup, MPI
Secret and hostfile, runtime snapshot, and the runtime its ``runtimeRef`` names, which
the reconciler's hydration reads from the API server and a pass's basis carries), the
clock. Out: its pass's effects (:mod:`shared.core.trainer.deciding`), replayed from a
basis, and ``kto plan``'s dry run of a TrainJob with its runtime given beside it.

The reconciler writes a TrainJob's status, in the pass that makes its objects, as
upstream's TrainJob controller does in one reconcile: the status is the JobSet's and
the plan's (whether the objects could be made), not a count of pods. No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from shared.api import common, objects
from shared.core import admitting, basis, effects, errors, outcomes, plans
from shared.core import settings as operator_settings
from shared.core.trainer import deciding, planning, podsets, sshkeys, validating

Manifest = dict[str, Any]

CONTROLLER = "trainjob_controller"
"""Upstream's controller name (the ``controller`` label of reconcile metrics)."""
RUNTIME_KINDS = frozenset({podsets.TRAINING_RUNTIME, podsets.CLUSTER_TRAINING_RUNTIME})


@dataclasses.dataclass(frozen=True)
class Subject(common.Named):
    """A TrainJob as Events name it (``shared.kube.recording.Regarding``)."""

    KIND: ClassVar[str] = podsets.KIND
    CONTROLLER_NAME: ClassVar[str] = "trainjob-controller"
    api_version: str
    metadata: common.ObjectMeta

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> Subject:
        meta = objects.meta(document)
        return cls(podsets.API_VERSION, common.ObjectMeta(
            name=objects.name_of(document), namespace=objects.namespace_of(document), uid=objects.uid_of(document),
            resource_version=objects.resource_version_of(document) or None, labels=dict(meta.get("labels") or {}) or None))


def _no_key() -> sshkeys.KeyPair:
    return sshkeys.KeyPair(b"", b"")


def is_runtime(document: Any) -> bool:
    return isinstance(document, Mapping) and document.get("kind") in RUNTIME_KINDS


@dataclasses.dataclass(frozen=True)
class TrainJobs(outcomes.WrittenByReconciler):
    """The TrainJob family (see the module)."""

    name: str = podsets.API_VERSION
    kinds: frozenset[str] = frozenset({podsets.KIND})
    job_types: frozenset[tuple[str, str]] = frozenset({(podsets.API_VERSION, podsets.KIND)})
    api_versions: frozenset[str] = frozenset({podsets.API_VERSION})
    operator_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    status_writer: Literal["status", "reconciler"] = "reconciler"
    controllers: Mapping[str, str] = dataclasses.field(default_factory=lambda: {podsets.KIND: CONTROLLER})
    admitted: tuple[admitting.Target, ...] = validating.TARGETS
    """Upstream's validating webhooks of the TrainJob and both runtime kinds (the TrainJob's
    judged against the runtime it names, read from the API server)."""

    def serves(self, document: Mapping[str, Any] | None) -> bool:
        return True

    def written_version(self, document: Mapping[str, Any]) -> str:
        return podsets.API_VERSION

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None  # its objects name it as their controller

    def decide(self, document: Manifest, children: Sequence[Manifest], context: effects.Context) -> effects.Effects:
        """Upstream's reconcile of the TrainJob (:func:`deciding.decide`), its status and Events
        included (the reconciler writes them)."""
        decision = deciding.decide(document, children, context.now, context.key_pair(sshkeys.KeyPair),
                                   context.refused)
        decision.regarding, decision.child_events = Subject.of(document), True
        return decision

    def replan(self, inputs: basis.Inputs, same_command: plans.SameCommand) -> dict[str, Any]:
        context = effects.Context(inputs.now, (), {sshkeys.KeyPair: _no_key})
        return self.decide(inputs.job, inputs.children, context).plan()

    def dry_run(self, document: Any, settings: operator_settings.OperatorSettings, stand_in_key: str,
                now: dt.datetime, beside: Sequence[Any] = ()) -> plans.DryRun:
        """The objects of a TrainJob's first reconcile, its runtime taken from the documents
        ``beside`` it; a runtime document plans nothing of its own."""
        outcome = plans.DryRun()
        if is_runtime(document):
            return outcome
        if not isinstance(document, dict) or document.get("kind") != podsets.KIND:
            outcome.errors.append(f"kind: Unsupported value: {document.get('kind') if isinstance(document, dict) else None!r}")
            return outcome
        job = {**document, "metadata": {"namespace": "default", **objects.meta(document)}}
        group, kind, name = planning.runtime_ref(job)
        runtimes = [d for d in beside if is_runtime(d) and d.get("kind") == kind and objects.name_of(d) == name]
        if not runtimes:
            outcome.errors.append(f"spec.runtimeRef: {kind} {name!r} is not among the documents given")
            return outcome
        try:
            plan = planning.build(job, runtimes[0])
        except errors.PlanError as exc:
            outcome.errors.append(str(exc))
            return outcome
        keys = sshkeys.KeyPair(stand_in_key.encode(), stand_in_key.encode())
        if plan.mpi:
            outcome.children.append(planning.ssh_secret(job, keys))
        outcome.children.extend(o for o in (plan.hostfile, plan.pod_group, plan.hpa, plan.jobset) if o is not None)
        return outcome

    def unbound(self, children: Sequence[Manifest], now: dt.datetime) -> tuple[list[plans.Unbound], list[str]]:
        return [], []


FAMILY = TrainJobs()
