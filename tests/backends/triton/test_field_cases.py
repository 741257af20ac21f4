"""The six field cases of post-warmup compiles (docs: /work/shared/notes/field-cases.md), rebuilt
as small kernels of our own and compiled for real (compile-only driver, sm_90).

For each case an independent :class:`~jitwatch.testing.TritonHookRecorder` is installed *before*
jitwatch (so jitwatch chains to it) and the test checks that jitwatch journals exactly the
compiles Triton's own hooks saw — same kernel, same key, same phase — and the number of
serving-phase compiles the case predicts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import triton

from jitwatch.backends.triton.compile_only import gpu_available
from jitwatch.backends.triton.hooks import probe_triton
from jitwatch.core.events import EventKind, Phase
from jitwatch.testing import MonitorHarness, TritonHookRecorder, fresh_kernel_cache, monitored
from tests._paths import TRITON_TESTS

# ------------------------------------------------------------------------------ kernels
# The field-case kernels live in one module, shared with the manifest and replay tests (which need
# them importable by plain module name, so a manifest can name them).
sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

AUTOTUNE_BLOCKS = sorted(c.kwargs["BLOCK"] for c in kf.tuned_scale.configs)
ALL = [kf.slot_mapping, kf.slot_mapping_dns, kf.zero_kv_blocks, kf.sample, kf.scale_copy, kf.tiled_rows, kf.tuned_scale]


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


def reasons(serving: list[Any]) -> list[tuple[str, str]]:
    """(reason_kind, reason) of each serving compile, as journaled (computed on the writer thread)."""
    return [(e.attrs["reason_kind"], e.attrs["reason"]) for e in serving]


def i32(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.int32)


def f32(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.float32)


# ------------------------------------------------------------------------------ 1. slot mapping
def _slot(kernel: Any, num_tokens: int, stride: int) -> None:
    kernel.warmup(i32(4096), i32(4096), i32(4096), num_tokens, stride, 16, BLOCK=128, grid=(1,))


def test_case1_slot_mapping_specialized(tmp_path, triton_cache) -> None:
    """Warmed with 2048 tokens and stride 64; requests of 1, 16 and 5 tokens, then stride 1.

    Triton puts a non-constexpr int in one of three classes (==1, %16==0, other), so a single warmup
    size always covers one of {1, 16, 5}: 2048 covers 16. Serving compiles: 1 token, 5 tokens,
    stride 1 → three (the field note's "three for the sizes" assumes a warmup size in none of the
    classes, which Triton's rules do not allow).
    """
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            _slot(kf.slot_mapping, 2048, 64)
        for n in (1, 16, 5):
            _slot(kf.slot_mapping, n, 64)
        _slot(kf.slot_mapping, 2048, 1)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 3
    assert serving[0].attrs["constexprs"].get("num_tokens") == 1
    assert serving[2].attrs["constexprs"].get("block_table_stride") == 1
    assert reasons(serving) == [
        ("argument", "num_tokens: i32 %16 → ==1"),
        ("argument", "num_tokens: i32 %16 → other"),
        ("argument", "block_table_stride: i32 %16 → ==1"),
    ]
    assert serving[0].attrs["fixes"][0].startswith('do_not_specialize=["num_tokens"]')
    assert serving[0].attrs["reason_changes"] == [
        {
            "name": "num_tokens",
            "kind": "argument",
            "before": "i32 %16",
            "after": "==1",
            "fix": serving[0].attrs["fixes"][0],
            "warmed_elsewhere": False,
        }
    ]


def test_case1_slot_mapping_num_tokens_unspecialized(tmp_path, triton_cache) -> None:
    """With ``do_not_specialize=["num_tokens"]`` only the stride-1 variant compiles in serving."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            _slot(kf.slot_mapping_dns, 2048, 64)
        for n in (1, 16, 5):
            _slot(kf.slot_mapping_dns, n, 64)
        _slot(kf.slot_mapping_dns, 2048, 1)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 1
    assert serving[0].attrs["constexprs"] == {"BLOCK": 128, "block_table_stride": 1}
    assert reasons(serving) == [("argument", "block_table_stride: i32 %16 → ==1")]


# ------------------------------------------------------------------------------ 2. KV-block zeroing
def test_case2_kv_zeroing_never_warmed_and_which_rank(tmp_path, triton_cache) -> None:
    """Two tensor-parallel ranks share a journal; only rank 1 frees blocks and compiles the zeroing
    kernel (1, 16 then 3 blocks): three serving compiles, all attributed to rank 1 with times."""
    journal = tmp_path / "journal"
    per_rank: dict[int, list[Any]] = {}
    for rank in (0, 1):
        fresh_kernel_cache(kf.zero_kv_blocks)  # each rank is its own process
        with watched(tmp_path, triton_cache, journal_dir=journal, rank=rank) as (rec, h):
            with h.monitor.warmup():
                pass  # dummy runs never free KV blocks
            if rank == 1:
                for nblocks in (1, 16, 3):
                    with h.monitor.request():
                        kf.zero_kv_blocks.warmup(f32(1 << 16), i32(64), nblocks, 256, BLOCK=256, grid=(nblocks,))
            per_rank[rank] = assert_same_as_triton(rec, h)
        # journal read after both: the rank 0 monitor saw nothing
    assert per_rank[0] == []
    assert len(per_rank[1]) == 3
    assert {e.rank for e in per_rank[1]} == {1}
    assert all(e.start_ts is not None and e.duration_s and e.duration_s > 0 for e in per_rank[1])
    assert [e.attrs["request_id"] for e in per_rank[1]] == [1, 2, 3]
    assert reasons(per_rank[1]) == [("never_warmed", "never warmed (no compile of this kernel before serving)")] * 3
    assert "zero_kv_blocks in warmup" in per_rank[1][0].attrs["fixes"][0]


# ------------------------------------------------------------------------------ 3. flag combinations
def _sample(batch: int, top_k: bool, top_p: bool) -> None:
    kf.sample.warmup(f32(64 * 128), i32(64), batch, 128, TOP_K=top_k, TOP_P=top_p, BLOCK=128, grid=(batch,))


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
    assert reasons(serving) == [
        ("argument", "TOP_P: constexpr True → False"),
        ("argument", "TOP_K: constexpr True → False"),
        ("argument", "batch_size: i32 %16 → other"),
    ]


def test_case3_new_combination(tmp_path, triton_cache) -> None:
    """Warmed top-k only and top-p only; serving turns both on: each flag value was warmed, never
    together — coverage per argument shows nothing missing, the reason says "new combination"."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            _sample(16, True, False)
            _sample(16, False, True)
        _sample(16, True, True)
        serving = assert_same_as_triton(rec, h)
    assert reasons(serving) == [
        (
            "new_combination",
            "new combination (each class was warmed, not together): TOP_P: constexpr False → True",
        )
    ]
    assert serving[0].attrs["fixes"] == [
        "warm this combination (TOP_P=True): add the call to warmup or replay a manifest"
    ]


# ------------------------------------------------------------------------------ 4. offset view
def test_case4_offset_view_pointer_alignment(tmp_path, triton_cache) -> None:
    """A slice starting one fp32 element in is not 16-byte aligned: one serving compile."""
    out = f32(1025)
    x = f32(1024)
    assert out.data_ptr() % 16 == 0
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            kf.scale_copy.warmup(x, out, 512, BLOCK=64, grid=(1,))
        kf.scale_copy.warmup(x, out[:1024], 512, BLOCK=64, grid=(1,))  # same pointer class
        # Warmup maps tensors to dtype placeholders (data_ptr 0); JITFunction.run with the real
        # tensors sees the misaligned pointer. Compile-only: run(warmup=True) compiles, never launches.
        kf.scale_copy.run(x, out[1:], 512, BLOCK=64, grid=(1,), warmup=True)
        serving = assert_same_as_triton(rec, h)
    assert len(serving) == 1
    assert "('*fp32', '')" in (serving[0].key or "")
    assert reasons(serving) == [("argument", "dst_ptr: *fp32 aligned16 → unaligned")]
    assert serving[0].attrs["fixes"][0].startswith('do_not_specialize_on_alignment=["dst_ptr"]')


# ------------------------------------------------------------------------------ 5. tile size
def _tile(tokens: int) -> None:
    kf.tiled_rows.warmup(f32(512), f32(512), tokens, TILE=kf.tile_for(tokens), grid=(1,))


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
    assert reasons(serving) == [("argument", "tokens: ==1 → i32 other; TILE: constexpr 16 → 512")]


# ------------------------------------------------------------------------------ 6. autotune
def test_case6_autotune_per_config_compiles(tmp_path, triton_cache) -> None:
    """Compile-level part (CPU): ``Autotuner.warmup`` compiles every config — the compiles a
    benchmark sweep triggers. Warmed flag-off fp32, served flag-on bf16: one serving compile per
    config. The sweep itself (launches, the autotune event) is the gpu test below."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            kf.tuned_scale.warmup(f32(4096), f32(4096), 4096, FLAG=False, grid=(1,))
        bf = torch.empty(4096, dtype=torch.bfloat16)
        kf.tuned_scale.warmup(bf, bf, 4096, FLAG=True, grid=(1,))
        serving = assert_same_as_triton(rec, h)
        warm = h.compiles(Phase.WARMUP)
    assert len(warm) == len(serving) == len(AUTOTUNE_BLOCKS)
    assert sorted(e.attrs["constexprs"]["BLOCK"] for e in serving) == AUTOTUNE_BLOCKS
    assert all(e.attrs["signature"]["x_ptr"] == "*bf16" and e.attrs["constexprs"]["FLAG"] is True for e in serving)
    # Each config's nearest warm key is the same config in fp32, flag off (same BLOCK, same num_warps).
    assert reasons(serving) == [
        ("argument", "x_ptr: *fp32 → *bf16; out_ptr: *fp32 → *bf16; FLAG: constexpr False → True")
    ] * len(AUTOTUNE_BLOCKS)


def test_launch_option_reason(tmp_path, triton_cache) -> None:
    """A launch option is part of the key: warmed with num_warps=4, served with 8 → the reason
    names the option and nothing else."""
    with watched(tmp_path, triton_cache) as (rec, h):
        with h.monitor.warmup():
            kf.scale_copy.warmup(f32(1024), f32(1024), 512, BLOCK=64, num_warps=4, grid=(1,))
        kf.scale_copy.warmup(f32(1024), f32(1024), 512, BLOCK=64, num_warps=8, grid=(1,))
        serving = assert_same_as_triton(rec, h)
    assert reasons(serving) == [("option", "num_warps: 4 → 8")]
    assert serving[0].attrs["fixes"] == [
        "warm with num_warps=8 (launch options and autotune configs are part of the key)"
    ]


def test_every_case_reason_matches_its_key_difference(tmp_path, triton_cache) -> None:
    """For every field case in ``CASES``: each serving compile carries a reason, and every argument
    it names really differs between that key and some key compiled before serving (or the kernel
    never compiled before serving)."""
    from jitwatch.backends.triton.keys import parse_key

    for case, spec in kf.CASES.items():
        fresh_kernel_cache(*ALL)
        with watched(tmp_path / case, triton_cache) as (rec, h):
            with h.monitor.warmup():
                for call in spec["warmup"]:
                    call()
            for call in spec["serving"]:
                call()
            serving = assert_same_as_triton(rec, h)
            warm = [e for e in h.compiles() if e.phase is not Phase.SERVING]
        assert len(serving) == spec["expected_serving"], case
        for e in serving:
            kind, changes = e.attrs["reason_kind"], e.attrs["reason_changes"]
            peers = [w for w in warm if w.kernel == e.kernel]
            if not peers:
                assert kind == "never_warmed", case
                continue
            assert kind in ("argument", "option", "new_combination") and changes, case
            names = list(e.attrs["signature"])
            mine = dict(zip(names, parse_key(e.key or "") or [], strict=False))
            near = [dict(zip(names, parse_key(w.key or "") or [], strict=False)) for w in peers]
            named = {c["name"] for c in changes if c["kind"] == "argument"}
            # the reason names exactly the arguments that differ from one warm key
            assert any(named == {n for n in names if m.get(n) != mine.get(n)} for m in near), (case, e.attrs["reason"])


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
            kf.tuned_scale[grid](x32, x32, 4096, FLAG=False)
        kf.tuned_scale[grid](xbf, xbf, 4096, FLAG=True)
        torch.cuda.synchronize()
        serving = assert_same_as_triton(rec, h)
        autotunes = h.events(EventKind.AUTOTUNE)
    assert len(serving) == len(AUTOTUNE_BLOCKS)
    support = probe_triton()
    assert support.autotune_mechanism == ("listener" if support.autotuning_listener else "autotuner_wrap")
    source = "autotuning_listener" if support.autotuning_listener else "autotuner_wrap"
    assert [(e.phase, e.attrs["configs"], e.attrs["source"]) for e in autotunes] == [
        (Phase.WARMUP, len(AUTOTUNE_BLOCKS), source),
        (Phase.SERVING, len(AUTOTUNE_BLOCKS), source),
    ]
    assert [e.key for e in autotunes] == [
        "(4096, 'torch.float32', 'torch.float32')",
        "(4096, 'torch.bfloat16', 'torch.bfloat16')",
    ]
    assert all(e.kernel == "tuned_scale" and (e.duration_s or 0) > 0 for e in autotunes)
    assert all("BLOCK: " in e.attrs["best_config"] for e in autotunes)
