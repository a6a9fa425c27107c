"""``kto export``: a window of the ``kto.jobs`` log written to JSON Lines files.

In: the broker (``KTO_KAFKA_*`` or ``--bootstrap``), which jobs (every one, or
those of ``-n`` / ``--cluster``) and a time window (``--since``, ``--until``).
Out: ``DIR/<topic>-<partition>.jsonl``, one line per record in log order:
``{"partition", "offset", "timestamp_ms", "key", "trace_id", "value", "signature"}`` where
``value`` is the record exactly as it was on the wire (UTF-8 text) and
``signature`` its ``kto-type`` / ``kto-kid`` / ``kto-sig`` headers (base64), so an
archived trail decodes, and is verified (``kto history --from DIR --verify``), as the
live one is. ``kto history --from DIR`` reads
these files instead of the broker. Existing files in DIR are replaced.

The trail holds every job's specs and statuses, so it is written for its owner
only: each file 0600, and DIR 0700 when export creates it. A symlink is never
followed: DIR itself, or a ``<topic>-<partition>.jsonl`` in it, being a symlink
is refused in one line naming the path, before anything is written (and each
file is opened with ``O_NOFOLLOW`` inside DIR opened the same way, so a link
planted meanwhile is refused too).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import pathlib
import stat
from typing import Any, TextIO

HELP = "Write a window of the kto.jobs log to JSON Lines files (read back by kto history --from)."

DIR_MODE = 0o700
FILE_MODE = 0o600


class RefusedPath(Exception):
    """A path export will not write through (a symlink, or not a directory); one line."""


def open_out(out: pathlib.Path) -> int:
    """The out directory, opened without following a symlink (created ``DIR_MODE`` when
    missing, its parents as ``mkdir -p`` makes them). RefusedPath when it is a symlink or
    not a directory."""
    if out.is_symlink():
        raise RefusedPath(f"{out}: is a symlink; refusing to write through it")
    created = not out.exists()
    if created:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.mkdir(mode=DIR_MODE)
    try:
        directory = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if out.is_symlink():
            raise RefusedPath(f"{out}: is a symlink; refusing to write through it") from None
        raise RefusedPath(f"{out}: {exc.strerror or exc}") from None
    if created:
        os.fchmod(directory, DIR_MODE)  # exactly DIR_MODE, whatever the umask took from mkdir's mode
    return directory


def refuse_links(out: pathlib.Path, directory: int, topic: str) -> None:
    """RefusedPath naming the first ``<topic>-*.jsonl`` in the out directory that is a
    symlink (or not a regular file): checked before any record is written."""
    for name in sorted(os.listdir(directory)):
        if not (name.startswith(f"{topic}-") and name.endswith(".jsonl")):
            continue
        mode = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise RefusedPath(f"{out / name}: is a symlink; refusing to write through it")
        if not stat.S_ISREG(mode):
            raise RefusedPath(f"{out / name}: is not a regular file")


def open_file(out: pathlib.Path, directory: int, name: str) -> TextIO:
    """``name`` in the out directory for writing, truncated, mode ``FILE_MODE`` (an existing
    file's mode too); RefusedPath when it is a symlink."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE,
                     dir_fd=directory)
    except OSError as exc:
        if os.path.islink(out / name):
            raise RefusedPath(f"{out / name}: is a symlink; refusing to write through it") from None
        raise RefusedPath(f"{out / name}: {exc.strerror or exc}") from None
    os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, "w", encoding="utf-8")


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

    directory = open_out(args.out)
    files: dict[int, TextIO] = {}
    count = 0
    try:
        refuse_links(args.out, directory, settings.jobs_topic)
        async for raw in reading.scan(settings, accept=accept, since_ms=since_ms, until_ms=until_ms):
            handle = files.get(raw.partition)
            if handle is None:
                name = f"{settings.jobs_topic}-{raw.partition}.jsonl"
                handle = files[raw.partition] = open_file(args.out, directory, name)
            handle.write(json.dumps({
                "partition": raw.partition, "offset": raw.offset, "timestamp_ms": raw.timestamp_ms, "key": raw.key,
                "trace_id": raw.trace_id, "value": raw.value.decode("utf-8", errors="replace"),
                "signature": reading.signature_to_json(raw.signature),
            }) + "\n")
            count += 1
    finally:
        for handle in files.values():
            handle.close()
        os.close(directory)
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
    except (BusError, RefusedPath) as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"{args.out}: {exc.strerror or exc}") from None
