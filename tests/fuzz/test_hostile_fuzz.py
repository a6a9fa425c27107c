"""Property: hostile input never raises anything but the documented refusals.

* a job document, spoilt at random, goes through loading (``jobs.LoadError``), validation (a report),
  defaulting, planning (``PlanError``), the reconcile decision and the status computation (with the
  skeleton of a job that does not load, as the status worker does);
* random bytes go through ``records.decode`` (``MalformedRecord``); what decodes is encoded again within
  the record limit and without literal secrets.

``KTO_FUZZ_EXAMPLES=1000 pytest tests/fuzz`` runs a thousand examples of each; every run prints the
refusals counted by kind.
"""

from __future__ import annotations

import collections
import datetime as dt
from typing import Any

import pytest
from hypothesis import given

from shared.api import jobs
from shared.bus import records
from shared.core import defaulting, planning, deciding, statuses, validating
from shared.core.outcomes import Verdict
from shared.core.errors import PlanError
from shared.core.settings import OperatorSettings
from tests.fuzz.strategies import EXAMPLES, FUZZ, RECORD_BYTES, spoilt_jobs

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SETTINGS = OperatorSettings()

outcomes: collections.Counter[str] = collections.Counter()


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    print(f"\nfuzz ({EXAMPLES} examples per test): " + ", ".join(f"{k}={v}" for k, v in sorted(outcomes.items())))


def through_the_core(document: dict[str, Any]) -> str:
    """What kto's core makes of a document; raises only for a bug."""
    try:
        job = jobs.load(document)
    except jobs.LoadError as exc:
        assert str(exc)
        skeleton = jobs.skeleton(document)
        if skeleton is not None:
            verdict = Verdict(f"{skeleton.KIND}FailedValidation", f"failed validation because {exc}")
            outcome = statuses.compute(skeleton, [], NOW, verdict)
            assert outcome.status.conditions and outcome.status.conditions[-1].type == "Failed"
            outcome.status.dump()
        return "job.LoadError"
    decision = deciding.decide(job, [], NOW, SETTINGS)
    report = validating.validate(job)
    if not report.ok:
        assert decision.verdict is not None and decision.verdict.reason.endswith("FailedValidation")
        assert all(error.path or error.detail for error in report.errors)
        statuses.compute(job, [], NOW, decision.verdict).status.dump()
        return "validation.Report"
    defaulted = defaulting.set_defaults(job)
    try:
        planning.plan(defaulted, SETTINGS)
    except PlanError as exc:
        assert exc.field
        return "planning.PlanError"
    statuses.compute(defaulted, [], NOW).status.dump()
    return "planned"


@FUZZ
@given(spoilt_jobs())
def test_a_spoilt_job_is_refused_or_planned_never_crashes(document: dict[str, Any]) -> None:
    outcomes[f"job: {through_the_core(document)}"] += 1


@FUZZ
@given(RECORD_BYTES)
def test_any_bytes_decode_to_a_record_or_a_malformed_record(data: bytes) -> None:
    try:
        record = records.decode(data)
    except records.MalformedRecord as exc:
        assert exc.reason
        outcomes["record: MalformedRecord"] += 1
        return
    again = records.encode(record)
    assert len(again) <= records.MAX_RECORD_BYTES
    records.decode(again)
    outcomes["record: decoded"] += 1


@FUZZ
@given(spoilt_jobs())
def test_any_job_object_is_encoded_within_the_limit_and_without_a_literal_secret(document: dict[str, Any]) -> None:
    record = records.Observation(key="c/ns/PyTorchJob/fuzz", object_kind="PyTorchJob", event="ADDED", object=document)
    data = records.encode(record)
    assert len(data) <= records.MAX_RECORD_BYTES
    decoded = records.decode(data)
    assert isinstance(decoded, records.Observation)
    assert b'"DB_PASSWORD","value":"p"' not in data
    outcomes["encode: stand-in" if decoded.omitted else "encode: whole"] += 1
