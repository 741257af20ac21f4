"""Benchmark 8: the figures behind docs/fleet.md's sizing for 1,000 workers.

Everything real on this machine: a monitored worker (this process) compiling real Triton kernels
with the compile-only driver, its journal writer exporting every event as OTLP log records to an
OTLP/HTTP receiver on 127.0.0.1 (stdlib HTTP server decoding ``opentelemetry-proto``), the
sidecar's metrics built from that journal.

* **startup** — one worker start: warmup with ``--compiles`` distinct compiles, one request; events
  journaled, their rate during warmup, journal bytes per event (database + WAL after the writer
  closed, divided by events), OTLP bytes per event on the wire (protobuf, and gzip as
  ``OTEL_EXPORTER_OTLP_COMPRESSION=gzip`` sends it);
* **export** — ``--burst`` compile events (the startup's, keys varied) through one
  ``OtlpEventExporter``: writer-thread CPU per event (``time.thread_time`` around ``export``) and
  wall time until the receiver has them all (events/s one worker can ship); the same events
  written to a journal in the writer's batches: bytes per event at scale (after a checkpoint);
* **scrape** — series (sample lines) and bytes of one sidecar's ``/metrics`` for the startup
  journal (1 rank) and for a journal of ``--ranks`` ranks x ``--kernels`` kernels (a big host);
* **manifest** — bytes per entry of the startup's manifest (what Redis or a directory holds per
  host, and a merged fleet manifest per distinct key).

Run: ``python benchmarks/bench_fleet.py --out results/cpu/fleet.json`` (``--smoke`` for seconds).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import scratch_dir, write_result


class _Receiver:
    """OTLP/HTTP logs receiver on 127.0.0.1: counts requests, body bytes and records."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
            ExportLogsServiceResponse,
        )

        self.bytes = 0
        self.records = 0
        self.requests = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                wire = len(body)
                if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                    body = gzip.decompress(body)
                req = ExportLogsServiceRequest()
                req.ParseFromString(body)
                n = sum(len(sl.log_records) for rl in req.resource_logs for sl in rl.scope_logs)
                with receiver.lock:
                    receiver.bytes += wire
                    receiver.records += n
                    receiver.requests += 1
                out = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/logs"

    def reset(self) -> None:
        with self.lock:
            self.bytes = self.records = self.requests = 0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _exporter(endpoint: str, gz: bool = False) -> Any:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    from jitwatch.export.otlp import OtlpEventExporter

    resource = {"host.name": "gpu-node-0001", "process.pid": os.getpid(), "jitwatch.rank": 0, "jitwatch.tp_rank": 0}
    compression = Compression.Gzip if gz else Compression.NoCompression
    return OtlpEventExporter(
        resource,
        log_exporter=OTLPLogExporter(endpoint=endpoint, compression=compression, timeout=10),
        max_queue=1_000_000,
        env={"OTEL_SERVICE_NAME": "vllm-worker"},
    )


def _journal_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("journal.db*") if p.is_file())


