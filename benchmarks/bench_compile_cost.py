"""Benchmark 4: cost per compile event — time spent inside jitwatch per Triton compile.

What is timed, per compile (one ``kernel.warmup`` on a CPU machine through
:mod:`jitwatch.backends.triton.compile_only`, one real launch on a GPU):

* **hooks** — wall time inside jitwatch's Triton callbacks (``knobs.runtime.jit_cache_hook``,
  ``knobs.compilation.listener``, and ``knobs.runtime.jit_post_compile_hook`` in ``error`` mode
  only: in ``warn`` mode, measured here, the listener ends the compile; Triton ≥ 3.4), measured
  by wrapping the installed callables. This covers the monitor's bookkeeping, building the
  :class:`~jitwatch.core.events.Event` (pydantic) and queueing it (``JournalWriter.submit``, timed
  separately too). It runs on the compiling thread.
* **journal write** — wall and CPU time of ``Journal.write`` in the writer thread (one SQLite
  ``BEGIN IMMEDIATE`` transaction: event row + aggregates), per event. It runs off the compiling
  thread, so it adds to the compile only through the GIL.
* **compile** — the whole ``warmup``/launch call, the baseline the cost is a fraction of.

Scenarios, each in its own process(es):

* ``cold``: fresh ``TRITON_CACHE_DIR``, every compile runs the whole pipeline (phase warmup);
* ``disk_hit``: in-memory cache dropped, every compile is a disk-cache hit (the cheapest compile
  Triton does, so the largest fraction), in phase serving (the post-warmup warning is logged);
* ``ab``: the same cold compiles in a process without jitwatch, as a sanity check (noisy);
* ``multi``: 8 processes compiling at once and writing to one journal (shared ``JITWATCH_DIR``);
* ``burst``: 8 processes each journaling a real compile event one transaction at a time, as fast
  as SQLite allows — the journal's worst case of lock contention.

Run: ``python benchmarks/bench_compile_cost.py --out results/compile_cost.json``
(``--device cuda`` on a GPU machine; ``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, summary, write_result

HERE = Path(__file__).resolve()


# --------------------------------------------------------------------------- instrumentation
class _Timer:
    """Accumulates wall seconds of wrapped calls (thread-safe append)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def wrap(self, fn: Any) -> Any:
        calls = self.calls
        perf = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = perf()
            try:
                return fn(*args, **kwargs)
            finally:
                calls.append(perf() - t0)

        return timed

    def take(self) -> float:
        total = sum(self.calls)
        self.calls.clear()
        return total


