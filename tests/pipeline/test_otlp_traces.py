"""A job's trace leaves the processes over OTLP: the watcher, reconciler and status service run as
`kto` processes configured only by the standard OTEL_* variables, and a real OTLP/HTTP receiver in
the test (aiohttp, protobuf decoded with opentelemetry-proto) gets one trace, started by the job's
``kto.dev/traceparent`` annotation, that crosses Kafka twice and holds the pod creates and the
status write."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import yaml
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.fixtures.pipeline import CLUSTER, Pipeline
from tests.fixtures.sim import Kubectl
from tests.pipeline.test_pipeline import job

TRACE_ID = "5b8efff798038103d269b633813fc60c"
ROOT_SPAN_ID = "eee19b7ec3c1b174"
"""The span of `kubectl apply` the annotation names: the parent of the job's first observation."""

PRODUCER, CONSUMER, CLIENT = trace_pb2.Span.SPAN_KIND_PRODUCER, trace_pb2.Span.SPAN_KIND_CONSUMER, trace_pb2.Span.SPAN_KIND_CLIENT


@dataclasses.dataclass(frozen=True)
class Span:
    service: str
    resource: dict[str, Any]
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]


def _value(value: common_pb2.AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class Collector:
    """An OTLP/HTTP receiver: ``POST /v1/traces`` with an ExportTraceServiceRequest (protobuf;
    aiohttp inflates a gzip or deflate body), answered with an ExportTraceServiceResponse."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self.bodies: list[bytes] = []
        """Every request's body as sent: every string of every span, event and resource is in it."""

    async def receive(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        assert request.content_type == "application/x-protobuf", request.content_type
        self.bodies.append(await request.read())
        export = trace_service_pb2.ExportTraceServiceRequest.FromString(self.bodies[-1])
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(Span(
                        str(resource.get("service.name")), resource, span.trace_id.hex(), span.span_id.hex(),
                        span.parent_span_id.hex(), span.name, span.kind, _attributes(span.attributes),
                        tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                    ))
        self.requests += 1
        return aiohttp.web.Response(body=trace_service_pb2.ExportTraceServiceResponse().SerializeToString(),
                                    content_type="application/x-protobuf")


@contextlib.asynccontextmanager
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    receiver = Collector()
    app = aiohttp.web.Application()
    app.router.add_post("/v1/traces", receiver.receive)
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield receiver, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def _start(command: list[str], env: dict[str, str], log: pathlib.Path) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-m", "kto", *command], stdout=subprocess.PIPE,
                               stderr=log.open("w"), text=True, env=env)
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, process.stdout.readline), 60)
    assert line.startswith("ready"), f"kto {command[0]}: {line!r}\n{log.read_text()}"
    return process


