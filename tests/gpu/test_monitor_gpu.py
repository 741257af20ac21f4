"""The monitor on real GPU launches of the slot-mapping kernel.

Warmup compiles the serving key (phase ``warmup``), activation switches to ``serving``, request
sizes the warmup covers compile nothing, and a launch the warmup did not cover (another block-size
class) is recorded as a serving-phase compile with Triton's own key — or raised in ``error`` mode.
Triton's own view is its in-memory cache (``JITFunction.device_caches``, read by
:func:`jitwatch.kernels.slot_mapping.cached_keys`): the keys that appear are the compiles.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
HAS_CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")]

SIZES = (1, 2, 7, 16, 33, 64, 100, 512, 1000, 2048)
MAX_NUM_TOKENS = 4096
BLOCK_SIZE = 16


def _engine():
    """Persistent engine-like buffers: block table and output."""
    gen = torch.Generator().manual_seed(7)
    table = torch.randint(1, 1 << 16, (64, 512), dtype=torch.int32, generator=gen).cuda()
    out = torch.empty(MAX_NUM_TOKENS, dtype=torch.int64, device="cuda")
    return table, out


def _request(n: int, num_reqs: int = 4):
    """``n`` tokens split over up to ``num_reqs`` requests; fresh (aligned) input tensors."""
    num_reqs = max(1, min(num_reqs, n))
    lengths = [n // num_reqs] * num_reqs
    lengths[-1] += n - sum(lengths)
    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(lengths), 0)
    positions = torch.cat([torch.arange(length) + 5 * r for r, length in enumerate(lengths)]).to(torch.int64)
    return qsl, positions


def _run(kernel, table, out, n: int, block_size: int = BLOCK_SIZE):
    from jitwatch.kernels.slot_mapping import compute_slot_mapping, slot_mapping_reference

    qsl, positions = _request(n)
    res = compute_slot_mapping(
        qsl.cuda(),
        positions.cuda(),
        table,
        block_size,
        out,
        num_tokens=n,
        max_num_tokens=MAX_NUM_TOKENS,
        kernel=kernel,
    )
    torch.cuda.synchronize()
    assert res.source == "kernel"
    expected = slot_mapping_reference(qsl, positions, table.cpu(), block_size, MAX_NUM_TOKENS)
    assert torch.equal(out.cpu(), expected), f"wrong slots for {n} tokens"


@pytest.mark.parametrize("specialize", [False, True], ids=["do_not_specialize", "specialized"])
def test_warmup_covers_serving_and_uncovered_launch_is_detected(specialize: bool, tmp_path) -> None:
    from jitwatch.core.events import EventKind, Phase
    from jitwatch.kernels.slot_mapping import cached_keys, kernel_name, new_slot_mapping_kernel
    from jitwatch.redact import redact
    from jitwatch.testing import monitored
    from jitwatch.warmup.slot_mapping import warmup_slot_mapping

    table, out = _engine()
    kernel = new_slot_mapping_kernel(specialize)
    name = kernel_name(kernel)
    with monitored("warn", compile_only=False, journal_dir=tmp_path / "journal") as h:
        mon = h.monitor
        with mon.warmup():
            res = warmup_slot_mapping(table, BLOCK_SIZE, MAX_NUM_TOKENS, slot_mappings=out, kernel=kernel)
        assert res.source == "kernel"
        assert mon.phase is Phase.SERVING
        warm = h.compiles(phase=Phase.WARMUP, kernel=name)
        assert len(warm) == res.compiled >= 1
        assert len(warm) == (3 if specialize else 1)
        assert {e.key for e in warm} == {redact(k) for k in res.new_keys}
        assert {e.key for e in warm} == {redact(k) for k in cached_keys(kernel) or ()}

        # serving: every covered request size, first one marked as the first request
        with mon.request("first"):
            _run(kernel, table, out, SIZES[0])
        for n in SIZES[1:]:
            with mon.request():
                _run(kernel, table, out, n)
        assert h.compiles(phase=Phase.SERVING) == [], "a covered request size compiled during serving"
        first = h.events(EventKind.FIRST_REQUEST)
        assert len(first) == 1 and first[0].duration_s is not None and first[0].duration_s > 0

        # a launch the warmup did not cover: block size 8 (not a multiple of 16) is a new key
        before = cached_keys(kernel) or set()
        with mon.request():
            _run(kernel, table, out, 37, block_size=8)
        new_keys = (cached_keys(kernel) or set()) - before
        assert len(new_keys) == 1
        serving = h.compiles(phase=Phase.SERVING)
        assert len(serving) == 1
        ev = serving[0]
        assert ev.kernel == name
        assert ev.key == redact(next(iter(new_keys)))
        assert ev.attrs.get("request_id") is not None
        assert ev.duration_s is not None and ev.duration_s > 0


def test_error_mode_raises_on_uncovered_launch(tmp_path) -> None:
    import jitwatch
    from jitwatch.core.events import Phase
    from jitwatch.kernels.slot_mapping import new_slot_mapping_kernel
    from jitwatch.testing import monitored
    from jitwatch.warmup.slot_mapping import warmup_slot_mapping

    table, out = _engine()
    kernel = new_slot_mapping_kernel()
    with monitored("error", compile_only=False, journal_dir=tmp_path / "journal") as h:
        with h.monitor.warmup():
            warmup_slot_mapping(table, BLOCK_SIZE, MAX_NUM_TOKENS, slot_mappings=out, kernel=kernel)
        _run(kernel, table, out, 100)  # covered: no error
        with pytest.raises(jitwatch.ServingCompileError):
            _run(kernel, table, out, 100, block_size=8)
        assert len(h.compiles(phase=Phase.SERVING)) == 1
