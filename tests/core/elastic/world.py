"""A TrainingJob's small world for the et-operator core tests: the job, its children and
scalers as the API server would hold them, and a loop that applies ``decide``'s decisions
the way the service layer must (the effects module docstring). No cluster, no broker: the
core is pure, and this is the state it is a function of."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

from shared.api import common, elastic
from shared.core import effects
from shared.core.elastic import planning, deciding
from shared.core.elastic.settings import ElasticSettings

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
KEYS = planning.KeyPair("-----BEGIN RSA PRIVATE KEY-----\nMII\n-----END RSA PRIVATE KEY-----\n", "ssh-rsa AAAA\n")


def training_job(name: str = "elastic-training", replicas: int = 2, **spec: Any) -> elastic.TrainingJob:
    """examples/training_job.yaml of upstream, with ``spec`` overrides (``worker=...`` merges into
    the worker spec)."""
    worker: dict[str, Any] = {
        "maxReplicas": 9, "minReplicas": 1, "replicas": replicas,
        "template": {"spec": {"containers": [{
            "name": "mnist-elastic", "image": "horovod",
            "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
        }]}},
    }
    worker.update(spec.pop("worker", {}))
    launcher: dict[str, Any] = {"replicas": 1, "template": {"spec": {"containers": [{
        "name": "mnist-elastic", "image": "horovod",
        "command": ["sh", "-c", "horovodrun -np 2 --min-np 1 --max-np 9 --host-discovery-script "
                                "/etc/edl/discover_hosts.sh python train.py"]}]}}}
    launcher.update(spec.pop("launcher", {}))
    document = {
        "apiVersion": elastic.API_VERSION, "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default", "uid": "job-uid",
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"cleanPodPolicy": "Running", "etReplicaSpecs": {"launcher": launcher, "worker": worker}, **spec},
    }
    return elastic.load_training_job(document)


def scaler(kind: str, name: str, created: dt.datetime = T0, job: str = "elastic-training", **spec: Any) -> elastic.Scaler:
    return elastic.load_scaler({
        "apiVersion": elastic.API_VERSION, "kind": kind,
        "metadata": {"name": name, "namespace": "default", "uid": f"{name}-uid",
                     "creationTimestamp": common.format_time(created)},
        "spec": {"selector": {"name": job}, **spec},
    })


Runner = Callable[[effects.Exec], effects.ExecResult]


@dataclasses.dataclass
class World:
    job: elastic.TrainingJob
    settings: ElasticSettings = ElasticSettings()
    now: dt.datetime = T0
    children: dict[tuple[str, str], dict[str, Any]] = dataclasses.field(default_factory=dict)
    scalers: list[elastic.Scaler] = dataclasses.field(default_factory=list)
    execs: list[effects.Exec] = dataclasses.field(default_factory=list)
    steps: list[effects.Step] = dataclasses.field(default_factory=list)
    events: list[str] = dataclasses.field(default_factory=list)
    processes: str = ""
    """What ``ps -ef | grep …`` prints in the launcher."""
    failing: str | None = None
    """Text of the error every exec fails with, when set."""
    last: effects.Effects | None = None
    log: list[str] = dataclasses.field(default_factory=list)
    """Every exec, create and delete, in the order they happened."""

    # -- looking -----------------------------------------------------------

    @property
    def status(self) -> elastic.TrainingJobStatus:
        assert self.job.status is not None
        return self.job.status

    def names(self, kind: str) -> list[str]:
        return sorted(name for (k, name) in self.children if k == kind)

    def pod(self, name: str) -> dict[str, Any]:
        return self.children[("Pod", name)]

    def conditions(self, obj: elastic.TrainingJob | elastic.Scaler | None = None) -> list[str]:
        status = (obj or self.job).status
        return [c.type for c in (status.conditions or [])] if status is not None else []

    def get(self, name: str) -> elastic.Scaler:
        return next(s for s in self.scalers if s.name == name)

    def hostfiles(self) -> list[str]:
        """The hostfile content of every rewrite exec'd so far, in order."""
        return [e.script.split("'")[1] for e in self.execs if e.purpose == "hostfile"]

    # -- changing ----------------------------------------------------------

    def set_phase(self, name: str, phase: str, **status: Any) -> None:
        self.pod(name)["status"] = {"phase": phase, **status}

    def run_all(self, *names: str) -> None:
        for name in names or self.names("Pod"):
            self.set_phase(name, "Running")

    def add(self, *scalers: elastic.Scaler) -> None:
        self.scalers.extend(scalers)

    def tick(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)

    def start(self) -> None:
        """Provision the job through the four steps of B.8 until it is Running."""
        self.decide()
        self.run_all()
        self.decide()
        self.decide()
        self.set_phase(f"{self.job.name}-launcher", "Running")
        self.decide()
        assert self.status.phase == "Running", self.status.phase

    def running(self, *names: str) -> None:
        """A job already Running on exactly the workers ``names`` (any indices)."""
        self.start()
        for (kind, name) in list(self.children):
            if kind in ("Pod", "Service") and name.startswith(f"{self.job.name}-worker-"):
                del self.children[(kind, name)]
        for name in names:
            self.children[("Pod", name)] = {**planning.worker_pod(self.job, name), "status": {"phase": "Running"}}
            self.children[("Service", name)] = planning.worker_service(self.job, name)
        document = self.job.dump()
        document["status"].update(targetWorkers=list(names), currentWorkers=list(names))
        self.job = elastic.load_training_job(document)
        self.execs.clear()
        self.log.clear()
        self.steps.clear()

    # -- reconciling -------------------------------------------------------

    def _run(self, command: effects.Exec) -> effects.ExecResult:
        self.execs.append(command)
        self.log.append(f"exec {command.purpose}")
        if self.failing is not None:
            return effects.ExecResult(command, False, self.failing)
        return effects.ExecResult(command, True, self.processes if command.purpose == "probe" else "")

    def decide(self, apply: bool = True) -> effects.Effects:
        """One reconcile: the exec chain, then (``apply``) the decision applied in the order
        the effects module prescribes."""
        executed: list[effects.ExecResult] = []
        while True:
            decision = deciding.decide(self.job, list(self.children.values()), list(self.scalers), self.now,
                                          key_pair=lambda: KEYS, settings=self.settings, executed=executed)
            if not decision.execs:
                break
            assert not (decision.creates or decision.updates or decision.deletes or decision.child_writes or decision.status)
            for command in decision.execs:
                assert command not in [r.exec for r in executed], "an exec asked for twice"
                executed.append(self._run(command))
        self.last = decision
        if apply:
            self.apply(decision)
        return decision

    def apply(self, decision: effects.Effects) -> None:
        for update in decision.child_writes:
            index = next(i for i, s in enumerate(self.scalers) if s.name == update.name and s.KIND == update.kind)
            current = self.scalers[index]
            document = current.dump()
            if update.owner_reference is not None:
                document["metadata"].setdefault("ownerReferences", []).append(update.owner_reference)
            if update.status is not None:
                document["status"] = update.status.dump()
            self.scalers[index] = elastic.load_scaler(document)
        for manifest in decision.creates:
            key = (manifest["kind"], manifest["metadata"]["name"])
            if key in self.children:
                continue  # 409 AlreadyExists: done
            created = copy.deepcopy(manifest)
            created["metadata"]["uid"] = f"{key[0]}-{key[1]}-uid"
            if created["kind"] == "Pod":
                created["status"] = {"phase": "Pending"}
            self.children[key] = created
            self.log.append(f"create {key[0]}/{key[1]}")
        for manifest in decision.updates:
            key = (manifest["kind"], manifest["metadata"]["name"])
            if key in self.children:  # 404: gone meanwhile, done
                self.children[key] = copy.deepcopy(manifest)
                self.log.append(f"update {key[0]}/{key[1]}")
        for ref in decision.deletes:
            self.children.pop((ref.kind, ref.name), None)
            self.log.append(f"delete {ref.kind}/{ref.name}")
        if decision.status is not None:
            document = self.job.dump()
            document["status"] = decision.status.dump()
            self.job = elastic.load_training_job(document)
        self.steps += decision.steps
        self.events += [f"{e.type} {e.reason}: {e.message}" for e in decision.events]

    def settle(self, passes: int = 8) -> None:
        """Reconcile until nothing changes (or ``passes`` times)."""
        for _ in range(passes):
            if self.decide().empty:
                return

    def step_kinds(self) -> list[str]:
        return [s.kind for s in self.steps]

