"""The slot-mapping kernel: correctness against the torch reference, and its specialization keys."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
import triton

from jitwatch.kernels.slot_mapping import (
    PAD_SLOT_ID,
    TILE,
    cached_keys,
    compile_for_cpu,
    compute_slot_mapping,
    kernel_name,
    new_slot_mapping_kernel,
    slot_mapping_reference,
)

BLOCK_SIZES = (16, 5, 32, 1)


def make_case(seed: int, block_size: int, device: str = "cpu") -> dict[str, Any]:
    """A random step: 1-6 requests (some empty, some spanning several blocks), padded output.

    Also pasted into the interpreter subprocess (by source), so keep it self-contained.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    num_reqs = int(torch.randint(1, 7, (1,), generator=g))
    max_blocks = max(40, 80 // block_size + 2)
    lengths = torch.randint(0, 70, (num_reqs,), generator=g)
    lengths[0] = max(int(lengths[0]), 1)
    max_num_tokens = int(lengths.sum()) + int(torch.randint(0, 100, (1,), generator=g))
    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(lengths, 0)
    pos_parts = []
    for n in lengths.tolist():
        start = int(torch.randint(0, max(1, max_blocks * block_size - n), (1,), generator=g))
        pos_parts.append(torch.arange(start, start + n))
    positions = torch.cat(pos_parts).to(torch.int64)
    block_table = torch.randint(1, 10_000, (num_reqs + 2, max_blocks), dtype=torch.int32, generator=g)
    return {
        "query_start_loc": qsl.to(device),
        "positions": positions.to(device),
        "block_table": block_table.to(device),
        "block_size": block_size,
        "max_num_tokens": max_num_tokens,
    }


def test_reference_by_hand() -> None:
    """Two requests, block size 4: slots follow each request's own block-table row; tail padded."""
    qsl = torch.tensor([0, 3, 5], dtype=torch.int32)
    positions = torch.tensor([2, 3, 4, 0, 1], dtype=torch.int64)
    block_table = torch.tensor([[7, 9, 0], [3, 0, 0]], dtype=torch.int32)
    out = slot_mapping_reference(qsl, positions, block_table, 4, 8)
    assert out.dtype == torch.int64
    assert out.tolist() == [30, 31, 36, 12, 13, PAD_SLOT_ID, PAD_SLOT_ID, PAD_SLOT_ID]


def test_reference_rejects_bad_input() -> None:
    qsl = torch.tensor([0, 3], dtype=torch.int32)
    pos = torch.arange(3, dtype=torch.int64)
    bt = torch.zeros(1, 1, dtype=torch.int32)
    with pytest.raises(ValueError):
        slot_mapping_reference(qsl, pos, bt, 4, 2)  # num_tokens > max_num_tokens
    with pytest.raises(ValueError):
        slot_mapping_reference(qsl, pos, bt, 0, 4)
    with pytest.raises(IndexError):
        slot_mapping_reference(qsl, torch.tensor([0, 1, 9]), bt, 4, 4)  # block index 2 >= 1 column


_INTERPRET_DRIVER = """
import json, torch
from jitwatch.kernels.slot_mapping import (
    slot_mapping_kernel, slot_mapping_kernel_specialized, slot_mapping_reference, PAD_SLOT_ID)
results = []
for kernel in (slot_mapping_kernel, slot_mapping_kernel_specialized):
    assert type(kernel).__name__ == "InterpretedFunction", type(kernel)
    for block_size in BLOCK_SIZES:
        for seed in range(3):
            for tile in (16, 1024):
                c = make_case(seed, block_size)
                num_tokens = int(c["query_start_loc"][-1])
                out = torch.full((c["max_num_tokens"],), 12345, dtype=torch.int64)
                bt = c["block_table"]
                grid = (c["query_start_loc"].numel(),)
                kernel[grid](num_tokens, c["max_num_tokens"], c["query_start_loc"], c["positions"], bt,
                             bt.stride(0), block_size, out, PAD_ID=PAD_SLOT_ID, BLOCK_SIZE=tile)
                ref = slot_mapping_reference(c["query_start_loc"], c["positions"], bt, block_size, c["max_num_tokens"])
                results.append({"kernel": kernel.fn.__name__, "block_size": block_size, "seed": seed, "tile": tile,
                                "equal": bool(torch.equal(out, ref)), "num_tokens": num_tokens,
                                "padded": c["max_num_tokens"] - num_tokens,
                                "max_blocks_in_req": int((c["positions"] // block_size).max()) if num_tokens else 0})
print(json.dumps(results))
"""


def test_kernel_matches_reference_under_interpreter(tmp_path: Any) -> None:
    """Both variants, random steps, block sizes 16/5/32/1, tiles 16 and 1024, on CPU.

    ``TRITON_INTERPRET=1`` must be set before Triton is imported, hence the subprocess.
    """
    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 9):
        pytest.skip("Triton 3.6's interpreter cannot use a loaded scalar as a range() bound (seen); 3.9 can")
    script = tmp_path / "interp.py"
    script.write_text(
        "from typing import Any\nBLOCK_SIZES = "
        + repr(BLOCK_SIZES)
        + "\n"
        + textwrap.dedent(inspect.getsource(make_case))
        + _INTERPRET_DRIVER
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 2 * len(BLOCK_SIZES) * 3 * 2
    bad = [r for r in results if not r["equal"]]
    assert not bad, bad
    # The cases really exercise padding, several blocks per request and multi-tile loops.
    assert any(r["padded"] > 16 for r in results)
    assert any(r["max_blocks_in_req"] >= 3 for r in results)
    assert any(r["num_tokens"] > 16 and r["tile"] == 16 for r in results)


def test_compute_slot_mapping_on_cpu_compiles_and_uses_reference() -> None:
    """CPU tensors: a real compile-only compile on the first call, none on the second; values
    from the reference, and the result says so."""
    kernel = new_slot_mapping_kernel()
    c = make_case(7, 16)
    out = torch.zeros(c["max_num_tokens"], dtype=torch.int64)
    args = (c["query_start_loc"], c["positions"], c["block_table"], 16, out)
    res = compute_slot_mapping(*args, kernel=kernel)
    assert res.source == "reference" and res.from_reference
    assert res.slot_mapping is out
    expected = slot_mapping_reference(c["query_start_loc"], c["positions"], c["block_table"], 16, c["max_num_tokens"])
    assert torch.equal(out, expected)
    keys = cached_keys(kernel)
    assert keys is not None and len(keys) == 1
    compute_slot_mapping(*args, kernel=kernel)
    assert cached_keys(kernel) == keys


def test_compute_slot_mapping_validates() -> None:
    bt = torch.zeros(2, 4, dtype=torch.int32)
    qsl = torch.tensor([0, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="int64"):
        compute_slot_mapping(qsl, torch.arange(3, dtype=torch.int32), bt, 16, torch.zeros(8, dtype=torch.int64))
    with pytest.raises(ValueError, match="max_num_tokens"):
        compute_slot_mapping(qsl, torch.arange(3), bt, 16, torch.zeros(2, dtype=torch.int64))


def _new_keys(kernel: Any, *, n: int = 5, cols: int = 64, block_size: int = 16, qsl_offset: int = 0) -> int:
    max_num_tokens = 2048
    bt = torch.zeros(16, cols, dtype=torch.int32)
    qsl = torch.zeros(16, dtype=torch.int32)[qsl_offset : qsl_offset + 3]
    pos = torch.zeros(max_num_tokens, dtype=torch.int64)
    out = torch.zeros(max_num_tokens, dtype=torch.int64)
    before = cached_keys(kernel)
    assert before is not None
    args = (n, max_num_tokens, qsl, pos, bt, bt.stride(0), block_size, out)
    compile_for_cpu(kernel, args, (3,), {"PAD_ID": PAD_SLOT_ID, "BLOCK_SIZE": TILE})
    after = cached_keys(kernel)
    assert after is not None
    return len(after - before)


@pytest.mark.parametrize("specialize", [False, True], ids=["do_not_specialize", "specialized"])
def test_specialization_classes(specialize: bool) -> None:
    """Which argument changes make Triton compile a new key (real compile-only compiles).

    num_tokens 1 / 16 / 5: one key with ``do_not_specialize``, three without (==1, %16, other).
    Either way: block_table_stride 1 vs 64, block_size 16 vs 12, and a query_start_loc slice
    starting one int32 in (4-byte aligned) are new keys; a slice 4 int32 in (16 bytes) and
    block_size 32 (still %16) are not.
    """
    kernel = new_slot_mapping_kernel(specialize)
    assert kernel_name(kernel) == ("slot_mapping_kernel_specialized" if specialize else "slot_mapping_kernel")
    seen = {
        "n=1": _new_keys(kernel, n=1),
        "n=16": _new_keys(kernel, n=16),
        "n=5": _new_keys(kernel, n=5),
        "n=7": _new_keys(kernel, n=7),
        "stride=1": _new_keys(kernel, n=7, cols=1),
        "block_size=12": _new_keys(kernel, n=7, block_size=12),
        "block_size=32": _new_keys(kernel, n=7, block_size=32),
        "qsl[1:]": _new_keys(kernel, n=7, qsl_offset=1),
        "qsl[4:]": _new_keys(kernel, n=7, qsl_offset=4),
    }
    expected = {
        "n=1": 1,
        "n=16": 1 if specialize else 0,
        "n=5": 1 if specialize else 0,
        "n=7": 0,
        "stride=1": 1,
        "block_size=12": 1,
        "block_size=32": 0,
        "qsl[1:]": 1,
        "qsl[4:]": 0,
    }
    assert seen == expected


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("specialize", [False, True])
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_kernel_launch_matches_reference_on_gpu(specialize: bool, block_size: int) -> None:
    """Real launches: the kernel's output equals the reference (padding included)."""
    for seed in range(5):
        c = make_case(seed, block_size, device="cuda")
        out = torch.full((c["max_num_tokens"],), 12345, dtype=torch.int64, device="cuda")
        res = compute_slot_mapping(
            c["query_start_loc"], c["positions"], c["block_table"], block_size, out, specialize_num_tokens=specialize
        )
        assert res.source == "kernel"
        ref = slot_mapping_reference(
            c["query_start_loc"], c["positions"], c["block_table"], block_size, c["max_num_tokens"]
        )
        torch.cuda.synchronize()
        assert torch.equal(out, ref), (seed, block_size)
