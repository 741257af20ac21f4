"""A kernel that takes another ``@triton.jit`` function as a constexpr (importable as ``kernels_jitfn``)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def double(x):
    return x * 2


@triton.jit
def apply(x_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, FN(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)
