"""Defaults of a TrainingJob (spec B.2).

In: a TrainingJob as stored. Out: a copy with the defaults upstream's CRD
schema (or its code, when read) applies: ``restartPolicy: Never``,
``backoffLimit: 6``, ``worker.replicas: 1``, ``worker.restartPolicy: Never``,
``launcherAttachMode: ssh``. The launcher's ``restartPolicy`` stays unset
(unset means "do nothing when the launcher pod is gone", B.8 step 4), and
``slotsPerWorker`` is derived when read (``planning.slots``), so a stored job
is never rewritten by kto.
"""

from __future__ import annotations

from shared.api import elastic

DEFAULT_RESTART_POLICY = "Never"
DEFAULT_BACKOFF_LIMIT = 6
DEFAULT_WORKER_REPLICAS = 1
DEFAULT_WORKER_RESTART_POLICY = "Never"


def set_defaults(job: elastic.TrainingJob) -> elastic.TrainingJob:
    """A defaulted deep copy of ``job``; the input is not changed."""
    job = job.model_copy(deep=True)
    spec = job.spec
    if spec.restart_policy is None:
        spec.restart_policy = DEFAULT_RESTART_POLICY
    if spec.backoff_limit is None:
        spec.backoff_limit = DEFAULT_BACKOFF_LIMIT
    if spec.launcher_attach_mode is None:
        spec.launcher_attach_mode = elastic.ATTACH_SSH
    worker = spec.et_replica_specs.worker
    if worker is not None:
        if worker.replicas is None:
            worker.replicas = DEFAULT_WORKER_REPLICAS
        if worker.restart_policy is None:
            worker.restart_policy = DEFAULT_WORKER_RESTART_POLICY
    return job
