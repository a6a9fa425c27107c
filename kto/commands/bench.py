"""``kto bench``: throughput and latency of the whole pipeline, as one JSON object.

In: flags (jobs, rate, replicas, workers, API latency, partitions). Out, on
stdout: ONE JSON object (progress goes to stderr). First the raw create
ceiling is measured on a fresh ``kto sim`` of the same configuration (pods
POSTed by 16 concurrent clients); then a Stack runs and ``bench.pipeline``
submits the PyTorchJobs at the set rate and follows them to Succeeded. See
bench/pipeline.py for how every figure is taken. ``cpu_ms_per_job`` is the
CPU time each process of the stack used over the run (from /proc) divided by
the jobs; ``cpu_cores_busy`` is their sum over the run's wall time. ``costs``
are the per-record and per-cluster costs of bench/costs.py (records per job,
CPU per record, API requests per job per cluster, broker bytes, memory).
With ``--freeze SECONDS`` (two clusters or more) the same stack then times
jobs of the other clusters while the last one is frozen, and the frozen
cluster's catch-up once thawed (bench/freezing.py): the ``freeze`` figures.
With ``--live-jobs N`` it runs another load instead (bench/live.py): N jobs whose
pods keep running, submitted as fast as the API server takes them and held;
the time they took to materialise, each process's memory and CPU with N live,
the bytes on the jobs topic; a table on stderr, the JSON on stdout.
With ``--scale-out 1,2,4`` (that many reconcilers and status workers) or
``--concurrency-sweep 1,4,16`` (one reconciler's concurrency) it runs the
pipeline load once per value, each on a fresh stack, all submitted at once
unless ``--rate`` says otherwise (bench/scaleout.py): each run's figures and
its materialised jobs/s over the first run's; a table on stderr, the JSON on
stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

from kto import serving

HELP = ("Benchmark the pipeline: PyTorchJobs at a fixed rate through a local stack (or --live-jobs N kept "
        "running, or the same load per worker count or concurrency: --scale-out, --concurrency-sweep); prints one "
        "JSON object.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bench.live import PODS_PER_NODE, LiveSettings
    from bench.pipeline import PipelineSettings
    from kto import stack
    from kto.cli import default_of
    from services.reconciler.settings import ReconcilerSettings

    serving.add_backend_arguments(parser)
    b, s, live = PipelineSettings(), stack.StackSettings(), LiveSettings()
    parser.add_argument("--jobs", type=int, default=None, help=f"jobs to submit (default {b.jobs})")
    parser.add_argument("--rate", type=float, default=None,
                        help=f"jobs per second; 0 = all at once (default {b.rate:g})")
    parser.add_argument("--live-jobs", type=int, default=None, metavar="N",
                        help="instead of --jobs/--rate: N jobs whose pods keep running, submitted as fast as the "
                             "API server takes them; once all are Running with every pod, held --hold seconds, "
                             "then each process's memory and CPU and the bytes on the jobs topic are measured "
                             "(a table on stderr, JSON on stdout; exit 1 naming how many materialised if not all "
                             "did within --timeout). Not with --jobs, --rate, --pod-duration, --freeze, --idle or "
                             "--operator training-operator")
    parser.add_argument("--scale-out", default=None, metavar="COUNTS",
                        help="the same load on a fresh stack for each count (e.g. 1,2,4): that many reconcilers "
                             "AND status workers, each at --reconciler-concurrency; each run's figures and its "
                             "materialised jobs/s over the first run's (ratio_vs_first) as one JSON object, a "
                             "table on stderr. --rate defaults to 0 here (all at once: the submission is not "
                             "the limit). Not with --reconcilers, --status-workers, --concurrency-sweep, "
                             "--live-jobs, --freeze, --idle or --operator training-operator")
    parser.add_argument("--concurrency-sweep", default=None, metavar="COUNTS",
                        help="as --scale-out, but the other lever: --reconcilers reconcilers (default 1), each "
                             "settling this many job keys at once (e.g. 1,4,16), one fresh stack per value. Not "
                             "with --reconciler-concurrency or --scale-out")
    parser.add_argument("--hold", type=float, default=live.hold, metavar="SECONDS",
                        help=f"--live-jobs: seconds every job stays live before the stack is measured "
                             f"(default {live.hold:g})")
    parser.add_argument("--replicas", type=int, default=b.replicas,
                        help=f"pods per job: 1 Master + N-1 Workers (default {b.replicas})")
    parser.add_argument("--pod-duration", default=None,
                        help=f"how long the sim runs each pod (default {b.pod_duration})")
    parser.add_argument("--clusters", type=int, default=s.clusters, help=f"simulated clusters (default {s.clusters})")
    parser.add_argument("--reconcilers", type=int, default=None,
                        help=f"reconciler processes (default {s.reconcilers})")
    parser.add_argument("--reconciler-concurrency", type=int, default=None, metavar="N",
                        help="job keys each reconciler settles at once (default: the reconciler's, "
                             f"{default_of(ReconcilerSettings, 'concurrency')})")
    parser.add_argument("--status-workers", type=int, default=None,
                        help=f"status-service processes (default {s.status_workers})")
    parser.add_argument("--api-latency", type=float, default=s.api_latency_ms, metavar="MS",
                        help=f"latency of every API request, in ms: a sim adds it, a real control plane through a "
                             f"faulting proxy in front of it (default {s.api_latency_ms:g})")
    parser.add_argument("--partitions", type=int, default=s.partitions,
                        help=f"partitions of the jobs topic (default {s.partitions})")
    parser.add_argument("--nodes", type=int, default=None,
                        help="simulated nodes per cluster (default 8; with --live-jobs, enough for every pod at "
                             f"{PODS_PER_NODE} a node)")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds every job has to succeed (default {b.timeout:g}); with --live-jobs, to be "
                             f"Running with every pod (default {live.timeout:g})")
    parser.add_argument("--ceiling-creates", type=int, default=400,
                        help="pods POSTed to measure the create ceiling (default 400)")
    parser.add_argument("--freeze", type=float, default=0.0, metavar="SECONDS",
                        help="after the run, freeze the last cluster this long and time the others' jobs and "
                             "its catch-up (needs --clusters 2 or more; default 0: not done)")
    parser.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                        help="first measure the stack this long with no job: each process's CPU per second "
                             "(a watcher's Lease renewals and watches, the sims' loops); default 0: not measured")
    parser.add_argument("--operator", choices=("kto", "training-operator"), default="kto",
                        help="what runs the jobs: kto (default), or Kubeflow's training-operator "
                             "(built once from the Go module proxy; needs --control-plane kube): the same jobs, "
                             "watches and API-write count, side by side")
    parser.add_argument("--multikueue", action="store_true",
                        help="jobs/s through MultiKueue (bench/multikueue.py): --jobs PyTorchJobs submitted at once "
                             "to kto-1, MultiKueue's manager, run on the other --clusters (2 or more) by kto, or by "
                             "the training-operator with --operator training-operator (one worker: --clusters 2); "
                             "the real Kueue in every cluster (needs --control-plane kube)")
    parser.add_argument("--controller-threads", type=int, default=1, metavar="N",
                        help="--operator training-operator: its --controller-threads (default 1, its own default)")
    parser.add_argument("--state-dir", type=pathlib.Path, default=pathlib.Path(".kto/bench"),
                        help="kubeconfig and logs of the benchmark's stack (default .kto/bench)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from bench import freezing, pipeline
    from kto import stack
    from kto.cli import UserError
    from services.reconciler.settings import ReconcilerSettings

    if args.live_jobs is not None:
        return _live(args)
    if args.scale_out is not None or args.concurrency_sweep is not None:
        return _sweep(args)
    try:
        bench_settings = _pipeline_settings(args, pipeline.PipelineSettings().rate)
        stack_settings = _stack_settings(args, 8 if args.nodes is None else args.nodes)
    except (pipeline.BenchError, stack.StackError) as exc:
        raise UserError(str(exc)) from None
    if args.multikueue:
        return _multikueue(args, stack_settings, bench_settings)
    if args.operator == "training-operator":
        return _upstream(args, stack_settings, bench_settings)
    freeze = None
    if args.freeze > 0:
        if args.clusters < 2:
            raise UserError("--freeze needs --clusters 2 or more: one cluster is frozen, the others are timed")
        slots = args.reconciler_concurrency or ReconcilerSettings(kubeconfig=None).concurrency
        freeze = freezing.FreezeSettings(seconds=args.freeze, frozen_jobs=slots + 2, replicas=args.replicas,
                                         pod_duration=bench_settings.pod_duration)
    try:
        figures = asyncio.run(_bench(stack_settings, bench_settings, args.ceiling_creates, args.idle, freeze))
    except (pipeline.BenchError, stack.StackError) as exc:
        raise UserError(str(exc)) from None
    print(json.dumps(figures, indent=2))
    return 0


def _pipeline_settings(args: argparse.Namespace, rate: float) -> Any:
    """The pipeline load from the flags (a ``bench.pipeline.PipelineSettings``, ``rate`` unless
    --rate is given; BenchError for bad ones)."""
    from bench import pipeline

    defaults = pipeline.PipelineSettings()
    return pipeline.PipelineSettings(
        jobs=defaults.jobs if args.jobs is None else args.jobs,
        rate=rate if args.rate is None else args.rate, replicas=args.replicas,
        pod_duration=args.pod_duration or defaults.pod_duration,
        timeout=defaults.timeout if args.timeout is None else args.timeout,
    )


def _stack_settings(args: argparse.Namespace, nodes: int) -> Any:
    """The benchmark's stack from the flags (a ``kto.stack.StackSettings``; StackError for bad ones)."""
    from kto import stack

    defaults = stack.StackSettings()
    return stack.StackSettings(
        state_dir=args.state_dir, clusters=args.clusters,
        reconcilers=defaults.reconcilers if args.reconcilers is None else args.reconcilers,
        status_workers=defaults.status_workers if args.status_workers is None else args.status_workers,
        partitions=args.partitions, api_latency_ms=args.api_latency,
        nodes=nodes, control_plane=args.control_plane, broker=args.broker,
        reconciler_concurrency=args.reconciler_concurrency,
    )


