"""Warmup for the slot-mapping kernel: compile the exact serving keys before the monitor activates.

Intended call, in a worker, before it serves::

    mon = jitwatch.install()
    with mon.warmup():                     # span "jitwatch.warmup", phase "warmup"
        warmup_slot_mapping(block_table, block_size, max_num_tokens, slot_mapping=slot_mapping)
    # serving: request sizes never compile the slot-mapping kernel again

Why it matters: older vLLM V1 releases called their slot-mapping kernel only from
``BlockTable.compute_slot_mapping`` during real steps, so the first request of each new size
class paid a Triton compile (hundreds of ms; longer on a busy host). Triton keys a compiled kernel
on the *specialization* of its arguments (see ``docs/slot-mapping.md``): running the kernel once
with the engine's own block table, block size, ``max_num_tokens`` and output buffer compiles the
very key serving uses.

What is covered (Triton 3.x specialization classes):

* ``block_table_stride``, ``block_size``, ``max_num_tokens`` and the 16-byte alignment of the
  block-table and output pointers: taken from the engine's real tensors, so they match serving.
* ``query_start_loc`` / ``positions``: the engine's persistent buffers when passed (their
  ``[:n]`` slices start at element 0, so alignment matches serving); else fresh tensors, which
  are 16-byte aligned like any allocation.
* ``num_tokens``: nothing to cover when it is in ``do_not_specialize`` (one call); without it
  (``specialize_num_tokens=True``) the three int classes ``== 1``, ``% 16 == 0`` and other, see
  :func:`num_tokens_classes`.
* Not covered: ``num_tokens >= 2**31`` (its type becomes i64, a new key even under
  ``do_not_specialize``), other ``PAD_ID``/``BLOCK_SIZE`` constexprs, and launches on a device
  other than the current one.

State: block id 1 (block 0 is the null block and is never written) goes into column 0 of one
block-table row for the duration; that row, the output buffer and any input buffers passed are
restored in a ``finally``, also when the computation raises.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jitwatch.kernels.slot_mapping import (
    PAD_SLOT_ID,
    cached_keys,
    compute_slot_mapping,
    get_slot_mapping_kernel,
    kernel_name,
)

if TYPE_CHECKING:
    import torch

WARMUP_BLOCK_ID = 1
"""Block id written into the block table during warmup. Block 0 is vLLM's null block."""


def num_tokens_classes(max_num_tokens: int) -> list[int]:
    """One ``num_tokens`` per Triton int-specialization class that fits in ``max_num_tokens``.

    ``1`` (folded to a constant), a multiple of 16 (``16``, or ``0`` when ``max_num_tokens < 16``)
    and an "other" value (``3``, or ``2``). Triton 3.x ``specialize_impl``; see triton-facts.
    """
    out = [1, 16 if max_num_tokens >= 16 else 0]
    for other in (3, 2):
        if other <= max_num_tokens:
            out.append(other)
            break
    return out


@dataclass
class SlotMappingWarmupResult:
    """What :func:`warmup_slot_mapping` did.

    Attributes:
        kernel: the kernel's name (Triton ``fn.__qualname__``).
        num_tokens: the token counts run, per block-table group.
        calls: computations run (groups x token counts).
        new_keys: Triton in-memory cache keys that appeared during warmup (compiles); empty when
            the cache was already warm or cannot be read (e.g. ``TRITON_INTERPRET=1``).
        keys_known: whether ``new_keys`` could be read at all.
        seconds: wall time of the whole warmup, compiles included.
        source: ``"kernel"`` (launched on a GPU) or ``"reference"`` (compile-only, CPU).
        blocks_used: KV-cache block ids the computed slots fell in (always ``{1}``).
    """

    kernel: str
    num_tokens: list[int]
    calls: int = 0
    new_keys: list[str] = field(default_factory=list)
    keys_known: bool = True
    seconds: float = 0.0
    source: str = "reference"
    blocks_used: set[int] = field(default_factory=set)

    @property
    def compiled(self) -> int:
        """Number of new keys (compiles) seen."""
        return len(self.new_keys)

    def span_attributes(self) -> dict[str, Any]:
        """Attributes for a tracing span (``jitwatch.warmup.slot_mapping.*``)."""
        return {
            "jitwatch.warmup.slot_mapping.kernel": self.kernel,
            "jitwatch.warmup.slot_mapping.calls": self.calls,
            "jitwatch.warmup.slot_mapping.keys_compiled": self.compiled,
            "jitwatch.warmup.slot_mapping.seconds": self.seconds,
        }


def _as_list(value: Any, n: int | None = None) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value] * (n or 1)


