"""Journal schema migrations (jitwatch.store.migrations): a journal written by jitwatch 0.1.0 is
upgraded in place with nothing lost; 0.1 and 0.2 workers share one journal during a rollout; a
journal of a newer schema is never moved aside.

The "old release" is real code: ``tests/store/legacy_v0_1`` is the 0.1.0 storage layer, frozen.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.errors import JournalCorruptError, JournalVersionError
from jitwatch.store import migrations
from jitwatch.store.journal import JOURNAL_FILE, Journal, open_or_recover
from jitwatch.store.writer import JournalWriter
from jitwatch.testing import make_event
from jitwatch.views.metrics import render
from jitwatch.views.status import build_status
from tests._paths import ROOT
from tests.store.legacy_v0_1 import events as old_events
from tests.store.legacy_v0_1 import journal as old_journal

T0 = 1_700_000_000.0


def old_release_journal(directory: Path) -> None:
    """A realistic journal written by jitwatch 0.1.0: two ranks, warmup and serving compiles, an
    autotune run, a disk-cache hit, a hook error, dropped events, and retention that retired some."""
    E, K, P = old_events.Event, old_events.EventKind, old_events.Phase

    def ev(kind: old_events.EventKind, ts: float, rank: int = 0, **f: object) -> old_events.Event:
        return E(kind=kind, ts=ts, rank=rank, pid=100 + rank, host="node-a", **f)  # type: ignore[arg-type]

    with old_journal.Journal(directory, retention_events=12) as j:
        for rank in (0, 1):
            j.write([ev(K.WORKER_START, T0, rank, attrs={"mode": "warn", "triton_version": "3.6.0", "hooks": ["x"]})])
            j.write([ev(K.WARMUP_START, T0 + 1, rank, phase=P.WARMUP)])
            j.write(
                [
                    ev(K.COMPILE, T0 + 2, rank, phase=P.WARMUP, kernel="add", key=f"k{rank}", duration_s=0.25),
                    ev(
                        K.COMPILE,
                        T0 + 2.5,
                        rank,
                        phase=P.WARMUP,
                        kernel="mul",
                        key="m",
                        duration_s=0.002,
                        cache_hit=True,
                    ),
                    ev(K.AUTOTUNE, T0 + 2.7, rank, phase=P.WARMUP, kernel="mm", key="a", duration_s=1.5),
                ]
            )
            j.write(
                [
                    ev(
                        K.WARMUP_COMPLETE,
                        T0 + 3,
                        rank,
                        phase=P.SERVING,
                        start_ts=T0 + 1,
                        duration_s=2.0,
                        attrs={"kernels_compiled": 2, "compile_seconds": 0.252},
                    )
                ]
            )
            j.write([ev(K.COMPILE, T0 + 5, rank, phase=P.SERVING, kernel="add", key="k9", duration_s=40.0)])
        j.write([ev(K.HOOK_ERROR, T0 + 6, attrs={"hook": "x"}), ev(K.DROPPED, T0 + 7, attrs={"count": 4})])
        j.prune(now=T0 + 8)  # 16 events, 12 kept: 4 retired


def snapshot(directory: Path) -> dict[str, object]:
    """Everything a reader can see: events, aggregates, counters, workers, /metrics samples."""
    with Journal(directory, readonly=True) as j:
        out: dict[str, object] = {
            "events": [e.model_dump(exclude={"backend"}) for e in j.events(limit=10_000, newest_first=False)],
            "stats": sorted(
                (s.backend, s.kernel, s.phase.value, s.rank, s.kind, s.count, round(s.seconds, 9), s.cache_hits)
                for s in j.stats()
            ),
            "hist": {f"{b}/{r}/{p.value}": c for (b, r, p), c in j.histogram().items()},
            "counters": j.counters(),
            "workers": [(w.rank, w.state.value, w.warmup_duration_s, w.attrs) for w in j.workers()],
        }
    text = render(directory)[0].decode()
    out["metrics"] = sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in parse_text(text)
        for s in f.samples
        if s.name != "jitwatch_build_info"
    )
    return out


def test_a_new_reader_reads_an_old_journal_as_it_is(tmp_path: Path) -> None:
    """The sidecar (read-only) never migrates: it reads 0.1's tables as backend triton."""
    old_release_journal(tmp_path)
    before = (tmp_path / JOURNAL_FILE).read_bytes()
    snap = snapshot(tmp_path)
    assert (tmp_path / JOURNAL_FILE).read_bytes() == before  # untouched
    with Journal(tmp_path, readonly=True) as j:
        assert j.schema.revision == 1 and j.schema.written_by == "0.1"
    stats = snap["stats"]
    assert ("triton", "add", "serving", 0, "compile", 1, 40.0, 0) in stats  # type: ignore[operator]
    assert ("triton", "mm", "warmup", 1, "autotune", 1, 1.5, 0) in stats  # type: ignore[operator]
    metrics = dict(((n, lab), v) for n, lab, v in snap["metrics"])  # type: ignore[misc, union-attr]
    # add: 0.25 s in warmup and 40 s in serving, on ranks 0 and 1
    assert metrics[("jitwatch_compile_seconds_total", (("backend", "triton"), ("kernel", "add")))] == 80.5
    lab = (("backend", "triton"), ("phase", "warmup"))
    assert metrics[("jitwatch_compiles_total", lab)] == 4  # add and mul, on ranks 0 and 1
    assert metrics[("jitwatch_hook_errors_total", (("backend", "triton"), ("rank", "0")))] == 1
    assert metrics[("jitwatch_journal_retired_events_total", ())] == 4
    ranks = build_status(Journal(tmp_path, readonly=True)).ranks
    assert [(r.rank, [b.name for b in r.backends], r.triton_version) for r in ranks] == [
        (0, ["triton"], "3.6.0"),
        (1, ["triton"], "3.6.0"),
    ]


