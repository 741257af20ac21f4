"""Benchmark: a torch.compile'd function called in a loop, jitwatch's torch_compile backend on vs off.

The backend hooks only Dynamo's compile-time callbacks (``callback_handler`` start/end) and the
compilation-metrics record; a call that hits Dynamo's cache (guards pass) runs none of them. So a
compiled call should cost the same with and without jitwatch. Measured in one process, conditions
alternated ABBA over ``--reps`` repetitions of ``--calls`` timed calls each:

* ``none``: no jitwatch monitor (Dynamo's callback lists as torch left them);
* ``monitor``: a monitor with the torch_compile backend installed (warn mode), phase ``serving``.

What is timed: one call of ``torch.compile(f, backend=B)`` on a small tensor (``perf_counter``
around each call; CUDA: host dispatch, a synchronize after each repetition). ``B`` is ``eager`` on
CPU by default (Inductor's CPU compile takes tens of seconds on a 2-core machine and does not
change what is measured: the guard check and the call of the compiled graph), ``inductor`` on CUDA.

Run: ``python benchmarks/bench_torch_compile.py --out results/torch_compile.json``
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
    ap.add_argument("--backend", default=None, help="torch.compile backend (default: eager on CPU, inductor on CUDA)")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()

    import torch
    import torch._dynamo
    from torch._dynamo.callback import callback_handler

    from jitwatch import WorkerIdentity, create_monitor
    from jitwatch.backends.torch_compile import TorchCompileBackend
    from jitwatch.config import Settings

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = args.backend or ("inductor" if device == "cuda" else "eager")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def f(x: Any, scale: float) -> Any:
        return torch.nn.functional.gelu(x * scale + 1.0).sum(dim=-1)

    compiled = torch.compile(f, backend=backend)
    x = torch.randn(16, 64, device=device)
    call = lambda: compiled(x, 0.5)  # noqa: E731
    call()  # compile once, outside any condition
    sync()
    _time(call, 500, sync)  # untimed warm-up of the call path

    journal = scratch_dir("jw-bench-tc-")
    settings = dataclasses.replace(Settings.from_env(), journal_dir=journal)
    before = (list(callback_handler.start_callbacks), list(callback_handler.end_callbacks))
    data: dict[str, list[list[float]]] = {"none": [], "monitor": []}
    compiles_seen = 0
    for rep in range(args.reps):
        order = ("none", "monitor") if rep % 2 == 0 else ("monitor", "none")
        for cond in order:
            mon = None
            if cond == "monitor":
                mon = create_monitor(
                    settings,
                    mode="warn",
                    identity=WorkerIdentity(rank=0),
                    backends=[TorchCompileBackend()],
                    tracer_provider=False,
                ).install()
                mon.activate()
                assert len(callback_handler.start_callbacks) == len(before[0]) + 1
            else:
                assert (list(callback_handler.start_callbacks), list(callback_handler.end_callbacks)) == before
            data[cond].append(_time(call, args.calls, sync))
            if mon is not None:
                mon.flush()
                compiles_seen += sum(mon.compiles_by_phase.values())
                mon.uninstall()
    assert compiles_seen == 0, f"a compile happened during the timed calls: {compiles_seen}"

    result: dict[str, Any] = {
        "device": device,
        "torch_compile_backend": backend,
        "calls": args.calls,
        "reps": args.reps,
    }
    for cond, reps in data.items():
        rep_medians = [statistics.median(r) * 1e6 for r in reps]
        result[cond] = {
            "per_call_us": summary([v for r in reps for v in r], 1e6),
            "rep_medians_us": rep_medians,
            "rep_median_spread_us": max(rep_medians) - min(rep_medians),
        }
    med_none = statistics.median(result["none"]["rep_medians_us"])
    med_mon = statistics.median(result["monitor"]["rep_medians_us"])
    spread = max(result["none"]["rep_median_spread_us"], result["monitor"]["rep_median_spread_us"])
    result["delta_median_us"] = med_mon - med_none
    result["ratio_monitor_to_none"] = med_mon / med_none
    result["within_spread"] = abs(med_mon - med_none) <= spread
    doc = write_result(args.out, "torch_compile_hot_path", result)
    where = doc["machine"].get("gpu") or doc["machine"]["cpu"]
    n, m = result["none"], result["monitor"]
    verdict = "within spread" if result["within_spread"] else "BEYOND spread"
    print(
        f"torch.compile({backend}) call on {device} ({where}), {args.reps} reps x {args.calls} calls, ABBA: "
        f"none {med_none:.2f} µs (spread {n['rep_median_spread_us']:.2f}, p99 {n['per_call_us']['p99']:.1f}) | "
        f"monitor {med_mon:.2f} µs (spread {m['rep_median_spread_us']:.2f}, p99 {m['per_call_us']['p99']:.1f}) | "
        f"ratio {result['ratio_monitor_to_none']:.3f}x {verdict}"
    )


if __name__ == "__main__":
    main()
