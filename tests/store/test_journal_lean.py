"""The lean write loop for Triton-shaped compile events (issue 15, fourth pass): whatever a batch
holds, a journal written with it (``Journal._lean``, the default) and one written through the
general path alone hold identical tables — event rows and their ids, specialization records
(byte for byte), aggregates, kernel labels, counters — and drop exactly the same unstorable events.
Also: the statements it relies on (padded ``IN`` lists, records
inserted with ``RETURNING``) and the identity digest's exact bytes."""

from __future__ import annotations

import hashlib
import json
import math
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jitwatch import redact as redact_mod
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store import journal as journal_mod
from jitwatch.store import specs
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import make_event

T0 = 1_700_000_000.0
HOME = "/home/alice"


@pytest.fixture(autouse=True)
def _fixed_home_and_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A known home and user to redact, and a fixed clock for events whose time is not finite
    (the journal stamps them with ``time.time()``)."""
    monkeypatch.setenv("HOME", HOME)
    monkeypatch.setattr(redact_mod, "_user", lambda: "alice")
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()
    monkeypatch.setattr(journal_mod.time, "time", lambda: T0 - 1.0)
    yield
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()


def spec_data(block: int, path: str = "/opt/venv/lib/libdevice.10.bc") -> str:
    return json.dumps(
        {
            "name": "add",
            "constant_vals": [block],
            "options": {"num_warps": 4, "extern_libs": [["libdevice", path]]},
            "key": f"[('*fp32', 'D'), {block}]",
        }
    )


def cache_key_of(block: int) -> str:
    """A Triton persistent-cache hash (``metadata["hash"]``: 64 hex digits) for ``block``."""
    return hashlib.sha256(f"cache {block}".encode()).hexdigest()


def triton_attrs(block: int, rank: int = 0, **over: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "module": "pkg.kernels",
        "stages": {"ttir": 0.001, "cubin": 0.01},
        "signature": {"x_ptr": "*fp32", "BLOCK": "constexpr"},
        "constexprs": {"BLOCK": block},
        "options": {"num_warps": 4},
        "is_warmup_call": False,
        "specialization_data": spec_data(block),
        "source_hash": "ab" * 32,
        "cache_key": cache_key_of(block),
        "declared_constexprs": ["BLOCK"],
        "rank": rank,
    }
    attrs.update(over)
    return {k: v for k, v in attrs.items() if v is not _DROP}


_DROP = object()


def compile_event(i: int, block: int, *, rank: int = 0, kernel: str | None = "add", **over: Any) -> Event:
    fields: dict[str, Any] = {
        "rank": rank,
        "phase": Phase.SERVING,
        "kernel": kernel,
        "key": f"[('*fp32', 'D'), {block}]",
        "duration_s": 0.002,
        "cache_hit": True,
        "attrs": triton_attrs(block, rank),
    }
    fields.update({k: v for k, v in over.items() if k in Event.model_fields})
    attrs_over = {k: v for k, v in over.items() if k not in Event.model_fields}
    fields["attrs"] = {**fields["attrs"], **attrs_over}
    fields["attrs"] = {k: v for k, v in fields["attrs"].items() if v is not _DROP}
    kind = fields.pop("kind", EventKind.COMPILE)
    ts = fields.pop("ts", T0 + i)
    return make_event(kind, ts, **fields)


def unchecked(ev: Event, **update: Any) -> Event:
    """``ev`` with fields set without validation (what a foreign caller of ``Journal.write`` may pass)."""
    return ev.model_copy(update=update)


def tables(directory: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = sqlite3.connect(directory / JOURNAL_FILE)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {n: list(con.execute(f'SELECT * FROM "{n}" ORDER BY rowid')) for n in names}
    finally:
        con.close()


def same_tables(a: dict[str, list[tuple[Any, ...]]], b: dict[str, list[tuple[Any, ...]]]) -> None:
    """Equal, with NaN equal to itself (SQLite stores none, but compare safely)."""
    assert a.keys() == b.keys()
    for name in a:
        assert len(a[name]) == len(b[name]), name
        for ra, rb in zip(a[name], b[name], strict=True):
            assert all(x == y or (x != x and y != y) for x, y in zip(ra, rb, strict=True)), (name, ra, rb)
            assert [type(x) for x in ra] == [type(y) for y in rb], (name, ra, rb)


def write_both(root: Path, batches: list[list[Event]], writers: int = 1) -> tuple[list[list[int]], list[list[int]]]:
    """The same batches through ``writers`` connections (batch ``b`` by writer ``b % writers``), once
    with the lean loop and once without; asserts identical tables; returns both ids."""
    ids: dict[bool, list[list[int]]] = {}
    for lean in (True, False):
        d = root / ("lean" if lean else "general")
        js = [Journal(d) for _ in range(writers)]
        try:
            for j in js:
                j._lean = lean
            ids[lean] = [js[b % writers].write(batch) for b, batch in enumerate(batches)]
        finally:
            for j in js:
                j.close()
    same_tables(tables(root / "lean"), tables(root / "general"))
    return ids[True], ids[False]


def crafted() -> list[Event]:
    """46 events: the common shape and each thing that sends one off it."""
    big = 2**70
    nan, inf = float("nan"), float("inf")
    base = compile_event(0, 16)
    return [
        base,  # 1 the common shape
        compile_event(1, 16, rank=1),  # 2 same specialization, another rank
        compile_event(2, 32),  # 3 a new one
        compile_event(3, 32),  # 4 known now
        compile_event(4, 64, key=None),  # 5 no key
        compile_event(5, 64, kernel=None),  # 6 no kernel
        compile_event(6, 64, kernel=""),  # 7 empty kernel name
        compile_event(7, 128, kernel="kérnel_ß", key="ключ[('*fp32', 'D'), 128]"),  # 8 non-ASCII
        compile_event(8, 128, key="[\ud800]"),  # 9 lone surrogate in the key
        compile_event(9, 128, kernel="k\udfff"),  # 10 … in the kernel name
        compile_event(10, 256, specialization_data=spec_data(256, "/opt/\ud800/lib.bc")),  # 11 … in the data
        compile_event(11, 256, note="x\ud800y"),  # 12 … in another attr
        compile_event(12, 512, specialization_data=spec_data(512, f"{HOME}/venv/libdevice.10.bc")),  # 13 home path
        compile_event(13, 512, key=f"[{HOME}/k]"),  # 14 home path in the key
        compile_event(14, 512, module=f"{HOME}.mod", source_hash="/home/bob/src"),  # 15 in module, hash
        compile_event(15, 512, file="/scratch/alice/x.py"),  # 16 user name in another attr
        compile_event(16, 1024, duration_s=nan, start_ts=inf),  # 17 non-finite times
        unchecked(compile_event(17, 1024), ts=nan),  # 18 non-finite event time
        compile_event(18, 1024, stages={"ttir": nan, "cubin": -inf}),  # 19 NaN inside attrs
        compile_event(19, 2048, key="k" * 17_000),  # 20 key past MAX_KEY_CHARS
        compile_event(20, 2048, kernel="n" * 17_000),  # 21 kernel past the cap
        unchecked(compile_event(21, 2048), host="h" * 17_000),  # 22 host past the cap
        compile_event(22, 4096, specialization_data="s" * 7_000),  # 23 record past _SPEC_BUDGET
        compile_event(23, 4096, blob="b" * 7_000),  # 24 other attrs past _REST_BUDGET
        compile_event(24, 4096, blob="b" * 70_000),  # 25 attrs past MAX_ATTRS_CHARS
        compile_event(25, 8192, rank=big),  # 26 an int past 64 bits in a column: dropped
        compile_event(26, 8192, count=big),  # 27 … in attrs (JSON holds it)
        compile_event(27, 8192, constexprs={"BLOCK": big}),  # 28 … in the record
        compile_event(28, 8192, reason_class="shape change", reason="x changed"),  # 29 a recompile reason
        compile_event(29, 16, cache="remote"),  # 30 a remote-cache hit
        compile_event(30, 16, cache="remote", cache_hit=False),  # 31 … a miss
        compile_event(31, 16, cache_hit=None),  # 32 no cache-hit bit
        compile_event(32, 16, kind=EventKind.AUTOTUNE),  # 33 another compile-like kind
        compile_event(33, 16, kind=EventKind.GRAPH_CAPTURE, specialization_data=_DROP),  # 34
        compile_event(34, 16, source_hash=None, module=_DROP),  # 35 no hash, no module
        compile_event(35, 16, source_hash=7),  # 36 a hash that is not a string
        compile_event(36, 16, specialization_data={"not": "a string"}),  # 37
        compile_event(37, 16, odd=(1, 2), obj=object()),  # 38 a tuple and a foreign object
        unchecked(compile_event(38, 16), rank=True, pid=3.0),  # 39 unvalidated number types
        compile_event(39, 16384, cache_key=_DROP),  # 40 no cache hash: identified by its data
        compile_event(40, 16384),  # 41 the same specialization with one: another identity
        compile_event(41, 16384, cache_key=7),  # 42 a cache hash that is not a string
        compile_event(42, 16384, cache_key=f"{HOME}/x"),  # 43 … that is not alphanumeric
        compile_event(43, 16384, specialization_data=spec_data(16384, "/opt/venv2/lib/libdevice.10.bc")),  # 44
        compile_event(44, 32768, specialization_data=spec_data(32768, f"{HOME}/venv/ld.10.bc")),  # 45
        compile_event(  # 46 same hash, other data of that length: the first's record (Triton's artifact)
            45, 32768, rank=1, specialization_data=spec_data(32768, "/" + "o" * (len(HOME) - 1) + "/venv/ld.10.bc")
        ),
    ]


def general_path_events(monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """The events a lean journal hands to the general path (``Journal._stat_row``, not careful),
    appended to the returned list as they are written."""
    general: list[Event] = []
    real = Journal._stat_row

    def counting(self: Journal, conn: Any, ev: Event, *args: Any, **kwargs: Any) -> Any:
        if self._lean and not kwargs.get("careful"):
            general.append(ev)
        return real(self, conn, ev, *args, **kwargs)

    monkeypatch.setattr(Journal, "_stat_row", counting)
    return general


def test_crafted_events_store_identical_tables_and_drop_only_the_unstorable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each crafted event alone, then all of them in one batch with other kinds between them, then
    again (everything known to the connection): identical tables; the lean loop took the common
    shape itself (the general path saw only the others)."""
    evs = crafted()
    assert len(evs) == 46
    general = general_path_events(monkeypatch)
    others = [
        make_event(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
        make_event(EventKind.REQUEST_STALL, T0 + 0.5, duration_s=0.01, attrs={"compile_seconds_by_backend": {}}),
    ]
    mixed = [x for i, ev in enumerate(evs) for x in ([ev, others[i % 2]] if i % 5 == 0 else [ev])]
    lean_ids, general_ids = write_both(tmp_path, [[ev] for ev in evs] + [mixed, evs])
    assert lean_ids == general_ids
    assert general and all(ev is not evs[0] and ev is not evs[1] and ev is not evs[3] for ev in general)
    with Journal(tmp_path / "lean", readonly=True) as r:
        dropped = sum(v for (_, name), v in r.counters().items() if name == "dropped_events")
    assert dropped == 3  # the 64-bit-overflowing rank, three times; nothing else


def test_one_writer_per_rank_finds_other_writers_records_identically(tmp_path: Path) -> None:
    """The realistic layout: one connection per rank, each rank's batch of every specialization,
    interleaved; the first writer of each stores the records, the others find them."""
    batches = [
        [compile_event(b * 8 + i, 16 << (b * 8 + i), rank=r) for i in range(8)] for b in range(3) for r in range(4)
    ]
    lean_ids, general_ids = write_both(tmp_path, batches, writers=4)
    assert lean_ids == general_ids
    assert tables(tmp_path / "lean")["specializations"] and len(tables(tmp_path / "lean")["specializations"]) == 24


class SubEvent(Event):
    """An :class:`Event` subclass: the lean loop reads its fields by attribute, not from ``__dict__``."""


def test_subclassed_and_incomplete_events_store_identical_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean loop reads an ``Event``'s fields from its ``__dict__`` in one call: an ``Event``
    subclass (read by attribute) is stored as the general path stores it, by the lean loop itself;
    one whose ``__dict__`` lacks a field (a foreign caller's doing) goes to the general path, which
    drops and counts it, as without the lean loop."""
    general = general_path_events(monkeypatch)
    subs = [
        SubEvent(**{k: getattr(ev, k) for k in Event.model_fields})
        for ev in (compile_event(1, 32), compile_event(2, 64))
    ]
    missing = compile_event(3, 128)
    del missing.__dict__["pid"]
    with pytest.raises(AttributeError):
        _ = missing.pid
    batches = [[subs[0], missing, compile_event(4, 16)], [compile_event(5, 16), subs[1], subs[0]]]
    lean_ids, general_ids = write_both(tmp_path, batches, writers=2)
    assert lean_ids == general_ids and [len(ids) for ids in lean_ids] == [2, 3]
    assert general == [missing]
    with Journal(tmp_path / "lean", readonly=True) as r:
        assert sum(v for (_, name), v in r.counters().items() if name == "dropped_events") == 1


# --------------------------------------------------------------------------- property test
_ODD_TEXT = st.sampled_from(
    ["add", "kérnel", "k\ud800", "", "a/b", f"{HOME}/x", "/home/bob/y", "/scratch/alice/z", "x" * 17_000, "ключ"]
)
_NUMBER = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2**63 - 1, 2**63, -(2**63) - 1, 1e-05, 1e16, 5e-324, -0.0, None]),
)


@st.composite
def odd_event(draw: st.DrawFn, i: int) -> Event:
    block = draw(st.sampled_from([16, 32, 64]))
    rank = draw(st.one_of(st.integers(0, 3), st.sampled_from([2**64, -1])))
    over: dict[str, Any] = {}
    for name, strategy in (
        ("kernel", st.one_of(st.none(), _ODD_TEXT)),
        ("key", st.one_of(st.none(), _ODD_TEXT)),
        ("duration_s", st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))),
        ("cache_hit", st.one_of(st.none(), st.booleans())),
        ("specialization_data", st.one_of(_ODD_TEXT, st.just(spec_data(block, f"{HOME}/lib.bc")))),
        ("module", st.one_of(st.just(_DROP), st.none(), _ODD_TEXT)),
        ("source_hash", st.one_of(st.just(_DROP), st.none(), _ODD_TEXT, st.integers())),
        (
            "cache_key",
            st.one_of(
                st.just(_DROP), st.none(), _ODD_TEXT, _NUMBER, st.sampled_from([cache_key_of(16), "AB" * 32, [1]])
            ),
        ),
        ("declared_constexprs", st.one_of(st.just(_DROP), _ODD_TEXT, st.lists(_ODD_TEXT, max_size=3))),
        ("extra", st.one_of(_ODD_TEXT, _NUMBER, st.lists(_NUMBER, max_size=3))),
        ("reason_class", st.just(_DROP) | st.sampled_from(["shape change", "made up"])),
        ("cache", st.just(_DROP) | st.just("remote")),
        ("kind", st.sampled_from([EventKind.COMPILE] * 4 + [EventKind.AUTOTUNE])),
    ):
        if draw(st.integers(0, 3)) == 0:
            over[name] = draw(strategy)
    return compile_event(i, block, rank=rank, **over)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_odd_batches_store_identical_tables(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Generated batches of odd compile events (non-ASCII, lone surrogates, home paths, NaN/inf,
    17k-character keys, ints past 64 bits, other kinds, recompile reasons, remote caches, cache
    hashes and declared constexprs of odd types and values), written
    in several batches, through two connections: identical tables, lean loop or not. 40 examples of
    10 batches each (400 batches)."""
    root = tmp_path_factory.mktemp("odd")
    batches = []
    for b in range(10):
        n = data.draw(st.integers(1, 8))
        batches.append([data.draw(odd_event(b * 8 + i)) for i in range(n)])
    lean_ids, general_ids = write_both(root, batches, writers=2)
    assert lean_ids == general_ids


def test_seeded_random_batches_of_plain_compiles_store_identical_tables(tmp_path: Path) -> None:
    """Larger batches of ordinary compiles (mostly known, some new, ranks mixed): identical tables,
    ids consecutive; exercises every multi-row chunk size."""
    rnd = random.Random(15)
    batches = [
        [
            compile_event(b * 300 + i, 16 << rnd.randrange(40), rank=rnd.choice([0, 0, 0, 1]))
            for i in range(rnd.randrange(1, 300))
        ]
        for b in range(6)
    ]
    lean_ids, _ = write_both(tmp_path, batches)
    for ids in lean_ids:
        assert ids == list(range(ids[0], ids[0] + len(ids)))


# --------------------------------------------------------------------------- the statements
def test_in_lists_are_padded_to_powers_of_two(tmp_path: Path) -> None:
    """Every lookup length uses one of nine statements; the rows are those of the unpadded list."""
    con = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    con.execute("CREATE TABLE k(name TEXT PRIMARY KEY, label TEXT)")
    con.executemany("INSERT INTO k VALUES (?, ?)", [(f"n{i}", f"l{i}") for i in range(300)])
    sizes = set()
    real = journal_mod._in_sql

    def spy(head: str, size: int) -> str:
        sizes.add(size)
        return real(head, size)

    journal_mod._in_sql = spy  # type: ignore[assignment]
    try:
        for n in range(1, 300, 7):
            names = [f"n{i}" for i in range(n)] + ["missing"]
            got = sorted(journal_mod._select_in(con, "SELECT name, label FROM k WHERE name", names))
            assert got == sorted((f"n{i}", f"l{i}") for i in range(n))
    finally:
        journal_mod._in_sql = real  # type: ignore[assignment]
    assert sizes <= {1 << k for k in range(9)}
    con.close()


@pytest.mark.parametrize("returning", [True, False])
def test_new_records_get_their_own_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, returning: bool) -> None:
    """New specialization records inserted together (``RETURNING``, or one by one on SQLite < 3.35)
    each get their own row id, read back whole."""
    monkeypatch.setattr(journal_mod, "_RETURNING", returning and sqlite3.sqlite_version_info >= (3, 35, 0))
    with Journal(tmp_path) as j:
        j.write([compile_event(i, 16 << i) for i in range(70)])
        back = j.events(kind=EventKind.COMPILE, limit=100, newest_first=False)
    assert [e.attrs["constexprs"]["BLOCK"] for e in back] == [16 << i for i in range(70)]
    assert len({e.key for e in back}) == 70


def test_identity_digest_bytes_are_unchanged() -> None:
    """The identity other writers (and older jitwatch) look records up by: the same bytes as its
    definition spelled out."""
    for key, data, source_hash, module in [
        ("k", "d" * 1500, "ab" * 32, "m.n"),
        ("ключ", "dé", None, None),
        ("", "", "", "%s%d"),
    ]:
        head = (
            f"{specs._IDENTITY_TAG}{len(key)}:{len(data)}:"
            f"{'-' if source_hash is None else len(source_hash)}:{'-' if module is None else len(module)}"
            f"\x00{key}{source_hash or ''}{module or ''}"
        )
        want = hashlib.sha256((head + data).encode()).digest()[:16]
        assert specs.identity_digest(key, data, source_hash, module) == want
        cache_key = "0f" * 32
        cached = (
            f"\x00jitwatch-triton-spec-cached-1{len(key)}:{len(data)}:"
            f"{'-' if source_hash is None else len(source_hash)}:{'-' if module is None else len(module)}:"
            f"{len(cache_key)}\x00{key}{source_hash or ''}{module or ''}{cache_key}"
        )
        want = hashlib.sha256(cached.encode()).digest()[:16]
        assert specs.identity_digest(key, data, source_hash, module, cache_key) == want
        assert specs.identity_digest(key, data + "x", source_hash, module, cache_key) != want  # the length counts


def test_run_rows_store_keys_exactly(tmp_path: Path) -> None:
    """A run's event rows bind the key column as ``NULLIF(?, 0)`` (``journal._run_row``): a key held
    in its specialization record is stored ``NULL``, and every key text an event keeps in its row —
    ``"0"``, ``""``, ``"0.0"``, non-ASCII — is stored as that text, through the lean loop and the
    general path alike, in multi-row chunks and one by one (a chunk with an unstorable event)."""
    keys = ["0", "", "0.0", " 0", "00", "ключ", "[('*fp32', 'D'), 16]"]
    for lean in (True, False):
        d = tmp_path / ("lean" if lean else "general")
        with Journal(d) as j:
            j._lean = lean
            plain = [
                make_event(EventKind.AUTOTUNE, T0 + i, kernel="k", key=key, duration_s=0.1, attrs={"n": i})
                for i, key in enumerate(keys)
            ]
            triton = [compile_event(100 + i, 16 << i) for i in range(3)]
            j.write(plain + triton)  # multi-row chunks
            j.write([*plain, compile_event(200, 16, rank=2**70), *triton])  # one by one: the rank overflows
        con = sqlite3.connect(d / JOURNAL_FILE)
        try:
            rows = list(con.execute("SELECT key, spec_id FROM events ORDER BY id"))
        finally:
            con.close()
        want = [(key, None) for key in keys] + [(None, spec) for spec in (1, 2, 3)]
        assert rows == want * 2, lean


def test_compress_matches_a_fresh_compressor() -> None:
    """``specs.compress`` copies one compressor primed with the dictionary at import: its records
    are byte for byte those of a new ``compressobj`` given the dictionary (what older jitwatch
    wrote), and they decode."""
    import zlib

    texts = [
        "",
        "{}",
        json.dumps(triton_attrs(16), separators=(",", ":")),
        json.dumps({"key": "ключ", "specialization_data": spec_data(1 << 20) * 40}, ensure_ascii=False),
    ]
    for text in texts * 2:  # the primed one is never used itself: the same output every time
        comp = zlib.compressobj(
            9, zlib.DEFLATED, specs._WBITS, specs._MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, specs._DICTS[specs.DICT_ID]
        )
        want = bytes([specs.DICT_ID]) + comp.compress(text.encode()) + comp.flush()
        assert specs.compress(text) == want
        if text.startswith("{"):
            assert specs.decode(want) == json.loads(text)


@pytest.mark.parametrize("encoder", ["stdlib", "stdlib_public"])
def test_lean_loop_without_orjson_or_the_c_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoder: str
) -> None:
    """Where orjson is not installed (``_compact_json`` is the stdlib encoder) and where the stdlib's
    C encoder is not used either (its public ``JSONEncoder``), both paths encode the attrs with that
    encoder: the same tables."""
    stdlib = journal_mod._stdlib_json
    if encoder == "stdlib_public":
        stdlib = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    monkeypatch.setattr(journal_mod, "_compact_json", stdlib)
    evs = crafted() + float_events()
    lean_ids, general_ids = write_both(tmp_path, [evs, evs], writers=2)
    assert lean_ids == general_ids
    con = sqlite3.connect(tmp_path / "lean" / JOURNAL_FILE)
    try:
        texts = [r[0] for r in con.execute("SELECT attrs FROM events")]
    finally:
        con.close()
    assert any('"tiny":1e-05' in t for t in texts)  # the stdlib's float text: this encoder wrote them


