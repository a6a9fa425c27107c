"""Running a long-lived service command until SIGTERM or Ctrl-C.

In: a coroutine function (the service). Out: an exit code; on a signal the
service task is cancelled, so its ``async with`` blocks drain and close.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.bus.settings import KafkaSettings


def configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("KTO_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def announce(line: str) -> None:
    """The one stdout line a parent process waits for (``ready …``)."""
    print(line, flush=True)


def serve(service: Callable[[], Awaitable[None]]) -> int:
    """Run ``service`` until it returns or a SIGTERM/SIGINT arrives; 0 on a clean stop."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(service())
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    configure_logging()
    asyncio.run(main())
    return 0


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """``--control-plane`` and ``--broker``: which local cluster and broker ``kto up|demo|bench`` run on."""
    parser.add_argument(
        "--control-plane", choices=("sim", "kube"), default="sim",
        help="sim: kto's own API server, scheduler and kubelet in one process (fast, default); "
        "kube: real etcd, kube-apiserver, kube-controller-manager and kube-scheduler with kto's fake "
        "GPU nodes (built once per machine into ~/.cache/kto; see docs/real-backends.md)",
    )
    parser.add_argument(
        "--broker", choices=("tansu", "kafka"), default="tansu",
        help="tansu: embedded, in memory (default); kafka: Apache Kafka 4 in KRaft mode, its log kept "
        "under the state dir",
    )


def add_worker_arguments(parser: argparse.ArgumentParser, group: str) -> None:
    """Arguments every consumer-group worker takes (reconciler, status)."""
    parser.add_argument(
        "--kubeconfig", type=pathlib.Path, default=None,
        help="kubeconfig whose contexts are the clusters (a job key's cluster = context name); "
        "default: in-cluster config",
    )
    parser.add_argument("--group", default=group, help="Kafka consumer group shared by these workers")
    parser.add_argument("--concurrency", type=int, default=32, help="job keys handled at once")


def worker_kafka(args: argparse.Namespace) -> KafkaSettings:
    """Check the worker arguments and read the Kafka settings from ``KTO_KAFKA_*``."""
    from kto import cli
    from shared.bus.settings import KafkaSettings

    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise cli.UserError(f"--kubeconfig {args.kubeconfig}: no such file")
    if args.concurrency < 1:
        raise cli.UserError("--concurrency must be at least 1")
    try:
        return KafkaSettings.from_env()
    except ValueError as exc:
        raise cli.UserError(str(exc)) from None
