"""Operator settings of the et-operator core (spec B.5 flags, and kto's choices).

In: command-line flags / environment, read once at start-up. Out: one frozen
value passed down to ``deciding.decide``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal


@dataclasses.dataclass(frozen=True)
class ElasticSettings:
    """How TrainingJobs are run, with upstream's defaults where upstream has the flag."""

    init_container_image: str = "alpine:3.10"
    """``--init-container-image``: image of the launcher's ``init-hostfile`` container."""

    create_ssh_secret: bool = True
    """``--create-ssh-secret``: create Secret ``<job>`` with a fresh key pair (ssh mode)."""

    requeue_seconds: float = 5.0
    """Upstream's fixed requeue interval while waiting (workers Running, processes gone)."""

    scaler_order: Literal["oldest-first", "newest-first"] = "oldest-first"
    """Which pending scaler of a job runs next. kto runs them in creation order (a
    queue); upstream runs the newest first (``newest-first``, spec C.48), which can
    starve an older one. One scaler runs at a time either way."""
