"""Condition bookkeeping follows upstream's setCondition (spec §7.1, case 57)."""

from __future__ import annotations

import datetime as dt

from shared.api import common
from shared.core import conditions

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
T1 = T0 + dt.timedelta(seconds=10)


def types(status: common.JobStatus) -> list[tuple[str, str]]:
    return [(c.type, c.status) for c in status.conditions or []]


def test_running_and_restarting_replace_each_other_and_failed_flips_running() -> None:
    status = common.JobStatus()
    conditions.set_condition(status, "Created", "True", "TFJobCreated", "created", T0)
    conditions.set_condition(status, "Running", "True", "TFJobRunning", "running", T0)
    assert types(status) == [("Created", "True"), ("Running", "True")]
    conditions.set_condition(status, "Restarting", "True", "TFJobRestarting", "restarting", T0)
    assert types(status) == [("Created", "True"), ("Restarting", "True")]
    conditions.set_condition(status, "Running", "True", "TFJobRunning", "running", T0)
    assert types(status) == [("Created", "True"), ("Running", "True")]
    conditions.set_condition(status, "Failed", "True", "TFJobFailed", "failed", T1)
    assert types(status) == [("Created", "True"), ("Running", "False"), ("Failed", "True")]
    running = conditions.find(status, "Running")
    assert running is not None and running.last_transition_time == T0


def test_failed_is_terminal() -> None:
    status = common.JobStatus()
    conditions.set_condition(status, "Failed", "True", "TFJobFailed", "failed", T0)
    assert not conditions.set_condition(status, "Running", "True", "TFJobRunning", "running", T1)
    assert types(status) == [("Failed", "True")]


def test_same_reason_is_a_no_op_and_keeps_the_message() -> None:
    status = common.JobStatus()
    conditions.set_condition(status, "Running", "True", "R", "first", T0)
    assert not conditions.set_condition(status, "Running", "True", "R", "second", T1)
    running = conditions.find(status, "Running")
    assert running is not None and running.message == "first"


def test_a_new_reason_with_the_same_status_keeps_the_transition_time() -> None:
    status = common.JobStatus()
    conditions.set_condition(status, "Running", "True", "A", "a", T0)
    assert conditions.set_condition(status, "Running", "True", "B", "b", T1)
    running = conditions.find(status, "Running")
    assert running is not None
    assert (running.reason, running.last_transition_time, running.last_update_time) == ("B", T0, T1)
