"""TFJob: the ``TF_CONFIG`` cluster spec of distributed jobs (§5.2).

In: a defaulted TFJob and the operator's cluster domain. Out: one env var,
``TF_CONFIG``, for the first container named ``tensorflow`` — compact JSON
with upstream's key order (``cluster`` keys sorted; ``cluster``, ``task``,
``environment``), or the sparse form when ``enableDynamicWorker`` is set.
Upstream: ``pkg/controller.v1/tensorflow/{tensorflow.go,tfjob_controller.go}@v1.9.0``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shared.api import jobs, objects
from shared.core import computations, conditions, naming, settings
from shared.core.events import Event
from shared.core.frameworks import base

CHIEF = "Chief"
MASTER = "Master"
PS = "PS"
WORKER = "Worker"
EVALUATOR = "Evaluator"
KNOWN_TYPES = (CHIEF, EVALUATOR, MASTER, PS, WORKER)

ClusterSpec = dict[str, list[str]]


def is_distributed(job: jobs.Job) -> bool:
    """Whether Σ replicas over the five known types (unset = 1) is not exactly 1."""
    specs = job.specs()
    count = 0
    for replica_type in KNOWN_TYPES:
        spec = specs.get(replica_type)
        if spec is not None:
            count += 1 if spec.replicas is None else spec.replicas
    return count != 1


def port(job: jobs.Job, replica_type: str) -> int:
    """``tfjob-port`` of the type's ``tensorflow`` container, 2222 when absent."""
    found = base.find_port(job, replica_type)
    return job.DEFAULT_PORT if found is None else found


def cluster_spec(job: jobs.Job, operator: settings.OperatorSettings) -> ClusterSpec:
    """rt (lower) → ``<job>-<rt>-<i>.<ns>.svc[.<domain>]:<port>`` for every type in the map, keys sorted."""
    cluster: ClusterSpec = {}
    for replica_type in base.ordered_replica_types(job):
        rt = replica_type.lower()
        replica_port = port(job, replica_type)
        addresses = []
        for index in range(base.replicas(job, replica_type)):
            host = f"{naming.general_name(job.name, rt, index)}.{job.namespace}.svc"
            if operator.cluster_domain:
                host += f".{operator.cluster_domain}"
            addresses.append(f"{host}:{replica_port}")
        cluster[rt] = addresses
    return {key: cluster[key] for key in sorted(cluster)}


def sparse_cluster_spec(cluster: ClusterSpec, rt: str, index: int) -> dict[str, Any]:
    """The ``enableDynamicWorker`` cluster: a worker sees itself and every PS, a PS itself only.

    A worker of a job without PS gets ``"ps": null`` as upstream does.
    """
    if rt == PS.lower():
        return {"worker": {}, "ps": [cluster[rt][index]]}
    if rt == WORKER.lower():
        return {"worker": {str(index): cluster[rt][index]}, "ps": cluster.get(PS.lower())}
    return {"worker": {}, "ps": []}


def _dump(value: Any) -> str:
    # Go's encoding/json: no spaces, non-ASCII kept as is.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tf_config(job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings) -> str:
    """The ``TF_CONFIG`` value of pod ``index`` of ``replica_type``."""
    rt = replica_type.lower()
    cluster = cluster_spec(job, operator)
    task = {"type": rt, "index": index}
    dynamic = isinstance(job.spec, jobs.TFJobSpec) and bool(job.spec.enable_dynamic_worker)
    if dynamic:
        return _dump({"cluster": sparse_cluster_spec(cluster, rt, index), "task": task})
    return _dump({"cluster": cluster, "task": task, "environment": "cloud"})


def _worker0_completed(p: computations.Computation) -> bool:
    if "Worker" not in p.job.specs():
        return True
    pod = p.pods.get("Worker", {}).get(0)
    if pod is None or objects.phase_of(pod) != "Succeeded":
        return False
    return objects.default_exit_code(pod, p.job.DEFAULT_CONTAINER) == 0


def _status_rules(p: computations.Computation) -> None:
    """§7.3, visiting Chief, Evaluator, Master, PS, Worker."""
    job = p.job
    assert isinstance(job.spec, jobs.TFJobSpec)
    ns_name = f"{job.namespace}/{job.name}"
    restarting = conditions.find(p.status, conditions.RESTARTING)
    remembered = (restarting.reason, restarting.message) if restarting is not None else None
    specs = job.specs()
    has_chief = "Chief" in specs or "Master" in specs
    worker0_completed = _worker0_completed(p)
    succeeded_now = False
    for rt in ("Chief", "Evaluator", "Master", "PS", "Worker"):
        if rt not in specs:
            continue
        c = p.counts[rt]
        expected = p.replicas(rt) - c.succeeded
        if has_chief and rt in ("Chief", "Master"):
            if c.active > 0:
                p.running(f"TFJob {ns_name} is running.")
            if expected == 0:
                p.succeeded(f"TFJob {ns_name} successfully completed.")
                succeeded_now = True
        elif not has_chief and rt == "Worker":
            all_workers = job.spec.success_policy == "AllWorkers"
            if expected == 0 or (worker0_completed and not all_workers):
                p.succeeded(f"TFJob {ns_name} successfully completed.")
                succeeded_now = True
            elif c.active > 0:
                p.running(f"TFJob {ns_name} is running.")
        if c.failed > 0:
            if remembered is not None:
                if conditions.set_condition(
                    p.status, conditions.RESTARTING, "True", remembered[0] or p.reason("Restarting"),
                    remembered[1] or "", p.now,
                ):
                    p.events.append(Event("Warning", p.reason("Restarting"), remembered[1] or ""))
            elif job.spec.enable_dynamic_worker and rt == "Worker":
                continue
            elif not succeeded_now and not conditions.is_true(p.status, conditions.SUCCEEDED):
                p.failed(f"TFJob {ns_name} has failed because {c.failed} {rt} replica(s) failed.")


class TensorFlow(base.GenericFramework):
    kind = jobs.TFJob.KIND

    def status_rules(self, p: computations.Computation) -> None:
        _status_rules(p)

    def is_master_role(self, job: jobs.Job, replica_type: str, index: int) -> bool:
        """Chief/Master pods; without either, Worker 0."""
        specs = job.specs()
        if CHIEF in specs or MASTER in specs:
            return replica_type in (CHIEF, MASTER)
        return replica_type == WORKER and index == 0

    def cluster_env(
        self, job: jobs.Job, replica_type: str, index: int, operator: settings.OperatorSettings
    ) -> list[base.EnvVar]:
        """``TF_CONFIG``, only for distributed jobs."""
        if not is_distributed(job):
            return []
        return [base.env("TF_CONFIG", tf_config(job, replica_type, index, operator))]

    def env_containers(self, job: jobs.Job, replica_type: str, containers: Sequence[base.Manifest]) -> list[int]:
        """The first container named ``tensorflow`` only."""
        for position, container in enumerate(containers):
            if container.get("name") == job.DEFAULT_CONTAINER:
                return [position]
        return []
