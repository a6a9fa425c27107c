"""JAXJob: ``jax.distributed`` coordinator env for every container (§5.5).

In: a defaulted JAXJob. Out: PYTHONUNBUFFERED, COORDINATOR_PORT,
COORDINATOR_ADDRESS (worker-0), NUM_PROCESSES, PROCESS_ID.
Upstream: ``pkg/controller.v1/jax/envvar.go@v1.9.0``. Upstream's
``failed to recognize the JAXJob Rank`` (a non-numeric index string) cannot
happen here: indices are ints.
"""

from __future__ import annotations

from shared.api import jobs
from shared.core import computations, naming, settings
from shared.core.frameworks import base

WORKER = "Worker"
PORT_NOT_EXPOSED = "default container port is not exposed"


_STATUS_RULES = computations.master_or_worker_rules(
    (), ("", ""),
    ("{kind} {ns}/{name} is running.", "{kind} {ns}/{name} successfully completed."), elastic_shortcut=False,
)
"""§7.6: the Worker decides (JAX has no Master)."""


class JAX(base.GenericFramework):
    kind = jobs.JAXJob.KIND
    status_selector = True

    def status_rules(self, p: computations.Computation) -> None:
        _STATUS_RULES(p)

    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool:
        """Index 0 of any replica type, i.e. ``worker-0``."""
        return index == 0

    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.EnvVar]:
        """§5.5 in upstream order; the coordinator port comes from the Worker template."""
        coordinator_port = base.require_port(job, WORKER, PORT_NOT_EXPOSED)
        return [
            base.env("PYTHONUNBUFFERED", "1"),
            base.env("COORDINATOR_PORT", str(coordinator_port)),
            base.env("COORDINATOR_ADDRESS", naming.general_name(job.name, WORKER, 0)),
            base.env("NUM_PROCESSES", str(base.total_replicas(job))),
            base.env("PROCESS_ID", str(index)),
        ]
