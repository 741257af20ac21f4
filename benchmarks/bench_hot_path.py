"""Benchmark 3: hot-path overhead — per-launch dispatch time with the monitor active vs no jitwatch.

jitwatch installs nothing on Triton's launch path (only ``jit_cache_hook``,
``jit_post_compile_hook`` and the compilation listener, which fire on an in-memory cache *miss*;
``launch_enter_hook``/``launch_exit_hook`` stay unset), so a launch of an already compiled kernel
should cost the same with and without it. Measured in one process, alternating conditions:

* ``none``: Triton's hook slots as Triton left them (no jitwatch monitor);
* ``monitor``: a :class:`jitwatch.Monitor` installed (warn mode), warmup done, phase ``serving``.

What is timed, per call, with ``time.perf_counter`` around each call (``--launches`` calls per
repetition, ``--reps`` repetitions, conditions alternated ABBA):

* GPU: ``kernel[grid](...)`` of the slot-mapping kernel (Triton's dispatch: argument
  specialization, cache lookup, launch; asynchronous, so this is host-side dispatch time) and the
  full :func:`~jitwatch.kernels.slot_mapping.compute_slot_mapping` wrapper. A synchronize follows
  each repetition (not timed per call).
* CPU (no GPU; compile-only driver): a launch is impossible, so the closest measurable path is
  ``kernel.warmup(..., grid=...)`` on an in-memory cache hit — ``JITFunction.run`` with
  ``warmup=True``: the same argument specialization and cache lookup a launch does, stopping
  before the launcher.

Run: ``python benchmarks/bench_hot_path.py --out results/hot_path.json`` (``--device cpu|cuda``).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, summary, write_result

MAX_NUM_TOKENS = 8192
BLOCK_SIZE = 16


def _setup(device: str) -> dict[str, Any]:
    import torch

    from jitwatch.kernels.slot_mapping import TILE, get_slot_mapping_kernel

    n, reqs = 100, 8
    lengths = [n // reqs] * reqs
    lengths[-1] += n - sum(lengths)
    qsl = torch.zeros(reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(lengths), 0)
    pos = torch.cat([torch.arange(length) for length in lengths]).to(torch.int64)
    table = torch.randint(1, 1000, (64, 256), dtype=torch.int32)
    out = torch.empty(MAX_NUM_TOKENS, dtype=torch.int64)
    qsl, pos, table, out = (t.to(device) for t in (qsl, pos, table, out))
    kernel = get_slot_mapping_kernel(False)
    args = (n, MAX_NUM_TOKENS, qsl, pos, table, table.stride(0), BLOCK_SIZE, out)
    return {"kernel": kernel, "args": args, "grid": (reqs + 1,), "const": {"PAD_ID": -1, "BLOCK_SIZE": TILE}, "n": n}


def _calls(device: str, s: dict[str, Any]) -> dict[str, Any]:
    """name → zero-argument callable doing one dispatch."""
    kernel, args, grid, const = s["kernel"], s["args"], s["grid"], s["const"]
    if device == "cpu":
        return {"warmup_cache_hit": lambda: kernel.warmup(*args, grid=grid, **const)}
    from jitwatch.kernels.slot_mapping import compute_slot_mapping

    qsl, pos, table, out = args[2], args[3], args[4], args[7]
    launch = kernel[grid]

    def wrapper() -> Any:
        return compute_slot_mapping(
            qsl, pos, table, BLOCK_SIZE, out, num_tokens=s["n"], max_num_tokens=MAX_NUM_TOKENS, kernel=kernel
        )

    return {"kernel_launch": lambda: launch(*args, **const), "compute_slot_mapping": wrapper}


def _time(fn: Any, n: int, sync: Any) -> list[float]:
    perf = time.perf_counter
    out = [0.0] * n
    gc.disable()
    try:
        for i in range(n):
            t0 = perf()
            fn()
            out[i] = perf() - t0
    finally:
        gc.enable()
    sync()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--launches", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()

    import torch
    import triton

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        from jitwatch.backends.triton.compile_only import activate

        activate()
        sync = lambda: None  # noqa: E731
    else:
        sync = torch.cuda.synchronize

    from jitwatch import WorkerIdentity, create_monitor
    from jitwatch.config import Settings

    s = _setup(device)
    calls = _calls(device, s)
    for fn in calls.values():  # compile + load once, outside any condition
        fn()
    sync()
    for fn in calls.values():  # and a short untimed warm-up of the dispatch path
        _time(fn, 500, sync)

    journal = scratch_dir("jw-bench-hot-")
    settings = dataclasses.replace(Settings.from_env(), journal_dir=journal)
    slots = (
        triton.knobs.runtime.jit_cache_hook,
        triton.knobs.runtime.jit_post_compile_hook,
        triton.knobs.compilation.listener,
    )
    data: dict[str, dict[str, list[list[float]]]] = {name: {"none": [], "monitor": []} for name in calls}
    for rep in range(args.reps):
        order = ("none", "monitor") if rep % 2 == 0 else ("monitor", "none")
        for cond in order:
            mon = None
            if cond == "monitor":
                mon = create_monitor(
                    settings, mode="warn", identity=WorkerIdentity(rank=0), tracer_provider=False
                ).install()
                mon.activate()
                assert triton.knobs.runtime.jit_cache_hook is not slots[0]
            else:
                assert (
                    triton.knobs.runtime.jit_cache_hook,
                    triton.knobs.runtime.jit_post_compile_hook,
                    triton.knobs.compilation.listener,
                ) == slots
            for name, fn in calls.items():
                data[name][cond].append(_time(fn, args.launches, sync))
            if mon is not None:
                mon.flush()
                compiles = mon.compiles_by_phase
                mon.uninstall()
                assert sum(compiles.values()) == 0, f"a compile happened during the hot-path run: {compiles}"

    result: dict[str, Any] = {"device": device, "launches": args.launches, "reps": args.reps, "paths": {}}
    for name, by in data.items():
        entry: dict[str, Any] = {}
        for cond, reps in by.items():
            rep_medians = [statistics.median(r) * 1e6 for r in reps]
            entry[cond] = {
                "per_call_us": summary([x for r in reps for x in r], 1e6),
                "rep_medians_us": rep_medians,
                "rep_median_spread_us": max(rep_medians) - min(rep_medians),
                "rep_means_us": [statistics.fmean(r) * 1e6 for r in reps],
            }
        med_none = statistics.median(entry["none"]["rep_medians_us"])
        med_mon = statistics.median(entry["monitor"]["rep_medians_us"])
        spread = max(entry["none"]["rep_median_spread_us"], entry["monitor"]["rep_median_spread_us"])
        entry["delta_median_us"] = med_mon - med_none
        entry["ratio_monitor_to_none"] = med_mon / med_none
        entry["within_spread"] = abs(med_mon - med_none) <= spread
        result["paths"][name] = entry

    doc = write_result(args.out, "hot_path", result)
    gpu = doc["machine"].get("gpu") or doc["machine"]["cpu"]
    print(f"hot path on {device} ({gpu}): {args.reps} reps x {args.launches} calls, conditions alternated")
    for name, e in result["paths"].items():
        n, m = e["none"], e["monitor"]
        print(
            f"{name:<22} none {statistics.median(n['rep_medians_us']):6.2f} µs (rep spread "
            f"{n['rep_median_spread_us']:.2f}, p99 {n['per_call_us']['p99']:.1f}) | monitor "
            f"{statistics.median(m['rep_medians_us']):6.2f} µs (spread {m['rep_median_spread_us']:.2f}, "
            f"p99 {m['per_call_us']['p99']:.1f}) | Δ {e['delta_median_us']:+.2f} µs "
            f"({e['ratio_monitor_to_none']:.3f}x) {'within spread' if e['within_spread'] else 'BEYOND spread'}"
        )


if __name__ == "__main__":
    main()