def float_events() -> list[Event]:
    """Compile events whose attrs hold floats whose shortest text differs between encoders
    (``1e-05`` / ``0.00001``), the extremes, a negative zero, non-ASCII text, a ``None`` beside a
    float (orjson's ``null`` guard), and NaN nested deep."""
    floats = {"tiny": 1e-05, "big": 1e16, "sub": 5e-324, "neg0": -0.0, "max": 1.7976931348623157e308, "third": 1 / 3}
    return [
        compile_event(40, 16, stages={"ttir": 1e-05, "cubin": 0.0001234}, **floats),  # known specialization
        compile_event(41, 77, stages={"ttir": 1e-07}, note="ключ é 漢字 \u2028", **floats),  # a new one, non-ASCII
        compile_event(42, 16, stages={"ttir": 1e-05}, gone=None, **floats),  # None: null in orjson's text
        compile_event(43, 78, stages={"ttir": 2.5e-06, "nested": [{"x": float("nan")}]}),  # NaN deep: careful
        compile_event(44, 16, stages={"ttir": 1e-05}, count=2**64 - 1, low=-(2**63), text="null"),
    ]


def test_float_texts_and_non_ascii_store_identical_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Floats written differently by orjson and the stdlib (``1e-05``), 5e-324, -0.0, non-ASCII text:
    the lean loop and the general path store identical tables (the lean loop took the plain ones
    itself), and every float reads back as the same ``float``, sign of zero included."""
    general = general_path_events(monkeypatch)
    evs = float_events()
    lean_ids, general_ids = write_both(tmp_path, [evs, evs[::-1], evs], writers=2)
    assert lean_ids == general_ids
    assert evs[0] not in general and evs[1] not in general  # the lean loop's own
    with Journal(tmp_path / "lean", readonly=True) as r:
        back = r.events(kind=EventKind.COMPILE, limit=100, newest_first=False)
    assert len(back) == 3 * len(evs)
    for ev in back[: len(evs)]:
        want = next(e for e in evs if e.ts == ev.ts).attrs
        for name, value in want.items():
            if name == "stages" and "nested" in value:
                assert ev.attrs[name]["nested"] == [{"x": "nan"}]  # the careful path's text, as before
                continue
            got = ev.attrs[name]
            assert got == value and type(got) is type(value), name
            if isinstance(value, float):
                assert math.copysign(1.0, got) == math.copysign(1.0, value), name


@pytest.mark.parametrize("home", [HOME, "relative/home", "/home/al%ce/x"])
def test_redaction_precheck_is_may_need_redaction(monkeypatch: pytest.MonkeyPatch, home: str) -> None:
    """The lean loop's inline check (``redact.redaction_precheck``) says what
    ``may_need_redaction`` says, for the current home (a relative ``$HOME`` makes a needle without a
    ``/``), on texts with and without each needle."""
    monkeypatch.setenv("HOME", home)
    redact_mod._patterns.cache_clear()
    slash_only, search = redact_mod.redaction_precheck()
    needles = redact_mod._needles()
    texts = ["", "plain", "a/b", "/home/bob/x", "/Users/x", "/scratch/alice/y", "x/alice", "ali ce", spec_data(16)]
    texts += [f"<{n}>" for n in needles] + [json.dumps(f"{n}/é") for n in needles] + [spec_data(16, f"{home}/l.bc")]
    for text in texts:
        inline = not (slash_only and "/" not in text) and search(text) is not None
        assert inline == redact_mod.may_need_redaction(text), text
    assert any(redact_mod.may_need_redaction(t) for t in texts) and not redact_mod.may_need_redaction("plain")


@pytest.mark.parametrize("lean", [True, False])
def test_triton_cache_hash_identifies_the_record(tmp_path: Path, lean: bool) -> None:
    """With Triton's cache hash (``attrs.cache_key``) a specialization's record is found by the key,
    source hash, module, cache hash and the data's length (``specs.identity_digest``), not by hashing
    the data: one compiled artifact is one record, on every rank. The hash is kept in the record
    (readers get it back in ``attrs``) and data with a home path is stored redacted."""
    home_data = spec_data(64, f"{HOME}/venv/libdevice.10.bc")
    same_len = spec_data(64, "/" + "o" * (len(HOME) - 1) + "/venv/libdevice.10.bc")
    first = compile_event(0, 64, specialization_data=home_data)
    other_rank = compile_event(1, 64, rank=1, specialization_data=same_len)
    longer = compile_event(2, 64, rank=2, specialization_data=spec_data(64, "/opt/venv2/lib/libdevice.10.bc"))
    no_hash = compile_event(3, 64, rank=3, cache_key=_DROP, specialization_data=same_len)
    writers = [Journal(tmp_path / "j") for _ in range(4)]
    try:
        for j in writers:
            j._lean = lean
        for j, ev in zip(writers, [first, other_rank, longer, no_hash], strict=True):
            j.write([ev])
    finally:
        for j in writers:
            j.close()
    con = sqlite3.connect(tmp_path / "j" / JOURNAL_FILE)
    try:
        spec_ids = [r[0] for r in con.execute("SELECT spec_id FROM events ORDER BY id")]
        records = {i: specs.decode(d) for i, d in con.execute("SELECT id, data FROM specializations")}
    finally:
        con.close()
    assert spec_ids[0] == spec_ids[1]  # same hash, key and data length: the first writer's record
    assert len({spec_ids[0], spec_ids[2], spec_ids[3]}) == 3  # another length; no hash: by the data
    rec = records[spec_ids[0]]
    assert rec["cache_key"] == cache_key_of(64)
    assert HOME not in rec["specialization_data"] and "libdevice.10.bc" in rec["specialization_data"]
    assert "cache_key" not in records[spec_ids[3]]
    with Journal(tmp_path / "j", readonly=True) as r:
        back = {e.rank: e for e in r.events()}
    assert back[1].attrs["cache_key"] == cache_key_of(64) and back[1].key == first.key
    assert back[3].attrs.get("cache_key") is None


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize(
    "cache_key",
    ["", "abc-def", 7, True, 1.5, "x" * 64, "١٢٣", "AB" * 32, "a" * 70_000, [1], {"h": 1}],
    ids=["empty", "dash", "int", "bool", "float", "x64", "arabic-digits", "upper-hex", "huge", "list", "dict"],
)
def test_a_cache_key_that_is_not_tritons_hash_does_not_identify_the_record(
    tmp_path: Path, lean: bool, cache_key: Any
) -> None:
    """Only Triton's persistent-cache hash (64 lowercase hex digits) stands for the data it was
    computed from: any other ``cache_key`` value (another producer's, a truncated one) leaves the
    record identified by its whole text. Two compiles with one such value, the same key, source
    hash and module and data of one length but different data each read back their own data; a
    value that cannot be a dict key (a list) is stored, not dropped."""
    a = spec_data(64, "/opt/venvA/lib/libdevice.10.bc")
    b = spec_data(64, "/opt/venvB/lib/libdevice.10.bc")
    assert len(a) == len(b)
    with Journal(tmp_path / "j") as j:
        j._lean = lean
        j.write([compile_event(0, 64, specialization_data=a, cache_key=cache_key)])
        j.write([compile_event(1, 64, specialization_data=b, cache_key=cache_key)])
    with Journal(tmp_path / "j", readonly=True) as r:
        back = sorted(r.events(), key=lambda e: e.ts)
        dropped = sum(v for (_, name), v in r.counters().items() if name == "dropped_events")
    assert dropped == 0
    assert [e.attrs["specialization_data"] for e in back] == [a, b]


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("field, value", [("source_hash", [1]), ("module", {"m": 1}), ("source_hash", 7)])
def test_a_source_hash_or_module_of_another_type_is_stored(tmp_path: Path, lean: bool, field: str, value: Any) -> None:
    """A source hash or module that is not a string (a foreign caller's) leaves the record identified
    by its text: stored and read back, not dropped because a list cannot be a dict key; two such
    compiles with different data each read back their own."""
    a = spec_data(64, "/opt/venvA/lib/libdevice.10.bc")
    b = spec_data(64, "/opt/venvB/lib/libdevice.10.bc")
    with Journal(tmp_path / "j") as j:
        j._lean = lean
        j.write([compile_event(0, 64, specialization_data=a, cache_key=_DROP, **{field: value})])
        j.write([compile_event(1, 64, specialization_data=b, cache_key=_DROP, **{field: value})])
    with Journal(tmp_path / "j", readonly=True) as r:
        back = sorted(r.events(), key=lambda e: e.ts)
        dropped = sum(v for (_, name), v in r.counters().items() if name == "dropped_events")
    assert dropped == 0
    assert [e.attrs["specialization_data"] for e in back] == [a, b]
    assert [e.attrs[field] for e in back] == [value, value]


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("with_cache_key", [True, False])
def test_a_record_cut_by_the_size_caps_is_not_shown_for_the_next_compile(
    tmp_path: Path, lean: bool, with_cache_key: bool
) -> None:
    """An event whose attrs are past ``MAX_ATTRS_CHARS`` is cut (``capped``: later values become
    ``…[truncated]``); its specialization record, cut with it, is stored under its text. When the
    fields that identify a Triton specialization (module, source hash, data, cache hash) came before
    the cut and the signature after it, the connection remembered that cut record under the
    specialization's identity, and the next ordinary compile of it read back ``signature:
    "…[truncated]"``: it now gets a whole record of its own."""
    base = triton_attrs(64)
    if not with_cache_key:
        del base["cache_key"]
    ident = ("module", "source_hash", "specialization_data", "cache_key")
    first = {k: base[k] for k in ident if k in base}
    pad = journal_mod.MAX_ATTRS_CHARS - journal_mod._size(first, 10**9) - 16 * 4002 - 10
    odd = {**first, **{f"blob{i}": "b" * 4000 for i in range(16)}, "pad": "p" * pad}
    odd.update({k: v for k, v in base.items() if k not in first})
    cut = compile_event(0, 64).model_copy(update={"attrs": odd})
    assert journal_mod.capped(cut).attrs["signature"] == "…[truncated]"
    plain = compile_event(1, 64, rank=1, cache_key=cache_key_of(64) if with_cache_key else _DROP)
    with Journal(tmp_path / "j") as j:
        j._lean = lean
        j.write([cut])
        j.write([plain])
    with Journal(tmp_path / "j", readonly=True) as r:
        back = sorted(r.events(), key=lambda e: e.ts)
    assert back[0].attrs["signature"] == "…[truncated]" and back[0].attrs["_truncated"] is True
    assert back[1].attrs["signature"] == base["signature"]
    assert back[1].attrs["constexprs"] == base["constexprs"] and "_truncated" not in back[1].attrs
