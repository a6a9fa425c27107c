"""The job families kto serves, and the one registry every service dispatches through.

In: a job's kind and, where one kind is served by two families (MPIJob written in
kubeflow.org/v1 or in v2beta1), the job document; or an object the watcher maps to
its job. Out: the :class:`Family` that serves it, whose hooks load and validate,
default, decide (one :class:`~shared.core.effects.Effects` shape for all), compute
the status, summarise a plan for ``kto plan`` and ``kto replay``, say which objects
are its jobs and which service writes their status. No service tests for a family itself: a family is one module here
(``shared/core/kubeflow_v1.py``, ``shared/core/mpi_v2/family.py``,
``shared/core/elastic/family.py``, ``shared/core/trainer/family.py``) and one line of :data:`REGISTRY`.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from shared.core import admitting, basis, effects, outcomes, plans
from shared.core import kubeflow_v1
from shared.core import settings as operator_settings
from shared.core.elastic import family as elastic_family
from shared.core.jobsets import family as jobsets_family
from shared.core.mpi_v2 import family as mpi_v2_family
from shared.core.trainer import family as trainer_family

Manifest = dict[str, Any]
PreparedT = TypeVar("PreparedT")
"""What a family prepares of a job for the status worker to cache (its own type)."""


class Family(Protocol[PreparedT]):
    """One job family: the hooks the services and the command line call for its jobs."""

    @property
    def name(self) -> str:
        """How the family is named in logs and docs (``kubeflow.org/v1``, ``kubeflow.org/v2beta1`` …)."""

    @property
    def kinds(self) -> frozenset[str]:
        """The job kinds it serves (keys of ``cluster/namespace/kind/name``)."""

    @property
    def job_types(self) -> frozenset[tuple[str, str]]:
        """(apiVersion, kind) its jobs are written as: what the watcher keys by itself."""

    @property
    def api_versions(self) -> frozenset[str]:
        """The apiVersions of the documents ``kto plan`` hands to it (jobs and their helpers)."""

    @property
    def operator_names(self) -> Mapping[str, str]:
        """Value of the ``training.kubeflow.org/operator-name`` label → job kind, for children
        found through their labels."""

    @property
    def status_writer(self) -> Literal["status", "reconciler"]:
        """The service that writes its jobs' ``/status``."""

    @property
    def controllers(self) -> Mapping[str, str]:
        """Job kind → upstream's controller name (the ``controller`` label of reconcile metrics)."""

    @property
    def admitted(self) -> tuple[admitting.Target, ...]:
        """The kinds (in a version) the admission webhook judges for it, with their rules."""

    def serves(self, document: Mapping[str, Any] | None) -> bool:
        """Whether a job of one of its kinds (``None``: not known yet) is this family's."""

    def written_version(self, document: Mapping[str, Any]) -> str:
        """The apiVersion the job was written in (an MPIJob read through v1 may be v2beta1)."""

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        """(job kind, job name or None) for an object keyed by a field of its own (a scaler's
        selector), not by its controller or labels; None for any other object."""

    def decide(self, document: Manifest, children: Sequence[Manifest], context: effects.Context) -> effects.Effects:
        """What a reconcile pass of the job must do now, given every child observed for it
        (the reconciler carries it out: :mod:`shared.core.effects`). A job that does not
        load gets effects that say so, never an exception."""

    def replan(self, inputs: basis.Inputs, same_command: plans.SameCommand) -> dict[str, Any]:
        """The plan a reconcile pass makes from ``inputs`` (:class:`plans.Unreplayable` if it cannot)."""

    def prepare(self, document: Manifest) -> PreparedT | None:
        """The job loaded, validated and defaulted for the status worker to cache; None when
        the family prepares nothing ahead (its status is computed from the document)."""

    def status(self, document: Manifest, children: Sequence[Manifest], now: dt.datetime, *, unconfirmed: bool,
               prepared: PreparedT | None) -> tuple[Any, outcomes.Outcome] | outcomes.Declined | None:
        """The job as loaded and its status and Events, as the status worker writes them; None
        when the document cannot be read as its job (or the reconciler writes its status);
        :attr:`outcomes.Declined.ANOTHER_FAMILY` when another family serving the kind is to
        read it."""

    def dry_run(self, document: Any, settings: operator_settings.OperatorSettings, stand_in_key: str,
                now: dt.datetime, beside: Sequence[Any] = ()) -> plans.DryRun:
        """``kto plan`` of one document: load, validate, default, plan (``stand_in_key`` shown
        for any generated key; ``beside``: every document given with it, where a job finds
        what it refers to, such as a TrainJob's runtime)."""

    def unbound(self, children: Sequence[Manifest], now: dt.datetime) -> tuple[list[plans.Unbound], list[str]]:
        """For a job that does not exist: the steps of the objects still waiting for it, and
        why objects that do not load were left out."""


