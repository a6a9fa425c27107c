"""``kto control-plane``: a real Kubernetes control plane on loopback, until SIGTERM or Ctrl-C.

etcd, kube-apiserver (TLS, token auth), kube-controller-manager and
kube-scheduler of the pinned release (built once per machine from the Go
module proxy into ``~/.cache/kto``), plus kto's node agent: fake nodes with
``nvidia.com/gpu`` capacity whose pods run as in ``kto sim`` (the
``sim.kto.dev/*`` annotations). Prints exactly one line, ``ready <url>
<kubeconfig>``, once pods can be created and nodes are Ready; on SIGTERM
stops everything and leaves no process or port behind.

``--with kueue`` adds the real Kueue (realparts/kueue.py: its CRDs, webhooks and controllers, the
integrations of every job kind kto serves), started after the nodes are Ready; ``ready`` is
printed only once Kueue's controllers run and its webhooks answer, and on SIGTERM Kueue stops
first (its webhook configurations removed) and leaves no lease behind.
"""

from __future__ import annotations

import argparse
import pathlib

WITH = ("kueue",)
"""The real parts ``--with`` adds."""

HELP = "Run a real Kubernetes control plane (etcd, apiserver, controller-manager, scheduler) with fake GPU nodes."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto.cli import default_of
    from sim.settings import SimSettings

    nodes, pod_duration = default_of(SimSettings, "nodes"), default_of(SimSettings, "pod_duration")
    parser.add_argument("--state-dir", type=pathlib.Path, default=pathlib.Path(".kto/control-plane"),
                        help="etcd data, keys, logs and the kubeconfig (default .kto/control-plane); "
                             "started again on the same dir it keeps every object")
    parser.add_argument("--port", type=int, default=0,
                        help="HTTPS port of the API server on 127.0.0.1 (default: a free one, kept in the state dir)")
    parser.add_argument("--context", default="kube", help="context (and cluster, user) name in the kubeconfig")
    parser.add_argument("--nodes", type=int, default=nodes, help=f"fake nodes (default {nodes})")
    parser.add_argument("--gpus-per-node", type=int, default=default_of(SimSettings, "gpus_per_node"),
                        help="nvidia.com/gpu capacity of each node")
    parser.add_argument("--pod-duration", type=float, default=pod_duration,
                        help=f"seconds a pod runs unless its sim.kto.dev/duration says otherwise (default {pod_duration:g})")
    parser.add_argument("--runtime", choices=("simulated", "process"), default=default_of(SimSettings, "runtime"),
                        help="how the nodes run pods (their sim.kto.dev/runtime label): simulated (default) or "
                             "process, real local processes for pods whose containers all have a command")
    parser.add_argument("--pods-dir", type=pathlib.Path, default=None, metavar="DIR",
                        help="process pods' scratch directories and logs (default: a temporary directory)")
    parser.add_argument("--crds", type=pathlib.Path, action="append", default=[], metavar="PATH",
                        help="a CRD YAML file or a directory of them, created before the controller manager "
                             "starts (its garbage collector then knows the kinds at once); repeatable")
    parser.add_argument("--restart-dead-parts", action="store_true",
                        help="start a part that dies again (as a kubelet restarts static pods) instead of "
                             "stopping everything with its last log lines")
    parser.add_argument("--with", dest="extras", action="append", choices=WITH, default=[], metavar="PART",
                        help="also run a real part on the cluster: kueue (Kueue with every integration kto "
                             "serves; give --crds deploy/crds so its job kinds exist); repeatable")
    parser.add_argument("--build-only", action="store_true",
                        help="only build (or find in the cache) the binaries, print their directory and exit")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    import contextlib

    from kto import cli
    from realparts import caching, kube, kueue
    from sim import settings as sim_settings
    from sim.node import nodeagent

    if args.nodes < 0 or args.gpus_per_node < 0:
        raise cli.UserError("--nodes and --gpus-per-node must not be negative")
    if not 0 <= args.port <= 65535:
        raise cli.UserError(f"--port {args.port} is not a port number")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.build_only:
        try:
            print(kube.ensure_binaries())
            if "kueue" in args.extras:
                print(kueue.ensure_build())
        except caching.PartError as exc:
            raise cli.UserError(str(exc)) from None
        return 0
    crds: list[pathlib.Path] = []
    for path in args.crds:
        if path.is_dir():
            crds += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        elif path.is_file():
            crds.append(path)
        else:
            raise cli.UserError(f"--crds {path}: no such file or directory")
    settings = sim_settings.SimSettings(
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, pod_duration=args.pod_duration,
        runtime=args.runtime, pods_dir=args.pods_dir.resolve() if args.pods_dir else None,
    )

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with contextlib.AsyncExitStack() as parts:
            plane = await parts.enter_async_context(
                kube.ControlPlane(args.state_dir, context=args.context, port=args.port, crds=crds))
            agent = asyncio.create_task(
                nodeagent.run(plane.node_kubeconfig, args.context, settings), name="control-plane-nodes",
            )
            await nodeagent.wait_ready(plane.kubeconfig, args.context, settings.nodes, agent)
            extras = [await parts.enter_async_context(
                kueue.KueueController(plane.kubeconfig, args.context, args.state_dir.resolve() / "kueue"))
                for _ in set(args.extras)]
            print(f"ready {plane.url} {plane.kubeconfig}", flush=True)
            stopped = asyncio.create_task(stop.wait(), name="control-plane-stop-signal")
            watchdog = asyncio.create_task(_watch(plane, extras), name="control-plane-watchdog")
            done, pending = await asyncio.wait({stopped, watchdog, agent}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                if task is not stopped:
                    task.result()  # a dead part or agent: raise its reason

    async def _watch(plane: kube.ControlPlane, extras: list[kueue.KueueController]) -> None:
        while True:
            dead = plane.dead()
            gone = [reason for extra in extras if (reason := extra.died()) is not None]
            if gone or (dead and not args.restart_dead_parts):
                raise caching.PartError("\n".join(gone or dead))
            for name, process in plane.processes.items():
                if process.ended:
                    logging.getLogger("kto.control-plane").warning("%s died; starting it again", name)
                    await plane.restart(name)
            await asyncio.sleep(0.5)

    try:
        asyncio.run(serve())
    except caching.PartError as exc:
        raise cli.UserError(str(exc)) from None
    return 0
