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
        assert j.schema.revision == migrations.REVISION >= 4
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


def test_retention_sweeps_without_being_asked_once_enough_events_retired(tmp_path: Path) -> None:
    """Without ``force_gc``: a writer sweeps once it has retired half the retention count (at least
    1,000 events) since its last sweep, so records of retired events do not pile up."""
    with Journal(tmp_path, retention_events=100, retention_seconds=10**9) as j:
        for k in range(0, 2600, 100):
            j.write([compile_event(i, 1000 + i) for i in range(k, k + 100)])  # type: ignore[misc]
        j.prune()
        kept = j.events(kind=EventKind.COMPILE, limit=1000)
    specs_left = rows(tmp_path, "SELECT COUNT(*) FROM specializations")[0][0]
    assert len(kept) == 100 and 100 <= specs_left <= 100 + 1100  # not 2,600: swept, yet every kept event whole
    assert all(e.attrs["constexprs"] == {"BLOCK": 1000 + int(e.ts - T0)} for e in kept)


def test_a_swept_highest_id_reused_by_another_writer_is_read_again(tmp_path: Path) -> None:
    """Writers keep every record's digest up to a row-id watermark (``Journal._stored_digests``).
    A sweep that deletes the highest-id record lets SQLite give its id to the next record another
    writer stores; the watermark must not make ``b`` take that record for absent (a second insert
    of its digest) or the swept one for present (a dangling ``spec_id``)."""
    a = Journal(tmp_path, retention_events=1)
    b = Journal(tmp_path)
    try:
        a.write([compile_event(0, 16), compile_event(1, 32)])  # type: ignore[list-item]  # ids 1, 2
        b.write([compile_event(2, 32)])  # type: ignore[list-item]  # b reads both records: top 2
        a.write([compile_event(3, 16)])  # type: ignore[list-item]
        a.prune(now=T0 + 4, force_gc=True)  # keeps event 3 (16): record 2 (32) goes
        assert rows(tmp_path, "SELECT id FROM specializations") == [(1,)]
        a.write([compile_event(4, 64)])  # type: ignore[list-item]  # SQLite reuses id 2 for 64
        assert rows(tmp_path, "SELECT id FROM specializations ORDER BY id") == [(1,), (2,)]
        b.write([compile_event(5, 64), compile_event(6, 32)])  # type: ignore[list-item]
        evs = b.events(kind=EventKind.COMPILE, limit=2)
    finally:
        a.close()
        b.close()
    assert [e.attrs["constexprs"] for e in evs] == [{"BLOCK": 32}, {"BLOCK": 64}]
    assert rows(tmp_path, "SELECT COUNT(*) FROM specializations") == [(3,)]  # 16, 64, 32 once each


