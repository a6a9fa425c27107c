"""`kto status-service`: one status worker (the only writer of job status)."""

from __future__ import annotations

import argparse
import pathlib

HELP = "run a status worker (consumer group kto-status on kto.jobs)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", type=pathlib.Path, default=None,
        help="kubeconfig whose contexts are the clusters (a job key's cluster = context name); "
        "default: in-cluster config",
    )
    parser.add_argument("--group", default="kto-status", help="Kafka consumer group shared by these workers")
    parser.add_argument("--concurrency", type=int, default=32, help="job keys handled at once")
    parser.add_argument("--no-events", action="store_true", help="do not record Kubernetes Events")


def run(args: argparse.Namespace) -> int:
    from kto import cli, serving
    from services.status import running
    from services.status.settings import StatusSettings
    from shared.bus.settings import KafkaSettings

    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise cli.UserError(f"--kubeconfig {args.kubeconfig}: no such file")
    if args.concurrency < 1:
        raise cli.UserError("--concurrency must be at least 1")
    try:
        kafka = KafkaSettings.from_env()
    except ValueError as exc:
        raise cli.UserError(str(exc)) from None
    settings = StatusSettings(
        kubeconfig=args.kubeconfig, concurrency=args.concurrency, group_id=args.group, record_events=not args.no_events,
    )
    return serving.serve(
        lambda: running.run(settings, kafka, on_ready=lambda: serving.announce(f"ready {settings.instance}"))
    )
