"""``kto broker``: run a Kafka broker with the kto topics for development.

``--engine tansu`` (the default): the embedded Kafka-compatible broker Tansu,
in memory. ``--engine kafka``: real Apache Kafka (KRaft, one node) run with the
machine's Java, its jars fetched once with Maven, its log kept on disk under
``--state-dir`` (default ``.kto/kafka``) so records survive a restart.

Prints exactly one line, ``ready <bootstrap>``, once the broker accepts
connections and the kto topics exist; stops cleanly on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from realparts.kafka import KafkaBroker
    from realparts.tansu import EmbeddedBroker

HELP = "Run a Kafka broker with the kto topics: Tansu in memory (default) or real Apache Kafka on disk."

ENGINES = ("tansu", "kafka")
DEFAULT_KAFKA_STATE_DIR = ".kto/kafka"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=ENGINES, default="tansu",
                        help="tansu: embedded, in memory (default); kafka: Apache Kafka with "
                             "java, its log on disk under --state-dir")
    parser.add_argument("--state-dir", default=None,
                        help=f"--engine kafka only: where Kafka keeps its log, ports and output "
                             f"(default: {DEFAULT_KAFKA_STATE_DIR}, relative to the current directory)")
    parser.add_argument("--port", type=int, default=0,
                        help="port on 127.0.0.1 to listen on (default: a free one; with kafka, "
                             "the one its state dir used before)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions of the jobs and dead-letter topics "
                             "(default: KTO_KAFKA_PARTITIONS or 16)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import dataclasses
    import pathlib
    import signal
    import sys

    from kto.cli import UserError
    from shared.bus import errors, settings

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port number")
    if args.partitions is not None and args.partitions < 1:
        raise UserError("--partitions must be at least 1")
    if args.state_dir is not None and args.engine != "kafka":
        raise UserError("--state-dir needs --engine kafka (Tansu keeps everything in memory)")
    try:
        base = settings.KafkaSettings.from_env()
    except settings.SettingsError as exc:
        raise UserError(str(exc)) from None
    if args.partitions is not None:
        base = dataclasses.replace(base, partitions=args.partitions)

    running: EmbeddedBroker | KafkaBroker
    if args.engine == "kafka":
        try:
            from realparts import caching, kafka
        except ImportError as exc:  # an installed kto without the repository's realparts/
            raise UserError(f"--engine kafka needs kto's realparts package (run from the repository): {exc}") from None
        part_errors: tuple[type[Exception], ...] = (errors.BrokerError, caching.PartError)
        running = kafka.KafkaBroker(pathlib.Path(args.state_dir or DEFAULT_KAFKA_STATE_DIR),
                                    args.port, settings=base)
    else:
        try:
            from realparts import tansu
        except ImportError as exc:  # an installed kto without the repository's realparts/
            raise UserError(f"--engine tansu needs kto's realparts package (run from the repository): {exc}") from None
        part_errors = (errors.BrokerError,)
        running = tansu.EmbeddedBroker(args.port, settings=base)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            # Kafka can take seconds to start (minutes the first time, building):
            # a signal meanwhile cancels the start, which stops what it began.
            starting = asyncio.ensure_future(running.start())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError, *part_errors):
                    await starting
                return
            stopping.cancel()
            starting.result()
            print(f"ready {running.bootstrap}", flush=True)
            await stop.wait()
        except part_errors as exc:
            raise UserError(str(exc)) from None
        finally:
            await asyncio.shield(running.stop())
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    asyncio.run(serve())
    sys.stdout.flush()
    return 0
