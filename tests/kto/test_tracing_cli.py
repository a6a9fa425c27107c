"""The service commands name a tracing variable they cannot use in one line, before touching
Kafka or a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["watcher", "--cluster", "c"], ["reconciler"], ["status-service"]])
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"),
        ("OTEL_TRACES_EXPORTER", "zipkin"),
        ("KTO_TRACES", "file:/nonexistent/dir/spans.jsonl"),
    ],
)
def test_a_bad_tracing_variable_is_named_in_one_line(command: list[str], variable: str, value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kto", *command], capture_output=True, text=True, cwd=ROOT, timeout=60,
        check=False, env={"PATH": "", variable: value},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{variable}=" in lines[0] and "Traceback" not in result.stderr, lines
