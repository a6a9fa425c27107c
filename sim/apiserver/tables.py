"""Server-side printing: objects as ``meta.k8s.io/v1`` Tables, as ``kubectl get`` asks for them.

In: a kind (its printer columns, from the CRD or built in here) and objects. Out: a Table
body with column definitions and one row per object (cells, and the object as
PartialObjectMetadata, whole, or not at all per ``includeObject``).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from sim import objects
from sim.apiserver import resources

Obj = dict[str, Any]

_NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "priority": 0,
                "description": "Name must be unique within a namespace."}
_AGE_COLUMN = {"name": "Age", "type": "string", "format": "", "priority": 0,
               "description": "CreationTimestamp is a timestamp representing the server time when this object was created."}


def human_duration(seconds: float) -> str:
    """Like k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years = hours // (24 * 365)
    if years < 8:
        days = (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{years}y"


def age(timestamp: Any) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.datetime.now(datetime.UTC) - then).total_seconds())


# --- a small JSONPath, enough for printer columns ------------------------------------------------

_TOKEN = re.compile(r"\.([A-Za-z0-9_\-$/]+)|\[([^\]]*)\]|\.\.?")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Values at ``path`` (``.status.conditions[-1:].type``, ``.spec.x[*].y``, ``{.a.b}``)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    current = [obj]
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m or m.end() == pos:
            return []
        pos = m.end()
        field, index = m.group(1), m.group(2)
        nxt: list[Any] = []
        if field is not None:
            for node in current:
                if isinstance(node, dict) and field in node:
                    nxt.append(node[field])
        elif index is not None:
            for node in current:
                nxt.extend(_select(node, index.strip()))
        else:
            continue
        current = nxt
    return current


def _select(node: Any, index: str) -> list[Any]:
    if index.startswith("?(") and index.endswith(")"):
        return _filter(node, index[2:-1])
    if index in ("*", ""):
        if isinstance(node, list):
            return list(node)
        if isinstance(node, dict):
            return list(node.values())
        return []
    if index.startswith(("'", '"')):
        key = index.strip("'\"")
        return [node[key]] if isinstance(node, dict) and key in node else []
    if not isinstance(node, list):
        return []
    try:
        if ":" in index:
            parts = [int(p) if p.strip() else None for p in index.split(":")]
            return node[slice(*parts)]
        i = int(index)
    except ValueError:
        return []
    return [node[i]] if -len(node) <= i < len(node) else []


_FILTER = re.compile(r"^@\.([A-Za-z0-9_.\-]+)\s*(==|!=)\s*(['\"]?)(.*?)\3$")


def _filter(node: Any, expr: str) -> list[Any]:
    items = node if isinstance(node, list) else []
    m = _FILTER.match(expr.strip())
    if not m:
        return []
    field, op, _, value = m.groups()

    def get(item: Any) -> Any:
        for part in field.split("."):
            item = item.get(part) if isinstance(item, dict) else None
        return item

    if op == "==":
        return [i for i in items if str(get(i)) == value]
    return [i for i in items if str(get(i)) != value]


# --- built-in printers -----------------------------------------------------------------------------

