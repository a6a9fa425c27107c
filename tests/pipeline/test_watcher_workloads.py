"""The watcher and Kueue's Workloads (services/watcher/watching.py), on the sim's API server with Kueue
v0.17.0's own Workload CRD: a watcher started before Kueue is installed keeps watching, picks the
Workloads up once the CRD is served, and publishes each under the job that owns it, as its projection;
every record of a job Kueue manages is in the one trace its Workload's name gives (the trace a
MultiKueue worker's copy of the job derives too). Kueue itself runs on the real tier
(tests/pipeline/test_kueue_history.py); here its Workloads are written as it writes them."""

from __future__ import annotations

import json
import pathlib
import subprocess
from typing import Any

import pytest
import yaml
from opentelemetry import trace

from services.watcher import running, watching
from shared.api import kueue, projections
from shared.bus.settings import KafkaSettings
from shared.kube import clients, resources
from sim import cluster as sim_cluster
from tests.api import kueue_objects
from tests.pipeline.test_watcher import (
    NS, client, cluster, eventually, key, published, read_all, service_task, settings_for, tracer_provider,
)

__all__ = ["client", "cluster", "tracer_provider"]  # the fixtures, shared with test_watcher.py

KUEUE_MODULE, KUEUE_VERSION = "sigs.k8s.io/kueue", "v0.17.0"


def workload_crd() -> dict[str, Any]:
    """Kueue v0.17.0's Workload CRD, from its module (``go mod download``: the Go module proxy, or the cache)."""
    found = subprocess.run(["go", "mod", "download", "-json", f"{KUEUE_MODULE}@{KUEUE_VERSION}"],
                           capture_output=True, check=False, timeout=300)
    if found.returncode != 0:
        pytest.fail(f"go mod download of {KUEUE_MODULE}@{KUEUE_VERSION} failed: {found.stderr.decode()}")
    bases = pathlib.Path(json.loads(found.stdout)["Dir"]) / "config" / "components" / "crd" / "bases"
    return yaml.safe_load((bases / "kueue.x-k8s.io_workloads.yaml").read_text())


def queued_job() -> dict[str, Any]:
    job = json.loads(json.dumps(kueue_objects.MANAGER_JOB))
    meta = job["metadata"]
    meta["namespace"] = NS
    for field in ("uid", "resourceVersion", "creationTimestamp"):
        del meta[field]
    del job["spec"]["runPolicy"]["managedBy"]
    return job


def workload_of(job: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """``step`` (a Workload as Kueue writes it) made for ``job``: Kueue's name for it, owned by it."""
    found = json.loads(json.dumps(step))
    meta = found["metadata"]
    uid = job["metadata"]["uid"]
    meta.update(name=kueue.workload_of(job), namespace=NS, labels={kueue.JOB_UID_LABEL: uid})
    meta["ownerReferences"][0]["uid"] = uid
    for field in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        meta.pop(field, None)
    return found


def trace_id(headers: dict[str, bytes]) -> str:
    return headers["traceparent"].decode().split("-")[1]


def trace_of(workload: str) -> str:
    """The trace id of :func:`services.watcher.watching.workload_trace` for ``workload`` in the test's namespace."""
    return format(trace.get_current_span(watching.workload_trace(NS, workload)).get_span_context().trace_id, "032x")


async def test_workloads_are_watched_once_kueue_is_installed_and_published_under_their_job_in_its_trace(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    settings = settings_for(cluster, discovery_interval=0.5)
    async with service_task(running.run(settings, bus), "watcher"):
        job = await client.create(resources.JOB_TYPES["PyTorchJob"], NS, queued_job())
        await published(bus, key("mnist"), ("ADDED", "PyTorchJob", "mnist"))
        await client.create(resources.CRDS, None, workload_crd())  # Kueue installed after the watcher started
        run = kueue_objects.manager_run()
        created = await client.create(resources.WORKLOADS, NS, workload_of(job, run[0]))
        name = created["metadata"]["name"]
        for step in run[1:]:
            body = {**created, "status": workload_of(job, step)["status"]}
            created = await client.request("PUT", resources.WORKLOADS.path(NS, name, "status"), body=body,
                                           route="workloads/status")
        found = await published(bus, key("mnist"), ("ADDED", "Workload", name), timeout=30.0)

        async def finished_seen() -> bool:
            workloads = [r for r, _ in await read_all(bus) if r.object_kind == "Workload"]
            return any(kueue.Workload.of(r.object).holds(kueue.FINISHED) for r in workloads)

        await eventually(finished_seen, 30.0, "the finished Workload published")
    workloads = [r for r in found if r.object_kind == "Workload"]
    assert workloads and all(r.projection == projections.VERSION for r in workloads)
    assert all("template" not in podset for r in workloads for podset in r.object["spec"]["podSets"])
    everything = [(r, h) for r, h in await read_all(bus) if r.key == key("mnist")]
    assert {trace_id(headers) for _, headers in everything} == {trace_of(name)}, "the job's and its Workload's records"
    worker_copy = {**kueue_objects.WORKER_COPY, "metadata": {
        **kueue_objects.WORKER_COPY["metadata"], "labels": {kueue.PREBUILT_WORKLOAD_LABEL: name}}}
    assert trace_of(kueue.workload_of(worker_copy)) == trace_of(name), "a MultiKueue worker's copy derives it too"
