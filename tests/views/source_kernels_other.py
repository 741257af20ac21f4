"""A second kernel named ``scale`` (as source_kernels_v1.py's), in a module of its own, under
``do_not_specialize=["n"]``: for tests/views/test_coverage_other_source.py."""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n"])
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
