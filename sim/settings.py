"""Settings of the local cluster (sim/): one frozen value, from `kto sim` flags or a test."""

from __future__ import annotations

import dataclasses
import pathlib


@dataclasses.dataclass(frozen=True)
class SimSettings:
    host: str = "127.0.0.1"
    """Address to listen on; the sim serves plain HTTP on loopback only."""

    port: int = 0
    """TCP port; 0 picks a free one."""

    nodes: int = 4
    """Number of simulated nodes (`sim-node-0` …)."""

    gpus_per_node: int = 8
    """`nvidia.com/gpu` capacity of every node."""

    cpu_per_node: str = "32"
    """CPU capacity of every node (a Kubernetes quantity)."""

    memory_per_node: str = "256Gi"
    """Memory capacity of every node (a Kubernetes quantity)."""

    kubeconfig: pathlib.Path | None = None
    """Where to write a kubeconfig for the server; None writes none."""

    context: str = "sim"
    """Name of the context (and cluster and user) in the written kubeconfig."""

    faults: str = ""
    """Fault-injection spec (see faulting/faults.py), changeable at run time via /admin/faults."""

    watch_window: int = 102400
    """How many past events the watch history keeps; older resourceVersions get 410 Gone. kube-apiserver's
    watch cache grows to 100 × 1024 events per kind: at 10,000 live jobs a watcher that fell 10,000
    events behind (a minute of pod changes) got 410 and relisted every pod, again and again."""

    bookmark_interval: float = 1.0
    """Seconds of quiet after which a watch that asked for bookmarks gets a BOOKMARK event."""

    pod_duration: float = 2.0
    """Default seconds a pod's containers run (annotation `sim.kto.dev/duration` overrides)."""

    pod_exit_code: int = 0
    """Default exit code of a pod's containers (annotation `sim.kto.dev/exit-code` overrides)."""

    startup_delay: float = 0.05
    """Seconds between a pod being bound and its containers running (image pull, start)."""

    runtime: str = "simulated"
    """How the nodes run their pods: ``simulated`` (timers, ``sim.kto.dev/*`` annotations) or ``process``
    (real local processes, sim/node/processes.py). Written as each node's ``sim.kto.dev/runtime`` label,
    which the kubelet reads per node (``kubectl label node … sim.kto.dev/runtime=process`` switches one)."""

    pods_dir: pathlib.Path | None = None
    """Where process pods get their scratch directory, Python layer, hosts file and logs; None: a
    temporary directory of the kubelet's, removed when it stops."""

    crash_backoff: float = 10.0
    """Seconds before a process container's first restart (CrashLoopBackOff), doubled per restart up to
    5 minutes (the kubelet's values)."""

    job_backoff: float = 10.0
    """Seconds the Job controller waits before replacing a Job's failed pod, doubled for each
    further failure since the last success, at most 10 minutes (kube-controller-manager's values)."""
