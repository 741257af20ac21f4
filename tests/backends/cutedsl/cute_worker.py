"""A host process that uses CuTeDSL under jitwatch (run by the cutedsl tests, CPU and GPU).

Usage: ``python cute_worker.py SCENARIO`` with ``JITWATCH_DIR`` (journal), ``CUTE_DSL_CACHE_DIR``
and, without a GPU, ``CUTE_DSL_ARCH=sm_90a``. Scenarios:

* ``compile``: ``cute.compile`` in warmup (fp32, 32 elements), then in a request a new shape and
  dtype (fp16, 64 elements) — the library's explicit, never-cached compile path;
* ``call``: JIT on call — calling the ``@cute.jit`` function with a real tensor (fp32, 32), which
  compiles or loads from the file cache (``CUTE_DSL_CACHE_DIR``), then launches (on a GPU) or
  fails at launch (no driver: the error is the library's and reaches this host unchanged).

Prints one JSON line: backend status before/after the import, the library's own view (its cache
directory, which calls compiled) and jitwatch's compile records, read back from the journal.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jitwatch
from jitwatch.core.events import EventKind
from jitwatch.testing import read_events

scenario = sys.argv[1]
mon = jitwatch.install(tracer_provider=False)
before = mon.backend_statuses["cutedsl"].state
assert "cutlass" not in sys.modules

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import torch  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

after = mon.backend_statuses["cutedsl"].state
device = "cuda" if torch.cuda.is_available() else "cpu"


@cute.kernel
def add_one_kernel(x: cute.Tensor) -> None:
    tidx, _, _ = cute.arch.thread_idx()
    x[tidx] = (x[tidx] + 1.0).to(x.element_type)


@cute.jit
def add_one(x: cute.Tensor) -> None:
    add_one_kernel(x).launch(grid=(1, 1, 1), block=(x.shape[0], 1, 1))


library: dict[str, object] = {"calls": []}
seconds: dict[str, float] = {}
if scenario == "compile":
    with mon.warmup():
        t = time.perf_counter()
        cute.compile(add_one, from_dlpack(torch.zeros(32, device=device)))
        seconds["warmup"] = time.perf_counter() - t
    with mon.request("req-cute-1"):
        t = time.perf_counter()
        try:
            compiled = cute.compile(add_one, from_dlpack(torch.zeros(64, dtype=torch.float16, device=device)))
        except Exception as exc:  # noqa: BLE001 - error mode: report what reached the host
            library["serving_error"] = type(exc).__name__
        seconds["serving"] = time.perf_counter() - t
        if device == "cuda" and "serving_error" not in library:
            y = torch.zeros(64, dtype=torch.float16, device=device)
            compiled(from_dlpack(y))
            torch.cuda.synchronize()
            library["result_ok"] = bool((y == 1).all())
elif scenario in ("coexist-vllm-first", "coexist-jitwatch-first"):
    # vLLM's JIT monitor wraps the module attribute cutlass.cute.compile (functools.wraps + a log)
    import functools
    import inspect

    from cutlass.base_dsl.compile_backend import CompilerBackend

    pristine = inspect.unwrap(CompilerBackend.__dict__["compile"])
    seen: list[str] = []

    def vllm_wrap() -> None:
        original = cute.compile

        @functools.wraps(original)
        def monitored(*args: object, **kwargs: object) -> object:
            seen.append("vllm")
            return original(*args, **kwargs)

        cute.compile = monitored

    if scenario == "coexist-vllm-first":
        jitwatch.uninstall()
        vllm_wrap()
        mon = jitwatch.install(tracer_provider=False)
    else:
        vllm_wrap()
    with mon.warmup():
        cute.compile(add_one, from_dlpack(torch.zeros(16, device=device)))
    library["vllm_saw"] = list(seen)
    library["wrapped_while_installed"] = CompilerBackend.__dict__["compile"] is not pristine
    mon.flush()
    jitwatch_dir = os.environ["JITWATCH_DIR"]
    n = len([e for e in read_events(jitwatch_dir, EventKind.COMPILE) if e.backend == "cutedsl"])
    jitwatch.uninstall()
    library["restored"] = CompilerBackend.__dict__["compile"] is pristine
    cute.compile(add_one, from_dlpack(torch.zeros(8, device=device)))  # still works, through vLLM's wrapper
    library["vllm_saw_after_uninstall"] = list(seen)
    library["compiles_recorded"] = n
    mon = jitwatch.install(tracer_provider=False)
else:
    x = torch.zeros(32, device=device)
    with mon.warmup():
        t = time.perf_counter()
        try:
            add_one(from_dlpack(x))
            if device == "cuda":
                torch.cuda.synchronize()
            library["launch"] = "ok" if bool((x == 1).all()) else "wrong result"
        except Exception as exc:  # noqa: BLE001 - no GPU: the library's own launch error, unchanged
            library["launch"] = f"{type(exc).__module__}.{type(exc).__name__}"
        seconds["call"] = time.perf_counter() - t

cache_dir = os.environ.get("CUTE_DSL_CACHE_DIR")
library["cache_files"] = sorted(os.listdir(cache_dir)) if cache_dir and os.path.isdir(cache_dir) else []
mon.flush()
records = [
    {
        "name": e.kernel,
        "key": e.key,
        "cache_hit": e.cache_hit,
        "phase": e.phase.value,
        "request": e.attrs.get("request"),
        "duration_s": e.duration_s,
        "attrs": {k: e.attrs.get(k) for k in ("arch", "cache_enabled", "entry", "module_hash", "spec")},
    }
    for e in read_events(os.environ["JITWATCH_DIR"], EventKind.COMPILE)
    if e.backend == "cutedsl" and e.pid == os.getpid()  # this process's: a journal may hold several
]
status = mon.backend_statuses["cutedsl"]
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
    "cutlass": getattr(cutlass, "__version__", None),
}
jitwatch.uninstall()
print(json.dumps(out))
