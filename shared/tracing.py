"""OpenTelemetry set-up for kto processes, and trace context on Kafka headers.

In: a service name and instance id, and the ``KTO_TRACES`` environment variable:
unset or empty → spans are created non-recording (so trace ids still flow
across Kafka, at little cost) and not exported; ``console`` → printed to stdout; ``file:PATH`` → one JSON span
per line appended to PATH.
Out: the process's :class:`TracerProvider`; :func:`inject` / :func:`extract`
that carry the W3C ``traceparent`` / ``tracestate`` headers on Kafka header
lists (``list[tuple[str, bytes]]``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider, sampling
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

Headers = list[tuple[str, bytes]]
"""Kafka record headers as aiokafka takes and gives them."""

TRACE_HEADERS = ("traceparent", "tracestate")

_PROPAGATOR = TraceContextTextMapPropagator()


class TracingConfigError(ValueError):
    """``KTO_TRACES`` holds a value that is not unset, ``console`` or ``file:PATH``."""


class JsonLinesSpanExporter(SpanExporter):
    """Appends each finished span as one line of JSON to a file."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(json.loads(span.to_json(indent=None)), separators=(",", ":"))
                 for span in spans]
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            self._file.write("".join(line + "\n" for line in lines))
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True


def exporter_from_env(environ: Mapping[str, str] | None = None) -> SpanExporter | None:
    """The exporter ``KTO_TRACES`` asks for, or None."""
    env = os.environ if environ is None else environ
    value = env.get("KTO_TRACES", "").strip()
    if not value:
        return None
    if value == "console":
        return ConsoleSpanExporter()
    if value.startswith("file:") and len(value) > len("file:"):
        path = value[len("file:"):]
        try:
            return JsonLinesSpanExporter(path)
        except OSError as exc:
            raise TracingConfigError(f"KTO_TRACES={value!r}: cannot open {path}: {exc}") from None
    raise TracingConfigError(f"KTO_TRACES={value!r}: expected unset, 'console' or 'file:PATH'")


_configured: TracerProvider | None = None
_configure_lock = threading.Lock()


def configure(
    service_name: str, instance: str, environ: Mapping[str, str] | None = None
) -> TracerProvider:
    """Install the process's tracer provider (once; later calls return the first one).

    Call it at the start of a command; call ``shutdown()`` on the result before
    the process exits so batched spans are written.
    """
    global _configured
    with _configure_lock:
        if _configured is not None:
            return _configured
        exporter = exporter_from_env(environ)
        # Without an exporter nothing recorded would go anywhere: spans are then
        # non-recording (ids generated and propagated, no attributes kept), which
        # cost a fifth of a busy worker's CPU when recorded. With one, every span
        # is recorded, whatever the sampled flag of its parent.
        provider = TracerProvider(
            resource=Resource.create(
                {"service.name": service_name, "service.instance.id": instance}
            ),
            sampler=sampling.ALWAYS_ON if exporter is not None else sampling.ALWAYS_OFF,
        )
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _configured = provider
        return provider


def inject(
    headers: Sequence[tuple[str, bytes]] | None = None,
    context: otel_context.Context | None = None,
) -> Headers:
    """``headers`` plus the trace context (current one unless given) as W3C headers.

    Existing ``traceparent`` / ``tracestate`` entries are replaced.
    """
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    kept = [(k, v) for k, v in (headers or ()) if k.lower() not in TRACE_HEADERS]
    return kept + [(k, v.encode("ascii")) for k, v in carrier.items()]


def extract(headers: Sequence[tuple[str, bytes]] | None) -> otel_context.Context:
    """The trace context carried by Kafka headers (an empty context if none)."""
    carrier: dict[str, str] = {}
    for key, value in headers or ():
        if key.lower() in TRACE_HEADERS and value is not None:
            try:
                carrier[key.lower()] = value.decode("ascii")
            except UnicodeDecodeError:
                continue
    return _PROPAGATOR.extract(carrier)
