"""jitwatch.core.tracing: the ``jitwatch.warmup`` span (InMemorySpanExporter, no network)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from jitwatch.core.tracing import (
    ATTR_COMPILE_SECONDS,
    ATTR_DURATION_SECONDS,
    ATTR_KERNELS_COMPILED,
    ATTR_RANK,
    ATTR_STATE,
    SPAN_NAME,
    build_tracer_provider,
    warmup_span,
)
from jitwatch.testing import fresh_kernel_cache, monitored

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def test_warmup_span_ok_with_attributes(exporter, tmp_path, triton_cache) -> None:
    """A real warmup with one compile-only compile: one OK span carrying the warmup figures."""
    from tests.backends.triton.test_monitor_triton import compile_scale, mon_scale

    fresh_kernel_cache(mon_scale)
    provider = build_tracer_provider(env={}, resource_attributes={"jitwatch.rank": 2}, span_exporter=exporter)
    with monitored(rank=2, journal_dir=tmp_path / "j", triton_cache_dir=triton_cache, tracer_provider=provider) as h:
        with h.monitor.warmup(model="tiny"):
            compile_scale()
    (span,) = exporter.get_finished_spans()
    assert span.name == SPAN_NAME
    assert span.status.status_code is StatusCode.OK
    attrs = dict(span.attributes or {})
    assert attrs[ATTR_STATE] == "complete"
    assert attrs[ATTR_RANK] == 2 and attrs["model"] == "tiny"
    assert attrs[ATTR_KERNELS_COMPILED] == 1
    assert attrs[ATTR_COMPILE_SECONDS] > 0
    assert attrs[ATTR_DURATION_SECONDS] >= attrs[ATTR_COMPILE_SECONDS]
    assert span.resource.attributes["jitwatch.rank"] == 2
    assert span.resource.attributes["service.name"] == "jitwatch"
    assert span.parent is None


def test_failed_warmup_span_is_error(exporter, tmp_path) -> None:
    provider = build_tracer_provider(env={}, span_exporter=exporter)
    with monitored(journal_dir=tmp_path / "j", tracer_provider=provider) as h:
        with pytest.raises(OSError):
            with h.monitor.warmup():
                raise OSError("weights missing")
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert "weights missing" in (span.status.description or "")
    assert span.attributes[ATTR_STATE] == "failed"
    assert [e.name for e in span.events] == ["exception"]


def test_off_mode_emits_no_span(exporter, tmp_path) -> None:
    provider = build_tracer_provider(env={}, span_exporter=exporter)
    with monitored("off", journal_dir=tmp_path / "j", tracer_provider=provider) as h:
        with h.monitor.warmup():
            pass
    assert exporter.get_finished_spans() == ()


def test_sdk_disabled_means_no_provider_and_no_span(exporter) -> None:
    assert build_tracer_provider(env={"OTEL_SDK_DISABLED": "true"}, span_exporter=exporter) is None
    assert build_tracer_provider(env={"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "console"}) is None
    with warmup_span(None, {ATTR_RANK: 0}) as result:
        result.attributes["x"] = 1
    assert exporter.get_finished_spans() == ()


def test_sdk_disabled_through_monitor(monkeypatch, exporter, tmp_path) -> None:
    """Monitor builds its provider from the environment when none is passed."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    with monitored(journal_dir=tmp_path / "j", tracer_provider=None) as h:
        assert h.monitor._tracer_provider is None


def test_traceparent_parents_the_span(exporter) -> None:
    provider = build_tracer_provider(env={}, span_exporter=exporter)
    env = {"TRACEPARENT": f"00-{TRACE_ID}-{PARENT_ID}-01", "TRACESTATE": "vendor=x"}
    with warmup_span(provider, {ATTR_RANK: 0}, env=env):
        pass
    (span,) = exporter.get_finished_spans()
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID
    assert span.parent.is_remote
    assert span.context.trace_state.get("vendor") == "x"


def test_malformed_traceparent_starts_a_new_trace(exporter) -> None:
    provider = build_tracer_provider(env={}, span_exporter=exporter)
    with warmup_span(provider, {}, env={"TRACEPARENT": "garbage"}):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is None


def _processors(provider) -> list:
    return list(provider._active_span_processor._span_processors)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"OTEL_TRACES_EXPORTER": "none"}, None),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, None),  # unknown: logged, tracing off
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "Console,otlp"}, "console"),  # first of a list
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, None),
    ],
)
def test_exporter_selection(env: dict[str, str], expected: str | None) -> None:
    provider = build_tracer_provider(env=env)
    if expected is None:
        assert provider is None
        return
    try:
        (proc,) = _processors(provider)
        if expected == "console":
            assert isinstance(proc, SimpleSpanProcessor)
            assert isinstance(proc.span_exporter, ConsoleSpanExporter)
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            assert isinstance(proc, BatchSpanProcessor)
            assert isinstance(proc.span_exporter, OTLPSpanExporter)
    finally:
        provider.shutdown()


def test_service_name_from_env(monkeypatch) -> None:
    """jitwatch's default ``service.name=jitwatch`` yields to ``OTEL_SERVICE_NAME``."""
    monkeypatch.setenv("OTEL_SERVICE_NAME", "worker-a")
    provider = build_tracer_provider(span_exporter=InMemorySpanExporter())
    assert provider is not None
    assert provider.resource.attributes["service.name"] == "worker-a"
