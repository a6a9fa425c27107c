"""``kto demo``: one PyTorchJob through the whole pipeline, start to finish.

In: ``examples/pytorch-demo.yaml`` (a PyTorchJob, Master 1 + Worker 2, each
pod simulated to run ~4 s). Out, on stdout: progress lines while the stack
starts and while the job and its pods change phase; then the job's history
read back from the Kafka topic (one line per record, in log order); then the
latencies of the pipeline computed from the records' timestamps. The stack
(broker, one simulated cluster, a watcher, two reconcilers, one status
worker) is stopped at the end. Exit 0 when the job Succeeded, 1 when it did
not within ``--timeout`` seconds (the last known state and the log directory
are printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib

from kto import serving
from typing import Any

HELP = "Run one PyTorchJob through broker, simulated cluster, watcher, reconcilers and status worker."

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pytorch-demo.yaml"
"""The job the demo submits."""

TERMINAL = ("Succeeded", "Failed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    serving.add_backend_arguments(parser)
    parser.add_argument("--state-dir", type=pathlib.Path, default=pathlib.Path(".kto/demo"),
                        help="kubeconfig and logs of the demo's stack (default .kto/demo)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds the job may take to succeed (default 60)")
    parser.add_argument("--job", type=pathlib.Path, default=EXAMPLE,
                        help=f"the job manifest to run (default {EXAMPLE.name})")


@dataclasses.dataclass
class Snapshot:
    """What the demo last saw of the job and its pods."""

    job_state: str = "(not seen yet)"
    pods: dict[str, str] = dataclasses.field(default_factory=dict)
    """pod name → phase."""

    def describe(self) -> str:
        pods = ", ".join(f"{name}={phase}" for name, phase in sorted(self.pods.items())) or "no pods"
        return f"job {self.job_state}; {pods}"


def _job_state(job: dict[str, Any]) -> str:
    """The type of the job's last condition that is True ('' for none)."""
    true = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return str(true[-1].get("type", "")) if true else ""


