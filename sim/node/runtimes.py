"""How a node runs its pods' containers: the one protocol of the kubelet's two runtimes.

In: a pod's run (sim/node/kubelet.py's ``Run``: the pod, its stage and phase, its log lines), handed
over by the kubelet at each step of the pod's life. Out: the containers started, exited and stopped,
their log and their statuses; the pod's end told back to the kubelet, which writes every status.

Two implementations, both in sim/node/kubelet.py: ``SimulatedRuntime``, the scripted lifecycle (a
duration, an exit code and fail-times from the pod's ``sim.kto.dev/`` annotations, no process), and
``ProcessRuntime``, each container a local process (sim/node/processes.py). The kubelet picks one
when it takes a pod up — the process runtime on a node labelled for it, for a pod it can run — and
after that asks only this protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sim.node import kubelet


class Runtime(Protocol):
    """The steps of a pod's life that depend on how its containers run."""

    def begin(self, run: kubelet.Run, clock: str) -> None:
        """Take up a pod bound here (or found Running when the kubelet started): its containers start
        after the startup delay, or the pod fails at once (an invalid annotation, processes lost)."""
        ...

    def start_containers(self, run: kubelet.Run) -> None:
        """Start the pod's containers; its init containers are done."""
        ...

    def ready(self, run: kubelet.Run) -> bool:
        """True while the containers of a running pod all run (its Ready condition)."""
        ...

    def container_statuses(self, run: kubelet.Run) -> list[dict[str, Any]]:
        """The pod's ``status.containerStatuses``."""
        ...

    def read_log(self, run: kubelet.Run, container: str | None, previous: bool, offset: int) -> bytes:
        """The container's log from byte ``offset``; with ``previous``, the run's before the latest."""
        ...

    def exited(self, run: kubelet.Run, container: str | None) -> bool:
        """True when the container's run whose log is read has ended (a follow of the log ends there)."""
        ...

    def end(self, run: kubelet.Run, code: int, exit_reason: str, exit_message: str | None, clock: str) -> None:
        """The pod ends (the kubelet sets its terminal status): what still runs ends with it."""
        ...

    def delete(self, run: kubelet.Run, grace: float) -> None:
        """The pod is being deleted: stop its containers within ``grace`` seconds, then terminate it."""
        ...

    def discard(self, run: kubelet.Run) -> None:
        """The pod is gone from the API: drop what the runtime keeps of it."""
        ...

    async def stop(self) -> None:
        """The kubelet stops: end every container still running."""
        ...
