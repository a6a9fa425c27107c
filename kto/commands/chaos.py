"""``kto chaos``: a seeded, bounded chaos run of the whole pipeline with invariant checks.

Starts the stack (``kto up``'s, with two reconcilers and two status workers
by default), submits a mixed job load while it kills workers and the
watcher, restarts the broker, injects API faults (the sim itself; a real
cluster through a faulting proxy), kills the API server (kube) and writes
malformed records, waits for convergence, and
prints one JSON summary (bench/chaos.py says what is checked). Exit code 0
when every invariant holds, 1 when one is violated, 2 for bad input.
"""

from __future__ import annotations

import argparse
import pathlib

from kto import serving

HELP = "Run a seeded chaos run (kills, broker restart, API faults, malformed and forged records) and check invariants."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bench.chaos import ChaosSettings

    serving.add_backend_arguments(parser)
    c = ChaosSettings()
    parser.add_argument("--jobs", type=int, default=c.jobs, help=f"jobs to submit (default {c.jobs})")
    parser.add_argument("--seed", type=int, default=c.seed, help=f"seed of every random choice (default {c.seed})")
    parser.add_argument("--fault-seconds", type=float, default=c.fault_seconds,
                        help=f"how long faults go on; jobs are submitted over the first half (default {c.fault_seconds:g})")
    parser.add_argument("--converge-timeout", type=float, default=c.converge_timeout,
                        help="seconds to wait after the last fault for every job to end as it should "
                             f"(default {c.converge_timeout:g})")
    parser.add_argument("--reconcilers", type=int, default=2, help="reconciler processes (default 2)")
    parser.add_argument("--status-workers", type=int, default=2, help="status-service processes (default 2)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the jobs topic (default 8)")
    parser.add_argument("--state-dir", type=pathlib.Path, default=pathlib.Path(".kto/chaos"),
                        help="the stack's state and logs (default .kto/chaos)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from bench import chaos
    from kto import stack
    from kto.cli import UserError

    try:
        settings = chaos.ChaosSettings(
            jobs=args.jobs, seed=args.seed, fault_seconds=args.fault_seconds,
            converge_timeout=args.converge_timeout, real_tier=args.control_plane == "kube",
        )
        stack_settings = stack.StackSettings(
            state_dir=args.state_dir, reconcilers=args.reconcilers, status_workers=args.status_workers,
            partitions=args.partitions, control_plane=args.control_plane, broker=args.broker,
            watcher_args=("--lease-duration", "5"), fault_proxy=args.control_plane == "kube",
        )
    except (chaos.ChaosError, stack.StackError) as exc:
        raise UserError(str(exc)) from None

    def progress(text: str) -> None:
        print(f"kto chaos: {text}", file=sys.stderr, flush=True)

    async def main() -> chaos.Summary:
        progress(f"starting the stack ({args.control_plane} + {args.broker})")
        async with stack.Stack(stack_settings) as running:
            return await chaos.run(running, settings, progress)

    try:
        summary = asyncio.run(main())
    except (chaos.ChaosError, stack.StackError) as exc:
        raise UserError(str(exc)) from None
    print(chaos.dumps(summary))
    return 0 if summary.passed else 1
