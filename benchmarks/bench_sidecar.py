"""Benchmark 5: sidecar latency and throughput, against prometheus_client's own exposition.

Setup (all on 127.0.0.1, each server and the load generator in its own process):

* a journal of ``--events`` compile events (default 100 000) over ``--kernels`` kernel names
  (500) and ``--ranks`` ranks (8), plus each rank's worker_start / warmup / first_request events,
  written with :class:`jitwatch.store.journal.Journal` (the same aggregates a worker updates); each
  event carries attrs shaped like a real compile's (signature, constexprs, stages,
  specialization data);
* the jitwatch sidecar (:func:`jitwatch.sidecar.create_app` under uvicorn, access log off);
* the floor: the *same* metric families (collected once from the journal, then held in memory)
  served by ``prometheus_client.start_http_server`` — prometheus_client's own exposition of an
  equivalent registry, with no journal read per scrape.

The load generator (a separate process) runs a closed loop for ``--duration`` seconds per
endpoint and concurrency (HTTP/1.1 keep-alive connections, one per thread), recording every
request's latency: ``/jit``, ``/jit/events`` (default limit 100), ``/jit/events?limit=1000`` and
``/metrics`` on the sidecar, ``/metrics`` on the floor. Reported: p50/p90/p99 latency, requests
per second, response size, errors, and the sidecar's RSS after the run.

``--writer-rate N`` (events/s) is the fair case for a sidecar that caches: a separate writer
process appends compile events (``N/10`` every 0.1 s, one transaction each, like a worker's writer
thread; kernels, ranks and phases drawn like the journal's) for the whole measurement, so the
journal keeps changing under the load (the writer's default retention prunes as it goes).

``--before DIR`` serves a second sidecar from an older jitwatch source tree (e.g.
``git archive 4a3985f jitwatch | tar -x -C DIR``) on the same journal, measured in the same run.
Each sidecar answers one ``/metrics`` and one ``/jit`` before its measurement (a sidecar is scraped
continuously; its first build is a one-off). The load average is recorded before and after.

Run: ``python benchmarks/bench_sidecar.py --out results/sidecar.json`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import rss_bytes, scratch_dir, summary, write_result

HERE = Path(__file__).resolve()


# --------------------------------------------------------------------------- journal
def build_journal(directory: Path, events: int, kernels: int, ranks: int, seed: int = 0) -> dict[str, Any]:
    """Fill a journal like ``ranks`` workers that compiled ``events`` times over ``kernels`` names."""
    from jitwatch.core.events import Event, EventKind, Phase
    from jitwatch.store.journal import Journal

    rng = random.Random(seed)
    t_start = time.time() - 3600
    names = [f"model.layers.ops.kernel_{i:04d}" for i in range(kernels)]
    spec = json.dumps({"name": "x", "signature": {f"a{i}": "*fp16" for i in range(12)}, "pad": "x" * 600})
    t0 = time.perf_counter()
    with Journal(directory, retention_events=events + 10 * ranks, max_kernels=500) as j:
        life = []
        for r in range(ranks):
            base = dict(rank=r, pid=1000 + r, host="bench-host")
            life += [
                Event(kind=EventKind.WORKER_START, ts=t_start, attrs={"mode": "warn", "tp_rank": r}, **base),
                Event(kind=EventKind.WARMUP_START, ts=t_start + 1, phase=Phase.WARMUP, **base),
                Event(
                    kind=EventKind.WARMUP_COMPLETE,
                    ts=t_start + 60,
                    start_ts=t_start + 1,
                    duration_s=59.0,
                    phase=Phase.SERVING,
                    attrs={"kernels_compiled": events // ranks, "compile_seconds": 50.0},
                    **base,
                ),
                Event(kind=EventKind.FIRST_REQUEST, ts=t_start + 61, duration_s=0.004, phase=Phase.SERVING, **base),
            ]
        j.write(life)
        batch: list[Any] = []
        for i in range(events):
            rank = i % ranks
            phase = Phase.WARMUP if rng.random() < 0.95 else Phase.SERVING
            dur = rng.lognormvariate(-1.8, 0.8)
            batch.append(
                Event(
                    kind=EventKind.COMPILE,
                    ts=t_start + 2 + i * 0.03,
                    start_ts=t_start + 2 + i * 0.03 - dur,
                    duration_s=dur,
                    rank=rank,
                    pid=1000 + rank,
                    host="bench-host",
                    phase=phase,
                    kernel=names[rng.randrange(kernels)],
                    key=f"[('*fp16', 'D'), ('i32', {'D' if i % 3 else None!r}), ('constexpr', {i % 64})]",
                    cache_hit=rng.random() < 0.3,
                    attrs={
                        "module": "model.layers.ops",
                        "signature": {f"a{k}": "*fp16" for k in range(8)} | {"n": "i32"},
                        "constexprs": {"BLOCK": 128, "NUM_STAGES": 3},
                        "options": {"num_warps": 4, "num_ctas": 1, "num_stages": 3},
                        "stages": {s: dur / 8 for s in ("ttir", "ttgir", "llir", "ptx", "cubin")},
                        "is_warmup_call": False,
                        "repr": "JITFunction(model.layers.ops:kernel)",
                        "specialization_data": spec,
                        "tp_rank": rank,
                    },
                )
            )
            if len(batch) == 2000:
                j.write(batch)
                batch.clear()
        if batch:
            j.write(batch)
        stored = j.count_events()
    size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
    return {
        "events_written": events + len(life),
        "events_stored": stored,
        "build_s": time.perf_counter() - t0,
        "bytes": size,
    }


# --------------------------------------------------------------------------- servers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_sidecar(journal_dir: str, port: int) -> None:
    tree = os.environ.get("JITWATCH_BENCH_TREE")
    if tree:  # an older jitwatch (--before), ahead of this checkout
        sys.path.insert(0, tree)
    import uvicorn

    from jitwatch.sidecar import create_app

    uvicorn.run(
        create_app(journal_dir=Path(journal_dir)), host="127.0.0.1", port=port, log_level="warning", access_log=False
    )


def serve_floor(journal_dir: str, port: int) -> None:
    from prometheus_client import start_http_server
    from prometheus_client.registry import Collector, CollectorRegistry

    from jitwatch.views.metrics import make_registry

    families = list(make_registry(journal_dir).collect())  # read the journal once

    class Static(Collector):
        def collect(self) -> Any:
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Static())
    start_http_server(port, addr="127.0.0.1", registry=registry)
    while True:
        time.sleep(3600)


def _wait_up(port: int, path: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server on {port} never answered {path}")


def writer_batch(rng: random.Random, n: int, kernels: int, ranks: int) -> list[Any]:
    """``n`` compile events as the writer appends them (95 % warmup, random kernel and rank)."""
    from jitwatch.core.events import Event, EventKind, Phase

    now = time.time()
    batch = []
    for _ in range(n):
        rank = rng.randrange(ranks)
        dur = rng.lognormvariate(-1.8, 0.8)
        batch.append(
            Event(
                kind=EventKind.COMPILE,
                ts=now,
                start_ts=now - dur,
                duration_s=dur,
                rank=rank,
                pid=1000 + rank,
                host="bench-host",
                phase=Phase.WARMUP if rng.random() < 0.95 else Phase.SERVING,
                kernel=f"model.layers.ops.kernel_{rng.randrange(kernels):04d}",
                key=f"[('*fp16', 'D'), ('i32', 'D'), ('constexpr', {rng.randrange(64)})]",
                cache_hit=rng.random() < 0.3,
                attrs={"module": "model.layers.ops", "options": {"num_warps": 4}, "tp_rank": rank},
            )
        )
    return batch


def refresh_probe(journal_dir: Path, n: int, batch: int, kernels: int, ranks: int) -> dict[str, Any]:
    """In this process: one sidecar's live aggregates (:class:`jitwatch.views.live.LiveJournal`)
    on the journal; the first ``/metrics`` (a full build), then ``n`` times: append ``batch``
    events from another connection and time the ``/metrics`` body and the ``/jit`` document built
    right after (every scrape sees a change, as with Prometheus's 15 s interval)."""
    from jitwatch.store.journal import Journal
    from jitwatch.views.live import LiveJournal

    live = LiveJournal(journal_dir)
    t0 = time.perf_counter()
    live.render()
    first = time.perf_counter() - t0
    rng = random.Random(2)
    metrics_s: list[float] = []
    jit_s: list[float] = []
    with Journal(journal_dir) as j:
        for _ in range(n):
            j.write(writer_batch(rng, batch, kernels, ranks))
            t0 = time.perf_counter()
            live.render()
            metrics_s.append(time.perf_counter() - t0)
            j.write(writer_batch(rng, batch, kernels, ranks))
            t0 = time.perf_counter()
            live.status(stale_after=60)
            jit_s.append(time.perf_counter() - t0)
    return {
        "batch": batch,
        "first_build_s": first,
        "metrics_after_write_ms": summary(metrics_s, 1e3),
        "jit_after_write_ms": summary(jit_s, 1e3),
        "rebuilds": live.rebuilds,
        "refreshes": live.refreshes,
    }


def write_events(journal_dir: str, rate: float, kernels: int, ranks: int) -> None:
    """Append ``rate`` compile events per second (``rate/10`` every 0.1 s) until SIGTERM; prints
    ``{"events": n, "batches": b, "seconds": s}`` on the way out."""
    import signal

    from jitwatch.store.journal import Journal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rng = random.Random(1)
    per_batch = max(1, round(rate / 10))
    written = batches = 0
    t0 = time.perf_counter()
    with Journal(journal_dir) as j:
        while not stop.is_set():
            batch = writer_batch(rng, per_batch, kernels, ranks)
            j.write(batch)
            written += len(batch)
            batches += 1
            stop.wait(0.1)
    print(json.dumps({"events": written, "batches": batches, "seconds": time.perf_counter() - t0}))


# --------------------------------------------------------------------------- load generator
def load(port: int, path: str, duration: float, concurrency: int) -> dict[str, Any]:
    lat: list[list[float]] = [[] for _ in range(concurrency)]
    sizes: list[int] = []
    errors = [0] * concurrency
    stop = time.perf_counter() + duration

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    errors[i] += 1
                elif not sizes:
                    sizes.append(len(body))
            except (OSError, http.client.HTTPException):
                errors[i] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                continue
            lat[i].append(time.perf_counter() - t0)
        conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    all_lat = [x for xs in lat for x in xs]
    return {
        "path": path,
        "concurrency": concurrency,
        "requests": len(all_lat),
        "errors": sum(errors),
        "req_per_s": len(all_lat) / elapsed,
        "latency_ms": summary(all_lat, 1e3),
        "response_bytes": sizes[0] if sizes else None,
    }


def _run_load(port: int, path: str, duration: float, conc: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(HERE), "--load", str(port), path, str(duration), str(conc)],
        capture_output=True,
        text=True,
        timeout=duration + 120,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--kernels", type=int, default=500)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per endpoint and concurrency")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--journal", help="reuse this journal directory instead of building one")
    ap.add_argument("--writer-rate", type=float, default=0.0, help="events/s appended during the measurement")
    ap.add_argument("--before", help="an older jitwatch source tree: a second sidecar, same journal, same run")
    ap.add_argument("--before-label", help="what --before is (e.g. the commit it was archived from), recorded")
    ap.add_argument("--paths", default="/jit,/jit/events,/jit/events?limit=1000,/metrics", help="sidecar paths")
    ap.add_argument(
        "--refresh-probe", type=int, default=0, help="then N scrapes in-process, each right after a written batch"
    )
    ap.add_argument("--write", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--serve-sidecar", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--serve-floor", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--load", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_sidecar:
        serve_sidecar(args.serve_sidecar[0], int(args.serve_sidecar[1]))
        return
    if args.serve_floor:
        serve_floor(args.serve_floor[0], int(args.serve_floor[1]))
        return
    if args.write:
        write_events(args.write[0], float(args.write[1]), int(args.write[2]), int(args.write[3]))
        return
    if args.load:
        port, path, duration, conc = args.load
        print(json.dumps(load(int(port), path, float(duration), int(conc))))
        return

    result: dict[str, Any] = {"events": args.events, "kernels": args.kernels, "ranks": args.ranks}
    if args.journal:
        jdir = Path(args.journal)
    else:
        jdir = scratch_dir("jw-bench-sidecar-") / "journal"
        result["journal"] = build_journal(jdir, args.events, args.kernels, args.ranks)
        print(f"journal: {result['journal']}")
    concs = [int(c) for c in args.concurrency.split(",")]

    result["writer_rate"] = args.writer_rate
    result["before_tree"] = args.before
    result["before_label"] = args.before_label
    result["loadavg_start"] = os.getloadavg()
    paths = [p for p in args.paths.split(",") if p]
    sidecars = ["sidecar", "sidecar_before"] if args.before else ["sidecar"]
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    writer: subprocess.Popen[str] | None = None
    try:
        for name in (*sidecars, "floor"):
            port = _free_port()
            env = dict(os.environ)
            if name == "sidecar_before":
                env["JITWATCH_BENCH_TREE"] = str(Path(args.before).resolve())
            flag = "--serve-floor" if name == "floor" else "--serve-sidecar"
            proc = subprocess.Popen(
                [sys.executable, str(HERE), flag, str(jdir), str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            servers[name] = (proc, port)
            _wait_up(port, "/metrics" if name == "floor" else "/livez", timeout=180)
            if name != "floor":
                _wait_up(port, "/metrics", timeout=180)  # the first build: a one-off, not measured
                _wait_up(port, "/jit", timeout=180)
        if args.writer_rate > 0:
            cmd = [sys.executable, str(HERE), "--write", str(jdir), str(args.writer_rate), str(args.kernels)]
            writer = subprocess.Popen(
                [*cmd, str(args.ranks)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            time.sleep(0.5)
        targets = [(name, path) for name in sidecars for path in paths] + [("floor", "/metrics")]
        rss_idle = {name: rss_bytes(p.pid) for name, (p, _) in servers.items()}
        runs = []
        for conc in concs:
            for name, path in targets:
                r = _run_load(servers[name][1], path, args.duration, conc)
                r["server"] = name
                runs.append(r)
                print(
                    f"{name:<14} {path:<24} c={conc} p50 {r['latency_ms']['median']:8.2f} ms p99 "
                    f"{r['latency_ms']['p99']:8.2f} ms {r['req_per_s']:8.1f} req/s {r['response_bytes']} B "
                    f"errors {r['errors']}"
                )
        rss_after = {name: rss_bytes(p.pid) for name, (p, _) in servers.items()}
    finally:
        if writer is not None:
            writer.terminate()
            out, _ = writer.communicate(timeout=30)
            lines = out.strip().splitlines()
            result["writer"] = json.loads(lines[-1]) if lines else None
            print(f"writer: {result['writer']}")
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)
    if args.refresh_probe:
        batch = max(1, round(args.writer_rate / 10)) if args.writer_rate else 20
        result["refresh"] = refresh_probe(jdir, args.refresh_probe, batch, args.kernels, args.ranks)
        rp = result["refresh"]
        print(
            f"in-process, right after a {batch}-event batch: /metrics p50 {rp['metrics_after_write_ms']['median']:.2f}"
            f" ms p99 {rp['metrics_after_write_ms']['p99']:.2f} ms; /jit p50 {rp['jit_after_write_ms']['median']:.2f}"
            f" ms p99 {rp['jit_after_write_ms']['p99']:.2f} ms; first build {rp['first_build_s']:.2f} s"
        )
    result["loadavg_end"] = os.getloadavg()
    result.update({"runs": runs, "rss_idle_mib": _mib(rss_idle), "rss_after_mib": _mib(rss_after)})
    write_result(args.out, "sidecar", result)
    print(f"RSS idle {result['rss_idle_mib']} MiB, after load {result['rss_after_mib']} MiB")
    print(f"load average: start {result['loadavg_start']}, end {result['loadavg_end']}")
    for conc in concs:
        floor = next(r for r in runs if r["server"] == "floor" and r["concurrency"] == conc)
        for name in sidecars:
            side = next(
                (r for r in runs if r["server"] == name and r["path"] == "/metrics" and r["concurrency"] == conc),
                None,
            )
            if side is None or not side["requests"] or not floor["requests"]:
                continue
            ratio = side["latency_ms"]["median"] / floor["latency_ms"]["median"]
            print(
                f"c={conc}: {name} /metrics p50 {side['latency_ms']['median']:.2f} ms vs floor "
                f"{floor['latency_ms']['median']:.2f} ms ({ratio:.2f}x)"
                f"; {side['req_per_s']:.0f} vs {floor['req_per_s']:.0f} req/s"
            )


def _mib(d: dict[str, int]) -> dict[str, float]:
    return {k: round(v / 2**20, 1) for k, v in d.items()}


if __name__ == "__main__":
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    main()
