"""Small Triton kernels rebuilding the six field cases of ``shared/notes/field-cases.md``.

Importable by name (``tests/`` on ``sys.path``) so a manifest can name them and a fresh process
can replay them. ``CASES`` maps each case to its warmup calls and its serving calls; each call is
``kernel.warmup(*args, grid=(1,), **kwargs)`` with real (CPU) tensors, so pointer alignment is real
and nothing launches (compile-only driver).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def slot_mapping(pos_ptr, block_table_ptr, slot_ptr, num_tokens, block_table_stride, block_size, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_tokens
    pos = tl.load(pos_ptr + offs, mask=mask, other=0)
    block = tl.load(block_table_ptr + (pos // block_size) * block_table_stride, mask=mask, other=0)
    tl.store(slot_ptr + offs, block * block_size + pos % block_size, mask=mask)


@triton.jit(do_not_specialize=["num_tokens"])
def slot_mapping_dns(
    pos_ptr, block_table_ptr, slot_ptr, num_tokens, block_table_stride, block_size, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_tokens
    pos = tl.load(pos_ptr + offs, mask=mask, other=0)
    block = tl.load(block_table_ptr + (pos // block_size) * block_table_stride, mask=mask, other=0)
    tl.store(slot_ptr + offs, block * block_size + pos % block_size, mask=mask)


@triton.jit
def zero_kv_blocks(kv_ptr, block_ids_ptr, num_blocks, block_numel, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    if b < num_blocks:
        blk = tl.load(block_ids_ptr + b)
        for start in range(0, block_numel, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            tl.store(kv_ptr + blk * block_numel + offs, 0.0, mask=offs < block_numel)


@triton.jit
def sample(logits_ptr, out_ptr, batch_size, vocab, TOP_K: tl.constexpr, TOP_P: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(logits_ptr + row * vocab + offs, mask=(offs < vocab) & (row < batch_size), other=-float("inf"))
    if TOP_K:
        x = x * 2.0
    if TOP_P:
        x = x - tl.max(x, 0)
    tl.store(out_ptr + row, tl.argmax(x, 0))


@triton.jit
def scale_copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask) * 2.0, mask=mask)


@triton.jit
def tiled_rows(x_ptr, out_ptr, tokens, TILE: tl.constexpr):
    offs = tl.arange(0, TILE)
    x = tl.load(x_ptr + offs, mask=offs < tokens, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(x, 0))


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 64}, num_warps=2),
        triton.Config({"BLOCK": 128}, num_warps=4),
    ],
    key=["n"],
)
@triton.jit
def tuned_scale(x_ptr, out_ptr, n, FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if FLAG:
        x = x * 3.0
    tl.store(out_ptr + offs, x, mask=mask)


def tile_for(tokens: int, cap: int = 512) -> int:
    """Field case 5: next power of two of the tokens per request, at least 16, capped."""
    return max(16, min(cap, triton.next_power_of_2(tokens)))


Call = Callable[[], Any]


def _slot(kernel: Any, num_tokens: int, stride: int) -> Call:
    def call() -> Any:
        pos = torch.zeros(2048, dtype=torch.int64)
        bt = torch.zeros(4096, dtype=torch.int32)
        slots = torch.empty(2048, dtype=torch.int64)
        return kernel.warmup(pos, bt, slots, num_tokens, stride, 16, BLOCK=128, grid=(1,))

    return call


def _zero(blocks: int) -> Call:
    def call() -> Any:
        kv = torch.zeros(64 * 256)
        ids = torch.zeros(64, dtype=torch.int32)
        return zero_kv_blocks.warmup(kv, ids, blocks, 256, BLOCK=256, grid=(blocks,))

    return call


def _sample(batch: int, top_k: bool, top_p: bool) -> Call:
    def call() -> Any:
        logits = torch.zeros(batch * 64)
        out = torch.empty(batch, dtype=torch.int32)
        return sample.warmup(logits, out, batch, 64, TOP_K=top_k, TOP_P=top_p, BLOCK=64, grid=(batch,))

    return call


def _copy(offset: int) -> Call:
    def call() -> Any:
        src = torch.zeros(1024)
        dst = torch.empty(1024)
        return scale_copy.warmup(src, dst[offset:], 1000, BLOCK=256, grid=(4,))

    return call


def _tiled(tokens: int) -> Call:
    def call() -> Any:
        x = torch.zeros(1024)
        out = torch.empty(16)
        return tiled_rows.warmup(x, out, tokens, TILE=tile_for(tokens), grid=(1,))

    return call


def _tuned(dtype: torch.dtype, flag: bool) -> Call:
    def call() -> Any:
        x = torch.zeros(1024, dtype=dtype)
        out = torch.empty(1024, dtype=dtype)
        return tuned_scale.warmup(x, out, 1024, FLAG=flag, grid=(1,))

    return call


CASES: dict[str, dict[str, Any]] = {
    # 1. slot mapping: warmed with 2048 tokens, stride 64; served 1, 16, 5 tokens and stride 1.
    # Triton 3.9: 1 (== 1) and 5 (other) are new classes, 16 shares 2048's (% 16); stride 1 is new.
    "slot_mapping": {
        "warmup": [_slot(slot_mapping, 2048, 64)],
        "serving": [*(_slot(slot_mapping, n, 64) for n in (1, 16, 5)), _slot(slot_mapping, 2048, 1)],
        "expected_serving": 3,
    },
    "slot_mapping_dns": {
        "warmup": [_slot(slot_mapping_dns, 2048, 64)],
        "serving": [*(_slot(slot_mapping_dns, n, 64) for n in (1, 16, 5)), _slot(slot_mapping_dns, 2048, 1)],
        "expected_serving": 1,
    },
    # 2. KV-block zeroing never reached by warmup: 1, 16, 3 blocks.
    "kv_zeroing": {"warmup": [], "serving": [_zero(1), _zero(16), _zero(3)], "expected_serving": 3},
    # 3. flag combinations: warmed both on at batch 16; served top-k only, top-p only, batch 15.
    "flags": {
        "warmup": [_sample(16, True, True)],
        "serving": [_sample(16, True, False), _sample(16, False, True), _sample(15, True, True)],
        "expected_serving": 3,
    },
    # 4. offset view: out[1:] fp32.
    "offset_view": {"warmup": [_copy(0)], "serving": [_copy(0), _copy(1)], "expected_serving": 1},
    # 5. tile from the request: warmed with 1-token requests, served 300 tokens.
    "tile": {"warmup": [_tiled(1)], "serving": [_tiled(1), _tiled(300)], "expected_serving": 1},
    # 6. autotune keyed on n with a constexpr flag: warmed flag-off fp32, served flag-on bf16.
    "autotune": {
        "warmup": [_tuned(torch.float32, False)],
        "serving": [_tuned(torch.bfloat16, True)],
        "expected_serving": 2,  # one compile per config
    },
}
