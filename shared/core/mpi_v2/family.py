"""MPIJob written in kubeflow.org/v2beta1 (mpi-operator) as a
:class:`shared.core.families.Family`.

In: an MPIJob document written in v2beta1 (whichever version it is read in), its
observed children, the clock. Out: its pass's effects (:meth:`MPIJobV2.decide`), replayed, its
status and Events (from the same pure ``decide`` the reconciler applies children
from), and ``kto plan``'s dry run. The status service writes its status. No I/O,
no clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from shared.api import common, mpijobs
from shared.core import admitting, basis, effects, outcomes, plans
from shared.core import settings as operator_settings
from shared.core.mpi_v2 import defaulting, deciding, sshkeys, validating

Manifest = dict[str, Any]


def load(document: Mapping[str, Any]) -> mpijobs.MPIJob:
    """The job read as v2beta1, whichever version it was read in (:class:`mpijobs.LoadError`)."""
    return mpijobs.load({**document, "apiVersion": mpijobs.API_VERSION})


def _no_key() -> sshkeys.KeyPair:
    return sshkeys.KeyPair(b"", b"")


def job_status(job: mpijobs.MPIJob, children: Sequence[Manifest], now: dt.datetime) -> outcomes.Outcome:
    """The status and Events of mpi-operator's sync, from the same pure decision the
    reconciler applies children from (the SSH key and the operator settings play no
    part in the status)."""
    decision = deciding.decide(job, list(children), now, operator_settings.OperatorSettings(), _no_key)
    status = decision.status if isinstance(decision.status, common.JobStatus) else job.status or common.JobStatus()
    return outcomes.Outcome(status, decision.events)


@dataclasses.dataclass(frozen=True)
class MPIJobV2:
    """MPIJob v2beta1 (see the module)."""

    name: str = mpijobs.API_VERSION
    kinds: frozenset[str] = frozenset({mpijobs.KIND})
    job_types: frozenset[tuple[str, str]] = frozenset({(mpijobs.API_VERSION, mpijobs.KIND)})
    api_versions: frozenset[str] = frozenset({mpijobs.API_VERSION})
    operator_names: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {mpijobs.OPERATOR_NAME: mpijobs.KIND})
    status_writer: Literal["status", "reconciler"] = "status"
    controllers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """None of its own: its reconcile passes count under the v1 family's ``mpijob-controller``."""
    admitted: tuple[admitting.Target, ...] = (admitting.Target(
        mpijobs.GROUP, mpijobs.VERSION, mpijobs.KIND, mpijobs.PLURAL, mpijobs.SINGULAR, False, admitting.Rules(
            mpijobs.load, lambda job, old: validating.validate(defaulting.set_defaults(job)),
            defaulting.set_defaults)),)
    """mpi-operator's validation (spec A.5) of the defaulted job, which its controller runs; the
    defaults are stored."""

    def serves(self, document: Mapping[str, Any] | None) -> bool:
        """An MPIJob written in v2beta1 (the v2beta1 schema's own defaults show it)."""
        return mpijobs.is_v2beta1(document)

    def written_version(self, document: Mapping[str, Any]) -> str:
        return mpijobs.API_VERSION

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None  # its children are keyed by their controller or their labels

    def replan(self, inputs: basis.Inputs, same_command: plans.SameCommand) -> dict[str, Any]:
        settings = plans.settings_from(operator_settings.OperatorSettings, inputs.extra.get("settings"))
        try:
            load(inputs.job)
        except mpijobs.LoadError as exc:
            raise plans.Unreplayable(f"the MPIJob does not load: {exc}") from None
        context = effects.Context(inputs.now, (settings,), {sshkeys.KeyPair: _no_key})
        return self.decide(inputs.job, inputs.children, context).plan()

    def decide(self, document: Manifest, children: Sequence[Manifest], context: effects.Context) -> effects.Effects:
        """mpi-operator's sync of the job read as v2beta1 (its status and Events are the status
        service's to write); a job that does not load is announced as failing validation."""
        try:
            job = load(document)
        except mpijobs.LoadError as exc:
            return effects.failed_validation(document, exc)
        settings = context.settings_of(operator_settings.OperatorSettings)
        decision = deciding.decide(job, children, context.now, settings, context.key_pair(sshkeys.KeyPair))
        decision.regarding, decision.settings = job, dataclasses.asdict(settings)
        decision.status, decision.events = None, []  # the status service's, from its own sync
        return decision

    def prepare(self, document: Manifest) -> None:
        return None  # the status comes from the sync's decision, made afresh

    def status(self, document: Manifest, children: Sequence[Manifest], now: dt.datetime, *, unconfirmed: bool,
               prepared: None) -> tuple[Any, outcomes.Outcome] | outcomes.Declined:
        """Its sync's status; a document that does not load as v2beta1 is declined, for the
        registry to read as a v1 job (whose loader then names what is wrong with it)."""
        try:
            job = load(document)
        except mpijobs.LoadError:
            return outcomes.Declined.ANOTHER_FAMILY
        return job, job_status(job, children, now)

    def dry_run(self, document: Any, settings: operator_settings.OperatorSettings, stand_in_key: str,
                now: dt.datetime, beside: Sequence[Any] = ()) -> plans.DryRun:
        """The children of its first sync (spec A.7), with ``stand_in_key`` for the SSH key pair."""
        try:
            job = mpijobs.load(document)
        except mpijobs.LoadError as exc:
            return plans.DryRun.unloadable(exc)
        outcome = plans.DryRun()
        report = validating.validate(defaulting.set_defaults(job))
        if not report.ok:
            outcome.errors.extend(str(error) for error in report.errors)
            return outcome
        keys = sshkeys.KeyPair(stand_in_key.encode(), stand_in_key.encode())
        decision = deciding.decide(job, [], now, settings, lambda: keys)
        outcome.children.extend(decision.creates)
        return outcome

    def unbound(self, children: Sequence[Manifest], now: dt.datetime) -> tuple[list[plans.Unbound], list[str]]:
        return [], []  # nothing waits for an MPIJob


FAMILY = MPIJobV2()
