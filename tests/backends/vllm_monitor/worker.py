"""jitwatch and vLLM's own JIT monitor (``vllm.utils.jit_monitor``) in one process, both orders.

Run with ``.venv-vllm``'s Python and the DSL site on ``PYTHONPATH`` (``tests/backends/test_vllm_monitor.py``).
Usage: ``python vllm_monitor_worker.py ORDER`` where ORDER is ``vllm-first`` (vLLM's monitor
activated, then ``jitwatch.install()``) or ``jitwatch-first``. Then one CuTeDSL ``cute.compile`` and
one TileLang ``@tilelang.jit`` compile in serving; vLLM's monitor logs its own warning for each, jitwatch
records each; then jitwatch uninstalls and a further compile still reaches vLLM's wrapper.
Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import jitwatch
from jitwatch.core.events import EventKind
from jitwatch.testing import read_events

order = sys.argv[1]
seen: list[str] = []


class Catch(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "during inference" in msg:
            seen.append(msg.split(" during inference")[0])


import cutlass.cute as cute  # noqa: E402
import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402
import torch  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402
from vllm.utils import jit_monitor  # noqa: E402

logging.getLogger("vllm.utils.jit_monitor").addHandler(Catch())


@cute.kernel
def k(x: cute.Tensor) -> None:
    tidx, _, _ = cute.arch.thread_idx()
    x[tidx] = (x[tidx] + 1.0).to(x.element_type)


@cute.jit
def add_one(x: cute.Tensor) -> None:
    k(x).launch(grid=(1, 1, 1), block=(x.shape[0], 1, 1))


@tilelang.jit(out_idx=[1], target={"kind": "cuda", "arch": "sm_90"})
def tl_add(n: int):
    @T.prim_func
    def tl_add_kernel(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + T.cast(1, "float32")

    return tl_add_kernel


if order == "vllm-first":
    jit_monitor.activate(mode="warn", verbose=True)
    mon = jitwatch.install(tracer_provider=False)
else:
    mon = jitwatch.install(tracer_provider=False)
    jit_monitor.activate(mode="warn", verbose=True)
with mon.warmup():
    pass
with mon.request("req-1"):
    cute.compile(add_one, from_dlpack(torch.zeros(32)))
    cute.compile[cute.GenerateLineInfo(True)](add_one, from_dlpack(torch.zeros(16)))  # vLLM keeps cute.compile[...]
    tl_add(256)
mon.flush()
records = [
    (e.backend, e.kernel, e.phase.value)
    for e in read_events(os.environ["JITWATCH_DIR"], EventKind.COMPILE)
    if e.backend in ("cutedsl", "tilelang")
]
vllm_before = list(seen)
jitwatch.uninstall()
cute.compile(add_one, from_dlpack(torch.zeros(8)))
tl_add(512)
print(json.dumps({"records": records, "vllm_saw": vllm_before, "vllm_saw_after_uninstall": seen[len(vllm_before) :]}))
