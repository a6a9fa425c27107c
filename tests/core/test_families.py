"""The family registry (shared/core/families.py): every kind resolves to the family that
serves it, MPIJob by the version it was written in, and a new family plugs in with one line."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pytest

from shared.api import elastic, jobs, jobsets, mpijobs, trainer
from shared.core import admitting, basis, effects, families, kubeflow_v1, outcomes, plans, preparing, settings
from shared.core.elastic import family as elastic_family
from shared.core.mpi_v2 import family as mpi_v2_family

NOW = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
V2_MPIJOB = {"apiVersion": mpijobs.API_VERSION, "kind": "MPIJob", "metadata": {"name": "m", "namespace": "ns"},
             "spec": {"mpiImplementation": "OpenMPI", "mpiReplicaSpecs": {}}}
V2_READ_AS_V1 = {**V2_MPIJOB, "apiVersion": jobs.API_VERSION}
V1_MPIJOB = {"apiVersion": jobs.API_VERSION, "kind": "MPIJob", "metadata": {"name": "m", "namespace": "ns"},
             "spec": {"mpiReplicaSpecs": {}}}


@pytest.mark.parametrize("kind", sorted(jobs.KINDS))
def test_every_kubeflow_v1_kind_resolves_to_the_v1_family(kind: str) -> None:
    document = {"apiVersion": jobs.API_VERSION, "kind": kind, "metadata": {"name": "j"}, "spec": {}}
    assert families.REGISTRY.resolve(kind, document) is kubeflow_v1.FAMILY


@pytest.mark.parametrize(("document", "family"), [
    pytest.param(V2_MPIJOB, mpi_v2_family.FAMILY, id="written-in-v2beta1"),
    pytest.param(V2_READ_AS_V1, mpi_v2_family.FAMILY, id="written-in-v2beta1-read-through-v1"),
    pytest.param(V1_MPIJOB, kubeflow_v1.FAMILY, id="written-in-v1"),
    pytest.param(None, kubeflow_v1.FAMILY, id="not-known-yet"),
])
def test_an_mpijob_resolves_by_the_version_it_was_written_in(document: Any, family: families.Family) -> None:
    assert families.REGISTRY.resolve("MPIJob", document) is family


def test_a_trainingjob_resolves_to_et_operators_family_and_a_strange_kind_to_none() -> None:
    assert families.REGISTRY.resolve(elastic.TrainingJob.KIND) is elastic_family.FAMILY
    assert families.REGISTRY.resolve("Deployment") is None


def test_the_registry_knows_every_kind_and_who_writes_its_status() -> None:
    assert families.REGISTRY.kinds == {*jobs.KINDS, elastic.TrainingJob.KIND, jobsets.KIND, trainer.TRAINJOB_KIND}
    assert families.REGISTRY.status_kinds == set(jobs.KINDS)
    assert elastic_family.FAMILY.status_writer == "reconciler"
    assert families.REGISTRY.controllers[trainer.TRAINJOB_KIND] == "trainjob_controller"


@pytest.mark.parametrize(("api_version", "kind", "is_job"), [
    pytest.param(jobs.API_VERSION, "PyTorchJob", True, id="v1-pytorchjob"),
    pytest.param(mpijobs.API_VERSION, "MPIJob", True, id="v2beta1-mpijob"),
    pytest.param(mpijobs.API_VERSION, "PyTorchJob", False, id="v2beta1-pytorchjob"),
    pytest.param(elastic.API_VERSION, "TrainingJob", True, id="trainingjob"),
    pytest.param(elastic.API_VERSION, "ScaleIn", False, id="scalein-is-not-a-job"),
    pytest.param("batch/v1", "Job", False, id="batch-job"),
    pytest.param(trainer.API_VERSION, "TrainJob", True, id="trainjob"),
    pytest.param(trainer.API_VERSION, "ClusterTrainingRuntime", False, id="a-runtime-is-not-a-job"),
    pytest.param(jobsets.API_VERSION, "JobSet", True, id="jobset"),
])
def test_which_objects_are_jobs(api_version: str, kind: str, is_job: bool) -> None:
    assert families.REGISTRY.is_job(api_version, kind) is is_job


@pytest.mark.parametrize(("obj", "found"), [
    pytest.param({"apiVersion": elastic.API_VERSION, "kind": "ScaleOut", "spec": {"selector": {"name": "t"}}},
                 ("TrainingJob", "t"), id="scaler-naming-its-job"),
    pytest.param({"apiVersion": elastic.API_VERSION, "kind": "ScaleIn", "spec": {}}, ("TrainingJob", None),
                 id="scaler-naming-none"),
    pytest.param({"apiVersion": "v1", "kind": "Pod"}, None, id="pod"),
])
def test_objects_keyed_by_a_field_of_their_own(obj: dict[str, Any], found: Any) -> None:
    assert families.REGISTRY.job_of(obj) == found


@pytest.mark.parametrize(("document", "family"), [
    pytest.param({"apiVersion": jobs.API_VERSION, "kind": "TFJob"}, kubeflow_v1.FAMILY, id="v1"),
    pytest.param(V2_MPIJOB, mpi_v2_family.FAMILY, id="v2beta1"),
    pytest.param({"apiVersion": elastic.API_VERSION, "kind": "ScaleIn"}, elastic_family.FAMILY, id="scaler"),
    pytest.param({"apiVersion": "apps/v1", "kind": "Deployment"}, kubeflow_v1.FAMILY, id="unknown-goes-to-the-first"),
    pytest.param(["not", "a", "mapping"], kubeflow_v1.FAMILY, id="not-a-mapping"),
])
def test_kto_plan_hands_a_document_to_a_family_by_its_api_version(document: Any, family: families.Family) -> None:
    assert families.REGISTRY.for_document(document) is family


def test_the_written_version_of_an_mpijob_read_through_v1_is_v2beta1() -> None:
    assert mpi_v2_family.FAMILY.written_version(V2_READ_AS_V1) == mpijobs.API_VERSION
    assert kubeflow_v1.FAMILY.written_version(V1_MPIJOB) == jobs.API_VERSION


@pytest.mark.parametrize("document", [
    pytest.param({**V2_READ_AS_V1, "spec": {**V2_READ_AS_V1["spec"], "slotsPerWorker": "many"}}, id="a-bad-field"),
    pytest.param({**V2_READ_AS_V1, "metadata": []}, id="no-metadata"),
])
def test_an_mpijob_that_does_not_load_as_v2beta1_is_declined_and_read_as_a_v1_job(document: Any) -> None:
    assert mpi_v2_family.FAMILY.status(document, [], NOW, unconfirmed=False, prepared=None) \
        is outcomes.Declined.ANOTHER_FAMILY
    read_as_v1 = kubeflow_v1.FAMILY.status(document, [], NOW, unconfirmed=False, prepared=None)
    assert read_as_v1 is not None
    assert families.REGISTRY.status_of(document, [], NOW, unconfirmed=False) == read_as_v1


def test_a_kind_no_family_serves_is_not_replayed() -> None:
    inputs = basis.Inputs(now=NOW, job={"kind": "Deployment"}, children=[], old=None, extra={})
    with pytest.raises(plans.Unreplayable, match="no family serves the kind Deployment"):
        families.REGISTRY.replan("Deployment", inputs)
    with pytest.raises(plans.Unreplayable, match="cannot be read"):
        families.REGISTRY.restatus(inputs)


@dataclasses.dataclass(frozen=True)
class _Widgets:
    """A family of one made-up kind, as a new family's module would write it."""

    name: str = "example.dev/v1"
    kinds: frozenset[str] = frozenset({"WidgetJob"})
    job_types: frozenset[tuple[str, str]] = frozenset({("example.dev/v1", "WidgetJob")})
    api_versions: frozenset[str] = frozenset({"example.dev/v1"})
    operator_names: Mapping[str, str] = dataclasses.field(default_factory=lambda: {"widget-operator": "WidgetJob"})
    status_writer: Literal["status", "reconciler"] = "status"
    controllers: Mapping[str, str] = dataclasses.field(default_factory=lambda: {"WidgetJob": "widget-controller"})
    admitted: tuple[admitting.Target, ...] = ()

    def serves(self, document: Mapping[str, Any] | None) -> bool:
        return True

    def written_version(self, document: Mapping[str, Any]) -> str:
        return self.name

    def job_of(self, obj: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None

    def decide(self, document: dict[str, Any], children: Sequence[dict[str, Any]],
               context: effects.Context) -> effects.Effects:
        name = document["metadata"]["name"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-0"}}
        return effects.Effects(creates=[] if children else [pod])

    def replan(self, inputs: basis.Inputs, same_command: plans.SameCommand) -> dict[str, Any]:
        return self.decide(inputs.job, inputs.children, effects.Context(inputs.now)).plan()

    def prepare(self, document: dict[str, Any]) -> preparing.Prepared | None:
        return None

    def status(self, document: dict[str, Any], children: Sequence[dict[str, Any]], now: dt.datetime, *,
               unconfirmed: bool, prepared: preparing.Prepared | None) -> tuple[Any, outcomes.Outcome] | None:
        return None

    def dry_run(self, document: Any, settings: settings.OperatorSettings, stand_in_key: str,
                now: dt.datetime, beside: Sequence[Any] = ()) -> plans.DryRun:
        return plans.DryRun(children=[{"kind": "Pod"}])

    def unbound(self, children: Sequence[dict[str, Any]], now: dt.datetime) -> tuple[list[plans.Unbound], list[str]]:
        return [], []


def test_a_new_family_plugs_in_with_one_line() -> None:
    registry = families.Registry([*families.REGISTRY.families, _Widgets()], admitted=families.REGISTRY.admitted)
    widget = {"apiVersion": "example.dev/v1", "kind": "WidgetJob", "metadata": {"name": "w"}}
    assert isinstance(registry.resolve("WidgetJob", widget), _Widgets)
    assert "WidgetJob" in registry.kinds and "WidgetJob" in registry.status_kinds
    assert registry.is_job("example.dev/v1", "WidgetJob")
    assert registry.operator_names["widget-operator"] == "WidgetJob"
    assert registry.controllers["WidgetJob"] == "widget-controller" and registry.hooks == families.REGISTRY.hooks
    assert isinstance(registry.for_document(widget), _Widgets)
    inputs = basis.Inputs(now=NOW, job=widget, children=[], old=None, extra={})
    assert registry.replan("WidgetJob", inputs) == {"creates": ["Pod/w-0"]}
    assert registry.resolve("WidgetJob", widget).decide(widget, [], effects.Context(NOW)).acts  # type: ignore[union-attr]
    assert families.REGISTRY.resolve("WidgetJob") is None  # the shipped registry is left alone