def _timer_overhead() -> float:
    """Seconds one :class:`_Timer` wrapper adds to a call (median of 20 x 20k)."""
    t = _Timer()
    f = t.wrap(lambda: None)
    runs = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(20_000):
            f()
        wrapped = time.perf_counter() - t0
        t.calls.clear()
        g = lambda: None  # noqa: E731
        t0 = time.perf_counter()
        for _ in range(20_000):
            g()
        runs.append((wrapped - (time.perf_counter() - t0)) / 20_000)
    runs.sort()
    return runs[len(runs) // 2]


def _patch_journal_write(records: list[tuple[int, float, float]]) -> None:
    """Record ``(events, wall_s, cpu_s)`` for every ``Journal.write`` (runs in the writer thread)."""
    import jitwatch.store.journal as jj

    orig = jj.Journal.write

    def write(self: Any, events: Any) -> Any:
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return orig(self, events)
        finally:
            records.append((len(events), time.perf_counter() - w0, time.thread_time() - c0))

    jj.Journal.write = write  # type: ignore[method-assign]


# --------------------------------------------------------------------------- worker processes
def _worker_compile(cfg: dict[str, Any]) -> dict[str, Any]:
    """One process: compile ``cfg['n']`` distinct specializations, cold then disk-hit."""
    import torch

    device = cfg["device"]
    launch = device == "cuda"
    if not launch:
        from jitwatch.backends.triton.compile_only import activate

        activate()
    import _kernels

    plan = _kernels.compile_plan(cfg["n"])
    run = _kernels.make_launcher(device)
    out: dict[str, Any] = {"rank": cfg["rank"], "monitor": cfg["monitor"]}
    writes: list[tuple[int, float, float]] = []
    timers = {"pre": _Timer(), "listener": _Timer(), "post": _Timer(), "submit": _Timer()}
    mon = None
    if cfg["monitor"]:
        _patch_journal_write(writes)
        import dataclasses

        import triton

        from jitwatch import WorkerIdentity, create_monitor
        from jitwatch.config import Settings

        settings = dataclasses.replace(Settings.from_env(), journal_dir=Path(cfg["journal_dir"]))
        mon = create_monitor(settings, mode="warn", identity=WorkerIdentity(rank=cfg["rank"]), tracer_provider=False)
        mon.install()
        assert mon.sink is not None
        mon.sink.submit = timers["submit"].wrap(mon.sink.submit)  # type: ignore[method-assign]
        for key, (group, attr) in {
            "pre": ("runtime", "jit_cache_hook"),
            "listener": ("compilation", "listener"),
            "post": ("runtime", "jit_post_compile_hook"),
        }.items():
            holder = getattr(triton.knobs, group)
            if getattr(holder, attr) is not None:  # outside error mode jitwatch leaves the post-compile slot empty
                setattr(holder, attr, timers[key].wrap(getattr(holder, attr)))
        mon.flush()
        writes.clear()  # the worker_start event is not a compile
        mon.begin_warmup()
        mon.flush()
        writes.clear()
        timers["submit"].take()

    def one_pass(label: str) -> list[dict[str, Any]]:
        rows = []
        for name, block, warps in plan:
            for t in timers.values():
                t.take()
            t0 = time.perf_counter()
            run(name, block, warps, launch)
            if launch:
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            row = {"kernel": name, "BLOCK": block, "num_warps": warps, "compile_s": wall}
            if mon is not None:
                row.update({k: t.take() for k, t in timers.items()})
                row["hooks"] = row["pre"] + row["listener"] + row["post"]
                mon.flush()  # one event per transaction, as when compiles are ~100 ms apart
            rows.append(row)
        return rows

    cold = one_pass("cold")
    cold_writes = list(writes)
    writes.clear()
    out["cold"] = cold
    if cfg.get("disk_hit", True):
        if mon is not None:
            mon.activate()
            mon.flush()
            writes.clear()
            for t in timers.values():
                t.take()
        _kernels.clear_memory_caches()
        out["disk_hit"] = one_pass("disk_hit")
    out["cold_writes"] = cold_writes
    out["disk_hit_writes"] = list(writes)
    if mon is not None:
        mon.flush()
        from jitwatch.core.events import EventKind, Phase
        from jitwatch.store.journal import Journal

        with Journal(cfg["journal_dir"]) as j:
            evs = j.events(kind=EventKind.COMPILE, limit=1, newest_first=True)
            if evs:
                out["sample_event"] = evs[0].model_dump(mode="json")
                out["sample_event_bytes"] = len(json.dumps(out["sample_event"]))
            hits = j.events(kind=EventKind.COMPILE, phase=Phase.SERVING, limit=100_000)
            out["disk_hit_events_flagged"] = sum(1 for e in hits if e.cache_hit)
            out["disk_hit_events"] = len(hits)
        out["dropped"] = mon.sink.dropped_total if mon.sink else None
        mon.uninstall()
    return out


def _worker_burst(cfg: dict[str, Any]) -> dict[str, Any]:
    """One process: journal ``cfg['n']`` copies of a real compile event, one transaction each."""
    from jitwatch.core.events import Event
    from jitwatch.store.writer import JournalWriter

    writes: list[tuple[int, float, float]] = []
    _patch_journal_write(writes)
    template = Event.model_validate(cfg["event"])
    writer = JournalWriter(cfg["journal_dir"], rank=cfg["rank"])
    submit_s: list[float] = []
    barrier_file = Path(cfg["start_file"])
    while not barrier_file.exists():  # start all writers together
        time.sleep(0.001)
    t_start = time.perf_counter()
    for i in range(cfg["n"]):
        t0 = time.perf_counter()
        ev = template.model_copy(update={"ts": time.time(), "rank": cfg["rank"], "key": f"{template.key}-{i}"})
        writer.submit(ev)
        submit_s.append(time.perf_counter() - t0)
        if cfg["one_per_txn"]:
            writer.flush(30)
    writer.flush(60)
    elapsed = time.perf_counter() - t_start
    writer.close()
    return {
        "rank": cfg["rank"],
        "submit_s": submit_s,
        "writes": writes,
        "elapsed_s": elapsed,
        "dropped": writer.dropped_total,
    }


def _spawn(cfgs: list[dict[str, Any]], tmp: Path, start_file: Path | None = None) -> list[dict[str, Any]]:
    tmp.mkdir(parents=True, exist_ok=True)
    procs = []
    for i, cfg in enumerate(cfgs):
        cfg_path = tmp / f"cfg{i}.json"
        out_path = tmp / f"out{i}.json"
        cfg_path.write_text(json.dumps(cfg))
        env = dict(os.environ)
        env["TRITON_CACHE_DIR"] = cfg.get("cache_dir") or str(tmp / f"cache{i}")
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, str(HERE), "--worker", str(cfg_path), str(out_path)],
                    env=env,
                    stderr=open(tmp / f"err{i}.log", "w"),
                ),
                out_path,
                i,
            )
        )
    if start_file is not None:
        time.sleep(2.0)  # let every worker import and open its writer
        start_file.write_text("go")
    results = []
    for p, out_path, i in procs:
        rc = p.wait()
        if rc != 0:
            raise RuntimeError(f"worker {i} failed ({rc}): {(tmp / f'err{i}.log').read_text()[-3000:]}")
        results.append(json.loads(out_path.read_text()))
    return results


