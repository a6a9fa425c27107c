"""What a job's status comes to, the same shape for every job family.

In: a job's status and Events as a family computed them, or a failure verdict the
reconciler reached. Out: the :class:`Outcome` the status worker writes (whether it
changes the stored status: :func:`differs`; its ``status_written`` detail:
:func:`status_detail`), the :class:`Verdict` and its record on the job itself
(:data:`FAILURE_ANNOTATION`), and :class:`Declined`, a family's answer for a
document of its kind it does not read as its own job. Pure: no I/O, the clock is
an argument.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
from typing import Any

from shared.api import common, jobs
from shared.core import conditions
from shared.core.events import Event


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A failure the reconciler decided (backoff limit, deadline, validation)."""

    reason: str
    message: str
    kind: str = ""
    """``backoff``, ``deadline`` or ``validation`` (kto's own, not on the wire upstream)."""


FAILURE_ANNOTATION = "kto.dev/failure"
"""The failure verdict the reconciler reached, recorded on the job itself before
anything else is done about it (kto's own annotation; the conditions stay upstream's).
Both workers take a verdict only from here, as the API server holds it: a record
on the topic can be forged, the job cannot be written without the right to."""

VERDICT_KINDS = frozenset({"backoff", "deadline", "validation"})


def failure_annotation(verdict: Verdict, now: dt.datetime) -> str:
    """The :data:`FAILURE_ANNOTATION` value recording ``verdict`` (compact JSON)."""
    return json.dumps(
        {"reason": verdict.reason, "message": verdict.message, "kind": verdict.kind,
         "time": common.format_time(now)},
        separators=(",", ":"),
    )


def recorded_verdict(job: jobs.Job) -> Verdict | None:
    """The verdict recorded on ``job`` (:data:`FAILURE_ANNOTATION`), or None when
    there is none or it is not one the reconciler writes: only upstream's
    reasons for the job's kind (``<Kind>Failed``, ``<Kind>FailedValidation``)
    with a message and a known kind count."""
    raw = (job.metadata.annotations or {}).get(FAILURE_ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    reason, message, kind = value.get("reason"), value.get("message"), value.get("kind")
    expected = f"{job.KIND}FailedValidation" if kind == "validation" else f"{job.KIND}Failed"
    if kind not in VERDICT_KINDS or reason != expected or not isinstance(message, str) or not message:
        return None
    return Verdict(reason, message, kind)


@dataclasses.dataclass
class Outcome:
    """A job's new status and the Events its transitions call for."""

    status: common.JobStatus
    events: list[Event]

    @property
    def finished(self) -> bool:
        return conditions.is_finished(self.status)


def differs(old: common.JobStatus | None, new: common.JobStatus) -> bool:
    """Whether writing ``new`` would change the stored status (the write is skipped otherwise)."""
    return (old.dump() if old is not None else {}) != new.dump()


def status_detail(outcome: Outcome) -> dict[str, Any]:
    """The ``status_written`` record's detail: what was written, without its times."""
    return {
        "conditions": [[c.type, c.status] for c in outcome.status.conditions or []],
        "replicaStatuses": {rt: rs.dump() for rt, rs in (outcome.status.replica_statuses or {}).items()},
        "finished": conditions.is_finished(outcome.status),
    }


class Declined(enum.Enum):
    """A family's status hook's answer for a document of its kind it does not read as
    its own job, where None would say that no family reads it."""

    ANOTHER_FAMILY = "another-family"
    """Not its own: the registry asks the kind's other families (an MPIJob that does not
    load as v2beta1 is read as a kubeflow.org/v1 job, whose loader names what is wrong)."""


class WrittenByReconciler:
    """The status hooks of a family whose status the reconciler writes with its children, in
    the pass that decides them (et-operator's TrainingJob, JobSet): nothing is prepared, and the
    status service computes nothing."""

    def prepare(self, document: dict[str, Any]) -> None:
        return None

    def status(self, document: dict[str, Any], children: Any, now: dt.datetime, *, unconfirmed: bool,
               prepared: None) -> tuple[Any, Outcome] | None:
        """None: the reconciler writes the status."""
        return None

