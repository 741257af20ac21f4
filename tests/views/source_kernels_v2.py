"""source_kernels_v1.py's ``scale`` edited: ``do_not_specialize=["n"]``, same def line and module."""

import triton
import triton.language as tl

__name__ = "tests.views.source_kernels_v1"


@triton.jit(do_not_specialize=["n"])
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
