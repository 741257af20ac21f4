"""Schema revision 3: a compile's specialization is stored once (``specializations``, zlib with a
preset dictionary) and events reference it; what readers see is unchanged; a revision-2 journal
upgrades in place; retention sweeps records nobody references; several writers stay consistent."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from jitwatch.core.events import EventKind, Phase
from jitwatch.store import migrations, specs
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import make_event

T0 = 1_700_000_000.0


def spec_attrs(block: int) -> dict[str, object]:
    return {
        "module": "pkg.kernels",
        "stages": {"ttir": 0.001, "cubin": 0.01},
        "signature": {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        "constexprs": {"BLOCK": block},
        "options": {"num_warps": 4, "num_stages": 3},
        "is_warmup_call": False,
        "specialization_data": json.dumps({"name": "add", "constant_vals": [block]}),
        "source_hash": "ab" * 32,
        "tp_rank": 0,
    }


def compile_event(i: int, block: int, rank: int = 0) -> object:
    return make_event(
        EventKind.COMPILE,
        T0 + i,
        rank=rank,
        phase=Phase.SERVING,
        kernel="add",
        key=f"[('*fp32', 'D'), ('i32', 'D'), {block}]",
        duration_s=0.002,
        cache_hit=True,
        attrs=spec_attrs(block),
    )


def rows(directory: Path, sql: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(directory / JOURNAL_FILE)
    try:
        return list(con.execute(sql))
    finally:
        con.close()


def test_one_record_per_specialization_and_events_read_back_whole(tmp_path: Path) -> None:
    written = [compile_event(i, 64 if i % 2 else 128, rank=i % 8) for i in range(16)]
    with Journal(tmp_path) as j:
        j.write(written)  # type: ignore[arg-type]
        back = j.events(kind=EventKind.COMPILE, limit=100, newest_first=False)
    assert rows(tmp_path, "SELECT COUNT(*) FROM specializations") == [(2,)]
    assert rows(tmp_path, "SELECT COUNT(*) FROM events WHERE key IS NULL AND spec_id IS NOT NULL") == [(16,)]
    assert [(e.key, e.attrs, e.rank) for e in back] == [(w.key, w.attrs, w.rank) for w in written]  # type: ignore[attr-defined]
    data = rows(tmp_path, "SELECT data FROM specializations")[0][0]
    assert isinstance(data, bytes) and data[0] == specs.DICT_ID
    assert b"specialization_data" not in data  # compressed


def test_a_revision_2_journal_upgrades_in_place(tmp_path: Path) -> None:
    """A journal exactly as revision 2 created it (base schema + migration 2, whole events)."""
    con = sqlite3.connect(tmp_path / JOURNAL_FILE, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    for statement in migrations._statements(migrations.BASE_SCHEMA + migrations.MIGRATIONS[0].sql):
        con.execute(statement)
    meta = {"schema_version": "1", "revision": "2", "min_reader": "2", "min_writer": "1", "written_by": "0.2.0"}
    con.executemany("INSERT INTO meta(k, v) VALUES (?, ?)", list(meta.items()))
    con.execute(
        "INSERT INTO events(ts, start_ts, duration_s, kind, rank, pid, host, phase, backend, kernel, key,"
        " cache_hit, attrs) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (T0, T0 - 1, 1.0, "compile", 0, 100, "node-a", "warmup", "triton", "add", "old-key", 0, '{"module": "m"}'),
    )
    con.close()
    with Journal(tmp_path) as j:
        assert j.schema.revision == migrations.REVISION == 4
        assert (j.schema.min_reader, j.schema.min_writer) == (4, 1)
        j.write([compile_event(1, 64), compile_event(2, 64)])  # type: ignore[list-item]
    with Journal(tmp_path, readonly=True) as j:
        evs = j.events(kind=EventKind.COMPILE, limit=10, newest_first=False)
    assert [e.key for e in evs] == ["old-key", *[compile_event(i, 64).key for i in (1, 2)]]  # type: ignore[attr-defined]
    assert evs[0].attrs == {"module": "m"} and evs[1].attrs == spec_attrs(64)
    # a revision-2 worker keeps writing whole events (no spec_id): read as before
    con = sqlite3.connect(tmp_path / JOURNAL_FILE)
    con.execute(
        "INSERT INTO events(ts, start_ts, duration_s, kind, rank, pid, host, phase, backend, kernel, key,"
        " cache_hit, attrs) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (T0 + 9, T0 + 8, 1.0, "compile", 1, 101, "node-a", "serving", "triton", "add", "k2", 1, '{"module": "m"}'),
    )
    con.commit()
    con.close()
    with Journal(tmp_path, readonly=True) as j:
        assert j.events(kind=EventKind.COMPILE, limit=1)[0].key == "k2"


def test_retention_sweeps_unreferenced_records_and_other_writers_notice(tmp_path: Path) -> None:
    a = Journal(tmp_path, retention_events=2)
    b = Journal(tmp_path)
    try:
        a.write([compile_event(0, 16), compile_event(1, 32), compile_event(2, 64)])  # type: ignore[list-item]
        b.write([compile_event(3, 16)])  # type: ignore[list-item]  # b caches the id of BLOCK=16
        assert rows(tmp_path, "SELECT COUNT(*) FROM specializations") == [(3,)]
        a.write([compile_event(4, 64)])  # type: ignore[list-item]
        a.prune(now=T0 + 5, force_gc=True)  # keeps events 3 (16) and 4 (64): the 32 record goes
        assert rows(tmp_path, "SELECT COUNT(*) FROM specializations") == [(2,)]
        a.write([compile_event(5, 128)])  # type: ignore[list-item]
        a.prune(now=T0 + 6, force_gc=True)  # keeps 4 (64) and 5 (128): the 16 record goes
        b.write([compile_event(6, 16)])  # b's cached id is stale: it must insert the record again
        evs = b.events(kind=EventKind.COMPILE, limit=1)
    finally:
        a.close()
        b.close()
    assert evs[0].attrs["constexprs"] == {"BLOCK": 16} and evs[0].key == compile_event(6, 16).key  # type: ignore[attr-defined]
    dangling = (
        "SELECT COUNT(*) FROM events WHERE spec_id IS NOT NULL AND spec_id NOT IN (SELECT id FROM specializations)"
    )
    assert rows(tmp_path, dangling) == [(0,)]


def test_a_rolled_back_batch_leaves_no_stale_cache(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        bad = make_event(EventKind.COMPILE, float("nan"), kernel="k", attrs=spec_attrs(8))
        # the aggregates' write fails: the whole batch (specialization record included) rolls back
        j._conn.execute("CREATE TRIGGER boom BEFORE INSERT ON compile_stats BEGIN SELECT RAISE(ABORT, 'x'); END")
        with pytest.raises(sqlite3.IntegrityError):
            j.write([compile_event(0, 8), compile_event(1, 8)])  # type: ignore[list-item]
        assert rows(tmp_path, "SELECT COUNT(*) FROM specializations") == [(0,)]
        j._conn.execute("DROP TRIGGER boom")
        j.write([compile_event(2, 8), bad])  # type: ignore[list-item]
        evs = j.events(kind=EventKind.COMPILE, limit=10)
    assert len(evs) == 2 and all(e.attrs["constexprs"] == {"BLOCK": 8} for e in evs)
