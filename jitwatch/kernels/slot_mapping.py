"""A vLLM-style slot-mapping Triton kernel, its torch reference, and a launcher.

The slot mapping turns every scheduled token into the KV-cache slot its key/value is written to.
For request ``r`` (Triton program ``r``), tokens ``query_start_loc[r] .. query_start_loc[r+1]`` have
positions ``p`` inside their sequence, and::

    slot = block_table[r, p // block_size] * block_size + p % block_size

The grid is ``(num_reqs + 1,)``: the last program pads ``slot_mapping[num_tokens:max_num_tokens]``
with :data:`PAD_SLOT_ID` (``-1``), so a CUDA-graph-sized buffer never holds stale slots. This is the
shape of vLLM V1's ``_compute_slot_mapping_kernel`` (``vllm/v1/worker/block_table.py``), written
here from the description, not copied.

Specialization (Triton 3.x, checked with real compiles on 3.9, see ``docs/slot-mapping.md``):

* :data:`slot_mapping_kernel` lists ``num_tokens`` in ``do_not_specialize``: one key serves every
  request size (until ``num_tokens`` crosses 2**31 and its type becomes i64).
* :data:`slot_mapping_kernel_specialized` is the same body *without* it (the original bug): Triton
  keys ``num_tokens`` by class (``== 1`` folded to a constant, ``% 16 == 0``, other), so request
  sizes 1, 16 and 5 compile three kernels.
* Both still specialize on ``block_table_stride`` (``== 1`` for some hybrid models, ``% 16``),
  ``block_size`` (``% 16``), ``max_num_tokens`` and the 16-byte alignment of every pointer.

On a CUDA device :func:`compute_slot_mapping` launches the kernel. On CPU it uses jitwatch's
compile-only driver (:mod:`jitwatch.backends.triton.compile_only`): ``kernel.warmup(..., grid=...)`` compiles the
exact key a GPU launch would use (a real ttir → cubin compile on an in-memory cache miss, nothing on
a hit, every Triton hook firing) and the result comes from :func:`slot_mapping_reference`;
:attr:`SlotMappingResult.source` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import triton
import triton.language as tl

if TYPE_CHECKING:
    import torch

PAD_SLOT_ID = -1
"""Slot id written to padding entries (vLLM's ``PAD_SLOT_ID``)."""

TILE = 1024
"""Tokens handled per loop iteration of one program (the ``BLOCK_SIZE`` constexpr)."""

DO_NOT_SPECIALIZE = ("num_tokens",)


@triton.jit
def _slot_mapping_body(  # type: ignore[no-untyped-def]  # Triton reads annotations
    num_tokens,
    max_num_tokens,
    query_start_loc_ptr,
    positions_ptr,
    block_table_ptr,
    block_table_stride,
    block_size,
    slot_mapping_ptr,
    PAD_ID: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    req_idx = tl.program_id(0)
    num_reqs = tl.num_programs(0) - 1
    if req_idx == num_reqs:
        # The extra program: pad the tail of the (CUDA-graph sized) output buffer.
        for i in range(num_tokens, max_num_tokens, BLOCK_SIZE):
            offs = i + tl.arange(0, BLOCK_SIZE)
            tl.store(slot_mapping_ptr + offs, PAD_ID, mask=offs < max_num_tokens)
    else:
        start = tl.load(query_start_loc_ptr + req_idx)
        end = tl.load(query_start_loc_ptr + req_idx + 1)
        row_ptr = block_table_ptr + req_idx.to(tl.int64) * block_table_stride
        for i in range(start, end, BLOCK_SIZE):
            offs = i + tl.arange(0, BLOCK_SIZE)
            mask = offs < end
            pos = tl.load(positions_ptr + offs, mask=mask, other=0)
            block_idx = pos // block_size
            block_number = tl.load(row_ptr + block_idx, mask=mask, other=0)
            slot = block_number.to(tl.int64) * block_size + pos % block_size
            tl.store(slot_mapping_ptr + offs, slot, mask=mask)


@triton.jit(do_not_specialize=list(DO_NOT_SPECIALIZE))
def slot_mapping_kernel(  # type: ignore[no-untyped-def]  # Triton reads annotations
    num_tokens,
    max_num_tokens,
    query_start_loc_ptr,
    positions_ptr,
    block_table_ptr,
    block_table_stride,
    block_size,
    slot_mapping_ptr,
    PAD_ID: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """Slot mapping with ``num_tokens`` unspecialized (one compile for every request size)."""
    _slot_mapping_body(
        num_tokens,
        max_num_tokens,
        query_start_loc_ptr,
        positions_ptr,
        block_table_ptr,
        block_table_stride,
        block_size,
        slot_mapping_ptr,
        PAD_ID,
        BLOCK_SIZE,
    )


@triton.jit
def slot_mapping_kernel_specialized(  # type: ignore[no-untyped-def]  # Triton reads annotations
    num_tokens,
    max_num_tokens,
    query_start_loc_ptr,
    positions_ptr,
    block_table_ptr,
    block_table_stride,
    block_size,
    slot_mapping_ptr,
    PAD_ID: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """Slot mapping *with* ``num_tokens`` specialized: recompiles for 1 / multiple-of-16 / other."""
    _slot_mapping_body(
        num_tokens,
        max_num_tokens,
        query_start_loc_ptr,
        positions_ptr,
        block_table_ptr,
        block_table_stride,
        block_size,
        slot_mapping_ptr,
        PAD_ID,
        BLOCK_SIZE,
    )


def get_slot_mapping_kernel(specialize_num_tokens: bool = False) -> Any:
    """The process-wide kernel: :data:`slot_mapping_kernel`, or the specialized variant."""
    return slot_mapping_kernel_specialized if specialize_num_tokens else slot_mapping_kernel


def new_slot_mapping_kernel(specialize_num_tokens: bool = False) -> Any:
    """A *fresh* ``JITFunction`` of the same source, with its own (empty) in-memory cache.

    Triton keeps compiled kernels per ``JITFunction`` object, per process; tests that count
    compiles use a fresh object so earlier compiles in the same process do not hide new ones. The
    kernel name (``fn.__qualname__``) is the same as the process-wide one's.
    """
    base = get_slot_mapping_kernel(specialize_num_tokens)
    dns = None if specialize_num_tokens else list(DO_NOT_SPECIALIZE)
    return triton.jit(base.fn, do_not_specialize=dns)


def kernel_name(kernel: Any) -> str:
    """The name jitwatch records for ``kernel`` (Triton's ``fn.__qualname__``)."""
    return str(getattr(getattr(kernel, "fn", None), "__qualname__", None) or getattr(kernel, "__name__", kernel))


def slot_mapping_reference(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    max_num_tokens: int,
    pad_id: int = PAD_SLOT_ID,
) -> torch.Tensor:
    """The slot mapping in plain torch (the kernel's specification).

    Args:
        query_start_loc: int32 ``[num_reqs + 1]``, non-decreasing, ``query_start_loc[0] == 0``;
            request ``r`` owns tokens ``query_start_loc[r] .. query_start_loc[r+1]``.
        positions: int64 ``[>= num_tokens]``: each token's position in its sequence.
        block_table: int32 ``[>= num_reqs, max_blocks_per_req]``; row ``r`` lists request ``r``'s
            KV-cache block ids. Any row stride works (rows are indexed, not flattened).
        block_size: tokens per KV-cache block (> 0).
        max_num_tokens: length of the output (``>= num_tokens``).
        pad_id: value for ``[num_tokens:max_num_tokens]``.

    Returns:
        int64 ``[max_num_tokens]`` on ``block_table``'s device.

    Raises:
        ValueError: ``num_tokens > max_num_tokens`` or ``block_size <= 0``.
        IndexError: a position maps past the end of its block-table row.
    """
    import torch

    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    qsl = query_start_loc.to(torch.int64).cpu()
    num_reqs = qsl.numel() - 1
    num_tokens = int(qsl[-1]) if num_reqs >= 0 else 0
    if num_tokens > max_num_tokens:
        raise ValueError(f"num_tokens={num_tokens} exceeds max_num_tokens={max_num_tokens}")
    device = block_table.device
    out = torch.full((max_num_tokens,), pad_id, dtype=torch.int64, device=device)
    if num_tokens == 0:
        return out
    lengths = qsl[1:] - qsl[:-1]
    req_of_token = torch.repeat_interleave(torch.arange(num_reqs), lengths).to(device)
    pos = positions[:num_tokens].to(device=device, dtype=torch.int64)
    block_idx = pos // block_size
    if int(block_idx.max()) >= block_table.shape[1]:
        raise IndexError(f"a position maps to block index {int(block_idx.max())} >= {block_table.shape[1]}")
    block_numbers = block_table[req_of_token, block_idx].to(torch.int64)
    out[:num_tokens] = block_numbers * block_size + pos % block_size
    return out


@dataclass
class SlotMappingResult:
    """What :func:`compute_slot_mapping` did.

    Attributes:
        slot_mapping: the output buffer (int64 ``[max_num_tokens]``), filled.
        source: ``"kernel"`` when the Triton kernel launched on a GPU and wrote it;
            ``"reference"`` when it was compiled only (CPU, compile-only driver) and the values
            come from :func:`slot_mapping_reference`.
        num_tokens: tokens mapped (the rest is padding).
    """

    slot_mapping: torch.Tensor
    source: Literal["kernel", "reference"]
    num_tokens: int

    @property
    def from_reference(self) -> bool:
        """True when the values came from the torch reference, not a kernel launch."""
        return self.source == "reference"


def compute_slot_mapping(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    slot_mapping: torch.Tensor,
    *,
    num_tokens: int | None = None,
    max_num_tokens: int | None = None,
    kernel: Any | None = None,
    specialize_num_tokens: bool = False,
    pad_id: int = PAD_SLOT_ID,
    arch: int | None = None,
) -> SlotMappingResult:
    """Fill ``slot_mapping`` for one engine step (vLLM's ``BlockTable.compute_slot_mapping``).

    Args:
        query_start_loc: int32 ``[num_reqs + 1]`` (a slice ``[:num_reqs+1]`` of the engine's
            persistent buffer).
        positions: int64 ``[>= num_tokens]``.
        block_table: int32 ``[max_num_reqs, max_blocks_per_req]``; its ``stride(0)`` is passed as
            ``block_table_stride``.
        block_size: tokens per KV-cache block.
        slot_mapping: int64 ``[>= max_num_tokens]`` output buffer (persistent in an engine).
        num_tokens: ``query_start_loc[-1]``; read from the tensor when omitted (a device sync).
        max_num_tokens: engine-lifetime constant; default ``slot_mapping.numel()``.
        kernel: the ``JITFunction`` to use; default :func:`get_slot_mapping_kernel`.
        specialize_num_tokens: pick the variant without ``do_not_specialize`` (ignored when
            ``kernel`` is given).
        pad_id: padding value (a constexpr: a new value is a new compile).
        arch: compute capability for compile-only mode (default ``JITWATCH_TARGET_ARCH``, 90).

    Returns:
        :class:`SlotMappingResult`; ``source`` is ``"kernel"`` on CUDA tensors, ``"reference"``
        on CPU tensors (compiled with the compile-only driver, values from the reference).

    Raises:
        ValueError: mismatched devices or dtypes, or ``num_tokens > max_num_tokens``.
        jitwatch.ServingCompileError: a compile happened in the serving phase with
            ``JITWATCH_MODE=error`` (raised by jitwatch's Triton hook).
    """
    import torch

    if kernel is None:
        kernel = get_slot_mapping_kernel(specialize_num_tokens)
    if query_start_loc.dtype != torch.int32 or block_table.dtype != torch.int32:
        raise ValueError("query_start_loc and block_table must be int32")
    if positions.dtype != torch.int64 or slot_mapping.dtype != torch.int64:
        raise ValueError("positions and slot_mapping must be int64")
    devices = {t.device for t in (query_start_loc, positions, block_table, slot_mapping)}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    if max_num_tokens is None:
        max_num_tokens = slot_mapping.numel()
    if num_tokens is None:
        num_tokens = int(query_start_loc[-1].item())
    if num_tokens > max_num_tokens or max_num_tokens > slot_mapping.numel():
        raise ValueError(
            f"need num_tokens ({num_tokens}) <= max_num_tokens ({max_num_tokens}) <= "
            f"slot_mapping.numel() ({slot_mapping.numel()})"
        )
    num_reqs = query_start_loc.numel() - 1
    grid = (num_reqs + 1,)
    args = (
        num_tokens,
        max_num_tokens,
        query_start_loc,
        positions,
        block_table,
        block_table.stride(0),
        block_size,
        slot_mapping,
    )
    if block_table.is_cuda:
        kernel[grid](*args, PAD_ID=pad_id, BLOCK_SIZE=TILE)
        return SlotMappingResult(slot_mapping, "kernel", num_tokens)

    compile_for_cpu(kernel, args, grid, {"PAD_ID": pad_id, "BLOCK_SIZE": TILE}, arch)
    ref = slot_mapping_reference(query_start_loc, positions, block_table, block_size, max_num_tokens, pad_id)
    slot_mapping[:max_num_tokens].copy_(ref)
    return SlotMappingResult(slot_mapping, "reference", num_tokens)


def compile_for_cpu(
    kernel: Any, args: tuple[Any, ...], grid: tuple[int, ...], constexprs: dict[str, Any], arch: int | None = None
) -> Any:
    """``kernel.warmup(*args, grid=grid, **constexprs)`` under the compile-only driver.

    A real compile on an in-memory cache miss (every jitwatch hook fires), nothing on a hit.
    Returns Triton's ``CompiledKernel``. Under ``TRITON_INTERPRET=1`` there is nothing to compile
    and ``None`` is returned. Triton's active driver is swapped for the call (not thread-safe
    against launches on other threads); a ``JITFunction`` first used here keeps the compile-only
    target (sm_``arch``) for device 0, so do not mix CPU compiles and GPU launches of one kernel
    object on a GPU of another architecture.
    """
    from jitwatch.backends.triton.compile_only import CompileOnlyDriver, compile_only

    if not hasattr(kernel, "warmup") or type(kernel).__name__ == "InterpretedFunction":
        return None
    if arch is None:
        from jitwatch.config import Settings

        arch = Settings.from_env().target_arch
    previous = getattr(triton.runtime.driver, "_active", None)
    if isinstance(previous, CompileOnlyDriver) and int(previous.target.arch) == arch:
        return kernel.warmup(*args, grid=grid, **constexprs)
    with compile_only(arch):
        return kernel.warmup(*args, grid=grid, **constexprs)


def cached_keys(kernel: Any) -> set[str] | None:
    """Triton's in-memory cache keys of ``kernel`` across devices, or ``None`` if unreadable.

    Reads ``JITFunction.device_caches`` (Triton 3.x: ``{device: (kernel_cache, ...)}``); a
    private structure, so any other shape yields ``None`` instead of an error.
    """
    caches = getattr(kernel, "device_caches", None)
    if not isinstance(caches, dict):
        return None
    keys: set[str] = set()
    try:
        for entry in caches.values():
            keys.update(str(k) for k in entry[0])
    except (TypeError, IndexError, KeyError):
        return None
    return keys
