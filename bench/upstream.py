"""The same benchmark run against Kubeflow's training-operator: what a user would pick instead.

In: a fresh real control plane (``kto control-plane`` with kto's CRDs and fake GPU
nodes, started by ``kto bench``) and the pipeline settings. Out: the figures of
:meth:`bench.pipeline.Result.figures` for the training-operator
(:mod:`realparts.upstream`) — the same jobs at the same rate, the same watches and the
same audit-log count of API writes as for kto — plus its CPU per job.

The cluster's own CPU (API server, etcd, controllers, node agent) is left out on both
sides: ``cpu_ms_per_job`` is the operator's alone, as kto's is its watcher, reconcilers,
status workers and broker.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

from bench import pipeline
from realparts import upstream

CONTEXT = "kto-1"


async def run(
    kubeconfig: pathlib.Path, audit_log: pathlib.Path, log: pathlib.Path, bench: pipeline.PipelineSettings,
    progress: Callable[[str], None], cpu_seconds: Callable[[int], float], threads: int = 1,
) -> dict[str, Any]:
    """The training-operator on the running cluster of ``kubeconfig`` (context :data:`CONTEXT`), the
    benchmark through it, its figures; ``cpu_seconds(pid)`` reads a process's CPU time so far."""
    began = time.monotonic()
    async with upstream.TrainingOperator(kubeconfig, CONTEXT, log, threads=threads,
                                        progress=progress) as operator:
        progress(f"training-operator ready in {time.monotonic() - began:.1f}s; submitting {bench.jobs} jobs "
                 f"at {bench.rate:g}/s")
        assert operator.pid is not None
        cpu_before, wall_before = cpu_seconds(operator.pid), time.monotonic()
        result = await pipeline.run(pipeline.Target(kubeconfig, (CONTEXT,), {CONTEXT: audit_log}), bench)
        used, wall = cpu_seconds(operator.pid) - cpu_before, time.monotonic() - wall_before
    figures = result.figures()
    figures["operator"] = f"kubeflow/training-operator {upstream.VERSION} (--controller-threads {threads})"
    figures["cpu_ms_per_job"] = {"training-operator": round(used * 1000 / bench.jobs, 1)}
    figures["cpu_cores_busy"] = round(used / wall, 2) if wall > 0 else None
    figures["parameters"] = {
        "jobs": bench.jobs, "rate": bench.rate, "replicas": bench.replicas, "pod_duration": bench.pod_duration,
        "control_plane": "kube", "controller_threads": threads,
    }
    return figures
