"""The per-kind plugins of the child planner, registered in one table keyed by kind.

In: a job. Out: the ``base.Framework`` that answers the planner's per-kind
questions for it. One module per framework; adding a kind means adding a
module and a line here.
"""

from __future__ import annotations

from shared.api import jobs
from shared.core import errors
from shared.core.frameworks import base, jax, mpi, paddle, pytorch, tensorflow, xgboost

REGISTRY: dict[str, base.Framework] = {
    jobs.PyTorchJob.KIND: pytorch.PyTorch(),
    jobs.TFJob.KIND: tensorflow.TensorFlow(),
    jobs.XGBoostJob.KIND: xgboost.XGBoost(),
    jobs.MPIJob.KIND: mpi.MPI(),
    jobs.PaddleJob.KIND: paddle.Paddle(),
    jobs.JAXJob.KIND: jax.JAX(),
}
"""Every supported kind → its plugin."""


def for_job(job: jobs.Job) -> base.Framework:
    """The plugin of ``job``'s kind; ``PlanError`` for a kind kto does not know."""
    try:
        return REGISTRY[job.KIND]
    except KeyError:
        raise errors.PlanError("kind", f"unsupported kind {job.KIND!r}") from None
