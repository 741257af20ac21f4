"""``scale`` one line lower and with another body (``n`` still specialized): another
``JITFunction.cache_key``, every key of source_kernels_v1.py still possible."""

import triton
import triton.language as tl

__name__ = "tests.views.source_kernels_v1"

# moved down one line


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)
