"""`kto reconciler`: one reconciler worker (run as many as you like; they share the partitions)."""

from __future__ import annotations

import argparse

HELP = "run a reconciler worker (consumer group kto-reconciler on kto.jobs)"


def add_operator_arguments(parser: argparse.ArgumentParser) -> None:
    """The upstream operator flags that shape children (spec §10)."""
    from kto.cli import default_of
    from shared.core.settings import OperatorSettings

    parser.add_argument("--gang-scheduler-name", default=default_of(OperatorSettings, "gang_scheduler_name"),
                        help="volcano, or a scheduler-plugins scheduler name")
    parser.add_argument("--pytorch-init-container-image",
                        default=default_of(OperatorSettings, "pytorch_init_container_image"))
    parser.add_argument("--pytorch-init-container-max-tries", type=int,
                        default=default_of(OperatorSettings, "pytorch_init_container_max_tries"))
    parser.add_argument("--mpi-kubectl-delivery-image", default=default_of(OperatorSettings, "mpi_kubectl_delivery_image"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto import serving
    from kto.cli import default_of
    from services.reconciler.settings import ReconcilerSettings

    serving.add_worker_arguments(parser, ReconcilerSettings)
    create_concurrency = default_of(ReconcilerSettings, "create_concurrency")
    check_after = default_of(ReconcilerSettings, "check_after")
    exec_timeout = default_of(ReconcilerSettings, "exec_timeout")
    parser.add_argument("--create-concurrency", type=int, default=create_concurrency,
                        help=f"pods and services of one job created at the same time (default {create_concurrency})")
    parser.add_argument("--check-after", type=float, default=check_after, metavar="SECONDS",
                        help="read a job afresh when it was not observed for this long, to notice one deleted "
                        f"while no watcher ran (default {check_after:g}; 0 = never)")
    parser.add_argument("--exec-timeout", type=float, default=exec_timeout, metavar="SECONDS",
                        help="time limit of each command run in a TrainingJob's launcher; one still running "
                        f"then counts as failed (default {exec_timeout:g})")
    add_operator_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import os

    from kto import serving
    from services.reconciler import running
    from services.reconciler.settings import ReconcilerSettings
    from shared import namespaces as served
    from shared.core import settings as operator_settings
    from shared.core.settings import OperatorSettings

    from kto import cli

    kafka = serving.worker_kafka(args)
    if args.create_concurrency < 1:
        raise cli.UserError("--create-concurrency must be at least 1")
    if not args.check_after >= 0:
        raise cli.UserError(f"--check-after {args.check_after}: must be a number of seconds ≥ 0")
    if not args.exec_timeout > 0:
        raise cli.UserError(f"--exec-timeout {args.exec_timeout}: must be a number of seconds > 0")
    try:
        namespaces = served.from_env(os.environ)
    except served.NamespacesError as exc:
        raise cli.UserError(str(exc)) from None
    try:
        serve_jobsets = operator_settings.serve_jobsets(os.environ)
    except ValueError as exc:
        raise cli.UserError(str(exc)) from None
    settings = ReconcilerSettings(
        kubeconfig=args.kubeconfig, namespaces=namespaces,
        concurrency=args.concurrency, release_after=args.release_after, group_id=args.group,
        create_concurrency=args.create_concurrency,
        check_after=args.check_after, exec_timeout=args.exec_timeout, metrics_port=serving.metrics_port(args),
        health_port=serving.health_port(args),
        operator=OperatorSettings(
            gang_scheduler_name=args.gang_scheduler_name,
            pytorch_init_container_image=args.pytorch_init_container_image,
            pytorch_init_container_max_tries=args.pytorch_init_container_max_tries,
            mpi_kubectl_delivery_image=args.mpi_kubectl_delivery_image,
            cluster_domain=os.environ.get("CUSTOM_CLUSTER_DOMAIN", ""),
            serve_jobsets=serve_jobsets,
        ),
    )
    serving.configure_tracing("kto-reconciler", settings.instance)
    serving.lean_collector()
    return serving.serve(
        lambda: running.run(settings, kafka, on_ready=lambda: serving.announce(f"ready {settings.instance}")),
        kafka=kafka,
    )
