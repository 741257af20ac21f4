"""Journal events off-host as OTLP log records, received by a real OTLP/HTTP receiver on 127.0.0.1.

No ``otelcol``/``otelcol-contrib`` binary is obtainable from the package registries this project
uses (PyPI, Debian, npm), so the receiving side is a stdlib ``ThreadingHTTPServer`` that decodes
each POST with the official ``opentelemetry-proto`` ``ExportLogsServiceRequest`` — the Collector's
OTLP/HTTP receiver contract (``POST /v1/logs``, protobuf body, ``ExportLogsServiceResponse``). The
Collector pipeline itself (``dashboards/otel/collector.yml``) is validated structurally in
test_collector_config.py.

1. a worker process (jitwatch.install from the environment: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
   ``OTEL_SERVICE_NAME``, ranks) with four serving compiles: every journal event arrives, with the
   resource attributes and per-record attributes;
2. the collector down: nothing blocks, every event is dropped and counted in the journal and in
   ``jitwatch_export_dropped_events_total``;
3. a collector too slow for the burst: the bounded queue drops and counts the overflow.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto.collector.logs.v1.logs_service_pb2")

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.export.otlp import OtlpEventExporter
from jitwatch.store.journal import Journal
from jitwatch.store.writer import JournalWriter
from jitwatch.testing import free_port
from tests._paths import ROOT

WORKER = Path(__file__).resolve().parent / "fleet_worker.py"


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass
class Received:
    paths: list[str] = field(default_factory=list)
    requests: list[ExportLogsServiceRequest] = field(default_factory=list)
    bytes_in: int = 0
    delay_s: float = 0.0

    def records(self) -> list[tuple[dict[str, Any], Any]]:
        out = []
        for req in self.requests:
            for rl in req.resource_logs:
                resource = {kv.key: _value(kv.value) for kv in rl.resource.attributes}
                for sl in rl.scope_logs:
                    out.extend((resource, rec) for rec in sl.log_records)
        return out


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.bytes_in += len(body)
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            req = ExportLogsServiceRequest()
            req.ParseFromString(body)
            time.sleep(received.delay_s)
            received.paths.append(self.path)
            received.requests.append(req)
            out = ExportLogsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_worker_events_reach_the_receiver_with_resource_attributes(
    receiver: tuple[str, Received], tmp_path: Path
) -> None:
    endpoint, received = receiver
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JITWATCH_", "TRITON_"))}
    env.update(
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_SERVICE_NAME="fleet-worker",
        JITWATCH_EVENTS_EXPORTER="otlp",
        OTEL_TRACES_EXPORTER="none",
        JITWATCH_RANK="3",
        JITWATCH_TP_RANK="1",
        TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
        TRITON_DEFAULT_FP_FUSION="1",
    )
    proc = subprocess.run(
        [sys.executable, str(WORKER), "record", str(tmp_path / "journal")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = received.records()
    assert set(received.paths) == {"/v1/logs"}
    resource, _ = records[0]
    assert resource["service.name"] == "fleet-worker"
    assert resource["jitwatch.rank"] == 3 and resource["jitwatch.tp_rank"] == 1
    assert isinstance(resource["host.name"], str) and resource["process.pid"] > 0
    assert resource["jitwatch.backends"] == ["all"]
    names = [r.event_name for _, r in records]
    assert names.count("jitwatch.compile") == 4
    assert {"jitwatch.worker_start", "jitwatch.warmup_start", "jitwatch.warmup_complete"} <= set(names)
    compiles = [r for _, r in records if r.event_name == "jitwatch.compile"]
    for rec in compiles:
        attrs = {kv.key: _value(kv.value) for kv in rec.attributes}
        assert attrs["jitwatch.phase"] == "serving" and attrs["jitwatch.backend"] == "triton"
        assert attrs["jitwatch.kernel"] == "slot_mapping" and attrs["jitwatch.cache_hit"] is False
        assert attrs["jitwatch.duration_seconds"] > 0 and attrs["jitwatch.key"]
        detail = json.loads(attrs["jitwatch.attrs"])
        assert "specialization_data" not in detail and detail["cache_key"]
        assert "request_id" in detail and attrs["jitwatch.request_id"] == str(detail["request_id"])
        assert rec.severity_text == "WARN" and rec.time_unix_nano > 0
        assert "slot_mapping" in rec.body.string_value
    # the journal has the same events, and no export drop was counted
    with Journal(tmp_path / "journal", readonly=True) as j:
        assert not j.backend_counter("export_dropped")
        assert len(j.events(kind=EventKind.COMPILE, limit=100)) == 4


def _events(n: int) -> list[Event]:
    return [
        Event.now(
            EventKind.COMPILE, backend="triton", kernel=f"k{i}", key=f"key{i}", phase=Phase.SERVING, duration_s=0.1
        )
        for i in range(n)
    ]


def test_collector_down_drops_and_counts(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    exporter = OtlpEventExporter(
        {"host.name": "test"},
        log_exporter=OTLPLogExporter(endpoint=f"http://127.0.0.1:{port}/v1/logs", timeout=1),
        schedule_delay_ms=50,
    )
    writer = JournalWriter(tmp_path / "journal", exporters=[exporter], interval_s=0.05)
    t0 = time.monotonic()
    for ev in _events(20):
        assert writer.submit(ev)
    assert writer.flush(10)  # journaling is not held up by the dead collector
    writer.close(timeout=15)
    assert time.monotonic() - t0 < 30
    assert exporter.dropped_total == 20 and exporter.exported_total == 0
    with Journal(tmp_path / "journal", readonly=True) as j:
        assert j.backend_counter("export_dropped") == {("otlp", 0): 20.0}
        assert len(j.events(kind=EventKind.COMPILE, limit=100)) == 20  # the journal has them all
        from jitwatch.views.metrics import journal_families

        families = {f.name: f for f in journal_families(j)}
    (sample,) = families["jitwatch_export_dropped_events"].samples
    assert sample.labels == {"exporter": "otlp", "rank": "0"} and sample.value == 20.0


def test_slow_collector_overflow_is_bounded_and_counted(receiver: tuple[str, Received], tmp_path: Path) -> None:
    endpoint, received = receiver
    received.delay_s = 1.0
    exporter = OtlpEventExporter(
        {}, log_exporter=OTLPLogExporter(endpoint=f"{endpoint}/v1/logs", timeout=10), max_queue=5, schedule_delay_ms=50
    )
    exporter.export(_events(50))
    exporter.shutdown()
    assert exporter.overflow_total == 45 and exporter.exported_total == 5
    assert exporter.dropped_total == 45
    assert len(received.records()) == 5


_EXIT_SCRIPT = """
import sys
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from jitwatch.core.events import Event, EventKind
from jitwatch.export.otlp import OtlpEventExporter
x = OtlpEventExporter({}, log_exporter=OTLPLogExporter(endpoint=sys.argv[1], timeout=30))
x.export([Event.now(EventKind.COMPILE, kernel=f"k{i}") for i in range(5)])
"""  # exits without shutdown(): what a host that never calls jitwatch.uninstall() does


def _exit_run(endpoint: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, endpoint], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return time.monotonic() - t0


def test_exit_without_uninstall_sends_queued_records(receiver: tuple[str, Received]) -> None:
    endpoint, received = receiver
    _exit_run(f"{endpoint}/v1/logs")
    assert len(received.records()) == 5


def test_exit_is_not_held_by_a_dead_collector() -> None:
    """A 30 s export timeout and nothing listening: the exit flush gives up after 2 s (the import
    of torch/triton-free jitwatch and the SDK take the rest)."""
    baseline = _exit_run(f"http://127.0.0.1:{free_port()}/v1/logs")
    assert baseline < 25  # well under the 30 s export timeout the SDK's own atexit would wait


class _BrokenExporter:
    """An exporter whose every call raises: the writer must journal on regardless."""

    name = "broken"
    dropped_total = 0

    def export(self, events: Any) -> None:
        raise RuntimeError("exporter bug")

    def shutdown(self) -> None:
        raise RuntimeError("exporter bug at shutdown")


def test_a_failing_exporter_never_stops_the_journal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    writer = JournalWriter(tmp_path / "journal", exporters=[_BrokenExporter()], interval_s=0.05)
    with caplog.at_level("ERROR", logger="jitwatch.store.writer"):
        for _ in range(3):
            for ev in _events(5):
                assert writer.submit(ev)
            assert writer.flush(10)
        writer.close()
    with Journal(tmp_path / "journal", readonly=True) as j:
        assert len(j.events(kind=EventKind.COMPILE, limit=100)) == 15
    assert writer.dropped_total == 0
    assert len([r for r in caplog.records if "exporter failed" in r.getMessage()]) == 1  # logged once
