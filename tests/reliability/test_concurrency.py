"""Concurrent writers: N worker processes append to one journal while the sidecar reads.

Every event must be present exactly once (``attrs.uid`` is unique per event) and the
aggregates that metrics are built from must be exact. The reader (the real sidecar over HTTP,
plus a read-only :class:`~jitwatch.store.journal.Journal`) polls all the while; its counters may only
grow. Contention is SQLite's ``BEGIN IMMEDIATE`` + busy timeout, and the writer retries
``SQLITE_BUSY`` instead of dropping.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jitwatch.core.events import Phase
from jitwatch.store.journal import JOURNAL_FILE, Journal, bucket_index

from ._writer import DURATIONS, KERNELS
from .conftest import run_writer

FIGURES: dict[str, object] = {}


def metric_sum(text: str, name: str) -> float:
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                total += s.value
    return total


def expected_aggregates(workers: int, n: int) -> dict[str, object]:
    compiles: Counter[tuple[int, str]] = Counter()
    seconds: Counter[int] = Counter()
    hits: Counter[int] = Counter()
    hist: Counter[tuple[int, str, int]] = Counter()
    for w in range(workers):
        for i in range(n):
            phase = (Phase.SERVING if i % 2 else Phase.WARMUP).value
            d = DURATIONS[i % len(DURATIONS)]
            compiles[(w, phase)] += 1
            seconds[w] += d
            hits[w] += i % 3 == 0
            hist[(w, phase, bucket_index(d))] += 1
    return {"compiles": compiles, "seconds": seconds, "hits": hits, "hist": hist}


def check_journal(directory: Path, workers: int, n: int) -> None:
    con = sqlite3.connect(f"file:{directory / JOURNAL_FILE}?mode=ro", uri=True)
    try:
        uids = [r[0] for r in con.execute("SELECT json_extract(attrs, '$.uid') FROM events WHERE kind='compile'")]
        starts = con.execute("SELECT COUNT(*) FROM events WHERE kind='worker_start'").fetchone()[0]
        dropped = con.execute("SELECT COUNT(*) FROM events WHERE kind='dropped'").fetchone()[0]
    finally:
        con.close()
    counts = Counter(uids)
    dupes = [u for u, c in counts.items() if c > 1]
    missing = {f"{w}-{i}" for w in range(workers) for i in range(n)} - set(counts)
    assert not dupes, f"{len(dupes)} events duplicated, e.g. {dupes[:5]}"
    assert not missing, f"{len(missing)} events missing, e.g. {sorted(missing)[:5]}"
    assert len(uids) == workers * n
    assert starts == workers
    assert dropped == 0

    exp = expected_aggregates(workers, n)
    with Journal(directory, readonly=True) as j:
        assert j.integrity_ok()
        compiles: Counter[tuple[int, str]] = Counter()
        seconds: Counter[int] = Counter()
        hits: Counter[int] = Counter()
        kernels = set()
        for row in j.stats():
            if row.kind != "compile":
                continue
            compiles[(row.rank, row.phase.value)] += row.count
            seconds[row.rank] += row.seconds
            hits[row.rank] += row.cache_hits
            kernels.add(row.kernel)
        assert compiles == exp["compiles"]
        assert seconds == exp["seconds"]  # exact: durations are binary fractions
        assert hits == exp["hits"]
        assert len(kernels) == KERNELS
        hist: Counter[tuple[int, str, int]] = Counter()
        for (_backend, rank, phase), counts_ in j.histogram().items():
            for b, c in enumerate(counts_):
                if c:
                    hist[(rank, phase.value, b)] += c
        assert hist == exp["hist"]
        assert {w.rank for w in j.workers()} == set(range(workers))
        assert j.counters().get((0, "dropped_events"), 0) == 0


def run_concurrent(tmp_path: Path, sidecar_factory, workers: int, n: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    journal_dir = tmp_path / "journal"
    sc = sidecar_factory(journal_dir)
    stop = threading.Event()
    polls = {"http": 0, "errors": 0, "regressions": 0, "journal_reads": 0, "journal_not_yet": 0}
    last_total = [0.0]

    def poll() -> None:
        with httpx.Client(base_url=sc.url, timeout=30) as client:
            while not stop.is_set():
                for path in ("/metrics", "/jit"):
                    r = client.get(path)
                    polls["http"] += 1
                    if r.status_code != 200:
                        polls["errors"] += 1
                    elif path == "/metrics":
                        total = metric_sum(r.text, "jitwatch_compiles_total")
                        if total < last_total[0]:
                            polls["regressions"] += 1
                        last_total[0] = total
                if (journal_dir / JOURNAL_FILE).exists():
                    try:
                        with Journal(journal_dir, readonly=True) as j:
                            j.count_events()
                            polls["journal_reads"] += 1
                    except FileNotFoundError:  # the file exists, its schema is not committed yet
                        polls["journal_not_yet"] += 1
                time.sleep(0.05)

    def poll_or_record() -> None:
        try:
            poll()
        except Exception as exc:  # noqa: BLE001 -- a dead poller must fail the test, not end its checks silently
            failure.append(exc)

    failure: list[Exception] = []
    reader = threading.Thread(target=poll_or_record, daemon=True)
    reader.start()
    t0 = time.monotonic()
    procs = [run_writer(journal_dir, str(w), str(n), str(max(1, n // 10))) for w in range(workers)]
    outs = [p.communicate(timeout=600) for p in procs]
    elapsed = time.monotonic() - t0
    stop.set()
    reader.join(60)
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"writer failed rc={p.returncode}: {out[-500:]} {err[-2000:]}"
        assert out.strip().endswith(f"done {n + 1} 0"), out[-300:]
    check_journal(journal_dir, workers, n)
    assert not failure, failure
    assert polls["errors"] == 0, polls
    assert polls["regressions"] == 0, polls
    assert polls["http"] > 0
    final = httpx.get(sc.url + "/metrics", timeout=30).text
    assert metric_sum(final, "jitwatch_compiles_total") == workers * n
    assert metric_sum(final, "jitwatch_dropped_events_total") == 0
    return {"workers": workers, "events_each": n, "seconds": round(elapsed, 1), **polls}


def test_concurrent_writers_small(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """4 writers x 1500 events (default run): exactly once, exact aggregates."""
    fig = run_concurrent(tmp_path, sidecar_factory, workers=4, n=1500)
    print(json.dumps(fig))


@pytest.mark.slow
def test_concurrent_writers_8x10k(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """The issue's figure: 8 writer processes x 10,000 events while the sidecar reads."""
    fig = run_concurrent(tmp_path, sidecar_factory, workers=8, n=10_000)
    print("FIGURES concurrent", json.dumps(fig))


