"""shared/core/plans.py: what a pass plans, said the same way for every family."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from shared.core import effects, plans
from shared.core.settings import OperatorSettings


def test_a_plan_is_summed_up_in_one_line_for_kto_history() -> None:
    plan = effects.Effects(
        creates=[{"kind": "Pod", "metadata": {"name": "p-0"}}], restarts=2, delete_job=True,
        deletes=[effects.ChildRef("v1", "Pod", "ns", "p-1", "u", "restart")], error="no room").plan()
    assert plans.summary(plan) == "creates Pod/p-0; deletes Pod/p-1:restart; error no room; restarts counted 2; " \
                                  "delete the job"


@pytest.mark.parametrize(("plan", "line"), [
    pytest.param({}, "status", id="nothing-but-a-status"),
    pytest.param({"steps": ["wait:x", "wait:y"]}, "2 steps", id="steps-only"),
    pytest.param({"creates": [f"Pod/p-{i}" for i in range(400)]}, None, id="long"),
])
def test_a_summary_says_something_and_is_never_longer_than_two_thousand_characters(
        plan: dict[str, Any], line: str | None) -> None:
    summary = plans.summary(plan)
    assert len(summary) <= 2001 and (line is None or summary == line)


def test_settings_come_back_from_a_pass_as_recorded_and_defaults_when_none_were() -> None:
    recorded = dataclasses.asdict(OperatorSettings(cluster_domain="example.org"))
    assert plans.settings_from(OperatorSettings, recorded) == OperatorSettings(cluster_domain="example.org")
    assert plans.settings_from(OperatorSettings, None) == OperatorSettings()
    assert plans.settings_from(OperatorSettings, {**recorded, "a_setting_of_a_later_version": 1}) == \
        OperatorSettings(cluster_domain="example.org")


@pytest.mark.parametrize("raw", ["volcano", ["a"], 3])
def test_settings_that_are_not_an_object_are_unreplayable(raw: Any) -> None:
    with pytest.raises(plans.Unreplayable, match="are not an object"):
        plans.settings_from(OperatorSettings, raw)


def test_a_document_that_does_not_load_is_one_error_per_field_path() -> None:
    class Refused(Exception):
        errors = [("spec.replicas", "not an integer"), ("", "not an object")]

    assert plans.DryRun.unloadable(Refused()).errors == ["spec.replicas: not an integer",
                                                         "<document>: not an object"]
