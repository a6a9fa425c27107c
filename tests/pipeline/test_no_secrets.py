"""Issue 19, item 4, on both tiers: no literal value from a spec leaves the cluster through kto.

A PyTorchJob applied with the real ``kubectl apply`` (so the API server keeps its
last-applied-configuration, env values and all) has env values and an ``args`` string planted
in it, and a Secret the watcher observes (labelled as the job's) has one in its data. The
watcher, reconciler and status service run as ``kto`` processes exporting spans over OTLP. The
job runs to Succeeded, its pods with the real values (the reconciler plans from the API
server); then no planted value, nor its base64, is in the raw bytes of any record of the jobs
and dead-letter topics, in ``kto history -o json``, in ``kto export``'s files, in the console's
page and JSON of the job, in the spans exported, or in the services' log lines.
"""

from __future__ import annotations

import asyncio
import base64
import pathlib
import uuid
from typing import Any

import yaml

from shared.bus import reading, records
from tests.fixtures.pipeline import CLUSTER, Pipeline
from tests.fixtures.sim import Kubectl
from tests.kto.test_console import console, get
from tests.pipeline.test_otlp_traces import collector, otlp_env, services_as_processes
from tests.pipeline.test_pipeline import job
from tests.pipeline.test_replay import kto

ENV_NAMES = ("DATABASE_URL", "PGPASS", "AUTH_HEADER", "S3_CREDENTIALS", "API_TOKEN")


def planted_job(name: str, namespace: str, planted: dict[str, str]) -> dict[str, Any]:
    manifest = job("PyTorchJob", name, {"Master": (1, "OnFailure"), "Worker": (1, "OnFailure")}, "pytorch")
    manifest["metadata"]["namespace"] = namespace
    for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["env"] = [{"name": env, "value": planted[env]} for env in ENV_NAMES]
        container["command"] = ["python", "train.py"]
        container["args"] = ["--data", f"s3://bucket/{planted['args']}"]
    return manifest


def planted_secret(name: str, namespace: str, value: str) -> dict[str, Any]:
    """A Secret labelled as the job's children are (job-name and operator-name labels): one a
    watcher that lists Secrets by the job-name label observes and maps to the job."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": f"{name}-credentials", "namespace": namespace, "labels": {
                "training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "pytorchjob-controller"}},
            "data": {"password": base64.b64encode(value.encode()).decode()}}


def leaks(found: bytes | str, needles: list[bytes]) -> list[bytes]:
    data = found.encode() if isinstance(found, str) else found
    return [n for n in needles if n in data]


async def test_no_planted_value_reaches_the_log_the_cli_the_console_the_spans_or_the_logs(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    ns, name = pipeline.namespace, "secretive"
    mark = uuid.uuid4().hex[:12]
    planted = {env: f"pl4nt-{env.lower()}-{mark}" for env in (*ENV_NAMES, "args", "secret")}
    planted["DATABASE_URL"] = f"postgres://kto:{planted['DATABASE_URL']}@db:5432/train"
    planted["AUTH_HEADER"] = f"Bearer {planted['AUTH_HEADER']}"
    values = list(planted.values())
    needles = [v.encode() for v in values] + [base64.b64encode(v.encode()) for v in values] + [
        f"pl4nt-{env.lower()}-{mark}".encode() for env in ENV_NAMES]

    async with collector() as (received, endpoint), services_as_processes(
            pipeline, otlp_env(pipeline, endpoint), tmp_path) as logs:
        kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
        documents = [planted_secret(name, ns, planted["secret"]), planted_job(name, ns, planted)]
        await kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))
        applied = await pipeline.job("PyTorchJob", name)
        last_applied = applied["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        assert planted["PGPASS"] in last_applied, "kubectl apply kept the object as applied on the API server"
        done = await pipeline.wait_for("PyTorchJob", name, "Succeeded", timeout=90)
        # kto wrote nothing it read from the log back: the job keeps its values and annotation.
        assert done["spec"] == applied["spec"]
        assert done["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] == last_applied
        # The pods have the real values: the reconciler read the job from the API server.
        pods = await pipeline.pods(name)
        assert {p["metadata"]["name"] for p in pods} == {f"{name}-master-0", f"{name}-worker-0"}
        for pod in pods:
            main = pod["spec"]["containers"][0]
            given = {e["name"]: e.get("value") for e in main["env"]}
            assert all(given[env] == planted[env] for env in ENV_NAMES), given
            assert main["args"] == ["--data", f"s3://bucket/{planted['args']}"]
        await asyncio.sleep(2.0)  # the last status write and its observation reach the log

    # The topics, byte for byte; the observations say what was replaced.
    jobs = [raw async for raw in reading.scan(pipeline.kafka, accept=lambda key: True)]
    dead = [raw async for raw in reading.scan(pipeline.kafka, accept=lambda key: True, topic=pipeline.kafka.dlq_topic)]
    key = pipeline.key("PyTorchJob", name)
    assert any(raw.key == key for raw in jobs)
    for raw in [*jobs, *dead]:
        assert not leaks(raw.value, needles), (raw.offset, raw.value[:3000])
        assert not leaks(raw.key, needles)
    observed = [r for r in (raw.decoded().record for raw in jobs) if isinstance(r, records.Observation)]
    job_paths = {p for r in observed if r.object_kind == "PyTorchJob" for p in r.redacted}
    assert "metadata.annotations[kubectl.kubernetes.io/last-applied-configuration]" in job_paths, job_paths
    assert {f"spec.pytorchReplicaSpecs[Master].template.spec.containers[0].env[{i}].value"
            for i in range(len(ENV_NAMES))} <= job_paths, job_paths
    # A watcher that observes the job's Secrets writes their values replaced (one that reads no Secret
    # at all writes none).
    assert all(records.is_replaced(r.object["data"]["password"]) for r in observed if r.object_kind == "Secret")

    # What a user reads with kto.
    history = await kto(pipeline, "history", "-n", ns, f"pytorchjob/{name}", "-o", "json")
    assert history.returncode == 0, history.stderr
    assert name in history.stdout and not leaks(history.stdout + history.stderr, needles)
    archive = tmp_path / "archive"
    exported = await kto(pipeline, "export", "--out", str(archive), "-n", ns)
    assert exported.returncode == 0, exported.stderr
    files = list(archive.iterdir())
    assert files
    for path in files:
        assert not leaks(path.read_bytes(), needles), path
    replayed = await kto(pipeline, "replay", "-n", ns, f"pytorchjob/{name}", "-o", "json")
    assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-2000:]
    assert not leaks(replayed.stdout, needles)

    # The console's page and JSON of the job.
    async with console(pipeline.kubeconfig, pipeline.kafka, tmp_path) as url:
        job_path = f"{CLUSTER}/{ns}/pytorchjob/{name}"
        for address in (f"{url}/jobs/{job_path}", f"{url}/api/jobs/{job_path}", f"{url}/api/jobs?namespace={ns}"):
            status, _, body = await get(address)
            assert status == 200, (address, body)
            assert not leaks(str(body), needles), address
        status, _, document = await get(f"{url}/api/jobs/{job_path}")
        assert document["state"] == "Succeeded" and document["decisions"], document

    # The spans and the services' log lines.
    assert received.bodies, "no span was exported"
    for body in received.bodies:
        assert not leaks(body, needles)
    for log in logs.values():
        assert not leaks(log.read_bytes(), needles), log.read_text()[-3000:]
