"""Storage faults: a missing, blocked, read-only or full journal directory.

The worker keeps going (``submit`` never raises, compiles proceed), the fault is logged once per
episode, every lost event is counted (``dropped`` record → ``counters.dropped_events`` →
``jitwatch_dropped_events_total``), and writing resumes when the fault clears — even if no new
event arrives (the writer retries every ``RETRY_INTERVAL_S``). A healthy journal is never moved
aside because of a storage fault.

Mechanisms, chosen because the tests run as root (``chmod 0500`` does not stop root):

* read-only: a real tmpfs remounted ``ro`` (``mount -o remount,ro``) — EROFS for everyone;
* full: a real tmpfs mounted with ``size=2m`` and filled with zeros — ENOSPC for everyone;
* blocked: a regular file where the directory should be (ENOTDIR/EEXIST; needs no privilege).

The tmpfs tests skip (with the reason) where ``mount`` is refused.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jitwatch.core.events import Event, EventKind
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.store.writer import RETRY_INTERVAL_S, JournalWriter

from .conftest import HERE, fill_disk, remount, tmpfs

FAULT_MSG = "cannot write its journal"


def submit(w: JournalWriter, start: int, n: int) -> None:
    for i in range(start, start + n):
        assert w.submit(Event.now(EventKind.COMPILE, kernel="k", duration_s=0.01, attrs={"uid": i, "pad": "p" * 300}))


def fault_logs(caplog: pytest.LogCaptureFixture) -> int:
    return sum(FAULT_MSG in r.getMessage() for r in caplog.records)


def wait_for(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def check_recovered(d: Path, w: JournalWriter, submitted: int) -> None:
    """Everything submitted is either in the journal or counted; the count is in the journal."""
    with Journal(d, readonly=True) as j:
        assert j.integrity_ok()
        found = j.count_events()
        dropped_counter = j.counters().get((0, "dropped_events"), 0.0)
        dropped_records = len(j.events(kind=EventKind.DROPPED, limit=1000))
    assert w.written_total + w.dropped_total == submitted
    assert found == w.written_total + dropped_records
    assert dropped_counter == w.dropped_total
    assert not list(d.glob("*.corrupt-*")), "a storage fault moved a healthy journal aside"


def test_missing_directory_is_created(tmp_path: Path) -> None:
    d = tmp_path / "a" / "b" / "journal"
    w = JournalWriter(d)
    submit(w, 0, 10)
    w.close()
    assert (d / JOURNAL_FILE).exists()
    assert (d.stat().st_mode & 0o777) == 0o700
    assert w.written_total == 10


def test_file_where_directory_should_be(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="jitwatch")
    d = tmp_path / "journal"
    d.write_text("not a directory")
    w = JournalWriter(d)
    submit(w, 0, 50)
    assert w.flush(10)
    submit(w, 50, 50)
    assert w.flush(10)
    assert w.dropped_total == 100 and w.written_total == 0 and w.fault
    assert fault_logs(caplog) == 1
    d.unlink()  # the fault clears; no new event needed for the count to land
    assert wait_for(lambda: w.fault is None, 5 * RETRY_INTERVAL_S + 5)
    submit(w, 100, 10)
    w.close()
    check_recovered(d, w, 110)
    assert fault_logs(caplog) == 1
    assert any("writable again" in r.getMessage() for r in caplog.records)


def test_heartbeat_advances_last_ts_and_survives_a_fault(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The writer thread's heartbeat advances the worker row's last_ts with no event written;
    a journal it cannot open costs heartbeats only: nothing dropped, no fault, no log above debug."""
    caplog.set_level(logging.WARNING, logger="jitwatch")
    d = tmp_path / "journal"
    w = JournalWriter(d, heartbeat=("node-a", 7, 0), heartbeat_s=0.05)
    w.submit(Event(kind=EventKind.WORKER_START, ts=time.time() - 100, rank=0, pid=7, host="node-a"))
    assert w.flush(10)

    def last_ts() -> float:
        with Journal(d, readonly=True) as j:
            return j.latest_workers()[0].last_ts

    with Journal(d, readonly=True) as j:
        started = j.latest_workers()[0].started_ts  # the event's ts, 100 s ago
    # (compared with started_ts, not with a first read: a heartbeat may land before that read)
    assert wait_for(lambda: last_ts() > started + 50, 10)
    assert wait_for(lambda: w.heartbeats_total >= 2, 10)
    w.close()
    with Journal(d, readonly=True) as j:
        assert j.count_events() == 1  # heartbeats add no events

    bad = tmp_path / "file"
    bad.write_text("not a directory")
    w = JournalWriter(bad, heartbeat=("node-a", 7, 0), heartbeat_s=0.02)
    time.sleep(0.3)
    assert w._thread.is_alive() and w.heartbeats_total == 0
    assert w.dropped_total == 0 and w.fault is None
    w.close()
    assert fault_logs(caplog) == 0