def _column(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": kind, "format": fmt, "description": name, "priority": priority}


def _pod_status(pod: Obj) -> str:
    """The STATUS column of ``kubectl get pods``, as the upstream printer derives it."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for index, c in enumerate(init_statuses):
        state = c.get("state") or {}
        if (t := state.get("terminated")) is not None and t.get("exitCode") == 0:
            continue
        if t is not None:
            reason = "Init:" + (t.get("reason") or f"ExitCode:{t.get('exitCode')}")
        elif (w := state.get("waiting")) and w.get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + w["reason"]
        else:
            reason = f"Init:{index}/{len((pod.get('spec') or {}).get('initContainers') or init_statuses)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
    has_running = False
    for c in reversed(status.get("containerStatuses") or [] if not initializing or initialized else []):
        state = c.get("state") or {}
        if (w := state.get("waiting")) and w.get("reason"):
            reason = w["reason"]
        elif (t := state.get("terminated")) and t.get("reason"):
            reason = t["reason"]
        elif t := state.get("terminated"):
            reason = f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"
        elif c.get("ready") and state.get("running"):
            has_running = True
    if reason == "Completed" and has_running:
        reason = "Running"
    if objects.metadata(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_cells(pod: Obj) -> list[Any]:
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(containers)}",
        _pod_status(pod),
        restarts,
        age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        (pod.get("spec") or {}).get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _node_cells(node: Obj) -> list[Any]:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.partition("/")[2] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return [node["metadata"]["name"], state, ",".join(roles) or "<none>",
            age(node["metadata"].get("creationTimestamp")), info.get("kubeletVersion", "")]


def _service_cells(svc: Obj) -> list[Any]:
    spec = svc.get("spec") or {}
    ports = ",".join(
        f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [] if isinstance(p, dict)
    )
    return [svc["metadata"]["name"], spec.get("type", "ClusterIP"), spec.get("clusterIP") or "<none>",
            "<none>", ports or "<none>", age(svc["metadata"].get("creationTimestamp"))]


def _namespace_cells(ns: Obj) -> list[Any]:
    return [ns["metadata"]["name"], (ns.get("status") or {}).get("phase", ""),
            age(ns["metadata"].get("creationTimestamp"))]


_JOB_STATES = (("Complete", "Complete"), ("Failed", "Failed"), ("", "Terminating"), ("Suspended", "Suspended"),
               ("FailureTarget", "FailureTarget"), ("SuccessCriteriaMet", "SuccessCriteriaMet"))
"""kubectl's Job STATUS: the first of these conditions that is True ("" stands for being deleted)."""


def _job_cells(job: Obj) -> list[Any]:
    status = job.get("status") or {}
    spec = job.get("spec") or {}
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    deleting = bool(job["metadata"].get("deletionTimestamp"))
    state = next((shown for kind, shown in _JOB_STATES if (kind in true if kind else deleting)), "Running")
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    duration = ""
    started = status.get("startTime")
    if started:
        end = status.get("completionTime") or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        seconds = (datetime.datetime.fromisoformat(end.replace("Z", "+00:00"))
                   - datetime.datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds()
        duration = human_duration(seconds)
    return [job["metadata"]["name"], state, completions, duration, age(job["metadata"].get("creationTimestamp"))]


def _event_cells(ev: Obj) -> list[Any]:
    involved = ev.get("involvedObject") or ev.get("regarding") or {}
    kind = (involved.get("kind") or "").lower()
    return [age(ev.get("lastTimestamp") or ev.get("eventTime") or ev["metadata"].get("creationTimestamp")),
            ev.get("type", ""), ev.get("reason", ""), f"{kind}/{involved.get('name', '')}",
            ev.get("message") or ev.get("note") or ""]


def _webhook_configuration_cells(configuration: Obj) -> list[Any]:
    return [configuration["metadata"]["name"], len(configuration.get("webhooks") or []),
            age(configuration["metadata"].get("creationTimestamp"))]


_WEBHOOK_CONFIGURATION = ([_NAME_COLUMN, _column("Webhooks", "integer"), _AGE_COLUMN], _webhook_configuration_cells)

_PRINTERS: dict[str, tuple[list[Obj], Callable[[Obj], list[Any]]]] = {
    "pods": ([_NAME_COLUMN, _column("Ready"), _column("Status"), _column("Restarts", "integer"),
              _AGE_COLUMN, _column("IP", priority=1), _column("Node", priority=1),
              _column("Nominated Node", priority=1), _column("Readiness Gates", priority=1)], _pod_cells),
    "nodes": ([_NAME_COLUMN, _column("Status"), _column("Roles"), _AGE_COLUMN, _column("Version")], _node_cells),
    "services": ([_NAME_COLUMN, _column("Type"), _column("Cluster-IP"), _column("External-IP"),
                  _column("Port(s)"), _AGE_COLUMN], _service_cells),
    "namespaces": ([_NAME_COLUMN, _column("Status"), _AGE_COLUMN], _namespace_cells),
    "jobs.batch": ([_NAME_COLUMN, _column("Status"), _column("Completions"), _column("Duration"), _AGE_COLUMN],
                   _job_cells),
    "events": ([_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"), _column("Message")],
               _event_cells),
    "validatingwebhookconfigurations.admissionregistration.k8s.io": _WEBHOOK_CONFIGURATION,
    "mutatingwebhookconfigurations.admissionregistration.k8s.io": _WEBHOOK_CONFIGURATION,
}


def _custom(res: resources.Resource) -> tuple[list[Obj], Callable[[Obj], list[Any]]]:
    columns = [_NAME_COLUMN]
    specs = []
    for col in res.printer_columns:
        kind = col.get("type", "string")
        columns.append({
            "name": col.get("name", ""),
            "type": "string" if kind == "date" else kind,
            "format": col.get("format", "") or ("" if kind != "date" else ""),
            "description": col.get("description", ""),
            "priority": int(col.get("priority", 0)),
        })
        specs.append((col.get("jsonPath", ""), kind))
    if not res.printer_columns:
        columns.append(_AGE_COLUMN)

    def cells(obj: Obj) -> list[Any]:
        out: list[Any] = [obj["metadata"]["name"]]
        for path, kind in specs:
            values = jsonpath(obj, path)
            value = values[0] if values else None
            if value is None:
                out.append(None)
            elif kind == "date":
                out.append(age(value))
            elif isinstance(value, (dict, list)):
                out.append(json.dumps(value, separators=(",", ":")))
            else:
                out.append(value)
        if not specs:
            out.append(age(obj["metadata"].get("creationTimestamp")))
        return out

    return columns, cells


def printer(res: resources.Resource) -> tuple[list[Obj], Callable[[Obj], list[Any]]]:
    if res.key in _PRINTERS:
        return _PRINTERS[res.key]
    if res.printer_columns:
        return _custom(res)
    return [_NAME_COLUMN, _AGE_COLUMN], lambda o: [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"))]


def row_object(obj: Obj, include: str, api_version: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table(
    res: resources.Resource,
    objects: Iterable[Obj],
    *,
    include: str = "Metadata",
    resource_version: str | None = None,
    continue_token: str | None = None,
    remaining: int | None = None,
    with_columns: bool = True,
) -> Obj:
    columns, cells = printer(res)
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(obj)}
        ro = row_object(obj, include, res.api_version())
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    meta: Obj = {}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if continue_token:
        meta["continue"] = continue_token
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    body: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                 "columnDefinitions": columns if with_columns else None, "rows": rows}
    return body
