"""Review of listener-only Triton compiles (``CompileSink.ended``): real compiles racing the
journal writer, requests, phase changes, a sink without ``ended``."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import triton
import triton.language as tl

from jitwatch.core.events import EventKind, Phase
from jitwatch.testing import MonitorHarness, fresh_kernel_cache


@triton.jit
def rv_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@pytest.fixture(autouse=True)
def _fresh_kernel() -> None:
    fresh_kernel_cache(rv_add)


def _direct(block: int) -> Any:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return triton.compile(
        ASTSource(fn=rv_add, signature=sig, constexprs={(4,): block}), target=GPUTarget("cuda", 90, 32)
    )


def test_parallel_listener_only_compiles_in_requests_race_the_writer(harness: MonitorHarness, serial_ast_parse) -> None:
    """Four threads compile directly, each inside its own request, while the writer runs on its own
    (no flush until the end): every compile journaled once, with its own thread's request."""
    mon = harness.monitor
    blocks = [16, 32, 64, 128]
    for b in blocks:
        _direct(b)  # fill the disk cache: the threads' compiles are ~1 ms hits
    before = len(harness.compiles())
    per_thread = 25
    hashes: dict[str, set[str]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            name = f"req-{i}"
            got = hashes.setdefault(name, set())
            with mon.request(name):
                for _ in range(per_thread):
                    got.add(_direct(blocks[i]).hash)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    evs = harness.compiles()[before:]
    assert len(evs) == 4 * per_thread
    by_req: dict[str, list[Any]] = {}
    for e in evs:
        by_req.setdefault(e.attrs["request"], []).append(e)
    assert sorted(by_req) == [f"req-{i}" for i in range(4)]
    for name, es in by_req.items():
        assert len(es) == per_thread
        assert {e.key for e in es} == hashes[name] and len(hashes[name]) == 1
        assert len({e.attrs["request_id"] for e in es}) == 1
        assert all(e.cache_hit is True and e.attrs["source"] == "compilation_listener" for e in es)
    assert mon.hook_errors == 0
    assert mon.compiles_by_phase[Phase.STARTUP] == len(harness.compiles())


def test_activate_during_a_stream_of_listener_only_compiles(harness: MonitorHarness) -> None:
    """A thread compiles directly without pause while another calls ``begin_warmup`` and
    ``activate``: every compile's phase is the one at its midpoint (up to clock-read jitter), and
    the per-phase counts are the journal's."""
    mon = harness.monitor
    _direct(32)
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            _direct(32)

    t = threading.Thread(target=stream)
    t.start()
    try:
        time.sleep(0.2)
        mon.begin_warmup()
        time.sleep(0.2)
        mon.activate()
        time.sleep(0.2)
    finally:
        stop.set()
        t.join()
    evs = harness.compiles()
    assert mon.warmup_start is not None and mon.warmup_end is not None
    eps = 0.05  # activate() reads its clock before it switches the phase: a GIL switch (5 ms) may fall between
    seen = set()
    for e in evs:
        mid = (e.start_ts or 0.0) + e.duration_s / 2
        if mid < mon.warmup_start - eps:
            assert e.phase is Phase.STARTUP, (mid, mon.warmup_start)
        elif mon.warmup_start + eps < mid < mon.warmup_end - eps:
            assert e.phase is Phase.WARMUP
        elif mid > mon.warmup_end + eps:
            assert e.phase is Phase.SERVING
        seen.add(e.phase)
    assert seen == {Phase.STARTUP, Phase.WARMUP, Phase.SERVING}
    counts = mon.compiles_by_phase
    assert {p: sum(e.phase is p for e in evs) for p in Phase} == counts


def test_a_sink_without_ended_gets_record(harness: MonitorHarness, monkeypatch) -> None:
    """A sink without ``CompileSink.ended`` (an older or wrapping sink): the listener builds the
    Capture itself and calls ``record``; the event is the same."""
    mon = harness.monitor
    with_ended = _direct(32)
    monkeypatch.setattr(mon, "ended", None, raising=False)
    without = _direct(64)
    a, b = harness.compiles()
    assert (a.key, b.key) == (with_ended.hash, without.hash)
    assert set(a.attrs) == set(b.attrs) and b.attrs["source"] == "compilation_listener"
    assert a.attrs["stages"].keys() == b.attrs["stages"].keys()
    assert b.duration_s == pytest.approx(sum(b.attrs["stages"].values()))
    assert mon.hook_errors == 0 and not harness.events(EventKind.HOOK_ERROR)


def test_listener_only_compile_in_a_forked_child_is_not_journaled(harness: MonitorHarness) -> None:
    """A direct compile in a child forked while the writer runs (its settle loop included):
    nothing raised or hung in the child, nothing of the child's in the parent's journal, and the
    parent's own compiles after the fork are journaled."""
    import os

    _direct(32)
    stop = threading.Event()

    def stream() -> None:  # the parent's writer settles while the child forks
        while not stop.is_set():
            _direct(32)

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.15)
    try:
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                _direct(64)
                code = 0 if harness.monitor.flush(1.0) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        stop.set()
        t.join()
    assert os.WEXITSTATUS(status) == 0
    after = _direct(128)
    keys = {e.key for e in harness.compiles()}
    assert after.hash in keys
    assert len(keys) == 2  # BLOCK 32 and 128: the child's BLOCK=64 compile is not here