def test_read_only_filesystem(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A worker starts on a journal whose filesystem is mounted read-only (a volume mounted ``ro``,
    or one the kernel remounted ``ro`` after I/O errors), then the volume comes back ``rw``.

    Linux refuses ``remount,ro`` while a file on it is open for writing ("mount point is busy"),
    so the fault is applied between two writers rather than under a running one.
    """
    caplog.set_level(logging.WARNING, logger="jitwatch")
    with tmpfs(tmp_path / "mnt", "8m") as mnt:
        d = mnt / "journal"
        w0 = JournalWriter(d)
        submit(w0, 0, 100)
        w0.close()
        remount(mnt, "ro")
        try:
            w = JournalWriter(d)
            for k in range(5):
                submit(w, 100 + k * 100, 100)
                assert w.flush(10)
            assert w.fault is not None
            assert w.dropped_total == 500 and w.written_total == 0
            assert fault_logs(caplog) == 1
            with Journal(d, readonly=True) as j:  # the sidecar still reads it
                assert j.count_events() == 100
        finally:
            remount(mnt, "rw")
        assert wait_for(lambda: w.fault is None, 5 * RETRY_INTERVAL_S + 5)
        submit(w, 600, 100)
        w.close()
        with Journal(d, readonly=True) as j:
            assert j.count_events() == 100 + 100 + 1  # first writer, after recovery, one dropped record
        w.written_total += 100  # count the first writer's events for the balance check
        check_recovered(d, w, 700)
        assert fault_logs(caplog) == 1


def test_full_disk(tmp_path: Path, caplog: pytest.LogCaptureFixture, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING, logger="jitwatch")
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        d = mnt / "journal"
        w = JournalWriter(d)
        submit(w, 0, 100)
        assert w.flush(10) and w.written_total == 100
        filler = fill_disk(mnt / "filler")
        submitted = 100
        for _ in range(30):
            submit(w, submitted, 100)
            submitted += 100
            assert w.flush(10)
        assert w.fault is not None and "full" in w.fault
        assert w.dropped_total > 0
        assert fault_logs(caplog) == 1
        sc = sidecar_factory(d)  # reads fine from a full disk
        assert httpx.get(sc.url + "/metrics", timeout=10).status_code == 200
        filler.unlink()
        assert wait_for(lambda: w.fault is None, 5 * RETRY_INTERVAL_S + 5)
        submit(w, submitted, 100)
        submitted += 100
        w.close()
        check_recovered(d, w, submitted)
        assert fault_logs(caplog) == 1
        m = httpx.get(sc.url + "/metrics", timeout=10).text
        line = next(x for x in m.splitlines() if x.startswith('jitwatch_dropped_events_total{rank="0"}'))
        assert float(line.split()[-1]) == w.dropped_total
        print(json.dumps({"submitted": submitted, "written": w.written_total, "dropped": w.dropped_total}))


@pytest.mark.slow
def test_worker_compiles_through_full_disk(tmp_path: Path) -> None:
    """A real worker (Monitor + Triton compiles) on a full disk: compiles succeed, the fault is
    logged once, drops are counted, and after space is freed the next compile is journaled with
    the drop count."""
    with tmpfs(tmp_path / "mnt", "1m") as mnt:
        d = mnt / "journal"
        filler = fill_disk(mnt / "filler")
        env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"), "TRITON_DEFAULT_FP_FUSION": "1"}
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "_compile_worker.py"), str(d), "tag", "--wait"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line.startswith("phase1 "), line + (proc.stderr.read() if proc.stderr else "")
        phase1 = json.loads(line.split(" ", 1)[1])
        assert phase1["written"] == 0 and phase1["dropped"] >= 4 and phase1["fault"]
        filler.unlink()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        done = json.loads(out.strip().splitlines()[-1].split(" ", 1)[1])
        assert done["fault"] is None and done["written"] >= 1
        assert err.count(FAULT_MSG) == 1, err[-3000:]
        with Journal(d, readonly=True) as j:
            compiles = j.events(kind=EventKind.COMPILE)
            assert [e.kernel for e in compiles] == ["scale"]
            assert compiles[0].phase.value == "serving"
            assert j.counters()[(0, "dropped_events")] == phase1["dropped"]
