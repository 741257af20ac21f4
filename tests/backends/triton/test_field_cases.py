"""The six field cases of post-warmup compiles (docs: /work/shared/notes/field-cases.md), rebuilt
as small kernels of our own and compiled for real (compile-only driver, sm_90).

For each case an independent :class:`~jitwatch.testing.TritonHookRecorder` is installed *before*
jitwatch (so jitwatch chains to it) and the test checks that jitwatch journals exactly the
compiles Triton's own hooks saw — same kernel, same key, same phase — and the number of
serving-phase compiles the case predicts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from jitwatch.backends.triton.compile_only import gpu_available
from jitwatch.backends.triton.hooks import probe_triton
from jitwatch.core.events import EventKind, Phase
from jitwatch.testing import MonitorHarness, TritonHookRecorder, fresh_kernel_cache, monitored


# ------------------------------------------------------------------------------ kernels
@triton.jit
def fc_slot_mapping(
    num_tokens, positions_ptr, block_table_ptr, block_table_stride, slot_ptr, block_size, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < num_tokens
    pos = tl.load(positions_ptr + offs, mask=m, other=0)
    blk = tl.load(block_table_ptr + (pos // block_size) * block_table_stride, mask=m, other=0)
    tl.store(slot_ptr + offs, blk * block_size + pos % block_size, mask=m)


@triton.jit(do_not_specialize=["num_tokens"])
def fc_slot_mapping_dns(
    num_tokens, positions_ptr, block_table_ptr, block_table_stride, slot_ptr, block_size, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < num_tokens
    pos = tl.load(positions_ptr + offs, mask=m, other=0)
    blk = tl.load(block_table_ptr + (pos // block_size) * block_table_stride, mask=m, other=0)
    tl.store(slot_ptr + offs, blk * block_size + pos % block_size, mask=m)


@triton.jit
def fc_zero_kv_blocks(kv_ptr, block_ids_ptr, num_blocks, BLOCK_ELEMS: tl.constexpr):
    b = tl.program_id(0)
    if b < num_blocks:
        blk = tl.load(block_ids_ptr + b)
        offs = tl.arange(0, BLOCK_ELEMS)
        tl.store(kv_ptr + blk * BLOCK_ELEMS + offs, tl.zeros([BLOCK_ELEMS], dtype=tl.float32))


@triton.jit
def fc_sample(logits_ptr, out_ptr, batch, top_k, top_p, VOCAB: tl.constexpr, TOP_K: tl.constexpr, TOP_P: tl.constexpr):
    row = tl.program_id(0)
    if row < batch:
        offs = tl.arange(0, VOCAB)
        x = tl.load(logits_ptr + row * VOCAB + offs)
        if TOP_K:
            x = tl.where(offs < top_k, x, float("-inf"))
        if TOP_P:
            x = x * top_p
        tl.store(out_ptr + row, tl.argmax(x, axis=0))


@triton.jit
def fc_copy(out_ptr, x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def fc_tile(x_ptr, out_ptr, tokens, TILE: tl.constexpr):
    offs = tl.arange(0, TILE)
    m = offs < tokens
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m, other=0.0) * 2, mask=m)


AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK": 32}, num_warps=1),
    triton.Config({"BLOCK": 64}, num_warps=2),
    triton.Config({"BLOCK": 128}, num_warps=4),
]


@triton.autotune(configs=AUTOTUNE_CONFIGS, key=["n"])
@triton.jit
def fc_autotuned(x_ptr, out_ptr, n, FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if FLAG:
        x = x + 1
    tl.store(out_ptr + offs, x, mask=m)


ALL = [fc_slot_mapping, fc_slot_mapping_dns, fc_zero_kv_blocks, fc_sample, fc_copy, fc_tile, fc_autotuned]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    fresh_kernel_cache(*ALL)


# ------------------------------------------------------------------------------ harness
@contextmanager
def watched(tmp_path: Path, triton_cache: Path, **kw: Any) -> Iterator[tuple[TritonHookRecorder, MonitorHarness]]:
    """Recorder first (jitwatch chains to it), then a fresh monitor."""
    box: dict[str, MonitorHarness] = {}
    rec = TritonHookRecorder(phase=lambda: box["h"].monitor.phase if "h" in box else None)
    with rec:
        with monitored(
            journal_dir=kw.pop("journal_dir", tmp_path / "journal"), triton_cache_dir=triton_cache, **kw
        ) as h:
            box["h"] = h
            yield rec, h


def assert_same_as_triton(rec: TritonHookRecorder, h: MonitorHarness) -> list[Any]:
    """jitwatch's compile events == the recorder's compiles (kernel, key, phase, cache hit), in order."""
    ours = [(e.kernel, e.key, e.phase, e.cache_hit) for e in h.compiles()]
    theirs = [(r.kernel, r.key, r.phase, r.cache_hit) for r in rec.compiles]
    assert ours == theirs
    assert len(rec.started) == len(rec.compiles)  # every started compile finished
    return h.compiles(Phase.SERVING)


def i32(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.int32)


def f32(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.float32)


# ------------------------------------------------------------------------------ 1. slot mapping
def _slot(kernel: Any, num_tokens: int, stride: int) -> None:
    kernel.warmup(num_tokens, i32(4096), i32(4096), stride, i32(4096), 16, BLOCK=128, grid=(1,))


def test_case1_slot_mapping_specialized(tmp_path, triton_cache) -> None:
    """Warmed with 2048 tokens and stride 64; requests of 1, 16 and 5 tokens, then stride 1.

    Triton puts a non-constexpr int in one of three classes (==1, %16==0, other), so a single warmup
    size always covers one of {1, 16, 5}: 2048 covers 16. Serving compiles: 1 token, 5 tokens,
    stride 1 → three (the field note's "three for the sizes" assumes a warmup size in none of the
    classes, which Triton's rules do not allow).
    """
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            _slot(fc_slot_mapping, 2048, 64)
        for n in (1, 16, 5):
            _slot(fc_slot_mapping, n, 64)
        _slot(fc_slot_mapping, 2048, 1)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 3
    assert serving[0].attrs["constexprs"].get("num_tokens") == 1
    assert serving[2].attrs["constexprs"].get("block_table_stride") == 1


def test_case1_slot_mapping_num_tokens_unspecialized(tmp_path, triton_cache) -> None:
    """With ``do_not_specialize=["num_tokens"]`` only the stride-1 variant compiles in serving."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            _slot(fc_slot_mapping_dns, 2048, 64)
        for n in (1, 16, 5):
            _slot(fc_slot_mapping_dns, n, 64)
        _slot(fc_slot_mapping_dns, 2048, 1)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 1
    assert serving[0].attrs["constexprs"] == {"BLOCK": 128, "block_table_stride": 1}


# ------------------------------------------------------------------------------ 2. KV-block zeroing
def test_case2_kv_zeroing_never_warmed_and_which_rank(tmp_path, triton_cache) -> None:
    """Two tensor-parallel ranks share a journal; only rank 1 frees blocks and compiles the zeroing
    kernel (1, 16 then 3 blocks): three serving compiles, all attributed to rank 1 with times."""
    journal = tmp_path / "journal"
    per_rank: dict[int, list[Any]] = {}
    for rank in (0, 1):
        fresh_kernel_cache(fc_zero_kv_blocks)  # each rank is its own process
        with watched(tmp_path, triton_cache, journal_dir=journal, rank=rank) as (rec, h):
            with h.monitor.warmup():
                pass  # dummy runs never free KV blocks
            if rank == 1:
                for nblocks in (1, 16, 3):
                    with h.monitor.request():
                        fc_zero_kv_blocks.warmup(f32(1 << 16), i32(64), nblocks, BLOCK_ELEMS=256, grid=(nblocks,))
            per_rank[rank] = assert_same_as_triton(rec, h)
        # journal read after both: the rank 0 monitor saw nothing
    assert per_rank[0] == []
    assert len(per_rank[1]) == 3
    assert {e.rank for e in per_rank[1]} == {1}
    assert all(e.start_ts is not None and e.duration_s and e.duration_s > 0 for e in per_rank[1])
    assert [e.attrs["request_id"] for e in per_rank[1]] == [1, 2, 3]


# ------------------------------------------------------------------------------ 3. flag combinations
def _sample(batch: int, top_k: bool, top_p: bool) -> None:
    fc_sample.warmup(f32(64 * 128), i32(64), batch, 5, 0.9, VOCAB=128, TOP_K=top_k, TOP_P=top_p, grid=(batch,))


def test_case3_flag_combinations(tmp_path, triton_cache) -> None:
    """Warmed with top-k and top-p on at batch 16; serving uses top-k only, top-p only, and batch 15."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            _sample(16, True, True)
        _sample(16, True, True)  # covered
        _sample(16, True, False)
        _sample(16, False, True)
        _sample(15, True, True)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 3
    assert [(e.attrs["constexprs"]["TOP_K"], e.attrs["constexprs"]["TOP_P"]) for e in serving] == [
        (True, False),
        (False, True),
        (True, True),
    ]


# ------------------------------------------------------------------------------ 4. offset view
def test_case4_offset_view_pointer_alignment(tmp_path, triton_cache) -> None:
    """A slice starting one fp32 element in is not 16-byte aligned: one serving compile."""
    out = f32(1025)
    x = f32(1024)
    assert out.data_ptr() % 16 == 0
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            fc_copy.warmup(out, x, 512, BLOCK=64, grid=(1,))
        fc_copy.warmup(out[:1024], x, 512, BLOCK=64, grid=(1,))  # same pointer class
        # Warmup maps tensors to dtype placeholders (data_ptr 0); JITFunction.run with the real
        # tensors sees the misaligned pointer. Compile-only: run(warmup=True) compiles, never launches.
        fc_copy.run(out[1:], x, 512, BLOCK=64, grid=(1,), warmup=True)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 1
    assert "('*fp32', '')" in (serving[0].key or "")


# ------------------------------------------------------------------------------ 5. tile size
def _tile(tokens: int) -> None:
    tile = max(16, min(triton.next_power_of_2(tokens), 512))
    fc_tile.warmup(f32(512), f32(512), tokens, TILE=tile, grid=(1,))


def test_case5_tile_from_request(tmp_path, triton_cache) -> None:
    """Tile = next power of two of the request's tokens (16..512); warmup only saw 1-token requests."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            _tile(1)
        _tile(1)
        _tile(300)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 1
    assert serving[0].attrs["constexprs"]["TILE"] == 512


# ------------------------------------------------------------------------------ 6. autotune
def test_case6_autotune_per_config_compiles(tmp_path, triton_cache) -> None:
    """Compile-level part (CPU): ``Autotuner.warmup`` compiles every config — the compiles a
    benchmark sweep triggers. Warmed flag-off fp32, served flag-on bf16: one serving compile per
    config. The sweep itself (launches, the autotune event) is the gpu test below."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            fc_autotuned.warmup(f32(4096), f32(4096), 4096, FLAG=False, grid=(1,))
        bf = torch.empty(4096, dtype=torch.bfloat16)
        fc_autotuned.warmup(bf, bf, 4096, FLAG=True, grid=(1,))
        serving = assert_same_as_triton(rec, h)
        warm = h.compiles(Phase.WARMUP)
    assert len(warm) == len(serving) == len(AUTOTUNE_CONFIGS)
    assert sorted(e.attrs["constexprs"]["BLOCK"] for e in serving) == [32, 64, 128]
    assert all(e.attrs["signature"]["x_ptr"] == "*bf16" and e.attrs["constexprs"]["FLAG"] is True for e in serving)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU: autotune benchmarks launch kernels")
def test_case6_autotune_sweep_on_gpu(tmp_path, triton_cache) -> None:
    """On a GPU: a real sweep in serving → one compile per config, and one autotune event per sweep:
    from ``knobs.autotuning.listener`` on Triton 3.8+, from the ``Autotuner.prune_configs``/``_bench``
    wrappers before 3.8 (``attrs.source`` says which); same event shape either way."""
    x32 = torch.zeros(4096, dtype=torch.float32, device="cuda")
    xbf = torch.zeros(4096, dtype=torch.bfloat16, device="cuda")
    grid = lambda meta: (triton.cdiv(4096, meta["BLOCK"]),)  # noqa: E731
    with watched(tmp_path, triton_cache, compile_only=False) as (rec, h):
        with h.monitor.warmup():
            fc_autotuned[grid](x32, x32, 4096, FLAG=False)
        fc_autotuned[grid](xbf, xbf, 4096, FLAG=True)
        torch.cuda.synchronize()
        serving = assert_same_as_triton(rec, h)
        autotunes = h.events(EventKind.AUTOTUNE)
    assert len(serving) == len(AUTOTUNE_CONFIGS)
    support = probe_triton()
    assert support.autotune_mechanism == ("listener" if support.autotuning_listener else "autotuner_wrap")
    source = "autotuning_listener" if support.autotuning_listener else "autotuner_wrap"
    assert [(e.phase, e.attrs["configs"], e.attrs["source"]) for e in autotunes] == [
        (Phase.WARMUP, len(AUTOTUNE_CONFIGS), source),
        (Phase.SERVING, len(AUTOTUNE_CONFIGS), source),
    ]
    assert [e.key for e in autotunes] == [
        "(4096, 'torch.float32', 'torch.float32')",
        "(4096, 'torch.bfloat16', 'torch.bfloat16')",
    ]
    assert all(e.kernel == "fc_autotuned" and (e.duration_s or 0) > 0 for e in autotunes)
    assert all("BLOCK: " in e.attrs["best_config"] for e in autotunes)
