"""What the console's pages show, as JSON documents.

In: job objects as the API servers return them, why a cluster did not answer,
the jobs page's filters, and one job's audit-log entries
(:class:`shared.bus.reading.Entry`, in log order). Out: plain dicts ready for
``json.dumps`` — the jobs list (rows, the values each filter can take, every
cluster's state) and a job's page (conditions, replica statuses, the other
status fields, the per-pod timeline of ``kto history --timeline``, the
steps of the job's Kueue Workloads, the decisions with their reasons and
clusters, trace links). The entries of a job under MultiKueue are those of
the manager's job and of its copies in the worker clusters
(:func:`kto.commands.history.joined`): one timeline across the clusters. No I/O and no clock: ages are
computed by the page from ``created``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kto.commands import history
from services.watcher import watching
from shared.core import families
from shared.bus import reading, records

KINDS: tuple[str, ...] = tuple(history.KINDS)
"""The job kinds kto serves, as the console names them (an MPIJob of either version is an MPIJob)."""

NO_STATE = ""
"""The state of a job with no condition yet."""


def kind_named(text: str) -> str | None:
    """The kind ``text`` names (any case), or None for one kto does not serve."""
    return next((kind for kind in KINDS if kind.lower() == text.lower()), None)


def trace_link(template: str, trace_id: str) -> str:
    """``template`` with ``{trace_id}`` filled in; "" without a template or a trace id."""
    return template.format(trace_id=trace_id) if template and trace_id else ""


@dataclasses.dataclass(frozen=True)
class Filters:
    """The jobs page's filters; an empty field takes every value."""

    cluster: str = ""
    namespace: str = ""
    kind: str = ""
    state: str = ""
    """A condition type, or ``-`` for jobs with no condition yet."""
    text: str = ""
    """Words that must all appear (any case) in the job's cluster, namespace, kind, name or state."""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        """From the query string of ``/api/jobs`` (``cluster``, ``namespace``, ``kind``, ``state``, ``q``)."""
        return cls(*(query.get(name, "").strip() for name in ("cluster", "namespace", "kind", "state", "q")))

    def accepts(self, row: Mapping[str, str]) -> bool:
        state = row["state"] or "-"
        if any(wanted and wanted != value for wanted, value in (
                (self.cluster, row["cluster"]), (self.namespace, row["namespace"]),
                (self.kind, row["kind"]), (self.state, state))):
            return False
        haystack = " ".join((row["cluster"], row["namespace"], row["kind"], row["name"], state)).lower()
        return all(word in haystack for word in self.text.lower().split())


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def state(job: Mapping[str, Any]) -> str:
    """The job's state as kubectl's STATE column shows it: the type of its last condition."""
    conditions = [c for c in _mapping(job.get("status")).get("conditions") or [] if isinstance(c, dict)]
    return str(conditions[-1].get("type") or NO_STATE) if conditions else NO_STATE


def api_version(job: Mapping[str, Any]) -> str:
    """The version the job was written in: an MPIJob read through v1 may be a v2beta1 one."""
    family = families.REGISTRY.resolve(str(job.get("kind") or ""), job)
    return family.written_version(job) if family is not None else str(job.get("apiVersion") or "")


def row(cluster: str, job: Mapping[str, Any]) -> dict[str, str]:
    """One line of the jobs table."""
    meta = _mapping(job.get("metadata"))
    return {"cluster": cluster, "namespace": str(meta.get("namespace") or ""), "kind": str(job.get("kind") or ""),
            "name": str(meta.get("name") or ""), "apiVersion": api_version(job), "state": state(job),
            "created": str(meta.get("creationTimestamp") or "")}


def listing(contexts: Sequence[str], jobs: Mapping[str, Sequence[Mapping[str, Any]]],
            errors: Mapping[str, str], filters: Filters) -> dict[str, Any]:
    """The jobs page: the rows ``filters`` accept (sorted by cluster, namespace, kind, name), how many
    there are in all, the values each filter can take, and each cluster's state (``error`` says why
    one did not answer; its jobs are then missing, the others' are not)."""
    rows = sorted((row(cluster, job) for cluster in contexts for job in jobs.get(cluster, ())),
                  key=lambda r: (r["cluster"], r["namespace"], r["kind"], r["name"]))
    return {
        "jobs": [r for r in rows if filters.accepts(r)],
        "total": len(rows),
        "filters": dataclasses.asdict(filters),
        "choices": {
            "cluster": list(contexts),
            "namespace": sorted({r["namespace"] for r in rows}),
            "kind": list(KINDS),
            "state": sorted({r["state"] or "-" for r in rows}),
        },
        "clusters": [{"name": c, "error": errors.get(c, ""), "jobs": len(jobs.get(c, ()))} for c in contexts],
    }


