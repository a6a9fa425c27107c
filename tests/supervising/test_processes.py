"""The process supervisor (supervising/processes.py): real child processes started, stopped, killed
and started again, with what they leave behind."""

from __future__ import annotations

import asyncio
import pathlib
import signal
import sys
import time
from collections.abc import Callable

import pytest

from supervising import processes


def python(tmp_path: pathlib.Path, script: str, **options: object) -> processes.Command:
    """A command running ``script`` in this Python, its output in ``tmp_path/child.log``."""
    return processes.Command((sys.executable, "-c", script), log=tmp_path / "child.log", **options)  # type: ignore[arg-type]


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


PRINT_AND_SLEEP = "import time\nprint('ready', flush=True)\ntime.sleep(60)"

IGNORE_SIGTERM = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                  "print('ready', flush=True)\ntime.sleep(60)")

STRAY = ("import subprocess, sys, time\n"
         "stray = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
         "print('stray', stray.pid, flush=True)\ntime.sleep(60)")


async def test_a_child_writes_to_its_log_and_stops_on_sigterm(tmp_path: pathlib.Path) -> None:
    process = processes.Process("child", python(tmp_path, PRINT_AND_SLEEP))
    process.start()
    await until(lambda: "ready" in process.output())
    assert process.running and process.returncode is None

    assert await process.stop(5.0) is False
    assert process.returncode == -signal.SIGTERM
    assert not process.ended, "stopped, not ended on its own"
    assert await process.stop(5.0) is False, "a second stop does nothing"


async def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path: pathlib.Path) -> None:
    process = processes.Process("stubborn", python(tmp_path, IGNORE_SIGTERM))
    process.start()
    await until(lambda: "ready" in process.output())

    started = time.monotonic()
    assert await process.stop(0.5) is True
    assert 0.5 <= time.monotonic() - started < 5.0
    assert process.returncode == -signal.SIGKILL


async def test_a_stray_in_a_session_of_its_own_is_stopped_with_its_parent(tmp_path: pathlib.Path) -> None:
    process = processes.Process("parent", python(tmp_path, STRAY))
    process.start()
    await until(lambda: "stray" in process.output())
    stray = int(process.output().split()[1])
    process.remember()
    assert process.pids() == {process.pid, stray}

    await process.stop(5.0)
    assert processes.alive({stray}) == set()
    assert process.pids() == set()


async def test_kill_is_a_crash_and_start_runs_the_same_command_again(tmp_path: pathlib.Path) -> None:
    process = processes.Process("crashing", python(tmp_path, STRAY, append=True))
    process.start()
    await until(lambda: "stray" in process.output())
    first, stray = process.pid, int(process.output().split()[1])

    process.kill()
    assert await process.wait(5.0) == -signal.SIGKILL
    assert process.ended, "killed, not stopped"
    await until(lambda: processes.alive({stray}) == set())

    process.start()
    await until(lambda: "stray" in process.output())
    assert process.pid != first and process.running
    assert (tmp_path / "child.log").read_text().count("stray") == 2, "the log was appended to"
    await process.stop(5.0)


async def test_a_running_child_cannot_be_started_twice(tmp_path: pathlib.Path) -> None:
    process = processes.Process("once", python(tmp_path, PRINT_AND_SLEEP))
    process.start()
    try:
        with pytest.raises(processes.ProcessError, match="once is running"):
            process.start()
    finally:
        await process.stop(5.0)


async def test_a_program_that_cannot_be_run_raises_its_os_error(tmp_path: pathlib.Path) -> None:
    process = processes.Process("missing", processes.Command((str(tmp_path / "no-such-program"),)))
    with pytest.raises(FileNotFoundError):
        process.start()
    assert process.pid is None and await process.wait(0.1) is None
    assert await process.stop(1.0) is False


async def test_a_paused_child_is_frozen_and_thawed_and_still_stops(tmp_path: pathlib.Path) -> None:
    process = processes.Process("paused", python(tmp_path, PRINT_AND_SLEEP))
    process.start()
    await until(lambda: "ready" in process.output())
    process.signal(signal.SIGSTOP)
    await until(lambda: pathlib.Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T")
    assert await process.stop(5.0) is False, "SIGCONT comes with SIGTERM, so it ends in time"


async def test_without_a_log_the_output_goes_to_an_unnamed_file(tmp_path: pathlib.Path) -> None:
    process = processes.Process("quiet", processes.Command((sys.executable, "-c", "print('hello')")))
    process.start()
    assert await process.wait(10.0) == 0
    assert process.output() == "hello\n"
    await process.stop(1.0)
    assert process.output() == ""
