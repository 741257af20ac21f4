"""Diagnostic for benchmark 1 (GPU): where the first post-warmup request's extra time goes.

Each request is split into host dispatch (``compute_slot_mapping`` returning), GPU execution
(CUDA events around the launch) and the rest of ``torch.cuda.synchronize()``. Modes, each in a
fresh process on a warm Triton disk cache, ``--reps`` times:

* ``warmup1``: :func:`jitwatch.warmup.slot_mapping.warmup_slot_mapping` (one launch), then the requests;
* ``warmup1+launches``: the same, plus ``--extra`` launches of the warmed kernel on the warmup's
  own shape before the first request (what a warmup that also exercises the launch path does);
* ``warmup1+torch``: the same as ``warmup1`` plus ``--extra`` plain torch ops (GPU busy, no Triton).

Run (GPU): ``python benchmarks/diag_first_request.py --out diag.json``.
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
SIZES = (33, 1, 7, 16, 64, 100, 512, 2048)
MAX_NUM_TOKENS = 8192
BLOCK_SIZE = 16


def _worker(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch
    import triton

    from jitwatch import WorkerIdentity, create_monitor
    from jitwatch.kernels.slot_mapping import compute_slot_mapping, get_slot_mapping_kernel
    from jitwatch.warmup.slot_mapping import warmup_slot_mapping

    dev = "cuda"
    torch.ones(1024, device=dev).sum().item()
    triton.runtime.driver.active.get_current_device()
    gen = torch.Generator().manual_seed(0)
    table = torch.randint(1, 1 << 16, (256, 1024), dtype=torch.int32, generator=gen).to(dev)
    out = torch.empty(MAX_NUM_TOKENS, dtype=torch.int64, device=dev)
    reqs = []
    for i in range(cfg["requests"]):
        n = SIZES[i % len(SIZES)]
        k = max(1, min(8, n))
        lengths = [n // k] * k
        lengths[-1] += n - sum(lengths)
        qsl = torch.zeros(k + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor(lengths), 0)
        pos = torch.cat([torch.arange(length) for length in lengths]).to(torch.int64)
        reqs.append((n, qsl.to(dev), pos.to(dev)))
    scratch = torch.zeros(1024, device=dev)
    torch.cuda.synchronize()
    mon = create_monitor(mode="warn", identity=WorkerIdentity(rank=0), tracer_provider=False).install()
    kernel = get_slot_mapping_kernel(False)
    with mon.warmup():
        warmup_slot_mapping(table, BLOCK_SIZE, MAX_NUM_TOKENS, slot_mappings=out, kernel=kernel)
    torch.cuda.synchronize()
    if cfg["mode"] == "warmup1+launches":
        qsl0 = torch.tensor([0, 3], dtype=torch.int32, device=dev)
        pos0 = torch.zeros(3, dtype=torch.int64, device=dev)
        for _ in range(cfg["extra"]):
            compute_slot_mapping(qsl0, pos0, table, BLOCK_SIZE, out, num_tokens=3, max_num_tokens=MAX_NUM_TOKENS)
            torch.cuda.synchronize()
    elif cfg["mode"] == "warmup1+torch":
        for _ in range(cfg["extra"]):
            scratch.add_(1)
            torch.cuda.synchronize()
    rows = []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for n, qsl, pos in reqs:
        t0 = time.perf_counter()
        e0.record()
        compute_slot_mapping(qsl, pos, table, BLOCK_SIZE, out, num_tokens=n, max_num_tokens=MAX_NUM_TOKENS)
        e1.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        rows.append((t1 - t0, t2 - t1, e0.elapsed_time(e1) / 1e3, t2 - t0))
    mon.uninstall()
    return {"rows": rows, "serving_compiles": mon.compiles_by_phase}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--extra", type=int, default=20)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        cfg = json.loads(Path(args.worker[0]).read_text())
        Path(args.worker[1]).write_text(json.dumps(_worker(cfg), default=str))
        return
    tmp = scratch_dir("jw-diag-fr-")
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp / "cache"), JITWATCH_DIR=str(tmp / "j"))
    res: dict[str, Any] = {}
    modes = ["warmup1", "warmup1+launches", "warmup1+torch"]
    for rep in range(args.reps + 1):  # rep 0 only fills the disk cache
        for mode in modes if rep else modes[:1]:
            cfg_p, out_p = tmp / f"c{rep}{mode}.json", tmp / f"o{rep}{mode}.json"
            cfg_p.write_text(json.dumps({"mode": mode, "requests": args.requests, "extra": args.extra}))
            p = subprocess.run(
                [sys.executable, str(HERE), "--worker", str(cfg_p), str(out_p)], env=env, capture_output=True, text=True
            )
            if p.returncode:
                raise RuntimeError(p.stderr[-3000:])
            if rep:
                res.setdefault(mode, []).append(json.loads(out_p.read_text())["rows"])
    summary_rows: dict[str, Any] = {}
    print("mode                first 5 requests: total µs (dispatch / sync / GPU)            steady total µs")
    for mode, runs in res.items():
        steady = summary([r[3] for run in runs for r in run[16:]], 1e6)
        steady_parts = {
            k: summary([r[i] for run in runs for r in run[16:]], 1e6)["median"]
            for i, k in enumerate(("dispatch", "sync", "gpu"))
        }
        firsts = [[[round(x * 1e6, 1) for x in r] for r in run[:5]] for run in runs]
        summary_rows[mode] = {
            "first5_dispatch_sync_gpu_total_us": firsts,
            "steady_total_us": steady,
            "steady_parts_median_us": steady_parts,
            "ratio_first_to_steady": [run[0][3] / steady["median"] * 1e6 for run in runs],
        }
        for run in firsts:
            cells = " ".join(f"{r[3]:.0f}({r[0]:.0f}/{r[1]:.0f}/{r[2]:.0f})" for r in run)
            print(f"{mode:<19} {cells}   {steady['median']:.1f} ({steady_parts})")
    write_result(args.out, "diag_first_request", {"modes": summary_rows, "extra": args.extra})


if __name__ == "__main__":
    main()
