"""Replaying a job's audit trail: every recorded decision made again and compared.

In: the records of ``kto.jobs`` (:class:`shared.bus.reading.Entry`, any number of
jobs, each job's in log order). Out: one :class:`JobReport` per job key — how
many records, passes, status writes and acts were checked, the first divergence
(what was recorded and what the pure core derives now, side by side) and what
could not be checked, with why.

What is checked, per job:

* each ``reconcile_pass`` record: its basis (:mod:`shared.core.basis`) rebuilt from
  the record and the log's observations, the plan decided again with the pure core
  at the recorded clock, and compared with the recorded plan — both as the log holds
  them (:func:`records.redact_detail`, digests read as one: literal values from specs
  never reach the log, so neither side holds them);
* each ``status_written`` record: the status computed again from its basis and
  compared (conditions, replica statuses, finished);
* each act of a reconciler (``child_created``, ``child_create_failed``,
  ``child_deleted``, ``replica_restarted``, ``child_updated``, ``job_deleted_ttl``):
  it must be in the plan of the pass it names (``detail.pass``; an act of a kto that
  named none: the last pass its process recorded for the job). An act whose pass is not
  in the log is not checked, and says why: the log begins after that pass (a broker that
  came back empty, or retention), since a reconciler writes its pass before acting.

No I/O: the caller reads the log (broker or ``kto export`` files).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable
from typing import Any

from shared.bus import reading, records
from shared.core import basis, families, plans

@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where a recorded decision and the one derived again differ."""

    offset: int
    what: str
    """The record and field, e.g. ``reconcile_pass creates``."""
    recorded: Any
    derived: Any


@dataclasses.dataclass
class JobReport:
    key: str
    records: int = 0
    passes: int = 0
    statuses: int = 0
    acts: int = 0
    undecodable: int = 0
    divergence: Divergence | None = None
    """The first divergence (the others usually follow from it)."""
    divergences: int = 0
    unverifiable: list[str] = dataclasses.field(default_factory=list)
    """Records that could not be checked, each with its offset and why."""

    @property
    def ok(self) -> bool:
        return self.divergences == 0

    def dump(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ok"] = self.ok
        return data


@dataclasses.dataclass
class _Job:
    entries: list[Any] = dataclasses.field(default_factory=list)


def _canonical(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, default=str))