def test_failed_prune_after_commit_neither_duplicates_nor_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Journal.write`` commits, then prunes every 1000 events in its own transaction. If that
    prune hits a lock timeout the events are already committed: the writer must neither retry
    them (duplicates) nor count them as dropped."""
    import sqlite3 as _sqlite3

    from jitwatch.core.events import Event, EventKind
    from jitwatch.store.writer import JournalWriter

    calls = {"n": 0}
    real_prune = Journal.prune

    def flaky_prune(self: Journal, now: float | None = None) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise _sqlite3.OperationalError("database is locked")
        return real_prune(self, now)

    monkeypatch.setattr(Journal, "prune", flaky_prune)
    d = tmp_path / "j"
    w = JournalWriter(d, queue_size=5000)
    for i in range(3000):
        w.submit(Event.now(EventKind.COMPILE, kernel="k", attrs={"uid": f"0-{i}"}))
    w.close(30)
    assert calls["n"] >= 2  # failed once, retried later
    assert w.dropped_total == 0 and w.written_total == 3000
    con = _sqlite3.connect(f"file:{d / JOURNAL_FILE}?mode=ro", uri=True)
    uids = [r[0] for r in con.execute("SELECT json_extract(attrs, '$.uid') FROM events")]
    con.close()
    assert len(uids) == len(set(uids)) == 3000
