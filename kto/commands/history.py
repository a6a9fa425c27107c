"""``kto history``: a job's audit trail from ``kto.jobs`` — every observation and decision.

In: a job chosen as kubectl chooses it (``-n NS pytorchjob/NAME`` or
``pytorchjob NAME``, ``--cluster``), or every job of a namespace or cluster
(``--all``), optionally in a time window (``--since``, ``--until``); the broker
from ``KTO_KAFKA_*`` or ``--bootstrap``. Out: the records in log order — offset,
time, source, what happened, trace id — as a table, JSON or YAML; ``--timeline``
adds one row per pod (created, scheduled, running, restarts, finished);
a job under Kueue also gets its Workloads' steps (queued, admitted by a ClusterQueue with its
flavours, dispatched to a worker cluster by MultiKueue, evicted, preempted, re-admitted, finished),
and with ``--cluster`` the records of the job's MultiKueue copies in the worker clusters (the jobs
of its name whose ``kueue.x-k8s.io/prebuilt-workload-name`` is its Workload), each line with its key,
so its cluster (without ``--cluster`` every cluster's job of that name is read, as always);
``--follow`` keeps reading. Only the job's partition is read for one job, and
``--since`` seeks by timestamp. A record that does not decode is shown with its
offset and why; a job with no record says so in one line.

Records are written by whoever can write the topic, so the text output never
hands their bytes to the terminal: every control character (C0 with newline
and tab, DEL, C1 with ESC's 8-bit twin CSI) in a printed field is escaped
(``printable``), as are the Unicode line separators and bidi controls. JSON
output is escaped by ``json.dumps`` (ASCII only), YAML by ``yaml.safe_dump``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import pathlib
import re
import sys
from typing import Any

from shared.kube import resources

HELP = "Print a job's history (observations and decisions) from the kto.jobs topic."

_EPILOG = """\
examples:
  kto history -n team-a pytorchjob/mnist
  kto history mpijob pi --timeline
  kto history --all -n team-a --since 1h -o json
  kto history -n team-a trainingjob/elastic-training --follow
  kto history -n team-a pytorchjob/mnist --verify      # which records are authentic
