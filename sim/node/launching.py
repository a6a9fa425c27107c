"""The first program of every process-runtime container (sim/node/processes.py): run as
``python -I -S launching.py PARENT_PID HOSTS_FILE EXECUTABLE ARG0 ARG…`` with the
container's environment, it sets up what a container would have and then becomes the
container's command (``execve``, same pid).

In: the node agent's pid, the pod's hosts file, the resolved executable and the argv.
Out: nothing of its own on success — the command runs with

* this pod's ``/etc/hosts`` (the cluster's service and pod names → 127.0.0.1), in a
  mount namespace of its own, so glibc's resolver in Python and in C++ libraries alike
  (torch's c10d store, gloo) finds ``<job>-master-0`` the way cluster DNS would. As
  root the namespace is a plain mount namespace; otherwise a user namespace maps the
  caller's uid and gid onto themselves first. Mounts are made private before the bind,
  so nothing reaches the machine's own ``/etc/hosts``;
* ``PR_SET_PDEATHSIG`` = SIGKILL, kept across ``execve``: a node agent that is killed
  takes its containers' first processes with it.

When the namespace cannot be made (a kernel without user namespaces for this user,
seccomp), one line on stderr — the pod's log — says so and the command runs with the
machine's ``/etc/hosts``. An ``execve`` that fails (the file vanished since it was
resolved) exits 128 with the error on stderr, as a runtime's StartError.

Standard library only and no imports from kto: it runs isolated (``-I -S``) so the
container's ``PYTHON*`` variables do not affect it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1


def _fail(libc: ctypes.CDLL, what: str) -> OSError:
    errno = ctypes.get_errno()
    return OSError(errno, f"{what}: {os.strerror(errno)}")


def _own_hosts(libc: ctypes.CDLL, hosts: str) -> None:
    """Enter a mount namespace of our own and bind ``hosts`` over /etc/hosts."""
    if os.geteuid() == 0:
        if libc.unshare(CLONE_NEWNS) != 0:
            raise _fail(libc, "unshare")
    else:
        uid, gid = os.geteuid(), os.getegid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            raise _fail(libc, "unshare")
        with open("/proc/self/setgroups", "w") as handle:
            handle.write("deny")
        with open("/proc/self/uid_map", "w") as handle:
            handle.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as handle:
            handle.write(f"{gid} {gid} 1")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise _fail(libc, "making / private")
    if libc.mount(hosts.encode(), b"/etc/hosts", None, MS_BIND, None) != 0:
        raise _fail(libc, "bind-mounting /etc/hosts")


def main(argv: list[str]) -> int:
    parent, hosts, executable, *command = argv
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(parent):
        return 137  # the node agent died before the prctl took hold
    try:
        _own_hosts(libc, hosts)
    except OSError as exc:
        sys.stderr.write(f"kto process runtime: /etc/hosts not replaced ({exc.strerror}): "
                         "the cluster's names do not resolve in this container\n")
        sys.stderr.flush()
    try:
        os.execve(executable, command, os.environ)
    except OSError as exc:
        sys.stderr.write(f"exec: {executable!r}: {exc.strerror}\n")
        return 128
    return 128  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
