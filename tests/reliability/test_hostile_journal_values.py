"""Unexpected values in the journal (issue 14): an unknown phase, state or kind, text in number
columns, infinities, negative durations and counts, ranks outside 0 … 2**31-1. Written straight into
a real journal with sqlite3 (as another program or a damaged writer could), then read through the
real sidecar over HTTP: no 500 (``/readyz`` included, which needs no token), and both exposition
formats pass prometheus_client's parsers and ``promtool check metrics``."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import MAX_KEY_CHARS, MAX_NAME_CHARS, Journal
from jitwatch.store.writer import JournalWriter
from jitwatch.views.live import LiveJournal
from tests.tools import tool_missing

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def hostile_journal(d: Path) -> Path:
    now = time.time()
    with Journal(d) as j:
        j.write(
            [
                Event.now(EventKind.WORKER_START, rank=0, attrs={"mode": "warn"}),
                Event.now(EventKind.WARMUP_COMPLETE, rank=0, phase=Phase.SERVING, duration_s=1.0),
                Event.now(EventKind.COMPILE, rank=0, phase=Phase.SERVING, kernel="good", key="k", duration_s=0.1),
                Event.now(EventKind.COMPILE, rank=1, phase=Phase.WARMUP, kernel="bad", key="k", duration_s=0.1),
            ]
        )
    c = sqlite3.connect(d / "journal.db")
    ev = (
        "INSERT INTO events(ts, kind, rank, pid, host, phase, backend, kernel, duration_s, attrs)"
        " VALUES (?,?,?,?,?,?,?,?,?,?)"
    )
    c.executemany(
        ev,
        [
            (now, "compile", 0, 1, "h", "bogus", "triton", "k", 0.1, "{}"),  # unknown phase
            (now, "martian", 0, 1, "h", "serving", "triton", "k", 0.1, "{}"),  # unknown kind
            ("noon", "compile", "r", "p", "h", "serving", "triton", "k", "slow", "not json"),  # text
            (9e999, "compile", 0, 1, "h", "serving", "triton", "k", -9e999, "{}"),  # inf
            (now, "compile", 0, 1, "h", "serving", "triton", "k", -3.0, '{"x": NaN}'),  # negative
            (now, "compile", 2**63 - 1, 1, "h", "serving", "triton", "k", 0.1, "{}"),  # huge rank
        ],
    )
    c.execute("UPDATE compile_stats SET count = -3, seconds = -5 WHERE kernel = 'bad'")
    c.execute(
        "INSERT INTO compile_stats(backend, kernel, phase, rank, kind, count, seconds, cache_hits, last_key, last_ts)"
        " VALUES ('triton', 'odd', 'bogus', 0, 'compile', 'many', 9e999, 0, NULL, 'x')"
    )
    c.execute("UPDATE duration_hist SET count = 'lots' WHERE rank = 1")
    c.execute("INSERT INTO duration_hist(backend, rank, phase, bucket, count) VALUES ('triton', 0, 'serving', 'b', 1)")
    c.execute("INSERT INTO counters(rank, name, value) VALUES (0, 'dropped_events', 9e999)")
    c.execute("INSERT INTO counters(rank, name, value) VALUES (1, 'dropped_events', 'v')")
    c.execute(
        "INSERT INTO workers(host, pid, rank, state, started_ts, last_ts, attrs) VALUES"
        " ('h', 2, 3, 'weird', 1, 1, '{}'), ('h', 3, 4, 'serving', 'x', 9e999, 'nope'),"
        " ('h', 4, 5, 'serving', 1, 1, '[1]')"
    )
    c.execute("UPDATE workers SET warmup_duration_s = -9e999, first_request_s = -2 WHERE rank = 0")
    c.commit()
    c.close()
    return d


def test_hostile_values_give_no_500_and_a_valid_scrape(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """Before: /jit, /jit/events and /readyz answered 500 for an unknown phase or state, text or
    inf in a number column; /metrics 500 for text in a count, and negative counts made a scrape
    the OpenMetrics parser rejects. Now such rows are skipped (counted, logged once)."""
    sc = sidecar_factory(hostile_journal(tmp_path / "j"))
    with httpx.Client(base_url=sc.url, timeout=30) as c:
        for path in ("/jit", "/jit/events?limit=1000", "/readyz", "/metrics"):
            r = c.get(path)
            assert r.status_code in (200, 503), (path, r.status_code, r.text[:500])
        events = c.get("/jit/events?limit=1000").json()
        assert {e["kernel"] for e in events if e["kind"] == "compile"} >= {"good"}
        assert all(e["duration_s"] is None or e["duration_s"] >= 0 for e in events)
        ready = c.get("/readyz").json()
        assert ready["ranks"].get("0") == "serving"
        jit = c.get("/jit").json()
        assert any(k["name"] == "good" for k in jit["kernels"])
        text = c.get("/metrics").text
        om = c.get("/metrics", headers={"Accept": OPENMETRICS}).text
    families = {f.name for f in parse_text(text)}
    assert "jitwatch_compiles" in families or "jitwatch_compiles_total" in families
    list(parse_openmetrics(om))  # raises on a negative counter, NaN count, or bad syntax
    for line in text.splitlines():
        if line and not line.startswith("#"):
            value = float(line.rsplit(" ", 1)[1])
            assert (value == value and value != float("inf")) or "_bucket" in line or "le=" in line, line
    tools = [
        root / ".tools" / "prometheus" / "usr" / "bin" / "promtool"
        for root in (Path(__file__).resolve().parents[2], Path(sys.prefix).parent)
    ]
    promtool = shutil.which("promtool") or next((str(t) for t in tools if t.exists()), None)
    if promtool is None:
        tool_missing("promtool not installed (.ci/run installs it); the parsers above passed")
    proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_journal_reader_skips_and_counts_senseless_rows(tmp_path: Path) -> None:
    with Journal(hostile_journal(tmp_path / "j"), readonly=True) as j:
        events = j.events(limit=1000)
        workers = j.workers()
        stats = j.stats()
        hist = j.histogram()
        counters = j.counters()
        assert j.skipped_rows >= 10
    assert {w.rank for w in workers} == {0, 5} and workers[0].warmup_duration_s is None
    compiles = sorted(e.kernel or "" for e in events if e.kind is EventKind.COMPILE)
    assert compiles == ["bad", "good", "k"], compiles  # the negative duration's row, read as None
    assert [e.duration_s for e in events if e.kernel == "k"] == [None]
    assert all(s.count >= 0 and s.seconds >= 0 for s in stats) and {s.kernel for s in stats} == {"good"}
    assert all(c >= 0 for counts in hist.values() for c in counts)
    assert (0, "dropped_events") not in counters and (1, "dropped_events") not in counters


def test_rank_past_sqlite_integers_drops_only_that_event(tmp_path: Path) -> None:
    """A rank of 2**70 cannot be stored (SQLite integers are 64-bit). Before, that made the whole
    batch fail; now it is dropped alone, counted in the journal and by the writer, never reported
    as written."""
    w = JournalWriter(tmp_path / "j", heartbeat_s=0)
    bad = Event.now(EventKind.COMPILE, rank=0, kernel="huge", key="k").model_copy(update={"rank": 2**70})
    w.submit(bad)
    for i in range(5):
        w.submit(Event.now(EventKind.COMPILE, rank=0, phase=Phase.SERVING, kernel=f"ok{i}", key="k", duration_s=0.1))
    assert w.flush(30)
    assert (w.written_total, w.dropped_total) == (5, 1)
    w.close()
    with Journal(tmp_path / "j", readonly=True) as j:
        assert sorted(e.kernel or "" for e in j.events(kind=EventKind.COMPILE)) == [f"ok{i}" for i in range(5)]
        assert j.counters()[(0, "dropped_events")] == 1


def test_megabyte_keys_are_capped(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """Rows were unbounded: 1 MB keys were stored whole and copied into every /jit answer (23 s).
    Keys are cut at MAX_KEY_CHARS with a marker, huge attrs values replaced, names capped."""
    d = tmp_path / "j"
    w = JournalWriter(d, heartbeat_s=0)
    w.submit(Event.now(EventKind.WORKER_START, rank=0, attrs={"mode": "warn"}))
    for i in range(20):
        w.submit(
            Event.now(
                EventKind.COMPILE,
                rank=0,
                phase=Phase.SERVING,
                kernel=f"k{i}" + "n" * 20_000,
                key=f"{i}" + "x" * 1_000_000,
                duration_s=0.1,
                attrs={"blob": "y" * 1_000_000, "small": i},
            )
        )
    assert w.flush(60) and w.dropped_total == 0
    w.close()
    assert (d / "journal.db").stat().st_size < 5_000_000
    with Journal(d, readonly=True) as j:
        for ev in j.events(kind=EventKind.COMPILE, limit=100):
            assert ev.key is not None and len(ev.key) <= MAX_KEY_CHARS + 32 and ev.key.endswith("chars]")
            assert ev.kernel is not None and len(ev.kernel) <= MAX_NAME_CHARS + 32
            assert ev.attrs["small"] in range(20) and ev.attrs["_truncated"] is True and len(ev.attrs["blob"]) < 100
    sc = sidecar_factory(d)
    r = httpx.get(sc.url + "/jit", timeout=60)
    assert r.status_code == 200 and len(r.content) < 2_000_000


def test_ranks_outside_the_range_are_counted_and_logged_like_other_unreadable_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows whose rank is outside 0 … 2**31-1 (``-1`` allowed for journal-wide counters) are
    reported as every other row that makes no sense: each reader counts it in
    ``Journal.skipped_rows`` and the first one on a connection is logged (the sidecar's long-lived
    copy too). Pinned, not changed: 2**31-1 is read, 2**31 and -2 are skipped, in every table."""
    d = tmp_path / "j"
    with Journal(d) as j:
        j.write([Event.now(EventKind.WORKER_START, rank=0, attrs={"mode": "warn"})])
    top = 2**31 - 1
    c = sqlite3.connect(d / "journal.db")
    for rank in (top, 2**31, -2):
        c.execute(
            "INSERT INTO events(ts, kind, rank, pid, host, phase, backend, kernel, duration_s, attrs)"
            " VALUES (?, 'compile', ?, 1, 'h', 'serving', 'triton', 'k', 0.1, '{}')",
            (time.time(), rank),
        )
        c.execute(
            "INSERT INTO compile_stats(backend, kernel, phase, rank, kind, count, seconds, cache_hits)"
            " VALUES ('triton', 'k', 'serving', ?, 'compile', 1, 0.1, 0)",
            (rank,),
        )
        c.execute(
            "INSERT INTO recompile_stats(backend, kernel, reason_class, phase, rank, count, seconds)"
            " VALUES ('torch_compile', 'f', 'other', 'serving', ?, 1, 0.1)",
            (rank,),
        )
        c.execute(
            "INSERT INTO duration_hist(backend, rank, phase, bucket, count) VALUES ('triton', ?, 'serving', 3, 1)",
            (rank,),
        )
        c.execute("INSERT INTO counters(rank, name, value) VALUES (?, 'dropped_events', 1)", (rank,))
        c.execute(
            "INSERT INTO workers(host, pid, rank, state, started_ts, last_ts, attrs)"
            " VALUES ('h', 7, ?, 'serving', 1, 1, '{}')",
            (rank,),
        )
    c.commit()
    c.close()
    caplog.set_level(logging.WARNING, logger="jitwatch.store.journal")
    with Journal(d, readonly=True) as j:
        reads: dict[str, Any] = {
            "events": lambda: j.events(kind=EventKind.COMPILE),
            "compile_stats": j.stats,
            "recompile_stats": j.recompile_stats,
            "duration_hist": j.histogram,
            "counters": j.counters,
            "workers": j.workers,
        }
        for table, read in reads.items():
            before = j.skipped_rows
            got = read()
            assert j.skipped_rows - before == 2, table  # 2**31 and -2; 2**31-1 read
            if table == "duration_hist":
                assert {k[1] for k in got} == {top}
            elif table == "counters":
                assert {r for r, _ in got} == {top}
            else:
                assert {x.rank for x in got} >= {top}, table
    skipped = [r for r in caplog.records if "skipped a" in r.getMessage()]
    assert len(skipped) == 1 and "events row" in skipped[0].getMessage()  # once per connection
    caplog.clear()
    lj = LiveJournal(d)
    try:
        body = lj.render()[0].decode()
    finally:
        lj.close()
    assert f'rank="{top}"' in body and 'rank="2147483648"' not in body and 'rank="-2"' not in body
    assert [r for r in caplog.records if "skipped a" in r.getMessage()]  # the sidecar's copy logs it too
