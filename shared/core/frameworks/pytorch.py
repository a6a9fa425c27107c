"""PyTorchJob: torchrun env, the ``init-pytorch`` wait-for-master container, the elastic HPA.

In: a defaulted PyTorchJob. Out: the env of every container (§5.1), the init
container of Worker pods when a Master exists, and the autoscaling/v2 HPA of
an elastic job with metrics (§8). Upstream: ``pkg/controller.v1/pytorch/
{envvar.go,master.go,elastic.go,initcontainer.go,hpa.go}@v1.9.0``.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.api import jobs
from shared.core import autoscalers, computations, errors, naming, owners, settings
from shared.core.frameworks import base

MASTER = "Master"
WORKER = "Worker"
PORT_NOT_FOUND = "port not found"
INIT_CONTAINER_NAME = "init-pytorch"


def _elastic(job: jobs.Job) -> jobs.ElasticPolicy | None:
    return job.spec.elastic_policy if isinstance(job.spec, jobs.PyTorchJobSpec) else None


def _nproc_per_node(job: jobs.Job) -> str | None:
    return job.spec.nproc_per_node if isinstance(job.spec, jobs.PyTorchJobSpec) else None


def nproc(job: jobs.Job) -> int:
    """``spec.nprocPerNode`` as an int; 1 for ``auto``/``cpu``/``gpu`` or unset."""
    value = _nproc_per_node(job)
    if value is None:
        return 1
    try:
        return int(value)
    except ValueError:
        return 1


def master_env(job: jobs.Job) -> list[base.EnvVar]:
    """MASTER_PORT, PET_MASTER_PORT, MASTER_ADDR, PET_MASTER_ADDR (master.go)."""
    port = str(base.require_port(job, MASTER, PORT_NOT_FOUND))
    address = naming.general_name(job.name, MASTER, 0)
    return [
        base.env("MASTER_PORT", port),
        base.env("PET_MASTER_PORT", port),
        base.env("MASTER_ADDR", address),
        base.env("PET_MASTER_ADDR", address),
    ]


def elastic_env(job: jobs.Job) -> list[base.EnvVar]:
    """The torchrun rendezvous block (elastic.go); empty without an elasticPolicy.

    kto treats an empty, non-nil ``rdzvConf`` like a missing one (no
    ``PET_RDZV_CONF``); upstream crashes the reconcile on it.
    """
    policy = _elastic(job)
    if policy is None:
        return []
    host = policy.rdzv_host if policy.rdzv_host is not None else f"{job.name}-worker-0"
    port = policy.rdzv_port if policy.rdzv_port is not None else base.require_port(job, WORKER, PORT_NOT_FOUND)
    if policy.min_replicas is not None and policy.max_replicas is not None:
        nnodes = f"{policy.min_replicas}:{policy.max_replicas}"
    else:
        nnodes = str(base.replicas(job, WORKER))
    out = [
        base.env("PET_RDZV_ENDPOINT", f"{host}:{port}"),
        base.env("PET_RDZV_BACKEND", "c10d" if policy.rdzv_backend is None else policy.rdzv_backend),
        base.env("PET_NNODES", nnodes),
    ]
    if policy.max_restarts is not None:
        out.append(base.env("PET_MAX_RESTARTS", str(policy.max_restarts)))
    if policy.n_proc_per_node is not None:
        out.append(base.env("PET_NPROC_PER_NODE", str(policy.n_proc_per_node)))
    if policy.rdzv_id is not None:
        out.append(base.env("PET_RDZV_ID", policy.rdzv_id))
    if policy.rdzv_conf:
        conf = ",".join(f"{c.key or ''}={c.value or ''}" for c in policy.rdzv_conf)
        out.append(base.env("PET_RDZV_CONF", conf))
    if policy.standalone:
        out.append(base.env("PET_STANDALONE", ""))
    return out


def init_container(job: jobs.Job, operator: settings.OperatorSettings) -> base.Manifest:
    """``init-pytorch``: wait until ``<job>-master-0`` resolves (initcontainer.go default template)."""
    master = naming.general_name(job.name, MASTER, 0)
    script = (
        f"err=1;for i in $(seq {operator.pytorch_init_container_max_tries}); do if nslookup {master}; "
        "then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err"
    )
    return {
        "name": INIT_CONTAINER_NAME,
        "image": operator.pytorch_init_container_image,
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "limits": {"cpu": "100m", "memory": "20Mi"},
            "requests": {"cpu": "50m", "memory": "10Mi"},
        },
        "command": ["sh", "-c", script],
    }


def desired_hpa(job: jobs.Job) -> base.Manifest | None:
    """The autoscaling/v2 HPA ``<job>`` of an elastic job with metrics (§8), else None.

    Suspension is not looked at here; ``auxiliary_children`` leaves the HPA
    out of a suspended job's plan (upstream deletes it on suspend).
    """
    policy = _elastic(job)
    if policy is None or policy.metrics is None:
        return None
    if policy.max_replicas is None:
        raise errors.PlanError("spec.elasticPolicy.maxReplicas", "Required value")
    return autoscalers.hpa(owners.child_metadata(job, job.name), jobs.API_VERSION, job.KIND, policy.min_replicas,
                           policy.max_replicas, policy.metrics)


_STATUS_RULES = computations.master_or_worker_rules(
    (MASTER,), ("{kind} {name} is running.", "{kind} {name} is successfully completed."),
    ("{kind} {ns}/{name} is running.", "{kind} {ns}/{name} successfully completed."), elastic_shortcut=True,
)
"""§7.2: the Master decides; without one the Worker does (an elastic job succeeds with its first worker)."""


ELASTIC_RANGE_REASON = "ElasticReplicasOutOfRange"


def elastic_range(job: jobs.Job) -> tuple[int, int] | None:
    """(minReplicas, maxReplicas) of an elastic job that states both, else None."""
    policy = _elastic(job)
    if policy is None or policy.min_replicas is None or policy.max_replicas is None:
        return None
    return policy.min_replicas, policy.max_replicas


def elastic_workers(job: jobs.Job) -> int:
    """The Worker pods an elastic job runs: ``Worker.replicas`` (which ``kubectl scale``
    and the HPA set through the scale subresource) kept within [minReplicas, maxReplicas].
    Upstream runs whatever ``replicas`` says; a scale past the bounds torchrun was given
    (``PET_NNODES=min:max``) would start workers the rendezvous refuses, or stop it below
    its minimum, so kto holds the count at the nearest bound and says so
    (:data:`ELASTIC_RANGE_REASON`)."""
    wanted = base.replicas(job, WORKER)
    bounds = elastic_range(job)
    if bounds is None:
        return wanted
    low, high = bounds
    return min(max(wanted, low), high)


class PyTorch(base.GenericFramework):
    kind = jobs.PyTorchJob.KIND
    status_selector = True

    def replica_count(self, job: jobs.Job, replica_type: str) -> int:
        if replica_type == WORKER:
            return elastic_workers(job)
        return super().replica_count(job, replica_type)

    def template_warnings(self, job: jobs.Job, operator: settings.OperatorSettings) -> list[tuple[str, str]]:
        warnings = super().template_warnings(job, operator)
        bounds = elastic_range(job)
        wanted = base.replicas(job, WORKER)
        if bounds is not None and not bounds[0] <= wanted <= bounds[1]:
            warnings.append((
                ELASTIC_RANGE_REASON,
                f"spec.pytorchReplicaSpecs.Worker.replicas: {wanted} is outside spec.elasticPolicy "
                f"[minReplicas {bounds[0]}, maxReplicas {bounds[1]}]; running {elastic_workers(job)} workers",
            ))
        return warnings

    def status_rules(self, p: computations.Computation) -> None:
        _STATUS_RULES(p)

    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool:
        """The Master pods; without a Master RT, Worker 0."""
        if MASTER in job.specs():
            return replica_type == MASTER
        return replica_type == WORKER and index == 0

    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.EnvVar]:
        """§5.1 in upstream order, identical for every container of the pod."""
        total = base.total_replicas(job)
        out = [base.env("PYTHONUNBUFFERED", "1")]
        if MASTER in job.specs():
            rank = index + 1 if replica_type.lower() == WORKER.lower() else index
            out += master_env(job)
            out += [
                base.env("WORLD_SIZE", str(total * nproc(job))),
                base.env("RANK", str(rank)),
                base.env("PET_NODE_RANK", str(rank)),
            ]
        nproc_per_node = _nproc_per_node(job)
        if nproc_per_node is not None:
            out.append(base.env("PET_NPROC_PER_NODE", nproc_per_node))
        if _elastic(job) is not None:
            out += elastic_env(job)
        else:
            out.append(base.env("PET_NNODES", str(total)))
        return out

    def init_containers(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.Manifest]:
        """``init-pytorch`` on Worker pods, only when a Master exists."""
        if MASTER in job.specs() and replica_type.lower() == WORKER.lower():
            return [init_container(job, operator)]
        return []

    def auxiliary_children(
        self, job: jobs.Job, operator: settings.OperatorSettings, observed: Sequence[base.Manifest]
    ) -> list[base.Manifest]:
        """The elastic HPA, unless the job is suspended."""
        run_policy = job.spec.run_policy
        if run_policy is not None and run_policy.suspend:
            return []
        hpa = desired_hpa(job)
        return [] if hpa is None else [hpa]
