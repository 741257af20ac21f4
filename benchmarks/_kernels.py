"""Small Triton kernels the benchmarks compile when they need many distinct compiles.

Each ``(kernel, BLOCK, num_warps)`` triple is a separate specialization, so
:func:`compile_plan` yields as many real compiles as asked for. On a CPU machine they are
compiled with :mod:`jitwatch.backends.triton.compile_only` (``kernel.warmup``); on a GPU they launch for real.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import triton
import triton.language as tl


@triton.jit
def bench_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def bench_rownorm_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    tl.store(out_ptr + row * stride + offs, d / tl.sqrt(var + 1e-5), mask=mask)


@triton.jit
def bench_slots_kernel(pos_ptr, table_ptr, out_ptr, n, stride, block_size, BLOCK: tl.constexpr):
    """The same shape of work as a slot-mapping kernel (gather from a block table)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pos = tl.load(pos_ptr + offs, mask=mask, other=0)
    blk = tl.load(table_ptr + (pos // block_size) * stride, mask=mask, other=0)
    tl.store(out_ptr + offs, blk * block_size + pos % block_size, mask=mask)


KERNELS = ("add", "rownorm", "slots")
BLOCKS = (64, 128, 256, 512, 1024, 2048)
WARPS = (1, 2, 4, 8)


def compile_plan(n: int) -> list[tuple[str, int, int]]:
    """``n`` distinct ``(kernel, BLOCK, num_warps)`` specializations (at most 72)."""
    plan = list(itertools.product(KERNELS, BLOCKS, WARPS))
    # interleave kernels so a short plan still covers all three
    plan.sort(key=lambda t: (BLOCKS.index(t[1]) * len(WARPS) + WARPS.index(t[2]), KERNELS.index(t[0])))
    if n > len(plan):
        raise ValueError(f"at most {len(plan)} distinct compiles, asked for {n}")
    return plan[:n]


def make_launcher(device: str) -> Callable[[str, int, int, bool], Any]:
    """Return ``run(kernel_name, BLOCK, num_warps, launch)``.

    ``launch=False``: ``kernel.warmup(..., grid=(1,))`` (compile only, what the compile-only driver
    supports); ``launch=True``: a real ``kernel[grid](...)`` on ``device`` (needs a GPU).
    """
    import torch

    n = 4096
    f32 = torch.randn(n, device=device)
    f32b = torch.randn(n, device=device)
    out = torch.empty(n, device=device)
    pos = torch.arange(n, device=device, dtype=torch.int64)
    table = torch.arange(n, device=device, dtype=torch.int32)
    out64 = torch.empty(n, device=device, dtype=torch.int64)

    def args_for(name: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if name == "add":
            return bench_add_kernel, (f32, f32b, out, n)
        if name == "rownorm":
            return bench_rownorm_kernel, (f32, out, 64, 64)
        return bench_slots_kernel, (pos, table, out64, n, 1, 16)

    def run(name: str, block: int, warps: int, launch: bool) -> Any:
        kernel, args = args_for(name)
        grid = (max(1, n // block),) if name != "rownorm" else (1,)
        if launch:
            return kernel[grid](*args, BLOCK=block, num_warps=warps)  # type: ignore[index]
        return kernel.warmup(*args, BLOCK=block, num_warps=warps, grid=grid)  # type: ignore[attr-defined]

    return run


def jit_functions() -> Iterator[Any]:
    yield from (bench_add_kernel, bench_rownorm_kernel, bench_slots_kernel)


def clear_memory_caches() -> None:
    """Forget every in-memory compiled kernel (the next call is a disk-cache hit, if any)."""
    for fn in jit_functions():
        fn.device_caches.clear()


def hook_slots() -> list[tuple[Any, str]]:
    """Triton's three compile hook slots jitwatch may hold, as ``(holder, attribute)``, in the order
    Triton calls them in a compile: ``jit_cache_hook``, the compilation listener,
    ``jit_post_compile_hook``."""
    rt = triton.knobs.runtime
    return [(rt, "jit_cache_hook"), (triton.knobs.compilation, "listener"), (rt, "jit_post_compile_hook")]


def hook_keywords(burst: Callable[[], Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """The callables in :func:`hook_slots` now, and the keywords Triton passed each of them in the
    first compile of one ``burst()`` (``{}`` for an empty slot): for calling the hooks back to back
    outside a compile (a tight loop). The slots hold the same callables again afterwards."""
    slots = hook_slots()
    saved = [getattr(h, a) for h, a in slots]
    seen: list[dict[str, Any] | None] = [None, None, None]

    def grab(fn: Any, i: int) -> Any:
        def hook(*args: Any, **kwargs: Any) -> Any:
            if seen[i] is None:
                seen[i] = kwargs
            return fn(*args, **kwargs)

        return hook

    for (h, a), fn, i in zip(slots, saved, range(3), strict=True):
        if fn is not None:
            setattr(h, a, grab(fn, i))
    try:
        burst()
    finally:
        for (h, a), fn in zip(slots, saved, strict=True):
            setattr(h, a, fn)
    return saved, [k or {} for k in seen]
