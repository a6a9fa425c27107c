"""``kto sim``: run the local cluster (a Kubernetes API server stand-in) until SIGTERM or Ctrl-C.

Prints exactly one line, ``ready <url> <kubeconfig>``, once it accepts requests.
"""

from __future__ import annotations

import argparse
import pathlib

HELP = "Run the local cluster: a Kubernetes API stand-in with scheduler, kubelet and fault injection."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto.cli import default_of
    from sim.settings import SimSettings

    pod_duration = default_of(SimSettings, "pod_duration")
    parser.add_argument("--port", type=int, default=default_of(SimSettings, "port"),
                        help="TCP port on 127.0.0.1 (0 picks a free one)")
    parser.add_argument("--nodes", type=int, default=default_of(SimSettings, "nodes"), help="number of simulated nodes")
    parser.add_argument("--gpus-per-node", type=int, default=default_of(SimSettings, "gpus_per_node"),
                        help="nvidia.com/gpu capacity of each node")
    parser.add_argument("--pod-duration", type=float, default=pod_duration, metavar="SECONDS",
                        help=f"seconds a pod runs unless its sim.kto.dev/duration says otherwise (default {pod_duration:g})")
    parser.add_argument("--runtime", choices=("simulated", "process"), default=default_of(SimSettings, "runtime"),
                        help="how the nodes run pods (their sim.kto.dev/runtime label): simulated (default) or "
                             "process, real local processes for pods whose containers all have a command")
    parser.add_argument("--pods-dir", type=pathlib.Path, default=None, metavar="DIR",
                        help="process pods' scratch directories and logs (default: a temporary directory)")
    parser.add_argument("--cpu-per-node", default=default_of(SimSettings, "cpu_per_node"),
                        help="CPU capacity of each node (a quantity)")
    parser.add_argument("--memory-per-node", default=default_of(SimSettings, "memory_per_node"),
                        help="memory capacity of each node (a quantity)")
    parser.add_argument("--kubeconfig", type=pathlib.Path, default=pathlib.Path(".kto/sim/kubeconfig"),
                        help="where to write the kubeconfig (default .kto/sim/kubeconfig)")
    parser.add_argument("--faults", default=default_of(SimSettings, "faults"), metavar="SPEC",
                        help="fault-injection spec, e.g. 'latency=get:5ms;error_rate=0.05' (see docs/sim.md)")
    parser.add_argument("--watch-window", type=int, default=default_of(SimSettings, "watch_window"),
                        help="watch history length; older resourceVersions get 410 Gone")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    from faulting import faults
    from kto import cli
    from sim import cluster as sim_cluster
    from sim import settings as sim_settings

    try:
        faults.parse(args.faults)
    except faults.FaultSpecError as exc:
        raise cli.UserError(f"--faults: {exc}") from None
    if args.nodes < 0 or args.gpus_per_node < 0 or args.pod_duration < 0:
        raise cli.UserError("--nodes, --gpus-per-node and --pod-duration must not be negative")
    settings = sim_settings.SimSettings(
        port=args.port,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        pod_duration=args.pod_duration,
        cpu_per_node=args.cpu_per_node,
        memory_per_node=args.memory_per_node,
        kubeconfig=args.kubeconfig.resolve(),
        faults=args.faults,
        watch_window=args.watch_window,
        runtime=args.runtime,
        pods_dir=args.pods_dir.resolve() if args.pods_dir else None,
    )
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with sim_cluster.Cluster(settings) as cluster:
            print(f"ready {cluster.url} {cluster.kubeconfig}", flush=True)
            stopped = asyncio.create_task(stop.wait(), name="sim-stop-signal")
            failed = asyncio.create_task(cluster.wait(), name="sim-watchdog")
            done, pending = await asyncio.wait({stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)

    try:
        asyncio.run(serve())
    except OSError as exc:
        raise cli.UserError(str(exc)) from None
    return 0
