"""OpenTelemetry tracing for warmup: one ``jitwatch.warmup`` span per worker.

The span's successful end *is* the "warmup complete" signal: name ``jitwatch.warmup``, status
``OK``, attribute ``jitwatch.warmup.state = "complete"`` plus kernels compiled, compile seconds and
duration (upstream is deprecating span events, so nothing relies on an event). A failed warmup ends
the span with status ``ERROR`` and ``jitwatch.warmup.state = "failed"``.

Configuration comes from the standard OpenTelemetry variables:

* ``OTEL_SDK_DISABLED=true`` — no provider, no span.
* ``OTEL_TRACES_EXPORTER`` — ``otlp`` (OTLP/HTTP protobuf, endpoint from
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``OTEL_EXPORTER_OTLP_ENDPOINT``), ``console`` or ``none``.
  Unset: ``otlp`` when an OTLP endpoint variable is set, else ``none``. This variable is only read by
  the SDK's auto-configurator, so jitwatch reads it itself.
* ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` — via ``Resource.create()``.
* ``TRACEPARENT`` (W3C, as vLLM and other launchers pass it) — the span joins that trace.

jitwatch builds a *private* ``TracerProvider`` and never replaces the global one (vLLM owns that),
and calls ``force_flush()`` right after the span ends: a SIGKILLed worker never runs atexit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from jitwatch._version import __version__
from jitwatch.text import logger

log = logger(__name__)

SPAN_NAME = "jitwatch.warmup"
ATTR_STATE = "jitwatch.warmup.state"
ATTR_KERNELS_COMPILED = "jitwatch.warmup.kernels_compiled"
ATTR_COMPILE_SECONDS = "jitwatch.warmup.compile_seconds"
ATTR_DURATION_SECONDS = "jitwatch.warmup.duration_seconds"
ATTR_RANK = "jitwatch.rank"


def _exporter_name(env: Mapping[str, str]) -> str:
    name = (env.get("OTEL_TRACES_EXPORTER") or "").strip().lower()
    if name:
        return name.split(",")[0].strip()
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return "none"


def build_tracer_provider(
    env: Mapping[str, str] | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    span_exporter: Any | None = None,
) -> Any | None:
    """A private SDK ``TracerProvider`` configured from ``env``, or ``None`` when tracing is off.

    ``span_exporter`` overrides the environment (tests pass an ``InMemorySpanExporter``; it is
    attached with a ``SimpleSpanProcessor``). Unknown exporter names are logged and treated as
    ``none``. Never raises.
    """
    env = os.environ if env is None else env
    try:
        if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
            return None
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        attrs: dict[str, Any] = {"service.name": "jitwatch"} if not env.get("OTEL_SERVICE_NAME") else {}
        attrs.update(resource_attributes or {})
        provider = TracerProvider(resource=Resource.create(attrs))
        if span_exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(span_exporter))
            return provider
        name = _exporter_name(env)
        if name == "none":
            return None
        if name == "console":
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            log.warning("jitwatch: OTEL_TRACES_EXPORTER=%r is not one of otlp, console, none: tracing off", name)
            return None
        return provider
    except Exception as exc:  # noqa: BLE001 - tracing must never stop a worker
        log.warning("jitwatch: tracing disabled (%s: %s)", type(exc).__name__, exc)
        return None


@dataclass
class WarmupSpanResult:
    """Filled in by the caller before the span ends; becomes span attributes."""

    attributes: dict[str, Any] = field(default_factory=dict)


@contextmanager
def warmup_span(
    provider: Any | None,
    attributes: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> Iterator[WarmupSpanResult]:
    """Wrap warmup in a ``jitwatch.warmup`` span (a no-op when ``provider`` is ``None``).

    The caller adds final attributes to the yielded result; on normal exit the span ends with
    status OK and ``jitwatch.warmup.state=complete``, on an exception with status ERROR. The
    exception is re-raised. The provider is flushed immediately after.
    """
    result = WarmupSpanResult()
    if provider is None:
        yield result
        return
    env = os.environ if env is None else env
    from opentelemetry.propagate import extract
    from opentelemetry.trace import Status, StatusCode

    carrier = {}
    if env.get("TRACEPARENT"):
        carrier["traceparent"] = env["TRACEPARENT"]
        if env.get("TRACESTATE"):
            carrier["tracestate"] = env["TRACESTATE"]
    context = extract(carrier) if carrier else None
    tracer = provider.get_tracer("jitwatch", __version__)
    span = tracer.start_span(SPAN_NAME, context=context, attributes=dict(attributes), start_time=time.time_ns())
    try:
        yield result
    except BaseException as exc:
        span.set_attribute(ATTR_STATE, "failed")
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.record_exception(exc)
        raise
    else:
        span.set_attributes({**result.attributes, ATTR_STATE: "complete"})
        span.set_status(Status(StatusCode.OK))
    finally:
        span.end()
        try:
            provider.force_flush(5_000)
        except Exception as exc:  # noqa: BLE001
            log.warning("jitwatch: span flush failed: %s", exc)
