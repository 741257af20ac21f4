"""One serving process of issue 11's torch.compile scenario (run as a script, one process per run).

A 2-layer MLP under ``torch.compile`` (``--mode``, default ``reduce-overhead``) is warmed at batch
8 inside ``monitor.warmup()``, then serves batches 1, 17, 64, 300, 1, 17, each inside
``monitor.request(name=...)`` and timed with ``torch.cuda.synchronize()`` (each batch size run
once in eager mode before, so first-use costs that are not JIT compiles stay out). jitwatch is installed
with every backend (Triton and torch_compile); its journal is ``JITWATCH_DIR``. Run it twice with
the same ``TORCHINDUCTOR_CACHE_DIR``/``TRITON_CACHE_DIR``: the first process compiles cold, the
second loads from Inductor's caches (the restart case).

Prints (and writes to ``--out``) one JSON document: per request the latency (seconds), the events
recorded inside it (kind, backend, kernel, duration, cache hit, compile id, trigger, reason,
parent) and whether a stall above ``--stall-ms`` is attributed (at least one compile / load /
graph-capture / autotune event inside that request); plus the ``/jit`` status document's
serving part, built from the journal by :func:`jitwatch.views.status.build_status`.

Usage: ``python tests/gpu/torch_compile_scenario.py --label cold --out cold.json``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BATCHES = (1, 17, 64, 300, 1, 17)
WARMUP_BATCH = 8


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default="run")
    p.add_argument("--out", type=Path)
    p.add_argument("--mode", default="reduce-overhead", help="torch.compile mode ('default' for none)")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--stall-ms", type=float, default=10.0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (eager for a CPU smoke run)")
    p.add_argument("--off", action="store_true", help="run without jitwatch (latency baseline)")
    args = p.parse_args(argv)

    import torch

    import jitwatch
    from jitwatch.core.events import EventKind, Phase
    from jitwatch.store.journal import Journal
    from jitwatch.views.status import build_status

    mon = None if args.off else jitwatch.install(mode="warn")
    dev = torch.device(args.device)
    torch.manual_seed(0)
    d = args.dim
    model = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)).to(dev).eval()
    mode = None if args.mode == "default" else args.mode
    compiled = torch.compile(model, mode=mode, backend=args.backend)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    t_start = time.time()
    with torch.no_grad():
        # Every batch size once in eager mode first, not compiled and not timed: the first use of a
        # shape also pays costs that are not JIT compiles (cuBLAS picking and lazily loading a GEMM
        # kernel for a new M under CUDA's lazy module loading, the caching allocator's first
        # segment), ~15 ms for batch 64 on the H200 in 1 of 3 runs, which this test would
        # otherwise count as a stall no compile explains.
        for b in sorted({WARMUP_BATCH, *BATCHES}):
            model(torch.randn(b, d, device=dev))
            sync()
        w0 = time.perf_counter()
        if mon is not None:
            with mon.warmup():
                for _ in range(3):  # cudagraph trees: warmup run, then recording, then replay
                    compiled(torch.randn(WARMUP_BATCH, d, device=dev))
                    sync()
        else:
            for _ in range(3):
                compiled(torch.randn(WARMUP_BATCH, d, device=dev))
                sync()
        warmup_s = time.perf_counter() - w0
        requests: list[dict[str, Any]] = []
        for i, b in enumerate(BATCHES):
            x = torch.randn(b, d, device=dev)
            sync()
            name = f"req{i}-b{b}"
            t0 = time.perf_counter()
            if mon is not None:
                with mon.request(name=name):
                    compiled(x)
                    sync()
            else:
                compiled(x)
                sync()
            requests.append({"request": name, "batch": b, "latency_s": time.perf_counter() - t0})
        # steady state: the same shapes again (no compile expected): the floor a stall is measured against
        steady = []
        for b in BATCHES:
            x = torch.randn(b, d, device=dev)
            sync()
            t0 = time.perf_counter()
            compiled(x)
            sync()
            steady.append(time.perf_counter() - t0)

    doc: dict[str, Any] = {
        "label": args.label,
        "mode": args.mode,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
        "jitwatch": not args.off,
        "warmup_s": warmup_s,
        "steady_latency_s": steady,
        "requests": requests,
    }
    if mon is None:
        print(json.dumps(doc, indent=1))
        if args.out:
            args.out.write_text(json.dumps(doc, indent=1))
        return 0

    mon.flush()
    jdir = mon.journal_dir
    with Journal(jdir, readonly=True) as j:
        events = [e for e in j.events(limit=10_000) if e.ts >= t_start - 1]
        status = build_status(j)
    by_request: dict[str, list[dict[str, Any]]] = {}
    warmup_events: list[dict[str, Any]] = []
    stall_kinds = {EventKind.COMPILE, EventKind.GRAPH_CAPTURE, EventKind.AUTOTUNE}
    for e in sorted(events, key=lambda e: e.ts):
        if e.kind not in stall_kinds:
            continue
        a = e.attrs
        row = {
            "kind": e.kind.value,
            "backend": e.backend,
            "kernel": e.kernel,
            "phase": e.phase.value,
            "duration_s": e.duration_s,
            "cache_hit": e.cache_hit,
            "compile_id": a.get("compile_id"),
            "trigger": a.get("trigger"),
            "reason": a.get("reason"),
            "reason_class": a.get("reason_class"),
            "parent": a.get("parent"),
            "fx_graph_cache": a.get("fx_graph_cache"),
            "stages": a.get("stages"),
        }
        if e.phase is Phase.SERVING and a.get("request"):
            by_request.setdefault(str(a["request"]), []).append(row)
        else:
            warmup_events.append(row)
    unattributed = []
    for r in requests:
        evs = by_request.get(r["request"], [])
        r["events"] = evs
        r["event_seconds"] = sum(e["duration_s"] or 0.0 for e in evs)
        r["stall"] = r["latency_s"] * 1e3 > args.stall_ms
        r["attributed"] = bool(evs) if r["stall"] else None
        if r["stall"] and not evs:
            unattributed.append(r["request"])
    doc["warmup_events"] = {
        "count": len(warmup_events),
        "by_backend_kind": _count(warmup_events),
    }
    doc["unattributed_stalls"] = unattributed
    st = status.model_dump(mode="json")
    doc["jit"] = {
        "recent_serving_compiles": st["recent_serving_compiles"],
        "recompile_reasons": st["recompile_reasons"],
        "backends": st["backends"],
        "kernels": [k for k in st["kernels"] if k["backend"] == "torch_compile"],
        "rank_backends": st["ranks"][0]["backends"] if st["ranks"] else [],
    }
    text = json.dumps(doc, indent=1, default=str)
    print(text)
    if args.out:
        args.out.write_text(text)
    print(f"[{args.label}] unattributed stalls > {args.stall_ms} ms: {unattributed}", file=sys.stderr)
    return 0


def _count(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        k = f"{r['backend']}/{r['kind']}"
        out[k] = out.get(k, 0) + 1
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[2]))
    sys.exit(main())
