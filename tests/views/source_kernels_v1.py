"""``scale`` as first written (``n`` specialized), for tests/views/test_coverage_other_source.py.
source_kernels_v2.py is the same kernel with ``do_not_specialize=["n"]``: same lines, so the same
``JITFunction.cache_key`` (Triton hashes from the ``def`` line)."""

import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
