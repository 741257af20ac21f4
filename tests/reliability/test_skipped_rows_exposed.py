"""Rows every reader skips as unreadable (``Journal.skipped_rows``) are visible to an operator:
``jitwatch_journal_skipped_rows_total`` on ``/metrics`` and ``totals.skipped_rows`` in ``/jit``,
the rest of the journal still answered. A real journal with rows written straight into the file
(an out-of-range rank, a NaN count, an unknown phase), read by the real sidecar (a child process)
over HTTP on 127.0.0.1."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal, skipped_rows_total
from jitwatch.views.live import LiveJournal
from jitwatch.views.metrics import render_uncached


def _journal(d: Path, *, bad: bool) -> None:
    t = time.time()
    with Journal(d) as j:
        j.write(
            [
                Event(kind=EventKind.WORKER_START, ts=t, rank=0, attrs={"mode": "warn"}),
                Event(
                    kind=EventKind.COMPILE,
                    ts=t + 0.1,
                    rank=0,
                    phase=Phase.WARMUP,
                    backend="triton",
                    kernel="good",
                    key="k",
                    duration_s=0.01,
                ),
            ]
        )
    if not bad:
        return
    c = sqlite3.connect(d / "journal.db")
    c.execute(
        "INSERT INTO compile_stats(backend, kernel, phase, rank, kind, count, seconds, cache_hits)"
        " VALUES ('triton', 'k_rank', 'serving', ?, 'compile', 1, 0.1, 0)",
        (2**31,),
    )
    c.execute(
        "INSERT INTO compile_stats(backend, kernel, phase, rank, kind, count, seconds, cache_hits)"
        " VALUES ('triton', 'k_phase', 'bogus', 0, 'compile', 1, 0.1, 0)"
    )
    c.execute("INSERT INTO counters(rank, name, value) VALUES (0, 'dropped_events', 'NaN')")
    c.execute(
        "INSERT INTO workers(host, pid, rank, state, started_ts, last_ts, attrs)"
        " VALUES ('h', 7, -5, 'serving', 1, 1, '{}')"
    )
    c.commit()
    c.close()


def _skipped(text: str) -> float:
    return next(
        s.value
        for f in parse_text(text)
        if f.name == "jitwatch_journal_skipped_rows"
        for s in f.samples
        if s.name == "jitwatch_journal_skipped_rows_total"
    )


def test_skipped_rows_are_on_metrics_and_jit_of_the_real_sidecar(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """Before: the sidecar skipped (and logged once) these rows, and neither /metrics nor /jit said so."""
    clean, bad = tmp_path / "clean", tmp_path / "bad"
    _journal(clean, bad=False)
    _journal(bad, bad=True)
    sc_clean, sc_bad = sidecar_factory(clean), sidecar_factory(bad)
    with httpx.Client(base_url=sc_clean.url, timeout=30) as c:
        assert _skipped(c.get("/metrics").text) == 0
        assert c.get("/jit").json()["totals"]["skipped_rows"] == 0
    with httpx.Client(base_url=sc_bad.url, timeout=30) as c:
        first = c.get("/metrics")
        assert first.status_code == 200
        n = _skipped(first.text)
        assert n >= 4  # each bad row skipped at least once
        assert 'jitwatch_compiles_total{backend="triton",phase="warmup"} 1.0' in first.text  # the rest kept
        jit = c.get("/jit").json()
        assert jit["totals"]["skipped_rows"] >= n  # the same process-wide count, read later
        assert [k["name"] for k in jit["kernels"]] == ["good"]
        assert _skipped(c.get("/metrics").text) >= jit["totals"]["skipped_rows"]  # a counter: never down


def test_live_copy_formats_the_count_at_each_scrape(tmp_path: Path) -> None:
    """The live copy reuses the formatted families of an unchanged journal; this one is read at
    each scrape (another reader in the process skipping rows shows at the next scrape)."""
    d = tmp_path / "j"
    _journal(d, bad=True)
    lj = LiveJournal(d)
    try:
        first = _skipped(lj.render()[0].decode())
        assert first >= 4 and first == skipped_rows_total()
        render_uncached(d)  # another reader of the process skips the same rows
        assert _skipped(lj.render()[0].decode()) == skipped_rows_total() > first
    finally:
        lj.close()
