"""The whole kto pipeline on one machine: broker, local clusters, watchers, workers.

In: :class:`StackSettings` (how many clusters, reconcilers, status workers,
where the state directory is, the simulated clusters' shape and API latency).
Out: :class:`Stack`, an async context manager that starts, as processes of
their own (``python -m kto ...``, each in its own process group, output to
``<state-dir>/logs/<name>.log``):

1. ``kto broker`` (Tansu, in memory) — the bus, unless ``kafka`` names one
   already running;
2. one ``kto sim`` per cluster — the API servers, merged into ONE kubeconfig
   ``<state-dir>/kubeconfig`` with contexts ``kto-1`` … ``kto-N`` (with
   ``fault_proxy`` on a real control plane, a faulting proxy runs in this
   process in front of each cluster and the kubeconfig names the proxies);
3. the CRDs of ``deploy/crds/`` applied to every cluster (waited on until
   Established); with ``jobset_controller="upstream"``, the real JobSet controller on
   each (realparts/jobset.py, its state in ``<state-dir>/clusters/<ctx>/jobset``);
   with ``kueue``, the real Kueue on each (realparts/kueue.py, its state in
   ``<state-dir>/clusters/<ctx>/kueue``) and with ``multikueue`` the first cluster made
   MultiKueue's manager of the others (their kubeconfig Secrets, MultiKueueClusters, the
   MultiKueueConfig and AdmissionCheck ``multikueue``, waited on until Active);
   then what Kubeflow Trainer publishes for its clients
   (``deploy/base/cluster/trainer-public/``: the namespace ``kubeflow-system`` and the
   ConfigMap ``kubeflow-trainer-public`` the ``kubeflow`` SDK reads) and, with
   ``trainer_runtimes``, upstream's built-in ClusterTrainingRuntimes;
4. one ``kto watcher`` per cluster, ``reconcilers`` × ``kto reconciler`` and
   ``status_workers`` × ``kto status-service``.

Leaving the context stops them in reverse order — watchers and workers, then
the clusters, then the broker — each with SIGTERM to its process group, a
wait, then SIGKILL; processes that left the group (Tansu runs in a session
of its own) are tracked by pid and stopped too (the supervisor of
``supervising.processes``). ``up.lock`` in the state
directory keeps a second stack off the same directory. Used by ``kto up``,
``kto demo``, ``kto bench`` and the pipeline tests. For fault runs a child can
be killed and restarted (``kill``, ``restart``) or frozen and thawed with
SIGSTOP / SIGCONT (``pause``, ``resume``: a cluster whose API server stops
answering, and comes back as it was).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import fcntl
import logging
import os
import pathlib
import signal
import sys
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

import yaml

from faulting import proxying
from shared import lifecycle
from shared.bus import settings as bus_settings
from shared.bus import signing
from shared.core import settings as operator_settings
from shared.kube import clients, resources
from supervising import processes

if TYPE_CHECKING:
    from realparts import kueue

log = logging.getLogger("kto.stack")

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
"""The source tree: ``deploy/crds`` lives here, and children import kto from here."""

CRD_DIR = REPO_ROOT / "deploy" / "crds"
"""Every file here is applied to every cluster."""

TRAINER_PUBLIC_DIR = REPO_ROOT / "deploy" / "base" / "cluster" / "trainer-public"
"""What Kubeflow Trainer's installation publishes for clients: applied to every cluster after the CRDs."""

CONTROL_PLANES = ("sim", "kube")
BROKERS = ("tansu", "kafka")
RUNTIMES = ("simulated", "process")
JOBSET_CONTROLLERS = ("kto", "upstream")

KEYRING_FILE = "keys.json"
"""The signing keys ``kto up`` makes in its state dir (docs/security.md)."""

TAIL_LINES = 15
"""Log lines shown of a child that failed or ended."""

CONTEXT_PREFIX = "kto-"
"""Cluster i (from 1) is context, cluster and user ``kto-i`` in the merged kubeconfig."""


class StackError(Exception):
    """The stack cannot start (a child failed, timed out, or the state dir is in use)."""


