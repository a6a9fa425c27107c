"""shared/core/effects.py: the one shape of every family's decision, what it says it does
(``acts``, ``plan``), and what a family decides with (``Context``)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from shared.api import jobs, mpijobs
from shared.core import effects, families, outcomes
from shared.core.events import Event
from shared.core.elastic import planning as elastic_planning
from shared.core.mpi_v2 import sshkeys
from shared.core.settings import OperatorSettings

NOW = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j-worker-0", "namespace": "ns", "uid": "u1"}}


@pytest.mark.parametrize(("effect", "acts"), [
    pytest.param(effects.Effects(), False, id="nothing"),
    pytest.param(effects.Effects(warnings=[Event("Warning", "R", "m")]), False, id="warnings-alone"),
    pytest.param(effects.Effects(announce=outcomes.Verdict("R", "m", "backoff")), False, id="announce-alone"),
    pytest.param(effects.Effects(steps=[effects.Step("wait", "Pod ns/p", "not Ready")]), False, id="steps-alone"),
    pytest.param(effects.Effects(creates=[POD]), True, id="a-create"),
    pytest.param(effects.Effects(deletes=[effects.ChildRef.of(POD, "restart")]), True, id="a-delete"),
    pytest.param(effects.Effects(restarts=1), True, id="a-restart-count"),
    pytest.param(effects.Effects(error="no plan"), True, id="an-error"),
    pytest.param(effects.Effects(status=effects.RawStatus({"phase": "Failed"})), True, id="a-status"),
    pytest.param(effects.Effects(child_writes=[effects.ChildWrite("v1", "Pod", "ns", "p", status={})]), True,
                 id="a-child-status"),
])
def test_a_pass_acts_when_it_writes_something_to_the_cluster(effect: effects.Effects, acts: bool) -> None:
    assert effect.acts is acts


def test_the_plan_names_what_a_pass_does_and_leaves_empty_fields_out() -> None:
    effect = effects.Effects(restarts=0)
    effect.create(POD, "missing worker")
    effect.delete({**POD, "metadata": {**POD["metadata"], "name": "j-worker-3"}}, "scale-down", "index 3 ≥ 3")
    effect.child(elastic_planning.elastic.API_VERSION, "ScaleIn", "ns", "in").status = {"phase": "ScaleSucceeded"}
    assert effect.plan() == {
        "creates": ["Pod/j-worker-0"], "deletes": ["Pod/j-worker-3:scale-down"], "child_writes": ["ScaleIn/in:status"],
        "restarts": 0, "steps": ["create:Pod ns/j-worker-0", "delete:Pod ns/j-worker-3"],
    }
    assert [str(step) for step in effect.steps] == ["create Pod ns/j-worker-0: missing worker",
                                                    "delete Pod ns/j-worker-3: index 3 ≥ 3"]


def test_a_child_written_twice_in_a_pass_is_one_write() -> None:
    effect = effects.Effects()
    first = effect.child("v1", "Pod", "ns", "p")
    first.owner_reference = {"kind": "TrainingJob", "name": "t", "controller": True}
    effect.child("v1", "Pod", "ns", "p").status = {"phase": "Running"}
    assert effect.child_writes == [first] and first.status_value() == {"phase": "Running"}


def test_stop_says_where_the_pass_stopped_and_keeps_what_came_before() -> None:
    effect = effects.Effects()
    effect.create(POD, "missing")
    assert effect.stop("Job ns/j-launcher", "exists", Event("Warning", "ErrResourceExists", "exists")) is effect
    assert effect.creates == [POD] and (effect.error, effect.error_reason) == ("exists", "ErrResourceExists")
    assert [e.reason for e in effect.events] == ["ErrResourceExists"] and effect.steps[-1].kind == "stop"


def test_an_exec_result_goes_through_the_basis_and_back() -> None:
    result = effects.ExecResult(effects.Exec("ns", "launcher", "c", ("sh", "-c", "ps"), "probe"), False, "boom")
    assert effects.ExecResult.load(result.dump()) == result


def test_a_family_takes_its_settings_by_type_and_its_defaults_when_none_were_given() -> None:
    mine = OperatorSettings(cluster_domain="example.org")
    assert effects.Context(NOW, (mine,)).settings_of(OperatorSettings) is mine
    assert effects.Context(NOW).settings_of(OperatorSettings) == OperatorSettings()


def test_a_key_pair_no_maker_was_given_for_is_named() -> None:
    pair = sshkeys.KeyPair(b"private", b"public")
    assert effects.Context(NOW, key_makers={sshkeys.KeyPair: lambda: pair}).key_pair(sshkeys.KeyPair)() == pair
    with pytest.raises(LookupError, match="no maker of KeyPair key pairs"):
        effects.Context(NOW).key_pair(elastic_planning.KeyPair)


@pytest.mark.parametrize("document", [
    pytest.param({"apiVersion": jobs.API_VERSION, "kind": "PyTorchJob", "metadata": {"name": "p", "namespace": "ns"},
                  "spec": {"pytorchReplicaSpecs": "not an object"}}, id="kubeflow-v1"),
    pytest.param({"apiVersion": mpijobs.API_VERSION, "kind": "MPIJob", "metadata": {"name": "m", "namespace": "ns"},
                  "spec": {"mpiReplicaSpecs": "not an object"}}, id="mpi-v2beta1"),
])
def test_every_family_answers_a_job_that_does_not_load_with_an_announcement_and_no_act(document: dict) -> None:
    family = families.REGISTRY.resolve(document["kind"], document)
    assert family is not None
    effect = family.decide(document, [], effects.Context(NOW))
    assert not effect.acts and effect.announce is not None
    assert effect.announce.reason == f"{document['kind']}FailedValidation" and "spec" in effect.announce.message


def test_a_trainingjob_that_does_not_load_is_failed_once_by_its_status() -> None:
    document = {"apiVersion": "kai.alibabacloud.com/v1alpha1", "kind": "TrainingJob",
                "metadata": {"name": "t", "namespace": "ns"}, "spec": {"etReplicaSpecs": 3}}
    family = families.REGISTRY.resolve("TrainingJob", document)
    assert family is not None
    effect = family.decide(document, [], effects.Context(NOW))
    assert effect.acts and effect.status is not None and effect.status.dump()["phase"] == "Failed"
    assert effect.announce is not None and effect.announce.reason == "TrainingJobFailedValidation"
    failed = {**document, "status": effect.status.dump()}
    assert family.decide(failed, [], effects.Context(NOW)) == effects.Effects()


def test_the_v1_family_says_again_a_verdict_a_predecessor_recorded() -> None:
    verdict = outcomes.Verdict("PyTorchJobFailed", "Job p has failed because …", "backoff")
    document = {"apiVersion": jobs.API_VERSION, "kind": "PyTorchJob",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                             "annotations": {outcomes.FAILURE_ANNOTATION: outcomes.failure_annotation(verdict, NOW)}},
                "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "pytorch", "image": "img"}]}}}}}}
    effect = families.REGISTRY.resolve("PyTorchJob", document).decide(  # type: ignore[union-attr]
        document, [], effects.Context(NOW))
    assert effect.verdict is None and dataclasses.replace(effect.announce, message="") == dataclasses.replace(
        verdict, message="")
