"""The monitor hands a compile to the journal writer through its :class:`EventLane` (a buffer
appended to without a call into the writer): the same events, the same drop counting when the
buffer is full or the writer closed, the same wake-up at ``HIGH_WATER``, nothing kept in a forked
child. A real :class:`JournalWriter` and SQLite journal, no compiler."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from jitwatch import Capture
from jitwatch.config import Settings
from jitwatch.core.events import EventLane
from jitwatch.core.identity import WorkerIdentity
from jitwatch.core.monitor import Monitor
from jitwatch.store.journal import JOURNAL_FILE
from jitwatch.store.writer import HIGH_WATER, JournalWriter


def _build(arg: Any) -> Capture:
    return Capture("toy", "k", arg)


def _monitor(writer: JournalWriter) -> Monitor:
    return Monitor(
        Settings(journal_dir=writer.directory),
        sink=writer,
        mode="warn",
        identity=WorkerIdentity(rank=0),
        backends=[],
        tracer_provider=False,
    ).install()


def _compile(mon: Monitor, key: str) -> None:
    mon.end(mon.begin("toy", "k"), key, _build, key)


def _compiles(directory: Path) -> int:
    con = sqlite3.connect(f"file:{directory / JOURNAL_FILE}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT COUNT(*) FROM events WHERE kind='compile'").fetchone()[0])
    finally:
        con.close()


def test_compiles_go_through_the_lane_not_submit(tmp_path: Path) -> None:
    """While installed the monitor appends to the writer's lane (``submit`` is never called for a
    compile) and the events are journaled as through ``submit``; uninstalled, it uses neither."""
    writer = JournalWriter(tmp_path, heartbeat_s=0)
    calls: list[Any] = []
    inner = writer.submit

    def counting(item: Any) -> bool:
        calls.append(item)
        return inner(item)

    writer.submit = counting  # type: ignore[method-assign]
    mon = _monitor(writer)
    assert isinstance(mon._lane, EventLane) and mon._lane is writer.lane
    submitted = len(calls)  # worker_start
    for i in range(5):
        _compile(mon, f"key-{i}")
    assert len(calls) == submitted
    assert writer.flush(10)
    assert _compiles(tmp_path) == 5
    mon.uninstall()
    assert mon._lane is None
    assert writer.lane.room == 0


def test_a_full_lane_counts_the_drop_and_a_closed_writer_too(tmp_path: Path) -> None:
    """``queue_size`` events buffered: the next compile is dropped and counted in the writer's
    ``dropped_total`` (as ``submit`` counts it); after the writer closed, every compile is."""
    writer = JournalWriter(tmp_path, heartbeat_s=0, queue_size=3, interval_s=60, settle_s=0)
    mon = _monitor(writer)
    writer.flush(10)  # worker_start out of the buffer
    for i in range(5):
        _compile(mon, f"key-{i}")
    assert writer.dropped_total == 2
    assert writer.flush(10)
    writer.close()
    _compile(mon, "after-close")
    assert writer.dropped_total == 3
    assert len(writer.lane.buf) == 0
    assert _compiles(tmp_path) == 3


def test_the_lane_wakes_the_writer_at_high_water(tmp_path: Path) -> None:
    """With a 60 s timer, the writer writes only because the lane woke it at ``HIGH_WATER``."""
    writer = JournalWriter(tmp_path, heartbeat_s=0, interval_s=60, settle_s=0)
    mon = _monitor(writer)
    try:
        for i in range(HIGH_WATER):
            _compile(mon, f"key-{i}")
        deadline = time.monotonic() + 20
        while writer.written_total < HIGH_WATER and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer.written_total >= HIGH_WATER
    finally:
        mon.uninstall()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_keeps_nothing_and_counts_its_compiles_as_dropped(tmp_path: Path) -> None:
    """In a forked child the writer's lane has no room and a new buffer: a compile there (the
    monitor still installed, as in a child that never detached) is counted, never journaled, and
    the parent's buffered events are not the child's."""
    writer = JournalWriter(tmp_path, heartbeat_s=0, interval_s=60, settle_s=0)
    mon = _monitor(writer)
    _compile(mon, "parent")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            mon._state = "installed"  # as if the child had not detached: the lane must still refuse
            mon._relane()
            _compile(mon, "child")
            ok = writer.lane.room == 0 and len(writer.lane.buf) == 0 and writer.dropped_total >= 1
            code = 0 if ok else 3
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    got = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert got == b"\x00"
    assert writer.flush(10)
    mon.uninstall()
    assert _compiles(tmp_path) == 1
