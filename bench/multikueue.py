"""Jobs/s through MultiKueue: PyTorchJobs submitted once to a manager cluster, run on its workers.

In: a :class:`Fleet` (the manager's and each worker's kubeconfig and context, real control planes
with the real Kueue v0.17.0 in each and the manager connected to the workers) and
:class:`MultiKueueSettings` (how many jobs, how many replicas, how long their pods run). What runs
the workers' copies is the caller's: kto serving all three clusters from one bus (``kto bench
--multikueue``, through ``kto up``'s stack), or Kubeflow's training-operator v1.8.1 in each
worker (``--operator training-operator``: :func:`training_operators` starts them on the same kind
of clusters, and the Kueues and the MultiKueue wiring as ``kto up`` does).

Out: :func:`run` → the figures: ``jobs_per_s`` (jobs Succeeded on the manager / (the last such
moment − the first POST), pod run time included), ``submitted_to_succeeded_ms`` (per job, from
its POST's response to the first poll of the manager that shows it Succeeded — the status
MultiKueue mirrors back from the worker), and ``by_worker``, where each ran (its Workload's
``status.clusterName``). One clock, this process's ``time.monotonic()``; the manager is polled
with one list every :data:`POLL` seconds.

Every job asks for CPU only (the example queues of deploy/overlays: 16 CPUs a worker, 10m a pod),
so quota does not limit the run: the figures are MultiKueue's dispatch, the operator's run and the
mirroring back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import pathlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import yaml

from bench import pipeline
from realparts import kueue, upstream
from shared.api import kueue as kueue_api
from shared.kube import clients, resources

POLL = 0.25
"""Seconds between two lists of the manager's jobs."""
QUEUE = "user-queue"
"""The LocalQueue of deploy/overlays/kueue/queues every job names."""
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
MANAGER_QUEUES = REPO_ROOT / "deploy" / "overlays" / "multikueue" / "manager" / "queues"
WORKER_QUEUES = REPO_ROOT / "deploy" / "overlays" / "kueue" / "queues"
PYTORCHJOBS = pipeline.PYTORCHJOBS

Cluster = tuple[pathlib.Path, str]
"""(kubeconfig, context) of one cluster."""


@dataclasses.dataclass(frozen=True)
class Fleet:
    """A MultiKueue manager and its workers, each reached through its own kubeconfig and context."""

    manager: Cluster
    """The cluster jobs are submitted to."""
    workers: Mapping[str, Cluster]
    """MultiKueueCluster name → the worker it names."""


@dataclasses.dataclass(frozen=True)
class MultiKueueSettings:
    jobs: int = 50
    """PyTorchJobs submitted, all at once, to the manager."""
    replicas: int = 2
    """Pods per job: 1 Master and replicas-1 Workers."""
    pod_duration: str = "1s"
    """How long each pod runs (annotation ``sim.kto.dev/duration``, the node agent's simulated run)."""
    timeout: float = 600.0
    """Seconds every job has to be Succeeded on the manager."""
    namespace: str = "default"
    """Where the jobs are created, on the manager and, by MultiKueue, on the workers."""

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.replicas < 1:
            raise pipeline.BenchError(f"--jobs and --replicas must be at least 1 (got {self.jobs}, {self.replicas})")


