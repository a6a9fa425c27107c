"""The autoscaling/v2 HorizontalPodAutoscaler of an elastic job, shared by the families that make one
(PyTorchJob's elasticPolicy, kto's elastic TrainJob).

In: the HPA's metadata (named as the job, owned by it), the job as the scale target, the bounds and
the metrics. Out: the HPA manifest; the HPA controller scales the job through its scale subresource.
Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

Manifest = dict[str, Any]


def hpa(metadata: Manifest, api_version: str, kind: str, minimum: int | None, maximum: int,
        metrics: Sequence[Mapping[str, Any]]) -> Manifest:
    """The HPA ``metadata`` names, scaling the job of ``kind`` named as it between ``minimum``
    (left to the API server's default, 1, when None) and ``maximum`` on ``metrics``."""
    spec: Manifest = {"scaleTargetRef": {"kind": kind, "name": metadata["name"], "apiVersion": api_version}}
    if minimum is not None:
        spec["minReplicas"] = minimum
    spec["maxReplicas"] = maximum
    spec["metrics"] = [copy.deepcopy(dict(metric)) for metric in metrics]
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": metadata, "spec": spec}
