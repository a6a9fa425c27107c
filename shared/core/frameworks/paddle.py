"""PaddleJob: ``paddle.distributed.launch`` env for every container (§5.4).

In: a defaulted PaddleJob. Out: PYTHONUNBUFFERED, PADDLE_JOB_ID, PADDLE_NNODES
and the PADDLE_MASTER endpoint — collective mode (no Master: worker-0 is the
endpoint) or PS mode (master-0 is) — with the endpoint pod itself pointing at
its own IP through the ``POD_IP_DUMMY`` fieldRef.
Upstream: ``pkg/controller.v1/paddlepaddle/envvar.go@v1.9.0``.
"""

from __future__ import annotations

from shared.api import jobs
from shared.core import computations, naming, settings
from shared.core.frameworks import base

MASTER = "Master"
WORKER = "Worker"

POD_IP_DUMMY: base.EnvVar = {"name": "POD_IP_DUMMY", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def port(job: jobs.Job, replica_type: str) -> int:
    """Port ``master`` of the type's ``paddle`` container, 36543 when absent."""
    found = base.find_port(job, replica_type)
    return job.DEFAULT_PORT if found is None else found


_STATUS_RULES = computations.master_or_worker_rules(
    (MASTER,), ("{kind} {name} is running.", "{kind} {name} is successfully completed."),
    ("{kind} {ns}/{name} is running.", "{kind} {ns}/{name} successfully completed."), elastic_shortcut=False,
)
"""§7.5: the Master decides; without one the Worker does."""


class Paddle(base.GenericFramework):
    kind = jobs.PaddleJob.KIND
    status_selector = True

    def status_rules(self, p: computations.Computation) -> None:
        _STATUS_RULES(p)

    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool:
        """The Master pods only (collective worker-0 gets no role label)."""
        return replica_type == MASTER

    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.EnvVar]:
        """§5.4 in upstream order."""
        out = [
            base.env("PYTHONUNBUFFERED", "1"),
            base.env("PADDLE_JOB_ID", job.name),
            base.env("PADDLE_NNODES", str(base.total_replicas(job))),
        ]
        own_ip = [base.deep(POD_IP_DUMMY)]
        if MASTER not in job.specs():
            worker_port = port(job, WORKER)
            if index == 0:
                return out + own_ip + [base.env("PADDLE_MASTER", f"$(POD_IP_DUMMY):{worker_port}")]
            address = naming.general_name(job.name, WORKER, 0)
            return out + [base.env("PADDLE_MASTER", f"{address}:{worker_port}")]
        master_port = port(job, MASTER)
        address = f"{naming.general_name(job.name, MASTER, 0)}:{master_port}"
        if replica_type.lower() == MASTER.lower():
            if index == 0:
                out += own_ip + [base.env("PADDLE_MASTER", f"$(POD_IP_DUMMY):{master_port}")]
            else:
                out.append(base.env("PADDLE_MASTER", address))
            return out + [base.env("PADDLE_SERVER_NUM", "1")]
        return out + [base.env("PADDLE_MASTER", address), base.env("PADDLE_TRAINER_NUM", "1")]
