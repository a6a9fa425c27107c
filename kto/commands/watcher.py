"""``kto watcher``: the one active watcher of a cluster (run two for a hot standby).

Lists and watches the cluster's training jobs and their pods, Services and
ConfigMaps and publishes every change to the jobs topic (Kafka from
``KTO_KAFKA_*``). Replicas elect one leader through a Lease; the others wait.
Prints ``ready <identity> <cluster>`` on stdout once it first becomes the
active watcher; logs one line at start and one per leadership change; stops
cleanly on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse

HELP = "watch one cluster's training jobs and publish every change to kto.jobs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto import serving
    from kto.cli import default_of
    from services.watcher.settings import WatcherSettings

    resync_interval = default_of(WatcherSettings, "resync_interval")
    lease_namespace = default_of(WatcherSettings, "lease_namespace")
    lease_duration = default_of(WatcherSettings, "lease_duration")
    parser.add_argument("--cluster", required=True,
                        help="cluster name: the first part of every job key published")
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument("--namespace", default=None, metavar="NS[,NS...]",
                        help="watch only these namespaces, comma-separated (default: $KTO_NAMESPACES, else all)")
    parser.add_argument("--resync-interval", type=float, default=resync_interval,
                        help=f"seconds between resyncs of every live job (default: {resync_interval:g})")
    parser.add_argument("--lease-namespace", default=lease_namespace,
                        help=f"namespace of the leader-election Lease (default: {lease_namespace})")
    parser.add_argument("--lease-duration", type=float, default=lease_duration,
                        help=f"seconds before a standby takes over from a silent leader (default: {lease_duration:g})")
    serving.add_metrics_argument(parser)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os

    from kto import serving
    from kto.cli import UserError
    from services.watcher import running
    from services.watcher.settings import WatcherSettings
    from shared import tracing
    from shared import namespaces as served
    from shared.bus.settings import KafkaSettings, SettingsError
    from shared.core import settings as operator_settings

    if args.kubeconfig is not None and not os.path.isfile(args.kubeconfig):
        raise UserError(f"--kubeconfig {args.kubeconfig}: no such file")
    try:
        namespaces = (served.from_env(os.environ) if args.namespace is None
                      else served.parse(args.namespace, "--namespace"))
        settings = WatcherSettings(
            cluster=args.cluster,
            kubeconfig=args.kubeconfig,
            context=args.context,
            namespace=",".join(namespaces) or None,
            resync_interval=args.resync_interval,
            lease_namespace=args.lease_namespace,
            lease_duration=args.lease_duration,
            metrics_port=serving.metrics_port(args),
            health_port=serving.health_port(args),
            serve_jobsets=operator_settings.serve_jobsets(os.environ),
        )
        kafka = KafkaSettings.from_env()
        provider = tracing.configure("kto-watcher", settings.identity)
    except (ValueError, SettingsError, tracing.TracingConfigError) as exc:
        raise UserError(str(exc)) from None
    # Per-record logs of the bus and the client stay at DEBUG unless asked for.
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    announced = False

    def on_active() -> None:
        nonlocal announced
        if not announced:
            announced = True
            serving.announce(f"ready {settings.identity} {settings.cluster}")

    async def watch() -> None:
        try:
            await running.run(settings, kafka, on_active=on_active)
        except running.ClusterConfigError as exc:
            raise UserError(str(exc)) from None
        except asyncio.CancelledError:
            logging.getLogger("kto.watcher").info("watcher %s stopped", settings.identity)
            raise

    try:
        serving.lean_collector()
        return serving.serve(watch, kafka=kafka)
    finally:
        provider.shutdown()
