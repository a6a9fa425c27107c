"""Expectations (shared/core/expectations.py): the children a worker deleted count as going
away until their DELETED comes or grace ends, per incarnation, on a clock passed in."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.core import expectations

WALL = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
POD = ("Pod", "j-worker-0")


def pod(uid: str | None, rv: int = 1, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "j-worker-0", "namespace": "ns", "resourceVersion": str(rv), **meta}
    if uid is not None:
        metadata["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "status": {"phase": "Failed"}}


def fresh() -> expectations.Expectations:
    return expectations.Expectations(grace=300.0, confirm_after=5.0)


def test_a_deleted_child_is_seen_going_away_with_a_deletion_timestamp() -> None:
    expected = fresh()
    expected.deleted(POD, "second", at=100.0)
    [child], going = expected.seen_as([(POD, pod("second"))], now=101.0, wall=WALL)
    assert child["metadata"]["deletionTimestamp"] == "2024-01-02T03:04:05Z"
    assert going == {POD}


def test_a_late_deleted_of_a_previous_incarnation_keeps_the_current_one_going_away() -> None:
    expected = fresh()
    expected.deleted(POD, "second", at=100.0)
    assert not expected.observed_deleted(POD, pod("first", 10))
    assert expected.going(POD, pod("second", 20), now=101.0)
    assert expected.observed_deleted(POD, pod("second", 21))
    assert not expected.going(POD, pod("second", 21), now=101.0)


@pytest.mark.parametrize(("deleted_uid", "observed_uid", "going"), [
    pytest.param("a", "a", True, id="same-incarnation"),
    pytest.param("a", "b", False, id="a-new-incarnation"),
    pytest.param(None, "b", True, id="deleted-without-uid"),
    pytest.param("a", None, True, id="observed-without-uid"),
])
def test_which_incarnation_is_going_away(deleted_uid: str | None, observed_uid: str | None, going: bool) -> None:
    expected = fresh()
    expected.deleted(POD, deleted_uid, at=0.0)
    assert expected.going(POD, pod(observed_uid), now=1.0) is going


def test_a_child_stops_going_away_after_grace_and_when_created_again() -> None:
    expected = fresh()
    expected.deleted(POD, "a", at=0.0)
    assert not expected.going(POD, pod("a"), now=300.0)
    expected.created(POD)
    assert not expected.going(POD, pod("a"), now=1.0)


def test_a_child_being_deleted_already_keeps_its_own_timestamp_and_is_not_marked() -> None:
    expected = fresh()
    expected.deleted(POD, "a", at=0.0)
    [child], going = expected.seen_as([(POD, pod("a", deletionTimestamp="2020-01-01T00:00:00Z"))], 1.0, WALL)
    assert child["metadata"]["deletionTimestamp"] == "2020-01-01T00:00:00Z"
    assert going == set()


def test_an_overdue_delete_is_dropped_and_sends_the_worker_to_the_api_server() -> None:
    expected = fresh()
    expected.deleted(POD, "a", at=0.0)
    assert not expected.overdue(now=4.9)
    assert expected.overdue(now=5.0)
    assert not expected.overdue(now=6.0)
    assert not expected.going(POD, pod("a"), now=6.0)


@pytest.mark.parametrize(("requeue_after", "now", "next_look"), [
    pytest.param(None, 1.0, 4.0, id="confirm-the-delete"),
    pytest.param(2.0, 1.0, 2.0, id="requeue-sooner"),
    pytest.param(60.0, 1.0, 4.0, id="confirm-sooner"),
    pytest.param(None, 9.0, 0.0, id="confirm-now"),
])
def test_when_to_look_again(requeue_after: float | None, now: float, next_look: float) -> None:
    expected = fresh()
    expected.deleted(POD, "a", at=0.0)
    assert expected.next_look(now, requeue_after) == next_look


def test_with_no_delete_pending_the_requeue_stands() -> None:
    assert fresh().next_look(1.0, 7.0) == 7.0
    assert fresh().next_look(1.0, None) is None
