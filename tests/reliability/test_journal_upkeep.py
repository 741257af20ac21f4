"""Journal upkeep under a running worker (issue 14): a journal deleted or replaced under the writer,
retention on time in every worker (also short-lived ones), the ``workers`` table bounded, and the
WAL shrinking while a writer lives. Real writer threads and processes, real SQLite files."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import MAX_WORKER_ROWS, WAL_SIZE_LIMIT, Journal
from jitwatch.store.writer import JournalWriter
from jitwatch.testing import read_events
from tests.reliability.conftest import run_writer

DAY = 86400.0


def _compile(i: int, ts: float | None = None, **attrs: object) -> Event:
    ev = Event.now(EventKind.COMPILE, rank=0, phase=Phase.SERVING, kernel=f"k{i % 5}", key=f"key-{i}", duration_s=0.01)
    if ts is not None:
        ev = ev.model_copy(update={"ts": ts})
    return ev.model_copy(update={"attrs": {"uid": i, **attrs}})


def _remove_journal(d: Path) -> None:
    for sfx in ("", "-wal", "-shm"):
        p = Path(f"{d / 'journal.db'}{sfx}")
        if p.exists():
            p.unlink()


def test_journal_deleted_under_a_running_worker_is_reopened(tmp_path: Path) -> None:
    """Before: after ``rm journal.db*`` the writer kept writing to the deleted file and reported
    the events as written; nothing reached a reader. Now the writer notices (inode check per batch),
    reopens a fresh journal, writes its worker registration into it again, and every event after
    the deletion is readable."""
    d = tmp_path / "j"
    w = JournalWriter(d, heartbeat_s=0)
    w.submit(Event.now(EventKind.WORKER_START, rank=0, attrs={"mode": "warn"}))
    for i in range(10):
        w.submit(_compile(i))
    assert w.flush(10)
    _remove_journal(d)
    for i in range(10, 20):
        w.submit(_compile(i))
    assert w.flush(10)
    uids = sorted(e.attrs["uid"] for e in read_events(d, EventKind.COMPILE))
    assert uids == list(range(10, 20)), uids
    assert len(read_events(d, EventKind.WORKER_START)) == 1  # registered again
    with Journal(d, readonly=True) as j:
        assert list(j.latest_workers()) == [0]
    assert w.reopened_total == 1 and w.written_total == 21 and w.dropped_total == 0
    w.close()


def test_journal_replaced_under_a_running_worker_is_reopened(tmp_path: Path) -> None:
    """``mv journal.db aside`` and a new journal in its place (another writer started one): the
    running writer follows the file at the path, not the inode it opened."""
    d = tmp_path / "j"
    w = JournalWriter(d, heartbeat_s=0)
    w.submit(Event.now(EventKind.WORKER_START, rank=0, attrs={"mode": "warn"}))
    w.submit(_compile(0))
    assert w.flush(10)
    for sfx in ("", "-wal", "-shm"):
        p = Path(f"{d / 'journal.db'}{sfx}")
        if p.exists():
            p.rename(tmp_path / f"aside{sfx}")
    Journal(d).close()  # someone else's fresh journal
    w.submit(_compile(1))
    assert w.flush(10)
    assert [e.attrs["uid"] for e in read_events(d, EventKind.COMPILE)] == [1]
    assert w.reopened_total == 1
    w.close()


def test_short_lived_worker_enforces_age_retention(tmp_path: Path) -> None:
    """Before: events were pruned only after 1,000 writes on one connection, so 30-day-old events
    survived a 7-day limit forever with short-lived workers. Now every writer runs a retention pass
    as soon as its journal is open (and every minute after)."""
    d = tmp_path / "j"
    now = time.time()
    with Journal(d) as j:
        j.write(
            [_compile(i, ts=now - 30 * DAY) for i in range(50)] + [_compile(i, ts=now - DAY) for i in range(50, 60)]
        )
    proc = run_writer(d, "0", "5")  # a short-lived worker process: 5 events, then exits
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    with Journal(d, readonly=True) as j:
        kept = [
            e
            for e in j.events(kind=EventKind.COMPILE, limit=1000)
            if "uid" in e.attrs and isinstance(e.attrs["uid"], int)
        ]
        assert sorted(e.attrs["uid"] for e in kept) == list(range(50, 60))
        assert j.counters()[(-1, "retired_events")] == 50
        assert sum(s.count for s in j.stats()) == 65  # aggregates untouched


def test_workers_table_is_bounded(tmp_path: Path) -> None:
    """100,000 restarts made /readyz read 100,000 worker rows. Rows older than the retention and
    all but the newest MAX_WORKER_ROWS go; each rank's newest-started worker always stays."""
    d = tmp_path / "j"
    now = time.time()
    with Journal(d) as j:
        j.write(
            [Event.now(EventKind.WORKER_START, rank=7, attrs={}).model_copy(update={"ts": now - 60 * DAY, "pid": 1})]
        )
    conn = sqlite3.connect(d / "journal.db")
    conn.executemany(
        "INSERT INTO workers(host, pid, rank, state, started_ts, last_ts, attrs)"
        " VALUES ('h', ?, 0, 'serving', ?, ?, '{}')",
        [(pid, now - 3600 + pid * 0.01, now - 3600 + pid * 0.01) for pid in range(10, 5010)]
        + [(pid, now - 30 * DAY, now - 30 * DAY) for pid in range(6000, 7000)],
    )
    conn.commit()
    conn.close()
    w = JournalWriter(d, heartbeat_s=0)
    w.submit(_compile(0))
    assert w.flush(10)
    w.close()
    with Journal(d, readonly=True) as j:
        rows = j.workers()
        pids = {r.pid for r in rows if r.rank == 0}
        assert len(rows) <= MAX_WORKER_ROWS + 1
        assert 5009 in pids and not pids & set(range(6000, 7000))  # newest kept, 30-day-old gone
        assert j.latest_workers()[7].pid == 1  # the only (old) worker of rank 7 is kept


def test_wal_shrinks_while_the_writer_lives(tmp_path: Path) -> None:
    """Before: the WAL kept its largest size while a writer lived (docs said it shrank). Now the
    writer's retention pass checkpoints and ``journal_size_limit`` truncates it on restart."""
    d = tmp_path / "j"
    w = JournalWriter(d, heartbeat_s=0, maintenance_s=0.2, queue_size=100_000)
    w.submit(_compile(0))
    assert w.flush(10)
    # A reader holding one snapshot (a busy sidecar) keeps checkpoints from restarting the WAL.
    reader = sqlite3.connect(f"file:{d / 'journal.db'}?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM events").fetchone()
    pad = "x" * 2000
    for i in range(1, 8000):
        w.submit(_compile(i, pad=pad))
    assert w.flush(120)
    wal = Path(f"{d / 'journal.db'}-wal")
    peak = wal.stat().st_size
    assert peak > 2 * WAL_SIZE_LIMIT, peak
    reader.execute("COMMIT")
    reader.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and wal.stat().st_size > WAL_SIZE_LIMIT:
        w.submit(_compile(10_000))  # a write restarts the checkpointed WAL
        assert w.flush(10)
        time.sleep(0.3)
    size = wal.stat().st_size
    w.close()
    assert size <= WAL_SIZE_LIMIT, (peak, size)
    assert os.path.getsize(d / "journal.db") > 0
