"""Served namespaces: ``KTO_NAMESPACES`` (and the watcher's ``--namespace``) as a comma-separated
list, a bad value refused in one line naming the variable, and the refusal of a job key outside."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.watcher.settings import WatcherSettings
from shared import namespaces

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("text", "served"), [
    pytest.param(None, (), id="unset-is-every-namespace"),
    pytest.param("", (), id="empty-is-every-namespace"),
    pytest.param("team-a", ("team-a",), id="one"),
    pytest.param("team-a, team-b,team-a", ("team-a", "team-b"), id="a-list-spaces-trimmed-each-once"),
])
def test_a_comma_separated_list_of_namespace_names(text: str | None, served: tuple[str, ...]) -> None:
    assert namespaces.parse(text) == served


@pytest.mark.parametrize(("text", "named"), [
    pytest.param("Team_A", "'Team_A'", id="not-a-dns-label"),
    pytest.param("a,,b", "an empty entry", id="an-empty-entry"),
    pytest.param("a" * 64, "'aaaa", id="longer-than-63"),
    pytest.param("-a", "'-a'", id="starts-with-a-dash"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_the_entry(text: str, named: str) -> None:
    with pytest.raises(namespaces.NamespacesError) as caught:
        namespaces.parse(text)
    message = str(caught.value)
    assert message.startswith("KTO_NAMESPACES: ") and named in message and "\n" not in message


@pytest.mark.parametrize(("served", "namespace", "refused"), [
    pytest.param((), "anything", False, id="every-namespace-served"),
    pytest.param(("a", "b"), "b", False, id="listed"),
    pytest.param(("a", "b"), "c", True, id="not-listed"),
])
def test_a_job_key_outside_the_served_namespaces_is_refused_with_the_reason(
    served: tuple[str, ...], namespace: str, refused: bool,
) -> None:
    reason = namespaces.refusal(served, namespace)
    assert (reason is not None) == refused
    if reason is not None:
        assert reason == f"namespace {namespace!r} is not served (KTO_NAMESPACES: a,b)"


def test_the_watcher_watches_each_namespace_of_its_list() -> None:
    assert WatcherSettings(cluster="c", namespace="a,b").namespaces == ("a", "b")
    assert WatcherSettings(cluster="c").namespaces == ()


def kto(*args: str, value: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kto", *args], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=False, env={**os.environ, "KTO_NAMESPACES": value})


@pytest.mark.parametrize(("args", "named"), [
    pytest.param(["reconciler"], "KTO_NAMESPACES: 'Team_A'", id="reconciler"),
    pytest.param(["status-service"], "KTO_NAMESPACES: 'Team_A'", id="status-service"),
    pytest.param(["watcher", "--cluster", "c"], "KTO_NAMESPACES: 'Team_A'", id="watcher-from-the-variable"),
    pytest.param(["watcher", "--cluster", "c", "--namespace", "ok,Not Ok"], "--namespace: 'Not Ok'",
                 id="watcher-from-its-flag"),
])
def test_each_service_refuses_a_bad_value_in_one_line_before_starting(args: list[str], named: str) -> None:
    done = kto(*args, value="Team_A")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and named in lines[0], done.stderr
