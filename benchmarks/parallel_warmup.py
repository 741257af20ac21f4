"""Parallel warmup benchmark: replay one manifest serially, with threads and with processes.

Usage::

    .venv/bin/python benchmarks/parallel_warmup.py [--variants 24] [--repeats 3] [--workers N]

1. Records a manifest: one process, compile-only driver, monitor installed, compiles ``--variants``
   distinct specializations of the field-case kernels (``tests/backends/triton/kernels_fieldcases.py``) and
   exports them with ``jitwatch.warmup.manifest.export(..., all_phases=True)``.
2. For each mode (serial, threads, processes) and repeat: a NEW process with an EMPTY
   ``TRITON_CACHE_DIR`` replays the manifest (``jitwatch.warmup.replay.replay``) and reports the replay's
   wall time (seconds, from the first resolve to the last kernel in the in-memory cache; process
   start-up and imports excluded, pool start-up included).
Prints a Markdown table (median of repeats) and the ratio serial / mode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "backends" / "triton"  # kernels_fieldcases.py

RECORD = r"""
import sys, torch
sys.path.insert(0, {tests!r})
from jitwatch.backends.triton.compile_only import activate
activate()
import jitwatch, kernels_fieldcases as kf
from jitwatch.warmup.manifest import export
mon = jitwatch.install(mode="warn", journal_dir={journal!r}, tracer_provider=False)
calls = []
for block in (64, 128, 256, 512):
    for n in (1000, 1024, 1):
        calls.append(
            lambda b=block, n=n: kf.scale_copy.warmup(torch.zeros(1024), torch.empty(1024), n, BLOCK=b, grid=(1,))
        )
for tk in (False, True):
    for tp in (False, True):
        for bs in (15, 16):
            calls.append(kf._sample(bs, tk, tp))
for n in (1, 16, 3):
    calls.append(kf._zero(n))
for t in (1, 20, 300):
    calls.append(kf._tiled(t))
for n, s in ((1, 64), (5, 64), (16, 1), (7, 3)):
    calls.append(kf._slot(kf.slot_mapping, n, s))
for c in calls[: {variants}]:
    c()
mon.flush()
m, _ = export({journal!r}, {manifest!r}, all_phases=True, allow=["kernels_fieldcases"])
print("ENTRIES", len(m.entries))
"""

REPLAY = r"""
import sys, json
sys.path.insert(0, {tests!r})
from jitwatch.backends.triton.compile_only import activate
activate()
import torch, triton, kernels_fieldcases  # imports outside the timed part
import os
from jitwatch.warmup.replay import replay
load = os.getloadavg()[0]
t0 = os.times()
r = replay({manifest!r}, allow=["kernels_fieldcases"], parallel={mode!r}, workers={workers})
t1 = os.times()
cpu = sum(t1[:4]) - sum(t0[:4])
print("RESULT " + json.dumps({{"wall_s": r.wall_s, "compiled": r.compiled, "failed": r.failed, "mode": r.mode,
                               "cpu_s": cpu, "load1": load}}))
"""


def run(code: str, cache: str) -> str:
    env = dict(os.environ, TRITON_CACHE_DIR=cache, TRITON_DEFAULT_FP_FUSION="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode != 0:  # the child's traceback, not only its command line
        raise SystemExit(f"parallel_warmup: a child process failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jitwatch-bench-") as tmp:
        manifest = str(Path(tmp) / "manifest.json")
        out = run(
            RECORD.format(tests=str(TESTS), journal=str(Path(tmp) / "j"), manifest=manifest, variants=a.variants),
            str(Path(tmp) / "c0"),
        )
        entries = int(out.split("ENTRIES")[-1].strip())
        figures: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        loads: list[float] = []
        for rep in range(a.repeats):
            for mode in ("serial", "threads", "processes"):
                cache = str(Path(tmp) / f"c-{mode}-{rep}")
                out = run(REPLAY.format(tests=str(TESTS), manifest=manifest, mode=mode, workers=a.workers), cache)
                res = json.loads(out.split("RESULT ", 1)[1])
                assert res["compiled"] == entries and res["failed"] == 0, res
                figures.setdefault(mode, []).append(res["wall_s"])
                cpu.setdefault(mode, []).append(res["cpu_s"])
                loads.append(res["load1"])
    serial = statistics.median(figures["serial"])
    print(f"{entries} specializations, {a.workers} workers, {os.cpu_count()} CPUs, repeats {a.repeats}")
    print(f"1-minute load average at each run's start: {min(loads):.1f} .. {max(loads):.1f}\n")
    print("| mode | wall time, s (median) | all runs, s | CPU s (median, ptxas incl.) | serial / mode |")
    print("|---|---|---|---|---|")
    for mode, vals in figures.items():
        med = statistics.median(vals)
        runs = ", ".join(f"{v:.2f}" for v in vals)
        print(f"| {mode} | {med:.2f} | {runs} | {statistics.median(cpu[mode]):.2f} | {serial / med:.2f}x |")
    if a.json:
        a.json.write_text(
            json.dumps(
                {"entries": entries, "workers": a.workers, "figures": figures, "cpu": cpu, "loads": loads}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
