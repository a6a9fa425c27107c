"""``kto export``: a window of the ``kto.jobs`` log written to JSON Lines files.

In: the broker (``KTO_KAFKA_*`` or ``--bootstrap``), which jobs (every one, or
those of ``-n`` / ``--cluster``) and a time window (``--since``, ``--until``).
Out: ``DIR/<topic>-<partition>.jsonl``, one line per record in log order:
``{"partition", "offset", "timestamp_ms", "key", "trace_id", "value"}`` where
``value`` is the record exactly as it was on the wire (UTF-8 text), so an
archived trail decodes as the live one does. ``kto history --from DIR`` reads
these files instead of the broker. Existing files in DIR are replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import pathlib
from typing import Any

HELP = "Write a window of the kto.jobs log to JSON Lines files (read back by kto history --from)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=pathlib.Path, required=True, metavar="DIR", help="directory for the .jsonl files")
    parser.add_argument("-n", "--namespace", default=None, help="only jobs of this namespace")
    parser.add_argument("--cluster", default=None, help="only jobs of this cluster (kubeconfig context)")
    parser.add_argument("--since", default=None, help="only records written since: a duration (30s, 5m, 2h, 1d) or an ISO time")
    parser.add_argument("--until", default=None, help="only records written until this ISO time")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap address (default: KTO_KAFKA_BOOTSTRAP)")


async def _export(args: argparse.Namespace, settings: Any, since_ms: int | None, until_ms: int | None) -> int:
    from shared.bus import reading

    def accept(key: str) -> bool:
        parts = key.split("/")
        return len(parts) != 4 or (args.cluster is None or parts[0] == args.cluster) and (
            args.namespace is None or parts[1] == args.namespace)

    args.out.mkdir(parents=True, exist_ok=True)
    files: dict[int, Any] = {}
    count = 0
    try:
        async for raw in reading.scan(settings, accept=accept, since_ms=since_ms, until_ms=until_ms):
            handle = files.get(raw.partition)
            if handle is None:
                handle = files[raw.partition] = (args.out / f"{settings.jobs_topic}-{raw.partition}.jsonl").open("w")
            handle.write(json.dumps({
                "partition": raw.partition, "offset": raw.offset, "timestamp_ms": raw.timestamp_ms, "key": raw.key,
                "trace_id": raw.trace_id, "value": raw.value.decode("utf-8", errors="replace"),
            }) + "\n")
            count += 1
    finally:
        for handle in files.values():
            handle.close()
    print(f"{count} records of {settings.jobs_topic} in {len(files)} file(s) under {args.out}")
    return 0


def run(args: argparse.Namespace) -> int:
    from kto.cli import UserError
    from kto.commands import history
    from shared.bus.errors import BusError
    from shared.bus.settings import KafkaSettings, SettingsError

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    now = dt.datetime.now(dt.UTC)
    since_ms = history.moment(args.since, now, "--since") if args.since else None
    until_ms = history.moment(args.until, now, "--until") if args.until else None
    try:
        settings = KafkaSettings.from_env({**os.environ, **({"KTO_KAFKA_BOOTSTRAP": args.bootstrap}
                                                            if args.bootstrap else {})})
    except SettingsError as exc:
        raise UserError(str(exc)) from None
    try:
        return asyncio.run(asyncio.wait_for(_export(args, settings, since_ms, until_ms), 600))
    except TimeoutError:
        raise UserError(f"the broker at {settings.bootstrap} did not answer in time") from None
    except BusError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"{args.out}: {exc.strerror or exc}") from None