def run(args: argparse.Namespace) -> int:
    import asyncio

    from kto import stack
    from kto.cli import UserError

    try:
        import yaml

        manifest = yaml.safe_load(args.job.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {args.job}: {exc.strerror or exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("metadata"), dict):
        raise UserError(f"{args.job}: not a Kubernetes object")
    settings = stack.StackSettings(state_dir=args.state_dir, clusters=1, reconcilers=2, status_workers=1,
                                   partitions=4, control_plane=args.control_plane, broker=args.broker)
    try:
        return asyncio.run(_demo(settings, manifest, args.timeout))
    except stack.StackError as exc:
        raise UserError(str(exc)) from None


async def _demo(settings: Any, manifest: dict[str, Any], timeout: float) -> int:
    import time

    from kto import stack
    from shared.kube import resources

    begin = time.monotonic()
    print("starting: broker, 1 simulated cluster (kto-1), 1 watcher, 2 reconcilers, 1 status worker …",
          flush=True)
    async with stack.Stack(settings) as running:
        print(f"stack ready in {time.monotonic() - begin:.1f}s  (kubeconfig {running.kubeconfig}, "
              f"logs {running.log_dir}/)", flush=True)
        rt = resources.for_manifest(manifest)
        namespace = str(manifest["metadata"].get("namespace") or "default")
        name = str(manifest["metadata"]["name"])
        key = f"{running.contexts[0]}/{namespace}/{rt.kind}/{name}"
        async with await running.client() as client:
            await client.create(rt, namespace, manifest)
            print(f"submitted {rt.kind} {namespace}/{name}  (job key {key})", flush=True)
            snapshot = await _follow(client, rt, namespace, name, timeout)
        if snapshot.job_state != "Succeeded":
            what = "failed" if snapshot.job_state == "Failed" else f"did not succeed within {timeout:g}s"
            print(f"\nerror: {rt.kind} {name} {what}.\n  last known state: {snapshot.describe()}\n"
                  f"  logs: {running.log_dir}/", flush=True)
            for ended in running.exits():
                print(f"  {ended.name} exited with code {ended.code}; see {ended.log}", flush=True)
            return 1
        history = await _history(running.kafka, key)
        print(f"\nhistory of {key} on topic {running.kafka.jobs_topic} ({len(history)} records, log order):")
        for line in _history_lines(history):
            print(line)
        print("\nlatencies (from record timestamps):")
        for line in _latency_lines(history, rt.kind):
            print(line)
        print("\nstopping the stack …", flush=True)
    print(f"done in {time.monotonic() - begin:.1f}s", flush=True)
    return 0


async def _follow(client: Any, rt: Any, namespace: str, name: str, timeout: float) -> Snapshot:
    """Poll the job and its pods (10 per second), print each change, until the job ends or time runs out."""
    import asyncio
    import time

    from shared.kube import clients, resources

    snapshot = Snapshot()
    start = time.monotonic()
    deadline = start + timeout
    selector = f"training.kubeflow.org/job-name={name}"
    while time.monotonic() < deadline:
        try:
            job = await client.get(rt, namespace, name)
            pods, _ = await client.list(resources.PODS, namespace, label_selector=selector)
        except clients.ApiError as exc:
            if not exc.retriable and not exc.not_found:
                raise
            await asyncio.sleep(0.1)
            continue
        stamp = f"  +{time.monotonic() - start:5.2f}s"
        state = _job_state(job) or "(no condition yet)"
        if state != snapshot.job_state:
            print(f"{stamp}  {rt.kind} {name}: {state}", flush=True)
            snapshot.job_state = state
        for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
            pod_name = str(pod["metadata"]["name"])
            status = pod.get("status") or {}
            phase = str(status.get("phase") or "Pending")
            if snapshot.pods.get(pod_name) != phase:
                node = (pod.get("spec") or {}).get("nodeName")
                where = f" on {node}" if node and phase != "Pending" else ""
                print(f"{stamp}  Pod {pod_name}: {phase}{where}", flush=True)
                snapshot.pods[pod_name] = phase
        if snapshot.job_state in TERMINAL:
            return snapshot
        await asyncio.sleep(0.1)
    return snapshot


def _succeeded_at(record: Any, kind: str) -> bool:
    """Whether a record shows the job Succeeded (a status write or an observation of the job)."""
    from shared.bus import records

    if isinstance(record, records.Decision):
        if record.action == "job_succeeded":
            return True
        if record.action == "status_written":
            return ["Succeeded", "True"] in (record.detail.get("conditions") or [])
        return False
    return record.object_kind == kind and _job_state(record.object) == "Succeeded"


async def _history(kafka: Any, key: str) -> list[Any]:
    """The job's records, read again (for at most ~5 s) until the Succeeded status write is among them.

    The status worker publishes its ``status_written`` decision just after the
    write the demo saw through the API, so the first read may be a moment early.
    """
    import asyncio
    import time

    from shared.bus import reading, records

    deadline = time.monotonic() + 5.0
    while True:
        history = await reading.read_history(kafka, key)
        written = any(isinstance(r, records.Decision) and r.action == "status_written"
                      and ["Succeeded", "True"] in (r.detail.get("conditions") or []) for r in history)
        if written or time.monotonic() > deadline:
            return history
        await asyncio.sleep(0.2)


def _history_lines(history: list[Any]) -> list[str]:
    from shared.api import objects
    from shared.bus import records

    if not history:
        return ["  (no records)"]
    first = history[0].observed_at
    lines = []
    for record in history:
        at = f"  {record.observed_at:%H:%M:%S.%f}"[:-3] + f"  +{(record.observed_at - first).total_seconds():6.3f}s"
        if isinstance(record, records.Observation):
            meta = objects.meta(record.object)
            phase = (record.object.get("status") or {}).get("phase")
            state = phase if record.object_kind == "Pod" else _job_state(record.object)
            target = f"{record.object_kind}/{meta.get('name', '?')}"
            tail = f"rv={record.resource_version or meta.get('resourceVersion', '')}" + (f" {state}" if state else "")
            lines.append(f"{at}  observation  {record.event:<16} {target:<36} {tail}")
        else:
            target = f"{record.child_kind}/{record.child_name}" if record.child_kind else ""
            why = record.reason or record.message
            if record.action == "status_written":
                why = " ".join(t for t, s in record.detail.get("conditions") or [] if s == "True") or why
            lines.append(f"{at}  decision     {record.action:<16} {target:<36} {why}")
    return lines


def _latency_lines(history: list[Any], kind: str) -> list[str]:
    """created → all pods created → all pods running → succeeded, from record timestamps."""
    from shared.api import objects
    from shared.bus import records

    created: datetime.datetime | None = None
    pods_created: datetime.datetime | None = None
    all_running: datetime.datetime | None = None
    succeeded: datetime.datetime | None = None
    expected: set[str] = set()
    phases: dict[str, str] = {}
    for record in history:
        if isinstance(record, records.Observation):
            if record.object_kind == kind and created is None and record.event == "ADDED":
                created = record.observed_at
            if record.object_kind == "Pod" and record.event != "DELETED":
                phases[objects.name_of(record.object)] = objects.phase_of(record.object)
                if (all_running is None and expected and expected <= phases.keys()
                        and all(phases[p] == "Running" for p in expected)):
                    all_running = record.observed_at
        elif record.action == "child_created" and record.child_kind == "Pod":
            pods_created = record.observed_at
            expected.add(str(record.child_name))
        if succeeded is None and _succeeded_at(record, kind):
            succeeded = record.observed_at
    marks = [("job created (ADDED observation)", created), ("all pods created (last child_created)", pods_created),
             ("all pods Running (first observation)", all_running), ("job Succeeded (first record showing it)", succeeded)]
    lines = []
    previous: datetime.datetime | None = None
    for label, at in marks:
        if at is None:
            lines.append(f"  {label:<40} not in the history")
            continue
        since_created = f"+{(at - created).total_seconds() * 1000:8.0f} ms" if created else ""
        step = f"(step {(at - previous).total_seconds() * 1000:.0f} ms)" if previous else ""
        lines.append(f"  {label:<40} {since_created}  {step}")
        previous = at
    return lines
