"""``kto`` run as a user runs it, for the benchmark's tests: ``python -m kto`` from the source tree."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def kto(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``kto ARGS`` to its end; its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "kto", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=timeout, check=False)