def _live(args: argparse.Namespace) -> int:
    """``--live-jobs N``: bench/live.py on a fresh stack; the table on stderr, the JSON on stdout."""
    import asyncio

    from bench import live, pipeline
    from kto import stack
    from kto.cli import UserError

    given = [flag for flag, value in (("--jobs", args.jobs), ("--rate", args.rate),
                                      ("--pod-duration", args.pod_duration)) if value is not None]
    given += [flag for flag, value in (("--scale-out", args.scale_out),
                                       ("--concurrency-sweep", args.concurrency_sweep)) if value is not None]
    given += _other_runs(args)
    if given:
        raise UserError(f"--live-jobs runs a load of its own: not with {', '.join(given)}")
    try:
        settings = live.LiveSettings(
            jobs=args.live_jobs, replicas=args.replicas, hold=args.hold,
            timeout=live.LiveSettings().timeout if args.timeout is None else args.timeout,
        )
        stack_settings = _stack_settings(
            args, live.nodes_for(settings, args.clusters) if args.nodes is None else args.nodes)
    except (pipeline.BenchError, stack.StackError) as exc:
        raise UserError(str(exc)) from None
    try:
        figures = asyncio.run(_live_run(stack_settings, settings))
    except stack.StackError as exc:
        raise UserError(str(exc)) from None
    except pipeline.BenchError as exc:
        _progress(str(exc))
        return 1
    figures["parameters"] = {"live_jobs": settings.jobs, "replicas": settings.replicas, "hold_s": settings.hold,
                             **_stack_parameters(stack_settings)}
    return _printed(figures, live.table(figures))