The broker is KTO_KAFKA_BOOTSTRAP (what `kto up` printed as bootstrap=...) unless
--bootstrap is given.
"""

KINDS = {kind: (kind.lower(), rt.plural) for kind, rt in resources.JOB_TYPES.items()}
"""Job kind → the names kubectl accepts for it (besides the kind itself, any case)."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(text: str) -> str:
    """``text`` as one inert line for a terminal: C0 controls, DEL, C1 controls, U+2028/9 and
    the bidi controls written as escapes (``\\n``, ``\\t``, ``\\r``, ``\\x1b``, ``\\x9b``,
    ``\\u202e``); everything else as it is."""
    return _UNPRINTABLE.sub(_escape, text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_selection(parser, "every job of the namespace (with -n) or cluster")
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    parser.add_argument("--timeline", action="store_true", help="also one row per pod: created, scheduled, running, restarts, finished")
    parser.add_argument("--follow", "-f", action="store_true", help="keep reading new records (Ctrl-C stops)")
    add_keys(parser)
    parser.add_argument("--verify", action="store_true",
                        help="say of every record whether it is authentic (an AUTH column, a count on stderr; "
                             "exit code 3 when any is not); needs the signing keys")


def add_keys(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", default=None, metavar="PATH[,PATH]",
                        help="the signing keyring (default: KTO_SIGNING_KEYS, else .kto/keys.json when it exists); "
                             "with it, records that are not authentic are shown as REJECTED")


def keyring(args: argparse.Namespace, required: bool, command: str = "history") -> Any:
    """The keyring of ``--keys``, ``KTO_SIGNING_KEYS`` or ``kto up``'s ``.kto/keys.json``; None when there is
    none and none is ``required``."""
    from kto.cli import UserError
    from shared.bus import signing

    paths = args.keys or os.environ.get(signing.ENV, "").strip()
    if not paths and pathlib.Path(".kto/keys.json").exists():
        paths = ".kto/keys.json"
    if not paths:
        if required:
            raise UserError(f"kto {command} --verify needs the signing keys: --keys PATH or {signing.ENV} "
                            f"(kto up keeps its own in .kto/keys.json)")
        return None
    try:
        return signing.Keyring.from_env({signing.ENV: paths})
    except signing.KeyringError as exc:
        raise UserError(str(exc)) from None


def add_selection(parser: argparse.ArgumentParser, all_help: str) -> None:
    """The options choosing jobs and where their records are read (``kto history``, ``kto replay``)."""
    parser.add_argument("job", nargs="*", metavar="KIND/NAME",
                        help="the job: KIND/NAME or KIND NAME (pytorchjob, mpijob, trainingjob ...)")
    parser.add_argument("-n", "--namespace", default=None, help="the job's namespace (default: default)")
    parser.add_argument("--cluster", default=None, help="the cluster (kubeconfig context) of the job key; any when unset")
    parser.add_argument("--all", action="store_true", help=all_help)
    parser.add_argument("--since", default=None, help="only records written since: a duration (30s, 5m, 2h, 1d) or an ISO time")
    parser.add_argument("--until", default=None, help="only records written until this ISO time")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap address (default: KTO_KAFKA_BOOTSTRAP)")
    parser.add_argument("--from", dest="from_dir", type=pathlib.Path, default=None, metavar="DIR",
                        help="read the JSON Lines files `kto export` wrote instead of the broker")


def _kind(text: str) -> str:
    from kto.cli import UserError

    lowered = text.lower().split(".")[0]
    for kind, names in KINDS.items():
        if lowered == kind.lower() or lowered in names:
            return kind
    raise UserError(f"{text!r} is not a job kind kto serves ({', '.join(KINDS)})")


def moment(text: str, now: dt.datetime, option: str) -> int:
    """Milliseconds since the epoch of ``--since`` / ``--until``."""
    from kto.cli import UserError

    match = _DURATION.match(text)
    if match is not None:
        seconds = float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return int((now - dt.timedelta(seconds=seconds)).timestamp() * 1000)
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{option} {text!r}: neither a duration (30s, 5m, 2h, 1d) nor an ISO time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def selection(args: argparse.Namespace) -> tuple[str | None, Any]:
    """(the full job key when known, a predicate over record keys)."""
    from kto.cli import UserError

    namespace = args.namespace or "default"
    if args.all:
        if args.job:
            raise UserError("--all takes no KIND/NAME")
        if args.namespace is None and args.cluster is None:
            raise UserError("--all needs -n NAMESPACE or --cluster (or both)")

        def accept_all(key: str) -> bool:
            parts = key.split("/")
            return len(parts) == 4 and (args.cluster is None or parts[0] == args.cluster) and (
                args.namespace is None or parts[1] == args.namespace)
        return None, accept_all
    words = [part for word in args.job for part in word.split("/") if part]
    if len(words) != 2:
        raise UserError("name the job as KIND/NAME or KIND NAME (or use --all)")
    kind, name = _kind(words[0]), words[1]
    suffix = f"/{namespace}/{kind}/{name}"
    if args.cluster is not None:
        key = f"{args.cluster}{suffix}"
        return key, lambda k: k == key
    return None, lambda k: k.endswith(suffix) and k.count("/") == 3


def when(ms: int) -> str:
    """A broker timestamp (ms since the epoch) as ISO UTC to the millisecond: ``2026-11-24T06:17:16.354Z``."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _what(entry: Any) -> tuple[str, str, str]:
    """(source, event, detail) of one entry, for the table."""
    from shared.api import objects
    from shared.bus import records

    record = entry.record
    if record is None:
        return "-", "UNDECODABLE", entry.error[:200]
    source = f"{record.source}/{record.instance}" if record.instance else record.source
    if isinstance(record, records.Observation):
        obj = record.object if isinstance(record.object, dict) else {}
        meta = objects.meta(obj)
        status: dict[str, Any] = obj["status"] if isinstance(obj.get("status"), dict) else {}
        detail = f"{record.object_kind} {meta.get('name', '')}"
        phase = status.get("phase")
        conditions = [c.get("type") for c in status.get("conditions") or [] if isinstance(c, dict)
                      and c.get("status") == "True"] if record.object_kind in (*KINDS, "Workload") else []
        if phase:
            detail += f" phase={phase}"
        if conditions:
            detail += f" conditions={','.join(str(c) for c in conditions)}"
        if isinstance(status.get("clusterName"), str):  # a MultiKueue manager's Workload: where it went
            detail += f" clusterName={status['clusterName']}"
        if meta.get("deletionTimestamp"):
            detail += " deleting"
        return source, record.event, detail
    assert isinstance(record, records.Decision)
    child = f"{record.child_kind} {record.child_name}" if record.child_kind or record.child_name else ""
    detail = " ".join(part for part in (child, record.reason, record.message) if part)
    return source, record.action, detail[:160]


def _cluster(key: str) -> str:
    return key.split("/", 1)[0]


def _workload_names(entries: list[Any], kind: str) -> tuple[set[str], set[str]]:
    """(the Workloads observed among ``entries``, the prebuilt Workloads the job's copies name)."""
    from shared.api import kueue, objects
    from shared.bus import records

    observed: set[str] = set()
    prebuilt: set[str] = set()
    for entry in entries:
        record = entry.record
        if not isinstance(record, records.Observation):
            continue
        if record.object_kind == kueue.WORKLOAD_KIND:
            observed.add(objects.name_of(record.object))
        elif record.object_kind == kind:
            name = objects.labels_of(record.object).get(kueue.PREBUILT_WORKLOAD_LABEL)
            if name:
                prebuilt.add(name)
    return observed, prebuilt


def joined(entries: list[Any], key: str) -> list[Any]:
    """Of the entries of one job's name (``namespace/kind/name``) on every cluster: those of ``key`` and of
    its copies MultiKueue made in worker clusters (a copy is the job of that name whose
    ``kueue.x-k8s.io/prebuilt-workload-name`` label names a Workload seen under ``key``), in the order
    given. A job of the same name in another cluster that is no copy of this one is left out."""
    by_key: dict[str, list[Any]] = {}
    for entry in entries:
        by_key.setdefault(entry.key, []).append(entry)
    kind = key.split("/")[2] if key.count("/") == 3 else ""
    ours, _ = _workload_names(by_key.get(key, []), kind)
    keep = {key} | {other for other, found in by_key.items()
                    if other != key and _workload_names(found, kind)[1] & ours}
    return [entry for entry in entries if entry.key in keep]


def kueue_moments(entries: list[Any]) -> list[dict[str, str]]:
    """The Kueue steps of the Workloads among ``entries`` (one job's, on one cluster or its MultiKueue
    copies on several; in log order): queued, admitted, dispatched, evicted, re-admitted, finished …
    each with its time and cluster (:func:`shared.api.kueue.moments`). Shared with ``kto console``."""
    import dataclasses

    from shared.api import kueue
    from shared.bus import records

    seen = [kueue.Seen(when(entry.timestamp_ms), _cluster(entry.key), entry.record.event, entry.record.object)
            for entry in entries if isinstance(entry.record, records.Observation)
            and entry.record.object_kind == kueue.WORKLOAD_KIND and isinstance(entry.record.object, dict)]
    return [dataclasses.asdict(moment) for moment in kueue.moments(seen)]


def authenticity(entry: Any) -> str:
    """What the AUTH column says of an entry: the key that signed it, or why it is not authentic."""
    verdict = entry.verdict
    if verdict is None:
        return ""
    return f"signed {verdict.key_id}" if verdict.authentic else f"NOT AUTHENTIC: {verdict.reason}"


def _dict(entry: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"partition": entry.partition, "offset": entry.offset, "time": when(entry.timestamp_ms),
                           "key": entry.key, "trace_id": entry.trace_id}
    if entry.verdict is not None:
        out["authentic"] = entry.verdict.authentic
        out["signed_by"] = entry.verdict.key_id
        if not entry.verdict.authentic:
            out["rejected"] = entry.verdict.reason
    if entry.record is None:
        out["error"] = entry.error
    else:
        out["record"] = entry.record.model_dump(mode="json", by_alias=True)
    return out


def timeline(entries: list[Any]) -> list[dict[str, Any]]:
    """One row per pod seen in ``entries`` (a job's, in log order): its cluster, first observed, scheduled
    (nodeName), Running, restarts, end and last phase. Shared by ``--timeline`` and ``kto console``."""
    from shared.api import objects
    from shared.bus import records

    pods: dict[str, dict[str, Any]] = {}
    for entry in entries:
        record = entry.record
        if not isinstance(record, records.Observation) or record.object_kind != "Pod":
            continue
        obj = record.object if isinstance(record.object, dict) else {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        name = f"{objects.name_of(obj)} ({(objects.uid_of(obj) or '')[:8]})"
        stamp = when(entry.timestamp_ms)
        row = pods.setdefault(name, {"pod": name, "cluster": _cluster(entry.key), "created": stamp, "scheduled": "",
                                     "running": "", "restarts": 0, "finished": "", "phase": ""})
        if spec.get("nodeName") and not row["scheduled"]:
            row["scheduled"] = stamp
        phase = status.get("phase") or ""
        if phase == "Running" and not row["running"]:
            row["running"] = stamp
        restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []
                       if isinstance(c, dict))
        row["restarts"] = max(row["restarts"], restarts)
        if phase in ("Succeeded", "Failed") and not row["finished"]:
            row["finished"] = stamp
        if record.event == "DELETED" and not row["finished"]:
            row["finished"] = f"{stamp} (deleted)"
        row["phase"] = "Deleted" if record.event == "DELETED" else (phase or row["phase"])
    return list(pods.values())


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def _row(entry: Any, with_key: bool, verify: bool = False) -> list[str]:
    source, event, detail = _what(entry)
    if entry.verdict is not None and not entry.verdict.authentic:
        event = f"REJECTED {event}"  # never acted on by a worker: dead-lettered with this reason
    row = [f"{entry.partition}/{entry.offset}", when(entry.timestamp_ms), source, event, detail,
           entry.trace_id[:16]] + ([authenticity(entry)] if verify else [])
    return [printable(cell) for cell in ([entry.key, *row] if with_key else row)]


async def _collect(args: argparse.Namespace, settings: Any, key: str | None, accept: Any,
                   since_ms: int | None, until_ms: int | None) -> int:
    from shared.bus import reading

    with_key = args.all or key is None and args.cluster is None
    verify = bool(getattr(args, "verify", False))
    header = (["KEY"] if with_key else []) + ["OFFSET", "TIME", "SOURCE", "EVENT", "DETAIL", "TRACE"] + (
        ["AUTH"] if verify else [])
    keys = keyring(args, verify)
    entries: list[Any] = []

    def stream_of(accept: Any, key: str | None) -> Any:
        return (archived(args.from_dir, accept, since_ms, until_ms, keys=keys) if args.from_dir is not None else
                _decoded(reading.scan(settings, accept=accept, key=key, since_ms=since_ms, until_ms=until_ms,
                                      follow=args.follow), keys))

    stream = stream_of(accept, key)
    if args.follow:
        if args.output == "table":
            print("   ".join(header), flush=True)
        async for entry in stream:
            if args.output == "table":
                print("   ".join(_row(entry, with_key, verify)), flush=True)
            else:
                print(json.dumps(_dict(entry)), flush=True)
        return 0
    async for entry in stream:
        entries.append(entry)
    if key is not None and _workload_names(entries, key.split("/")[2])[0]:
        # Under Kueue: MultiKueue's copies of the job in worker clusters have its name, on other keys.
        suffix = key.split("/", 1)[1]
        entries = joined([entry async for entry in stream_of(
            lambda k: k.count("/") == 3 and k.split("/", 1)[1] == suffix, None)], key)
        if not with_key and len({entry.key for entry in entries}) > 1:
            with_key = True
            header.insert(0, "KEY")
    entries.sort(key=lambda e: (e.timestamp_ms, e.partition, e.offset) if with_key else (e.offset,))
    if not entries:
        what = "records" if args.all else f"records of {'/'.join(args.job)} (namespace {args.namespace or 'default'})"
        where = args.from_dir if args.from_dir is not None else settings.jobs_topic
        print(f"kto history: no {what} in {where}" + (" in that time window" if since_ms or until_ms else ""),
              file=sys.stderr)
        return 1
    rejected = sum(1 for e in entries if e.verdict is not None and not e.verdict.authentic)
    if verify:
        print(f"kto history: {len(entries) - rejected} of {len(entries)} records authentic, {rejected} not",
              file=sys.stderr)
    code = 3 if verify and rejected else 0
    moments = kueue_moments(entries) if not args.all else []
    if args.output == "table":
        print(_table([_row(e, with_key, verify) for e in entries], header))
        if moments:
            print()
            columns = ["time", "cluster", "workload", "event", "detail"]
            print(_table([[printable(str(m[c])) for c in columns] for m in moments],
                         [f"KUEUE {c.upper()}" if c == "time" else c.upper() for c in columns]))
        if args.timeline:
            pods = timeline(entries)
            print()
            columns = ["pod", "created", "scheduled", "running", "restarts", "finished", "phase"] + (
                ["cluster"] if len({_cluster(e.key) for e in entries}) > 1 else [])
            print(_table([[printable(str(p[c])) for c in columns] for p in pods], [c.upper() for c in columns])
                  if pods else "(no pod observed)")
        return code
    document: dict[str, Any] = {"records": [_dict(e) for e in entries]}
    if moments:
        document["kueue"] = moments
    if args.timeline:
        document["timeline"] = timeline(entries)
    if args.output == "json":
        print(json.dumps(document, indent=2))
    else:
        import yaml

        print(yaml.safe_dump(document, sort_keys=False), end="")
    return code


async def _decoded(raw_entries: Any, keys: Any = None) -> Any:
    async for raw in raw_entries:
        yield raw.decoded(keys)


async def archived(directory: pathlib.Path, accept: Any, since_ms: int | None,
                   until_ms: int | None, command: str = "history", keys: Any = None) -> Any:
    """The entries of ``kto export``'s files; a line that is not an exported record is
    reported with its file and line number and skipped."""
    from kto.cli import UserError
    from shared.bus import reading

    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise UserError(f"--from {directory}: no .jsonl files (written by kto export)")
    for path in files:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    row = json.loads(line)
                    raw = reading.RawEntry(int(row["partition"]), int(row["offset"]), int(row["timestamp_ms"]),
                                           str(row["key"]), str(row["value"]).encode(), str(row.get("trace_id", "")),
                                           reading.signature_from_json(row.get("signature")))
                except (ValueError, KeyError, TypeError) as exc:
                    print(f"kto {command}: {path}:{number}: not an exported record ({printable(str(exc))}); skipped",
                          file=sys.stderr)
                    continue
                if not accept(raw.key) or since_ms is not None and raw.timestamp_ms < since_ms or \
                        until_ms is not None and raw.timestamp_ms > until_ms:
                    continue
                yield raw.decoded(keys)


def kafka_settings(args: argparse.Namespace) -> Any:
    """The broker's settings: ``KTO_KAFKA_*``, with ``--bootstrap`` when given."""
    from kto.cli import UserError
    from shared.bus.settings import KafkaSettings, SettingsError

    try:
        if args.bootstrap:
            return KafkaSettings.from_env({**os.environ, "KTO_KAFKA_BOOTSTRAP": args.bootstrap})
        return KafkaSettings.from_env()
    except SettingsError as exc:
        raise UserError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from kto.cli import UserError
    from shared.bus.errors import BusError

    key, accept = selection(args)
    # The Kafka client's own complaints (a refused connection, retried) are not the user's
    # business: what went wrong is said once, below.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    now = dt.datetime.now(dt.UTC)
    since_ms = moment(args.since, now, "--since") if args.since else None
    until_ms = moment(args.until, now, "--until") if args.until else None
    settings = kafka_settings(args)
    try:
        return asyncio.run(asyncio.wait_for(_collect(args, settings, key, accept, since_ms, until_ms),
                                            None if args.follow else 120))
    except TimeoutError:
        raise UserError(f"the broker at {settings.bootstrap} did not answer in 120s") from None
    except BusError as exc:
        raise UserError(str(exc)) from None