# --------------------------------------------------------------------------- aggregation
def _compile_stats(rows: list[dict[str, Any]], writes: list[list[float]]) -> dict[str, Any]:
    compile_s = [r["compile_s"] for r in rows]
    hooks = [r["hooks"] for r in rows]
    per_event_write = [w[1] / w[0] for w in writes if w[0]]
    per_event_cpu = [w[2] / w[0] for w in writes if w[0]]
    med_write = summary(per_event_write, 1e6).get("median", 0.0) if writes else 0.0
    fractions = [r["hooks"] / r["compile_s"] for r in rows]
    total_fractions = [(r["hooks"] + med_write / 1e6) / r["compile_s"] for r in rows]
    return {
        "compiles": len(rows),
        "compile_ms": summary(compile_s, 1e3),
        "hooks_us": summary(hooks, 1e6),
        "pre_us": summary([r["pre"] for r in rows], 1e6),
        "listener_us": summary([r["listener"] for r in rows], 1e6),
        "post_us": summary([r["post"] for r in rows], 1e6),
        "submit_us": summary([r["submit"] for r in rows], 1e6),
        "journal_write_wall_us_per_event": summary(per_event_write, 1e6),
        "journal_write_cpu_us_per_event": summary(per_event_cpu, 1e6),
        "hooks_fraction_of_compile": summary(fractions, 100.0),
        "hooks_plus_write_fraction_of_compile_pct": summary(total_fractions, 100.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="result JSON path")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--compiles", type=int, default=16, help="distinct compiles in the single-process run")
    ap.add_argument("--procs", type=int, default=8, help="processes sharing one journal (multi, burst)")
    ap.add_argument("--multi-compiles", type=int, default=6, help="compiles per process in the multi run")
    ap.add_argument("--burst-events", type=int, default=300, help="events per process in the burst run")
    ap.add_argument("--quick", action="store_true", help="fewer compiles (smoke run)")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        cfg = json.loads(Path(args.worker[0]).read_text())
        fn = _worker_burst if cfg["kind"] == "burst" else _worker_compile
        Path(args.worker[1]).write_text(json.dumps(fn(cfg)))
        return

    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.quick:
        args.compiles, args.multi_compiles, args.burst_events = 6, 3, 50
    tmp = scratch_dir("jw-bench-cc-")
    result: dict[str, Any] = {"device": device, "timer_overhead_us": _timer_overhead() * 1e6}

    # single process, monitor on (cold + disk-hit) and the same compiles without jitwatch
    base = {"kind": "compile", "device": device, "n": args.compiles}
    on = _spawn([{**base, "rank": 0, "monitor": True, "journal_dir": str(tmp / "j-single")}], tmp / "single")[0]
    off = _spawn([{**base, "rank": 0, "monitor": False, "journal_dir": str(tmp / "j-none")}], tmp / "ab")[0]
    result["single"] = {
        "cold": _compile_stats(on["cold"], on["cold_writes"]),
        "disk_hit": _compile_stats(on["disk_hit"], on["disk_hit_writes"]),
        "sample_event_bytes": on.get("sample_event_bytes"),
        "dropped": on.get("dropped"),
        "disk_hit_events": on.get("disk_hit_events"),
        "disk_hit_events_flagged_cache_hit": on.get("disk_hit_events_flagged"),
    }
    result["ab"] = {
        "cold_compile_ms_with_jitwatch": summary([r["compile_s"] for r in on["cold"]], 1e3),
        "cold_compile_ms_without_jitwatch": summary([r["compile_s"] for r in off["cold"]], 1e3),
        "disk_hit_ms_with_jitwatch": summary([r["compile_s"] for r in on["disk_hit"]], 1e3),
        "disk_hit_ms_without_jitwatch": summary([r["compile_s"] for r in off["disk_hit"]], 1e3),
    }

    # 8 processes compiling at once into one journal
    shared = str(tmp / "j-multi")
    multi = _spawn(
        [
            {
                "kind": "compile",
                "device": device,
                "n": args.multi_compiles,
                "rank": r,
                "monitor": True,
                "journal_dir": shared,
                "disk_hit": False,
            }
            for r in range(args.procs)
        ],
        tmp / "multi",
    )
    rows = [row for m in multi for row in m["cold"]]
    result["multi"] = {"procs": args.procs, **_compile_stats(rows, [w for m in multi for w in m["cold_writes"]])}

    # burst: one real compile event, journaled one transaction at a time by N processes at once
    if on.get("sample_event"):
        burst_dir = str(tmp / "j-burst")
        start = tmp / "burst" / "start"
        (tmp / "burst").mkdir(parents=True, exist_ok=True)
        bres = {}
        for label, n_procs in (("1proc", 1), (f"{args.procs}procs", args.procs)):
            if start.exists():
                start.unlink()
            outs = _spawn(
                [
                    {
                        "kind": "burst",
                        "rank": r,
                        "n": args.burst_events,
                        "event": on["sample_event"],
                        "journal_dir": burst_dir + label,
                        "start_file": str(start),
                        "one_per_txn": True,
                    }
                    for r in range(n_procs)
                ],
                tmp / "burst" / label,
                start_file=start,
            )
            ws = [w for o in outs for w in o["writes"]]
            total_events = sum(w[0] for w in ws)
            bres[label] = {
                "procs": n_procs,
                "events": total_events,
                "submit_us": summary([s for o in outs for s in o["submit_s"]], 1e6),
                "write_wall_us_per_txn": summary([w[1] for w in ws], 1e6),
                "write_cpu_us_per_txn": summary([w[2] for w in ws], 1e6),
                "events_per_s_all_procs": total_events / max(o["elapsed_s"] for o in outs),
                "dropped": sum(o["dropped"] for o in outs),
            }
        result["burst"] = bres

    doc = write_result(args.out, "compile_cost", result)
    _print(doc)


def _print(doc: dict[str, Any]) -> None:
    def line(label: str, s: dict[str, Any]) -> str:
        return (
            f"{label:<26} compile {s['compile_ms']['median']:8.2f} ms | hooks {s['hooks_us']['median']:7.1f} µs"
            f" (p90 {s['hooks_us']['p90']:6.1f})"
            f" | write {s['journal_write_wall_us_per_event'].get('median', 0):7.1f} µs"
            f" wall {s['journal_write_cpu_us_per_event'].get('median', 0):7.1f} µs cpu"
            f" | hooks/compile {s['hooks_fraction_of_compile']['median']:.3f}%"
            f" (+write {s['hooks_plus_write_fraction_of_compile_pct']['median']:.3f}%)"
        )

    print(f"compile cost on {doc['device']} (timer overhead {doc['timer_overhead_us']:.2f} µs/call)")
    print(line("single, cold", doc["single"]["cold"]))
    print(line("single, disk-cache hit", doc["single"]["disk_hit"]))
    print(line(f"{doc['multi']['procs']} procs, cold", doc["multi"]))
    ab = doc["ab"]
    print(
        f"A/B cold compile median: {ab['cold_compile_ms_with_jitwatch']['median']:.2f} ms with vs "
        f"{ab['cold_compile_ms_without_jitwatch']['median']:.2f} ms without; disk hit "
        f"{ab['disk_hit_ms_with_jitwatch']['median']:.3f} vs {ab['disk_hit_ms_without_jitwatch']['median']:.3f} ms"
    )
    for label, b in doc.get("burst", {}).items():
        print(
            f"burst {label:<7} {b['events']} events: submit {b['submit_us']['median']:.1f} µs, write/txn "
            f"{b['write_wall_us_per_txn']['median']:.0f} µs wall (p99 {b['write_wall_us_per_txn']['p99']:.0f}) "
            f"{b['write_cpu_us_per_txn']['median']:.0f} µs cpu, {b['events_per_s_all_procs']:.0f} ev/s, "
            f"dropped {b['dropped']}"
        )


if __name__ == "__main__":
    main()
