"""The warmup span over real OTLP/HTTP: jitwatch's tracer provider → a receiver on 127.0.0.1.

The receiver is a stdlib ``ThreadingHTTPServer`` that decodes each POST body with the official
``opentelemetry-proto`` ``ExportTraceServiceRequest``. The provider is built by
:func:`jitwatch.core.tracing.build_tracer_provider` from ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter is
chosen from the environment, as in a worker), and the warmup runs a real compile-only Triton compile
so the span's ``kernels_compiled`` is real.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from jitwatch.core.tracing import (
    ATTR_COMPILE_SECONDS,
    ATTR_DURATION_SECONDS,
    ATTR_KERNELS_COMPILED,
    ATTR_RANK,
    ATTR_STATE,
    SPAN_NAME,
    build_tracer_provider,
)


@dataclass
class Received:
    paths: list[str] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    got_one: threading.Event = field(default_factory=threading.Event)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every span received."""
        out = []
        for req in self.requests:
            for rs in req.resource_spans:
                resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append((resource, span))
        return out


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            req = ExportTraceServiceRequest()
            req.ParseFromString(body)
            received.paths.append(self.path)
            received.content_types.append(self.headers.get("Content-Type", ""))
            received.requests.append(req)
            payload = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            received.got_one.set()

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _attrs(span: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


def test_warmup_span_exported_over_otlp_http(
    otlp_receiver: tuple[str, Received], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    endpoint, received = otlp_receiver
    for var in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "jitwatch-otlp-test")

    provider = build_tracer_provider(resource_attributes={"jitwatch.rank": 3})
    assert provider is not None, "an OTLP endpoint in the environment must enable tracing"

    import torch
    import triton
    import triton.language as tl

    from jitwatch.testing import monitored

    @triton.jit
    def otlp_probe_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    try:
        with monitored("warn", rank=3, journal_dir=tmp_path / "journal", tracer_provider=provider) as h:
            with h.monitor.warmup():
                otlp_probe_kernel.warmup(torch.empty(64, dtype=torch.float32), 64, BLOCK=64, grid=(1,))
    finally:
        provider.shutdown()

    # warmup_span() force-flushes right after the span ends, so the export already happened.
    assert received.got_one.wait(10), "no OTLP export reached the receiver"
    assert received.paths == ["/v1/traces"] * len(received.paths)
    assert all(ct == "application/x-protobuf" for ct in received.content_types)
    spans = received.spans()
    assert [s.name for _, s in spans] == [SPAN_NAME]
    resource, span = spans[0]
    assert resource["service.name"] == "jitwatch-otlp-test"
    assert resource["jitwatch.rank"] == 3
    assert span.status.code == Status.STATUS_CODE_OK
    attrs = _attrs(span)
    assert attrs[ATTR_STATE] == "complete"
    assert attrs[ATTR_RANK] == 3
    assert attrs[ATTR_KERNELS_COMPILED] == 1
    assert attrs[ATTR_COMPILE_SECONDS] > 0
    assert attrs[ATTR_DURATION_SECONDS] >= attrs[ATTR_COMPILE_SECONDS]
    assert span.end_time_unix_nano > span.start_time_unix_nano
    duration = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9
    assert attrs[ATTR_DURATION_SECONDS] <= duration


def test_failed_warmup_span_is_error(otlp_receiver: tuple[str, Received], monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint, received = otlp_receiver
    for var in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    provider = build_tracer_provider()
    assert provider is not None

    from jitwatch.worker import create_monitor

    mon = create_monitor(mode="warn", tracer_provider=provider)  # not installed: no journal, no hooks
    try:
        with pytest.raises(RuntimeError, match="boom"), mon.warmup():
            raise RuntimeError("boom")
    finally:
        provider.shutdown()
    assert received.got_one.wait(10)
    (_, span), *rest = received.spans()
    assert not rest
    assert span.name == SPAN_NAME
    assert span.status.code == Status.STATUS_CODE_ERROR
    assert _attrs(span)[ATTR_STATE] == "failed"
