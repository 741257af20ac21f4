"""GPU tier: manifest record → replay round trip with real launches, and first-request latency.

Run 1 (new process, empty ``TRITON_CACHE_DIR``): warmup launches the aligned copy and the
slot-mapping kernel with 2048 tokens; serving launches ``dst[1:]`` and 1/5-token slot mappings
(post-warmup compiles inside the first request). The journal is exported as a manifest. Run 2
(new process, another empty cache) replays the manifest inside warmup, then serves the same
requests: zero serving compiles, and the first request no longer pays for compiles. Prints one
``GPU_REPLAY {json}`` line with both runs' first-request latencies (seconds, wall clock, with
``torch.cuda.synchronize``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jitwatch.warmup.manifest import export

TESTS = Path(__file__).resolve().parents[1] / "backends" / "triton"

WORKER = r"""
import json, sys, time
sys.path.insert(0, {tests!r})
import torch
import jitwatch
from jitwatch.core.events import Phase
from jitwatch.warmup.replay import replay
import kernels_fieldcases as kf

dev = "cuda"
src = torch.randn(4096, device=dev); dst = torch.empty(4096, device=dev)
pos = torch.arange(2048, device=dev, dtype=torch.int64); bt = torch.zeros(16384, device=dev, dtype=torch.int32)
slots = torch.empty(2048, device=dev, dtype=torch.int64)

def copy(off):
    kf.scale_copy[(4,)](src, dst[off:], 1000, BLOCK=256)

def slot(n):
    kf.slot_mapping[(1,)](pos, bt, slots, n, 64, 16, BLOCK=128)

mon = jitwatch.install(mode="warn", journal_dir={journal!r}, tracer_provider=False)
report = None
with mon.warmup():
    copy(0); slot(2048)
    if {manifest!r}:
        report = replay({manifest!r}, allow=["kernels_fieldcases"])
    torch.cuda.synchronize()
t0 = time.perf_counter()
with mon.request("first"):
    copy(1); slot(1); slot(5)
    torch.cuda.synchronize()
first = time.perf_counter() - t0
t0 = time.perf_counter()
with mon.request("second"):
    copy(1); slot(1); slot(5)
    torch.cuda.synchronize()
second = time.perf_counter() - t0
mon.flush()
print("RESULT " + json.dumps({{"first_request_s": first, "second_request_s": second,
    "serving_compiles": mon.compiles_by_phase[Phase.SERVING],
    "replayed": None if report is None else report.compiled,
    "replay_wall_s": None if report is None else report.wall_s,
    "loaded": None if report is None else report.loaded}}))
"""


def _run(tmp: Path, name: str, manifest: str) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp / f"cache-{name}"), TRITON_DEFAULT_FP_FUSION="1")
    code = WORKER.format(tests=str(TESTS), journal=str(tmp / f"j-{name}"), manifest=manifest)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.split("RESULT ", 1)[1]))


def test_replay_round_trip_on_gpu(tmp_path: Path) -> None:
    run1 = _run(tmp_path, "run1", "")
    manifest, problems = export(tmp_path / "j-run1", tmp_path / "m.json", allow=["kernels_fieldcases"])
    assert problems == {} and len(manifest.entries) == 3
    run2 = _run(tmp_path, "run2", str(tmp_path / "m.json"))
    print("GPU_REPLAY " + json.dumps({"run1": run1, "run2": run2}))
    assert run1["serving_compiles"] == 3
    assert run2["replayed"] == 3
    assert run2["serving_compiles"] == 0
    assert run2["loaded"] == 3  # launchers built and modules loaded during warmup