def _other_runs(args: argparse.Namespace) -> list[str]:
    """The flags given of what a plain run adds (a freeze, an idle span, the training-operator):
    a load of its own (--live-jobs, a sweep) is not run with them."""
    given = [flag for flag, value in (("--freeze", args.freeze), ("--idle", args.idle)) if value > 0]
    if args.operator != "kto":
        given.append("--operator training-operator")
    return given


def _sweep(args: argparse.Namespace) -> int:
    """``--scale-out COUNTS`` or ``--concurrency-sweep COUNTS``: bench/scaleout.py, the pipeline's load on
    a fresh stack for each value; the table on stderr, the JSON on stdout."""
    import asyncio
    import dataclasses

    from bench import pipeline, scaleout
    from kto import stack
    from kto.cli import UserError, default_of
    from services.reconciler.settings import ReconcilerSettings

    lever, text = ("workers", args.scale_out) if args.scale_out is not None else ("concurrency",
                                                                                  args.concurrency_sweep)
    clashes = {"workers": (("--reconcilers", args.reconcilers), ("--status-workers", args.status_workers),
                           ("--concurrency-sweep", args.concurrency_sweep)),
               "concurrency": (("--reconciler-concurrency", args.reconciler_concurrency),)}[lever]
    given = [flag for flag, value in clashes if value is not None] + _other_runs(args)
    if given:
        raise UserError(f"{scaleout.LEVERS[lever]} runs a sweep of its own: not with {', '.join(given)}")
    try:
        sweep = scaleout.parse(lever, text)
        bench_settings = _pipeline_settings(args, 0.0)
        stack_settings = _stack_settings(args, 8 if args.nodes is None else args.nodes)
    except (pipeline.BenchError, stack.StackError) as exc:
        raise UserError(str(exc)) from None
    base = scaleout.Shape(
        stack_settings.reconcilers, stack_settings.status_workers,
        stack_settings.reconciler_concurrency or default_of(ReconcilerSettings, "concurrency"))

    async def measure(shape: scaleout.Shape) -> dict[str, Any]:
        settings = dataclasses.replace(stack_settings, reconcilers=shape.reconcilers,
                                       status_workers=shape.status_workers, reconciler_concurrency=shape.concurrency)
        return await _bench(settings, bench_settings, args.ceiling_creates, 0.0, None)

    try:
        figures = asyncio.run(scaleout.run(sweep, base, measure, _progress))
    except (pipeline.BenchError, stack.StackError) as exc:
        raise UserError(str(exc)) from None
    swept = ("reconcilers", "status_workers", "reconciler_concurrency")  # each run's own, in ``runs``
    figures["parameters"] = {
        "jobs": bench_settings.jobs, "rate": bench_settings.rate, "replicas": bench_settings.replicas,
        "pod_duration": bench_settings.pod_duration, "ceiling_creates": args.ceiling_creates,
        **{name: value for name, value in _stack_parameters(stack_settings).items() if name not in swept},
    }
    return _printed(figures, scaleout.table(figures))


