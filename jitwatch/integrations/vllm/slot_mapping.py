"""Slot-mapping warmup through a vLLM worker's own block tables.

vLLM V1 turns scheduled tokens into KV-cache slots with a Triton kernel called from
``BlockTable.compute_slot_mapping`` (``vllm/v1/worker/block_table.py``). Older V1 releases called a
plain ``@triton.jit`` function ``_compute_slot_mapping_kernel`` there and never warmed it, so it
compiled on the first real request (a post-warmup compile on every rank). vLLM 0.32 wraps it in
``ComputeSlotMappingKernel`` (a ``VllmTritonJitKernel`` that registers compile keys per block table)
and compiles those keys in ``kernel_warmup`` — but only while
``kernel_config.enable_jit_warmup`` is true (``--enforce-eager`` turns it off).

:func:`detect` reads what the installed vLLM provides (never the version string) and
:func:`warm_block_table` runs one 1-token request through a real ``BlockTable``: block id 1 is
written into row 0 (block 0 is vLLM's null block and is never used), ``compute_slot_mapping`` runs
(a real launch on GPU, compiling the kernel on a miss; vLLM's CPU fallback on the CPU backend), and
the row, its block count and the slot-mapping buffer are restored in a ``finally``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from enum import Enum
from typing import Any

from jitwatch.text import logger

log = logger(__name__)

WARMUP_BLOCK_ID = 1
"""Block id written for the warmup row. Block 0 is vLLM's null block (``BlockPool`` reserves it)."""


class Situation(str, Enum):
    """Who warms the slot-mapping kernel in this vLLM."""

    VLLM = "vllm"
    """vLLM's own warmup covers it (``ComputeSlotMappingKernel`` keys, JIT warmup enabled)."""
    JITWATCH = "jitwatch"
    """A Triton slot-mapping kernel that vLLM does not warm here: jitwatch runs it during warmup."""
    NOT_APPLICABLE = "not_applicable"
    """No Triton slot-mapping kernel (older numpy path, or no V1 block table module)."""
    OFF = "off"
    """Disabled by ``JITWATCH_SLOT_MAPPING_WARMUP=off``."""


@dataclass(frozen=True)
class Detection:
    situation: Situation
    reason: str


def detect(block_table_module: Any | None = None, vllm_config: Any | None = None, setting: str = "auto") -> Detection:
    """Decide who warms the slot-mapping kernel.

    Args:
        block_table_module: the module holding ``BlockTable`` (default ``vllm.v1.worker.block_table``).
        vllm_config: the worker's ``VllmConfig``; ``kernel_config.enable_jit_warmup`` is read from it.
        setting: ``auto`` / ``on`` / ``off`` (``JITWATCH_SLOT_MAPPING_WARMUP``). ``on`` runs the warmup
            whenever a Triton slot-mapping kernel exists, even if vLLM warms it too (harmless: a cache hit).

    Never raises: an unimportable module gives ``NOT_APPLICABLE``.
    """
    setting = (setting or "auto").strip().lower()
    if setting == "off":
        return Detection(Situation.OFF, "JITWATCH_SLOT_MAPPING_WARMUP=off")
    if block_table_module is None:
        try:
            import importlib

            block_table_module = importlib.import_module("vllm.v1.worker.block_table")
        except Exception as exc:  # noqa: BLE001 - not a V1 vLLM, or a broken install
            return Detection(Situation.NOT_APPLICABLE, f"vllm.v1.worker.block_table not importable: {exc}")
    owned = getattr(block_table_module, "ComputeSlotMappingKernel", None)
    legacy = getattr(block_table_module, "_compute_slot_mapping_kernel", None)
    if owned is not None and hasattr(owned, "get_warmup_keys"):
        jit_warmup = _enable_jit_warmup(vllm_config)
        if setting == "on":
            return Detection(
                Situation.JITWATCH, "ComputeSlotMappingKernel present; forced by JITWATCH_SLOT_MAPPING_WARMUP=on"
            )
        if jit_warmup is False:
            return Detection(
                Situation.JITWATCH,
                "vLLM's ComputeSlotMappingKernel warmup is skipped (kernel_config.enable_jit_warmup=False)",
            )
        return Detection(Situation.VLLM, "vLLM warms ComputeSlotMappingKernel compile keys in kernel_warmup")
    if legacy is not None and (hasattr(legacy, "warmup") or hasattr(legacy, "run")):
        return Detection(
            Situation.JITWATCH, "plain Triton _compute_slot_mapping_kernel, not warmed by this vLLM (older V1)"
        )
    return Detection(Situation.NOT_APPLICABLE, "no Triton slot-mapping kernel in vllm.v1.worker.block_table")


