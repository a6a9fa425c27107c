"""Operator settings that change what the pure core plans (spec §10).

In: command-line flags / environment, read once at start-up by a command.
Out: one frozen value passed down explicitly to planning and decisions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

VOLCANO_SCHEDULER_NAME = "volcano"

SERVE_JOBSETS_ENV = "KTO_SERVE_JOBSETS"
"""The environment variable of :attr:`OperatorSettings.serve_jobsets`."""


def serve_jobsets(environ: Mapping[str, str]) -> bool:
    """``KTO_SERVE_JOBSETS``: true unless it says false, 0, no or off (any case)."""
    value = environ.get(SERVE_JOBSETS_ENV, "").strip().lower()
    if value in ("", "true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{SERVE_JOBSETS_ENV}={value!r}: say true or false")


@dataclasses.dataclass(frozen=True)
class OperatorSettings:
    """The upstream operator flags that shape children, with upstream defaults."""

    gang_scheduler_name: str = ""
    """`--gang-scheduler-name`: "volcano" (any case) → Volcano PodGroups; another
    non-empty value → scheduler-plugins PodGroups with that scheduler name; "" → off."""

    pytorch_init_container_image: str = "alpine:3.10"
    """`--pytorch-init-container-image`: image of the `init-pytorch` container."""

    pytorch_init_container_max_tries: int = 100
    """`--pytorch-init-container-max-tries`: nslookup attempts before giving up."""

    mpi_kubectl_delivery_image: str = "kubeflow/kubectl-delivery:latest"
    """`--mpi-kubectl-delivery-image`: image of the MPI launcher's init container."""

    cluster_domain: str = ""
    """Env `CUSTOM_CLUSTER_DOMAIN`: suffix of TF_CONFIG host names, appended when non-empty."""

    serve_jobsets: bool = True
    """Env `KTO_SERVE_JOBSETS`: kto serves JobSets (``jobset.x-k8s.io``) itself; false where the
    real JobSet controller runs (`kto up --jobset-controller upstream`)."""

    @property
    def gang_scheduling(self) -> bool:
        return bool(self.gang_scheduler_name)

    @property
    def volcano(self) -> bool:
        return self.gang_scheduler_name.lower() == VOLCANO_SCHEDULER_NAME

    @property
    def pod_scheduler_name(self) -> str:
        """The ``schedulerName`` pods get in gang mode: ``volcano``, or the configured name."""
        return VOLCANO_SCHEDULER_NAME if self.volcano else self.gang_scheduler_name
