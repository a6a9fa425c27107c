"""``kto broker``: run the embedded Kafka-compatible broker (Tansu, in memory).

Prints exactly one line, ``ready <bootstrap>``, once the broker accepts
connections and the kto topics exist; stops cleanly on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse

HELP = "Run an embedded in-memory Kafka-compatible broker (Tansu) with the kto topics."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0,
                        help="port on 127.0.0.1 to listen on (default: a free one)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions of the jobs and dead-letter topics "
                             "(default: KTO_KAFKA_PARTITIONS or 16)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses
    import signal
    import sys

    from kto.cli import UserError
    from shared.bus import broker, errors, settings

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port number")
    if args.partitions is not None and args.partitions < 1:
        raise UserError("--partitions must be at least 1")
    try:
        base = settings.KafkaSettings.from_env()
    except settings.SettingsError as exc:
        raise UserError(str(exc)) from None
    if args.partitions is not None:
        base = dataclasses.replace(base, partitions=args.partitions)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            async with broker.EmbeddedBroker(args.port, settings=base) as running:
                print(f"ready {running.bootstrap}", flush=True)
                await stop.wait()
        except errors.BrokerError as exc:
            raise UserError(str(exc)) from None
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    asyncio.run(serve())
    sys.stdout.flush()
    return 0
