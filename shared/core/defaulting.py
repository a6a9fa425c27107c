"""Defaulting of the six kubeflow.org/v1 kinds (spec §2).

In: a loaded (and validated) job. Out: a defaulted deep copy; the input is
never touched and the copy shares no dict or list with it (pod templates are
plain dicts, so aliasing would let a later mutation leak back).

Upstream applies these defaults in memory only, on every reconcile; so does
the reconciler (``set_defaults``). The mutating admission webhook (docs/admission.md)
writes a part of them to the API server (``stored_defaults``): the scalar
fields of maps that depend on nothing else in the job (``cleanPodPolicy``,
``successPolicy``, per replica type ``replicas`` and ``restartPolicy``). The
rest stays in memory: defaults derived from other fields (elastic min/max
from the Worker replicas, PyTorch's ``nprocPerNode: auto`` unless the
deprecated field is set, MPIJob's two clean-pod policies kept equal) would
stop following the fields they come from when a later ``kubectl apply``
changes those; a camel-cased key would come back beside its new name; and
the default port, inside the ``containers`` list, would make every
``kubectl apply`` of an unchanged file a write (a custom resource is patched
with a JSON merge patch, which replaces a list whole).
``set_defaults(stored_defaults(job)) == set_defaults(job)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from shared.api import common, jobs

JobT = TypeVar("JobT", bound=jobs.Job)


def set_defaults(job: JobT) -> JobT:
    """Return a defaulted deep copy of ``job`` (spec §2.1, one rule set per kind)."""
    copy = job.model_copy(deep=True)
    _RULES[copy.KIND](copy, True)
    return copy


def stored_defaults(job: JobT) -> JobT:
    """A deep copy of ``job`` with only the defaults admission stores: §2.1 without
    camel-casing and without the derived defaults (module docstring)."""
    copy = job.model_copy(deep=True)
    _RULES[copy.KIND](copy, False)
    return copy


# ---------------------------------------------------------------------------
# Common helpers (upstream defaulting_utils.go)
# ---------------------------------------------------------------------------


def _camel_case_replica_types(job: jobs.Job) -> None:
    """Move e.g. ``WORKER`` / ``worker`` to the canonical key ``Worker``, in place.

    Upstream moves the first case-insensitive match and, when the canonical
    key is also present, overwrites it (Go map order decides which wins).
    Validation rejects such collisions (``Duplicate``), so here a canonical
    key that is already present is simply kept.
    """
    specs = job.replica_specs
    if not specs:
        return
    renamed = dict(specs)
    for canonical in job.REPLICA_TYPES:
        if canonical in renamed:
            continue
        for key in list(renamed):
            if key.lower() == canonical.lower():
                # Rebuild the dict so the entry keeps its position.
                renamed = {canonical if k == key else k: v for k, v in renamed.items()}
                break
    if list(renamed) != list(specs):
        job.replica_specs = renamed


def _default_replicas(spec: common.ReplicaSpec, replicas: int) -> None:
    if spec.replicas is None:
        spec.replicas = replicas


def _default_restart_policy(spec: common.ReplicaSpec, policy: common.RestartPolicy) -> None:
    if not spec.restart_policy:
        spec.restart_policy = policy


def _default_port(spec: common.ReplicaSpec, container_name: str, port_name: str, port: int) -> None:
    """Append the kind's default port to the default-named container, else container 0.

    A template without containers (rejected by validation) is left alone
    instead of crashing as upstream would.
    """
    pod_spec = spec.template.get("spec")
    if not isinstance(pod_spec, dict):
        return
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return
    index = 0
    for i, container in enumerate(containers):
        if isinstance(container, dict) and container.get("name") == container_name:
            index = i
            break
    container = containers[index]
    if not isinstance(container, dict):
        return
    ports = container.get("ports")
    if ports is None:
        ports = []
    if not isinstance(ports, list):
        return
    if any(isinstance(p, dict) and p.get("name") == port_name for p in ports):
        return
    container["ports"] = [*ports, {"name": port_name, "containerPort": port}]


def _default_replica_specs(job: jobs.Job, *, port: bool) -> None:
    """Replicas → 1, restartPolicy → the kind default and (optionally) the default port, per RT."""
    for spec in job.specs().values():
        _default_replicas(spec, 1)
        _default_restart_policy(spec, job.DEFAULT_RESTART_POLICY)
        if port:
            _default_port(spec, job.DEFAULT_CONTAINER, job.DEFAULT_PORT_NAME, job.DEFAULT_PORT)


def _default_clean_pod_policy(job: jobs.Job) -> None:
    if job.run_policy.clean_pod_policy is None:
        job.run_policy.clean_pod_policy = "None"


def _default_elastic_bounds(
    policy: jobs.ElasticPolicy | jobs.PaddleElasticPolicy | None, job: jobs.Job
) -> None:
    """Min/max replicas of an elastic policy (PyTorch and Paddle, §2.1)."""
    if policy is None:
        return
    if policy.min_replicas is not None and policy.max_replicas is not None:
        return
    if policy.max_replicas is not None:
        policy.min_replicas = policy.max_replicas
    elif policy.min_replicas is not None:
        policy.max_replicas = policy.min_replicas
    else:
        worker = job.specs().get("Worker")
        if worker is None:
            # Upstream dereferences a missing Worker and panics; leave the bounds unset.
            return
        policy.min_replicas = worker.replicas
        policy.max_replicas = worker.replicas


# ---------------------------------------------------------------------------
# Per-kind rules (upstream *_defaults.go)
# ---------------------------------------------------------------------------


def _pytorch(job: jobs.Job, derived: bool) -> None:
    assert isinstance(job, jobs.PyTorchJob)
    _default_clean_pod_policy(job)
    if derived:
        _camel_case_replica_types(job)
    _default_replica_specs(job, port=derived)
    if not derived:
        return
    spec = job.spec
    _default_elastic_bounds(spec.elastic_policy, job)
    deprecated_nproc = spec.elastic_policy.n_proc_per_node if spec.elastic_policy else None
    if deprecated_nproc is None and spec.nproc_per_node is None:
        spec.nproc_per_node = "auto"


def _tensorflow(job: jobs.Job, derived: bool) -> None:
    assert isinstance(job, jobs.TFJob)
    _default_clean_pod_policy(job)
    if job.spec.success_policy is None:
        job.spec.success_policy = ""
    if derived:
        _camel_case_replica_types(job)
    _default_replica_specs(job, port=derived)


def _generic(job: jobs.Job, derived: bool) -> None:
    """XGBoostJob and JAXJob: clean-pod policy, camel-casing, per-RT defaults."""
    _default_clean_pod_policy(job)
    if derived:
        _camel_case_replica_types(job)
    _default_replica_specs(job, port=derived)


def _paddle(job: jobs.Job, derived: bool) -> None:
    assert isinstance(job, jobs.PaddleJob)
    _generic(job, derived)
    if derived:
        _default_elastic_bounds(job.spec.elastic_policy, job)


def _mpi(job: jobs.Job, derived: bool) -> None:
    """MPIJob: both clean-pod policies, Launcher 1 / Worker 0, no ports, no camel-casing.

    Also the controller's per-reconcile sync: the effective policy is
    ``runPolicy.cleanPodPolicy`` when set, else the deprecated
    ``spec.cleanPodPolicy``, and both fields end up holding it.
    """
    assert isinstance(job, jobs.MPIJob)
    run_policy = job.run_policy
    if job.spec.clean_pod_policy is None and run_policy.clean_pod_policy is None:
        job.spec.clean_pod_policy = "None"
        run_policy.clean_pod_policy = "None"
    if derived:
        effective = run_policy.clean_pod_policy
        if effective is None:
            effective = job.spec.clean_pod_policy
        job.spec.clean_pod_policy = effective
        run_policy.clean_pod_policy = effective
    specs = job.specs()
    for replica_type, replicas in (("Launcher", 1), ("Worker", 0)):
        spec = specs.get(replica_type)
        if spec is not None:
            _default_replicas(spec, replicas)
            _default_restart_policy(spec, job.DEFAULT_RESTART_POLICY)


_RULES: dict[str, Callable[[jobs.Job, bool], None]] = {
    jobs.PyTorchJob.KIND: _pytorch,
    jobs.TFJob.KIND: _tensorflow,
    jobs.XGBoostJob.KIND: _generic,
    jobs.MPIJob.KIND: _mpi,
    jobs.PaddleJob.KIND: _paddle,
    jobs.JAXJob.KIND: _generic,
}
"""Defaulting rules, keyed by kind."""

__all__ = ["set_defaults", "stored_defaults"]
