"""The worker commands reject bad flags in one line, before touching Kafka or a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def kto(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kto", *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["status-service", "--write-interval", "-1"], "--write-interval"),
        (["reconciler", "--create-concurrency", "0"], "--create-concurrency"),
        (["reconciler", "--concurrency", "0"], "--concurrency"),
        (["reconciler", "--check-after", "-5"], "--check-after"),
        (["reconciler", "--exec-timeout", "0"], "--exec-timeout 0.0: must be a number of seconds > 0"),
        (["reconciler", "--exec-timeout", "nan"], "--exec-timeout nan: must be a number of seconds > 0"),
        (["reconciler", "--release-after", "0"], "--release-after"),
        (["status-service", "--release-after", "nan"], "--release-after"),
        (["status-service", "--kubeconfig", "/nonexistent/kubeconfig"], "/nonexistent/kubeconfig"),
        (["reconciler", "--concurrency", "many"], "argument --concurrency: invalid int value: 'many'"),
        (["status-service", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["watcher"], "the following arguments are required: --cluster"),
    ],
)
def test_a_bad_worker_flag_is_named_in_one_line(args: list[str], named: str) -> None:
    result = kto(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in result.stderr, lines


@pytest.mark.parametrize("command", ["reconciler", "status-service"])
@pytest.mark.parametrize(("content", "why"), [
    pytest.param("clusters: [unclosed\n", "cannot read the kubeconfig", id="not-yaml"),
    pytest.param("just words\n", "not a YAML mapping", id="not-a-mapping"),
    pytest.param(b"\xff\xfe", "cannot read the kubeconfig", id="not-text"),
])
def test_a_kubeconfig_a_worker_cannot_use_is_named_in_one_line(
    command: str, content: str | bytes, why: str, tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if isinstance(content, bytes):
        kubeconfig.write_bytes(content)
    else:
        kubeconfig.write_text(content)
    result = kto(command, "--kubeconfig", str(kubeconfig))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and str(kubeconfig) in lines[0], lines
    assert "--kubeconfig names a kubeconfig whose contexts are the clusters" in lines[0]


def test_a_bad_kafka_setting_is_named_by_its_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kto", "reconciler"], capture_output=True, text=True, cwd=ROOT, timeout=60,
        check=False, env={"PATH": "", "KTO_KAFKA_FETCH_MAX_WAIT_MS": "soon"},
    )
    assert result.returncode == 2, result.stderr
    assert "KTO_KAFKA_FETCH_MAX_WAIT_MS" in result.stderr and "Traceback" not in result.stderr
