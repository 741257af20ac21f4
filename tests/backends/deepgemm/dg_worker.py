"""A host process that uses DeepGEMM's JIT under jitwatch (run by ``tests/gpu/test_deepgemm_gpu.py``).

Usage: ``python dg_worker.py OUT.json`` with ``JITWATCH_DIR``, ``DG_JIT_CACHE_DIR`` and
``DG_JIT_PRINT_COMPILER_COMMAND=1`` (DeepGEMM prints ``Running NVCC command: …`` for every compile,
its own view). Warmup runs a BF16 GEMM of one configuration; a request then runs a GEMM whose N
needs another configuration (a compile in serving) and the warmed one again (no compile). Run twice
with one cache directory: the second process finds both on disk.

Writes one JSON document to OUT.json (stdout belongs to DeepGEMM's C++ printf): backend status,
this process's compile records, the library's own view (cache entries before and after, with
``kernel.cu`` / ``kernel.cubin`` mtimes), per-call seconds and result checks.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import jitwatch
from jitwatch.core.events import EventKind
from jitwatch.testing import read_events

mon = jitwatch.install(tracer_provider=False)
before = mon.backend_statuses["deepgemm"].state
assert "deep_gemm" not in sys.modules

import deep_gemm  # noqa: E402
import torch  # noqa: E402

after = mon.backend_statuses["deepgemm"].state
CACHE = Path(os.environ["DG_JIT_CACHE_DIR"]) / "cache"
SHAPES = {"warmup": (128, 4096, 7168), "serving": (128, 2048, 7168), "serving_warmed": (128, 4096, 7168)}
library: dict[str, object] = {"version": getattr(deep_gemm, "__version__", None)}
seconds: dict[str, float] = {}


def entries() -> dict[str, dict[str, float]]:
    """DeepGEMM's own view: every entry of its disk cache, with its files' mtimes."""
    out: dict[str, dict[str, float]] = {}
    if CACHE.is_dir():
        for d in sorted(CACHE.iterdir()):
            out[d.name] = {f.name: f.stat().st_mtime for f in d.iterdir() if f.name in ("kernel.cu", "kernel.cubin")}
    return out


def gemm(label: str) -> None:
    m, n, k = SHAPES[label]
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t = time.perf_counter()
    deep_gemm.bf16_gemm_nt(a, b, d)
    torch.cuda.synchronize()
    seconds[label] = time.perf_counter() - t
    ref = a.float() @ b.float().t()
    library[f"{label}_rel_err"] = float(((d.float() - ref).abs().max() / ref.abs().max()).item())


library["entries_before"] = entries()
with mon.warmup():
    gemm("warmup")
with mon.request("req-dg-1"):
    gemm("serving")
    gemm("serving_warmed")
time.sleep(0.5)  # the watcher's wake after the last stall
library["entries_after"] = entries()
mon.flush()
records = [
    {
        "name": e.kernel,
        "key": e.key,
        "cache_hit": e.cache_hit,
        "phase": e.phase.value,
        "request": e.attrs.get("request"),
        "start_ts": e.start_ts,
        "duration_s": e.duration_s,
        "attrs": {k: e.attrs.get(k) for k in ("entry", "spec", "cubin_bytes", "stall_s")},
    }
    for e in read_events(os.environ["JITWATCH_DIR"], EventKind.COMPILE)
    if e.backend == "deepgemm" and e.pid == os.getpid()
]
status = mon.backend_statuses["deepgemm"]
backend = next(b for b in mon.backends if b.name == "deepgemm")
watcher = getattr(backend, "watcher", None)
out = {
    "before": before,
    "after": after,
    "hooks": list(status.hooks),
    "version": status.version,
    "degraded": status.degraded,
    "records": records,
    "library": library,
    "seconds": seconds,
    "hook_errors": mon.hook_errors,
    "foreign": getattr(watcher, "foreign", None),
}
jitwatch.uninstall()
Path(sys.argv[1]).write_text(json.dumps(out))