def _stack_parameters(settings: Any) -> dict[str, Any]:
    """The shape of the run's stack (a ``kto.stack.StackSettings``), as the figures' ``parameters`` name it."""
    return {
        "clusters": settings.clusters, "reconcilers": settings.reconcilers, "status_workers": settings.status_workers,
        "partitions": settings.partitions, "nodes": settings.nodes, "api_latency_ms": settings.api_latency_ms,
        "control_plane": settings.control_plane, "broker": settings.broker,
        "reconciler_concurrency": settings.reconciler_concurrency,
    }


def _printed(figures: dict[str, Any], lines: list[str]) -> int:
    """``lines`` on stderr for a reader, ``figures`` as one JSON object on stdout; exit code 0."""
    import json
    import sys

    for line in lines:
        print(line, file=sys.stderr)
    print(json.dumps(figures, indent=2))
    return 0


async def _live_run(stack_settings: object, settings: object) -> dict[str, Any]:
    import time

    from bench import live
    from kto import stack

    assert isinstance(stack_settings, stack.StackSettings)
    assert isinstance(settings, live.LiveSettings)
    _forget_last_run(stack_settings.state_dir)
    _progress(f"starting the stack ({stack_settings.nodes} nodes per cluster)")
    began = time.monotonic()
    async with stack.Stack(stack_settings) as running:
        _progress(f"stack ready in {time.monotonic() - began:.1f}s; submitting {settings.jobs} live jobs "
                  f"of {settings.replicas} pods")
        figures = await live.run(running, settings, _progress)
        _check_alive(running, "during the run")
    return figures


