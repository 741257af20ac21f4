"""``Monitor.begin_watched`` / ``Monitor.sweep_abandoned``: a compile that left its thread
without an end is dropped from the in-flight compiles. The compiling thread hands over its thread
id only; the sweep walks that thread's stack and the backend's ``FrameWatcher`` says whether the
compile still runs in one of its frames. Real threads and frames, no compiler."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from jitwatch.config import Settings
from jitwatch.core import monitor as monitor_mod
from jitwatch.core.monitor import Monitor, NullSink


class Watcher:
    """A backend's FrameWatcher: the compile runs while a frame on its thread's stack runs
    :func:`_do_compile` with the compile's own ``marker`` local (as Triton's looks for the
    ``signature`` dict); ``answer`` other than ``"look"`` is returned as it is."""

    def __init__(self, fail: bool = False, answer: Any = "look") -> None:
        self.fail = fail
        self.answer = answer
        self.markers: dict[int, object] = {}
        self.dropped: list[Any] = []
        self.stacks: list[list[FrameType]] = []

    def running(self, token: Any, stack: Sequence[FrameType]) -> bool | None:
        self.stacks.append(list(stack))
        if self.fail:
            raise RuntimeError("watcher fault")
        if self.answer != "look":
            return self.answer  # type: ignore[no-any-return]
        marker = self.markers.get(id(token))
        return any(f.f_code is _do_compile.__code__ and f.f_locals.get("marker") is marker for f in stack)

    def abandoned(self, token: Any) -> tuple[str, str | None]:
        self.dropped.append(token)
        return "it raised", "key-1"


def _do_compile(mon: Monitor, watcher: Watcher, name: str, then: Callable[[Any], None]) -> None:
    """A compiler's frame: begins a watched compile, then ``then(token)`` runs inside it."""
    marker = object()
    token = mon.begin_watched("b", name, threading.get_ident(), watcher)
    watcher.markers[id(token)] = marker
    then(token)


def _raise(token: Any) -> None:
    raise ValueError("compile failed")


def compile_that_raises(mon: Monitor, watcher: Watcher, name: str = "k") -> None:
    try:
        _do_compile(mon, watcher, name, _raise)
    except ValueError:
        pass


@pytest.fixture
def mon(tmp_path: Path) -> Iterator[Monitor]:
    m = Monitor(Settings(journal_dir=tmp_path), sink=NullSink(), backends=[], tracer_provider=False).install()
    yield m
    m.uninstall()


def test_raised_compile_dropped_only_after_abandon_after_s(mon: Monitor) -> None:
    w = Watcher()
    compile_that_raises(mon, w)
    assert mon.sweep_abandoned(force=True) == 0  # younger than ABANDON_AFTER_S: not looked at
    assert [s.name for s in mon.inflight()] == ["k"] and w.stacks == []
    time.sleep(monitor_mod.ABANDON_AFTER_S + 0.05)
    assert mon.sweep_abandoned(force=True) == 1
    assert mon.inflight() == [] and mon.abandoned_compiles == 1 and len(w.dropped) == 1
    assert mon.sweep_abandoned(force=True) == 0


def test_sweeps_are_rate_limited(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    mon.sweep_abandoned()  # a look: the next one is SWEEP_INTERVAL_S away
    compile_that_raises(mon, Watcher())
    assert mon.sweep_abandoned() == 0
    time.sleep(monitor_mod.SWEEP_INTERVAL_S + 0.05)
    assert mon.sweep_abandoned() == 1


def test_running_compile_on_another_thread_is_kept(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    started, release = threading.Event(), threading.Event()
    w = Watcher()

    def hold(token: Any) -> None:
        started.set()
        release.wait(30)
        mon.cancel(token)

    t = threading.Thread(target=_do_compile, args=(mon, w, "slow", hold))
    t.start()
    started.wait(30)
    try:
        time.sleep(0.2)
        assert mon.sweep_abandoned(force=True) == 0
        assert [s.name for s in mon.inflight()] == ["slow"] and w.dropped == []
        (stack,) = w.stacks  # that thread's stack, innermost first, down to its bootstrap
        assert any(f.f_code is _do_compile.__code__ for f in stack)
        assert stack[-1].f_back is None and all(a.f_back is b for a, b in itertools.pairwise(stack))
    finally:
        release.set()
        t.join(30)


def test_the_compiling_thread_s_id_is_the_one_given(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink takes the thread id the backend hands it (it reads none itself): the stack walked
    is that thread's, here one that has ended, so the watcher is asked with an empty stack."""
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join(30)
    assert ended.ident is not None and ended.ident not in sys._current_frames()
    w = Watcher()
    token = mon.begin_watched("b", "k", ended.ident, w)
    assert mon.sweep_abandoned(force=True) == 1
    assert w.stacks == [[]] and w.dropped == [token]


def test_two_compiles_on_one_thread_are_judged_each_by_its_own_frames(
    mon: Monitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile that raised, then the next one on the same thread, still running (an autotune
    loop): the stack is walked once and the watcher tells the two apart by what their frames
    hold, not by frame ids (the second ``_do_compile`` frame may well reuse the first's)."""
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    w = Watcher()
    compile_that_raises(mon, w, "first")
    seen: list[int] = []
    _do_compile(mon, w, "second", lambda token: seen.append(mon.sweep_abandoned(force=True)))
    assert seen == [1] and [t[1] for t in w.dropped] == ["first"]
    assert len(w.stacks) == 2 and w.stacks[0] is not w.stacks[1] and w.stacks[0] == w.stacks[1]


def test_watcher_that_cannot_tell_keeps_the_compile(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    """``None``: the backend cannot tell this compile's frame (Triton: a hook call that carried no
    signature dict). Kept, and asked again at the next sweep."""
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    w = Watcher(answer=None)
    compile_that_raises(mon, w)
    assert mon.sweep_abandoned(force=True) == 0 and mon.sweep_abandoned(force=True) == 0
    assert len(mon.inflight()) == 1 and len(w.stacks) == 2 and mon.hook_errors == 0


def test_watcher_fault_keeps_the_compile_and_counts_a_hook_error(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    compile_that_raises(mon, Watcher(fail=True))
    assert mon.sweep_abandoned(force=True) == 0
    assert len(mon.inflight()) == 1 and mon.hook_errors == 1


def test_unwatched_compiles_are_never_swept(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    mon.begin("b", "async")  # e.g. Triton's asynchronous compile mode
    assert mon.sweep_abandoned(force=True) == 0 and len(mon.inflight()) == 1
