"""A Triton compile that raises calls no hook after ``jit_cache_hook``: it must leave the in-flight
compiles (``/jit``'s list, ``jitwatch_inflight_compiles``) instead of ageing there for ever as a
false "rank stuck compiling" — and a compile that is merely slow, or runs in Triton's asynchronous
compile mode, must not be dropped. Real compiles with the compile-only driver."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
import triton
import triton.language as tl
from prometheus_client.parser import text_string_to_metric_families as parse_text
from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure

import jitwatch
from jitwatch.core import monitor as monitor_mod
from jitwatch.core.events import EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache, monitored
from jitwatch.views.metrics import render
from jitwatch.views.status import build_status


@triton.jit
def abd_bad(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.dot(x, 3)  # a type error: tl.dot takes two 2-D blocks
    tl.store(x_ptr + offs, y, mask=offs < n)


@triton.jit
def abd_tuned(x_ptr, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK <= 64)  # the BLOCK=128 "autotune config" fails to compile
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


X = torch.empty(256, dtype=torch.float32)


@pytest.fixture(autouse=True)
def _fresh_kernels() -> None:
    fresh_kernel_cache(abd_bad, abd_tuned)


def wait_for(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail("timed out")


def sample(text: str, name: str, **labels: str) -> float:
    for fam in parse_text(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise KeyError(name)


@contextmanager
def slow_listener(seconds: float, during: Callable[[], None] | None = None) -> Iterator[list[Any]]:
    """A ``knobs.compilation.listener`` installed *after* jitwatch, on top of its listener, that
    holds each compile open ``seconds`` inside ``triton.compile``, calls ``during``, then the
    listener below (jitwatch's, which ends the compile outside ``error`` mode: a listener chained
    below jitwatch's would run after the compile ended); restored after."""
    seen: list[Any] = []
    knobs = triton.knobs.compilation
    before = knobs.listener

    def listener(**kwargs: Any) -> None:
        time.sleep(seconds)
        if during is not None:
            seen.append(during())
        if before is not None:
            before(**kwargs)

    knobs.listener = listener
    try:
        yield seen
    finally:
        knobs.listener = before


def abandoned_events(h: MonitorHarness) -> list[Any]:
    return h.events(EventKind.COMPILE_ABANDONED)


def test_compile_that_raises_leaves_the_inflight_list_counted_and_logged(
    tmp_path: Path, triton_cache: Path, compile_only: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="jitwatch.core.monitor")
    jdir = tmp_path / "j"
    with monitored(journal_dir=jdir, triton_cache_dir=triton_cache) as h:
        h.monitor.activate()
        with pytest.raises(CompilationError):
            abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
        assert [s.name for s in h.monitor.inflight()] == ["abd_bad"]  # nothing ended it (Triton 3.6-3.9)
        (raised,) = h.triton._last.values()  # its thread's last-begun compile: its listener never came
        assert raised[5] == "abd_bad"  # _P_NAME
        wait_for(lambda: not h.monitor.inflight())
        assert h.triton.pending() == 0  # the backend forgot it too
        wait_for(lambda: not h.triton._last)  # and its thread no longer holds it (the sweep took it out)

        def journaled_idle() -> bool:
            with Journal(jdir, readonly=True) as j:
                (rank,) = build_status(j).ranks
            return not rank.inflight

        wait_for(journaled_idle)
        h.monitor.flush()  # the compile_abandoned event is written at the writer's next wake-up
        text = render(jdir)[0].decode()
        assert sample(text, "jitwatch_inflight_compiles", rank="0") == 0
        assert sample(text, "jitwatch_inflight_compile_age_seconds", rank="0") == 0
        assert sample(text, "jitwatch_abandoned_compiles_total", backend="triton", rank="0") == 1
        assert sample(text, "jitwatch_hook_errors_total", backend="triton", rank="0") == 0  # not jitwatch's fault

        (ev,) = abandoned_events(h)
        assert (ev.backend, ev.kernel, ev.phase, ev.duration_s) == ("triton", "abd_bad", Phase.SERVING, None)
        assert ev.key and "('constexpr', 16)" in ev.key
        assert "raised inside Triton" in ev.attrs["cause"]
        assert ev.start_ts is not None and ev.start_ts < ev.ts
        with Journal(jdir, readonly=True) as j:
            status = build_status(j)
        (triton_totals,) = [b for b in status.backends if b.name == "triton"]
        assert status.totals.abandoned_compiles == triton_totals.abandoned_compiles == 1
        assert status.totals.hook_errors == 0
        assert h.compiles() == []  # an abandoned compile is not a compile

        # Once per kernel in the log; every one counted.
        with pytest.raises(CompilationError):
            abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
        wait_for(lambda: len(abandoned_events(h)) == 2)
        assert h.monitor.abandoned_compiles == 2
    lines = [r.getMessage() for r in caplog.records if "never ended" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "Triton kernel 'abd_bad' on rank 0" in lines[0] and "CompilationError" in lines[0]


def test_compile_that_raises_is_dropped_with_the_heartbeat_off(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """``JITWATCH_HEARTBEAT_SECONDS=0``: the writer still journals the compiles in flight, and
    the sweep that runs before each snapshot still drops the one that raised."""
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache, heartbeat_seconds=0) as h:
        h.monitor.activate()
        with pytest.raises(CompilationError):
            abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
        wait_for(lambda: not h.monitor.inflight())
        wait_for(lambda: len(abandoned_events(h)) == 1)
        assert h.monitor.abandoned_compiles == 1


@pytest.mark.parametrize("where", ["listener", "chained_pre_hook"])
def test_slow_compile_is_never_swept(tmp_path: Path, triton_cache: Path, compile_only: Any, where: str) -> None:
    """A compile held open 3 s (inside ``triton.compile``, or in a ``jit_cache_hook`` chained
    after jitwatch's, which also puts a chaining frame between the hook and ``_do_compile``)
    stays listed with its growing age, and ends as an ordinary compile."""
    harness: list[MonitorHarness] = []

    def inside() -> tuple[list[str], float, int]:
        mon = harness[0].monitor
        running = mon.inflight()
        return [s.name for s in running], time.perf_counter() - running[0].start_perf, mon.sweep_abandoned(force=True)

    runtime = triton.knobs.runtime
    before = runtime.jit_cache_hook

    def slow_pre_hook(**kwargs: Any) -> None:
        time.sleep(3.0)
        seen.append(inside())

    seen: list[Any] = []
    if where == "chained_pre_hook":
        runtime.jit_cache_hook = slow_pre_hook
    try:
        with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            harness.append(h)
            with slow_listener(3.0, inside) if where == "listener" else _nothing() as listened:
                abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
            (ev,) = h.compiles()
            assert abandoned_events(h) == [] and h.monitor.abandoned_compiles == 0
    finally:
        runtime.jit_cache_hook = before
    ((names, age, swept),) = seen or listened
    assert names == ["abd_tuned"] and age >= 2.9 and swept == 0
    assert ev.kernel == "abd_tuned" and (ev.duration_s or 0) >= 3.0


@contextmanager
def _nothing() -> Iterator[list[Any]]:
    yield []


def test_failed_config_then_a_slow_one_on_the_same_thread(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """An autotune-like loop: one config fails to compile (caught, as ``Autotuner._bench`` catches
    ``CompileTimeAssertionFailure``) and the next one compiles at once on the same thread — its
    ``_do_compile`` frame may well reuse the failed one's id. The failed compile is dropped while
    the next still runs; the running one is not."""
    harness: list[MonitorHarness] = []

    def inside() -> list[str]:
        mon = harness[0].monitor
        wait_for(lambda: mon.abandoned_compiles == 1, timeout=10.0)
        return [s.name + str(s.request_id) for s in mon.inflight()]

    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        harness.append(h)
        with slow_listener(0.0, inside) as seen:
            for block in (128, 64):
                try:
                    abd_tuned.warmup(X, 100, BLOCK=block, grid=(1,))
                except CompileTimeAssertionFailure:
                    continue
        (ev,) = h.compiles()
        (gone,) = abandoned_events(h)
    assert seen[0] == ["abd_tunedNone"]  # the failed config is gone, the running one listed
    assert "('constexpr', 128)" in (gone.key or "") and "('constexpr', 64)" in (ev.key or "")


def test_a_failed_compile_retried_at_once_is_counted_every_time(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """A host that retries a failing compile (the same kernel and key) on the same thread within
    ``ABANDON_AFTER_S``: each failure is one abandoned compile with its key and cause. The retry's
    ``jit_cache_hook`` meets the previous failure's entry still pending; it used to cancel it as
    "did not happen", so three failures counted one."""
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        h.monitor.activate()
        for _ in range(3):
            fresh_kernel_cache(abd_bad)
            with pytest.raises(CompilationError):
                abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
        events = wait_for(lambda: (lambda evs: evs if len(evs) == 3 else None)(abandoned_events(h)))
        assert h.monitor.abandoned_compiles == 3
        assert not h.monitor.inflight() and h.triton.pending() == 0
        for ev in events:
            assert "raised inside Triton" in ev.attrs["cause"]
            assert ev.key and "('constexpr', 16)" in ev.key
        assert h.compiles() == []


def test_the_same_key_compiling_on_two_threads_is_not_abandoned(
    tmp_path: Path, triton_cache: Path, compile_only: Any, serial_ast_parse: None
) -> None:
    """Two threads compile the same kernel and key at once (both missed the in-memory cache): the
    second's ``jit_cache_hook`` meets the first's entry, which is running, not failed. Neither
    is an abandoned compile, and nothing stays in flight."""
    started = threading.Barrier(2, timeout=30)

    def hold() -> None:
        started.wait()  # both threads are inside triton.compile before either ends

    with slow_listener(0.0, hold), monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,)), range(2)))
        time.sleep(1.6)  # past ABANDON_AFTER_S and one sweep interval
        assert h.monitor.sweep_abandoned(force=True) == 0
        assert abandoned_events(h) == [] and h.monitor.abandoned_compiles == 0
        assert not h.monitor.inflight() and h.triton.pending() == 0


