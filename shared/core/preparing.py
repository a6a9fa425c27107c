"""The status worker's pipeline for a kubeflow.org/v1 job: load, validate, default,
then compute its status.

In: a job document as the status worker's view holds it, its pods, the clock.
Out: the job :class:`Prepared` (loaded, judged by validation, defaulted: cached by
the worker per resourceVersion) and its status and Events (:func:`job_status`).
No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from shared.api import jobs, objects
from shared.core import defaulting, outcomes, owners, reports, statuses, validating

Manifest = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A kubeflow.org/v1 job loaded, validated and defaulted for computing its status."""

    version: str
    source: Manifest
    """The job dict it was made from."""
    job: jobs.Job
    invalid: tuple[str, str] | None
    """(reason, message) when the job fails validation."""
    defaulted: jobs.Job | None


def prepare(document: Manifest) -> Prepared | None:
    """``document`` prepared; None when it cannot even be read as a job of a known kind."""
    version = objects.resource_version_of(document)
    try:
        job = jobs.load(document)
    except jobs.LoadError as exc:
        # A wrongly typed field: the job is Failed, with the field paths, from its
        # kind, metadata and status alone (the same message as the reconciler's verdict).
        skeleton = jobs.skeleton(document)
        if skeleton is None:
            return None
        failed = (f"{skeleton.KIND}FailedValidation", f"{skeleton.KIND} {skeleton.name} failed validation because {exc}")
        return Prepared(version, document, skeleton, failed, None)
    report = validating.validate(job)
    # A job of another controller is not ours to judge (only the reconciler's
    # verdict on an update that handed it over counts, see statuses.compute).
    invalid = None if report.ok or statuses.is_managed_externally(job) else (
        f"{job.KIND}FailedValidation", f"{job.KIND} {job.name} failed validation because {reports.describe(report)}",
    )
    return Prepared(version, document, job, invalid, None if invalid else defaulting.set_defaults(job))


def job_status(prepared: Prepared, children: Sequence[Manifest], now: Any, *,
               unconfirmed: bool) -> tuple[jobs.Job, outcomes.Outcome]:
    """The status of a kubeflow.org/v1 job: its validation first, then the failure verdict
    the reconciler recorded on it (unless ``unconfirmed``: the API server has not shown it),
    then its pods."""
    job = prepared.job
    recorded = None if unconfirmed else outcomes.recorded_verdict(job)
    verdict = outcomes.Verdict(*prepared.invalid, "validation") if prepared.invalid else recorded
    if verdict is not None and verdict.kind == "validation":
        return job, statuses.compute(job, [], now, verdict)
    pods = [p for p in children if p.get("kind", "Pod") == "Pod"]
    defaulted = prepared.defaulted or defaulting.set_defaults(job)
    owned = [p for p in pods if owners.claims(job, p)]
    return job, statuses.compute(defaulted, owned, now, verdict)


def status_of(document: Manifest, children: Sequence[Manifest], now: Any, *, unconfirmed: bool,
              prepared: Prepared | None = None) -> tuple[jobs.Job, outcomes.Outcome] | None:
    """The status of ``document`` read as a kubeflow.org/v1 job (``prepared``: a cached
    :func:`prepare` of it); None when it cannot be read as one."""
    prepared = prepared or prepare(document)
    if prepared is None:
        return None
    return job_status(prepared, children, now, unconfirmed=unconfirmed)