def otlp_env(pipeline: Pipeline, endpoint: str, **extra: str) -> dict[str, str]:
    """The environment of services configured only by the standard OTEL_* variables (spans to
    ``endpoint``), the pipeline's Kafka settings (the tier's group timing, as in test_crashes.py) and
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "KTO_TRACES"))}
    env.update(pipeline.kafka.to_env(), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="200",
               **extra)
    return env


@contextlib.asynccontextmanager
async def services_as_processes(
    pipeline: Pipeline, env: dict[str, str], directory: pathlib.Path,
) -> AsyncIterator[dict[str, pathlib.Path]]:
    """The pipeline's watcher, reconciler and status service as `kto` processes told ``env`` instead
    of running in the test; their log files by service. Stopped with SIGTERM (batched spans are sent
    before a process exits), each must exit with 0."""
    for name in ("watcher", "reconciler", "status"):
        await pipeline.stop(name)
    topic = pipeline.kafka.jobs_topic
    scoped = ["--namespace", pipeline.namespace, "--lease-namespace", pipeline.namespace] if pipeline.tier == "kube" else []
    kubeconfig = str(pipeline.kubeconfig)
    logs = {name: directory / f"{name}.log" for name in ("watcher", "reconciler", "status")}
    processes = [
        await _start(["watcher", "--cluster", CLUSTER, "--context", CLUSTER, "--kubeconfig", kubeconfig,
                      "--lease-duration", "3", *scoped], env, logs["watcher"]),
        await _start(["reconciler", "--kubeconfig", kubeconfig, "--group", f"kto-reconciler-{topic}"],
                     env, logs["reconciler"]),
        await _start(["status-service", "--kubeconfig", kubeconfig, "--group", f"kto-status-{topic}"],
                     env, logs["status"]),
    ]
    try:
        yield logs
    finally:
        for process in processes:
            process.terminate()  # SIGTERM: the batched spans are sent before the process exits
        for process in processes:
            await asyncio.get_running_loop().run_in_executor(None, process.wait, 30)
    assert [p.returncode for p in processes] == [0, 0, 0], [log.read_text() for log in logs.values()]


async def test_a_job_applied_with_a_traceparent_is_one_trace_across_the_three_services(
    pipeline: Pipeline, tmp_path: pathlib.Path,
) -> None:
    topic = pipeline.kafka.jobs_topic
    async with collector() as (received, endpoint), services_as_processes(pipeline, otlp_env(
            pipeline, endpoint, OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=otlp-test"), tmp_path):
        manifest = job("PyTorchJob", "traced", {"Master": (1, "OnFailure"), "Worker": (1, "OnFailure")}, "pytorch")
        manifest["metadata"]["annotations"] = {"kto.dev/traceparent": f"00-{TRACE_ID}-{ROOT_SPAN_ID}-01"}
        manifest["metadata"]["namespace"] = pipeline.namespace
        await Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")("apply", "-f", "-", input=yaml.safe_dump(manifest))
        await pipeline.wait_for("PyTorchJob", "traced", "Succeeded", timeout=60)

    spans = [s for s in received.spans if s.trace_id == TRACE_ID]
    assert {s.service for s in spans} == {"kto-watcher", "kto-reconciler", "kto-status"}, {s.service for s in spans}
    assert all(s.resource["deployment.environment.name"] == "otlp-test" and s.resource["service.instance.id"]
               for s in spans)
    by_id = {s.span_id: s for s in spans}
    key = pipeline.key("PyTorchJob", "traced")

    def children(parent: Span, name: str | None = None) -> list[Span]:
        return [s for s in spans if s.parent_id == parent.span_id and (name is None or s.name == name)]

    # The watcher: the job's first observation continues the trace of `kubectl apply`.
    [observed] = [s for s in spans if s.service == "kto-watcher" and s.name == "watch ADDED PyTorchJob"]
    assert observed.parent_id == ROOT_SPAN_ID
    [published] = children(observed, f"publish {topic}")
    assert published.kind == PRODUCER
    assert published.attributes.items() >= {
        "messaging.system": "kafka", "messaging.destination.name": topic, "messaging.operation.type": "send",
        "messaging.operation.name": "publish", "messaging.kafka.message.key": key,
        "kto.job_key": key, "kto.record.type": "observation",
    }.items(), published.attributes
    partition, offset = published.attributes["messaging.destination.partition.id"], published.attributes["messaging.kafka.offset"]
    assert isinstance(offset, int) and partition.isdigit()
    assert published.attributes["messaging.message.body.size"] > 0

    # Kafka → the reconciler: its process span is the producer's child; the settle hangs under it and
    # links the producer; the pod creates are in the settle, each over the HTTP request it made.
    [processed] = [s for s in children(published) if s.service == "kto-reconciler"]
    assert (processed.name, processed.kind) == (f"process {topic}", CONSUMER)
    assert processed.attributes["messaging.system"] == "kafka"
    assert processed.attributes["messaging.operation.type"] == processed.attributes["messaging.operation.name"] == "process"
    assert processed.attributes["messaging.destination.name"] == topic
    assert processed.attributes["messaging.destination.partition.id"] == partition
    assert processed.attributes["messaging.kafka.offset"] == offset
    assert processed.attributes["messaging.kafka.message.key"] == key
    assert processed.attributes["messaging.consumer.group.name"] == f"kto-reconciler-{topic}"
    settles = [s for s in spans if s.service == "kto-reconciler" and s.name == "reconcile"]
    assert all(by_id[s.parent_id].name == f"process {topic}" and by_id[s.parent_id].service == "kto-reconciler"
               for s in settles)
    assert any((TRACE_ID, published.span_id) in s.links for s in settles)
    creating = [s for s in settles if children(s, "POST pods")]
    assert creating, sorted({s.name for s in spans if s.service == "kto-reconciler"})
    requests = [request for s in creating for create in children(s, "POST pods") for request in children(create)]
    assert all((r.name, r.kind, r.attributes["http.request.method"]) == ("POST", CLIENT, "POST") for r in requests)
    assert all(r.attributes["url.full"].endswith(f"/api/v1/namespaces/{pipeline.namespace}/pods") for r in requests)
    assert [r.attributes["http.response.status_code"] for r in requests].count(201) == 2  # master-0, worker-0
    decided = children(creating[0], f"publish {topic}")
    assert decided and all(s.kind == PRODUCER and s.attributes["messaging.kafka.message.key"] == key for s in decided)

    # The pods' observations → Kafka → the status service, whose settle writes the status.
    status_processed = [s for s in spans if s.service == "kto-status" and s.name == f"process {topic}"]
    assert status_processed and all(s.kind == CONSUMER for s in status_processed)
    for span in status_processed:
        producer = by_id[span.parent_id]
        assert (producer.service, producer.kind, producer.name) == ("kto-watcher", PRODUCER, f"publish {topic}")
        assert span.attributes["messaging.consumer.group.name"] == f"kto-status-{topic}"
        assert span.attributes["messaging.kafka.offset"] == producer.attributes["messaging.kafka.offset"]
    writes = [s for s in spans if s.service == "kto-status" and s.name == "PUT pytorchjobs/status"]
    assert writes
    for write in writes:
        settle = by_id[write.parent_id]
        assert settle.name == "aggregate status"
        assert by_id[settle.parent_id] in status_processed
        assert all(link[0] == TRACE_ID and by_id[link[1]].service == "kto-watcher" for link in settle.links)
        [request] = children(write)
        assert (request.kind, request.attributes["http.response.status_code"]) == (CLIENT, 200)
