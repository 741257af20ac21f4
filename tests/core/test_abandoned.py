"""``Monitor.begin_watched`` / ``Monitor.sweep_abandoned``: a compile whose frame left its thread's
stack without an end is dropped from the in-flight compiles, knowing only thread and frame ids
(the backend's ``FrameWatcher`` says whether a frame is still the compile's). Real threads and
frames, no compiler."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from jitwatch.config import Settings
from jitwatch.core import monitor as monitor_mod
from jitwatch.core.monitor import Monitor, NullSink


class Watcher:
    """A backend's FrameWatcher: the watched frame must run ``code``."""

    def __init__(self, code: Any = None, fail: bool = False) -> None:
        self.code = code
        self.fail = fail
        self.dropped: list[Any] = []

    def alive(self, frame: FrameType) -> bool:
        if self.fail:
            raise RuntimeError("watcher fault")
        return self.code is None or frame.f_code is self.code

    def abandoned(self, token: Any) -> tuple[str, str | None]:
        self.dropped.append(token)
        return "it raised", "key-1"


@pytest.fixture
def mon(tmp_path: Path) -> Iterator[Monitor]:
    m = Monitor(Settings(journal_dir=tmp_path), sink=NullSink(), backends=[], tracer_provider=False).install()
    yield m
    m.uninstall()


def compile_that_raises(mon: Monitor, watcher: Watcher, name: str = "k") -> None:
    def _do_compile() -> None:
        frame = sys._getframe()
        mon.begin_watched("b", name, id(frame), watcher)
        raise ValueError("compile failed")

    try:
        _do_compile()
    except ValueError:
        pass


def test_raised_compile_dropped_only_after_abandon_after_s(mon: Monitor) -> None:
    w = Watcher()
    compile_that_raises(mon, w)
    assert mon.sweep_abandoned(force=True) == 0  # younger than ABANDON_AFTER_S: not looked at
    assert [s.name for s in mon.inflight()] == ["k"]
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

    def _do_compile() -> None:
        token = mon.begin_watched("b", "slow", id(sys._getframe()), w)
        started.set()
        release.wait(30)
        mon.cancel(token)

    t = threading.Thread(target=_do_compile)
    t.start()
    started.wait(30)
    try:
        time.sleep(0.2)
        assert mon.sweep_abandoned(force=True) == 0
        assert [s.name for s in mon.inflight()] == ["slow"] and w.dropped == []
    finally:
        release.set()
        t.join(30)


def test_frame_that_runs_other_code_now_is_not_the_compile(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watched id found on the stack, but the watcher says the frame is not the compile's."""
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    here = sys._getframe()
    mon.begin_watched("b", "k", id(here), Watcher(code=compile_that_raises.__code__))
    assert mon.sweep_abandoned(force=True) == 1


def test_a_later_compile_with_the_same_frame_id_proves_the_first_gone(
    mon: Monitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    here = sys._getframe()
    w = Watcher()
    first = mon.begin_watched("b", "first", id(here), w)
    mon.begin_watched("b", "second", id(here), w)  # same thread, same frame id, later
    assert mon.sweep_abandoned(force=True) == 1
    assert [s.name for s in mon.inflight()] == ["second"] and w.dropped == [first]


def test_watcher_fault_keeps_the_compile_and_counts_a_hook_error(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    mon.begin_watched("b", "k", id(sys._getframe()), Watcher(fail=True))
    assert mon.sweep_abandoned(force=True) == 0
    assert len(mon.inflight()) == 1 and mon.hook_errors == 1


def test_unwatched_compiles_are_never_swept(mon: Monitor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_mod, "ABANDON_AFTER_S", 0.0)
    mon.begin("b", "async")  # e.g. Triton's asynchronous compile mode
    assert mon.sweep_abandoned(force=True) == 0 and len(mon.inflight()) == 1
