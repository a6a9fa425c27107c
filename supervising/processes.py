"""Child processes in process groups of their own: start, stop, kill, restart, wait.

In: a :class:`Command` (argv, environment, working directory, log file, inherited files).
Out: :class:`Process`, one child in a session of its own (Ctrl-C in a terminal reaches its
parent, not it), stdin from /dev/null, stdout and stderr to its log:

- ``start()`` runs it; ``returncode`` and ``wait(timeout)`` tell when it has ended;
- ``stop(timeout)`` sends SIGTERM (and SIGCONT, so a paused child can handle it) to its
  group, waits ``timeout`` seconds, sends SIGKILL to the group; then the same, one by one,
  for the strays: processes seen below it (``remember()``) that left its group (a grandchild
  in a session of its own, such as Tansu under ``kto broker``) or outlived it; last, SIGKILL
  to whatever is left in its group. Safe to call twice;
- ``kill()`` sends SIGKILL to the group and the strays at once, as a crash would, and keeps
  the command, so ``start()`` runs it again; ``restart()`` is ``stop()`` then ``start()``;
- ``signal()`` signals it and every stray (SIGSTOP / SIGCONT freeze and thaw it).

Plus what /proc says of any process: :func:`descendants`, :func:`alive`, :func:`cpu_seconds`,
and :func:`tail`, the last lines of a log.

The children are plain ``subprocess.Popen`` processes waited on by polling, never asyncio
subprocesses: one may be started in one event loop and stopped in another (a test's broker
fixture serves tests running in several loops), and ``kill()`` needs no loop at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from typing import IO

log = logging.getLogger("kto.supervising")

POLL_INTERVAL = 0.02
"""Seconds between two looks at whether a child has ended."""

REAP_TIMEOUT = 1.0
"""Seconds a stop waits, after killing the strays, for their new parent (init) to reap them."""


class ProcessError(Exception):
    """A child cannot be started (already running)."""


@dataclasses.dataclass(frozen=True)
class Command:
    """What to run and where its output goes."""

    argv: tuple[str, ...]
    """The program and its arguments."""

    log: pathlib.Path | None = None
    """The file stdout and stderr go to (its directory is made); None: an unnamed temporary file,
    read with :meth:`Process.output` (never a pipe: nobody reads one while the child runs, and a
    full pipe would block it)."""

    append: bool = False
    """Append to ``log`` (a part started again on its state dir keeps its history); else the log is
    emptied at each start."""

    env: Mapping[str, str] | None = None
    """The child's environment; None: this process's."""

    cwd: pathlib.Path | None = None
    """The child's working directory; None: this process's."""

    pass_fds: tuple[int, ...] = ()
    """Open files the child inherits (a lock it must hold for as long as it lives)."""


def _start_time(pid: int) -> str | None:
    """The kernel start time of ``pid`` (tells a live process from a reused pid), None if gone."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    # fields[0] is the state (3rd field of stat); starttime is the 22nd field.
    if fields and fields[0] == "Z":
        return None
    return fields[19] if len(fields) > 19 else None


def alive(pids: set[int]) -> set[int]:
    """The pids among ``pids`` still running (zombies count as gone)."""
    return {pid for pid in pids if _start_time(pid) is not None}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process so far (0 if it is gone), from /proc."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, their children …), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tail(path: pathlib.Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a log file (of its last 16 KiB; empty if it cannot be read)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def signal_group(pgid: int, signum: signal.Signals) -> None:
    """Signal a process group; one that is gone (or not ours) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def signal_pid(pid: int, signum: signal.Signals) -> None:
    """Signal one process; one that is gone (or not ours) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


