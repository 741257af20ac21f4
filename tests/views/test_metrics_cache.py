"""``/metrics`` rebuilt only when the journal changed (jitwatch.views.metrics.MetricsRenderer): the
cached body is byte-identical to a fresh build, and every change a reader must see — a write by
any process, retention, a journal moved aside and replaced, a second sidecar — is seen."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from jitwatch.core.events import Phase
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import JournalBuilder
from jitwatch.views.metrics import MetricsRenderer, render_uncached

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def compiles(body: bytes, kernel: str) -> float:
    for line in body.decode().splitlines():
        if line.startswith("jitwatch_compiles_total{") and f'kernel="{kernel}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_unchanged_journal_is_served_from_the_cache_byte_identical(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add", phase=Phase.WARMUP)
    r = MetricsRenderer(tmp_path)
    first = r.render(None)
    assert r.render(None) == first == render_uncached(tmp_path, None)
    om = r.render(OPENMETRICS)
    assert om == render_uncached(tmp_path, OPENMETRICS) and om[1].startswith("application/openmetrics-text")
    assert r.render(OPENMETRICS) == om
    assert r.builds == 2  # one per exposition format, nothing rebuilt


def test_every_write_retention_and_replacement_is_seen(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add", phase=Phase.SERVING)
    r, other = MetricsRenderer(tmp_path), MetricsRenderer(tmp_path)  # two sidecars on one journal
    assert compiles(r.render()[0], "add") == compiles(other.render()[0], "add") == 1.0
    for i in range(3):
        b.compile("add", phase=Phase.SERVING, ts=b.t0 + 1 + i)  # another connection commits
        assert r.render() == render_uncached(tmp_path) and compiles(r.render()[0], "add") == 2.0 + i
    assert compiles(other.render()[0], "add") == 4.0
    with Journal(tmp_path, retention_events=1) as j:  # retention: counters do not move
        assert j.prune() > 0
    body = r.render()
    assert body == render_uncached(tmp_path) and compiles(body[0], "add") == 4.0
    # the journal moved aside and a fresh one started in its place (as after corruption)
    for suffix in ("", "-wal", "-shm"):
        src = tmp_path / f"{JOURNAL_FILE}{suffix}"
        if src.exists():
            shutil.move(str(src), str(tmp_path / f"aside{suffix}"))
    fresh = JournalBuilder(tmp_path)
    fresh.worker(rank=0)
    fresh.compile("mul", phase=Phase.WARMUP)
    body = r.render()
    assert compiles(body[0], "add") == 0.0 and compiles(body[0], "mul") == 1.0


def test_missing_journal_is_not_cached(tmp_path: Path) -> None:
    r = MetricsRenderer(tmp_path)
    assert b"jitwatch_journal_up 0" in r.render()[0]
    JournalBuilder(tmp_path).compile("add")
    assert b"jitwatch_journal_up 1" in r.render()[0]


def test_concurrent_scrapes_build_once(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add")
    r = MetricsRenderer(tmp_path)
    bodies: list[bytes] = []
    threads = [threading.Thread(target=lambda: bodies.append(r.render()[0])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(bodies)) == 1 and r.builds == 1