def _check_alive(running: Any, when: str) -> None:
    """StackError naming every child of the stack that ended ``when``."""
    from kto import stack

    died = running.exits()
    if died:
        raise stack.StackError("; ".join(f"{e.name} exited with code {e.code} {when} (see {e.log})" for e in died))


def _upstream(args: argparse.Namespace, stack_settings: object, bench_settings: object) -> int:
    import asyncio
    import json

    from bench import pipeline, upstream
    from kto import stack
    from kto.cli import UserError
    from realparts import caching

    assert isinstance(stack_settings, stack.StackSettings)
    assert isinstance(bench_settings, pipeline.PipelineSettings)
    if args.controller_threads < 1:
        raise UserError("--controller-threads must be at least 1")
    if args.freeze > 0 or args.idle > 0:
        raise UserError("--freeze and --idle measure kto's own processes: not with --operator training-operator")
    if stack_settings.control_plane != "kube" or stack_settings.clusters != 1:
        raise UserError("the training-operator runs on the real control plane, one cluster: "
                        "--control-plane kube --clusters 1")
    _forget_last_run(stack_settings.state_dir)
    try:
        figures = asyncio.run(_upstream_run(stack_settings, bench_settings, args.controller_threads))
    except (pipeline.BenchError, stack.StackError, caching.PartError) as exc:
        raise UserError(str(exc)) from None
    figures["parameters"]["nodes"] = stack_settings.nodes
    print(json.dumps(figures, indent=2))
    return 0


async def _upstream_run(stack_settings: object, bench_settings: object, threads: int) -> dict[str, Any]:
    """A fresh real control plane of the stack's shape, the training-operator on it (bench/upstream.py)."""
    from bench import pipeline, upstream
    from supervising import processes

    assert isinstance(bench_settings, pipeline.PipelineSettings)
    _progress("building (once) and starting the training-operator on a fresh control plane")
    async with _fresh_cluster(stack_settings, "upstream", upstream.CONTEXT,
                              f"control-plane-{upstream.CONTEXT}") as (kubeconfig, directory):
        return await upstream.run(kubeconfig, directory / "audit.log", directory / "training-operator.log",
                                  bench_settings, _progress, processes.cpu_seconds, threads)


def _multikueue(args: argparse.Namespace, stack_settings: object, bench_settings: object) -> int:
    """``--multikueue``: bench/multikueue.py on a fresh MultiKueue fleet, the workers served by kto
    (``kto up``'s stack) or by the training-operator (``--operator training-operator``)."""
    import asyncio
    import dataclasses
    import json

    from bench import multikueue, pipeline
    from kto import stack
    from kto.cli import UserError
    from realparts import caching

    assert isinstance(stack_settings, stack.StackSettings)
    assert isinstance(bench_settings, pipeline.PipelineSettings)
    other = [flag for flag, given in (("--freeze", args.freeze > 0), ("--idle", args.idle > 0),
                                      ("--rate", args.rate is not None)) if given]
    if other:
        raise UserError(f"--multikueue submits every job at once and times them to Succeeded: not with "
                        f"{', '.join(other)}")
    if args.operator == "training-operator" and stack_settings.clusters != 2:
        # realparts/upstream.py: its webhook certificate's path is fixed in v1.8.1, one runs per machine.
        raise UserError("the training-operator runs one per machine (its webhook certificate's path is fixed): "
                        "--multikueue --operator training-operator takes one worker, --clusters 2")
    try:
        fleet_settings = dataclasses.replace(stack_settings, multikueue=True)
        settings = multikueue.MultiKueueSettings(jobs=bench_settings.jobs, replicas=bench_settings.replicas,
                                                 pod_duration=bench_settings.pod_duration,
                                                 timeout=bench_settings.timeout)
    except (pipeline.BenchError, stack.StackError) as exc:
        raise UserError(str(exc)) from None
    _forget_last_run(stack_settings.state_dir)
    try:
        if args.operator == "training-operator":
            figures = asyncio.run(_multikueue_upstream(fleet_settings, settings))
        else:
            figures = asyncio.run(_multikueue_kto(fleet_settings, settings))
    except (pipeline.BenchError, stack.StackError, caching.PartError) as exc:
        raise UserError(str(exc)) from None
    figures["parameters"]["nodes"] = stack_settings.nodes
    print(json.dumps(figures, indent=2))
    return 0


