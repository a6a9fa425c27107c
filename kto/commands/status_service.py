"""`kto status-service`: one status worker (the only writer of job status)."""

from __future__ import annotations

import argparse

HELP = "run a status worker (consumer group kto-status on kto.jobs)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto import serving

    serving.add_worker_arguments(parser, group="kto-status")
    parser.add_argument("--no-events", action="store_true", help="do not record Kubernetes Events")


def run(args: argparse.Namespace) -> int:
    from kto import serving
    from services.status import running
    from services.status.settings import StatusSettings

    kafka = serving.worker_kafka(args)
    settings = StatusSettings(
        kubeconfig=args.kubeconfig, concurrency=args.concurrency, group_id=args.group, record_events=not args.no_events,
    )
    return serving.serve(
        lambda: running.run(settings, kafka, on_ready=lambda: serving.announce(f"ready {settings.instance}"))
    )
