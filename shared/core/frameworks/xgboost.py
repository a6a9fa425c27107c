"""XGBoostJob: rabit tracker env for every container (§5.3).

In: a defaulted XGBoostJob. Out: MASTER_PORT, MASTER_ADDR, WORLD_SIZE, RANK,
PYTHONUNBUFFERED and, for jobs of more than one pod, WORKER_PORT and
WORKER_ADDRS. Upstream: ``pkg/controller.v1/xgboost/xgboost.go@v1.9.0``.
"""

from __future__ import annotations

from shared.api import jobs
from shared.core import computations, naming, settings
from shared.core.frameworks import base

MASTER = "Master"
WORKER = "Worker"
PORT_NOT_FOUND = "failed to found the port"


def total_replicas(job: jobs.Job) -> int:
    """Σ replicas over the types whose ``replicas`` is set (unset ones are skipped)."""
    return sum(spec.replicas for spec in job.specs().values() if spec.replicas is not None)


def _status_rules(p: computations.Computation) -> None:
    """§7.4: the Master decides success; any failed pod fails the job unless its policy is ExitCode."""
    job = p.job
    running = f"XGBoostJob {job.name} is running."
    for rt in computations.replica_order(job):
        c = p.counts[rt]
        if rt == "Master":
            if c.active > 0:
                p.running(running)
            if p.replicas(rt) - c.succeeded == 0:
                p.running(running)
                p.succeeded(f"XGBoostJob {job.name} is successfully completed.")
                return
        if c.failed > 0:
            p.running(running)
            if p.policy(rt) == "ExitCode":
                p.restarting(f"XGBoostJob {job.name} is restarting because {c.failed} {rt} replica(s) failed.")
            else:
                p.failed(f"XGBoostJob {job.name} is failed because {c.failed} {rt} replica(s) failed.")


class XGBoost(base.GenericFramework):
    kind = jobs.XGBoostJob.KIND

    def status_rules(self, p: computations.Computation) -> None:
        _status_rules(p)

    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool:
        """The Master pod only."""
        return replica_type == MASTER

    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.EnvVar]:
        """§5.3 in upstream order; a Worker's rank is offset by the Master's replicas."""
        rank = index
        if replica_type.lower() == WORKER.lower():
            rank += base.replicas(job, MASTER, default=0)
        master_port = base.require_port(job, MASTER, PORT_NOT_FOUND)
        total = total_replicas(job)
        out = [
            base.env("MASTER_PORT", str(master_port)),
            base.env("MASTER_ADDR", naming.general_name(job.name, MASTER, 0)),
            base.env("WORLD_SIZE", str(total)),
            base.env("RANK", str(rank)),
            base.env("PYTHONUNBUFFERED", "1"),
        ]
        if total > 1:
            worker_port = base.require_port(job, WORKER, PORT_NOT_FOUND)
            addresses = ",".join(naming.general_name(job.name, WORKER, i) for i in range(total - 1))
            out += [base.env("WORKER_PORT", str(worker_port)), base.env("WORKER_ADDRS", addresses)]
        return out