def test_past_the_digest_bound_a_writer_looks_records_up_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``_DIGEST_MAX`` records a writer drops its digest map and finds what others stored by
    ``SELECT … IN`` (as before the watermark): still one record per specialization."""
    from jitwatch.store import journal as journal_module

    monkeypatch.setattr(journal_module, "_DIGEST_MAX", 3)
    a, b = Journal(tmp_path), Journal(tmp_path)
    try:
        a.write([compile_event(i, 8 << i) for i in range(5)])  # type: ignore[misc]
        b.write([compile_event(10 + i, 8 << i, rank=1) for i in range(6)])  # type: ignore[misc]
        assert not b._digests_complete and not b._digest_ids
        a.write([compile_event(20 + i, 8 << i) for i in range(7)])  # type: ignore[misc]
        evs = b.events(kind=EventKind.COMPILE, limit=100, newest_first=False)
    finally:
        a.close()
        b.close()
    assert rows(tmp_path, "SELECT COUNT(*) FROM specializations") == [(7,)]
    assert [e.attrs["constexprs"]["BLOCK"] for e in evs] == [8 << i for i in (*range(5), *range(6), *range(7))]


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


def test_a_rolled_back_record_is_not_taken_for_stored(tmp_path: Path) -> None:
    """The writer's digest watermark (``Journal._stored_digests``) learns the records it inserts; a
    batch rolled back after inserting one must not leave its id behind as if stored."""
    with Journal(tmp_path) as j:
        j._conn.execute("CREATE TRIGGER boom BEFORE INSERT ON compile_stats BEGIN SELECT RAISE(ABORT, 'x'); END")
        with pytest.raises(sqlite3.IntegrityError):
            j.write([compile_event(0, 8)])  # type: ignore[list-item]
        j._conn.execute("DROP TRIGGER boom")
        j.write([compile_event(1, 8)])  # type: ignore[list-item]
        evs = j.events(kind=EventKind.COMPILE, limit=10)
    assert [(e.key, e.attrs) for e in evs] == [(compile_event(1, 8).key, spec_attrs(8))]  # type: ignore[attr-defined]
    assert rows(tmp_path, "SELECT COUNT(*) FROM events WHERE spec_id IN (SELECT id FROM specializations)") == [(1,)]


def _variants() -> list[object]:
    """Compile events the fast path takes (plain JSON, small) and those it hands to the careful
    path (a home path to redact, NaN, a foreign object, attrs past the size bound, huge names)."""
    home = str(Path.home())
    base = compile_event(0, 64)
    out: list[object] = [base]
    for attrs in (
        {"small": [0] * 1000},  # fast: JSON 2,001 chars
        {"many": [0] * 5000},  # JSON past MAX_ATTRS_CHARS / 8: careful, yet not shrunk (_size 40,002)
        {"many": [0] * 9000, "keep": 1},  # careful and shrunk (_size 72,002 > 65,536)
        {"path": f"{home}/venv/lib/libdevice.10.bc"},
        {"nan": float("nan")},
        {"obj": object()},
        {"specialization_data": "y" * 70_000},  # a record past the bound: careful, value replaced
    ):
        out.append(base.model_copy(update={"attrs": {**base.attrs, **attrs}}))  # type: ignore[attr-defined]
    out.append(base.model_copy(update={"key": "k" * 20_000}))  # type: ignore[attr-defined]
    return out


def test_the_fast_path_stores_exactly_what_the_careful_path_stores(tmp_path: Path) -> None:
    """``Journal._stat_row`` skips :func:`capped`'s walk and the cleaning JSON pass for plain,
    small events; for every event the row and the specialization record are the ones the careful
    path (``capped`` then ``_store_json``) gives."""
    with Journal(tmp_path) as j:
        conn = j._conn
        for ev in _variants():
            conn.execute("BEGIN IMMEDIATE")
            try:
                fast = j._stat_row(conn, ev, True, [], [])  # type: ignore[arg-type]
                careful = j._stat_row(conn, ev, True, [], [], careful=True)  # type: ignore[arg-type]
            finally:
                conn.execute("ROLLBACK")
            j._spec_ids.clear()  # the rows were rolled back
            j._forget_digests()
            j._labels.clear()
            assert fast == careful
        j.write(_variants())  # type: ignore[arg-type]
        back = j.events(kind=EventKind.COMPILE, limit=100, newest_first=False)
    # the first (fast path) event references the record stored under its own identity, not the id
    # its rolled-back record had (which a careful-path record of another identity took next)
    base = _variants()[0]
    attrs = base.attrs  # type: ignore[attr-defined]
    own = specs.identity_digest(base.key, attrs["specialization_data"], attrs["source_hash"], attrs["module"])  # type: ignore[attr-defined]
    assert rows(
        tmp_path, "SELECT s.digest FROM events e JOIN specializations s ON s.id = e.spec_id ORDER BY e.id LIMIT 1"
    ) == [(own,)]
    assert len(back) == len(_variants())
    assert back[3].attrs["_truncated"] is True and back[3].attrs["keep"] == 1 and "_truncated" not in back[2].attrs
    assert back[4].attrs["path"] == "~/venv/lib/libdevice.10.bc"
    assert back[7].attrs["_truncated"] is True and back[7].attrs["specialization_data"] == "…[truncated]"
    assert back[8].key is not None and back[8].key.endswith("chars]")


def test_the_kernel_label_cap_holds_across_writers_and_rollbacks(tmp_path: Path) -> None:
    """Each writer counts named kernels from a rowid watermark (not a scan of ``kernels`` per new
    kernel): kernels other connections added in between count, a rolled-back batch's do not."""
    a, b = Journal(tmp_path, max_kernels=5), Journal(tmp_path, max_kernels=5)

    def ev(name: str) -> object:
        return make_event(EventKind.COMPILE, T0, kernel=name, key="k", duration_s=0.001)

    try:
        a.write([ev("a1"), ev("a2")])  # type: ignore[list-item]
        b.write([ev("b1"), ev("b2")])  # type: ignore[list-item]
        # a batch that fails as a whole (its aggregates' write): rolled back, kernels rows included
        a._conn.execute("CREATE TRIGGER boom BEFORE INSERT ON compile_stats BEGIN SELECT RAISE(ABORT, 'x'); END")
        with pytest.raises(sqlite3.IntegrityError):
            a.write([ev("rolled1"), ev("rolled2")])  # type: ignore[list-item]
        a._conn.execute("DROP TRIGGER boom")
        a.write([ev("a3")])  # type: ignore[list-item]  # the 5th named kernel: the rolled-back ones never counted
        b.write([ev("b3")])  # type: ignore[list-item]  # past the cap: folded, though b never saw a3 written
        a.write([ev("a4")])  # type: ignore[list-item]
    finally:
        a.close()
        b.close()
    labels = dict(rows(tmp_path, "SELECT name, label FROM kernels"))
    assert labels == {"a1": "a1", "a2": "a2", "b1": "b1", "b2": "b2", "a3": "a3", "b3": "_other", "a4": "_other"}


