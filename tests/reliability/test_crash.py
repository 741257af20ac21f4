"""Crashes: ``kill -9`` of a writer mid-burst, a killed sidecar, torn and corrupted journal files.

* A writer killed with SIGKILL loses at most its uncommitted transaction: the journal opens
  cleanly (``quick_check`` ok, nothing moved aside) and every event the writer reported as
  committed (``flush`` returned) is there exactly once; what is there is a prefix of what it
  submitted (the queue is FIFO and each batch is one transaction).
* A torn WAL tail (the last frames cut short, as after a crash mid-write) is ignored by SQLite's
  frame checksums: earlier transactions survive.
* A damaged database file (garbage header, truncated file, overwritten b-tree pages) is
  detected, moved aside as ``journal.db.corrupt-*`` with an error logged, and a fresh journal
  started, without an exception reaching the host.
"""

from __future__ import annotations

import json
import logging
import random
import re
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from jitwatch.core.events import Event, EventKind
from jitwatch.store.journal import JOURNAL_FILE, Journal, open_or_recover
from jitwatch.store.writer import MAX_LAG_S, JournalWriter

from .conftest import run_writer

PAGE = 4096


def uids(directory: Path, worker: int) -> list[int]:
    con = sqlite3.connect(f"file:{directory / JOURNAL_FILE}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT json_extract(attrs, '$.uid') FROM events WHERE kind='compile' AND rank=?", (worker,)
        ).fetchall()
    finally:
        con.close()
    return [int(r[0].split("-")[1]) for r in rows]


def kill_mid_burst(directory: Path, worker: int, rng: random.Random) -> tuple[int, int]:
    """Start a writer, SIGKILL it after a random number of commits; returns (committed, found)."""
    proc = run_writer(directory, str(worker), "200000", "500")
    target = rng.randint(1, 6)
    committed = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("committed "):
            committed = int(line.split()[1])
            if committed >= target * 500:
                break
    time.sleep(rng.uniform(0, 0.05))  # land somewhere inside the next batches
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    # The kill may land after more "committed" lines were printed but not yet read.
    rest = proc.stdout.read()
    for m in re.finditer(r"committed (\d+)", rest):
        committed = max(committed, int(m.group(1)))
    found = uids(directory, worker)
    assert len(found) == len(set(found)), "duplicated events after kill -9"
    assert sorted(found) == list(range(len(found))), "journal holds a non-prefix of the burst"
    assert len(found) >= committed, f"committed {committed} but only {len(found)} in the journal"
    return committed, len(found)


def assert_clean(directory: Path) -> None:
    j = open_or_recover(directory)
    try:
        assert j.integrity_ok()
    finally:
        j.close()
    assert not list(directory.glob("*.corrupt-*")), "a healthy journal was moved aside"


def test_kill9_writer_mid_burst(tmp_path: Path) -> None:
    d = tmp_path / "j"
    committed, found = kill_mid_burst(d, 0, random.Random(7))
    assert_clean(d)
    print(json.dumps({"committed": committed, "found": found}))


@pytest.mark.slow
def test_kill9_writer_repeated(tmp_path: Path) -> None:
    """20 writers killed one after another into the same journal, then a clean writer."""
    d = tmp_path / "j"
    rng = random.Random(1234)
    kills = 20
    totals = {"committed": 0, "found": 0}
    for w in range(kills):
        c, f = kill_mid_burst(d, w, rng)
        totals["committed"] += c
        totals["found"] += f
    assert_clean(d)
    proc = run_writer(d, str(kills), "1000")
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert sorted(uids(d, kills)) == list(range(1000))
    print("FIGURES kill9", json.dumps({"kills": kills, **totals}))