async def _multikueue_kto(stack_settings: Any, settings: Any) -> dict[str, Any]:
    """``kto up --multikueue``'s stack: kto serving the manager and every worker from one bus."""
    import time

    from bench import multikueue
    from kto import stack

    _progress(f"starting {stack_settings.clusters} clusters with Kueue, kto-1 MultiKueue's manager")
    began = time.monotonic()
    async with stack.Stack(stack_settings) as running:
        manager, *workers = running.contexts
        fleet = multikueue.Fleet((running.kubeconfig, manager), {w: (running.kubeconfig, w) for w in workers})
        _progress(f"stack ready in {time.monotonic() - began:.1f}s; submitting {settings.jobs} jobs to {manager}")
        figures = await multikueue.run(fleet, settings, _progress)
        _check_alive(running, "during the run")
    figures["operator"] = "kto"
    return figures


async def _multikueue_upstream(stack_settings: Any, settings: Any) -> dict[str, Any]:
    """The same clusters and Kueues, the training-operator in each worker instead of kto."""
    from bench import multikueue
    from kto import stack
    from realparts import upstream

    assert isinstance(stack_settings, stack.StackSettings)
    contexts = stack_settings.contexts
    _progress(f"starting {len(contexts)} clusters; Kueue in each, the training-operator in the workers")
    async with contextlib.AsyncExitStack() as clusters:
        reached: dict[str, pathlib.Path] = {}
        for context in contexts:
            kubeconfig, _ = await clusters.enter_async_context(
                _fresh_cluster(stack_settings, f"clusters/{context}", context, f"control-plane-{context}"))
            reached[context] = kubeconfig
        manager, *workers = contexts
        fleet = multikueue.Fleet((reached[manager], manager), {w: (reached[w], w) for w in workers})
        async with multikueue.training_operators(fleet, stack_settings.state_dir.resolve() / "clusters", _progress):
            figures = await multikueue.run(fleet, settings, _progress)
    figures["operator"] = f"kubeflow/training-operator {upstream.VERSION}"
    return figures


def _progress(text: str) -> None:
    import sys

    print(f"kto bench: {text}", file=sys.stderr, flush=True)