def queue_manifests(overlay: pathlib.Path) -> list[dict[str, Any]]:
    """The objects of a queues overlay (``kubectl kustomize``, the kubectl of this venv)."""
    kubectl = pathlib.Path(sys.executable).parent / "kubectl"
    built = subprocess.run([str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60,
                           check=False)
    if built.returncode != 0:
        raise pipeline.BenchError(f"kubectl kustomize {overlay}: {built.stderr.strip()}")
    return [document for document in yaml.safe_load_all(built.stdout) if document]


async def apply_queues(fleet: Fleet) -> None:
    """The example queues: the manager's (with the MultiKueue admission check), each worker's."""
    for (kubeconfig, context), overlay in [(fleet.manager, MANAGER_QUEUES),
                                           *((worker, WORKER_QUEUES) for worker in fleet.workers.values())]:
        async with await clients.KubeClient.connect(kubeconfig, context) as client:
            for manifest in queue_manifests(overlay):
                api_version = manifest["apiVersion"]
                plural = manifest["kind"].lower() + "s"
                rt = resources.ResourceType(api_version.split("/")[0], api_version.split("/")[1], plural,
                                            manifest["kind"], namespaced="namespace" in manifest["metadata"])
                await client.put(rt, manifest["metadata"].get("namespace"), manifest)


def job_manifest(name: str, settings: MultiKueueSettings) -> dict[str, Any]:
    manifest = pipeline.job_manifest(name, settings.namespace, settings.replicas, settings.pod_duration)
    manifest["metadata"]["labels"] = {kueue_api.QUEUE_NAME_LABEL: QUEUE}
    return manifest


def _succeeded(job: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Succeeded" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


async def run(fleet: Fleet, settings: MultiKueueSettings, progress: Callable[[str], None]) -> dict[str, Any]:
    """Submit the jobs to the manager, wait until every one is Succeeded there; the figures."""
    await apply_queues(fleet)
    kubeconfig, context = fleet.manager
    async with await clients.KubeClient.connect(kubeconfig, context) as client:
        names = [f"mk-bench-{i}" for i in range(settings.jobs)]
        posted: dict[str, float] = {}
        began = time.monotonic()
        for name in names:
            await client.create(PYTORCHJOBS, settings.namespace, job_manifest(name, settings))
            posted[name] = time.monotonic()
        progress(f"{settings.jobs} jobs submitted to {context} in {time.monotonic() - began:.1f}s")
        done: dict[str, float] = {}
        deadline = began + settings.timeout
        while len(done) < len(names):
            listed, _ = await client.list(PYTORCHJOBS, settings.namespace)
            now = time.monotonic()
            for job in listed:
                name = job["metadata"]["name"]
                if name in posted and name not in done and _succeeded(job):
                    done[name] = now
            if now > deadline:
                raise pipeline.BenchError(f"{len(names) - len(done)} of {len(names)} jobs not Succeeded on the "
                                          f"manager within {settings.timeout:g}s")
            await asyncio.sleep(POLL)
        workloads, _ = await client.list(resources.WORKLOADS, settings.namespace)
    by_worker = collections.Counter(str((w.get("status") or {}).get("clusterName")) for w in workloads
                                    if any(o.get("name") in posted for o in w["metadata"].get("ownerReferences") or []))
    span = max(done.values()) - began
    latencies = [(done[name] - posted[name]) * 1000 for name in names]
    return {
        "jobs_completed": len(done),
        "seconds": round(span, 2),
        "jobs_per_s": round(len(done) / span, 2) if span > 0 else None,
        "submitted_to_succeeded_ms": {f"p{q}": _rounded(pipeline.percentile(latencies, q)) for q in (50, 95, 99)},
        "by_worker": dict(sorted(by_worker.items())),
        "parameters": {"jobs": settings.jobs, "replicas": settings.replicas, "pod_duration": settings.pod_duration,
                       "workers": len(fleet.workers), "control_plane": "kube"},
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@contextlib.asynccontextmanager
async def training_operators(fleet: Fleet, directory: pathlib.Path,
                             progress: Callable[[str], None]) -> AsyncIterator[None]:
    """The real Kueue on every cluster of ``fleet`` (the manager MultiKueue's), the manager
    connected to the workers, and Kubeflow's training-operator in each worker; all stopped on
    leaving."""
    async with contextlib.AsyncExitStack() as stack:
        for name, (kubeconfig, context) in [("manager", fleet.manager), *fleet.workers.items()]:
            controller = kueue.KueueController(kubeconfig, context, directory / name / "kueue",
                                               kueue.KueueSettings(multikueue=name == "manager"))
            await stack.enter_async_context(controller)
        await kueue.connect_workers(*fleet.manager, dict(fleet.workers))
        await kueue.wait_clusters_active(*fleet.manager, list(fleet.workers), timeout=kueue.START_TIMEOUT)
        for name, (kubeconfig, context) in fleet.workers.items():
            await stack.enter_async_context(upstream.TrainingOperator(
                kubeconfig, context, directory / name / "training-operator.log", progress=progress))
        progress(f"Kueue on {1 + len(fleet.workers)} clusters, the training-operator {upstream.VERSION} in "
                 f"{', '.join(fleet.workers)}")
        yield