def test_kill9_loses_at_most_the_writer_interval(tmp_path: Path) -> None:
    """A worker killed between writer wake-ups loses only what it buffered since the last one:
    events arrive without pause (one every 5 ms), so the writer postpones its timed writes for a
    pause (``SETTLE_S``) up to ``MAX_LAG_S``; events submitted more than ``MAX_LAG_S`` (plus
    scheduling slack on a loaded machine) before the kill are all in the journal, with nothing
    ever flushed by hand."""
    proc = run_writer(tmp_path, "0", "1000000", "0", "0.005")  # steady: one event per 5 ms, no flush
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    time.sleep(1.5)
    killed_at = time.time()
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    con = sqlite3.connect(f"file:{tmp_path / JOURNAL_FILE}?mode=ro", uri=True)
    try:
        newest = con.execute(
            "SELECT MAX(json_extract(attrs, '$.submit_ts')), COUNT(*) FROM events WHERE kind='compile'"
        ).fetchone()
    finally:
        con.close()
    assert newest[1] > 50, "the writer wrote nothing on its own (no flush was called)"
    lost_s = killed_at - float(newest[0])
    slack = 1.0  # 2 shared cores: the writer thread may wait for the CPU
    assert lost_s <= MAX_LAG_S + slack, f"the newest committed event was {lost_s:.2f} s old at the kill"
    assert_clean(tmp_path)


