"""The simulated nodes.

In: `SimSettings` (node count, per-node cpu / memory / GPUs).
Out: Node objects (plain JSON dicts, as the API server stores them) named
`sim-node-<i>`, Ready, with capacity = allocatable and InternalIP
`10.0.<i>.1`. Pods on node `<i>` get IPs in `10.<i+1>.x.y` (see kubelet).
"""

from __future__ import annotations

from typing import Any

from sim import settings as sim_settings

NODE_PREFIX = "sim-node-"
"""Nodes are `sim-node-0`, `sim-node-1`, …"""

MAX_PODS = 110
"""Pods per node, the kubelet default."""

RUNTIME_LABEL = "sim.kto.dev/runtime"
"""How the node runs its pods: ``simulated`` or ``process`` (sim/node/processes.py); from ``SimSettings.runtime``."""

GPU = "nvidia.com/gpu"
"""The extended resource the simulated GPUs are offered as."""


def node_name(index: int) -> str:
    """The name of node number `index`."""
    return f"{NODE_PREFIX}{index}"


def node_ip(index: int) -> str:
    """The InternalIP of node number `index`."""
    return f"10.0.{index % 256}.{index // 256 + 1}"


def make_node(settings: sim_settings.SimSettings, index: int, now: str) -> dict[str, Any]:
    """One Ready node with the settings' capacity; `now` stamps its conditions."""
    name = node_name(index)
    capacity = {
        "cpu": settings.cpu_per_node,
        "memory": settings.memory_per_node,
        "pods": str(MAX_PODS),
        GPU: str(settings.gpus_per_node),
        "ephemeral-storage": "1Ti",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "sim",
                RUNTIME_LABEL: settings.runtime,
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": f"10.{index + 1}.0.0/16"},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
                *(
                    {
                        "type": kind,
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                    for kind, reason, message in (
                        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    )
                ),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.30.0-sim",
                "kubeProxyVersion": "v1.30.0-sim",
                "containerRuntimeVersion": "sim://1.0",
                "osImage": "kto sim",
                "kernelVersion": "6.0.0-sim",
                "machineID": f"sim-{index}",
                "systemUUID": f"00000000-0000-0000-0000-{index:012d}",
                "bootID": f"sim-boot-{index}",
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


def make_nodes(settings: sim_settings.SimSettings, now: str = "1970-01-01T00:00:00Z") -> list[dict[str, Any]]:
    """All the cluster's nodes, `sim-node-0` … `sim-node-<nodes-1>`."""
    return [make_node(settings, index, now) for index in range(settings.nodes)]


def node_index(name: str) -> int | None:
    """The number of a `sim-node-<i>` node, or None for a node named otherwise."""
    if not name.startswith(NODE_PREFIX):
        return None
    suffix = name[len(NODE_PREFIX) :]
    return int(suffix) if suffix.isdigit() else None