def warmup_slot_mapping(
    block_tables: torch.Tensor | Sequence[torch.Tensor],
    block_sizes: int | Sequence[int],
    max_num_tokens: int,
    *,
    slot_mappings: torch.Tensor | Sequence[torch.Tensor] | None = None,
    query_start_loc: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    specialize_num_tokens: bool = False,
    kernel: Any | None = None,
    num_tokens: Sequence[int] | None = None,
    row: int = 0,
    arch: int | None = None,
) -> SlotMappingWarmupResult:
    """Run the slot-mapping computation on the engine's own tensors so serving never compiles it.

    Args:
        block_tables: the engine's block table(s), int32 ``[max_num_reqs, max_blocks_per_req]``;
            one per KV-cache group (hybrid models have several, each with its own block size).
        block_sizes: tokens per block, one per table (an int applies to all).
        max_num_tokens: the engine-lifetime ``max_num_tokens`` (a specialized int argument).
        slot_mappings: the persistent int64 ``[max_num_tokens]`` output buffer(s), one per table;
            fresh buffers when omitted. Contents are restored afterwards.
        query_start_loc: the engine's persistent int32 ``[max_num_reqs + 1]`` buffer (``[:row+2]``
            is used, then restored); fresh when omitted.
        positions: the engine's persistent int64 ``[max_num_tokens]`` buffer (``[:n]`` used, then
            restored); fresh when omitted.
        specialize_num_tokens: the kernel variant without ``do_not_specialize`` (ignored when
            ``kernel`` is given).
        kernel: the ``JITFunction`` serving uses; default from :func:`get_slot_mapping_kernel`.
        num_tokens: token counts to run; default one count (``min(3, max_num_tokens)``) for the
            unspecialized kernel, :func:`num_tokens_classes` for the specialized one.
        row: block-table row used for the warmup request (restored afterwards).
        arch: compute capability for compile-only mode on CPU.

    Returns:
        :class:`SlotMappingWarmupResult`.

    Raises:
        ValueError: bad shapes (``row`` outside the table, empty rows, ``max_num_tokens < 1``,
            a token count above ``max_num_tokens``, mismatched list lengths).
        RuntimeError: a computed slot fell outside block :data:`WARMUP_BLOCK_ID` (a kernel bug).
        Whatever the computation raises, after the tables and buffers are restored.
    """
    import torch

    tables = _as_list(block_tables)
    sizes = _as_list(block_sizes, len(tables))
    outs = _as_list(slot_mappings, len(tables)) if slot_mappings is not None else [None] * len(tables)
    if not (len(tables) == len(sizes) == len(outs)):
        raise ValueError("block_tables, block_sizes and slot_mappings must have the same length")
    if max_num_tokens < 1:
        raise ValueError(f"max_num_tokens must be >= 1, got {max_num_tokens}")
    for t in tables:
        if t.dim() != 2 or t.shape[1] < 1 or not 0 <= row < t.shape[0]:
            raise ValueError(f"block table of shape {tuple(t.shape)} has no row {row} with a column 0")
    if kernel is None:
        kernel = get_slot_mapping_kernel(specialize_num_tokens)
        dns = not specialize_num_tokens
    else:
        dns = "num_tokens" in (getattr(kernel, "do_not_specialize", None) or [])
    counts = list(num_tokens) if num_tokens is not None else ([min(3, max_num_tokens)] if dns else None)
    if counts is None:
        counts = num_tokens_classes(max_num_tokens)
    if any(n < 0 or n > max_num_tokens for n in counts):
        raise ValueError(f"num_tokens {counts} must lie in [0, {max_num_tokens}]")

    result = SlotMappingWarmupResult(kernel=kernel_name(kernel), num_tokens=counts)
    keys_before = cached_keys(kernel)
    t0 = time.perf_counter()
    device = tables[0].device
    n_max = max(counts) if counts else 0

    # Requests 0..row-1 are empty, request ``row`` holds the tokens: the kernel reads table row
    # ``row`` through the table's own base pointer (a row slice could change its alignment class).
    n_reqs = row + 1
    if query_start_loc is not None:
        if query_start_loc.numel() < n_reqs + 1:
            raise ValueError(f"query_start_loc has {query_start_loc.numel()} entries, need {n_reqs + 1}")
        qsl = query_start_loc[: n_reqs + 1]
    else:
        qsl = torch.zeros(n_reqs + 1, dtype=torch.int32, device=device)
    pos = positions if positions is not None else torch.zeros(max_num_tokens, dtype=torch.int64, device=device)
    # Backups: everything this function writes into caller-owned memory.
    saved: list[tuple[torch.Tensor, torch.Tensor]] = [(t[row], t[row].clone()) for t in tables]
    if query_start_loc is not None:
        saved.append((qsl, qsl.clone()))
    if positions is not None and n_max:
        saved.append((pos[:n_max], pos[:n_max].clone()))
    buffers: list[torch.Tensor] = []
    for t, out in zip(tables, outs, strict=True):
        if out is None:
            out = torch.empty(max_num_tokens, dtype=torch.int64, device=t.device)
        else:
            saved.append((out, out.clone()))
        buffers.append(out)
    try:
        for table in tables:
            table[row, 0] = WARMUP_BLOCK_ID
        for table, block_size, out in zip(tables, sizes, buffers, strict=True):
            for n in counts:
                qsl[:n_reqs] = 0
                qsl[n_reqs] = n
                if n:
                    pos[:n] = torch.arange(n, device=pos.device) % block_size
                res = compute_slot_mapping(
                    qsl,
                    pos,
                    table,
                    block_size,
                    out,
                    num_tokens=n,
                    max_num_tokens=max_num_tokens,
                    kernel=kernel,
                    arch=arch,
                )
                result.calls += 1
                result.source = res.source
                slots = out[:n]
                if n:
                    blocks = set((slots // block_size).unique().tolist())
                    if blocks != {WARMUP_BLOCK_ID}:
                        raise RuntimeError(f"warmup slots fell in blocks {sorted(blocks)}, expected only block 1")
                    result.blocks_used |= blocks
                if bool((out[n:max_num_tokens] != PAD_SLOT_ID).any()):
                    raise RuntimeError("warmup: padding was not written")
    finally:
        for dst, src in saved:
            dst.copy_(src)
    result.seconds = time.perf_counter() - t0
    keys_after = cached_keys(kernel)
    if keys_before is None or keys_after is None:
        result.keys_known = False
    else:
        result.new_keys = sorted(keys_after - keys_before)
    return result