@dataclasses.dataclass(frozen=True)
class StackSettings:
    """The shape of one local kto installation."""

    state_dir: pathlib.Path = pathlib.Path(".kto")
    """Holds ``kubeconfig``, ``logs/``, ``clusters/`` and ``up.lock``."""

    clusters: int = 1
    """Number of simulated clusters (contexts ``kto-1`` …), one watcher each."""

    reconcilers: int = 1
    """Number of ``kto reconciler`` processes (consumer group kto-reconciler)."""

    status_workers: int = 1
    """Number of ``kto status-service`` processes (consumer group kto-status)."""

    reconciler_concurrency: int | None = None
    """``--concurrency`` of each reconciler; None keeps its default."""

    partitions: int = 16
    """Partitions of the jobs topic (the most workers of one group that can work at once)."""

    api_latency_ms: float = 0.0
    """Latency the simulated API servers add to every request, in milliseconds."""

    faults: str = ""
    """Further fault spec for every cluster (faulting/faults.py grammar), joined with the latency: a
    sim injects it itself, a real control plane through a faulting proxy in front of it."""

    fault_proxy: bool = False
    """Put a faulting proxy (faulting/proxying.py, in this process) in front of each real cluster and
    point the services at it, so API faults can be set at run time through its ``/admin/faults``
    (``kto chaos --control-plane kube``); a sim injects them itself. A real control plane with a
    fault spec (latency or faults) gets one whatever this says."""

    nodes: int = 4
    """Simulated nodes per cluster."""

    gpus_per_node: int = 8
    """``nvidia.com/gpu`` capacity of each simulated node."""

    pod_duration: float = 2.0
    """Seconds a simulated pod runs unless its ``sim.kto.dev/duration`` annotation says otherwise."""

    runtime: str = "simulated"
    """How the clusters' nodes run pods: ``simulated`` or ``process`` (pods whose containers all have a
    command run as local processes, docs/sandbox.md); scratch dirs in ``<state-dir>/clusters/<ctx>/pods``."""

    control_plane: str = "sim"
    """``sim`` (``kto sim``, in one Python process) or ``kube`` (``kto control-plane``: real
    etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kto's node agent)."""

    jobset_controller: str = "kto"
    """Who serves JobSets: ``kto`` (its own JobSet family, unless ``serve_jobsets`` is false) or
    ``upstream`` (the real JobSet controller v0.12.0 on each cluster, realparts/jobset.py, and kto's
    services with ``KTO_SERVE_JOBSETS=false``); ``upstream`` needs ``control_plane="kube"``."""

    kueue: bool = False
    """The real Kueue v0.17.0 on every cluster (realparts/kueue.py: every integration kto serves);
    needs ``control_plane="kube"``."""

    multikueue: bool = False
    """MultiKueue (implies ``kueue``): the first cluster (``kto-1``) is the manager, the others its
    workers, connected through the AdmissionCheck ``multikueue`` (a ClusterQueue that names it in
    its ``admissionChecksStrategy`` sends its jobs to the workers); needs two clusters or more."""

    multikueue_worker_lost_timeout: float | None = None
    """Seconds the manager's MultiKueue keeps a job admitted on a worker it cannot reach before it
    dispatches the job again (its ``workerLostTimeout``); None: Kueue's default (15 minutes)."""

    broker: str = "tansu"
    """``tansu`` (embedded, in memory) or ``kafka`` (Apache Kafka in KRaft mode, logs under
    ``<state-dir>/kafka``, kept across runs)."""

    kafka: bus_settings.KafkaSettings | None = None
    """A broker already running (bootstrap, topic names, security) to use instead of starting
    ``broker``; its own ``partitions`` count for the topics, not ``partitions``."""

    watcher_args: tuple[str, ...] = ()
    """Further ``kto watcher`` arguments (e.g. a shorter ``--lease-duration`` for chaos runs)."""

    worker_args: tuple[str, ...] = ()
    """Further arguments of every reconciler and status worker (e.g. ``--release-after 5``)."""

    metrics_port_base: int = 0
    """First port of the services' Prometheus ``/metrics`` (watchers, then reconcilers, then status
    workers, one port each, in that order; :attr:`Stack.metrics_targets`); 0: none. Either way each
    service is given its port (or 0), so a ``KTO_METRICS_PORT`` in the environment is not taken by all."""

    serve_jobsets: bool = True
    """kto serves JobSets itself (``KTO_SERVE_JOBSETS`` of its watchers and reconcilers); false
    leaves them to another controller. Taken as false with ``jobset_controller="upstream"``."""

    trainer_runtimes: bool = False
    """Apply upstream's built-in ClusterTrainingRuntimes, unchanged (Kubeflow Trainer v2.3.0's
    ``manifests/base/runtimes``: torch-distributed, deepspeed-distributed, …, fetched once per machine
    from the Go module proxy, realparts/trainer.py), to every cluster after the CRDs, as upstream's
    installation does: what the ``kubeflow`` SDK's ``TrainerClient`` lists and trains on (``train()``
    names torch-distributed by default). ``kto up`` sets it unless ``--no-trainer-runtimes``."""

    webhooks: int = 0
    """Number of ``kto webhook`` processes (sharing one port on 127.0.0.1, a self-signed certificate
    in ``<state-dir>/webhook``), registered on every cluster after the CRDs (docs/admission.md);
    0: no admission webhook."""

    start_timeout: float = 30.0
    """Seconds a child may take to print its ``ready`` line, and CRDs to become Established."""

    stop_timeout: float = 5.0
    """Seconds between SIGTERM and SIGKILL when stopping a child."""

    def __post_init__(self) -> None:
        for name in ("clusters", "reconcilers", "status_workers", "partitions", "nodes"):
            if getattr(self, name) < 1:
                raise StackError(f"{name.replace('_', '-')} must be at least 1")
        if self.gpus_per_node < 0 or self.api_latency_ms < 0 or self.pod_duration < 0:
            raise StackError("gpus-per-node, api-latency and pod-duration must not be negative")
        if self.reconciler_concurrency is not None and self.reconciler_concurrency < 1:
            raise StackError("reconciler concurrency must be at least 1")
        if self.control_plane not in CONTROL_PLANES:
            raise StackError(f"control plane {self.control_plane!r} is not one of {', '.join(CONTROL_PLANES)}")
        if self.jobset_controller not in JOBSET_CONTROLLERS:
            raise StackError(f"JobSet controller {self.jobset_controller!r} is not one of "
                             f"{', '.join(JOBSET_CONTROLLERS)}")
        if self.jobset_controller == "upstream" and self.control_plane != "kube":
            raise StackError("the upstream JobSet controller runs on a real control plane: add --control-plane kube")
        if (self.kueue or self.multikueue) and self.control_plane != "kube":
            raise StackError(f"Kueue runs on a real control plane: add --control-plane kube to "
                             f"--{'multikueue' if self.multikueue else 'kueue'}")
        if self.multikueue and self.clusters < 2:
            raise StackError(f"MultiKueue needs a manager and at least one worker: --clusters {self.clusters} "
                             f"with --multikueue, give --clusters 2 or more")
        if self.broker not in BROKERS:
            raise StackError(f"broker {self.broker!r} is not one of {', '.join(BROKERS)}")
        if self.runtime not in RUNTIMES:
            raise StackError(f"runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}")
        if self.metrics_port_base and not 1024 <= self.metrics_port_base <= 65535 - self.services:
            raise StackError(f"metrics port base {self.metrics_port_base}: need a port from 1024 to "
                             f"{65535 - self.services} ({self.services} services take one each)")

    @property
    def part_timeout(self) -> float:
        """Seconds a cluster or broker may take to be ready: a real one starts in tens of seconds
        (and builds first on a new machine)."""
        real = self.control_plane == "kube" or self.broker == "kafka"
        return max(self.start_timeout, 900.0) if real else self.start_timeout

    @property
    def services(self) -> int:
        """Watchers, reconcilers and status workers: the processes that serve metrics."""
        return self.clusters + self.reconcilers + self.status_workers

    @property
    def contexts(self) -> list[str]:
        return [f"{CONTEXT_PREFIX}{i}" for i in range(1, self.clusters + 1)]

    @property
    def fault_spec(self) -> str:
        """The faults of every cluster (a sim's ``--faults``, a real one's proxy): the latency clause
        plus ``faults``."""
        clauses = [self.faults.strip()] if self.faults.strip() else []
        if self.api_latency_ms > 0:
            clauses.insert(0, f"latency=*:{self.api_latency_ms:g}ms")
        return ";".join(clauses)


