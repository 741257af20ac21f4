"""A host process that uses TileLang under jitwatch (run by the tilelang tests, CPU and GPU).

Usage: ``python tl_worker.py SCENARIO`` with ``JITWATCH_DIR`` and ``TILELANG_CACHE_DIR``; without a
GPU, ``JITWATCH_TEST_TL_TARGET=sm_90`` compiles for that arch with the local nvcc (no launch).
Scenarios:

* ``serve``: ``@tilelang.jit`` kernel factory called in warmup for (1024, float32), then in a
  request for (2048, float16) — a new shape and dtype; on a GPU both kernels run and are checked.
  Run twice with one cache directory: the second process loads both from TileLang's disk cache;
* ``coexist-vllm-first`` / ``coexist-jitwatch-first``: a wrapper shaped like vLLM's JIT monitor
  (``functools.wraps`` over ``JITKernel.__init__``) installed before / after jitwatch; then
  uninstall.

Prints one JSON line: backend status, this process's compile records from the journal, the
library's own view (its cache directory entries), timings.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import time

import jitwatch
from jitwatch.core.events import EventKind
from jitwatch.testing import read_events

scenario = sys.argv[1]


def cache_entries() -> list[str]:
    """TileLang's own view: one directory per kernel-cache key under ``<cache>/<version>/<platform>/kernels``
    (its ``cuda-binaries`` sibling caches nvcc output by source and is not a kernel cache entry)."""
    found: list[str] = []
    for root, dirs, _files in os.walk(os.environ.get("TILELANG_CACHE_DIR", "")):
        if os.path.basename(root) == "kernels":
            found += dirs
    return sorted(found)


entries_before = cache_entries()
mon = jitwatch.install(tracer_provider=False)
before = mon.backend_statuses["tilelang"].state
assert "tilelang" not in sys.modules

import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402
import torch  # noqa: E402

after = mon.backend_statuses["tilelang"].state
arch = os.environ.get("JITWATCH_TEST_TL_TARGET")
target = {"kind": "cuda", "arch": arch} if arch else "cuda"
gpu = torch.cuda.is_available()


@tilelang.jit(out_idx=[-1], target=target)
def add_one(n: int, dtype: str):
    @T.prim_func
    def add_one_kernel(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + T.cast(1, dtype)

    return add_one_kernel


library: dict[str, object] = {}
seconds: dict[str, float] = {}


def run(n: int, dtype: str, label: str) -> None:
    t = time.perf_counter()
    try:
        kernel = add_one(n, dtype)
    except Exception as exc:  # noqa: BLE001 - error mode: report what reached the host
        library[f"{label}_error"] = type(exc).__name__
        library[f"{label}_error_text"] = str(exc)[-800:]
        return
    finally:
        seconds[label] = time.perf_counter() - t
    if gpu:
        a = torch.zeros(n, dtype=getattr(torch, dtype), device="cuda")
        b = kernel(a)
        torch.cuda.synchronize()
        library[f"{label}_result_ok"] = bool((b == 1).all())


if scenario == "serve":
    with mon.warmup():
        run(1024, "float32", "warmup")
    with mon.request("req-tl-1"):
        run(2048, "float16", "serving")
        run(2048, "float16", "serving_again")  # @tilelang.jit's in-memory cache: nothing compiles
else:
    from tilelang.jit.kernel import JITKernel

    pristine = inspect.unwrap(JITKernel.__dict__["__init__"])
    seen: list[str] = []

    def vllm_wrap() -> None:
        original = JITKernel.__init__

        @functools.wraps(original)
        def init_with_monitor(self: object, *args: object, **kwargs: object) -> None:
            if not kwargs.get("from_database", False):
                seen.append("vllm")
            original(self, *args, **kwargs)

        JITKernel.__init__ = init_with_monitor  # type: ignore[method-assign]

    if scenario == "coexist-vllm-first":
        jitwatch.uninstall()
        vllm_wrap()
        mon = jitwatch.install(tracer_provider=False)
    else:
        vllm_wrap()
    with mon.warmup():
        run(256, "float32", "warmup")
    library["vllm_saw"] = list(seen)
    mon.flush()
    n = len([e for e in read_events(os.environ["JITWATCH_DIR"], EventKind.COMPILE) if e.pid == os.getpid()])
    library["compiles_recorded"] = n
    library["signature_kept"] = str(inspect.signature(JITKernel.__init__)) == str(inspect.signature(pristine))
    jitwatch.uninstall()
    library["restored_under_vllm"] = inspect.unwrap(JITKernel.__dict__["__init__"]) is pristine
    run(512, "float32", "after_uninstall")
    library["vllm_saw_after_uninstall"] = list(seen)
    mon = jitwatch.install(tracer_provider=False)

library["cache_entries_before"] = entries_before
library["cache_entries"] = cache_entries()
mon.flush()
records = [
    {
        "name": e.kernel,
        "key": e.key,
        "cache_hit": e.cache_hit,
        "phase": e.phase.value,
        "request": e.attrs.get("request"),
        "duration_s": e.duration_s,
        "attrs": {k: e.attrs.get(k) for k in ("entry", "target", "execution_backend", "out_idx", "spec")},
    }
    for e in read_events(os.environ["JITWATCH_DIR"], EventKind.COMPILE)
    if e.backend == "tilelang" and e.pid == os.getpid()
]
status = mon.backend_statuses["tilelang"]
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
