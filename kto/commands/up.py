"""``kto up``: run the whole pipeline locally until Ctrl-C or SIGTERM.

In: flags for the shape of the stack (clusters, workers, partitions, the
simulated clusters). Out: on stdout, ``ready kubeconfig=DIR/kubeconfig
bootstrap=<addr>`` once everything runs, a kubectl hint, then a table of the
jobs of every cluster (CLUSTER NAMESPACE KIND NAME STATE AGE), printed again
each second in which something changed, and a report for any child process
that dies (nothing is restarted). Children's output goes to ``DIR/logs/``.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib

from kto import serving
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kto import stack as stack_module

HELP = "Run broker, simulated clusters, watchers, reconcilers, status workers and the admission webhook locally."

_EPILOG = """\
State directory layout: DIR/kubeconfig (contexts kto-1 ... kto-N, current
kto-1), DIR/logs/<process>.log, DIR/clusters/<context>/kubeconfig (each sim's
own), DIR/webhook/ (the admission webhook's self-signed CA and certificate),
DIR/prometheus.yml (with --metrics-port-base), DIR/clusters/<context>/jobset/
(with --jobset-controller upstream: the JobSet controller's configuration,
certificates and log), DIR/clusters/<context>/kueue/ (with --kueue or
--multikueue: Kueue's configuration, certificates and log), DIR/up.lock
(held while running). Stop with Ctrl-C or SIGTERM: Kueue and the JobSet
controller first (their webhooks removed), then watchers and workers, then
the clusters, then the broker.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto import stack

    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    serving.add_backend_arguments(parser)
    s = stack.StackSettings()  # every option below but --webhooks defaults to its field
    parser.add_argument("--clusters", type=int, default=s.clusters, help=f"local clusters (default {s.clusters})")
    parser.add_argument("--reconcilers", type=int, default=s.reconcilers,
                        help=f"reconciler processes (default {s.reconcilers})")
    parser.add_argument("--status-workers", type=int, default=s.status_workers,
                        help=f"status-service processes (default {s.status_workers})")
    parser.add_argument("--webhooks", type=int, default=1,
                        help="admission webhook processes, registered on every cluster (default 1; 0: none, "
                             "invalid jobs are then refused by the reconciler instead of at apply time)")
    parser.add_argument("--state-dir", type=pathlib.Path, default=s.state_dir,
                        help=f"kubeconfig, logs and lock live here (default {s.state_dir})")
    parser.add_argument("--partitions", type=int, default=s.partitions,
                        help=f"partitions of the jobs topic (default {s.partitions})")
    parser.add_argument("--api-latency", type=float, default=s.api_latency_ms, metavar="MS",
                        help=f"latency every API request gets, in ms: a sim adds it, a real control plane through a "
                             f"faulting proxy in front of it (default {s.api_latency_ms:g})")
    parser.add_argument("--nodes", type=int, default=s.nodes, help=f"simulated nodes per cluster (default {s.nodes})")
    parser.add_argument("--gpus-per-node", type=int, default=s.gpus_per_node,
                        help=f"nvidia.com/gpu per node (default {s.gpus_per_node})")
    parser.add_argument("--pod-duration", type=float, default=s.pod_duration, metavar="SECONDS",
                        help="seconds a simulated pod runs unless its sim.kto.dev/duration says otherwise "
                             f"(default {s.pod_duration:g}; longer lets you watch a job scale)")
    parser.add_argument("--metrics-port-base", type=int, default=s.metrics_port_base, metavar="PORT",
                        help="serve each watcher's, reconciler's and status worker's Prometheus /metrics on its "
                        "own port from PORT up (in that order), and write DIR/prometheus.yml to scrape them "
                        f"(default {s.metrics_port_base}: no metrics)")
    parser.add_argument("--jobset-controller", choices=stack.JOBSET_CONTROLLERS, default=s.jobset_controller,
                        help="who serves JobSets: kto (default) or upstream: the real JobSet controller v0.12.0 on "
                             "each cluster (built once per machine into ~/.cache/kto; needs --control-plane kube)")
    parser.add_argument("--kueue", action="store_true",
                        help="run the real Kueue v0.17.0 on every cluster (quota, admission, preemption; built once "
                             "per machine into ~/.cache/kto; needs --control-plane kube)")
    parser.add_argument("--multikueue", action="store_true",
                        help="Kueue on every cluster (implies --kueue) with kto-1 MultiKueue's manager and the "
                             "other clusters its workers, through the AdmissionCheck 'multikueue' (needs --clusters 2 "
                             "or more and --control-plane kube)")
    parser.add_argument("--runtime", choices=stack.RUNTIMES, default=s.runtime,
                        help="how the nodes run pods: simulated (default) or process: a pod whose containers "
                             "all have a command runs them as local processes (docs/sandbox.md)")
    parser.add_argument("--no-trainer-runtimes", dest="trainer_runtimes", action="store_false",
                        help="do not apply Kubeflow Trainer v2.3.0's built-in ClusterTrainingRuntimes "
                             "(torch-distributed …, fetched once per machine from the Go module proxy) to the "
                             "clusters (docs/trainer-v2.md, The kubeflow SDK)")


def _age(seconds: float) -> str:
    """Age as kubectl prints it: 45s, 3m12s, 2h5m, 3d4h."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def format_table(rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart, as kubectl does."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from kto import stack
    from kto.cli import UserError

    if args.webhooks < 0:
        raise UserError("--webhooks must not be negative")
    try:
        settings = stack.StackSettings(
            state_dir=args.state_dir, clusters=args.clusters, reconcilers=args.reconcilers,
            status_workers=args.status_workers, partitions=args.partitions, api_latency_ms=args.api_latency,
            nodes=args.nodes, gpus_per_node=args.gpus_per_node, pod_duration=args.pod_duration,
            control_plane=args.control_plane, broker=args.broker, runtime=args.runtime,
            webhooks=args.webhooks, metrics_port_base=args.metrics_port_base,
            jobset_controller=args.jobset_controller, kueue=args.kueue, multikueue=args.multikueue,
            trainer_runtimes=args.trainer_runtimes,
        )
    except stack.StackError as exc:
        raise UserError(str(exc)) from None
    received: list[int] = []

    async def serve() -> int:
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        stop = asyncio.Event()
        running = False

        def on_signal(signum: int) -> None:
            received.append(signum)
            stop.set()
            if not running and main is not None:
                main.cancel()  # still starting: unwind; the Stack stops what it started

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            async with stack.Stack(settings) as running_stack:
                running = True
                print(f"ready kubeconfig={running_stack.kubeconfig} bootstrap={running_stack.bootstrap}", flush=True)
                print(f"  kubectl --kubeconfig {running_stack.kubeconfig} apply -f job.yaml", flush=True)
                print(f"  kubectl --kubeconfig {running_stack.kubeconfig} --context kto-1 get pytorchjobs",
                      flush=True)
                if running_stack.metrics_targets:
                    targets = " ".join(f"{name}={target}" for name, target in running_stack.metrics_targets.items())
                    print(f"  metrics: {targets}  (Prometheus: {running_stack.scrape_config})", flush=True)
                print(f"  logs: {running_stack.log_dir}/   stop: Ctrl-C", flush=True)
                async with asyncio.TaskGroup() as group:
                    table = group.create_task(_show(running_stack), name="kto-up-table")
                    await stop.wait()
                    table.cancel()
                print("stopping …", flush=True)
        except stack.StackError as exc:
            raise UserError(str(exc)) from None
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        print("stopped", flush=True)
        return 0

    try:
        return asyncio.run(serve())
    except asyncio.CancelledError:
        if not received:
            raise
        print("stopped before it was ready", flush=True)
        return 128 + received[0]


async def _show(running: stack_module.Stack) -> None:
    """Every second: report dead children; print the jobs table when it changed."""
    import asyncio

    from shared.api import objects
    from shared.kube import clients, resources

    kube: dict[str, clients.KubeClient] = {}
    last: list[list[str]] | None = None
    try:
        for context in running.contexts:
            kube[context] = await running.client(context)
        while True:
            for ended in running.exits():
                print(f"! {ended.name} exited with code {ended.code} (not restarted); "
                      f"last lines of {ended.log}:", flush=True)
                for line in ended.tail:
                    print(f"    {line[:240]}", flush=True)
            now = datetime.datetime.now(datetime.UTC)
            rows: list[list[str]] = []
            created: list[datetime.datetime | None] = []
            for context, client in kube.items():
                for kind, rt in resources.JOB_TYPES.items():
                    try:
                        items, _ = await client.list(rt)
                    except clients.ApiError:
                        continue  # a cluster that cannot answer shows its jobs again when it can
                    for item in items:
                        conditions = (item.get("status") or {}).get("conditions") or []
                        rows.append([context, objects.namespace_of(item), kind, objects.name_of(item),
                                     str(conditions[-1].get("type", "")) if conditions else ""])
                        created.append(_timestamp(objects.creation_timestamp_of(item)))
            if rows != last:
                order = sorted(range(len(rows)), key=lambda i: rows[i])
                table = [["CLUSTER", "NAMESPACE", "KIND", "NAME", "STATE", "AGE"]]
                for i in order:
                    stamp = created[i]
                    table.append([*rows[i], _age((now - stamp).total_seconds()) if stamp else ""])
                print(f"\n{now:%H:%M:%S}  {len(rows)} job(s)", flush=True)
                print(format_table(table) if rows else "(no jobs yet)", flush=True)
                last = rows
            await asyncio.sleep(1.0)
    finally:
        for client in kube.values():
            await asyncio.shield(client.close())


def _timestamp(text: object) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
