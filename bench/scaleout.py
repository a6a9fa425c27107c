"""Scale-out: the pipeline's load on a fresh stack per worker count or per reconciler concurrency, and the ratio.

In: a :class:`Sweep` (the lever and its values, read from the option by :func:`parse`), the
:class:`Shape` every run starts from, and ``measure``: one run of ``kto bench``'s pipeline load
(bench/pipeline.py) on a fresh stack of a given :class:`Shape`, its figures returned. Out:
:func:`run` → the figures of ``kto bench --scale-out`` and ``--concurrency-sweep`` (one dict,
printed as JSON): each run's shape and figures (:data:`KEPT`), its ``ratio_vs_first`` (its
materialised jobs/s over the first run's) and the machine's load average when it ended;
``ratio_last_vs_first``; :func:`table`, the same as lines for a reader.

The two levers:

* ``workers`` (``--scale-out 1,2,4``) — N reconcilers and N status workers, each at the same
  concurrency: the jobs topic's partitions are shared out among N members of each group;
* ``concurrency`` (``--concurrency-sweep 1,4,16``) — the job keys each reconciler settles at
  once, at a fixed number of reconcilers.

A reconciler settles at most ``lane_limit(concurrency)`` keys of one cluster at once (half its
slots, so a cluster that hangs leaves the rest to the others: shared/workers.py), so
``keys_at_once`` — reconcilers × that, per cluster — is what the API server's waiting is spread
over. Materialised jobs/s grows with either lever only while the reconcilers' waiting on the API
server is what limits it; once the CPU (the sim's, the watcher's, the workers' on a shared
machine) or the submitting client does, more slots add nothing, and the ratio says so.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable
from typing import Any

from bench import pipeline
from shared import workers

LEVERS = {"workers": "--scale-out", "concurrency": "--concurrency-sweep"}
"""Lever → the ``kto bench`` option that sweeps it."""

KEPT = (
    "materialized_jobs_per_s", "jobs_per_s", "jobs_completed", "created_to_all_pods_created_ms",
    "pod_phase_to_condition_written_ms", "create_ceiling_jobs_per_s", "throughput_vs_ceiling", "cpu_ms_per_job",
    "cpu_cores_busy", "api_writes_per_job",
)
"""The figures of each run (bench/pipeline.py's and ``kto bench``'s) kept in the sweep's."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """The workers of one run's stack."""

    reconcilers: int
    """``kto reconciler`` processes (consumer group kto-reconciler)."""
    status_workers: int
    """``kto status-service`` processes (consumer group kto-status)."""
    concurrency: int
    """Job keys each reconciler settles at once (its ``--concurrency``)."""

    @property
    def keys_at_once(self) -> int:
        """Job keys of one cluster settled at once by all the reconcilers together."""
        return self.reconcilers * workers.lane_limit(self.concurrency)


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One lever and the values it takes, one fresh stack each, in order."""

    lever: str
    """A key of :data:`LEVERS`."""
    values: tuple[int, ...]
    """Worker counts (``workers``) or concurrencies (``concurrency``), each at least 1."""

    def __post_init__(self) -> None:
        if self.lever not in LEVERS:
            raise pipeline.BenchError(f"no lever {self.lever!r}: one of {', '.join(LEVERS)}")
        if not self.values or min(self.values) < 1:
            raise pipeline.BenchError(f"{self.option} takes counts of at least 1")

    @property
    def option(self) -> str:
        return LEVERS[self.lever]

    def shape(self, value: int, base: Shape) -> Shape:
        """The shape of the run at ``value``: ``base`` with the lever set to it."""
        if self.lever == "workers":
            return dataclasses.replace(base, reconcilers=value, status_workers=value)
        return dataclasses.replace(base, concurrency=value)


def parse(lever: str, text: str) -> Sweep:
    """The sweep an option's value names: counts of at least 1, separated by commas (``1,2,4``);
    BenchError naming the option for anything else."""
    option = LEVERS[lever]
    words = [word.strip() for word in text.split(",")]
    wrong = f"{option} takes counts of at least 1 separated by commas, such as 1,2,4: not {text!r}"
    if not all(word.isdigit() for word in words):
        raise pipeline.BenchError(wrong)
    values = tuple(int(word) for word in words)
    if min(values) < 1:
        raise pipeline.BenchError(wrong)
    return Sweep(lever, values)


async def run(
    sweep: Sweep, base: Shape, measure: Callable[[Shape], Awaitable[dict[str, Any]]],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Measure each of the sweep's shapes in turn (``measure`` starts and stops a fresh stack); the figures."""
    runs: list[dict[str, Any]] = []
    for value in sweep.values:
        shape = sweep.shape(value, base)
        progress(f"{sweep.option} {value}: {shape.reconcilers} reconciler(s) at concurrency {shape.concurrency} "
                 f"({shape.keys_at_once} job keys at once), {shape.status_workers} status worker(s)")
        figures = await measure(shape)
        runs.append({**dataclasses.asdict(shape), "keys_at_once": shape.keys_at_once,
                     **{name: figures.get(name) for name in KEPT},
                     "load_average": [round(load, 2) for load in os.getloadavg()]})
    first = runs[0]["materialized_jobs_per_s"]
    for figures in runs:
        rate = figures["materialized_jobs_per_s"]
        figures["ratio_vs_first"] = round(rate / first, 2) if first and rate else None
    return {"lever": sweep.lever, "option": sweep.option, "values": list(sweep.values), "runs": runs,
            "ratio_last_vs_first": runs[-1]["ratio_vs_first"]}


def table(figures: dict[str, Any]) -> list[str]:
    """The sweep as lines for a reader: one row per run."""
    lines = [
        f"{figures['option']} {','.join(str(v) for v in figures['values'])}: materialised jobs/s, "
        f"last vs first {figures['ratio_last_vs_first']}x",
        f"{'reconcilers':>11} {'status':>6} {'conc.':>5} {'keys':>4} {'jobs/s':>7} {'ratio':>5} "
        f"{'pods p99 s':>10} {'CPU ms/job':>10} {'cores':>5} {'load 1m':>7}",
    ]
    for run_ in figures["runs"]:
        p99 = (run_["created_to_all_pods_created_ms"] or {}).get("p99")
        cpu = sum((run_["cpu_ms_per_job"] or {}).values())
        lines.append(
            f"{run_['reconcilers']:>11} {run_['status_workers']:>6} {run_['concurrency']:>5} "
            f"{run_['keys_at_once']:>4} {_number(run_['materialized_jobs_per_s'], 2):>7} "
            f"{_number(run_['ratio_vs_first'], 2):>5} {_number(p99 / 1000 if p99 is not None else None, 1):>10} "
            f"{cpu:>10.1f} {_number(run_['cpu_cores_busy'], 2):>5} {run_['load_average'][0]:>7.2f}")
    return lines


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