def child_env() -> dict[str, str]:
    """The environment of a ``kto`` child process: this one's, unbuffered (the ready line must reach
    the log at once), with the repository on ``PYTHONPATH``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def cluster_argv(settings: StackSettings, directory: pathlib.Path, context: str) -> list[str]:
    """The ``kto`` arguments of one cluster of the settings' control plane; its state in ``directory``.
    It prints ``ready <url> <kubeconfig>``."""
    runtime = ["--runtime", settings.runtime, "--pods-dir", str(directory / "pods")]
    if settings.control_plane == "kube":
        return ["control-plane", "--state-dir", str(directory), "--context", context, "--crds", str(CRD_DIR),
                "--nodes", str(settings.nodes), "--gpus-per-node", str(settings.gpus_per_node),
                "--pod-duration", f"{settings.pod_duration:g}", *runtime, "--restart-dead-parts"]
    argv = ["sim", "--port", "0", "--kubeconfig", str(directory / "kubeconfig"),
            "--nodes", str(settings.nodes), "--gpus-per-node", str(settings.gpus_per_node),
            "--pod-duration", f"{settings.pod_duration:g}", *runtime]
    if settings.fault_spec:
        argv += ["--faults", settings.fault_spec]
    return argv


@dataclasses.dataclass(frozen=True)
class Exit:
    """A child that ended while the stack was running."""

    name: str
    code: int
    """Exit status; negative for a signal (as in subprocess)."""
    log: pathlib.Path
    tail: list[str]
    """Its last log lines."""


class Child:
    """One ``python -m kto ...`` process, supervised (:class:`supervising.processes.Process`: its own
    process group, output to its log), and what its ready line said."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: pathlib.Path, env: dict[str, str],
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log_path
        self.process = processes.Process(name, processes.Command(
            (sys.executable, "-m", "kto", *self.argv), log=log_path, env=env, cwd=REPO_ROOT,
        ))
        self.ready: list[str] = []
        """The words after ``ready`` on the child's ready line."""
        self.reported = False
        """Set once an unexpected exit of this child has been reported."""
        self.stop_timeout: float | None = None
        """Seconds between SIGTERM and SIGKILL for this child (None: the stack's); real parts shut down slower."""

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def start(self, timeout: float) -> list[str]:
        """Start the process and wait for its ``ready ...`` line; the words after ``ready``."""
        self.process.start()
        deadline = time.monotonic() + timeout
        while True:
            self.process.remember()
            for line in processes.tail(self.log, 200):
                words = line.split()
                if words[:1] == ["ready"]:
                    self.ready = words[1:]
                    return self.ready
            if self.process.returncode is not None:
                raise StackError(self._failure(f"exited with code {self.process.returncode} before it was ready"))
            if time.monotonic() > deadline:
                raise StackError(self._failure(f"printed no ready line within {timeout:g}s"))
            await asyncio.sleep(0.02)

    def _failure(self, what: str) -> str:
        lines = "\n".join(f"    {line}" for line in processes.tail(self.log, TAIL_LINES))
        return f"{self.name} {what}; last lines of {self.log}:\n{lines}"

    def pids(self) -> set[int]:
        """This child and every process seen below it that is still alive."""
        return self.process.pids()

    async def stop(self, timeout: float) -> None:
        """SIGTERM the process group, wait, SIGKILL it; then the same for strays. Safe twice."""
        await self.process.stop(timeout)


