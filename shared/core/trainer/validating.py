"""Validation of kto's elastic TrainJob (``mlPolicy.torch.elasticPolicy``, kto's extension after
KEP-2903) against the TrainJob that uses it.

In: the runtime's ``elasticPolicy`` as stored (a dict) and the node count the TrainJob asks for
(``spec.trainer.numNodes``, else the runtime's ``mlPolicy.numNodes``). Out: the policy's bounds,
or :class:`~shared.core.errors.PlanError` naming the field and saying what is wrong:
``minNodes`` below 1 or above ``maxNodes`` (the CRD's rules, which sim/'s API server does not
evaluate), and :class:`OutOfRange` for a node count outside ``[minNodes, maxNodes]``: torchrun
was given ``--nnodes=minNodes:maxNodes``, so more nodes would not join the rendezvous and fewer
would not start it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.core import errors

POLICY_PATH = "spec.mlPolicy.torch.elasticPolicy"
NUM_NODES_PATH = "spec.trainer.numNodes"


class OutOfRange(errors.PlanError):
    """The TrainJob's node count lies outside its runtime's elastic bounds. Before the JobSet exists
    the job cannot start (it fails, as any plan its input stops); on a running job it is a scale
    kto refuses: the JobSet keeps its size and a Warning Event says why."""


def _count(policy: Mapping[str, Any], field: str) -> int:
    value = policy.get(field)
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.PlanError(f"{POLICY_PATH}.{field}", "Required value: an integer")
    return value


def bounds(policy: Mapping[str, Any]) -> tuple[int, int]:
    """(minNodes, maxNodes) of an elastic policy; :class:`errors.PlanError` when they are not a range."""
    low, high = _count(policy, "minNodes"), _count(policy, "maxNodes")
    if low < 1:
        raise errors.PlanError(f"{POLICY_PATH}.minNodes", f"Invalid value: {low}: minNodes must be at least 1")
    if high < low:
        raise errors.PlanError(f"{POLICY_PATH}.maxNodes", f"Invalid value: {high}: maxNodes must be greater than "
                                                          f"or equal to minNodes ({low})")
    return low, high


def check_nodes(policy: Mapping[str, Any], num_nodes: int) -> tuple[int, int]:
    """The policy's bounds once ``num_nodes`` is known to lie within them (:class:`OutOfRange` if not)."""
    low, high = bounds(policy)
    if not low <= num_nodes <= high:
        raise OutOfRange(NUM_NODES_PATH, f"Invalid value: {num_nodes}: numNodes must be between the runtime's "
                                         f"elasticPolicy minNodes ({low}) and maxNodes ({high})")
    return low, high
