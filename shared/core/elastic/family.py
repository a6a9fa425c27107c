"""et-operator's TrainingJob (``kai.alibabacloud.com/v1alpha1``) with its ScaleIn and
ScaleOut, as a :class:`shared.core.families.Family`.

In: a TrainingJob document, its observed children (its scalers among them), the
clock, and the results of launcher commands a pass ran. Out: the split of scalers
from other children (:func:`split_scalers`), a pass's effects
(:meth:`TrainingJobs.decide`), replayed with its chain of commands answered from the log, the steps
of scalers waiting for a job not there, and ``kto plan``'s dry run. Its status is
its state machine (the phase says which provisioning step comes next), so the
reconciler writes it with the children, in one pass (docs/architecture.md); the
status service leaves TrainingJobs alone. No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from shared.api import common, elastic
from shared.core import admitting, basis, effects, outcomes, plans
from shared.core import settings as operator_settings
from shared.core.elastic import steps, defaulting, planning, deciding, scaling, validating
from shared.core.elastic.settings import ElasticSettings

Manifest = dict[str, Any]
SCALER_KINDS = frozenset({elastic.ScaleIn.KIND, elastic.ScaleOut.KIND})


def split_scalers(children: Sequence[Manifest]) -> tuple[list[elastic.Scaler], list[Manifest], list[str]]:
    """A TrainingJob's children as (its scalers loaded, the other children, why scalers
    that do not load were left out)."""
    scalers: list[elastic.Scaler] = []
    others: list[Manifest] = []
    problems: list[str] = []
    for child in children:
        if child.get("kind") not in SCALER_KINDS:
            others.append(child)
            continue
        try:
            scalers.append(elastic.load_scaler(child))
        except elastic.LoadError as exc:
            problems.append(f"{child.get('kind')} {(child.get('metadata') or {}).get('name')} does not load: {exc}")
    return scalers, others, problems


def _no_key() -> planning.KeyPair:
    return planning.KeyPair("", "")


def _replayed_chain(training_job: elastic.TrainingJob, children: list[Manifest], scalers: list[elastic.Scaler],
                    inputs: basis.Inputs, same_command: plans.SameCommand) -> effects.Effects:
    """The pass's last decision, its chain of commands answered by the results it recorded, in
    order, as the reconciler runs them (stopping at the first failure): each command asked for
    takes the first unused result of the same pod, container and purpose whose command
    ``same_command`` accepts."""
    recorded = [effects.ExecResult.load(r) for r in inputs.extra.get("executed") or []]
    settings = plans.settings_from(ElasticSettings, inputs.extra.get("settings"))
    executed: list[effects.ExecResult] = []
    while True:
        decision = deciding.decide(training_job, children, scalers, inputs.now, key_pair=_no_key,
                                      settings=settings, executed=executed)
        answered = False
        for command in decision.execs:
            found = next((r for r in recorded if (r.exec.namespace, r.exec.pod, r.exec.container, r.exec.purpose)
                          == (command.namespace, command.pod, command.container, command.purpose)
                          and same_command(r.exec.command, command.command)), None)
            if found is None:
                break
            recorded.remove(found)
            executed.append(effects.ExecResult(command, found.ok, found.output))
            answered = True
            if not found.ok:
                break
        if not answered:
            return decision


def _unloadable(document: Manifest, problem: elastic.LoadError, now: dt.datetime) -> effects.Effects:
    """A TrainingJob that does not load: its status Failed (reason
    ``TrainingJobFailedValidation``) and said, unless it already says Failed."""
    raw = document.get("status")
    status: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if status.get("phase") == "Failed":
        return effects.Effects()
    decision = effects.failed_validation(document, problem)
    assert decision.announce is not None
    when = common.format_time(now)
    condition = {"type": "Failed", "status": "True", "reason": decision.announce.reason,
                 "message": decision.announce.message, "lastUpdateTime": when, "lastTransitionTime": when}
    decision.status = effects.RawStatus({**status, "phase": "Failed",
                                         "conditions": [*(status.get("conditions") or []), condition]})
    return decision


@dataclasses.dataclass(frozen=True)
class TrainingJobs(outcomes.WrittenByReconciler):
    """et-operator's kinds (see the module)."""

    name: str = elastic.API_VERSION
    kinds: frozenset[str] = frozenset({elastic.TrainingJob.KIND})
    job_types: frozenset[tuple[str, str]] = frozenset({(elastic.API_VERSION, elastic.TrainingJob.KIND)})
    api_versions: frozenset[str] = frozenset({elastic.API_VERSION})
    operator_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    status_writer: Literal["status", "reconciler"] = "reconciler"
    controllers: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {elastic.TrainingJob.KIND: elastic.TrainingJob.CONTROLLER_NAME})
    admitted: tuple[admitting.Target, ...] = (
        admitting.Target(elastic.GROUP, elastic.VERSION, elastic.TrainingJob.KIND, elastic.TrainingJob.PLURAL,
                         elastic.TrainingJob.SINGULAR, False, admitting.Rules(
                             elastic.load_training_job,
                             lambda job, old: validating.validate(defaulting.set_defaults(job)),
                             defaulting.set_defaults)),
        *(admitting.Target(elastic.GROUP, elastic.VERSION, cls.KIND, cls.PLURAL, cls.SINGULAR, False, admitting.Rules(
            elastic.load_scaler, lambda scaler, old: validating.validate_scaler(scaler)))
          for cls in (elastic.ScaleIn, elastic.ScaleOut)),
    )
    """The TrainingJob (defaulted, then kto's rules) and ScaleIn / ScaleOut (kto's rules):
    upstream has no webhook and checks only its CRD schema."""

    def serves(self, document: Mapping[str, Any] | None) -> bool:
        return True

    def written_version(self, document: Mapping[str, Any]) -> str:
        return str(document.get("apiVersion") or "")

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        """A scaler belongs to the TrainingJob its ``spec.selector.name`` names (spec B.11),
        bound or not yet."""
        if obj.get("apiVersion") != elastic.API_VERSION or obj.get("kind") not in SCALER_KINDS:
            return None
        selector = (obj.get("spec") or {}).get("selector")
        target = selector.get("name") if isinstance(selector, dict) else None
        return elastic.TrainingJob.KIND, target if isinstance(target, str) else None

    def replan(self, inputs: basis.Inputs, same_command: plans.SameCommand) -> dict[str, Any]:
        try:
            training_job = elastic.load_training_job(inputs.job)
        except elastic.LoadError as exc:
            raise plans.Unreplayable(f"the TrainingJob does not load: {exc}") from None
        scalers, children, _ = split_scalers(inputs.children)
        return _replayed_chain(training_job, children, scalers, inputs, same_command).plan()

    def decide(self, document: Manifest, children: Sequence[Manifest], context: effects.Context) -> effects.Effects:
        """et-operator's reconcile of the job, its scalers split from its other children (those
        that do not load are left out, named in ``problems``). A job whose fields do not load
        (a wrongly typed field) is Failed, naming the field paths, once; nothing is made for it."""
        try:
            job = elastic.load_training_job(document)
        except elastic.LoadError as exc:
            return _unloadable(document, exc, context.now)
        scalers, others, problems = split_scalers(children)
        settings = context.settings_of(ElasticSettings)
        decision = deciding.decide(job, others, scalers, context.now, key_pair=context.key_pair(planning.KeyPair),
                                      settings=settings, executed=context.executed)
        decision.regarding, decision.problems = job, problems
        decision.settings = dataclasses.asdict(settings)
        return decision

    def dry_run(self, document: Any, settings: operator_settings.OperatorSettings, stand_in_key: str,
                now: dt.datetime, beside: Sequence[Any] = ()) -> plans.DryRun:
        """A TrainingJob: its children in upstream's creation order; a scaler: checked only."""
        try:
            loaded = elastic.load(document)
        except elastic.LoadError as exc:
            return plans.DryRun.unloadable(exc)
        outcome = plans.DryRun()
        if not isinstance(loaded, elastic.TrainingJob):
            outcome.errors.extend(str(error) for error in validating.validate_scaler(loaded).errors)
            return outcome
        job = defaulting.set_defaults(loaded)
        report = validating.validate(job)
        outcome.warnings.extend(report.warnings)
        if not report.ok:
            outcome.errors.extend(str(error) for error in report.errors)
            return outcome
        keys = planning.KeyPair(stand_in_key, stand_in_key)
        outcome.children.extend(planning.plan(job, ElasticSettings(), keys))
        return outcome

    def unbound(self, children: Sequence[Manifest], now: dt.datetime) -> tuple[list[plans.Unbound], list[str]]:
        """Scalers that name a TrainingJob that does not exist stay unbound (spec B.11)."""
        scalers, _, problems = split_scalers(children)
        waiting = [plans.Unbound(scaler.KIND, scaler.name, scaler.metadata.uid or "", step.kind, step.detail)
                 for scaler in scalers for step in scaling.bind(scaler, None, now).steps]
        return waiting, problems


FAMILY = TrainingJobs()
