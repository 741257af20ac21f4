"""The journal writer's timed writes wait for a pause in the events (``SETTLE_S``, at most
``MAX_LAG_S``): a burst of compiles is written after it, not interrupted; a lone event is
written at the next wake-up; ``flush`` never waits for a pause."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jitwatch.core.events import Event, EventKind
from jitwatch.store.journal import JOURNAL_FILE
from jitwatch.store.writer import JournalWriter


def _event(i: int) -> Event:
    return Event.now(EventKind.COMPILE, kernel="k", key=f"key-{i}", attrs={"submit_ts": time.time()})


def _count(directory: Path) -> int:
    con = sqlite3.connect(f"file:{directory / JOURNAL_FILE}?mode=ro", uri=True)
    try:
        return int(con.execute("SELECT COUNT(*) FROM events WHERE kind='compile'").fetchone()[0])
    finally:
        con.close()


def _batches(writer: JournalWriter) -> list[int]:
    """Sizes of the batches the writer thread writes from now on (its ``_write`` wrapped)."""
    sizes: list[int] = []
    inner = writer._write

    def counting(batch: Any) -> Any:
        if batch:
            sizes.append(len(batch))
        return inner(batch)

    writer._write = counting  # type: ignore[method-assign]
    return sizes


def _stream(writer: JournalWriter, n: int, pause_s: float) -> None:
    for i in range(n):
        writer.submit(_event(i))
        time.sleep(pause_s)


def test_a_burst_is_written_after_it_not_between_its_compiles(tmp_path: Path) -> None:
    """Events every 5 ms for ~0.3 s, no flush: with the pause rule the writer postpones its timed
    wake-ups (``settled_waits``) and writes the burst in one or two batches once it stops; without
    it (``settle_s=0``) it writes at every 0.1 s wake-up, in the middle of the burst."""
    settled = JournalWriter(tmp_path / "settled", interval_s=0.1, max_lag_s=5.0)
    eager = JournalWriter(tmp_path / "eager", interval_s=0.1, settle_s=0)
    try:
        got = {"settled": _batches(settled), "eager": _batches(eager)}
        threads = [threading.Thread(target=_stream, args=(w, 60, 0.005)) for w in (settled, eager)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (sum(got["settled"]) < 60 or sum(got["eager"]) < 60):
            time.sleep(0.02)  # no flush: the timed wake-ups write everything
        assert sum(got["settled"]) == 60 and sum(got["eager"]) == 60, got
        assert settled.settled_waits > 0
        assert eager.settled_waits == 0
        assert len(got["settled"]) < len(got["eager"]), got
        assert len(got["settled"]) <= 2, got  # written after the burst (a wake-up may fall just before it)
    finally:
        settled.close()
        eager.close()
    assert _count(tmp_path / "settled") == 60


def test_a_lone_event_is_written_at_the_next_wake_up(tmp_path: Path) -> None:
    """One event and then nothing: written by the next timed wake-up plus one pause, no flush."""
    writer = JournalWriter(tmp_path / "j", interval_s=0.1)
    try:
        writer.submit(_event(0))
        deadline = time.monotonic() + 10
        while writer.written_total < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writer.written_total == 1
        assert writer.settled_waits == 0
    finally:
        writer.close()
    assert _count(tmp_path / "j") == 1


def test_flush_does_not_wait_for_a_pause(tmp_path: Path) -> None:
    """``flush`` in the middle of a stream returns with everything submitted before it written,
    however long the writer would otherwise postpone (``max_lag_s`` 60 s here)."""
    writer = JournalWriter(tmp_path / "j", interval_s=0.05, max_lag_s=60.0)
    stop = threading.Event()

    def stream() -> None:
        i = 0
        while not stop.is_set():
            writer.submit(_event(i))
            i += 1
            time.sleep(0.002)

    t = threading.Thread(target=stream)
    t.start()
    try:
        time.sleep(0.3)  # the writer is postponing: events keep arriving
        submitted_before = writer._taken + len(writer._buffer)
        assert writer.flush(10)
        assert writer.written_total >= submitted_before
    finally:
        stop.set()
        t.join()
        writer.close()


def test_events_arriving_without_pause_wait_at_most_max_lag(tmp_path: Path) -> None:
    """A stream that never pauses is still written every ``max_lag_s`` (here 0.3 s), no flush."""
    writer = JournalWriter(tmp_path / "j", interval_s=0.1, max_lag_s=0.3)
    sizes = _batches(writer)
    stop = threading.Event()

    def stream() -> None:
        i = 0
        while not stop.is_set():
            writer.submit(_event(i))
            i += 1
            time.sleep(0.003)

    t = threading.Thread(target=stream)
    t.start()
    try:
        time.sleep(1.6)
        assert len(sizes) >= 2, sizes  # written during the stream, not only after it
        assert writer.settled_waits > 0
    finally:
        stop.set()
        t.join()
        writer.close()


class _LateWake(threading.Event):
    """The writer's wake-up event, with ``on_timeout`` run right after the writer thread's first
    timed wait in ``_run`` times out with events buffered — before the writer clears the event: a
    thread switch there on a busy host, made certain."""

    def __init__(self, writer: JournalWriter, on_timeout: Any) -> None:
        super().__init__()
        self.writer, self.on_timeout, self.armed = writer, on_timeout, True

    def wait(self, timeout: float | None = None) -> bool:
        got = super().wait(timeout)
        caller = sys._getframe(1).f_code.co_name
        if not got and self.armed and caller == "_run" and self.writer._buffer:
            self.armed = False
            self.on_timeout()
        return got


def test_flush_between_a_timed_wake_up_and_its_clear_does_not_wait_for_a_pause(tmp_path: Path) -> None:
    """A ``flush`` whose wake-up lands after the writer's timed wait returned and before the writer
    clears the event (one thread switch) is not lost to the pause rule: the writer writes at once
    instead of settling while events keep arriving (``max_lag_s`` 30 s here)."""
    writer = JournalWriter(tmp_path / "j", interval_s=0.05, max_lag_s=30.0)
    stop = threading.Event()
    result: dict[str, Any] = {}

    def flush_now() -> None:
        def flusher() -> None:
            t0 = time.monotonic()
            result["ok"] = writer.flush(3.0)
            result["s"] = time.monotonic() - t0
            result["settled"] = writer.settled_waits

        t = threading.Thread(target=flusher)
        t.start()
        result["thread"] = t
        deadline = time.monotonic() + 5
        while not wake.is_set() and time.monotonic() < deadline:  # flush() has set the event
            time.sleep(0.001)

    wake = _LateWake(writer, flush_now)
    old, writer._wake = writer._wake, wake
    old.set()  # the writer thread waits on the old event: from its next wait on, the new one

    def stream() -> None:
        i = 0
        while not stop.is_set():
            writer.submit(_event(i))
            i += 1
            time.sleep(0.003)

    t = threading.Thread(target=stream)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while "thread" not in result and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "thread" in result, "the writer never timed out with events buffered"
        result["thread"].join(10)
        assert result["ok"], f"flush() timed out after {result['s']:.2f} s: the writer was settling"
        assert result["settled"] == 0, f"flush() waited {result['s']:.2f} s for a pause in the events"
    finally:
        stop.set()
        t.join()
        writer.close()


def test_a_plain_tuple_is_built_on_the_writer_thread_and_one_that_raises_is_dropped_alone(tmp_path: Path) -> None:
    """``JournalWriter.plain_events``: a submitted plain tuple is built as ``item[0](item)`` on the
    writer's thread; one whose builder raises is counted as dropped, and the rest of its batch is
    written."""
    from jitwatch.store.journal import Journal

    built_on: list[str] = []

    def build(item: tuple[Any, ...]) -> Event:
        built_on.append(threading.current_thread().name)
        return Event.now(EventKind.COMPILE, rank=0, pid=1, host="h", backend="triton", kernel=item[1], key="k")

    def broken(item: tuple[Any, ...]) -> Event:
        raise ValueError("no event")

    w = JournalWriter(tmp_path / "j")
    try:
        assert w.plain_events is True
        assert w.submit((build, "a")) and w.submit((broken, "b")) and w.submit((build, "c"))
        assert w.flush(10)
        assert w.bad_events == 1 and w.dropped_total == 1
    finally:
        w.close()
    assert built_on and threading.current_thread().name not in built_on
    with Journal(tmp_path / "j", readonly=True) as j:
        kernels = [e.kernel for e in j.events(kind=EventKind.COMPILE)]
    assert sorted(kernels) == ["a", "c"]
