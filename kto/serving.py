"""Running a long-lived service command until SIGTERM or Ctrl-C.

In: a coroutine function (the service). Out: an exit code; on a signal the
service task is cancelled, so its ``async with`` blocks drain and close. A
service that stops on an error ends as one line on stderr (``kto.cli``), never
a traceback: its own errors say what to fix (exit code 2); any other is named
with its type (exit code 1), its traceback logged at DEBUG (``KTO_LOG_LEVEL=DEBUG``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import pathlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.bus.settings import KafkaSettings


def configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("KTO_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


GC_THRESHOLDS = (10_000, 10, 10)
"""The cyclic collector's thresholds in a service (CPython's are 700, 10, 10). Decoding one
record makes about a hundred containers, so at 700 a young collection ran every few records
and a full one, which walks every object the service keeps (its jobs' views), every few
hundred: py-spy found 16 % of the reconciler's CPU and 11 % of the status worker's in the
collector under ``kto bench`` (docs/benchmarks.md, "CPU per job: profiles"). Reference
counting frees all but cycles at once, whatever the thresholds; only cycles wait longer."""


def lean_collector() -> None:
    """Freeze what the service made before it serves (modules, models, schemas: kept for the
    process's life, never garbage) so that no collection walks it again, and collect less often
    (:data:`GC_THRESHOLDS`). For the process of a bus worker (``kto watcher``, ``kto reconciler``,
    ``kto status-service``), called by its command before :func:`serve`: it is the process's
    collector that changes."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def announce(line: str) -> None:
    """The one stdout line a parent process waits for (``ready …``)."""
    print(line, flush=True)


def serve(service: Callable[[], Awaitable[None]], *, kafka: KafkaSettings | None = None) -> int:
    """Run ``service`` until it returns or a SIGTERM/SIGINT arrives; 0 on a clean stop.

    With ``kafka``, first ask the broker whether it lets these settings in
    (:func:`shared.bus.authenticating.check_access`): a refused certificate, login or
    ACL ends the command in one line instead of retrying as if the broker were down."""

    async def checked() -> None:
        if kafka is not None:
            from shared.bus import authenticating

            await authenticating.check_access(kafka)
        await service()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(checked())
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
    try:
        asyncio.run(main())
    except Exception as exc:
        raise _one_line(exc) from None
    return 0


def _one_line(exc: Exception) -> Exception:
    """The :class:`kto.cli.CommandError` a service's error is printed as."""
    from kto import cli
    from shared import metrics
    from shared.bus import errors as bus_errors

    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # a TaskGroup's one failure
    if isinstance(exc, cli.CommandError):
        return exc
    if isinstance(exc, (metrics.MetricsPortError, bus_errors.BusError)):
        return cli.UserError(str(exc))
    logging.getLogger("kto").debug("the service stopped on an error", exc_info=exc)
    text = " ".join(str(exc).split())
    return cli.CommandError(f"{type(exc).__name__}{': ' + text if text else ''} (KTO_LOG_LEVEL=DEBUG logs where)")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """``--control-plane`` and ``--broker``: which local cluster and broker ``kto up|demo|bench`` run on."""
    from kto import stack
    from kto.cli import default_of

    parser.add_argument(
        "--control-plane", choices=stack.CONTROL_PLANES, default=default_of(stack.StackSettings, "control_plane"),
        help="sim: kto's own API server, scheduler and kubelet in one process (fast, default); "
        "kube: real etcd, kube-apiserver, kube-controller-manager and kube-scheduler with kto's fake "
        "GPU nodes (built once per machine into ~/.cache/kto; see docs/real-backends.md)",
    )
    parser.add_argument(
        "--broker", choices=stack.BROKERS, default=default_of(stack.StackSettings, "broker"),
        help="tansu: embedded, in memory (default); kafka: Apache Kafka 4 in KRaft mode, its log kept "
        "under the state dir",
    )


def add_worker_arguments(parser: argparse.ArgumentParser, settings: type[Any]) -> None:
    """Arguments every consumer-group worker takes (reconciler, status), with the defaults of its
    ``settings`` dataclass (``group_id``, ``concurrency``, ``release_after``)."""
    from kto.cli import default_of

    parser.add_argument(
        "--kubeconfig", type=pathlib.Path, default=None,
        help="kubeconfig whose contexts are the clusters (a job key's cluster = context name); "
        "default: in-cluster config",
    )
    parser.add_argument("--group", default=default_of(settings, "group_id"),
                        help="Kafka consumer group shared by these workers")
    parser.add_argument("--concurrency", type=int, default=default_of(settings, "concurrency"),
                        help="job keys handled at once")
    release_after = default_of(settings, "release_after")
    parser.add_argument(
        "--release-after", type=float, default=release_after, metavar="SECONDS",
        help="how long a job key whose cluster does not answer holds its records; then they are let go, so "
        f"the partition's commits move on, and a wake-up record waits in their place (default {release_after:g})",
    )
    add_metrics_argument(parser)


METRICS_PORT_ENV = "KTO_METRICS_PORT"
HEALTH_PORT_ENV = "KTO_HEALTH_PORT"


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` and ``--health-port`` of the service commands (watcher, reconciler, status-service).
    Both listen on ``$KTO_METRICS_ADDRESS``: by default every address inside a pod, 127.0.0.1 elsewhere
    (:func:`shared.metrics.bind_address`)."""
    parser.add_argument(
        "--metrics-port", default=None, metavar="PORT",
        help=f"serve Prometheus metrics at PORT on $KTO_METRICS_ADDRESS (default: every address inside a pod, else "
        f"127.0.0.1), path /metrics, and the probes /healthz and "
        f"/readyz beside them (default: ${METRICS_PORT_ENV}, else 0 = off)",
    )
    parser.add_argument(
        "--health-port", default=None, metavar="PORT",
        help=f"serve the probes /healthz (liveness) and /readyz (readiness) at PORT, also when "
        f"metrics are off (default: ${HEALTH_PORT_ENV}, else 0 = only on the metrics port)",
    )


def _port(args: argparse.Namespace, attribute: str, env: str, flag: str, zero: str) -> int:
    from kto import cli

    value = getattr(args, attribute)
    given = value is not None
    raw = str(value if given else os.environ.get(env, "")).strip() or "0"
    port = int(raw) if raw.isdigit() else -1
    if not 0 <= port <= 65535:
        where = flag if given else env
        raise cli.UserError(f"{where} {raw!r}: not a port number (1-65535, or 0 for {zero})")
    return port


def metrics_port(args: argparse.Namespace) -> int:
    """The port ``--metrics-port`` (or ``$KTO_METRICS_PORT``) names; 0 for none."""
    return _port(args, "metrics_port", METRICS_PORT_ENV, "--metrics-port", "no metrics")


def health_port(args: argparse.Namespace) -> int:
    """The port ``--health-port`` (or ``$KTO_HEALTH_PORT``) names; 0 for none of its own."""
    return _port(args, "health_port", HEALTH_PORT_ENV, "--health-port", "none of its own")


def configure_tracing(service: str, instance: str) -> None:
    """Install the process's tracing (``KTO_TRACES``, ``OTEL_*``) before the service
    starts, so that a value it cannot use is one line, not a traceback."""
    from kto import cli
    from shared import tracing

    try:
        tracing.configure(service, instance)
    except tracing.TracingConfigError as exc:
        raise cli.UserError(str(exc)) from None


def worker_kafka(args: argparse.Namespace) -> KafkaSettings:
    """Check the worker arguments and read the Kafka settings from ``KTO_KAFKA_*``."""
    from kto import cli
    from shared.bus.settings import KafkaSettings
    from shared.kube import connecting

    if args.kubeconfig is not None:
        if not args.kubeconfig.is_file():
            raise cli.UserError(f"--kubeconfig {args.kubeconfig}: no such file")
        try:
            connecting.context_names(args.kubeconfig)  # none yet is readiness's business
        except ValueError as exc:
            raise cli.UserError(f"{exc} (--kubeconfig names a kubeconfig whose contexts are the clusters)") from None
    if args.concurrency < 1:
        raise cli.UserError("--concurrency must be at least 1")
    if not args.release_after > 0:
        raise cli.UserError(f"--release-after {args.release_after}: must be a number of seconds > 0")
    try:
        return KafkaSettings.from_env()
    except ValueError as exc:
        raise cli.UserError(str(exc)) from None
