"""The kubelet API as the API server reaches it: where ``pods/log`` and ``pods/exec`` are proxied to.

In: ``pods/{name}/log`` and ``pods/{name}/exec`` requests, after the API server's own checks (the
pod exists, the container is one of its own, the pod has a node: :func:`exec_container`,
:func:`require_host`); evictions; the admin's node failures. Out: the same calls on a
:class:`KubeletApi` — in the local cluster the node side's in-process kubelet API
(sim/node/kubeletserving.py, ``LocalKubelet``), which this package never imports: the node side
streams the log and runs the exec, as a kubelet does for kube-apiserver. The exec options are
handed over in the kubelet's own query names (:func:`exec_query`), as kube-apiserver forwards them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any, Protocol

from aiohttp import web
from multidict import MultiDict, MultiMapping

from sim import errors, objects

EXEC_STREAMS = (("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty"))
"""kube-apiserver's exec query parameters and the kubelet's names for them (``api.Exec*Param``)."""


class KubeletApi(Protocol):
    """The kubelet API of the nodes: one log stream and one exec entrance, evictions, node failures."""

    def stream_log(
        self, namespace: str, name: str, container: str | None, *, previous: bool, tail: int | None, follow: bool,
    ) -> AsyncGenerator[bytes, None]:
        """The container's log (its last ``tail`` lines): once, or with ``follow`` as it grows until the
        container's run ends, with an empty chunk at each poll; ``ApiError`` before the first chunk when
        the kubelet refuses (``previous`` with no earlier run)."""
        ...

    async def serve_exec(self, request: web.Request, namespace: str, name: str, container: str,
                         query: MultiMapping[str]) -> web.StreamResponse:
        """Run the exec ``query`` (the kubelet's parameter names) in the container, over ``request``'s
        upgraded connection; or the kubelet's plain-text refusal."""
        ...

    async def evict(self, namespace: str, name: str) -> None:
        """Evict the pod as the kubelet does under memory pressure."""
        ...

    async def fail_node(self, name: str) -> None:
        """Take node ``name`` down (404 for a node the kubelet does not run)."""
        ...

    async def recover_node(self, name: str) -> None:
        """Bring node ``name`` back."""
        ...


def exec_query(query: MultiMapping[str]) -> MultiDict[str]:
    """kube-apiserver's exec query as it forwards it to the kubelet: the command, and the streams by the
    kubelet's names."""
    forwarded: MultiDict[str] = MultiDict()
    for argument in query.getall("command", []):
        forwarded.add("command", argument)
    for ours, kubelets in EXEC_STREAMS:
        for value in query.getall(ours, []):
            forwarded.add(kubelets, value)
    return forwarded


def exec_container(pod: Mapping[str, Any], container: str | None) -> str:
    """The container an exec addresses, or kube-apiserver's 400 (``validateContainer``)."""
    spec = pod.get("spec") or {}
    name = objects.metadata(pod).get("name", "")
    containers = [c.get("name", "") for c in spec.get("containers") or []]
    every = [c.get("name", "") for key in ("initContainers", "containers", "ephemeralContainers")
             for c in spec.get(key) or []]
    if not container:
        if len(containers) == 1:
            return str(containers[0])
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        raise errors.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(every)}]")
    if container not in every:
        raise errors.bad_request(f"container {container} is not valid for pod {name}")
    return container


def require_host(pod: Mapping[str, Any]) -> None:
    """kube-apiserver's 400 for an exec into a pod not yet scheduled."""
    if not (pod.get("spec") or {}).get("nodeName"):
        raise errors.bad_request(f"pod {objects.metadata(pod).get('name', '')} does not have a host assigned")
