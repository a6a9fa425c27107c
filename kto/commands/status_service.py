"""`kto status-service`: one status worker (the only writer of job status)."""

from __future__ import annotations

import argparse

HELP = "run a status worker (consumer group kto-status on kto.jobs)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto import serving
    from kto.cli import default_of
    from services.status.settings import StatusSettings

    serving.add_worker_arguments(parser, StatusSettings)
    parser.add_argument("--no-events", action="store_true", help="do not record Kubernetes Events")
    write_interval = default_of(StatusSettings, "write_interval")
    parser.add_argument(
        "--write-interval", type=float, default=write_interval, metavar="SECONDS",
        help="least time between two status writes of one job; changes within it are written together "
        f"(default {write_interval:g}; 0 writes every change at once)",
    )


def run(args: argparse.Namespace) -> int:
    import os

    from kto import serving
    from services.status import running
    from services.status.settings import StatusSettings
    from shared import namespaces as served

    from kto import cli

    kafka = serving.worker_kafka(args)
    if not args.write_interval >= 0:
        raise cli.UserError(f"--write-interval {args.write_interval}: must be a number of seconds ≥ 0")
    try:
        namespaces = served.from_env(os.environ)
    except served.NamespacesError as exc:
        raise cli.UserError(str(exc)) from None
    settings = StatusSettings(
        kubeconfig=args.kubeconfig, namespaces=namespaces, concurrency=args.concurrency,
        release_after=args.release_after,
        group_id=args.group, record_events=not args.no_events,
        write_interval=args.write_interval, metrics_port=serving.metrics_port(args),
        health_port=serving.health_port(args),
    )
    serving.configure_tracing("kto-status", settings.instance)
    serving.lean_collector()
    return serving.serve(
        lambda: running.run(settings, kafka, on_ready=lambda: serving.announce(f"ready {settings.instance}")),
        kafka=kafka,
    )