def _enable_jit_warmup(vllm_config: Any | None) -> bool | None:
    kernel_config = getattr(vllm_config, "kernel_config", None)
    value = getattr(kernel_config, "enable_jit_warmup", None)
    return None if value is None else bool(value)


def warm_block_table(block_table: Any, block_id: int = WARMUP_BLOCK_ID) -> int | None:
    """Run ``block_table.compute_slot_mapping`` for one request of one token at position 0.

    Args:
        block_table: a vLLM ``BlockTable`` (``block_table.block_table`` and ``.slot_mapping`` are
            ``CpuGpuBuffer``: int32 ``[max_num_reqs, max_num_blocks_per_req]`` and int64
            ``[max_num_batched_tokens]``).
        block_id: the KV-cache block written into row 0 for the call; never 0 (the null block).

    Returns:
        The slot computed for the token (``block_id * block_size``), or ``None`` when this block
        table has no token slot mapping (Mamba-like groups) or uses the numpy path (no kernel).

    Raises:
        ValueError: ``block_id`` is 0 or negative.

    Row 0 of the block table (device and host copies), its block count and the slot-mapping
    buffer are restored in a ``finally``, also when the kernel raises.
    """
    if block_id <= 0:
        raise ValueError(f"block_id must be >= 1 (block 0 is vLLM's null block), got {block_id}")
    import torch

    mode = getattr(block_table, "slot_mapping_mode", None)
    if mode is not None and getattr(mode, "value", mode) == "none":
        return None
    params = inspect.signature(block_table.compute_slot_mapping).parameters
    if "query_start_loc" not in params:
        return None  # numpy path (req_indices, positions): no Triton kernel to warm
    table = block_table.block_table
    slots = block_table.slot_mapping
    saved_gpu_row = table.gpu[0].clone()
    saved_cpu_row = table.cpu[0].clone()
    saved_count = int(block_table.num_blocks_per_row[0])
    saved_slots_gpu = slots.gpu.clone()
    saved_slots_cpu = slots.cpu.clone()
    device = table.gpu.device
    try:
        table.gpu[0, 0] = block_id
        query_start_loc = torch.tensor([0, 1], dtype=torch.int32, device=device)
        positions = torch.zeros(1, dtype=torch.int64, device=device)
        block_table.compute_slot_mapping(1, query_start_loc, positions)
        return int(slots.gpu[0].item())
    finally:
        table.gpu[0].copy_(saved_gpu_row)
        table.cpu[0].copy_(saved_cpu_row)
        block_table.num_blocks_per_row[0] = saved_count
        slots.gpu.copy_(saved_slots_gpu)
        slots.cpu.copy_(saved_slots_cpu)


def worker_block_tables(worker: Any) -> list[Any]:
    """The V1 ``BlockTable`` objects of a vLLM worker (``model_runner.input_batch.block_table``).

    Returns ``[]`` when the worker has none (model runner V2 keeps its own block tables and warms
    its own kernels).
    """
    runner = getattr(worker, "model_runner", None)
    batch = getattr(runner, "input_batch", None)
    multi = getattr(batch, "block_table", None)
    tables = getattr(multi, "block_tables", None)
    return list(tables) if tables else []


def warm_worker(worker: Any, block_id: int = WARMUP_BLOCK_ID) -> list[int | None]:
    """:func:`warm_block_table` on every block table of ``worker`` (one per KV-cache group).

    Runs on every pipeline-parallel rank: each rank computes slot mappings for its own layers.
    Returns the slot computed per block table. Exceptions propagate (the plugin catches them).
    """
    return [warm_block_table(bt, block_id) for bt in worker_block_tables(worker)]