def bench_startup(compiles: int, tmp: Path, receiver: _Receiver) -> tuple[dict[str, Any], list[Any], Path]:
    import _kernels

    import jitwatch
    from jitwatch.config import Settings
    from jitwatch.core.identity import WorkerIdentity
    from jitwatch.store.writer import JournalWriter
    from jitwatch.testing import compile_only_driver, fresh_triton_cache, read_events
    from jitwatch.worker import create_monitor

    journal = tmp / "startup-journal"
    exporter = _exporter(receiver.endpoint)
    writer = JournalWriter(journal, exporters=[exporter])
    with fresh_triton_cache(tmp / "triton-cache"), compile_only_driver(90):
        run = _kernels.make_launcher("cpu")
        _kernels.clear_memory_caches()
        t0 = time.perf_counter()
        mon = create_monitor(Settings.from_env({}), identity=WorkerIdentity(rank=0), sink=writer).install()
        try:
            with mon.warmup():
                tw = time.perf_counter()
                for name, block, warps in _kernels.compile_plan(compiles):
                    run(name, block, warps, False)
                warm_s = time.perf_counter() - tw
            with mon.request():
                pass
            mon.flush()
        finally:
            mon.uninstall()  # closes the writer: the exporter flushes on the writer thread
        total_s = time.perf_counter() - t0
    del jitwatch
    events = read_events(journal)
    compile_events = [e for e in events if e.kind.value == "compile"]
    result = {
        "compiles": len(compile_events),
        "events": len(events),
        "events_by_kind": {
            k: sum(1 for e in events if e.kind.value == k) for k in sorted({e.kind.value for e in events})
        },
        "warmup_s": warm_s,
        "startup_s": total_s,
        "events_per_s_during_warmup": len(compile_events) / warm_s if warm_s else None,
        "journal_bytes_per_event": _journal_bytes(journal) / max(1, len(events)),
        "otlp_records": receiver.records,
        "otlp_requests": receiver.requests,
        "otlp_bytes_per_event": receiver.bytes / max(1, receiver.records),
        "export_dropped": exporter.dropped_total,
    }
    receiver.reset()
    gz = _exporter(receiver.endpoint, gz=True)
    gz.export(events)
    gz.shutdown()
    result["otlp_gzip_bytes_per_event"] = receiver.bytes / max(1, receiver.records)
    receiver.reset()
    return result, compile_events, journal


