"""The same benchmark run against Kubeflow's training-operator: what a user would pick instead.

In: the stack settings (a real control plane: ``--control-plane kube``) and the pipeline
settings of ``kto bench``. Out: the figures of :meth:`bench.pipeline.Result.figures` for
the training-operator (:mod:`realparts.upstream`) on the same kind of cluster — one
``kto control-plane`` with kto's CRDs and fake GPU nodes, the same jobs at the same rate,
the same watches and the same audit-log count of API writes — plus its CPU per job.

The cluster's own CPU (API server, etcd, controllers, node agent) is left out on both
sides: ``cpu_ms_per_job`` is the operator's alone, as kto's is its watcher, reconcilers,
status workers and broker.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
from collections.abc import Callable

from bench import pipeline
from kto import stack
from realparts import upstream

CONTEXT = "kto-1"


async def run(
    settings: stack.StackSettings, bench: pipeline.PipelineSettings, progress: Callable[[str], None],
    threads: int = 1,
) -> dict[str, object]:
    if settings.control_plane != "kube" or settings.clusters != 1:
        raise stack.StackError("the training-operator runs on the real control plane, one cluster: "
                               "--control-plane kube --clusters 1")
    directory = settings.state_dir.resolve() / "upstream"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stack.REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    cluster = stack.Child(f"control-plane-{CONTEXT}", stack.cluster_argv(settings, directory, CONTEXT),
                          directory / "control-plane.log", env)
    progress(f"building (once) and starting the training-operator {upstream.VERSION} on a fresh control plane")
    began = time.monotonic()
    try:
        ready = await cluster.start(settings.part_timeout)
        if len(ready) < 2:
            raise stack.StackError(f"the control plane's ready line is not 'ready <url> <kubeconfig>' "
                                   f"(see {cluster.log})")
        kubeconfig = pathlib.Path(ready[1])
        async with upstream.TrainingOperator(kubeconfig, CONTEXT, directory / "training-operator.log",
                                             threads=threads) as operator:
            progress(f"training-operator ready in {time.monotonic() - began:.1f}s; submitting {bench.jobs} jobs "
                     f"at {bench.rate:g}/s")
            assert operator.pid is not None
            cpu_before, wall_before = stack.cpu_seconds(operator.pid), time.monotonic()
            result = await pipeline.run(
                pipeline.Target(kubeconfig, (CONTEXT,), {CONTEXT: directory / "audit.log"}), bench)
            used, wall = stack.cpu_seconds(operator.pid) - cpu_before, time.monotonic() - wall_before
    finally:
        await asyncio.shield(cluster.stop(max(settings.stop_timeout, 30.0)))
    figures = result.figures()
    figures["operator"] = f"kubeflow/training-operator {upstream.VERSION} (--controller-threads {threads})"
    figures["cpu_ms_per_job"] = {"training-operator": round(used * 1000 / bench.jobs, 1)}
    figures["cpu_cores_busy"] = round(used / wall, 2) if wall > 0 else None
    figures["parameters"] = {
        "jobs": bench.jobs, "rate": bench.rate, "replicas": bench.replicas, "pod_duration": bench.pod_duration,
        "control_plane": "kube", "nodes": settings.nodes, "controller_threads": threads,
    }
    return figures