def test_one_cache_entry_per_triton_specialization(tmp_path: Path) -> None:
    """A Triton specialization is remembered once, under Triton's identity, not also under its
    ~1.5 KB record text (which halved the cache's reach and doubled its memory)."""
    with Journal(tmp_path) as j:
        j.write([compile_event(i, 16 << (i % 3), rank=i % 8) for i in range(24)])  # type: ignore[misc]
        assert len(j._spec_ids) == 3 and all(isinstance(k, tuple) for k in j._spec_ids)
        j.write([make_event(EventKind.COMPILE, T0, kernel="other", key="k", attrs={"signature": {"x": "i32"}})])
        assert len(j._spec_ids) == 4  # a capture without specialization_data: identified by its text


@pytest.mark.parametrize("how", ["restarts", "ranks"])
def test_the_sweep_falls_due_by_the_events_retired_journal_wide(tmp_path: Path, how: str) -> None:
    """The sweep is due once half the retention count (at least 1,000 events) was retired since the
    last sweep by any writer: a worker that restarts (a new connection) or several ranks sharing
    the retention passes must not each count only their own part (with N ranks the records of N
    times as many retired events waited; a worker restarting before it alone retired 1,000 events
    never swept at all)."""
    rounds = (
        [Journal(tmp_path, retention_events=100, retention_seconds=10**9) for _ in range(3)] if how == "ranks" else []
    )
    n = 0
    try:
        for k in range(4):
            j = rounds[k % 3] if rounds else Journal(tmp_path, retention_events=100, retention_seconds=10**9)
            j.write([compile_event(i, 1000 + i, rank=k % 3) for i in range(n, n + 600)])  # type: ignore[misc]
            n += 600
            j.prune(now=T0 + n)
            if not rounds:
                j.close()
            kept, records = rows(
                tmp_path, "SELECT (SELECT COUNT(*) FROM events), (SELECT COUNT(*) FROM specializations)"
            )[0]
            assert kept == 100
            assert records - kept <= 1000, (k, records)  # 600 retired per pass: swept every other pass
    finally:
        for j in rounds:
            j.close()
    assert rows(tmp_path, "SELECT COUNT(*) FROM events WHERE spec_id NOT IN (SELECT id FROM specializations)") == [(0,)]


@pytest.mark.parametrize(
    "value", ["²", "9" * 5000, "abc", "-5"], ids=["superscript digit", "5000 digits", "text", "negative"]
)
def test_a_corrupt_sweep_mark_neither_stops_retention_nor_fails_the_write(tmp_path: Path, value: str) -> None:
    """``meta.spec_swept_retired`` that is not a plain count reads as no sweep yet: ``'²'`` passes
    ``str.isdigit`` but not ``int()``, and 5,000 digits pass both checks but exceed Python's digit
    limit; either raised ``ValueError`` from every prune (retention stopped for good) and from the
    ``write`` whose events were already committed (the writer counted them as dropped)."""
    with Journal(tmp_path, retention_events=100, retention_seconds=10**9) as j:
        j.write([compile_event(i, 1000 + i) for i in range(600)])  # type: ignore[misc]
        con = sqlite3.connect(tmp_path / JOURNAL_FILE)
        con.execute("INSERT OR REPLACE INTO meta(k, v) VALUES ('spec_swept_retired', ?)", (value,))
        con.commit()
        con.close()
        assert j.prune(now=T0 + 600) == 500
        j.write([compile_event(i, 5000 + i) for i in range(600, 1700)])  # type: ignore[misc]  # prunes too
        j.write([compile_event(i, 9000 + i) for i in range(1700, 2700)])  # type: ignore[misc]  # and again
    assert rows(tmp_path, "SELECT COUNT(*) FROM events") == [(100,)]
    assert rows(tmp_path, "SELECT v FROM meta WHERE k = 'spec_swept_retired'") == [("2600",)]  # swept since
    assert rows(tmp_path, "SELECT COUNT(*) FROM specializations") == [(100,)]
