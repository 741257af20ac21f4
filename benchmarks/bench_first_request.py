"""Benchmark 1 (GPU): first-request latency vs steady state, with and without jitwatch's warmup.

A "request" is one engine step's slot mapping: :func:`jitwatch.kernels.slot_mapping.compute_slot_mapping`
on the engine's persistent block table and output buffer, then ``torch.cuda.synchronize()``,
timed with ``time.perf_counter`` (what a caller waits for). Request sizes cycle through
1, 7, 16, 33, 64, 100, 512, 2048 tokens split over up to 8 sequences.

Six scenarios, each in a fresh process (Triton's in-memory cache is per process), repeated
``--reps`` times:

* ``cold/no-warmup``: empty ``TRITON_CACHE_DIR``; the first request compiles the kernel.
* ``warm/no-warmup``: the disk cache the previous process filled; the first request still loads
  it (a JIT hook round trip, a disk read, a module load).
* ``cold/warmup`` and ``warm/warmup``: :func:`jitwatch.warmup.slot_mapping.warmup_slot_mapping` runs inside
  ``Monitor.warmup()`` before the first request.
* ``cold/warmup+gpu-awake`` and ``warm/warmup+gpu-awake``: the same, with 200 plain torch ops
  (no Triton) run right before the first request, so the GPU is busy when it arrives: this
  separates the GPU's own wake-up after idle from anything Triton or jitwatch does.

Every process first initialises CUDA, torch's allocator and Triton's driver (done by any worker
before it serves), so the first request differs from the rest only by what Triton does for it
(and by the GPU having been idle before it). Requests run back to back with nothing between them;
correctness is checked after all timing. The monitor (warn mode) is installed in all scenarios, so
the first request's serving-phase compile is also counted. Baselines from the same process:
steady state = median of requests 16 and later; controls = the same request and a tiny torch op
each timed after 20 ms of GPU idle, and the torch op in steady state.
Target: with warmup, first request <= 1.5 x steady state.

Run (GPU machine): ``python benchmarks/bench_first_request.py --out results/first_request.json``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, summary, write_result

HERE = Path(__file__).resolve()
SIZES = (1, 7, 16, 33, 64, 100, 512, 2048)
FIRST_SIZE = 33
MAX_NUM_TOKENS = 8192
BLOCK_SIZE = 16


def _worker(cfg: dict[str, Any]) -> dict[str, Any]:
    t_proc = time.perf_counter()
    import torch
    import triton

    from jitwatch import WorkerIdentity, create_monitor
    from jitwatch.core.events import EventKind, Phase
    from jitwatch.kernels.slot_mapping import compute_slot_mapping, get_slot_mapping_kernel, slot_mapping_reference
    from jitwatch.testing import read_events
    from jitwatch.warmup.slot_mapping import warmup_slot_mapping

    dev = cfg.get("device", "cuda")
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if dev == "cuda":
        torch.cuda.init()
        # Process init any worker does before serving: CUDA context, allocator, a torch kernel,
        # Triton's driver (its C helpers are built/loaded here, not in the request).
        torch.ones(1024, device=dev).sum().item()
        drv = triton.runtime.driver.active
        drv.get_current_device()
        drv.get_current_stream(0)
        try:
            drv.utils.get_device_properties(0)
        except Exception as exc:  # noqa: BLE001 - only a pre-load; report and go on
            print(f"note: driver utils pre-load failed: {exc}", file=sys.stderr)

    gen = torch.Generator().manual_seed(0)
    table = torch.randint(1, 1 << 16, (256, 1024), dtype=torch.int32, generator=gen).to(dev)
    out = torch.empty(MAX_NUM_TOKENS, dtype=torch.int64, device=dev)
    requests = []
    order = [FIRST_SIZE] + [SIZES[i % len(SIZES)] for i in range(cfg["requests"] - 1)]
    for n in order:
        reqs = max(1, min(8, n))
        lengths = [n // reqs] * reqs
        lengths[-1] += n - sum(lengths)
        qsl = torch.zeros(reqs + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor(lengths), 0)
        pos = torch.cat([torch.arange(length) + 3 * r for r, length in enumerate(lengths)]).to(torch.int64)
        requests.append((n, qsl.to(dev), pos.to(dev), qsl, pos))
    sync()

    mon = create_monitor(mode="warn", identity=WorkerIdentity(rank=0), tracer_provider=False)
    import dataclasses

    mon.settings = dataclasses.replace(mon.settings, journal_dir=Path(cfg["journal_dir"]))
    mon.install()
    kernel = get_slot_mapping_kernel(False)
    warmup_s = None
    if cfg["warmup"]:
        t0 = time.perf_counter()
        with mon.warmup():
            warmup_slot_mapping(table, BLOCK_SIZE, MAX_NUM_TOKENS, slot_mappings=out, kernel=kernel)
        sync()
        warmup_s = time.perf_counter() - t0
    else:
        mon.activate()
    init_s = time.perf_counter() - t_proc

    scratch = torch.zeros(1024, device=dev)

    def torch_op() -> float:
        t0 = time.perf_counter()
        scratch.add_(1)
        sync()
        return time.perf_counter() - t0

    def request(i: int) -> float:
        n, qsl, pos = requests[i][:3]
        t0 = time.perf_counter()
        compute_slot_mapping(qsl, pos, table, BLOCK_SIZE, out, num_tokens=n, max_num_tokens=MAX_NUM_TOKENS)
        sync()
        return time.perf_counter() - t0

    if cfg.get("awake"):
        # Keep the GPU busy with plain torch work (no Triton) right up to the first request, so a
        # GPU/driver idle-wakeup cost is separated from anything Triton or jitwatch does.
        for _ in range(200):
            torch_op()
    lat = []
    for i in range(len(requests)):  # back to back, nothing else in between
        with mon.request() if i == 0 else _null():
            lat.append(request(i))
    torch_steady = [torch_op() for _ in range(200)]
    after_idle, torch_after_idle = [], []
    for _ in range(5):  # controls: the same request / a torch op after 20 ms of GPU idle
        time.sleep(0.02)
        after_idle.append(request(len(requests) - 1))
        time.sleep(0.02)
        torch_after_idle.append(torch_op())
    for i in range(len(SIZES) + 1):  # correctness, after all timing
        request(i)
        ref = slot_mapping_reference(requests[i][3], requests[i][4], table.cpu(), BLOCK_SIZE, MAX_NUM_TOKENS)
        assert torch.equal(out.cpu(), ref), f"wrong slot mapping for {requests[i][0]} tokens"
    mon.flush()
    events = read_events(cfg["journal_dir"])
    serving_compiles = [e for e in events if e.kind is EventKind.COMPILE and e.phase is Phase.SERVING]
    warm_compiles = [e for e in events if e.kind is EventKind.COMPILE and e.phase is Phase.WARMUP]
    first_ev = [e for e in events if e.kind is EventKind.FIRST_REQUEST]
    mon.uninstall()
    return {
        "latencies_s": lat,
        "request_after_idle_s": after_idle,
        "torch_op_steady_s": torch_steady,
        "torch_op_after_idle_s": torch_after_idle,
        "warmup_s": warmup_s,
        "init_s": init_s,
        "serving_compiles": len(serving_compiles),
        "serving_compile_cache_hit": [e.cache_hit for e in serving_compiles],
        "serving_compile_s": [e.duration_s for e in serving_compiles],
        "warmup_compiles": len(warm_compiles),
        "warmup_compile_cache_hit": [e.cache_hit for e in warm_compiles],
        "jitwatch_first_request_s": first_ev[0].duration_s if first_ev else None,
    }


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _spawn(cfg: dict[str, Any], cache_dir: Path, tmp: Path) -> dict[str, Any]:
    cfg_path = tmp / f"cfg-{cfg['label']}.json"
    out_path = tmp / f"out-{cfg['label']}.json"
    cfg_path.write_text(json.dumps(cfg))
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache_dir))
    proc = subprocess.run(
        [sys.executable, str(HERE), "--worker", str(cfg_path), str(out_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{cfg['label']} failed: {proc.stderr[-3000:]}")
    return json.loads(out_path.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=3, help="fresh processes per scenario")
    ap.add_argument("--requests", type=int, default=400, help="requests per process")
    ap.add_argument("--smoke-cpu", action="store_true", help=argparse.SUPPRESS)  # code check, no GPU figures
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        cfg = json.loads(Path(args.worker[0]).read_text())
        Path(args.worker[1]).write_text(json.dumps(_worker(cfg)))
        return

    import torch

    if not torch.cuda.is_available() and not args.smoke_cpu:
        print("bench_first_request: needs a CUDA GPU; skipped")
        write_result(args.out, "first_request", {"skipped": "no CUDA device"})
        return
    tmp = scratch_dir("jw-bench-fr-")
    runs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(args.reps):
        for warm, awake in ((False, False), (True, False), (True, True)):
            cache = tmp / f"cache-{rep}-{int(warm)}{int(awake)}"
            cache.mkdir()
            for disk in ("cold", "warm"):  # cold fills `cache`, warm reuses it
                label = f"{disk}/{'warmup' if warm else 'no-warmup'}{'+gpu-awake' if awake else ''}"
                cfg = {
                    "label": f"{rep}-{disk}-{int(warm)}{int(awake)}",
                    "warmup": warm,
                    "awake": awake,
                    "requests": args.requests,
                    "journal_dir": str(tmp / f"j-{rep}-{disk}-{int(warm)}{int(awake)}"),
                    "device": "cuda" if torch.cuda.is_available() else "cpu",
                }
                runs.setdefault(label, []).append(_spawn(cfg, cache, tmp))

    scenarios: dict[str, Any] = {}
    for label, rs in runs.items():
        firsts = [r["latencies_s"][0] for r in rs]
        steadies = [summary(r["latencies_s"][16:])["median"] for r in rs]
        ratios = [f / s for f, s in zip(firsts, steadies, strict=False)]
        scenarios[label] = {
            "first_request_ms": summary(firsts, 1e3),
            "steady_state_us": summary(steadies, 1e6),
            "steady_state_all_requests_us": summary([x for r in rs for x in r["latencies_s"][16:]], 1e6),
            "ratio_first_to_steady": summary(ratios),
            "ratios": ratios,
            "second_request_us": summary([r["latencies_s"][1] for r in rs], 1e6),
            "first_10_requests_us": [[round(x * 1e6, 1) for x in r["latencies_s"][:10]] for r in rs],
            "request_after_20ms_idle_us": summary([x for r in rs for x in r["request_after_idle_s"]], 1e6),
            "ratio_first_to_after_idle": summary(
                [r["latencies_s"][0] / statistics.median(r["request_after_idle_s"]) for r in rs]
            ),
            "torch_op_steady_us": summary([statistics.median(r["torch_op_steady_s"]) for r in rs], 1e6),
            "torch_op_after_20ms_idle_us": summary([x for r in rs for x in r["torch_op_after_idle_s"]], 1e6),
            "max_later_request_us": summary([max(r["latencies_s"][1:]) for r in rs], 1e6),
            "warmup_ms": summary([r["warmup_s"] for r in rs if r["warmup_s"] is not None], 1e3),
            "serving_compiles": [r["serving_compiles"] for r in rs],
            "serving_compile_cache_hit": [r["serving_compile_cache_hit"] for r in rs],
            "serving_compile_ms_journaled": summary([sum(r["serving_compile_s"]) for r in rs], 1e3),
            "warmup_compiles": [r["warmup_compiles"] for r in rs],
            "warmup_compile_cache_hit": [r["warmup_compile_cache_hit"] for r in rs],
            "jitwatch_first_request_ms": summary(
                [r["jitwatch_first_request_s"] for r in rs if r["jitwatch_first_request_s"]], 1e3
            ),
            "target_met": all(x <= 1.5 for x in ratios) if "/warmup" in label else None,
        }
    doc = write_result(
        args.out,
        "first_request",
        {
            "reps": args.reps,
            "requests": args.requests,
            "sizes": SIZES,
            "first_size": FIRST_SIZE,
            "scenarios": scenarios,
        },
    )
    print(f"first-request latency ({doc['machine'].get('gpu')}, {args.reps} processes per scenario)")
    print(
        f"{'scenario':<26} {'first (ms)':>10} {'steady (µs)':>11} {'ratio':>9} {'after-idle (µs)':>15} "
        f"{'torch op steady/idle (µs)':>26} {'compiles':>8}  target<=1.5x"
    )
    for label, s in scenarios.items():
        print(
            f"{label:<26} {s['first_request_ms']['median']:10.3f} {s['steady_state_us']['median']:11.1f} "
            f"{s['ratio_first_to_steady']['median']:8.2f}x {s['request_after_20ms_idle_us']['median']:15.1f} "
            f"{s['torch_op_steady_us']['median']:14.1f} / {s['torch_op_after_20ms_idle_us']['median']:9.1f} "
            f"{sum(s['serving_compiles']):>8}  "
            f"{'' if s['target_met'] is None else ('met' if s['target_met'] else 'MISSED')}"
        )


if __name__ == "__main__":
    main()
