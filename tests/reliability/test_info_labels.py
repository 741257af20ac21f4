"""Bounded ``version``/``state`` labels of ``jitwatch_backend_info`` and ``exporter`` label of
``jitwatch_export_dropped_events_total``: the journal holds whatever strings a writer put in a
worker row's backend attrs or a counter name; ``/metrics`` shows valid values (a rule and a cap)
and folds every other into ``_other`` (summed, for the counter). A real journal written as a
worker would (``backend_ready`` events) and straight into the file, read by the real sidecar over
HTTP on 127.0.0.1 and by the in-process live copy (byte-identical to a full build)."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import get_args

import httpx
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.backends.base import BackendState
from jitwatch.core.events import Event, EventKind
from jitwatch.store.journal import Journal
from jitwatch.views.contract import (
    BACKEND_STATES,
    MAX_EXPORTER_LABELS,
    MAX_VERSION_LABELS,
    OTHER_BACKEND,
    VERSION_LABEL_PATTERN,
)
from jitwatch.views.live import LiveJournal
from jitwatch.views.metrics import render_uncached

N_RANKS = 40
HOSTILE = ["Evil Name", 'x"\n}', "a" * 200, "", "TRITON"]


def _write(d: Path, t: float) -> int:
    """40 ranks, each a triton backend with its own version and state (valid ones among them), and
    export_dropped counters of 40 exporter names; returns the drops written."""
    events = []
    for rank in range(N_RANKS):
        events.append(Event(kind=EventKind.WORKER_START, ts=t, rank=rank, pid=1000 + rank, attrs={"mode": "warn"}))
        version = f"3.{rank}.0" if rank < 30 else HOSTILE[rank % len(HOSTILE)] + str(rank)
        state = "active" if rank == 0 else ("failed" if rank == 1 else f"state {rank}\n")
        events.append(
            Event(
                kind=EventKind.BACKEND_READY,
                ts=t + 1,
                rank=rank,
                pid=1000 + rank,
                backend="triton",
                attrs={"state": state, "version": version, "hooks": []},
            )
        )
    with Journal(d) as j:
        j.write(events)
    names = [f"x{i:02d}" for i in range(30)] + ["otlp", *HOSTILE, "Otlp", "a-b", "_other", "zz"]
    c = sqlite3.connect(d / "journal.db")
    c.executemany(
        "INSERT INTO counters(rank, name, value) VALUES (0, ?, 2) ON CONFLICT DO UPDATE SET value = value + 2",
        [(f"export_dropped:{n}",) for n in names],
    )
    c.commit()
    c.close()
    return 2 * len(names)


def _check(text: str, drops: int) -> None:
    info = [s.labels for f in parse_text(text) if f.name == "jitwatch_backend_info" for s in f.samples]
    assert len(info) == N_RANKS  # one series per rank, none lost
    versions = {s["version"] for s in info}
    assert len(versions - {"", OTHER_BACKEND}) <= MAX_VERSION_LABELS, sorted(versions)
    assert all(v in ("", OTHER_BACKEND) or re.fullmatch(VERSION_LABEL_PATTERN, v) for v in versions), versions
    assert OTHER_BACKEND in versions
    states = {s["state"] for s in info}
    assert states <= {*BACKEND_STATES, OTHER_BACKEND}, states
    assert {"active", "failed", OTHER_BACKEND} <= states
    dropped = {
        s.labels["exporter"]: s.value
        for f in parse_text(text)
        if f.name == "jitwatch_export_dropped_events"
        for s in f.samples
        if s.name.endswith("_total")
    }
    assert len(set(dropped) - {OTHER_BACKEND}) <= MAX_EXPORTER_LABELS, sorted(dropped)
    assert "otlp" in dropped and OTHER_BACKEND in dropped
    assert all(e == OTHER_BACKEND or re.fullmatch(r"[a-z][a-z0-9_]{0,63}", e) for e in dropped), dropped
    assert sum(dropped.values()) == drops  # folded, not lost


def test_backend_states_match_the_backend_api() -> None:
    assert set(BACKEND_STATES) == {*get_args(BackendState), "unknown"}


def test_info_and_exporter_labels_are_bounded_in_the_real_sidecar(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """Before: 40 distinct versions (one 200 characters long, one with a quote and newline), 38
    states and 40 exporter names became label values."""
    d = tmp_path / "j"
    drops = _write(d, time.time())
    sc = sidecar_factory(d)
    assert sc.url.startswith("http://127.0.0.1:")
    with httpx.Client(base_url=sc.url, timeout=30) as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    _check(r.text, drops)


def test_live_copy_bounds_like_a_full_build(tmp_path: Path) -> None:
    d = tmp_path / "j"
    drops = _write(d, time.time())
    lj = LiveJournal(d)
    try:
        body = lj.render()[0]
        assert body == render_uncached(d)[0]
        _check(body.decode(), drops)
    finally:
        lj.close()