class Process:
    """One child in a process group of its own, output to its log (see the module doc)."""

    def __init__(self, name: str, command: Command) -> None:
        self.name = name
        """What log lines call it."""
        self.command = command
        """What ``start()`` runs; replace it between runs to run something else under this name."""
        self._popen: subprocess.Popen[bytes] | None = None
        self._temporary: IO[bytes] | None = None
        self._log_start = 0
        self._known: dict[int, str] = {}
        """pid → start time of every process seen below the child (to stop strays)."""
        self._stopped = True
        """No child, or the last one has been stopped (its group is not signalled again)."""

    @property
    def pid(self) -> int | None:
        """The child's pid (its process group's id too), None before the first start."""
        return self._popen.pid if self._popen is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit status once the child has ended (negative: the signal), else None."""
        return self._popen.poll() if self._popen is not None else None

    @property
    def running(self) -> bool:
        """Started and not ended."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def ended(self) -> bool:
        """Started, then ended without being stopped: on its own or by ``kill()``."""
        return not self._stopped and self.returncode is not None

    def start(self) -> None:
        """Run the command; raises the ``OSError`` of a program that cannot be run, and
        :class:`ProcessError` if the child is running."""
        if self.running:
            raise ProcessError(f"{self.name} is running (pid {self.pid})")
        self._close_temporary()
        command = self.command
        output: IO[bytes]
        if command.log is None:
            output = self._temporary = tempfile.TemporaryFile()
        else:
            command.log.parent.mkdir(parents=True, exist_ok=True)
            output = command.log.open("ab" if command.append else "wb")
        try:
            self._log_start = output.seek(0, os.SEEK_END)
            popen = subprocess.Popen(
                command.argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                env=None if command.env is None else dict(command.env),
                cwd=command.cwd, pass_fds=command.pass_fds, start_new_session=True,
            )
        finally:
            if command.log is not None:
                output.close()  # the child has its own copy
        self._popen, self._known, self._stopped = popen, {}, False
        log.debug("started %s (pid %s): %s", self.name, popen.pid, " ".join(command.argv))

    def output(self) -> str:
        """What the child has written to its log since this start."""
        try:
            if self._temporary is not None:
                self._temporary.seek(self._log_start)
                return self._temporary.read().decode(errors="replace")
            if self.command.log is None:
                return ""
            with self.command.log.open("rb") as handle:
                handle.seek(self._log_start)
                return handle.read().decode(errors="replace")
        except (OSError, ValueError):  # ValueError: the temporary file is closed
            return ""

    def remember(self) -> None:
        """Note the processes below the child now, so a stray one can be stopped later."""
        if not self.running:
            return
        assert self._popen is not None
        for pid in descendants(self._popen.pid):
            started = _start_time(pid)
            if started is not None:
                self._known[pid] = started

    def pids(self) -> set[int]:
        """The child, while it runs, and every process seen below it that is still alive."""
        found = {pid for pid, started in self._known.items() if _start_time(pid) == started}
        if self._popen is not None and self._popen.poll() is None:
            found.add(self._popen.pid)
        return found

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the child and every process seen below it (seen now, too)."""
        self.remember()
        for pid in self.pids():
            signal_pid(pid, signum)

    async def wait(self, timeout: float | None = None) -> int | None:
        """The exit status once the child has ended; None if it still runs after ``timeout``
        seconds (None: no limit) or was never started."""
        if self._popen is None:
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self._popen.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_INTERVAL)
        return code

    def kill(self) -> None:
        """SIGKILL the child's group and every stray at once (a crash). The command is kept:
        ``start()`` runs it again, ``stop()`` still reaps what is left."""
        self.remember()
        if self._popen is not None and self.running:
            signal_group(self._popen.pid, signal.SIGKILL)
        for pid in self.pids():  # what it started in sessions of their own dies with it
            signal_pid(pid, signal.SIGKILL)

    async def stop(self, timeout: float) -> bool:
        """SIGTERM the group, wait up to ``timeout`` seconds, SIGKILL it; then the same for the
        strays, and SIGKILL whatever is left in the group. Safe twice. True if the child had to
        be killed (it did not end within ``timeout`` of SIGTERM)."""
        popen = self._popen
        if popen is None or self._stopped:
            self._close_temporary()
            return False
        self.remember()
        killed = False
        if popen.poll() is None:
            signal_group(popen.pid, signal.SIGTERM)
            signal_group(popen.pid, signal.SIGCONT)  # a paused child must run to handle it
            if await self.wait(timeout) is None:
                log.warning("%s did not stop within %ss; killing it", self.name, timeout)
                signal_group(popen.pid, signal.SIGKILL)
                await self.wait()
                killed = True
        # Anything that outlived it (a grandchild in a session of its own,
        # or a group member that ignored SIGTERM): the same, one by one.
        strays = self.pids()
        for pid in strays:
            signal_pid(pid, signal.SIGTERM)
            signal_pid(pid, signal.SIGCONT)
        deadline = time.monotonic() + timeout
        while strays and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            strays = self.pids()
        for pid in strays:
            log.warning("%s left process %s behind; killing it", self.name, pid)
            signal_pid(pid, signal.SIGKILL)
        signal_group(popen.pid, signal.SIGKILL)  # what it left in its group, seen or not
        self._stopped = True
        # A stray is reparented to init (or a subreaper), which reaps it; wait briefly for that.
        deadline = time.monotonic() + REAP_TIMEOUT
        while self.pids() and time.monotonic() < deadline:
            await asyncio.sleep(POLL_INTERVAL)
        self._close_temporary()
        return killed

    async def restart(self, timeout: float, command: Command | None = None) -> None:
        """``stop(timeout)``, then ``start()`` with ``command`` (default: the same one)."""
        await self.stop(timeout)
        if command is not None:
            self.command = command
        self.start()

    def _close_temporary(self) -> None:
        if self._temporary is not None:
            temporary, self._temporary = self._temporary, None
            temporary.close()
