"""Trace context across Kafka headers, and the JSON-lines span exporter."""

from __future__ import annotations

import json
import pathlib

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

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