async def _bench(
    stack_settings: object, bench_settings: object, ceiling_creates: int, idle: float, freeze: object,
) -> dict[str, object]:
    import asyncio
    import collections
    import time

    from bench import costs, freezing, pipeline
    from kto import stack
    from shared.bus import replaying

    assert isinstance(stack_settings, stack.StackSettings)
    assert isinstance(bench_settings, pipeline.PipelineSettings)
    assert freeze is None or isinstance(freeze, freezing.FreezeSettings)
    _forget_last_run(stack_settings.state_dir)
    ceiling = await _ceiling(stack_settings, ceiling_creates)
    _progress(f"create ceiling: {ceiling:.0f} pods/s; starting the stack")
    began = time.monotonic()
    async with stack.Stack(stack_settings) as running:
        _progress(f"stack ready in {time.monotonic() - began:.1f}s; submitting {bench_settings.jobs} jobs "
                  f"at {bench_settings.rate:g}/s")
        idle_cpu: dict[str, float] = {}
        if idle > 0:
            _progress(f"measuring the stack idle for {idle:g}s first")
            resting = running.cpu_seconds()
            await asyncio.sleep(idle)
            idle_cpu = {name: round((seconds - resting.get(name, 0.0)) * 1000 / idle, 2)
                        for name, seconds in sorted(running.cpu_seconds().items())}
        before = await costs.mark(running)
        cpu_before, wall_before = running.cpu_seconds(), time.monotonic()
        result = await pipeline.run(pipeline.Target(running.kubeconfig, tuple(running.contexts), running.audit_logs),
                                    bench_settings)
        cpu_after, wall = running.cpu_seconds(), time.monotonic() - wall_before
        _check_alive(running, "during the run")
        used = {name: cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0) for name in cpu_before}
        _progress("reading back the run's records for the per-record costs")
        jobs_by_cluster = collections.Counter(context for context, _ in result.jobs)
        run_costs = await costs.measure(running, before, used, dict(jobs_by_cluster),
                                        2 * bench_settings.replicas + 1, bench_settings.namespace)
        frozen: dict[str, object] | None = None
        if freeze is not None:
            _progress(f"freezing {running.contexts[-1]} for {freeze.seconds:g}s while the other clusters get jobs")
            frozen = await freezing.run(running, freeze)
            _check_alive(running, "during the freeze")
        _progress("replaying the whole log (kto replay --all)")
        replayed = await replaying.replay_log(running.kafka)
    figures = result.figures()
    # Every recorded decision of the run made again with the pure core: none may differ.
    figures["replay"] = replayed.figures()
    # An N-replica PyTorchJob needs 2N creates (N pods, N headless Services):
    # the jobs/s the API server could take if a job cost only those.
    ceiling_jobs = ceiling / (2 * bench_settings.replicas)
    figures["create_ceiling_per_s"] = round(ceiling, 1)
    figures["create_ceiling_jobs_per_s"] = round(ceiling_jobs, 2)
    materialized = figures["materialized_jobs_per_s"]
    figures["throughput_vs_ceiling"] = round(materialized / ceiling_jobs, 3) if materialized else 0
    figures["cpu_ms_per_job"] = {name: round(seconds * 1000 / bench_settings.jobs, 1)
                                 for name, seconds in sorted(used.items())}
    figures["cpu_cores_busy"] = round(sum(used.values()) / wall, 2) if wall > 0 else None
    figures["costs"] = run_costs
    if idle_cpu:
        figures["idle_cpu_ms_per_s"] = idle_cpu
    if frozen is not None:
        figures["freeze"] = frozen
    figures["parameters"] = {
        "jobs": bench_settings.jobs, "rate": bench_settings.rate, "replicas": bench_settings.replicas,
        "pod_duration": bench_settings.pod_duration, "ceiling_creates": ceiling_creates, "idle_s": idle,
        **_stack_parameters(stack_settings),
    }
    return figures


def _forget_last_run(state_dir: pathlib.Path) -> None:
    """Every run starts from empty clusters and an empty log: a real control plane keeps its
    objects in its state dir and Kafka its log (``kto up`` wants that; a benchmark whose jobs
    and ceiling pods already exist cannot run)."""
    import shutil

    for part in ("ceiling", "clusters", "kafka", "upstream"):
        shutil.rmtree(state_dir / part, ignore_errors=True)


async def _ceiling(settings: object, creates: int) -> float:
    """Pods/s a fresh sim of the same configuration creates for a tight 16-client loop."""
    from bench import pipeline
    from kto import stack

    assert isinstance(settings, stack.StackSettings)
    _progress(f"measuring the raw create ceiling on a fresh {settings.control_plane} cluster")
    async with _fresh_cluster(settings, "ceiling", "ceiling", "sim-ceiling") as (kubeconfig, _):
        return await pipeline.measure_create_ceiling(kubeconfig, None, creates=creates)


@contextlib.asynccontextmanager
async def _fresh_cluster(
    settings: object, part: str, context: str, name: str,
) -> AsyncIterator[tuple[pathlib.Path, pathlib.Path]]:
    """A fresh cluster of the stack's configuration (its ``kto sim`` or ``kto control-plane``, context
    ``context``) under ``<state-dir>/<part>``, stopped on leaving: its kubeconfig and its directory."""
    import asyncio

    from kto import stack

    assert isinstance(settings, stack.StackSettings)
    directory = settings.state_dir.resolve() / part
    directory.mkdir(parents=True, exist_ok=True)
    cluster = stack.Child(name, stack.cluster_argv(settings, directory, context), directory / f"{name}.log",
                          stack.child_env())
    try:
        ready = await cluster.start(settings.part_timeout)
        if len(ready) < 2:
            raise stack.StackError(f"{name}'s ready line is not 'ready <url> <kubeconfig>' (see {cluster.log})")
        yield pathlib.Path(ready[1]), directory
    finally:
        await asyncio.shield(cluster.stop(max(settings.stop_timeout, 30.0)))
