"""TrainJobs, upstream's built-in runtimes and JobSet states for the TrainJob family's tests."""

from __future__ import annotations

import copy
import datetime as dt
import functools
from typing import Any

from realparts import trainer as upstream
from shared.core.trainer import sshkeys

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
API_VERSION = "trainer.kubeflow.org/v1alpha1"
KEYS = sshkeys.KeyPair(b"-----BEGIN EC PRIVATE KEY-----\n", b"ecdsa-sha2-nistp521 AAAA\n")


@functools.cache
def _runtimes() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in upstream.runtime_files():
        for document in upstream.documents(path):
            found[str(document["metadata"]["name"])] = document  # type: ignore[index]
    return found


def runtime(name: str) -> dict[str, Any]:
    """Upstream's built-in ClusterTrainingRuntime ``name`` (manifests/base/runtimes), as the API
    server holds it."""
    return copy.deepcopy(_runtimes()[name])


@functools.cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    return {path.name: [dict(d) for d in upstream.documents(path)] for path in upstream.example_files()}


def example(file: str) -> list[dict[str, Any]]:
    """The documents of upstream's examples/yaml/``file``."""
    return copy.deepcopy(_examples()[file])


def train_job(name: str = "job", runtime_name: str = "torch-distributed", *, kind: str = "ClusterTrainingRuntime",
              uid: str = "uid-1", **spec: Any) -> dict[str, Any]:
    """A TrainJob in namespace ``default`` naming a runtime, with ``spec`` fields beside."""
    return {"apiVersion": API_VERSION, "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "1",
                         "creationTimestamp": "2026-01-02T03:00:00Z"},
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": kind, "name": runtime_name}, **spec}}


def owned(job: dict[str, Any], manifest: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``manifest`` as the API server returns it after a create (a uid, a resourceVersion),
    with ``fields`` over it."""
    made = copy.deepcopy(manifest)
    made["metadata"].update(uid=f"uid-{made['kind']}-{made['metadata']['name']}", resourceVersion="7")
    made.update(fields)
    return made


def jobset_status(*conditions: tuple[str, str, str], **counts: dict[str, int]) -> dict[str, Any]:
    """A JobSet status: (type, reason, message) conditions True, replicatedJobsStatus by name."""
    return {"conditions": [{"type": t, "status": "True", "reason": r, "message": m,
                            "lastTransitionTime": "2026-01-02T03:03:00Z"} for t, r, m in conditions],
            "replicatedJobsStatus": [{"name": name, **values} for name, values in counts.items()]}


def container(jobset: dict[str, Any], rjob: str, name: str = "node") -> dict[str, Any]:
    """A container of a replicated job of a JobSet manifest."""
    job = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == rjob)
    containers = job["template"]["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)  # type: ignore[no-any-return]


def env(container_: dict[str, Any]) -> dict[str, Any]:
    """A container's env by name (a value, or the valueFrom object)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container_.get("env") or []}