class Registry:
    """Families by kind; the first family given is the one a document of an apiVersion
    no family claims goes to (its loader names the problem)."""

    def __init__(self, families: Sequence[Family[Any]], admitted: Sequence[admitting.Target] = ()) -> None:
        """``admitted``: kinds the webhook judges that no family lists yet."""
        self.families: tuple[Family[Any], ...] = tuple(families)
        self.admitted: tuple[admitting.Target, ...] = tuple(admitted)
        self._by_kind: dict[str, list[Family[Any]]] = {}
        for family in self.families:
            for kind in family.kinds:
                self._by_kind.setdefault(kind, []).append(family)
        self.kinds: frozenset[str] = frozenset(self._by_kind)
        """Every job kind served: the keys the reconciler reconciles."""
        self.status_kinds: frozenset[str] = frozenset(
            kind for kind, served in self._by_kind.items() if any(f.status_writer == "status" for f in served))
        """Job kinds some of whose jobs have their status written by the status service."""
        self.operator_names: dict[str, str] = {
            label: kind for family in self.families for label, kind in family.operator_names.items()}
        """Every family's operator-name label value → job kind."""
        self.controllers: dict[str, str] = {
            kind: name for family in self.families for kind, name in family.controllers.items()}
        """Job kind → upstream's controller name."""
        self.hooks: tuple[admitting.Hook, ...] = admitting.hooks(
            [*(target for family in self.families for target in family.admitted), *self.admitted])
        """Every webhook kto serves: the families' admitted kinds, validating then mutating."""

    def resolve(self, kind: str, document: Mapping[str, Any] | None = None) -> Family[Any] | None:
        """The family serving a ``kind`` job (``document``: the job, when known); None for a
        kind no family serves."""
        return next((f for f in self._by_kind.get(kind, ()) if f.serves(document)), None)

    def for_document(self, document: Any) -> Family[Any]:
        """The family ``kto plan`` hands a document to, by its apiVersion."""
        version = document.get("apiVersion") if isinstance(document, dict) else None
        return next((f for f in self.families if version in f.api_versions), self.families[0])

    def is_job(self, api_version: Any, kind: Any) -> bool:
        """Whether (apiVersion, kind) is a job some family serves."""
        return any((api_version, kind) in f.job_types for f in self.families)

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        """(job kind, name or None) when a family keys ``obj`` by a field of its own."""
        return next((found for f in self.families if (found := f.job_of(obj)) is not None), None)

    def replan(self, kind: str, inputs: basis.Inputs, *, same_command: plans.SameCommand = plans.same) -> dict[str, Any]:
        """The plan a reconcile pass of a ``kind`` job makes from ``inputs``; ``same_command``
        matches a TrainingJob pass's recorded commands (equality unless told otherwise)."""
        family = self.resolve(kind, inputs.job)
        if family is None:
            raise plans.Unreplayable(f"no family serves the kind {kind}")
        return family.replan(inputs, same_command)

    def status_of(self, document: Manifest, children: Sequence[Manifest], now: dt.datetime, *,
                  unconfirmed: bool, prepared: object = None) -> tuple[Any, outcomes.Outcome] | None:
        """What the status worker computes for a job from its view (``prepared``: a cached
        ``prepare`` of ``document`` by the family serving it); None when no family reads it.
        A family that declines the document hands it to the kind's other families, in the
        registry's order (a prepared job is its own family's: they prepare afresh)."""
        kind = str(document.get("kind") or "")
        family = self.resolve(kind, document)
        if family is None:
            return None
        computed = family.status(document, children, now, unconfirmed=unconfirmed, prepared=prepared)
        others = (f for f in self._by_kind[kind] if f is not family)
        while computed is outcomes.Declined.ANOTHER_FAMILY:
            other = next(others, None)
            if other is None:
                return None
            computed = other.status(document, children, now, unconfirmed=unconfirmed, prepared=None)
        return computed

    def restatus(self, inputs: basis.Inputs) -> dict[str, Any]:
        """The ``status_written`` detail the status worker computes from ``inputs``."""
        computed = self.status_of(inputs.job, inputs.children, inputs.now,
                                  unconfirmed=bool(inputs.extra.get("unconfirmed")))
        if computed is None:
            raise plans.Unreplayable("the job cannot be read as a job of a kind kto serves")
        return outcomes.status_detail(computed[1])


REGISTRY = Registry([
    kubeflow_v1.FAMILY,
    mpi_v2_family.FAMILY,
    elastic_family.FAMILY,
    jobsets_family.FAMILY,
    trainer_family.FAMILY,
])
"""Every family kto serves. Adding one: its package, and one line here."""