def test_upgrade_in_place_keeps_every_event_and_aggregate(tmp_path: Path) -> None:
    old_release_journal(tmp_path)
    before = snapshot(tmp_path)
    with Journal(tmp_path) as j:  # a 0.2 writer opens it: upgraded, in one transaction
        assert j.schema.revision == migrations.REVISION
        assert (j.schema.min_reader, j.schema.min_writer) == (4, 1)
    after = snapshot(tmp_path)
    assert after == before  # every event, aggregate, counter, worker row and metric sample
    con = sqlite3.connect(tmp_path / JOURNAL_FILE)
    meta = dict(con.execute("SELECT k, v FROM meta"))
    con.close()
    assert meta["schema_version"] == "1"  # what 0.1 checks: it keeps writing here
    assert meta["revision"] == str(migrations.REVISION) and meta["written_by"]
    # new writes add to the old aggregates
    with Journal(tmp_path) as j:
        j.write([make_event(EventKind.COMPILE, T0 + 20, phase=Phase.SERVING, kernel="add", duration_s=1.0)])
        add = [s for s in j.stats() if (s.kernel, s.phase, s.rank, s.kind) == ("add", Phase.SERVING, 0, "compile")]
    assert [(s.count, s.seconds) for s in add] == [(2, 41.0)]


def test_upgrade_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old_release_journal(tmp_path)
    broken = migrations.Migration(2, "broken", migrations.MIGRATIONS[0].sql + "\nCREATE TABLE oops (;", 2, 1)
    monkeypatch.setattr(migrations, "MIGRATIONS", (broken,))
    with pytest.raises(sqlite3.OperationalError):
        Journal(tmp_path)
    con = sqlite3.connect(tmp_path / JOURNAL_FILE)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    keys = {r[0] for r in con.execute("SELECT k FROM meta")}
    con.close()
    assert "compile_stats" not in tables and "revision" not in keys  # rolled back