def _merge_kubeconfigs(sources: dict[str, pathlib.Path]) -> dict[str, Any]:
    """One kubeconfig whose context, cluster and user ``name`` come from each source's current context."""
    merged: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [], "users": [], "contexts": [], "current-context": next(iter(sources)),
    }
    for name, path in sources.items():
        try:
            config = yaml.safe_load(path.read_text())
            current = config.get("current-context") or config["contexts"][0]["name"]
            context = next(c["context"] for c in config["contexts"] if c["name"] == current)
            cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
            users = [u.get("user") or {} for u in config.get("users") or [] if u["name"] == context.get("user")]
        except (OSError, yaml.YAMLError, KeyError, IndexError, StopIteration, TypeError, AttributeError) as exc:
            raise StackError(f"cannot read the kubeconfig {path} written by the sim of {name}: {exc!r}") from exc
        merged["clusters"].append({"name": name, "cluster": cluster})
        merged["users"].append({"name": name, "user": users[0] if users else {}})
        new_context = {"cluster": name, "user": name, "namespace": context.get("namespace", "default")}
        merged["contexts"].append({"name": name, "context": new_context})
    return merged


def manifests_in(directory: pathlib.Path) -> list[dict[str, Any]]:
    """Every manifest of the YAML and JSON files of ``directory`` in file-name order (a kustomization is not one)."""
    files = sorted(p for p in directory.iterdir()
                   if p.suffix in (".yaml", ".yml", ".json") and p.stem != "kustomization")
    return [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc]


async def apply(client: clients.KubeClient, manifests: Sequence[dict[str, Any]]) -> None:
    """Create each manifest, in order, or replace what is there (as ``kubectl apply`` leaves it)."""
    for manifest in manifests:
        rt = resources.for_manifest(manifest)
        await client.put(rt, manifest["metadata"].get("namespace") if rt.namespaced else None, manifest)


def trainer_runtimes() -> list[dict[str, Any]]:
    """Upstream's built-in ClusterTrainingRuntimes (blocking: the first call on a machine downloads them)."""
    from realparts import caching, trainer

    try:
        return [dict(doc) for path in trainer.runtime_files() for doc in trainer.documents(path)]
    except caching.PartError as exc:
        raise StackError(f"upstream's training runtimes (kto up --no-trainer-runtimes goes without): {exc}") from None


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


