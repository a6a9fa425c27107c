"""``kto replay``: every decision of a job's audit trail made again and compared.

In: a job chosen as ``kto history`` chooses it (``-n NS pytorchjob/NAME``,
``--cluster``), or ``--all`` (every job of the log, of ``-n`` and/or
``--cluster``); the log from the broker (``KTO_KAFKA_*`` or ``--bootstrap``) or from
``kto export``'s files (``--from DIR``). Out: one line per job — records, passes,
status writes and acts checked, OK or the first divergence with the recorded and
the derived side — then a summary with the throughput; ``-o json`` for all of it.
Exit 0 when nothing diverged, 1 on any divergence (records that could not be
checked are listed, with why, and do not fail the run), 2 for bad input, 3 with
``--verify`` when a record is not authentic. With the signing keys (``--keys``,
``KTO_SIGNING_KEYS`` or ``.kto/keys.json``) every record is said authentic or not;
one that is not was never acted on, and is listed instead of replayed.
See :mod:`shared.bus.replaying` for what is checked.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import sys
import time
from typing import Any

HELP = "Make every decision of the audit log again with the pure core and compare (exit 1 on divergence)."

_EPILOG = """\
examples:
  kto replay -n team-a pytorchjob/mnist
  kto replay --all --cluster kto-2
  kto replay --all                      # the whole log
  kto replay --all --from archive/      # files written by kto export
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto.commands import history

    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    history.add_selection(parser, "every job of the log (of -n NAMESPACE and/or --cluster when given)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    history.add_keys(parser)
    parser.add_argument("--verify", action="store_true",
                        help="require the signing keys; exit code 3 when a record is not authentic")


def _replay_selection(args: argparse.Namespace) -> tuple[str | None, Any]:
    from kto.commands import history

    if args.all and args.namespace is None and args.cluster is None:
        if args.job:
            from kto.cli import UserError

            raise UserError("--all takes no KIND/NAME")
        return None, lambda key: True
    return history.selection(args)


async def _replay(args: argparse.Namespace, settings: Any, key: str | None, accept: Any,
                  since_ms: int | None, until_ms: int | None) -> int:
    from kto.commands import history
    from shared.bus import reading, replaying

    started = time.process_time()
    wall = time.monotonic()
    replayer = replaying.Replayer()
    keys = history.keyring(args, args.verify, "replay")
    count = 0
    authentic: dict[str, int] = {}
    refused: dict[str, list[str]] = {}

    def take(entry: Any) -> None:
        # A record that is not authentic was never acted on (every worker dead-lettered it): it is
        # said, not replayed.
        if entry.verdict is not None and not entry.verdict.authentic:
            refused.setdefault(entry.key, []).append(f"offset {entry.offset}: {entry.verdict.reason}")
        else:
            authentic[entry.key] = authentic.get(entry.key, 0) + (entry.verdict is not None)
            replayer.add(entry)

    if args.from_dir is not None:
        async for entry in history.archived(args.from_dir, accept, since_ms, until_ms, "replay", keys=keys):
            take(entry)
            count += 1
    else:
        async for raw in reading.scan(settings, accept=accept, key=key, since_ms=since_ms, until_ms=until_ms):
            take(raw.decoded(keys))
            count += 1
    read_cpu = time.process_time() - started
    reports = list(replayer.reports())
    cpu = time.process_time() - started
    not_authentic = sum(len(v) for v in refused.values())
    code = 3 if args.verify and not_authentic else 0
    if not reports and not refused:
        where = args.from_dir if args.from_dir is not None else settings.jobs_topic
        what = "records" if args.all else f"records of {'/'.join(args.job)} (namespace {args.namespace or 'default'})"
        print(f"kto replay: no {what} in {where}", file=sys.stderr)
        return 1
    diverged = [r for r in reports if not r.ok]
    unverifiable = sum(len(r.unverifiable) for r in reports)
    figures = {
        "jobs": len(reports), "records": count, "diverged": len(diverged), "unverifiable": unverifiable,
        "passes": sum(r.passes for r in reports), "statuses": sum(r.statuses for r in reports),
        "acts": sum(r.acts for r in reports), "cpu_seconds": round(cpu, 3),
        "replay_cpu_seconds": round(cpu - read_cpu, 3),
        "records_per_cpu_second": round(count / cpu) if cpu > 0 else None,
        "wall_seconds": round(time.monotonic() - wall, 3),
    }
    if keys is not None:
        figures.update(authentic=sum(authentic.values()), not_authentic=not_authentic)
    if args.output == "json":
        jobs = [{**r.dump(), **({"authentic": authentic.get(r.key, 0), "not_authentic": refused.get(r.key, [])}
                                if keys is not None else {})} for r in reports]
        jobs += [{"key": k, "authentic": 0, "not_authentic": v} for k, v in refused.items()
                 if k not in {r.key for r in reports}]
        print(json.dumps({"summary": figures, "jobs": jobs}, indent=2, default=str))
        return 1 if diverged else code
    for report in reports:
        checked = f"{report.records} records, {report.passes} passes, {report.statuses} statuses, {report.acts} acts"
        if keys is not None:
            checked += f"; {authentic.get(report.key, 0)} authentic, {len(refused.get(report.key, []))} not"
        if report.ok:
            print(f"{report.key}  OK  ({checked})")
        else:
            d = report.divergence
            assert d is not None
            print(f"{report.key}  DIVERGED at offset {d.offset}: {d.what}  ({checked}, {report.divergences} divergences)")
            print(f"    recorded: {json.dumps(d.recorded, default=str)[:2000]}")
            print(f"    derived:  {json.dumps(d.derived, default=str)[:2000]}")
        for line in report.unverifiable[:5]:
            print(f"    not checked: {line}")
        if len(report.unverifiable) > 5:
            print(f"    not checked: … and {len(report.unverifiable) - 5} more")
    for job_key, reasons in sorted(refused.items()):
        for line in reasons[:5]:
            print(f"{history.printable(job_key)}  NOT AUTHENTIC {history.printable(line)}")
        if len(reasons) > 5:
            print(f"{history.printable(job_key)}  NOT AUTHENTIC … and {len(reasons) - 5} more")
    print(f"replayed {figures['jobs']} jobs, {count} records: {len(diverged)} diverged, {unverifiable} records not "
          f"checked; {figures['passes']} passes, {figures['statuses']} status writes, {figures['acts']} acts made "
          f"again in {cpu:.2f} s CPU ({figures['records_per_cpu_second']} records/s)"
          + (f"; {figures['authentic']} records authentic, {not_authentic} not (never acted on)" if keys is not None
             else ""))
    return 1 if diverged else code


def run(args: argparse.Namespace) -> int:
    from kto.cli import UserError
    from kto.commands import history
    from shared.bus.errors import BusError

    key, accept = _replay_selection(args)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    now = dt.datetime.now(dt.UTC)
    since_ms = history.moment(args.since, now, "--since") if args.since else None
    until_ms = history.moment(args.until, now, "--until") if args.until else None
    settings = history.kafka_settings(args)
    try:
        return asyncio.run(asyncio.wait_for(_replay(args, settings, key, accept, since_ms, until_ms), 600))
    except TimeoutError:
        raise UserError(f"the broker at {settings.bootstrap} did not answer in 600s") from None
    except BusError as exc:
        raise UserError(str(exc)) from None