OLD_WORKER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from tests.store.legacy_v0_1.journal import Journal
    from tests.store.legacy_v0_1.events import Event, EventKind, Phase
    rank, n = int(sys.argv[2]), int(sys.argv[3])
    with Journal(Path(sys.argv[1])) as j:
        j.write([Event.now(EventKind.WORKER_START, rank=rank, attrs={{"mode": "warn"}})])
        for i in range(n):
            j.write([Event.now(EventKind.COMPILE, rank=rank, phase=Phase.SERVING, kernel="old_k", key=str(i),
                               duration_s=0.5)])
            time.sleep(0.002)
    print("ok")
    """
)


@pytest.mark.slow
def test_rolling_upgrade_old_and_new_workers_share_one_journal(tmp_path: Path) -> None:
    """0.1 workers (real 0.1 code, separate processes) and 0.2 workers write one journal at the
    same time: nothing is moved aside, nothing is lost, the 0.2 sidecar sums both."""
    old_release_journal(tmp_path)
    code = OLD_WORKER.format(root=str(ROOT))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    olds = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(r), "150"], env=env, stdout=subprocess.PIPE)
        for r in (10, 11)
    ]
    writer = JournalWriter(tmp_path, rank=20)
    writer.submit(make_event(EventKind.WORKER_START, T0, rank=20, attrs={"mode": "warn"}))
    for i in range(300):
        writer.submit(
            make_event(
                EventKind.COMPILE, T0 + i, rank=20, phase=Phase.SERVING, kernel="new_k", key=str(i), duration_s=0.5
            )
        )
    writer.close()
    for p in olds:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == b"ok"
    assert writer.dropped_total == 0
    assert not list(tmp_path.glob("journal.db.corrupt-*"))  # no writer moved the file aside
    with Journal(tmp_path, readonly=True) as j:
        counts: dict[tuple[str, str, int], int] = {}
        for s in j.stats():
            if s.kind == "compile":
                counts[(s.backend, s.kernel, s.rank)] = counts.get((s.backend, s.kernel, s.rank), 0) + s.count
        assert j.schema.revision == migrations.REVISION
    assert counts[("triton", "old_k", 10)] == counts[("triton", "old_k", 11)] == 150  # 0.1 rows: triton
    assert counts[("triton", "new_k", 20)] == 300
    assert counts[("triton", "add", 0)] == 2  # the 0.1 journal's own history


def _set_meta(directory: Path, **values: object) -> None:
    con = sqlite3.connect(directory / JOURNAL_FILE)
    con.executemany("INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", [(k, str(v)) for k, v in values.items()])
    con.commit()
    con.close()


def test_newer_schema_is_never_moved_aside(tmp_path: Path) -> None:
    Journal(tmp_path).close()
    _set_meta(tmp_path, revision=99, min_writer=99, min_reader=2, written_by="9.0.0")
    before = (tmp_path / JOURNAL_FILE).read_bytes()
    with pytest.raises(JournalVersionError) as info:
        open_or_recover(tmp_path)
    message = str(info.value)
    assert "revision 99 (written by jitwatch 9.0.0)" in message and f"revision {migrations.REVISION}" in message
    assert "\n" not in message
    assert (tmp_path / JOURNAL_FILE).read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))
    # a worker keeps running: its events are counted as dropped, the file stays
    writer = JournalWriter(tmp_path)
    writer.submit(make_event(EventKind.COMPILE, T0, kernel="k"))
    writer.close()
    assert writer.dropped_total == 1 and "JournalVersionError" in (writer.fault or "")
    assert not list(tmp_path.glob("*.corrupt-*"))
    with Journal(tmp_path, readonly=True) as j:  # still readable: min_reader 2
        assert j.schema.revision == 99
    _set_meta(tmp_path, min_reader=99)
    with pytest.raises(JournalVersionError, match="needs schema revision 99 or newer to read it"):
        Journal(tmp_path, readonly=True)
    text = render(tmp_path)[0].decode()
    assert [(s.name, s.value) for f in parse_text(text) for s in f.samples] == [("jitwatch_journal_up", 0.0)]
    st = build_status(None, error="x")
    assert not st.journal_up


def test_newer_additive_schema_is_written_and_not_downgraded(tmp_path: Path) -> None:
    Journal(tmp_path).close()
    _set_meta(tmp_path, revision=7, min_writer=1, min_reader=1, written_by="0.9.0")
    with Journal(tmp_path) as j:
        j.write([make_event(EventKind.COMPILE, T0, kernel="k", duration_s=0.1)])
        assert j.schema.revision == 7
        assert [s.count for s in j.stats()] == [1]


def test_a_database_that_is_not_a_journal(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / JOURNAL_FILE)
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    with pytest.raises(JournalCorruptError, match="not a jitwatch journal"):
        Journal(tmp_path, readonly=True)


def test_events_written_by_0_1_keep_their_backend(tmp_path: Path) -> None:
    old_release_journal(tmp_path)
    with Journal(tmp_path, readonly=True) as j:
        compiles = j.events(kind=EventKind.COMPILE, backend="triton", limit=100)
        starts = j.events(kind=EventKind.WORKER_START, limit=100)
    assert compiles and all(isinstance(e, Event) and e.backend == "triton" for e in compiles)
    assert json.loads(json.dumps(starts[0].attrs))["triton_version"] == "3.6.0"


# ----------------------------------------------------------------------- revision 3: recompile_stats
def _rev2_journal(directory: Path) -> None:
    """A journal as revision-2 code left it: revision 3's and 4's changes undone, meta set back."""
    with Journal(directory) as j:
        j.write([make_event(EventKind.WORKER_START, ts=T0)])
    conn = sqlite3.connect(directory / JOURNAL_FILE)
    conn.execute("DROP TABLE recompile_stats")
    conn.execute("DROP TABLE specializations")
    conn.execute("ALTER TABLE events DROP COLUMN spec_id")
    conn.execute("CREATE INDEX events_backend ON events(backend)")
    conn.execute("UPDATE meta SET v='2' WHERE k='revision'")
    conn.commit()
    conn.close()


def test_revision_2_journal_gets_recompile_stats_and_counts_reasons(tmp_path: Path) -> None:
    _rev2_journal(tmp_path)
    with Journal(tmp_path, readonly=True) as old:
        assert old.recompile_stats() == []  # a reader never migrates; no table → nothing
    reason = "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1"

    def compile_event(ts: float, cls: str | None, phase: Phase = Phase.SERVING) -> Event:
        attrs = {"reason": reason, "reason_class": cls} if cls else {}
        return make_event(
            EventKind.COMPILE, ts=ts, phase=phase, backend="torch_compile", kernel="f", duration_s=0.5, attrs=attrs
        )

    with Journal(tmp_path) as j:
        assert j.schema.revision == migrations.REVISION >= 3
        j.write(
            [
                compile_event(T0 + 1, "first compile", Phase.WARMUP),  # not a recompile
                compile_event(T0 + 2, "size mismatch"),
                compile_event(T0 + 3, "size mismatch"),
                compile_event(T0 + 4, "free text that is no class: 0/0 ~ /home/alice/x.py"),  # bounded
                compile_event(T0 + 5, None),  # Triton-like: no reason_class
            ]
        )
        rows = {(r.reason_class, r.phase): r for r in j.recompile_stats()}
    assert set(rows) == {("size mismatch", Phase.SERVING), ("other", Phase.SERVING)}
    size = rows[("size mismatch", Phase.SERVING)]
    assert (size.count, size.seconds, size.last_reason, size.label) == (2, 1.0, reason, "f")


def test_an_empty_database_is_not_yet_a_journal_not_a_corrupt_one(tmp_path: Path) -> None:
    """A worker creates the file, then commits the schema in one transaction: a reader in between
    sees an empty database. That is "no journal yet" (FileNotFoundError, as for a missing file),
    never corruption, which would make a sidecar report the journal down or a CLI say corrupt."""
    (tmp_path / JOURNAL_FILE).touch()
    with pytest.raises(FileNotFoundError, match="not a jitwatch journal yet"):
        Journal(tmp_path, readonly=True)
    Journal(tmp_path).close()  # a writer then creates the schema in that same file
    with Journal(tmp_path, readonly=True) as j:
        assert j.count_events() == 0


def _schema_version(directory: Path) -> int:
    con = sqlite3.connect(directory / JOURNAL_FILE)
    try:
        return int(con.execute("PRAGMA schema_version").fetchone()[0])
    finally:
        con.close()


def _indexes(directory: Path) -> set[str]:
    con = sqlite3.connect(directory / JOURNAL_FILE)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='events'")}
    finally:
        con.close()


def test_a_revision_4_journal_drops_events_kernel_and_reads_the_same(tmp_path: Path) -> None:
    """Revision 5 drops the per-kernel index in place; per-kernel reads give the same answer (a
    scan of the log, newest first) and every other event-log index stays."""
    con = sqlite3.connect(tmp_path / JOURNAL_FILE, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    script = migrations.BASE_SCHEMA + "".join(m.sql for m in migrations.MIGRATIONS if m.revision <= 4)
    for statement in migrations._statements(script):
        con.execute(statement)
    meta = {"schema_version": "1", "revision": "4", "min_reader": "4", "min_writer": "1", "written_by": "0.3.0"}
    con.executemany("INSERT INTO meta(k, v) VALUES (?, ?)", list(meta.items()))
    for i in range(30):
        con.execute(
            "INSERT INTO events(ts, start_ts, duration_s, kind, rank, pid, host, phase, backend, kernel, key,"
            " cache_hit, attrs) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (T0 + i, None, 0.01, "compile", 0, 1, "h", "warmup", "triton", f"k{i % 3}", f"key{i}", 0, "{}"),
        )
    con.close()
    assert "events_kernel" in _indexes(tmp_path)
    with Journal(tmp_path, readonly=True) as j:
        before = [e.model_dump() for e in j.events(kernel="k1", limit=5)]
    with Journal(tmp_path) as j:
        assert j.schema.revision == migrations.REVISION >= 5
        j.write([make_event(EventKind.COMPILE, T0 + 100, phase=Phase.SERVING, kernel="k2", key="new", duration_s=1)])
    assert _indexes(tmp_path) == {"events_ts", "events_serving"}
    with Journal(tmp_path, readonly=True) as j:
        assert [e.model_dump() for e in j.events(kernel="k1", limit=5)] == before
        assert [e.key for e in j.events(kernel="k2", limit=2)] == ["new", "key29"]
        assert len(j.events(kernel="k0", limit=100, newest_first=False)) == 10
    cookie = _schema_version(tmp_path)
    Journal(tmp_path).close()  # opening again changes nothing (a sidecar rebuilds on a schema change)
    assert _indexes(tmp_path) == {"events_ts", "events_serving"} and _schema_version(tmp_path) == cookie


def test_an_older_writer_recreates_events_kernel_and_a_new_one_drops_it_again(tmp_path: Path) -> None:
    """jitwatch 0.1's schema script (real 0.1 code) creates ``events_kernel`` again when it opens
    a revision-5 journal and keeps writing there; the next revision-5 writer drops it again."""
    Journal(tmp_path).close()
    assert "events_kernel" not in _indexes(tmp_path)
    E, K, P = old_events.Event, old_events.EventKind, old_events.Phase
    with old_journal.Journal(tmp_path) as old:
        old.write([E(kind=K.COMPILE, ts=T0, rank=3, pid=7, host="h", phase=P.WARMUP, kernel="old_k", key="o")])
    assert {"events_kernel", "events_phase_kind"} <= _indexes(tmp_path)
    with Journal(tmp_path) as j:
        assert j.schema.revision == migrations.REVISION
    assert _indexes(tmp_path) == {"events_ts", "events_serving"}
    with Journal(tmp_path, readonly=True) as j:
        assert [(e.kernel, e.key, e.rank) for e in j.events(kernel="old_k")] == [("old_k", "o", 3)]


def _revision_5_journal(directory: Path, phases: list[str]) -> None:
    """A journal exactly as revision 5 left it, with one compile event per entry of ``phases``."""
    con = sqlite3.connect(directory / JOURNAL_FILE, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    script = migrations.BASE_SCHEMA + "".join(m.sql for m in migrations.MIGRATIONS if m.revision <= 5)
    for statement in migrations._statements(script):
        if not statement.startswith("CREATE INDEX IF NOT EXISTS events_kernel "):
            con.execute(statement)
    meta = {"schema_version": "1", "revision": "5", "min_reader": "4", "min_writer": "1", "written_by": "0.3.0"}
    con.executemany("INSERT INTO meta(k, v) VALUES (?, ?)", list(meta.items()))
    now = time.time()
    for i, phase in enumerate(phases):
        con.execute(
            "INSERT INTO events(ts, start_ts, duration_s, kind, rank, pid, host, phase, backend, kernel, key,"
            " cache_hit, attrs) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (now - 100 + i, None, 0.01, "compile", 0, 1, "h", phase, "triton", f"k{i % 3}", f"key{i}", 0, "{}"),
        )
    con.close()


def _phase_literals() -> list[str]:
    from jitwatch.store.journal import _PHASE_LITERAL

    return list(_PHASE_LITERAL.values())


def _plans(directory: Path, read: Callable[[Journal], object]) -> list[str]:
    """What SQLite does for every ``SELECT … LIMIT`` that ``read`` runs on a reader (``EXPLAIN QUERY
    PLAN`` of the statement as prepared, parameters bound as they were: a partial index serves only
    a query whose own text implies its ``WHERE``)."""

    class Recording:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn, self.calls = conn, []

        def execute(self, sql: str, args: Any = ()) -> sqlite3.Cursor:
            self.calls.append((sql, args))
            return self.conn.execute(sql, args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

    with Journal(directory, readonly=True) as j:
        conn = j._conn
        recording = Recording(conn)
        j._conn = recording  # type: ignore[assignment]
        try:
            read(j)
        finally:
            j._conn = conn
        return [
            str(r[3])
            for sql, args in recording.calls
            if sql.startswith("SELECT") and "LIMIT" in sql
            for r in conn.execute("EXPLAIN QUERY PLAN " + sql, args)
        ]


def test_a_revision_5_journal_gets_the_serving_index_and_lists_serving_compiles_by_it(tmp_path: Path) -> None:
    """Revision 6 replaces ``events_phase_kind`` by ``events_serving`` (a partial index of the
    serving events' kind) in place; the serving compiles read the same, through the new index, and
    other phases' reads the same too (a scan, newest first)."""
    phases = ["warmup"] * 40 + ["serving", "warmup", "serving", "startup"] * 5
    _revision_5_journal(tmp_path, phases)
    assert _indexes(tmp_path) == {"events_ts", "events_phase_kind"}

    def reads(j: Journal) -> list[object]:
        return [
            [e.model_dump() for e in j.events(kind=EventKind.COMPILE, phase=p, limit=7)]
            for p in (Phase.SERVING, Phase.WARMUP, Phase.STARTUP)
        ]

    with Journal(tmp_path, readonly=True) as j:
        before = reads(j)
    with Journal(tmp_path) as j:
        assert j.schema.revision == migrations.REVISION >= 6
    assert _indexes(tmp_path) == {"events_ts", "events_serving"}
    with Journal(tmp_path, readonly=True) as j:
        after = reads(j)
    assert after == before and [len(x) for x in after] == [7, 7, 5]  # type: ignore[arg-type]
    plans = _plans(tmp_path, lambda j: j.events(kind=EventKind.COMPILE, phase=Phase.SERVING, limit=7))
    assert any("USING INDEX events_serving" in p for p in plans), plans
    assert not any("TEMP B-TREE" in p for p in plans), plans  # newest first straight from the index
    # a serving read of every kind (the runbook's `/jit/events?phase=serving&kernel=…`) too
    plans = _plans(tmp_path, lambda j: j.events(phase=Phase.SERVING, kernel="k1", limit=7))
    assert any("USING INDEX events_serving" in p for p in plans), plans
    with Journal(tmp_path, readonly=True) as j:
        every = [e.key for e in j.events(limit=1000)]
        assert [e.key for e in j.events(phase=Phase.SERVING, kernel="k1", limit=3)] == [
            k for k, p in zip(every, reversed(phases), strict=True) if p == "serving" and int(k[3:]) % 3 == 1
        ][:3]
    assert set(_phase_literals()) == {p.value for p in Phase}  # every phase can be named in SQL


def test_a_revision_5_reader_still_reads_serving_compiles_of_a_revision_6_journal(tmp_path: Path) -> None:
    """A sidecar of revisions 4-5 binds the phase as a parameter (``phase = ?``) where this code
    names it as a literal; the answer is the same (SQLite plans a bound value too, so it may take
    the partial index either way)."""
    with Journal(tmp_path) as j:
        now = time.time()
        j.write(
            [
                make_event(EventKind.COMPILE, now + i, phase=Phase.SERVING if i % 4 == 0 else Phase.WARMUP, key=f"{i}")
                for i in range(40)
            ]
        )
    con = sqlite3.connect(f"file:{tmp_path / JOURNAL_FILE}?mode=ro", uri=True)
    try:
        old_style = [
            r[0]
            for r in con.execute(
                "SELECT key FROM events WHERE kind IN (?) AND phase = ? ORDER BY events.id DESC LIMIT ?",
                ("compile", "serving", 5),
            )
        ]
    finally:
        con.close()
    with Journal(tmp_path, readonly=True) as j:
        assert [e.key for e in j.events(kind=EventKind.COMPILE, phase=Phase.SERVING, limit=5)] == old_style
    assert old_style == ["36", "32", "28", "24", "20"]
