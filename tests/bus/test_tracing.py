"""Trace context across Kafka headers, the JSON-lines span exporter, and where spans go (KTO_TRACES,
OTEL_*): real OTLP/HTTP and OTLP/gRPC receivers in the test."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import pathlib
from collections.abc import Sequence

import aiohttp.web
import grpc
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from shared import tracing


def test_the_trace_context_crosses_kafka_headers() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("watch") as span:
        headers = tracing.inject([("other", b"x"), ("traceparent", b"stale")])
    assert [k for k, _ in headers].count("traceparent") == 1
    assert ("other", b"x") in headers
    extracted = trace.get_current_span(tracing.extract(headers)).get_span_context()
    assert extracted.trace_id == span.get_span_context().trace_id
    assert extracted.span_id == span.get_span_context().span_id


def test_headers_without_a_trace_give_an_empty_context() -> None:
    assert not trace.get_current_span(tracing.extract([("x", b"y")])).get_span_context().is_valid


def test_the_file_exporter_writes_one_json_span_per_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = tracing.exporter_from_env({"KTO_TRACES": f"file:{path}"})
    assert isinstance(exporter, tracing.JsonLinesSpanExporter)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("a"):
        with provider.get_tracer("test").start_as_current_span("b"):
            pass
    provider.shutdown()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["b", "a"]


def test_no_exporter_unless_asked() -> None:
    assert tracing.exporter_from_env({}) is None


# --- where spans go: KTO_TRACES and the standard OTEL_* variables ---------------------------------


def test_an_otlp_endpoint_alone_turns_otlp_export_on() -> None:
    settings = tracing.TracingSettings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://tempo:4318/"})
    assert settings.otlp == tracing.OtlpSettings("http/protobuf", "http://tempo:4318/v1/traces")
    assert settings.exporting and not settings.console and not settings.kto_traces


@pytest.mark.parametrize(
    ("environ", "otlp"),
    [
        pytest.param({}, None, id="nothing set: nothing exported"),
        pytest.param({"OTEL_TRACES_EXPORTER": "otlp"},
                     tracing.OtlpSettings("http/protobuf", "http://localhost:4318/v1/traces"),
                     id="otlp asked for: the local collector"),
        pytest.param({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None,
                     id="none wins over an endpoint"),
        pytest.param({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None, id="SDK disabled"),
        pytest.param({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example/otlp/traces",
                      "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318"},
                     tracing.OtlpSettings("http/protobuf", "https://c.example/otlp/traces"),
                     id="the traces endpoint is taken as it is"),
        pytest.param({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "otlp,console"},
                     tracing.OtlpSettings("grpc", "http://localhost:4317"), id="grpc: the local collector"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                      "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
                      "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
                      "OTEL_EXPORTER_OTLP_HEADERS": "x-scope-orgid=team%20a, authorization=Bearer t"},
                     tracing.OtlpSettings("grpc", "http://jaeger:4317", (("x-scope-orgid", "team a"),
                                                                        ("authorization", "Bearer t")),
                                          2.5, "gzip"),
                     id="traces-specific variables first; timeout in milliseconds"),
    ],
)
def test_the_otlp_settings_come_from_the_standard_variables(
    environ: dict[str, str], otlp: tracing.OtlpSettings | None,
) -> None:
    assert tracing.TracingSettings.from_env(environ).otlp == otlp


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"KTO_TRACES": "stdout"}, "KTO_TRACES"),
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp,none"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://c/v1/traces"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
          "OTEL_EXPORTER_OTLP_COMPRESSION": "deflate"}, "OTEL_EXPORTER_OTLP_COMPRESSION"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "token"}, "OTEL_EXPORTER_OTLP_HEADERS"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
         "OTEL_EXPORTER_OTLP_CERTIFICATE"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "team=a,oops"}, "OTEL_RESOURCE_ATTRIBUTES"),
        ({"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"),
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"KTO_TRACES": "console", "OTEL_PROPAGATORS": "tracecontext,b4"}, "OTEL_PROPAGATORS"),
    ],
)
def test_a_value_kto_cannot_use_is_named_in_one_line(environ: dict[str, str], named: str) -> None:
    with pytest.raises(tracing.TracingConfigError) as raised:
        tracing.TracingSettings.from_env(environ)
    message = str(raised.value)
    assert message.startswith(f"{named}=") and "\n" not in message, message


def test_the_service_name_is_kto_s_unless_the_environment_names_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod,k8s.cluster.name=a")
    attributes = tracing.resource("kto-reconciler", "r-1").attributes
    assert (attributes["service.name"], attributes["service.instance.id"]) == ("kto-reconciler", "r-1")
    assert attributes["k8s.cluster.name"] == "a"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "reconciler-eu")
    assert tracing.resource("kto-reconciler", "r-1").attributes["service.name"] == "reconciler-eu"


def _one_span() -> list[ReadableSpan]:
    exported: list[ReadableSpan] = []

    class Keep(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            exported.extend(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    provider.get_tracer("test").start_span("publish kto.jobs", kind=trace.SpanKind.PRODUCER).end()
    return exported


async def test_spans_reach_an_otlp_http_receiver_with_the_headers_and_compression_asked_for() -> None:
    got: list[tuple[dict[str, str], trace_service_pb2.ExportTraceServiceRequest]] = []

    async def receive(request: aiohttp.web.Request) -> aiohttp.web.Response:
        assert request.headers["Content-Encoding"] == "gzip"  # sent compressed; aiohttp inflates it
        got.append((dict(request.headers), trace_service_pb2.ExportTraceServiceRequest.FromString(await request.read())))
        return aiohttp.web.Response(body=trace_service_pb2.ExportTraceServiceResponse().SerializeToString(),
                                    content_type="application/x-protobuf")

    app = aiohttp.web.Application()
    app.router.add_post("/custom/traces", receive)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        settings = tracing.TracingSettings.from_env({
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/custom/traces",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-scope-orgid=kto", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        })
        [exporter] = tracing.exporters(settings)
        result = await asyncio.get_running_loop().run_in_executor(None, exporter.export, _one_span())
        exporter.shutdown()
    finally:
        await runner.cleanup()
    assert result == SpanExportResult.SUCCESS
    [(headers, request)] = got
    assert headers["x-scope-orgid"] == "kto"
    assert [s.name for s in request.resource_spans[0].scope_spans[0].spans] == ["publish kto.jobs"]


def test_spans_reach_an_otlp_grpc_receiver() -> None:
    got: list[tuple[dict[str, str], trace_service_pb2.ExportTraceServiceRequest]] = []

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,  # noqa: N802 - the gRPC method
                   context: grpc.ServicerContext) -> trace_service_pb2.ExportTraceServiceResponse:
            got.append((dict(context.invocation_metadata()), request))
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        settings = tracing.TracingSettings.from_env({
            "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_HEADERS": "tenant=kto",
        })
        [exporter] = tracing.exporters(settings)
        assert exporter.export(_one_span()) == SpanExportResult.SUCCESS
        exporter.shutdown()
    finally:
        server.stop(None)
    [(metadata, request)] = got
    assert metadata["tenant"] == "kto"
    assert [s.name for s in request.resource_spans[0].scope_spans[0].spans] == ["publish kto.jobs"]


def test_kto_traces_and_otlp_export_together() -> None:
    settings = tracing.TracingSettings.from_env({"KTO_TRACES": "console", "OTEL_TRACES_EXPORTER": "otlp,console"})
    found = tracing.exporters(settings)
    assert sorted(type(e).__name__ for e in found) == ["ConsoleSpanExporter", "OTLPSpanExporter"]
    for exporter in found:
        exporter.shutdown()
