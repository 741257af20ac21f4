"""The slot-mapping kernel launched for real on a GPU matches the torch reference.

Random inputs (fresh per case): several block sizes, empty and multi-block requests, requests
longer than one ``TILE`` (the in-kernel loop runs more than once), padding up to
``max_num_tokens``, a block table whose row stride is not its width, and both kernel variants.
The output is poisoned first, so an element the kernel never wrote fails the comparison.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
HAS_CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]

POISON = 0x5A5A5A5A


def _random_case(gen, *, block_size: int, num_reqs: int, max_len: int, pad: int, col_pad: int = 0):
    import torch

    lengths = torch.randint(0, max_len + 1, (num_reqs,), generator=gen)
    if num_reqs > 1:
        lengths[0] = 0  # an empty request
    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(lengths, 0)
    num_tokens = int(qsl[-1])
    max_blocks = (max_len + 64) // block_size + 4
    # positions continue each request's sequence from a random offset, spanning several blocks
    starts = torch.randint(0, 64, (num_reqs,), generator=gen)
    pos = [starts[r] + torch.arange(int(lengths[r])) for r in range(num_reqs)]
    positions = torch.cat(pos).to(torch.int64) if num_tokens else torch.zeros(0, dtype=torch.int64)
    positions = torch.cat([positions, torch.randint(0, 10, (pad,), generator=gen)])  # stale tail
    full = torch.randint(1, 1 << 20, (num_reqs + 3, max_blocks + col_pad), dtype=torch.int32, generator=gen)
    block_table = full[:, :max_blocks]  # row stride = max_blocks + col_pad
    return qsl, positions, block_table, num_tokens, num_tokens + pad


@pytest.mark.parametrize("specialize", [False, True], ids=["do_not_specialize", "specialized"])
@pytest.mark.parametrize("block_size", [1, 16, 32, 128, 256])
def test_kernel_matches_reference_on_random_inputs(specialize: bool, block_size: int) -> None:
    import torch

    from jitwatch.kernels.slot_mapping import compute_slot_mapping, slot_mapping_reference

    gen = torch.Generator().manual_seed(1000 * block_size + int(specialize))
    cases = [
        dict(num_reqs=1, max_len=1, pad=0),
        dict(num_reqs=3, max_len=40, pad=7),
        dict(num_reqs=8, max_len=300, pad=100),
        dict(num_reqs=2, max_len=3000, pad=33, col_pad=5),  # > TILE tokens in one request
        dict(num_reqs=64, max_len=20, pad=0, col_pad=16),
    ]
    for case in cases:
        qsl, positions, block_table, num_tokens, max_num_tokens = _random_case(gen, block_size=block_size, **case)
        expected = slot_mapping_reference(qsl, positions, block_table, block_size, max_num_tokens)
        out = torch.full((max_num_tokens + 5,), POISON, dtype=torch.int64, device="cuda")
        res = compute_slot_mapping(
            qsl.cuda(),
            positions.cuda(),
            block_table.cuda() if case.get("col_pad", 0) == 0 else _strided_cuda(block_table),
            block_size,
            out,
            num_tokens=num_tokens,
            max_num_tokens=max_num_tokens,
            specialize_num_tokens=specialize,
        )
        torch.cuda.synchronize()
        assert res.source == "kernel"
        got = out.cpu()
        assert torch.equal(got[:max_num_tokens], expected), case
        assert bool((got[max_num_tokens:] == POISON).all()), "wrote past max_num_tokens"


def _strided_cuda(block_table):
    """The same values on the GPU with the same (padded) row stride."""
    import torch

    rows, cols = block_table.shape
    stride = block_table.stride(0)
    full = torch.zeros(rows, stride, dtype=torch.int32, device="cuda")
    view = full[:, :cols]
    view.copy_(block_table.cuda())
    assert view.stride(0) == stride
    return view


def test_all_padding_when_no_tokens() -> None:
    import torch

    from jitwatch.kernels.slot_mapping import PAD_SLOT_ID, compute_slot_mapping

    qsl = torch.zeros(3, dtype=torch.int32, device="cuda")
    positions = torch.zeros(64, dtype=torch.int64, device="cuda")
    table = torch.ones(4, 4, dtype=torch.int32, device="cuda")
    out = torch.full((64,), POISON, dtype=torch.int64, device="cuda")
    compute_slot_mapping(qsl, positions, table, 16, out, num_tokens=0)
    torch.cuda.synchronize()
    assert bool((out == PAD_SLOT_ID).all())


def test_warmup_leaves_engine_buffers_as_it_found_them() -> None:
    import torch

    from jitwatch.kernels.slot_mapping import new_slot_mapping_kernel
    from jitwatch.warmup.slot_mapping import warmup_slot_mapping

    table = torch.randint(0, 1000, (16, 32), dtype=torch.int32, device="cuda")
    out = torch.full((512,), 7, dtype=torch.int64, device="cuda")
    table_before, out_before = table.clone(), out.clone()
    kernel = new_slot_mapping_kernel()
    res = warmup_slot_mapping(table, 16, 512, slot_mappings=out, kernel=kernel)
    torch.cuda.synchronize()
    assert res.source == "kernel"
    assert res.calls == 1 and res.blocks_used == {1}
    assert res.compiled == 1
    assert torch.equal(table, table_before) and torch.equal(out, out_before)
