"""OpenTelemetry set-up for kto processes, and trace context on Kafka headers.

In: a service name and instance id, and the environment:

* ``KTO_TRACES`` — unset or empty: nothing of kto's own; ``console``: spans
  printed to stdout; ``file:PATH``: one JSON span per line appended to PATH;
* the standard ``OTEL_*`` variables — ``OTEL_TRACES_EXPORTER`` (``otlp``,
  ``console``, ``none``; when unset, OTLP is on as soon as an OTLP endpoint is
  set), ``OTEL_EXPORTER_OTLP_[TRACES_]{ENDPOINT,PROTOCOL,HEADERS,TIMEOUT,
  COMPRESSION,CERTIFICATE,CLIENT_KEY,CLIENT_CERTIFICATE}`` (``http/protobuf``
  or ``grpc``), ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
  ``OTEL_TRACES_SAMPLER[_ARG]``, ``OTEL_PROPAGATORS`` (for the HTTP calls to
  the API server), ``OTEL_SDK_DISABLED``, ``OTEL_BSP_*``.

Without any exporter spans are created non-recording (trace ids still flow
across Kafka, at little cost). A value kto cannot use raises
:class:`TracingConfigError`, whose one-line message names the variable.
Out: the process's :class:`TracerProvider`; the aiohttp hooks that put the
Kubernetes API calls in spans and carry their context to the API server;
:func:`inject` / :func:`extract` that carry the W3C ``traceparent`` /
``tracestate`` headers on Kafka header lists (``list[tuple[str, bytes]]``); :func:`derived`, a parent
context that is a pure function of a seed (one trace for what several processes see of one thing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider, sampling
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    import aiohttp

Headers = list[tuple[str, bytes]]
"""Kafka record headers as aiokafka takes and gives them."""

TRACE_HEADERS = ("traceparent", "tracestate")

_PROPAGATOR = TraceContextTextMapPropagator()


class TracingConfigError(ValueError):
    """A tracing variable (``KTO_TRACES`` or an ``OTEL_*`` one) holds a value kto
    cannot use; the message is one line that names the variable."""


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


EXPORTERS = ("otlp", "console", "none")
"""Values ``OTEL_TRACES_EXPORTER`` may list (comma-separated)."""

PROTOCOLS = ("http/protobuf", "grpc")
"""OTLP transports kto speaks; ``http/protobuf`` is the default."""

SAMPLERS = ("always_on", "always_off", "traceidratio",
            "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio")
"""Values of ``OTEL_TRACES_SAMPLER``; unset means ``always_on`` (every span recorded,
whatever the sampled flag of the context a job's annotation carries)."""

_COMPRESSIONS = {"http/protobuf": ("none", "gzip", "deflate"), "grpc": ("none", "gzip")}
_DEFAULT_ENDPOINTS = {"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"}


@dataclasses.dataclass(frozen=True)
class OtlpSettings:
    """Where and how spans are sent over OTLP, from ``OTEL_EXPORTER_OTLP_*`` (the
    ``…_TRACES_…`` variant of each variable first)."""

    protocol: str = "http/protobuf"
    """``http/protobuf`` or ``grpc``."""
    endpoint: str = "http://localhost:4318/v1/traces"
    """The URL spans go to. HTTP: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as it is, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``; gRPC: the collector's address."""
    headers: tuple[tuple[str, str], ...] = ()
    """Sent with every export (``key=value,…``, values URL-encoded), e.g. a tenant or token."""
    timeout: float = 10.0
    """Seconds one export may take; the variables give milliseconds, as the specification says."""
    compression: str = "none"
    """``none`` or ``gzip`` (HTTP also ``deflate``)."""
    certificate: str | None = None
    """CA certificates that verify an https endpoint (default: the system's)."""
    client_key: str | None = None
    """Private key of the client certificate, for mutual TLS."""
    client_certificate: str | None = None
    """Client certificate chain, for mutual TLS."""


@dataclasses.dataclass(frozen=True)
class TracingSettings:
    """Where a kto process sends its spans; see the module doc for the variables."""

    kto_traces: str = ""
    """``KTO_TRACES``: ``""`` (nothing), ``console`` or ``file:PATH``."""
    otlp: OtlpSettings | None = None
    """OTLP export: on when ``OTEL_TRACES_EXPORTER`` lists ``otlp``, or, that variable
    unset, when an OTLP endpoint variable is set."""
    console: bool = False
    """``OTEL_TRACES_EXPORTER`` lists ``console``."""
    sampler: str = "always_on"
    """One of :data:`SAMPLERS`."""
    sampler_ratio: float = 1.0
    """``OTEL_TRACES_SAMPLER_ARG`` of the ``…traceidratio`` samplers."""

    @property
    def exporting(self) -> bool:
        """Whether any span leaves the process."""
        return bool(self.kto_traces or self.otlp is not None or self.console)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TracingSettings:
        """The settings the environment asks for; :class:`TracingConfigError` names a bad variable."""
        env = os.environ if environ is None else environ

        def get(name: str) -> str:
            return env.get(name, "").strip()

        kto_traces = get("KTO_TRACES")
        if kto_traces and kto_traces != "console" and not (kto_traces.startswith("file:") and kto_traces[5:]):
            raise TracingConfigError(f"KTO_TRACES={kto_traces!r}: expected unset, 'console' or 'file:PATH'")
        _check_pairs("OTEL_RESOURCE_ATTRIBUTES", get("OTEL_RESOURCE_ATTRIBUTES"))
        disabled = get("OTEL_SDK_DISABLED").lower()
        if disabled not in ("", "true", "false"):
            raise TracingConfigError(f"OTEL_SDK_DISABLED={disabled!r}: expected 'true' or 'false'")
        if disabled == "true":
            return cls()
        raw = get("OTEL_TRACES_EXPORTER")
        names = [n.strip().lower() for n in raw.split(",") if n.strip()]
        if any(n not in EXPORTERS for n in names) or ("none" in names and len(names) > 1):
            raise TracingConfigError(
                f"OTEL_TRACES_EXPORTER={raw!r}: kto exports to 'otlp', 'console' or 'none' "
                f"(Jaeger and Tempo take OTLP)")
        endpoint_set = bool(get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or get("OTEL_EXPORTER_OTLP_ENDPOINT"))
        otlp = _otlp_from(get) if ("otlp" in names if names else endpoint_set) else None
        sampler, ratio = _sampler_from(get)
        settings = cls(kto_traces, otlp, "console" in names, sampler, ratio)
        if settings.exporting:
            _check_propagators(get("OTEL_PROPAGATORS"))
        return settings


def _check_pairs(name: str, value: str) -> None:
    """``key=value,…`` (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``)."""
    for item in (i.strip() for i in value.split(",")):
        key, equals, _ = item.partition("=")
        if item and not (equals and key.strip()):
            raise TracingConfigError(f"{name}={value!r}: {item!r} is not key=value")


def _otlp_from(get: Callable[[str], str]) -> OtlpSettings:
    def pick(suffix: str) -> tuple[str, str]:
        """(variable, value) of the traces-specific variable if set, else the general one."""
        for name in (f"OTEL_EXPORTER_OTLP_TRACES_{suffix}", f"OTEL_EXPORTER_OTLP_{suffix}"):
            if get(name):
                return name, get(name)
        return f"OTEL_EXPORTER_OTLP_{suffix}", ""

    protocol_var, protocol = pick("PROTOCOL")
    protocol = protocol or "http/protobuf"
    if protocol not in PROTOCOLS:
        raise TracingConfigError(f"{protocol_var}={protocol!r}: expected 'http/protobuf' or 'grpc'")
    endpoint_var, endpoint = pick("ENDPOINT")
    parsed = urllib.parse.urlsplit(endpoint or _DEFAULT_ENDPOINTS[protocol])
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise TracingConfigError(
            f"{endpoint_var}={endpoint!r}: expected a URL such as "
            f"{_DEFAULT_ENDPOINTS[protocol]}")
    if protocol == "http/protobuf" and endpoint_var != "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
        # The general endpoint is the collector's base URL: each signal has its path under it.
        endpoint = f"{(endpoint or _DEFAULT_ENDPOINTS[protocol]).rstrip('/')}/v1/traces"
    headers_var, headers = pick("HEADERS")
    _check_pairs(headers_var, headers)
    timeout_var, timeout_text = pick("TIMEOUT")
    try:
        timeout = float(timeout_text or "10000") / 1000
    except ValueError:
        timeout = -1.0
    if not timeout > 0:
        raise TracingConfigError(f"{timeout_var}={timeout_text!r}: expected milliseconds, a number above 0")
    compression_var, compression = pick("COMPRESSION")
    compression = (compression or "none").lower()
    if compression not in _COMPRESSIONS[protocol]:
        raise TracingConfigError(
            f"{compression_var}={compression!r}: expected one of {', '.join(_COMPRESSIONS[protocol])}")
    files: list[str | None] = []
    for suffix in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE"):
        var, path = pick(suffix)
        if path and not os.path.isfile(path):
            raise TracingConfigError(f"{var}={path!r}: no such file")
        files.append(path or None)
    return OtlpSettings(
        protocol, endpoint or _DEFAULT_ENDPOINTS[protocol],
        tuple((k.strip(), urllib.parse.unquote(v.strip()))
              for k, _, v in (item.partition("=") for item in headers.split(",") if item.strip())),
        timeout, compression, *files,
    )


def _sampler_from(get: Callable[[str], str]) -> tuple[str, float]:
    sampler = get("OTEL_TRACES_SAMPLER").lower() or "always_on"
    if sampler not in SAMPLERS:
        raise TracingConfigError(f"OTEL_TRACES_SAMPLER={sampler!r}: expected one of {', '.join(SAMPLERS)}")
    arg = get("OTEL_TRACES_SAMPLER_ARG")
    if not arg or not sampler.endswith("traceidratio"):
        return sampler, 1.0
    try:
        ratio = float(arg)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise TracingConfigError(f"OTEL_TRACES_SAMPLER_ARG={arg!r}: expected a ratio from 0 to 1")
    return sampler, ratio


def _check_propagators(value: str) -> None:
    """The propagators of the HTTP calls to the API server must be installed (OpenTelemetry
    looks them up as entry points; Kafka records always carry W3C trace context)."""
    for name in (n.strip() for n in value.split(",")):
        if name and name != "none" and not importlib.metadata.entry_points(group="opentelemetry_propagator",
                                                                             name=name):
            raise TracingConfigError(f"OTEL_PROPAGATORS={value!r}: no propagator {name!r} is installed")


def _sampler(settings: TracingSettings) -> sampling.Sampler:
    ratio = sampling.TraceIdRatioBased(settings.sampler_ratio)
    plain: dict[str, sampling.Sampler] = {
        "always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF, "traceidratio": ratio,
    }
    if settings.sampler.startswith("parentbased_"):
        return sampling.ParentBased(plain[settings.sampler.removeprefix("parentbased_")])
    return plain[settings.sampler]


def _otlp_exporter(otlp: OtlpSettings) -> SpanExporter:
    headers = dict(otlp.headers)
    if otlp.protocol == "grpc":
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        secure = urllib.parse.urlsplit(otlp.endpoint).scheme == "https"
        credentials = None
        if secure:
            def read(path: str | None) -> bytes | None:
                if path is None:
                    return None
                with open(path, "rb") as file:
                    return file.read()

            credentials = grpc.ssl_channel_credentials(
                read(otlp.certificate), read(otlp.client_key), read(otlp.client_certificate))
        return GrpcExporter(
            endpoint=otlp.endpoint, insecure=not secure, credentials=credentials, headers=headers,
            timeout=otlp.timeout,
            compression=grpc.Compression.Gzip if otlp.compression == "gzip" else grpc.Compression.NoCompression,
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(
        endpoint=otlp.endpoint, certificate_file=otlp.certificate, client_key_file=otlp.client_key,
        client_certificate_file=otlp.client_certificate, headers=headers, timeout=otlp.timeout,
        compression=Compression(otlp.compression),
    )


def exporters(settings: TracingSettings) -> list[SpanExporter]:
    """The exporters ``settings`` ask for (none when nothing is exported)."""
    found: list[SpanExporter] = []
    if settings.kto_traces:
        kto = exporter_from_env({"KTO_TRACES": settings.kto_traces})
        if kto is not None:
            found.append(kto)
    if settings.console and settings.kto_traces != "console":
        found.append(ConsoleSpanExporter())
    if settings.otlp is not None:
        found.append(_otlp_exporter(settings.otlp))
    return found


def resource(service_name: str, instance: str) -> Resource:
    """kto's service name and instance id, unless ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` say otherwise (the environment wins)."""
    from_env = OTELResourceDetector().detect().attributes
    return Resource.create({SERVICE_NAME: service_name, SERVICE_INSTANCE_ID: instance, **from_env})


_configured: TracerProvider | None = None
_exporting = False
_configure_lock = threading.Lock()


def configure(
    service_name: str, instance: str, environ: Mapping[str, str] | None = None
) -> TracerProvider:
    """Install the process's tracer provider (once; later calls return the first one).

    Call it at the start of a command; call ``shutdown()`` on the result before
    the process exits so batched spans are sent. Raises :class:`TracingConfigError`
    for a variable kto cannot use.
    """
    global _configured, _exporting
    with _configure_lock:
        if _configured is not None:
            return _configured
        settings = TracingSettings.from_env(environ)
        found = exporters(settings)
        # Without an exporter nothing recorded would go anywhere: spans are then
        # non-recording (ids generated and propagated, no attributes kept), which
        # cost a fifth of a busy worker's CPU when recorded.
        provider = TracerProvider(
            resource=resource(service_name, instance),
            sampler=_sampler(settings) if found else sampling.ALWAYS_OFF,
        )
        for exporter in found:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _configured, _exporting = provider, bool(found)
        return provider


def http_trace_configs() -> list[aiohttp.TraceConfig]:
    """aiohttp hooks for the Kubernetes API client: one CLIENT span per HTTP request
    (per attempt: a retried call shows each try), with the HTTP semantic conventions'
    attributes, and the trace context sent to the API server in ``traceparent``
    (kube-apiserver's own tracing continues it). None unless spans are exported."""
    if not _exporting or _configured is None:
        return []
    from opentelemetry.instrumentation._semconv import _StabilityMode
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    # The stable HTTP attribute names (http.request.method, url.full, http.response.status_code).
    return [create_trace_config(tracer_provider=_configured, sem_conv_opt_in_mode=_StabilityMode.HTTP)]


@contextlib.contextmanager
def untraced_http() -> Iterator[None]:
    """HTTP requests started inside get no span of :func:`http_trace_configs`: a watch
    stream's would end at the response headers and start a trace of its own each time."""
    if not _exporting:
        yield
        return
    from opentelemetry.instrumentation.utils import suppress_http_instrumentation

    with suppress_http_instrumentation():
        yield


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


def derived(seed: str) -> otel_context.Context:
    """A remote parent context whose trace id (and span id) are the SHA-256 of ``seed``: every process
    that derives from the same seed puts its spans in the same trace, with nothing passed between them.
    Sampled, as a job's ``kto.dev/traceparent`` annotation usually is."""
    digest = hashlib.sha256(seed.encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    parent = trace.NonRecordingSpan(trace.SpanContext(trace_id, span_id, is_remote=True,
                                                      trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)))
    return trace.set_span_in_context(parent)
