"""The kubeflow.org/v1 family: TFJob, PyTorchJob, MXJob, XGBoostJob, PaddleJob, JAXJob
and MPIJob (as written in v1), as a :class:`shared.core.families.Family`.

In: a job document of one of the six kinds (an MPIJob written in v1), its observed
children, the clock. Out: its pass's effects (:meth:`KubeflowV1.decide`), replayed
(:meth:`KubeflowV1.replan`), its status (through :mod:`shared.core.preparing`) and
``kto plan``'s dry run. The family's core is the rest of ``shared.core``: ``planning``,
``deciding``, ``statuses``, ``frameworks`` (one plugin per kind). The status
service writes its jobs' status. No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from shared.api import jobs, mpijobs, objects
from shared.core import admitting, basis, conditions, defaulting, effects, outcomes, planning, plans, preparing
from shared.core import deciding, validating
from shared.core import settings as operator_settings

Manifest = dict[str, Any]


def previous_version(previous: Manifest | None, current: Manifest) -> jobs.Job | None:
    """The job as the last decision saw it, when ``current`` is an update of it
    (same uid, another spec); None otherwise, or if it cannot be loaded."""
    if previous is None or previous is current:
        return None
    if objects.uid_of(previous) != objects.uid_of(current) or previous.get("spec") == current.get("spec"):
        return None
    try:
        return jobs.load(previous)
    except jobs.LoadError:
        return None


_RULES = admitting.Rules(jobs.load, validating.validate, defaulting.stored_defaults, defaults_valid_only=True)


@dataclasses.dataclass(frozen=True)
class KubeflowV1:
    """The six kubeflow.org/v1 kinds (see the module)."""

    name: str = jobs.API_VERSION
    kinds: frozenset[str] = frozenset(jobs.KINDS)
    job_types: frozenset[tuple[str, str]] = frozenset((jobs.API_VERSION, kind) for kind in jobs.KINDS)
    api_versions: frozenset[str] = frozenset({jobs.API_VERSION})
    operator_names: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {cls.CONTROLLER_NAME: kind for kind, cls in jobs.KINDS.items()})
    status_writer: Literal["status", "reconciler"] = "status"
    controllers: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {kind: cls.CONTROLLER_NAME for kind, cls in jobs.KINDS.items()})
    admitted: tuple[admitting.Target, ...] = tuple(
        admitting.Target(jobs.GROUP, jobs.VERSION, cls.KIND, cls.PLURAL, cls.SINGULAR, True, _RULES)
        for cls in jobs.KINDS.values() if cls is not jobs.MPIJob)
    """The five kinds with an upstream webhook (MPIJob kubeflow.org/v1 has none, as upstream: its
    controller validates), judged as written, defaulted only when valid."""

    def serves(self, document: Mapping[str, Any] | None) -> bool:
        """Every job of its kinds but an MPIJob written in v2beta1."""
        return not mpijobs.is_v2beta1(document)

    def written_version(self, document: Mapping[str, Any]) -> str:
        return str(document.get("apiVersion") or "")

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None  # its children are keyed by their controller or their labels

    def replan(self, inputs: basis.Inputs, same_command: plans.SameCommand) -> dict[str, Any]:
        settings = plans.settings_from(operator_settings.OperatorSettings, inputs.extra.get("settings"))
        kind = str(inputs.job.get("kind") or "")
        try:
            job = jobs.load(inputs.job)
        except jobs.LoadError as exc:
            raise plans.Unreplayable(f"the {kind} does not load: {exc}") from None
        old = previous_version(inputs.old, inputs.job)
        return deciding.decide(job, inputs.children, inputs.now, settings, old).plan()

    def decide(self, document: Manifest, children: Sequence[Manifest], context: effects.Context) -> effects.Effects:
        """:func:`shared.core.deciding.decide` on the job as loaded, compared with the version
        the last pass decided on; a verdict a predecessor recorded on an unfinished job is said
        again (it may have died before saying it). A job that does not load is announced as
        failing validation, and nothing is made for it."""
        try:
            job = jobs.load(document)
        except jobs.LoadError as exc:
            return effects.failed_validation(document, exc)
        settings = context.settings_of(operator_settings.OperatorSettings)
        old = previous_version(context.previous, document)
        decision = deciding.decide(job, children, context.now, settings, old)
        decision.regarding, decision.child_events = job, True
        decision.previous = context.previous if old is not None else None
        decision.settings = dataclasses.asdict(settings)
        recorded = outcomes.recorded_verdict(job)
        if decision.verdict is None and recorded is not None and not conditions.is_finished(job.status):
            decision.announce = recorded
        return decision

    def prepare(self, document: Manifest) -> preparing.Prepared | None:
        return preparing.prepare(document)

    def status(self, document: Manifest, children: Sequence[Manifest], now: dt.datetime, *, unconfirmed: bool,
               prepared: preparing.Prepared | None) -> tuple[Any, outcomes.Outcome] | None:
        return preparing.status_of(document, children, now, unconfirmed=unconfirmed, prepared=prepared)

    def dry_run(self, document: Any, settings: operator_settings.OperatorSettings, stand_in_key: str,
                now: dt.datetime, beside: Sequence[Any] = ()) -> plans.DryRun:
        try:
            job = jobs.load(document)
        except jobs.LoadError as exc:
            return plans.DryRun.unloadable(exc)
        outcome = plans.DryRun()
        report = validating.validate(job)
        outcome.warnings.extend(report.warnings)
        if not report.ok:
            outcome.errors.extend(str(error) for error in report.errors)
            return outcome
        try:
            outcome.children.extend(planning.plan(defaulting.set_defaults(job), settings))
        except planning.PlanError as exc:
            outcome.errors.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - a planning bug must still not print a traceback
            outcome.errors.append(f"internal error while planning (a kto bug): {type(exc).__name__}: {exc}")
        return outcome

    def unbound(self, children: Sequence[Manifest], now: dt.datetime) -> tuple[list[plans.Unbound], list[str]]:
        return [], []  # nothing waits for a job of these kinds


FAMILY = KubeflowV1()
