"""JobSet (``jobset.x-k8s.io/v1alpha2``) as a :class:`shared.core.families.Family`.

In: a JobSet document, its observed children (batch Jobs, the headless Service), the clock
and the operator settings. Out: its reconcile's effects (:meth:`JobSets.decide`, status
included: upstream's JobSet controller writes the status itself, with its children, so the
reconciler does here), replayed, and ``kto plan``'s dry run. A JobSet is served only while
``OperatorSettings.serve_jobsets`` is true (false where the real JobSet controller runs).
No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from shared.api import jobsets
from shared.core import admitting, basis, effects, outcomes, plans
from shared.core import settings as operator_settings
from shared.core.jobsets import deciding

Manifest = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class JobSets(outcomes.WrittenByReconciler):
    """JobSet v0.12.0 (see the module)."""

    name: str = jobsets.API_VERSION
    kinds: frozenset[str] = frozenset({jobsets.KIND})
    job_types: frozenset[tuple[str, str]] = frozenset({(jobsets.API_VERSION, jobsets.KIND)})
    api_versions: frozenset[str] = frozenset({jobsets.API_VERSION})
    operator_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    status_writer: Literal["status", "reconciler"] = "reconciler"
    controllers: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {jobsets.KIND: "jobset"})
    admitted: tuple[admitting.Target, ...] = ()
    """None: JobSet's own webhook defaults are applied by ``decide`` (docs/trainer-v2.md)."""

    def serves(self, document: Mapping[str, Any] | None) -> bool:
        return True

    def written_version(self, document: Mapping[str, Any]) -> str:
        return jobsets.API_VERSION

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None  # its Jobs and Service are keyed by their controller, its pods by their label

    def decide(self, document: Manifest, children: Sequence[Manifest], context: effects.Context) -> effects.Effects:
        """JobSet's reconcile; nothing while kto does not serve JobSets (the real controller
        does); a JobSet that does not load is announced as failing validation."""
        try:
            jobset = jobsets.load(document)
        except jobsets.LoadError as exc:
            return effects.failed_validation(document, exc)
        settings = context.settings_of(operator_settings.OperatorSettings)
        if not settings.serve_jobsets:
            decision = effects.Effects()
            decision.step("skip", f"{jobsets.KIND} {jobset.namespace}/{jobset.name}",
                          "JobSets are served by another controller")
        else:
            decision = deciding.decide(jobset, children, context.now)
        decision.regarding, decision.settings = jobset, dataclasses.asdict(settings)
        return decision

    def replan(self, inputs: basis.Inputs, same_command: plans.SameCommand) -> dict[str, Any]:
        settings = plans.settings_from(operator_settings.OperatorSettings, inputs.extra.get("settings"))
        try:
            jobsets.load(inputs.job)
        except jobsets.LoadError as exc:
            raise plans.Unreplayable(f"the JobSet does not load: {exc}") from None
        return self.decide(inputs.job, inputs.children, effects.Context(inputs.now, (settings,))).plan()

    def dry_run(self, document: Any, settings: operator_settings.OperatorSettings, stand_in_key: str,
                now: dt.datetime, beside: Sequence[Any] = ()) -> plans.DryRun:
        """The headless Service and the Jobs of a first reconcile (every replicated job whose
        dependencies are met at the start)."""
        try:
            jobset = jobsets.load(document)
        except jobsets.LoadError as exc:
            return plans.DryRun.unloadable(exc)
        return plans.DryRun(children=list(deciding.decide(jobset, [], now).creates))

    def unbound(self, children: Sequence[Manifest], now: dt.datetime) -> tuple[list[plans.Unbound], list[str]]:
        return [], []  # nothing waits for a JobSet


FAMILY = JobSets()
"""JobSet ``jobset.x-k8s.io/v1alpha2``, served by kto."""