def _first_difference(recorded: Any, derived: Any, path: str = "") -> tuple[str, Any, Any] | None:
    if isinstance(recorded, dict) and isinstance(derived, dict):
        for key in sorted(set(recorded) | set(derived), key=str):
            found = _first_difference(recorded.get(key), derived.get(key), f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if recorded != derived:
        return path, recorded, derived
    return None


class Replayer:
    """Collects entries (:meth:`add`), then replays every job (:meth:`reports`)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}

    def add(self, entry: Any) -> None:
        """One :class:`shared.bus.reading.Entry`; entries of a job must come in log order."""
        self._jobs.setdefault(entry.key, _Job()).entries.append(entry)

    def reports(self) -> Iterable[JobReport]:
        for key in sorted(self._jobs):
            yield replay_job(key, self._jobs[key].entries)


def replay_job(key: str, entries: list[Any]) -> JobReport:
    """Replay one job's entries (in log order)."""
    report = JobReport(key)
    versions: dict[basis.Version, dict[str, Any]] = {}
    for entry in entries:
        record = entry.record
        if isinstance(record, records.Observation) and not record.omitted and record.event != "DELETED":
            versions.setdefault(basis.version_of(record.object), record.object)
    try:
        kind = records.JobKey.parse(key).kind
    except records.InvalidJobKey:
        kind = ""
    last_pass: dict[str, dict[str, Any]] = {}
    """Producer instance → the plan of its last pass of this job."""
    planned: dict[str, dict[str, Any]] = {}
    """Pass record id → its plan."""
    for entry in entries:
        report.records += 1
        record = entry.record
        if record is None:
            report.undecodable += 1
            report.unverifiable.append(f"offset {entry.offset}: does not decode ({entry.error})")
            continue
        if not isinstance(record, records.Decision):
            continue
        if record.action == plans.PASS_ACTION:
            report.passes += 1
            plan = record.detail.get("plan")
            derived = _derive(report, entry.offset, record, lambda inputs: _replan(kind, inputs), versions)
            if isinstance(plan, dict):
                last_pass[record.instance] = plan
                planned[record.id] = plan
            if derived is not None:
                _compare(report, entry.offset, f"{plans.PASS_ACTION} plan", plan, derived)
        elif record.action == "status_written" and record.source == "status":
            report.statuses += 1
            recorded = {k: record.detail.get(k) for k in ("conditions", "replicaStatuses", "finished")}
            derived = _derive(report, entry.offset, record, families.REGISTRY.restatus, versions)
            if derived is not None:
                _compare(report, entry.offset, "status_written", recorded, derived)
        elif record.action in plans.ACTS and record.source == "reconciler":
            report.acts += 1
            named = record.detail.get("pass")
            if not isinstance(named, str):  # a kto that named no pass
                _check_act(report, entry.offset, record, last_pass.get(record.instance))
            elif named in planned:
                _check_act(report, entry.offset, record, planned[named])
            else:
                report.unverifiable.append(f"offset {entry.offset}: {_act(record)}: its {plans.PASS_ACTION} "
                                           f"({named}) is not in the log, which begins after it")
    return report


def _replan(kind: str, inputs: basis.Inputs) -> dict[str, Any]:
    """A pass's plan made again. The commands a TrainingJob pass ran are on the log digested
    (:func:`records.redact`) and their outputs cut to a tail: a command is matched by pod,
    container, purpose and shape (:func:`records.same_command`), and a pass that read an
    output the log no longer holds whole cannot be made again."""
    cut = [r for r in inputs.extra.get("executed") or [] if isinstance(r, dict) and records.was_cut(r.get("output"))]
    if cut:
        raise plans.Unreplayable(f"the output of its {cut[0].get('purpose')} command is cut on the log "
                                    f"(a record keeps the last {records.OUTPUT_TAIL} characters)")
    return families.REGISTRY.replan(kind, inputs, same_command=records.same_command)


def _derive(report: JobReport, offset: int, record: records.Decision, derive: Any,
            versions: dict[basis.Version, dict[str, Any]]) -> Any:
    the_basis = record.detail.get("basis")
    if not isinstance(the_basis, dict):
        why = record.detail.get("omitted") or "it carries no basis (written by a kto older than replay)"
        report.unverifiable.append(f"offset {offset}: {record.action}: {why}")
        return None
    try:
        inputs = basis.rebuild(the_basis, versions.get)
        return derive(inputs)
    except basis.Unresolved as exc:
        report.unverifiable.append(f"offset {offset}: {record.action}: {exc}")
    except (ValueError, TypeError, plans.Unreplayable) as exc:
        report.unverifiable.append(f"offset {offset}: {record.action}: cannot be made again: {exc}")
    return None


def _normalised(value: Any) -> Any:
    """``value`` as the log holds it, digests read as one (:func:`records.forget_digests`): the
    recorded side was redacted when written (with a digest key replay does not have), the
    derived side is made from redacted inputs; both go through the same rules."""
    return records.forget_digests(records.redact_detail({"value": _canonical(value)})["value"])


def _compare(report: JobReport, offset: int, what: str, recorded: Any, derived: Any) -> None:
    found = _first_difference(_normalised(recorded), _normalised(derived))
    if found is None:
        return
    report.divergences += 1
    if report.divergence is None:
        path, left, right = found
        report.divergence = Divergence(offset, f"{what} {path}".strip(), left, right)


def _check_act(report: JobReport, offset: int, record: records.Decision, plan: dict[str, Any] | None) -> None:
    field = plans.ACTS[record.action]
    what = _act(record)
    if plan is None:
        _diverge(report, offset, what, "done", f"no {plans.PASS_ACTION} of instance {record.instance} before it")
        return
    if field == "delete_job":
        if not plan.get("delete_job"):
            _diverge(report, offset, what, "the job deleted", "its pass did not delete the job")
        return
    planned = plan.get(field) or []
    name = f"{record.child_kind}/{record.child_name}"
    if not any(item == name or str(item).startswith(name + ":") for item in planned):
        _diverge(report, offset, what, name, f"its pass's {field}: {planned}")


def _act(record: records.Decision) -> str:
    """``child_created Pod/name``, as the report names an act."""
    return f"{record.action} {record.child_kind or ''}/{record.child_name or ''}".rstrip("/")


def _diverge(report: JobReport, offset: int, what: str, recorded: Any, derived: Any) -> None:
    report.divergences += 1
    if report.divergence is None:
        report.divergence = Divergence(offset, what, recorded, derived)


@dataclasses.dataclass(frozen=True)
class LogReplay:
    """:func:`replay_log`'s answer."""

    reports: list[JobReport]
    records: int
    replay_cpu_s: float
    """CPU seconds spent making decisions again (reading and decoding excluded)."""

    @property
    def diverged(self) -> list[JobReport]:
        return [r for r in self.reports if not r.ok]

    @property
    def unverifiable(self) -> int:
        return sum(len(r.unverifiable) for r in self.reports)

    def figures(self) -> dict[str, Any]:
        return {
            "replayed_jobs": len(self.reports), "replayed_records": self.records,
            "replay_divergences": len(self.diverged), "replay_unverifiable": self.unverifiable,
            "replay_records_per_cpu_s": round(self.records / self.replay_cpu_s) if self.replay_cpu_s > 0 else None,
        }


async def replay_log(settings: Any, accept: Any = None) -> LogReplay:
    """Read the whole jobs topic (every key ``accept`` takes) and replay every job."""
    replayer = Replayer()
    count = 0
    async for raw in reading.scan(settings, accept=accept or (lambda key: True)):
        replayer.add(raw.decoded())
        count += 1
    started = time.process_time()
    reports = list(replayer.reports())
    return LogReplay(reports, count, time.process_time() - started)
