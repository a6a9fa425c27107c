"""``kto sim-bench``: how fast the local cluster's API server takes pod creates and delivers watch events.

In: flags. Out: one JSON object on stdout (creates/s, watch delay p50/p95/p99
in ms), from `bench.sim.measure` against an in-process local cluster or the
server at ``--url``.
"""

from __future__ import annotations

import argparse
import asyncio
import json

HELP = "Measure the local cluster's pod creates/s and watch delivery delay; print one JSON object."


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--creates", type=_positive, default=5000, help="pods to create (default 5000)")
    parser.add_argument("--concurrency", type=_positive, default=32, help="concurrent creates (default 32)")
    parser.add_argument("--watchers", type=_positive, default=10, help="concurrent pod watches (default 10)")
    parser.add_argument(
        "--mode",
        choices=("idle", "unschedulable"),
        default="idle",
        help="idle: pods bound to a missing node, no controller work (default); "
        "unschedulable: pods the scheduler evaluates and marks Unschedulable",
    )
    parser.add_argument("--url", help="an API server to measure instead of starting an in-process local cluster")
    parser.add_argument(
        "--server-process",
        action="store_true",
        help="run the local cluster in a child process (its own core) instead of in this one",
    )


def run(args: argparse.Namespace) -> int:
    from bench import sim as sim_bench

    result = asyncio.run(
        sim_bench.measure(args.url, args.creates, concurrency=args.concurrency, watchers=args.watchers, mode=args.mode,
                           separate_process=args.server_process)
    )
    print(json.dumps(result))
    return 0
