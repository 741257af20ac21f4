"""A host process that uses FlashInfer's JIT under jitwatch (run by the flashinfer tests, CPU and GPU).

Usage: ``python fi_worker.py serve`` with ``JITWATCH_DIR`` and ``FLASHINFER_WORKSPACE_BASE``;
without a GPU, ``FLASHINFER_CUDA_ARCH_LIST=9.0a`` (nvcc builds for that arch; nothing launches).
Warmup gets FlashInfer's ``silu_and_mul`` module, a request then needs ``gelu_tanh_and_mul`` — a
module warmup did not build. On a GPU through the public ops (``flashinfer.activation``), with
results checked against torch; without one through the same JIT layer those ops call
(``gen_act_and_mul_module(...).build_and_load()``). Run twice with one workspace: the second
process finds both modules in FlashInfer's JIT cache.

Prints one JSON line: backend status, this process's compile records, the library's own view
(each module's ``.so`` in ``cached_ops``: present, rewritten or not), timings.
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
before = mon.backend_statuses["flashinfer"].state
assert "flashinfer" not in sys.modules

import flashinfer  # noqa: E402
import torch  # noqa: E402
from flashinfer.jit.activation import gen_act_and_mul_module  # noqa: E402

after = mon.backend_statuses["flashinfer"].state
gpu = torch.cuda.is_available()
library: dict[str, object] = {"version": flashinfer.__version__}
seconds: dict[str, float] = {}
MODULES = {"warmup": "silu", "serving": "gelu_tanh"}


def artifacts() -> dict[str, int]:
    """FlashInfer's own view: mtime (ns) of each JIT module's .so under its workspace."""
    out: dict[str, int] = {}
    for so in Path(os.environ["FLASHINFER_WORKSPACE_BASE"]).rglob("cached_ops/*/*.so"):
        out[so.stem] = so.stat().st_mtime_ns
    return out


def run(label: str) -> None:
    act = MODULES[label]
    t = time.perf_counter()
    try:
        if gpu:
            x = torch.randn(64, 2 * 1024, dtype=torch.float16, device="cuda")
            op = getattr(flashinfer.activation, f"{act}_and_mul")
            y = op(x)
            torch.cuda.synchronize()
            gate, up = x[:, :1024].float(), x[:, 1024:].float()
            ref = (
                torch.nn.functional.silu(gate) if act == "silu" else torch.nn.functional.gelu(gate, approximate="tanh")
            ) * up
            library[f"{label}_result_ok"] = bool(torch.allclose(y.float(), ref, atol=2e-2, rtol=2e-2))
        else:
            gen_act_and_mul_module(act).build_and_load()
    except Exception as exc:  # noqa: BLE001 - error mode: report what reached the host
        library[f"{label}_error"] = type(exc).__name__
        library[f"{label}_error_text"] = str(exc)[-800:]
    seconds[label] = time.perf_counter() - t


library["artifacts_before"] = artifacts()
with mon.warmup():
    run("warmup")
with mon.request("req-fi-1"):
    run("serving")
library["artifacts_after"] = artifacts()
mon.flush()
records = [
    {
        "name": e.kernel,
        "key": e.key,
        "cache_hit": e.cache_hit,
        "phase": e.phase.value,
        "request": e.attrs.get("request"),
        "duration_s": e.duration_s,
        "attrs": {k: e.attrs.get(k) for k in ("entry", "spec_type", "aot", "sources", "library")},
    }
    for e in read_events(os.environ["JITWATCH_DIR"], EventKind.COMPILE)
    if e.backend == "flashinfer" and e.pid == os.getpid()
]
status = mon.backend_statuses["flashinfer"]
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
}
jitwatch.uninstall()
print(json.dumps(out))