class Stack(lifecycle.Started):
    """The running pipeline; ``async with Stack(settings) as stack:``.

    After entering: ``kubeconfig`` (merged, contexts ``contexts``),
    ``bootstrap`` and ``kafka`` (the bus), ``sim_urls`` (context → API URL),
    ``children`` (every process), ``client(context)`` for a KubeClient,
    ``exits()`` for children that died, ``pids()`` for every process started.
    """

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.state_dir = settings.state_dir.resolve()
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.log_dir = self.state_dir / "logs"
        self.contexts = settings.contexts
        self.bootstrap = ""
        self.sim_urls: dict[str, str] = {}
        self.proxies: dict[str, proxying.Proxy] = {}
        """Context → the faulting proxy in front of its cluster (``settings.fault_proxy`` on a real one)."""
        self.webhook_url = ""
        """The admission webhook's base URL (``settings.webhooks`` > 0), registered on every cluster."""
        self.metrics_targets: dict[str, str] = {}
        """Service name → ``127.0.0.1:PORT`` of its ``/metrics`` (``settings.metrics_port_base``)."""
        self.scrape_config = self.state_dir / "prometheus.yml"
        """A Prometheus config scraping :attr:`metrics_targets`, written when there are any."""
        self.keyring = os.environ.get(signing.ENV, "").strip() or str(self.state_dir / KEYRING_FILE)
        """The services' signing keys (``KTO_SIGNING_KEYS``): the user's when set, else made once in
        the state dir and kept, so ``kto history --verify`` checks records of earlier runs too."""
        self.children: list[Child] = []
        self.jobset_controllers: dict[str, lifecycle.Started] = {}
        """Context → the real JobSet controller running on it (``settings.jobset_controller="upstream"``)."""
        self.kueues: dict[str, kueue.KueueController] = {}
        """Context → the real Kueue running on it (``settings.kueue`` or ``settings.multikueue``);
        with ``multikueue`` the first context's is the manager."""
        self._tiers: list[list[Child]] = []
        """Children in start order, grouped; stopped last tier first."""
        self._lock: IO[str] | None = None
        self._stopping = False

    @property
    def kafka(self) -> bus_settings.KafkaSettings:
        """Settings that reach this stack's broker."""
        if self.settings.kafka is not None:
            return self.settings.kafka
        try:
            base = bus_settings.KafkaSettings.from_env()  # the user's KTO_KAFKA_* tuning is kept
        except bus_settings.SettingsError as exc:
            raise StackError(str(exc)) from None
        local = dataclasses.replace(base, bootstrap=self.bootstrap, partitions=self.settings.partitions,
                                    security_protocol="PLAINTEXT")
        return local if self.settings.broker == "kafka" else bus_settings.for_tansu(local)

    # --- start -----------------------------------------------------------

    def _take_lock(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / "up.lock"
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise StackError(
                f"{self.state_dir} is in use by a running kto stack (pid {holder}); "
                f"stop it first or choose another --state-dir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def _env(self) -> dict[str, str]:
        env = child_env()
        if self.bootstrap:
            env.update(self.kafka.to_env())
        env[signing.ENV] = self.keyring
        serving = self.settings.serve_jobsets and self.settings.jobset_controller == "kto"
        env[operator_settings.SERVE_JOBSETS_ENV] = "true" if serving else "false"
        return env

    def _make_keys(self) -> None:
        """The keyring of :attr:`keyring`, made when it is kto's own and missing; a user's is only checked."""
        own = pathlib.Path(self.keyring) == self.state_dir / KEYRING_FILE
        if own and not (self.state_dir / KEYRING_FILE).exists():
            signing.new_keyring(self.state_dir / KEYRING_FILE, dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S"))
        try:
            keyring = signing.Keyring.from_env({signing.ENV: self.keyring})
            assert keyring is not None
            for role in ("watcher", "reconciler", "status"):
                keyring.active_private(role)
        except signing.KeyringError as exc:
            raise StackError(str(exc)) from None

    def _child(self, name: str, *argv: str) -> Child:
        child = Child(name, argv, self.log_dir / f"{name}.log", self._env())
        self.children.append(child)
        return child

    async def _start_tier(self, children: list[Child], timeout: float) -> None:
        self._tiers.append(children)
        async with asyncio.TaskGroup() as group:
            for child in children:
                group.create_task(child.start(timeout), name=f"kto-stack-start-{child.name}")

    async def start(self) -> None:
        """Start everything, in order; a failure raises StackError (the caller stops what started)."""
        s = self.settings
        self._take_lock()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for old in self.log_dir.glob("*.log"):
            old.unlink()
        self.scrape_config.unlink(missing_ok=True)
        self._make_keys()
        if s.kafka is not None:
            self.bootstrap = s.kafka.bootstrap
        else:
            await self._start_broker()
        await self._start_clusters()

    async def _start_broker(self) -> None:
        s = self.settings
        broker_argv = ["broker", "--engine", s.broker, "--port", "0", "--partitions", str(s.partitions)]
        if s.broker == "kafka":
            broker_argv += ["--state-dir", str(self.state_dir / "kafka")]
        broker = self._child("broker", *broker_argv)
        broker.stop_timeout = max(s.stop_timeout, 30.0)
        await self._start_tier_checked([broker], s.part_timeout)
        if not broker.ready:
            raise StackError(f"the broker's ready line names no bootstrap address (see {broker.log})")
        self.bootstrap = broker.ready[0]

    async def _start_clusters(self) -> None:
        """The clusters, their merged kubeconfig and CRDs, then the watchers and workers."""
        s = self.settings
        sims: dict[str, Child] = {}
        for context in self.contexts:
            sim_dir = self.state_dir / "clusters" / context
            sim_dir.mkdir(parents=True, exist_ok=True)
            prefix = "control-plane" if s.control_plane == "kube" else "sim"
            sims[context] = self._child(f"{prefix}-{context}", *cluster_argv(s, sim_dir, context))
            sims[context].stop_timeout = max(s.stop_timeout, 30.0)
        await self._start_tier_checked(list(sims.values()), s.part_timeout)
        sources: dict[str, pathlib.Path] = {}
        for context, sim in sims.items():
            if len(sim.ready) < 2:
                raise StackError(f"{sim.name}'s ready line is not 'ready <url> <kubeconfig>' (see {sim.log})")
            self.sim_urls[context] = sim.ready[0]
            sources[context] = pathlib.Path(sim.ready[1])
            if s.control_plane == "kube" and (s.fault_proxy or s.fault_spec):
                sources[context] = await self._start_proxy(context, sources[context], s.fault_spec)
        merged = _merge_kubeconfigs(sources)
        tmp = self.kubeconfig.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(merged, sort_keys=False))
        tmp.replace(self.kubeconfig)

        runtimes = await asyncio.to_thread(trainer_runtimes) if s.trainer_runtimes else []
        async with asyncio.TaskGroup() as group:
            for context in self.contexts:
                group.create_task(self._apply_crds(context, runtimes), name=f"kto-stack-crds-{context}")
        if s.webhooks > 0:
            await self._start_webhooks()
        if s.jobset_controller == "upstream":
            await self._start_jobset_controllers()
        if s.kueue or s.multikueue:
            await self._start_kueues()

        services: list[Child] = []
        for context in self.contexts:
            services.append(self._service(
                f"watcher-{context}", "watcher", "--cluster", context,
                "--kubeconfig", str(self.kubeconfig), "--context", context, *s.watcher_args,
            ))
        for i in range(1, s.reconcilers + 1):
            argv = ["reconciler", "--kubeconfig", str(self.kubeconfig)]
            if s.reconciler_concurrency is not None:
                argv += ["--concurrency", str(s.reconciler_concurrency)]
            services.append(self._service(f"reconciler-{i}", *argv, *s.worker_args))
        for i in range(1, s.status_workers + 1):
            services.append(self._service(f"status-{i}", "status-service", "--kubeconfig", str(self.kubeconfig),
                                          *s.worker_args))
        if self.metrics_targets:
            self._write_scrape_config()
        await self._start_tier_checked(services)

    async def _start_jobset_controllers(self) -> None:
        """The real JobSet controller on every cluster, once its CRD and webhooks are in place."""
        from realparts import caching, jobset

        for context in self.contexts:
            controller = jobset.JobSetController(self.kubeconfig, context,
                                                 self.state_dir / "clusters" / context / "jobset")
            self.jobset_controllers[context] = controller
            try:
                await controller.start()
            except (caching.PartError, clients.ApiError) as exc:
                raise StackError(f"{context}: the JobSet controller: {exc}") from None

    async def _start_kueues(self) -> None:
        """Kueue on every cluster; with ``multikueue`` the first one the manager of the others,
        returned once every worker's MultiKueueCluster is Active."""
        from realparts import caching, kueue

        manager, *workers = self.contexts
        for context in self.contexts:
            settings = kueue.KueueSettings(multikueue=self.settings.multikueue and context == manager)
            if self.settings.multikueue_worker_lost_timeout is not None:
                settings = dataclasses.replace(
                    settings, worker_lost_timeout=self.settings.multikueue_worker_lost_timeout)
            controller = kueue.KueueController(self.kubeconfig, context,
                                               self.state_dir / "clusters" / context / "kueue", settings)
            self.kueues[context] = controller
            try:
                await controller.start()
            except (caching.PartError, clients.ApiError) as exc:
                raise StackError(f"{context}: Kueue: {exc}") from None
        if not self.settings.multikueue:
            return
        try:
            await kueue.connect_workers(self.kubeconfig, manager,
                                        {context: (self.kubeconfig, context) for context in workers})
            await kueue.wait_clusters_active(self.kubeconfig, manager, workers,
                                             timeout=max(self.settings.start_timeout, kueue.START_TIMEOUT))
        except (caching.PartError, clients.ApiError, ValueError) as exc:
            raise StackError(f"{manager}: MultiKueue: {exc}") from None

    async def _start_proxy(self, context: str, kubeconfig: pathlib.Path, faults: str) -> pathlib.Path:
        """A faulting proxy in front of ``kubeconfig``'s cluster, ``faults`` in force from the start;
        the kubeconfig naming it."""
        written = kubeconfig.with_name("proxy.kubeconfig")
        try:
            proxy = proxying.Proxy(proxying.ProxySettings(kubeconfig, faults=faults, write_kubeconfig=written))
        except proxying.ProxyError as exc:
            raise StackError(f"the faulting proxy of {context}: {exc}") from None
        self.proxies[context] = proxy
        await proxy.start()
        return written

    def _service(self, name: str, *argv: str) -> Child:
        """A watcher or worker, with its own metrics port (or none) and no probes port of its own."""
        port = 0
        if self.settings.metrics_port_base:
            port = self.settings.metrics_port_base + len(self.metrics_targets)
            self.metrics_targets[name] = f"127.0.0.1:{port}"
        return self._child(name, *argv, "--metrics-port", str(port), "--health-port", "0")

    def _write_scrape_config(self) -> None:
        """``<state-dir>/prometheus.yml``: a Prometheus config scraping every service, labelled as
        deploy/'s pods are (``service``), for the dashboard in deploy/grafana."""
        jobs = [{"job_name": "kto", "scrape_interval": "5s", "static_configs": [
            {"targets": [target], "labels": {"service": name.split("-", 1)[0], "instance_name": name}}
            for name, target in self.metrics_targets.items()]}]
        self.scrape_config.write_text(yaml.safe_dump({"scrape_configs": jobs}, sort_keys=False))

    async def _start_tier_checked(self, children: list[Child], timeout: float | None = None) -> None:
        """Start a tier; the first child's failure becomes one StackError (not an ExceptionGroup)."""
        try:
            await self._start_tier(children, self.settings.start_timeout if timeout is None else timeout)
        except* StackError as group:
            raise StackError("\n".join(str(e) for e in group.exceptions)) from None

    async def _start_webhooks(self) -> None:
        """``webhooks`` × ``kto webhook`` on one free port, then their configurations on every cluster."""
        from realparts import ports
        from services.webhook import registering

        port = str(ports.free())
        webhooks = [self._child(f"webhook-{i}", "webhook", "--host", "127.0.0.1", "--port", port, "--reuse-port",
                                "--self-signed", str(self.state_dir / "webhook"), "--kubeconfig", str(self.kubeconfig))
                    for i in range(1, self.settings.webhooks + 1)]
        await self._start_tier_checked(webhooks)
        if len(webhooks[0].ready) < 2:
            raise StackError(f"{webhooks[0].name}'s ready line is not 'ready <url> <ca file>' (see {webhooks[0].log})")
        self.webhook_url = webhooks[0].ready[0]
        ca = pathlib.Path(webhooks[0].ready[1]).read_bytes()
        for context in self.contexts:
            # Each cluster calls the webhook under its own path: a TrainJob's runtime is read from it.
            manifests = registering.configurations(registering.cluster_url(self.webhook_url, context), ca)
            async with await clients.KubeClient.connect(self.kubeconfig, context) as client:
                try:
                    await registering.register(client, manifests)
                except clients.ApiError as exc:
                    raise StackError(f"{context}: cannot register the admission webhook: {exc}") from exc

    async def _apply_crds(self, context: str, runtimes: Sequence[dict[str, Any]]) -> None:
        """The CRDs (waited on until Established), what Trainer publishes for clients, then ``runtimes``."""
        manifests = manifests_in(CRD_DIR)
        deadline = time.monotonic() + self.settings.start_timeout
        async with await clients.KubeClient.connect(self.kubeconfig, context) as client:
            try:
                await apply(client, manifests)
            except clients.ApiError as exc:
                raise StackError(f"{context}: cannot apply the CRDs: {exc}") from exc
            for manifest in manifests:
                rt = resources.for_manifest(manifest)
                name = manifest["metadata"]["name"]
                while not _condition(await client.get(rt, None, name), "Established"):
                    if time.monotonic() > deadline:
                        raise StackError(f"{context}: the CRD {name} is not Established after "
                                         f"{self.settings.start_timeout:g}s")
                    await asyncio.sleep(0.05)
            try:
                await apply(client, manifests_in(TRAINER_PUBLIC_DIR))
            except clients.ApiError as exc:
                raise StackError(f"{context}: cannot publish kubeflow-trainer-public: {exc}") from exc
            try:
                await apply(client, runtimes)
            except clients.ApiError as exc:
                raise StackError(f"{context}: cannot apply upstream's training runtimes: {exc}") from exc

    # --- running ---------------------------------------------------------

    @property
    def audit_logs(self) -> dict[str, pathlib.Path] | None:
        """context → kube-apiserver's audit log on a real control plane; None on sims (they serve
        their request log at ``/admin/requests``)."""
        if self.settings.control_plane != "kube":
            return None
        return {context: self.state_dir / "clusters" / context / "audit.log" for context in self.contexts}

    async def client(self, context: str | None = None) -> clients.KubeClient:
        """A KubeClient for one cluster (default: the first); close it (``async with``)."""
        return await clients.KubeClient.connect(self.kubeconfig, context or self.contexts[0])

    def exits(self) -> list[Exit]:
        """Children that ended since the last call (each reported once); empty while stopping."""
        if self._stopping:
            return []
        ended: list[Exit] = []
        for child in self.children:
            child.process.remember()
            if child.returncode is not None and not child.reported:
                child.reported = True
                ended.append(Exit(child.name, child.returncode, child.log, processes.tail(child.log, TAIL_LINES)))
        return ended

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) used so far by each child and what it started, by child name."""
        return {child.name: sum(processes.cpu_seconds(pid) for pid in child.pids()) for child in self.children}

    def pids(self) -> set[int]:
        """Every live process this stack started (children and what they started)."""
        return set().union(*(child.pids() for child in self.children)) if self.children else set()

    # --- faults (chaos runs) ---------------------------------------------

    def child(self, name: str) -> Child:
        """The child process called ``name`` (``broker``, ``reconciler-1``, ``watcher-kto-1`` …)."""
        for child in self.children:
            if child.name == name:
                return child
        raise StackError(f"no child called {name}")

    def kill(self, name: str) -> None:
        """SIGKILL a child's process group and everything it started, at once (a crash); it is not
        reported by ``exits()``."""
        child = self.child(name)
        child.reported = True
        child.process.kill()  # what it started in sessions of their own (Kafka's JVM) dies with it

    def pause(self, name: str) -> None:
        """SIGSTOP a child and everything it started (a sim's API server, scheduler and kubelet;
        a control plane's etcd, kube-apiserver, controllers and node agent): connections to it
        stay open and get no answer, as with a hung or partitioned cluster."""
        self.child(name).process.signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT what ``pause`` stopped: the child goes on with the same state and port."""
        self.child(name).process.signal(signal.SIGCONT)

    async def restart(self, name: str, *, wait_ready: bool = True) -> None:
        """Start a killed or ended child again with the same arguments (a broker on the same port);
        its output goes to ``<name>.<n>.log``. With ``wait_ready``, wait for its ready line."""
        child = self.child(name)
        child.process.kill()
        await child.process.wait()
        argv = list(child.argv)
        if name == "broker" and "--port" in argv and self.bootstrap:
            argv[argv.index("--port") + 1] = self.bootstrap.rsplit(":", 1)[1]
        restarts = sum(1 for c in self.children if c.name == name)
        again = Child(name, argv, self.log_dir / f"{name}.{restarts}.log", self._env())
        again.stop_timeout = child.stop_timeout
        self.children[self.children.index(child)] = again
        for tier in self._tiers:
            if child in tier:
                tier[tier.index(child)] = again
        if wait_ready:
            await again.start(self.settings.part_timeout)
        else:
            asyncio.ensure_future(again.start(self.settings.part_timeout)).add_done_callback(
                lambda task: task.exception() if not task.cancelled() else None)

    # --- stop ------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the tiers in reverse start order; release the state dir. Safe twice."""
        self._stopping = True
        timeout = self.settings.stop_timeout
        while self.kueues or self.jobset_controllers:  # first: their webhooks go while the clusters answer
            from realparts import caching

            context, controller = (self.kueues or self.jobset_controllers).popitem()
            try:
                await controller.stop()
            except caching.PartError as exc:  # a cluster that died first: the rest must still stop
                log.warning("%s: %s", context, exc)
        while self._tiers:
            tier = self._tiers.pop()
            async with asyncio.TaskGroup() as group:
                for child in tier:
                    group.create_task(child.stop(child.stop_timeout or timeout), name=f"kto-stack-stop-{child.name}")
        while self.proxies:
            await self.proxies.popitem()[1].stop()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            with contextlib.suppress(OSError):
                lock.seek(0)
                lock.truncate()
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
