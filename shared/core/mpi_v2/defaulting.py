"""Defaults of an MPIJob v2beta1 (spec A.4), as the CRD and the controller apply them.

In: a loaded MPIJob. Out: a defaulted deep copy (the input is never changed:
upstream defaults its in-memory copy on every sync and never writes it back).
"""

from __future__ import annotations

from shared.api import mpijobs


def set_defaults(job: mpijobs.MPIJob) -> mpijobs.MPIJob:
    """A.4 rules 1–7 on a copy; rule 8 (nil booleans read as false) is the model's properties."""
    job = job.model_copy(deep=True)
    spec = job.spec
    if job.run_policy.clean_pod_policy is None:
        job.run_policy.clean_pod_policy = "None"
    if spec.slots_per_worker is None:
        spec.slots_per_worker = 1
    if not spec.ssh_auth_mount_path:
        spec.ssh_auth_mount_path = mpijobs.DEFAULT_SSH_AUTH_MOUNT_PATH
    if not spec.mpi_implementation:
        spec.mpi_implementation = mpijobs.OPEN_MPI
    if not spec.launcher_creation_policy:
        spec.launcher_creation_policy = mpijobs.AT_STARTUP
    for replica_type, restart_policy, replicas in (
        (mpijobs.LAUNCHER, "OnFailure", 1),
        (mpijobs.WORKER, "Never", 0),
    ):
        replica = job.replica(replica_type)
        if replica is None:
            continue
        if not replica.restart_policy:
            replica.restart_policy = restart_policy
        if replica.replicas is None:
            replica.replicas = replicas
    return job