def bench_export(template: list[Any], burst: int, receiver: _Receiver, tmp: Path) -> dict[str, Any]:
    events = [
        t.model_copy(update={"key": f"{t.key}#{i}", "ts": t.ts + i * 1e-4})
        for i in range(burst // max(1, len(template)) + 1)
        for t in template
    ][:burst]
    exporter = _exporter(receiver.endpoint)
    c0, w0 = time.thread_time(), time.perf_counter()
    for i in range(0, len(events), 512):  # the writer's batch size
        exporter.export(events[i : i + 512])
    cpu = time.thread_time() - c0
    exporter.force_flush(120)
    wall = time.perf_counter() - w0
    exporter.shutdown()
    from jitwatch.store.journal import Journal

    journal = tmp / "burst-journal"
    with Journal(journal, retention_events=len(events) + 1) as j:
        for i in range(0, len(events), 512):
            j.write(events[i : i + 512])
        j._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out = {
        "journal_bytes_per_event": _journal_bytes(journal) / len(events),
        "events": len(events),
        "writer_thread_cpu_us_per_event": cpu / len(events) * 1e6,
        "wall_s_until_delivered": wall,
        "events_per_s_delivered": receiver.records / wall if wall else None,
        "delivered": receiver.records,
        "dropped": exporter.dropped_total,
    }
    receiver.reset()
    return out


def _scrape(journal_dir: Path) -> dict[str, Any]:
    from prometheus_client import generate_latest

    from jitwatch.views.metrics import make_registry

    body = generate_latest(make_registry(journal_dir)).decode()
    samples = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
    return {"series": len(samples), "bytes": len(body.encode())}


def bench_scrape(startup_journal: Path, ranks: int, kernels: int, tmp: Path) -> dict[str, Any]:
    from jitwatch.core.events import Event, EventKind, Phase
    from jitwatch.store.journal import Journal

    big = tmp / "big-journal"
    t0 = time.time() - 3600
    events = []
    for rank in range(ranks):
        events.append(Event(kind=EventKind.WORKER_START, ts=t0, rank=rank, pid=1000 + rank, attrs={"mode": "warn"}))
        events.append(Event(kind=EventKind.WARMUP_START, ts=t0 + 1, rank=rank, pid=1000 + rank, phase=Phase.WARMUP))
        for k in range(kernels):
            events.append(
                Event(
                    kind=EventKind.COMPILE, ts=t0 + 2 + k * 1e-3, rank=rank, pid=1000 + rank, phase=Phase.WARMUP,
                    backend="triton", kernel=f"kernel_{k}", key=f"k{k}", duration_s=0.2,
                )
            )  # fmt: skip
        events.append(
            Event(kind=EventKind.WARMUP_COMPLETE, ts=t0 + 100, rank=rank, pid=1000 + rank, phase=Phase.SERVING)
        )
        for k in range(0, kernels, 10):  # a tenth of the kernels also compile in serving
            events.append(
                Event(
                    kind=EventKind.COMPILE, ts=t0 + 200 + k, rank=rank, pid=1000 + rank, phase=Phase.SERVING,
                    backend="triton", kernel=f"kernel_{k}", key=f"s{k}", duration_s=0.1,
                )
            )  # fmt: skip
    with Journal(big) as j:
        j.write(events)
    return {
        "startup_journal": _scrape(startup_journal),
        "big_host": {"ranks": ranks, "kernels": kernels, **_scrape(big)},
    }


def bench_manifest(journal: Path) -> dict[str, Any]:
    from jitwatch.store.journal import Journal
    from jitwatch.warmup.manifest import dumps, record_from_journal

    with Journal(journal, readonly=True) as j:
        m = record_from_journal(j, phases=None)
    text = dumps(m).encode()
    return {"entries": len(m.entries), "bytes": len(text), "bytes_per_entry": len(text) / max(1, len(m.entries))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="result JSON path")
    ap.add_argument("--compiles", type=int, default=24, help="distinct compiles in the worker's warmup (<= 72)")
    ap.add_argument("--burst", type=int, default=20_000, help="events pushed through one exporter")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run (figures meaningless)")
    args = ap.parse_args()
    os.environ.pop("OTEL_SDK_DISABLED", None)  # the SDK would hand out no-op loggers
    if args.smoke:
        args.compiles, args.burst, args.ranks, args.kernels = 3, 500, 2, 5
    tmp = scratch_dir("jw-bench-fleet-")
    receiver = _Receiver()
    try:
        startup, compile_events, journal = bench_startup(args.compiles, tmp, receiver)
        result = {
            "smoke": args.smoke,
            "startup": startup,
            "export": bench_export(compile_events, args.burst, receiver, tmp),
            "scrape": bench_scrape(journal, args.ranks, args.kernels, tmp),
            "manifest": bench_manifest(journal),
        }
    finally:
        receiver.close()
        shutil.rmtree(tmp, ignore_errors=True)
    doc = write_result(args.out, "fleet", result)
    s, e, sc, m = doc["startup"], doc["export"], doc["scrape"], doc["manifest"]
    print(
        f"startup: {s['events']} events ({s['compiles']} compiles) in {s['startup_s']:.1f} s, "
        f"{s['events_per_s_during_warmup']:.1f} compile events/s during warmup; "
        f"journal {s['journal_bytes_per_event']:.0f} B/event; OTLP {s['otlp_bytes_per_event']:.0f} B/event "
        f"({s['otlp_gzip_bytes_per_event']:.0f} gzip), dropped {s['export_dropped']}\n"
        f"export: {e['events']} events, {e['writer_thread_cpu_us_per_event']:.1f} us writer CPU/event, "
        f"{e['events_per_s_delivered']:.0f} events/s delivered, dropped {e['dropped']}; "
        f"journal {e['journal_bytes_per_event']:.0f} B/event\n"
        f"scrape: startup journal {sc['startup_journal']['series']} series / {sc['startup_journal']['bytes']} B; "
        f"{sc['big_host']['ranks']} ranks x {sc['big_host']['kernels']} kernels: {sc['big_host']['series']} series / "
        f"{sc['big_host']['bytes']} B\n"
        f"manifest: {m['entries']} entries, {m['bytes_per_entry']:.0f} B/entry"
    )


if __name__ == "__main__":
    main()
