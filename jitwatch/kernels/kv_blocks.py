"""Zeroing freed KV-cache blocks: a kernel that engine warmups typically never reach.

Engines call a kernel like this only when requests finish and their blocks are recycled, which a
dummy warmup run never does (field case 2 in ``docs/slot-mapping.md``). The demo uses it to
show exactly one serving-phase compile: ``num_blocks`` is in ``do_not_specialize``, so 1, 16 and
3 freed blocks share one key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import triton
import triton.language as tl

if TYPE_CHECKING:
    import torch

ZERO_TILE = 1024
"""Elements cleared per loop iteration (the ``BLOCK`` constexpr)."""


@triton.jit(do_not_specialize=["num_blocks"])
def zero_kv_blocks_kernel(  # type: ignore[no-untyped-def]  # Triton reads annotations
    kv_cache_ptr,
    block_ids_ptr,
    num_blocks,
    block_numel,
    BLOCK: tl.constexpr,
):
    """Program ``i`` clears ``kv_cache[block_ids[i], :]`` (``block_numel`` elements)."""
    i = tl.program_id(0)
    if i < num_blocks:
        block = tl.load(block_ids_ptr + i).to(tl.int64)
        base = kv_cache_ptr + block * block_numel
        for start in range(0, block_numel, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            tl.store(base + offs, tl.zeros([BLOCK], dtype=kv_cache_ptr.dtype.element_ty), mask=offs < block_numel)


@dataclass
class ZeroResult:
    """``source`` is ``"kernel"`` (launched on a GPU) or ``"reference"`` (CPU: compiled only,
    values written by torch)."""

    source: Literal["kernel", "reference"]
    num_blocks: int


def zero_kv_blocks(kv_cache: torch.Tensor, block_ids: torch.Tensor, *, kernel: Any | None = None) -> ZeroResult:
    """Zero rows ``block_ids`` of ``kv_cache``.

    Args:
        kv_cache: ``[num_blocks_total, block_numel]``, contiguous, any float dtype.
        block_ids: int32 ``[n]`` block ids to clear (the null block 0 is allowed but pointless).
        kernel: default :data:`zero_kv_blocks_kernel`.

    On CUDA tensors the kernel launches with grid ``(n,)``; on CPU it is compiled with the
    compile-only driver (``kernel.warmup``) and ``kv_cache[block_ids] = 0`` does the work.

    Raises:
        ValueError: ``kv_cache`` is not 2-D contiguous, or ``block_ids`` is not int32.
    """
    import torch

    from jitwatch.kernels.slot_mapping import compile_for_cpu

    kernel = zero_kv_blocks_kernel if kernel is None else kernel
    if kv_cache.dim() != 2 or not kv_cache.is_contiguous():
        raise ValueError("kv_cache must be a contiguous 2-D tensor")
    if block_ids.dtype != torch.int32:
        raise ValueError("block_ids must be int32")
    n = block_ids.numel()
    args = (kv_cache, block_ids, n, kv_cache.shape[1])
    if kv_cache.is_cuda:
        if n:
            kernel[(n,)](*args, BLOCK=ZERO_TILE)
        return ZeroResult("kernel", n)
    compile_for_cpu(kernel, args, (max(n, 1),), {"BLOCK": ZERO_TILE})
    if n:
        kv_cache[block_ids.to(torch.int64)] = 0
    return ZeroResult("reference", n)
