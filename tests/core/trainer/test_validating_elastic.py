"""kto's elastic TrainJob is checked against its runtime's bounds: minNodes at least 1, maxNodes at
least minNodes, numNodes between them, by planning and by the TrainJob's webhook; trainer stays
immutable but for numNodes (shared/core/trainer/validating.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import trainer
from shared.core import admitting, errors, families
from shared.core.trainer import validating

from . import trainer_builders as b


@pytest.mark.parametrize(("policy", "field", "message"), [
    pytest.param({"minNodes": 0, "maxNodes": 3}, "spec.mlPolicy.torch.elasticPolicy.minNodes",
                 "Invalid value: 0: minNodes must be at least 1", id="min-below-one"),
    pytest.param({"minNodes": 3, "maxNodes": 2}, "spec.mlPolicy.torch.elasticPolicy.maxNodes",
                 "Invalid value: 2: maxNodes must be greater than or equal to minNodes (3)", id="max-below-min"),
    pytest.param({"maxNodes": 2}, "spec.mlPolicy.torch.elasticPolicy.minNodes", "Required value: an integer",
                 id="min-missing"),
    pytest.param({"minNodes": 1, "maxNodes": "4"}, "spec.mlPolicy.torch.elasticPolicy.maxNodes",
                 "Required value: an integer", id="max-not-a-number"),
])
def test_bounds_that_are_not_a_range_name_the_field(policy: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(errors.PlanError) as raised:
        validating.bounds(policy)
    assert (raised.value.field, raised.value.message) == (field, message)
    assert not isinstance(raised.value, validating.OutOfRange)


@pytest.mark.parametrize("num_nodes", [pytest.param(n, id=str(n)) for n in (1, 2, 4)])
def test_a_node_count_within_the_bounds_gives_them(num_nodes: int) -> None:
    assert validating.check_nodes({"minNodes": 1, "maxNodes": 4}, num_nodes) == (1, 4)


@pytest.mark.parametrize("num_nodes", [pytest.param(0, id="below"), pytest.param(5, id="above")])
def test_a_node_count_outside_the_bounds_is_out_of_range(num_nodes: int) -> None:
    with pytest.raises(validating.OutOfRange) as raised:
        validating.check_nodes({"minNodes": 1, "maxNodes": 4}, num_nodes)
    assert raised.value.field == "spec.trainer.numNodes"
    assert raised.value.message == (f"Invalid value: {num_nodes}: numNodes must be between the runtime's "
                                    "elasticPolicy minNodes (1) and maxNodes (4)")


def elastic_runtime(**policy: Any) -> dict[str, Any]:
    document = b.runtime("torch-distributed")
    document["spec"]["mlPolicy"]["torch"]["elasticPolicy"] = {"minNodes": 1, "maxNodes": 4, **policy}
    return document


def review(job: dict[str, Any], found: dict[str, Any], old: dict[str, Any] | None = None) -> admitting.Answer:
    """kto's TrainJob webhook on ``job`` (UPDATE from ``old``), the runtime read being ``found``."""
    hook = next(h for h in families.REGISTRY.hooks if h.name == "validator.trainjob.trainer.kubeflow.org")
    request: dict[str, Any] = {"uid": "1", "operation": "UPDATE" if old else "CREATE", "object": job,
                               "kind": {"group": trainer.GROUP, "version": trainer.VERSION, "kind": "TrainJob"}}
    if old is not None:
        request["oldObject"] = old
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return admitting.review(hook, body, lambda read: found)


@pytest.mark.parametrize(("num_nodes", "allowed"), [
    pytest.param(1, True, id="min"), pytest.param(4, True, id="max"), pytest.param(5, False, id="above"),
])
def test_the_trainjob_webhook_refuses_a_node_count_outside_the_elastic_bounds(num_nodes: int, allowed: bool) -> None:
    answer = review(b.train_job(trainer={"numNodes": num_nodes}), elastic_runtime())
    assert answer.allowed is allowed
    if not allowed:
        assert ("spec.trainer.numNodes: Invalid value: 5: numNodes must be between the runtime's elasticPolicy "
                "minNodes (1) and maxNodes (4)") in answer.message


def test_a_runtime_whose_min_nodes_exceed_its_max_nodes_breaks_its_cel_rule() -> None:
    loaded = trainer.load_runtime(elastic_runtime(minNodes=3, maxNodes=2))
    assert [str(e) for e in validating.check_runtime(loaded).errors] == [
        'spec.mlPolicy.torch.elasticPolicy: Invalid value: minNodes must be less than or equal to maxNodes']


@pytest.mark.parametrize(("change", "expected"), [
    pytest.param({"numNodes": 3}, [], id="numNodes-may-change"),
    pytest.param({"image": "other:image"},
                 ['spec.trainer: Invalid value: field is immutable except numNodes'], id="image-may-not"),
])
def test_trainer_is_immutable_but_for_num_nodes(change: dict[str, Any], expected: list[str]) -> None:
    old = trainer.load_trainjob(b.train_job(trainer={"numNodes": 2, "image": "i"}))
    new = trainer.load_trainjob(b.train_job(trainer={"numNodes": 2, "image": "i", **change}))
    assert [str(e) for e in validating.check_schema_rules(new, old).errors] == expected


@pytest.mark.parametrize(("runtime", "allowed"), [
    pytest.param(elastic_runtime(), True, id="elastic"),
    pytest.param(b.runtime("torch-distributed"), False, id="not-elastic"),
])
def test_the_trainjob_webhook_lets_num_nodes_change_only_on_an_elastic_runtime(runtime: dict[str, Any],
                                                                               allowed: bool) -> None:
    old, new = b.train_job(trainer={"numNodes": 2}), b.train_job(trainer={"numNodes": 3})
    answer = review(new, runtime, old)
    assert answer.allowed is allowed
    if not allowed:
        assert "spec.trainer: Invalid value: field is immutable" in answer.message
