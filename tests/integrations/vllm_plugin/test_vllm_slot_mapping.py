"""The slot-mapping warmup against vLLM's real ``BlockTable`` (vllm 0.32.0), constructed on CPU.

On the CPU platform ``BlockTable.compute_slot_mapping`` reaches vLLM's CPU implementation of the
slot-mapping kernel (``register_triton_kernel_overrides``), so these tests run the real call path
and check real slot values.
"""

from __future__ import annotations

import types
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from jitwatch.integrations.vllm.slot_mapping import (
    Situation,
    detect,
    warm_block_table,
    warm_worker,
    worker_block_tables,
)

pytestmark = pytest.mark.vllm

BLOCK_SIZE = 16


@pytest.fixture(scope="module", autouse=True)
def _cpu_kernel_overrides() -> None:
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()


def make_block_table(block_size: int = BLOCK_SIZE, **kwargs: Any) -> Any:
    from vllm.v1.worker.block_table import BlockTable

    return BlockTable(block_size, 4, 8, 32, False, torch.device("cpu"), 1, **kwargs)


def snapshot(bt: Any) -> dict[str, Any]:
    return {
        "gpu": bt.block_table.gpu.clone(),
        "cpu": bt.block_table.cpu.clone(),
        "np": bt.block_table.np.copy(),
        "count": bt.num_blocks_per_row.copy(),
        "slots_gpu": bt.slot_mapping.gpu.clone(),
        "slots_cpu": bt.slot_mapping.cpu.clone(),
    }


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert np.array_equal(a[key], b[key]), key
        else:
            assert torch.equal(a[key], b[key]), key


def filled_block_table() -> Any:
    bt = make_block_table()
    bt.add_row([5, 6], 0)  # row 0 is in use: the warmup borrows it and must give it back
    bt.add_row([7], 1)
    bt.commit_block_table(2)
    bt.slot_mapping.gpu.fill_(123)
    bt.slot_mapping.cpu.fill_(321)
    return bt


def test_contents_unchanged_and_slot_in_block_one() -> None:
    bt = filled_block_table()
    before = snapshot(bt)
    slot = warm_block_table(bt)
    assert slot == 1 * BLOCK_SIZE  # token 0 of block 1
    assert_same(before, snapshot(bt))


def test_block_zero_never_written_or_mapped() -> None:
    bt = make_block_table()
    seen: dict[str, Any] = {}
    original = bt.compute_slot_mapping

    def spy(num_reqs: int, query_start_loc: torch.Tensor, positions: torch.Tensor) -> None:
        seen["row0"] = bt.block_table.gpu[0].clone()
        original(num_reqs, query_start_loc, positions)
        seen["slots"] = bt.slot_mapping.gpu[: positions.shape[0]].clone()

    bt.compute_slot_mapping = spy
    warm_block_table(bt)
    assert int(seen["row0"][0]) == 1  # the warmup row names block 1, not the null block 0
    slots = seen["slots"].tolist()
    assert slots == [BLOCK_SIZE] and all(not (0 <= s < BLOCK_SIZE) for s in slots)  # nothing lands in block 0
    with pytest.raises(ValueError, match="null block"):
        warm_block_table(bt, block_id=0)


def test_restored_when_the_kernel_raises() -> None:
    bt = filled_block_table()
    before = snapshot(bt)

    def boom(num_reqs: int, query_start_loc: torch.Tensor, positions: torch.Tensor) -> None:
        bt.slot_mapping.gpu.fill_(9)
        raise RuntimeError("kernel failed")

    bt.compute_slot_mapping = boom
    with pytest.raises(RuntimeError, match="kernel failed"):
        warm_block_table(bt)
    assert_same(before, snapshot(bt))


def test_every_kv_cache_group_of_a_worker() -> None:
    from vllm.v1.worker.block_table import MultiGroupBlockTable, SlotMappingMode

    multi = MultiGroupBlockTable(
        4,
        32,
        False,
        torch.device("cpu"),
        block_sizes=[16, 32, 16],
        max_num_blocks=[8, 8, 8],
        slot_mapping_modes=[SlotMappingMode.TOKEN_TO_KV_SLOT, SlotMappingMode.TOKEN_TO_KV_SLOT, SlotMappingMode.NONE],
    )
    worker = SimpleNamespace(model_runner=SimpleNamespace(input_batch=SimpleNamespace(block_table=multi)))
    before = [snapshot(bt) for bt in multi.block_tables]
    assert len(worker_block_tables(worker)) == 3
    assert warm_worker(worker) == [16, 32, None]  # Mamba-like group: no token slot mapping
    for snap, bt in zip(before, multi.block_tables, strict=True):
        assert_same(snap, snapshot(bt))
    assert warm_worker(SimpleNamespace(model_runner=None)) == []


def test_numpy_path_has_nothing_to_warm() -> None:
    class NumpyBlockTable:  # the pre-Triton V1 signature
        slot_mapping_mode = None

        def compute_slot_mapping(self, req_indices: np.ndarray, positions: np.ndarray) -> None:
            raise AssertionError("must not be called")

    assert warm_block_table(NumpyBlockTable()) is None


# ------------------------------------------------------------------ detection
def config(enable_jit_warmup: bool) -> Any:
    return SimpleNamespace(kernel_config=SimpleNamespace(enable_jit_warmup=enable_jit_warmup))


def test_detect_vllm_0_32_owns_the_warmup() -> None:
    import vllm.v1.worker.block_table as block_table

    assert hasattr(block_table, "ComputeSlotMappingKernel")
    assert detect(vllm_config=config(True)).situation is Situation.VLLM
    assert detect(block_table, config(True)).situation is Situation.VLLM
    # --enforce-eager turns vLLM's JIT warmup off: jitwatch warms it through the block tables.
    assert detect(vllm_config=config(False)).situation is Situation.JITWATCH
    assert detect(vllm_config=config(True), setting="on").situation is Situation.JITWATCH
    assert detect(vllm_config=config(False), setting="off").situation is Situation.OFF


@triton.jit
def _compute_slot_mapping_kernel(slot_ptr, BLOCK: tl.constexpr):  # pragma: no cover - never launched
    tl.store(slot_ptr + tl.arange(0, BLOCK), 0)


def test_detect_older_v1_plain_triton_kernel() -> None:
    legacy = types.ModuleType("legacy_block_table")
    legacy._compute_slot_mapping_kernel = _compute_slot_mapping_kernel  # type: ignore[attr-defined]
    found = detect(legacy, config(True))
    assert found.situation is Situation.JITWATCH and "older V1" in found.reason
    assert detect(types.ModuleType("numpy_block_table")).situation is Situation.NOT_APPLICABLE
