"""kto's elastic TrainJob is checked against its runtime's bounds: minNodes at least 1, maxNodes at
least minNodes, numNodes between them (shared/core/trainer/validating.py)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.core import errors
from shared.core.trainer import validating


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
