"""Traces of thresher's work in OpenTelemetry's terms, for an operator's tracing backend
(Jaeger, Tempo, Honeycomb): a span per HTTP request of the service, per job and per
shard attempt (rows, bytes, attempt), one tree — a job submitted with a `traceparent`
joins the caller's trace, its shards the job's, in whatever process runs them.

On with `pip install 'thresher[tracing]'` and OpenTelemetry's own environment:
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
`OTEL_TRACES_EXPORTER=otlp`) sends spans with the standard OTLP exporter (HTTP/protobuf),
`OTEL_SERVICE_NAME` names the service (`thresher` by default). Off, every call here is a
no-op costing a dictionary look-up. A trace crosses processes as W3C `traceparent` text
(in the job's spec, in the workers' setup); each worker flushes its spans after every
shard, so a worker that exits (or is killed after) loses none it finished.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Span", "configure", "current_traceparent", "flush", "span"]

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_state: dict[str, Any] = {}  # "tracer" once configured: None when off


class Span:
    """What a `span` block may say of its span; nothing when tracing is off."""

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner

    def set(self, **attributes: Any) -> None:
        if self._inner is not None:
            for key, value in attributes.items():
                if value is not None:
                    self._inner.set_attribute(f"thresher.{key}", value)

    def rename(self, name: str) -> None:
        if self._inner is not None:
            self._inner.update_name(name)

    def failed(self, exc: BaseException) -> None:
        if self._inner is not None:
            from opentelemetry.trace import Status, StatusCode

            self._inner.record_exception(exc)
            self._inner.set_status(Status(StatusCode.ERROR, str(exc)))


def configure(exporter: Any = None) -> bool:
    """Set this process's tracer up: with `exporter` (a test's in-memory one) spans go
    there as they end (it replaces what was set: a test's); else to OTLP when the
    environment asks for it. Returns whether tracing is on. Called once a process;
    later calls without an exporter change nothing."""
    if "tracer" in _state and exporter is None:
        return _state["tracer"] is not None
    wanted = exporter is not None or _asked_for()
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        wanted = False
    if not wanted:
        _state["tracer"] = None
        return False
    name = os.environ.get("OTEL_SERVICE_NAME", "thresher")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _state["provider"] = provider
    _state["tracer"] = trace.get_tracer("thresher", tracer_provider=provider)
    return True


def _asked_for() -> bool:
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "")
    if exporter == "none":
        return False
    return exporter == "otlp" or any(os.environ.get(v) for v in _ENDPOINTS)


@contextmanager
def span(name: str, parent: str | None = None, **attributes: Any) -> Iterator[Span]:
    """A span named `name` for the block, a child of the W3C `parent` traceparent (else
    of the span current here, else a new trace), with `attributes` (as `thresher.*`)."""
    configure()
    tracer = _state["tracer"]
    if tracer is None:
        yield Span()
        return
    context = _context_of(parent)
    with tracer.start_as_current_span(name, context=context) as inner:
        handle = Span(inner)
        handle.set(**attributes)
        try:
            yield handle
        except BaseException as exc:
            handle.failed(exc)
            raise


def current_traceparent() -> str | None:
    """The current span's W3C `traceparent`, to carry into another process; None when
    tracing is off or no span is current."""
    if _state.get("tracer") is None:
        return None
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def flush() -> None:
    """Send the spans this process has ended (a worker after each shard)."""
    provider = _state.get("provider")
    if provider is not None:
        provider.force_flush()


def _context_of(parent: str | None) -> Any:
    if not parent:
        return None  # the current span's, if any
    from opentelemetry.propagate import extract

    return extract({"traceparent": parent})
