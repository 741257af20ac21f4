"""warmup_slot_mapping: restores engine state, never touches block 0, and leaves serving compile-free."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jitwatch.warmup.slot_mapping as warmup_mod
from jitwatch.config import Settings
from jitwatch.core.events import EventKind, Phase
from jitwatch.core.monitor import Monitor
from jitwatch.core.tracing import ATTR_KERNELS_COMPILED, ATTR_STATE, SPAN_NAME, build_tracer_provider
from jitwatch.kernels.slot_mapping import compute_slot_mapping, new_slot_mapping_kernel
from jitwatch.store.journal import Journal
from jitwatch.warmup.slot_mapping import WARMUP_BLOCK_ID, num_tokens_classes, warmup_slot_mapping
from jitwatch.worker import create_monitor

BLOCK_SIZE = 16
MAX_NUM_TOKENS = 256
SERVING_SIZES = (1, 5, 16, 33, 100)


class Engine:
    """Persistent buffers like a small vLLM engine, with live data in the block table."""

    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.block_table = torch.randint(2, 500, (8, 64), dtype=torch.int32, generator=g)
        self.query_start_loc = torch.randint(0, 50, (9,), dtype=torch.int32, generator=g)
        self.positions = torch.randint(0, 50, (MAX_NUM_TOKENS,), dtype=torch.int64, generator=g)
        self.slot_mapping = torch.randint(0, 50, (MAX_NUM_TOKENS,), dtype=torch.int64, generator=g)

    def snapshot(self) -> list[torch.Tensor]:
        return [t.clone() for t in (self.block_table, self.query_start_loc, self.positions, self.slot_mapping)]

    def unchanged_since(self, snap: list[torch.Tensor]) -> bool:
        now = (self.block_table, self.query_start_loc, self.positions, self.slot_mapping)
        return all(torch.equal(a, b) for a, b in zip(now, snap, strict=True))

    def warmup(self, kernel: Any, **kwargs: Any) -> Any:
        return warmup_slot_mapping(
            self.block_table,
            BLOCK_SIZE,
            MAX_NUM_TOKENS,
            slot_mappings=self.slot_mapping,
            query_start_loc=self.query_start_loc,
            positions=self.positions,
            kernel=kernel,
            **kwargs,
        )

    def serve(self, num_tokens: int) -> Any:
        """One request of ``num_tokens`` new tokens in row 0 (blocks 10, 11, ...)."""
        blocks = (num_tokens + BLOCK_SIZE - 1) // BLOCK_SIZE
        self.block_table[0, :blocks] = torch.arange(10, 10 + blocks, dtype=torch.int32)
        self.query_start_loc[:2] = torch.tensor([0, num_tokens], dtype=torch.int32)
        self.positions[:num_tokens] = torch.arange(num_tokens)
        return compute_slot_mapping(
            self.query_start_loc[:2],
            self.positions,
            self.block_table,
            BLOCK_SIZE,
            self.slot_mapping,
            num_tokens=num_tokens,
            max_num_tokens=MAX_NUM_TOKENS,
            kernel=self.kernel,
        )

    kernel: Any = None


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[Monitor]:
    mon = create_monitor(Settings(journal_dir=tmp_path / "journal"), mode="warn", tracer_provider=False).install()
    try:
        yield mon
    finally:
        mon.uninstall()


def compiles(journal_dir: Path, phase: Phase) -> list[Any]:
    with Journal(journal_dir, readonly=True) as j:
        return j.events(kind=EventKind.COMPILE, phase=phase, limit=1000)


def test_engine_state_restored() -> None:
    engine = Engine()
    snap = engine.snapshot()
    res = engine.warmup(new_slot_mapping_kernel(), row=3)
    assert engine.unchanged_since(snap)
    assert res.calls == 1 and res.source == "reference"
    assert res.compiled == 1 and res.keys_known


def test_engine_state_restored_when_computation_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The row really holds block 1 during the computation, and is restored after an error."""
    engine = Engine()
    snap = engine.snapshot()
    seen: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        compute_slot_mapping(*args, **kwargs)  # writes the output buffer
        seen.append(int(engine.block_table[0, 0]))
        raise RuntimeError("device lost")

    monkeypatch.setattr(warmup_mod, "compute_slot_mapping", failing)
    with pytest.raises(RuntimeError, match="device lost"):
        engine.warmup(new_slot_mapping_kernel())
    assert seen == [WARMUP_BLOCK_ID]
    assert engine.unchanged_since(snap)