def test_torn_wal_tail(tmp_path: Path) -> None:
    """Cut the WAL in the middle of its last frame: the last transaction is lost, nothing else."""
    d = tmp_path / "j"
    j = Journal(d)
    j._conn.execute("PRAGMA wal_autocheckpoint=0")  # keep every frame in the WAL
    for batch in range(5):
        j.write([Event.now(EventKind.COMPILE, kernel="k", attrs={"uid": f"0-{batch * 10 + i}"}) for i in range(10)])
    wal = Path(str(d / JOURNAL_FILE) + "-wal")
    size = wal.stat().st_size
    assert size > 0
    # Copy the files as a crash would leave them (the live connection would checkpoint on close).
    crash = tmp_path / "crash"
    crash.mkdir(mode=0o700)
    for suffix in ("", "-wal"):
        (crash / (JOURNAL_FILE + suffix)).write_bytes(Path(str(d / JOURNAL_FILE) + suffix).read_bytes())
    j.close()
    torn = crash / (JOURNAL_FILE + "-wal")
    with open(torn, "r+b") as f:
        f.truncate(size - PAGE // 2)
    found = uids(crash, 0)
    assert found == list(range(len(found)))
    assert 40 <= len(found) < 50
    assert_clean(crash)


def _write_events(d: Path, n: int) -> None:
    with Journal(d) as j:
        j.write(
            [Event.now(EventKind.COMPILE, kernel=f"k{i}", attrs={"uid": f"0-{i}", "pad": "x" * 200}) for i in range(n)]
        )
        j._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _garbage_header(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(b"this is not an SQLite file at all")


def _truncate_half(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def _smash_pages(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        for page in range(3, size // PAGE):
            f.seek(page * PAGE)
            f.write(b"\xff" * 16)


@pytest.mark.parametrize("damage", [_garbage_header, _truncate_half, _smash_pages], ids=lambda f: f.__name__[1:])
def test_corrupt_journal_moved_aside(tmp_path: Path, damage, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "j"
    _write_events(d, 2000)
    damage(d / JOURNAL_FILE)
    caplog.set_level(logging.ERROR, logger="jitwatch")
    j = open_or_recover(d)
    try:
        assert j.integrity_ok()
        assert j.count_events() == 0
    finally:
        j.close()
    aside = list(d.glob("journal.db.corrupt-*"))
    assert aside, "damaged file not kept for inspection"
    errors = [r for r in caplog.records if "corrupt" in r.getMessage()]
    assert len(errors) == 1


def test_writer_survives_corrupt_journal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The in-process writer (what a worker runs) recovers from a corrupt file at startup; a file
    damaged under a running writer costs at most counted drops, never an exception, and the
    next writer (a restarted worker) recovers again."""
    d = tmp_path / "j"
    _write_events(d, 500)
    _garbage_header(d / JOURNAL_FILE)
    caplog.set_level(logging.WARNING, logger="jitwatch")
    w = JournalWriter(d)
    for i in range(100):
        assert w.submit(Event.now(EventKind.COMPILE, kernel="k", attrs={"uid": f"0-{i}"}))
    assert w.flush(30)
    assert w.written_total == 100 and w.dropped_total == 0
    # Damage the file under the running writer.
    _garbage_header(d / JOURNAL_FILE)
    for i in range(100, 200):
        w.submit(Event.now(EventKind.COMPILE, kernel="k", attrs={"uid": f"0-{i}"}))
    assert w.flush(30)
    w.close()
    assert w.written_total + w.dropped_total == 200
    w2 = JournalWriter(d)
    for i in range(200, 300):
        assert w2.submit(Event.now(EventKind.COMPILE, kernel="k", attrs={"uid": f"0-{i}"}))
    assert w2.flush(30)
    w2.close()
    assert w2.written_total == 100 and w2.dropped_total == 0
    # The running writer's own checkpoint may rewrite the damaged header page (then nothing is
    # lost); otherwise the restarted writer moves the file aside a second time.
    aside = list(d.glob("journal.db.corrupt-*"))
    assert len(aside) >= 1
    with Journal(d, readonly=True) as j:
        assert set(range(200, 300)) <= set(uids(d, 0))
        assert j.integrity_ok()
    assert sum("corrupt" in r.getMessage() for r in caplog.records) == len(aside)


def test_empty_file_is_not_corruption(tmp_path: Path) -> None:
    """A zero-byte journal.db (created, never written) is a valid empty database, not damage."""
    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    (d / JOURNAL_FILE).touch(mode=0o600)
    with open_or_recover(d) as j:
        j.write([Event.now(EventKind.COMPILE, kernel="k")])
        assert j.count_events() == 1
    assert not list(d.glob("*.corrupt-*"))


def test_sidecar_reports_corrupt_journal(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """A corrupt journal is reported by the sidecar (``jitwatch_journal_up 0``, an error in
    ``/jit``, a reason in ``/readyz``), never a 500; after a writer recovers, it is up again."""
    d = tmp_path / "j"
    _write_events(d, 100)
    _garbage_header(d / JOURNAL_FILE)
    sc = sidecar_factory(d)
    m = httpx.get(sc.url + "/metrics", timeout=10)
    assert m.status_code == 200 and "jitwatch_journal_up 0.0" in m.text
    s = httpx.get(sc.url + "/jit", timeout=10)
    assert s.status_code == 200
    assert "unreadable" in json.dumps(s.json())
    r = httpx.get(sc.url + "/readyz", timeout=10)
    assert r.status_code == 503 and "unreadable" in r.json()["reason"]
    e = httpx.get(sc.url + "/jit/events", timeout=10)
    assert e.status_code == 503 and e.json()["detail"]
    w = JournalWriter(d)
    w.submit(Event.now(EventKind.COMPILE, kernel="after_recovery"))
    w.close()
    m = httpx.get(sc.url + "/metrics", timeout=10)
    assert "jitwatch_journal_up 1.0" in m.text
    assert 'kernel="after_recovery"' in m.text


@pytest.mark.slow
def test_sidecar_killed_under_load_restarts_complete(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """Kill -9 the sidecar while clients hammer it and writers write; restarted on the same port,
    it reports every event (the sidecar holds no state of its own)."""
    d = tmp_path / "j"
    sc = sidecar_factory(d)
    writers = [run_writer(d, str(w), "3000", "300") for w in range(2)]
    import threading

    stop = threading.Event()
    seen = {"ok": 0, "refused": 0}

    def hammer() -> None:
        with httpx.Client(base_url=sc.url, timeout=5) as c:
            while not stop.is_set():
                try:
                    r = c.get("/metrics")
                    assert r.status_code == 200
                    seen["ok"] += 1
                except httpx.TransportError:
                    seen["refused"] += 1
                    time.sleep(0.02)

    t = threading.Thread(target=hammer, daemon=True)
    t.start()
    time.sleep(0.5)
    sc.kill9()
    time.sleep(0.3)
    sc.start()
    for p in writers:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    time.sleep(0.3)
    stop.set()
    t.join(10)
    m = httpx.get(sc.url + "/metrics", timeout=10).text
    total = sum(float(line.rsplit(" ", 1)[1]) for line in m.splitlines() if line.startswith("jitwatch_compiles_total{"))
    assert total == 6000
    events = httpx.get(sc.url + "/jit/events", params={"limit": 1000, "kind": "worker_start"}, timeout=10).json()
    assert len(events) == 2
    assert seen["ok"] > 0 and seen["refused"] > 0, seen
    print(json.dumps(seen))