def _trace_id(job: Mapping[str, Any], entries: Sequence[reading.Entry]) -> str:
    """The job's trace: the one its ``kto.dev/traceparent`` annotation starts, else that of its first
    record that has one (the watch event that saw it created)."""
    annotations = _mapping(_mapping(job.get("metadata")).get("annotations"))
    parts = str(annotations.get(watching.TRACEPARENT_ANNOTATION) or "").split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and parts[1].strip("0"):
        return parts[1].lower()
    return next((entry.trace_id for entry in entries if entry.trace_id), "")


def _last_seen(kind: str, entries: Sequence[reading.Entry]) -> dict[str, Any]:
    """The job object as the audit log last saw it ({} when it never did)."""
    for entry in reversed(entries):
        record = entry.record
        if isinstance(record, records.Observation) and record.object_kind == kind and record.object:
            return dict(record.object)
    return {}


def _replicas(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per replica type: the replicas asked for (from the spec) and the status's active / succeeded / failed."""
    spec = _mapping(job.get("spec"))
    specs = next((_mapping(v) for k, v in spec.items() if k.endswith("ReplicaSpecs")), {})
    statuses = _mapping(_mapping(job.get("status")).get("replicaStatuses"))
    out = []
    for replica in sorted(set(specs) | set(statuses)):
        counts = _mapping(statuses.get(replica))
        wanted = _mapping(specs.get(replica)).get("replicas")
        out.append({"type": replica, "replicas": wanted if isinstance(wanted, int) else None,
                    **{field: int(counts.get(field) or 0) for field in ("active", "succeeded", "failed")}})
    return out


def _status_fields(job: Mapping[str, Any]) -> dict[str, str]:
    """The status fields besides conditions and replica statuses (start and completion times, an
    et-operator job's phase and workers …), as text."""
    status = _mapping(job.get("status"))
    return {name: ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
            for name, value in status.items()
            if name not in ("conditions", "replicaStatuses") and value not in (None, "", [], {})}


def _decision(entry: reading.Entry, template: str) -> dict[str, Any]:
    record = entry.record
    assert isinstance(record, records.Decision)
    return {
        "time": history.when(entry.timestamp_ms), "cluster": entry.key.split("/", 1)[0],
        "offset": f"{entry.partition}/{entry.offset}",
        "source": f"{record.source}/{record.instance}" if record.instance else record.source,
        "action": record.action,
        "object": " ".join(part for part in (record.child_kind, record.child_name) if part),
        "reason": record.reason, "message": record.message,
        "traceId": entry.trace_id, "traceUrl": trace_link(template, entry.trace_id),
    }


def page(key: records.JobKey, job: Mapping[str, Any] | None, entries: Sequence[reading.Entry], *,
         trace_url: str, cluster_error: str = "", audit_error: str = "") -> dict[str, Any]:
    """A job's page. ``job``: as the cluster has it, None when the cluster has it no more or did not
    answer (``cluster_error``); the page then shows the job as the audit log last saw it.
    ``trace_url``: the link template (``{trace_id}``), "" for none."""
    shown = dict(job) if job is not None else _last_seen(key.kind, entries)
    meta = _mapping(shown.get("metadata"))
    trace_id = _trace_id(shown, entries)
    conditions = [{name: str(c.get(name) or "") for name in (
        "type", "status", "reason", "message", "lastTransitionTime", "lastUpdateTime")}
        for c in _mapping(shown.get("status")).get("conditions") or [] if isinstance(c, dict)]
    return {
        "key": str(key), "cluster": key.cluster, "namespace": key.namespace, "kind": key.kind, "name": key.name,
        "apiVersion": api_version(shown) if shown else "", "state": state(shown),
        "created": str(meta.get("creationTimestamp") or ""),
        "onCluster": job is not None, "clusterError": cluster_error, "auditError": audit_error,
        "conditions": conditions, "replicas": _replicas(shown), "status": _status_fields(shown),
        "timeline": history.timeline(list(entries)),
        "kueue": history.kueue_moments(list(entries)),
        "clusters": sorted({entry.key.split("/", 1)[0] for entry in entries} | {key.cluster}),
        "decisions": [_decision(e, trace_url) for e in entries if isinstance(e.record, records.Decision)],
        "trace": {"id": trace_id, "url": trace_link(trace_url, trace_id)},
        "records": len(entries), "undecodable": sum(1 for e in entries if e.record is None),
    }