def test_block_zero_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every slot computed during warmup lies in block 1, for every token count; never block 0."""
    engine = Engine()
    engine.block_table.zero_()  # an idle engine: every entry is the null block
    outputs: list[tuple[int, list[int]]] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        res = compute_slot_mapping(*args, **kwargs)
        n = kwargs["num_tokens"]
        outputs.append((n, res.slot_mapping[:n].tolist()))
        return res

    monkeypatch.setattr(warmup_mod, "compute_slot_mapping", recording)
    res = engine.warmup(new_slot_mapping_kernel(specialize_num_tokens=True), specialize_num_tokens=True)
    assert [n for n, _ in outputs] == num_tokens_classes(MAX_NUM_TOKENS) == [1, 16, 3]
    for _n, slots in outputs:
        assert all(WARMUP_BLOCK_ID * BLOCK_SIZE <= s < (WARMUP_BLOCK_ID + 1) * BLOCK_SIZE for s in slots), slots
    assert res.blocks_used == {WARMUP_BLOCK_ID}
    assert int(engine.block_table.abs().sum()) == 0


@pytest.mark.parametrize("specialize", [False, True], ids=["do_not_specialize", "specialized"])
def test_no_serving_compiles_after_warmup(monitor: Monitor, specialize: bool) -> None:
    """After the warmup, 5 different request sizes compile nothing (journal, real compiles)."""
    engine = Engine()
    engine.kernel = new_slot_mapping_kernel(specialize)
    with monitor.warmup():
        res = engine.warmup(engine.kernel)
    for n in SERVING_SIZES:
        with monitor.request():
            out = engine.serve(n)
        assert out.slot_mapping[0] == 10 * BLOCK_SIZE
    assert monitor.flush()
    warm = compiles(monitor.journal_dir, Phase.WARMUP)
    assert len(warm) == res.compiled == (3 if specialize else 1)
    assert {e.kernel for e in warm} == {res.kernel}
    assert compiles(monitor.journal_dir, Phase.SERVING) == []


def test_one_size_warmup_of_specialized_kernel_misses_classes(monitor: Monitor) -> None:
    """Control: warming the specialized kernel with one size (the original bug) leaves serving
    compiles for the ==1 and 'other' classes — so the test above can fail."""
    engine = Engine()
    engine.kernel = new_slot_mapping_kernel(True)
    with monitor.warmup():
        engine.warmup(engine.kernel, num_tokens=[MAX_NUM_TOKENS])
    for n in SERVING_SIZES:
        with monitor.request():
            engine.serve(n)
    assert monitor.flush()
    serving = compiles(monitor.journal_dir, Phase.SERVING)
    assert len(serving) == 2
    assert all(e.attrs.get("request_id") for e in serving)


def test_warmup_span_emitted(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = build_tracer_provider(env={}, span_exporter=exporter)
    mon = create_monitor(Settings(journal_dir=tmp_path / "j"), tracer_provider=provider).install()
    try:
        with mon.warmup():
            res = Engine().warmup(new_slot_mapping_kernel())
    finally:
        mon.uninstall()
    spans = [s for s in exporter.get_finished_spans() if s.name == SPAN_NAME]
    assert len(spans) == 1
    attrs = dict(spans[0].attributes or {})
    assert attrs[ATTR_STATE] == "complete"
    assert attrs[ATTR_KERNELS_COMPILED] == res.compiled == 1


def test_multiple_groups_and_validation() -> None:
    """Two KV-cache groups (block sizes 16 and 32, strides 64 and 1): each table restored."""
    t1 = torch.randint(2, 9, (4, 64), dtype=torch.int32)
    t2 = torch.randint(2, 9, (4, 1), dtype=torch.int32)
    s1, s2 = t1.clone(), t2.clone()
    res = warmup_slot_mapping([t1, t2], [16, 32], 64, kernel=new_slot_mapping_kernel())
    assert res.calls == 2 and res.compiled == 2  # stride 1 is its own key
    assert torch.equal(t1, s1) and torch.equal(t2, s2)
    with pytest.raises(ValueError):
        warmup_slot_mapping(t1, 16, 64, row=4)
    with pytest.raises(ValueError):
        warmup_slot_mapping(t1, 16, 8, num_tokens=[9])


def test_num_tokens_classes() -> None:
    assert num_tokens_classes(8192) == [1, 16, 3]
    assert num_tokens_classes(8) == [1, 0, 3]
    assert num_tokens_classes(2) == [1, 0, 2]