def test_async_compile_mode_is_not_swept(tmp_path: Path, triton_cache: Path, compile_only: Any) -> None:
    """``triton.AsyncCompileMode``: ``_do_compile`` returns a future at once and the compile runs on
    a pool thread for 2.5 s; the post-compile hook fires when the mode finalizes it. That is not
    an abandoned compile (its compiles are begun unwatched)."""
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h, slow_listener(2.5):
        with ThreadPoolExecutor(1) as pool, triton.AsyncCompileMode(pool):
            abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
            time.sleep(2.0)  # sweeps run on the writer thread meanwhile; _do_compile returned long ago
            assert [s.name for s in h.monitor.inflight()] == ["abd_tuned"]
            assert h.monitor.sweep_abandoned(force=True) == 0
        (ev,) = h.compiles()
        assert abandoned_events(h) == [] and h.triton.pending() == 0
    assert (ev.duration_s or 0) >= 2.5


def test_post_compile_hook_chained_on_top_raising_is_abandoned_with_its_cause(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """A ``jit_post_compile_hook`` installed after jitwatch's that raises before calling it (vLLM's
    monitor does in its error mode): Triton compiled the kernel, jitwatch's post hook never ran.
    jitwatch in ``error`` mode (phase ``startup``: nothing of its own raises), the one mode where
    it occupies ``jit_post_compile_hook``."""
    runtime = triton.knobs.runtime
    with monitored("error", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        ours = runtime.jit_post_compile_hook

        def refusing(**kwargs: Any) -> None:
            raise RuntimeError("refused by a hook chained on top")

        runtime.jit_post_compile_hook = refusing
        try:
            with pytest.raises(RuntimeError, match="refused"):
                abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
        finally:
            runtime.jit_post_compile_hook = ours
        (ev,) = wait_for(lambda: abandoned_events(h))
        assert "compilation listener saw it" in ev.attrs["cause"] and "vLLM" in ev.attrs["cause"]
        assert not h.monitor.inflight() and h.triton.pending() == 0


def test_a_jit_cache_hook_on_top_that_vetoes_is_not_called_a_raise(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """A ``jit_cache_hook`` installed after jitwatch's that calls it and returns ``True``: Triton
    skips the compile, nothing raised. jitwatch cannot tell that from a compile that raised, but
    the cause must not claim an exception reached the host: it names the hook on top."""
    runtime = triton.knobs.runtime
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        ours = runtime.jit_cache_hook

        def veto(**kwargs: Any) -> bool:
            ours(**kwargs)
            return True

        runtime.jit_cache_hook = veto
        try:
            assert abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,)) is None  # skipped, no exception
            (ev,) = wait_for(lambda: abandoned_events(h))
        finally:
            runtime.jit_cache_hook = ours
        assert "jit_cache_hook installed on top of jitwatch's" in ev.attrs["cause"]
        assert "truthy" in ev.attrs["cause"] and not h.monitor.inflight() and h.triton.pending() == 0


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_a_replaced_compilation_listener_makes_the_cause_unknown(
    tmp_path: Path, triton_cache: Path, compile_only: Any, mode: str
) -> None:
    """``triton.knobs.compilation.listener`` replaced after jitwatch installed its own, then a
    post-compile hook on top that raises: Triton compiled the kernel, but without jitwatch's
    listener nothing says so. The cause must not say "raised inside Triton". In ``warn`` mode,
    where the listener was ending compiles, jitwatch finds the kernel in Triton's cache and says
    the listener was cut out (and takes the post-compile slot); in ``error`` mode (phase
    ``startup``: jitwatch raises nothing) it cannot tell."""
    runtime, compilation = triton.knobs.runtime, triton.knobs.compilation
    with monitored(mode, journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        post, listener = runtime.jit_post_compile_hook, compilation.listener

        def refusing(**kwargs: Any) -> None:
            raise RuntimeError("refused by a hook chained on top")

        runtime.jit_post_compile_hook, compilation.listener = refusing, None
        try:
            with pytest.raises(RuntimeError, match="refused"):
                abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
            (ev,) = wait_for(lambda: abandoned_events(h))
        finally:
            runtime.jit_post_compile_hook, compilation.listener = post, listener
        assert "raised inside Triton (" not in ev.attrs["cause"]
        if mode == "warn":
            assert "Triton compiled and cached it" in ev.attrs["cause"]
            return
        assert "compilation.listener now holds another callable" in ev.attrs["cause"]
        assert "jitwatch cannot tell which" in ev.attrs["cause"]


def test_compile_on_a_thread_that_ended_is_dropped(tmp_path: Path, triton_cache: Path, compile_only: Any) -> None:
    """The compiling thread itself is gone (it raised out of its target): its compile is dropped."""
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        errors: list[BaseException] = []

        def target() -> None:
            try:
                abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
            except CompilationError as exc:
                errors.append(exc)

        t = threading.Thread(target=target)
        t.start()
        t.join(60)
        assert errors and [s.name for s in h.monitor.inflight()] == ["abd_bad"]
        (ev,) = wait_for(lambda: abandoned_events(h))
        assert ev.kernel == "abd_bad" and not h.monitor.inflight()


def test_abandoned_compile_over_http_from_a_real_sidecar(tmp_path: Path, triton_cache: Path, compile_only: Any) -> None:
    """``jitwatch serve`` on 127.0.0.1 (its in-memory copy of the journal, refreshed from the rows
    changed since): the failed compile leaves ``/jit``'s in-flight list and the gauges, and is
    counted in ``/jit`` and ``/metrics``; ``/jit/events?kind=compile_abandoned`` has it."""
    from tests.test_sidecar import serve

    jdir = tmp_path / "j"
    with monitored(journal_dir=jdir, triton_cache_dir=triton_cache) as h, serve(jdir, tmp_path) as base:
        h.monitor.activate()
        with pytest.raises(CompilationError):
            abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
        wait_for(lambda: h.monitor.abandoned_compiles == 1)
        h.monitor.flush()

        def settled() -> dict[str, Any] | None:
            body = httpx.get(base + "/jit", timeout=10).json()
            return body if body["totals"]["abandoned_compiles"] == 1 and not body["ranks"][0]["inflight"] else None

        body = wait_for(settled)
        assert body["ranks"][0]["oldest_inflight_age_s"] == 0
        assert [
            (b["name"], b["abandoned_compiles"], b["hook_errors"]) for b in body["backends"] if b["name"] == "triton"
        ] == [("triton", 1, 0)]
        text = httpx.get(base + "/metrics", timeout=10).text
        assert sample(text, "jitwatch_inflight_compiles", rank="0") == 0
        assert sample(text, "jitwatch_abandoned_compiles_total", backend="triton", rank="0") == 1
        (ev,) = httpx.get(base + "/jit/events", params={"kind": "compile_abandoned"}, timeout=10).json()
        assert (ev["kernel"], ev["phase"]) == ("abd_bad", "serving") and "raised inside Triton" in ev["attrs"]["cause"]


# ------------------------------------------------------------------ no frame work on the compiling thread
def test_the_compiling_thread_looks_at_no_frame(tmp_path: Path, triton_cache: Path, compile_only: Any) -> None:
    """jitwatch's hooks call no ``sys._getframe`` on the compiling thread (a profile function sees
    every C call there): the compile is begun watched with its thread's id, and the writer thread
    finds its ``_do_compile`` frame. The compile that raised is still dropped, the one that
    succeeded ends as usual."""
    package = str(Path(jitwatch.__file__).parent)
    frame_calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and arg is sys._getframe and frame.f_code.co_filename.startswith(package):
            frame_calls.append(frame.f_code.co_name)

    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        h.monitor.activate()
        sys.setprofile(profile)
        try:
            with pytest.raises(CompilationError):
                abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
            abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
        finally:
            sys.setprofile(None)
        (gone,) = wait_for(lambda: abandoned_events(h))
        (ev,) = h.compiles()
        assert not h.monitor.inflight() and h.triton.pending() == 0
    assert frame_calls == []
    assert (gone.kernel, ev.kernel) == ("abd_bad", "abd_tuned")


def test_a_compile_under_a_deep_chain_of_hooks_is_watched(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """Twelve ``jit_cache_hook`` wrappers on top of jitwatch's (one frame each, between Triton's
    ``_do_compile`` and jitwatch's hook): the compile that raised under them is dropped, as with
    none. (The compiling thread once looked for ``_do_compile`` through 8 frames at most, and
    began a compile it did not find there unwatched: in flight for good.)"""
    runtime = triton.knobs.runtime
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        ours = runtime.jit_cache_hook
        hook = ours
        for _ in range(12):
            hook = (lambda inner: lambda **kwargs: inner(**kwargs))(hook)
        runtime.jit_cache_hook = hook
        try:
            with pytest.raises(CompilationError):
                abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
            (ev,) = wait_for(lambda: abandoned_events(h))
        finally:
            runtime.jit_cache_hook = ours
        assert ev.kernel == "abd_bad" and not h.monitor.inflight() and h.triton.pending() == 0


def test_a_retry_still_running_is_kept_and_the_failure_before_it_dropped(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """A compile that raised (a listener on top raised inside ``triton.compile``), retried at once
    on the same thread with the same kernel and key, the retry held open inside the compile: the
    failure is dropped while the retry runs (the retry's ``_do_compile`` holds a signature dict of
    its own), and the retry stays listed and ends as a compile."""
    harness: list[MonitorHarness] = []
    knobs = triton.knobs.compilation
    calls: list[list[str]] = []

    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        harness.append(h)
        below = knobs.listener

        def listener(**kwargs: Any) -> None:
            if not calls:
                calls.append([])
                raise RuntimeError("first attempt fails")
            mon = harness[0].monitor
            wait_for(lambda: mon.abandoned_compiles == 1, timeout=10.0)
            calls.append([s.name for s in mon.inflight()])
            below(**kwargs)

        knobs.listener = listener
        try:
            with pytest.raises(RuntimeError, match="first attempt"):
                abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
            abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))  # the same key, on the same thread
        finally:
            knobs.listener = below
        (ev,) = h.compiles()
        (gone,) = abandoned_events(h)
        assert not h.monitor.inflight() and h.triton.pending() == 0
    assert calls == [[], ["abd_tuned"]]  # the retry, alone in flight, while the failure was dropped
    assert gone.key == ev.key and (ev.duration_s or 0) >= 1.0


@pytest.mark.parametrize(
    "compile",
    [None, "not a dict", {}, {"signature": ["x_ptr"]}, {"signature": None, "constants": {}}],
    ids=["none", "str", "empty", "list-signature", "none-signature"],
)
def test_a_direct_hook_call_without_a_signature_dict_is_never_dropped(tmp_path: Path, compile: Any) -> None:
    """``jit_cache_hook`` called directly (a test, a tool), with a ``compile`` keyword that holds
    no signature dict: no ``_do_compile`` frame can be told to be its, so the sweep keeps it (as
    an unwatched compile) past ``ABANDON_AFTER_S``, and nothing raises anywhere; its end comes
    through the post-compile hook as usual. ``error`` mode in phase ``startup``, where jitwatch
    occupies the post-compile slot."""
    with monitored("error", journal_dir=tmp_path / "j") as h:
        rt = triton.knobs.runtime
        assert rt.jit_cache_hook(key="k", fn=None, compile=compile) is None
        time.sleep(monitor_mod.ABANDON_AFTER_S + 0.1)
        assert h.monitor.sweep_abandoned(force=True) == 0
        assert [s.name for s in h.monitor.inflight()] == ["<unknown>"]
        assert rt.jit_post_compile_hook(key="k", fn=None, compile=compile) is None
        assert len(h.compiles()) == 1 and not h.monitor.inflight() and h.triton.pending() == 0
        assert h.monitor.abandoned_compiles == 0 and h.monitor.hook_errors == 0


def test_a_direct_hook_call_with_a_signature_dict_is_judged_by_it(tmp_path: Path) -> None:
    """``jit_cache_hook`` called directly with a ``compile`` keyword shaped as Triton's (a
    signature dict), and no end within ``ABANDON_AFTER_S``: no ``_do_compile`` frame holds that
    dict, which is what a compile that raised looks like, so it is dropped as abandoned (the
    writer thread cannot tell the two apart; the compiling thread no longer looks). A
    post-compile call after that is recorded as a compile whose start was not seen."""
    with monitored("error", journal_dir=tmp_path / "j") as h:
        rt = triton.knobs.runtime
        info = {"signature": {"x_ptr": "*fp32"}, "constants": {}}
        rt.jit_cache_hook(key="k", fn=None, compile=info)
        time.sleep(monitor_mod.ABANDON_AFTER_S + 0.1)
        assert h.monitor.sweep_abandoned(force=True) == 1
        assert not h.monitor.inflight() and h.triton.pending() == 0 and not h.triton._last
        rt.jit_post_compile_hook(key="k", fn=None, compile=info)
        (ev,) = h.compiles()
        (gone,) = abandoned_events(h)
        assert h.monitor.hook_errors == 0
    assert gone.key == ev.key == "k" and "raised inside Triton" in gone.attrs["cause"]


def test_the_watcher_on_the_stack_of_a_running_compile(tmp_path: Path, triton_cache: Path, compile_only: Any) -> None:
    """Triton's watcher, asked (as the writer thread asks it) with the stack of a compile that is
    running: the compile runs; a compile it no longer holds (its end under way: the listener or
    the post-compile hook took it out and ends it next, inside ``_do_compile``) runs while any
    ``_do_compile`` frame is on the stack, and not once none is."""
    asked: list[tuple[Any, ...]] = []

    def stack() -> list[Any]:
        frames, frame = [], sys._getframe()
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        return frames

    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:

        def during() -> None:
            (token,) = h.monitor._inflight.values()
            watcher = token[-1]
            asked.append((watcher, watcher.running(token, stack()), watcher.running(object(), stack())))

        with slow_listener(0.0, during):
            abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
        ((watcher, mine, unknown),) = asked
        assert (mine, unknown) == (True, True)
        assert watcher.running(object(), stack()) is False  # no _do_compile frame here
        assert watcher.running(object(), []) is False
        assert len(h.compiles()) == 1


def test_do_compile_wrapped_without_wrapped_before_install(
    tmp_path: Path, triton_cache: Path, compile_only: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``JITFunction._do_compile`` wrapped before jitwatch installs by a callable without
    ``__wrapped__`` (a profiler's ``def timed(self, *args, **kwargs)``): jitwatch's code object is
    the wrapper's, whose frame holds no ``signature``. A compile held open 2.5 s is still kept
    (it was dropped as abandoned at 1 s, then recorded as a compile of a few ms), and one that
    raises is still dropped."""
    from triton.runtime.jit import JITFunction

    real = JITFunction._do_compile

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "_do_compile", timed)
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        assert h.triton.watching is None
        with slow_listener(2.5):
            abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
        (ev,) = h.compiles()
        assert abandoned_events(h) == [] and h.monitor.abandoned_compiles == 0
        assert (ev.duration_s or 0) >= 2.5
        with pytest.raises(CompilationError):
            abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
        (gone,) = wait_for(lambda: abandoned_events(h))
        assert gone.kernel == "abd_bad" and not h.monitor.inflight()


def test_a_hook_on_top_calling_jitwatchs_on_a_thread_of_its_own(
    tmp_path: Path, triton_cache: Path, compile_only: Any
) -> None:
    """A ``jit_cache_hook`` installed after jitwatch's that calls it on a thread of its own and
    joins it: the compile runs on the thread that called the hook on top, not on the one that
    began it (gone by then). A compile held open 2.5 s is kept (it was dropped at 1 s, then
    recorded at its last 0.4 s); one that raises is still dropped."""
    runtime = triton.knobs.runtime
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        ours = runtime.jit_cache_hook

        def on_top(**kwargs: Any) -> None:
            t = threading.Thread(target=lambda: ours(**kwargs))
            t.start()
            t.join()

        runtime.jit_cache_hook = on_top
        try:
            with slow_listener(2.5):
                abd_tuned.warmup(X, 100, BLOCK=32, grid=(1,))
            (ev,) = h.compiles()
            assert abandoned_events(h) == [] and h.monitor.abandoned_compiles == 0
            assert (ev.duration_s or 0) >= 2.5
            with pytest.raises(CompilationError):
                abd_bad.warmup(X, 16, BLOCK=16, grid=(1,))
            (gone,) = wait_for(lambda: abandoned_events(h))
        finally:
            runtime.jit_cache_hook = ours
        assert gone.kernel == "abd_bad" and not h.monitor.inflight()
