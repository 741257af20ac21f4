"""The batch write path (issue 15, third pass): multi-row inserts, Triton specializations found by
their identity with one lookup per run of events (another writer's records included), kernel
labels looked up per batch, and the faster redaction patterns — each storing exactly what the
journal promised before."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitwatch import redact as redact_mod
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store import journal as journal_mod
from jitwatch.store import specs
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import make_event

T0 = 1_700_000_000.0


def triton_attrs(block: int, *, path: str = "/opt/venv/lib/libdevice.10.bc", rank: int = 0) -> dict[str, Any]:
    data = {
        "name": "add",
        "constant_vals": [block],
        "options": {"num_warps": 4, "extern_libs": [["libdevice", path]]},
        "key": f"[('*fp32', 'D'), {block}]",
    }
    return {
        "module": "pkg.kernels",
        "stages": {"ttir": 0.001, "cubin": 0.01},
        "signature": {"x_ptr": "*fp32", "BLOCK": "constexpr"},
        "constexprs": {"BLOCK": block},
        "options": {"num_warps": 4},
        "is_warmup_call": False,
        "specialization_data": json.dumps(data),
        "source_hash": "ab" * 32,
        "rank": rank,
    }


def compile_event(i: int, block: int, *, rank: int = 0, kernel: str = "add", **attrs: Any) -> Event:
    return make_event(
        EventKind.COMPILE,
        T0 + i,
        rank=rank,
        phase=Phase.SERVING,
        kernel=kernel,
        key=f"[('*fp32', 'D'), {block}]",
        duration_s=0.002,
        cache_hit=True,
        attrs={**triton_attrs(block, rank=rank), **attrs},
    )


def query(directory: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(directory / JOURNAL_FILE)
    try:
        return list(con.execute(sql))
    finally:
        con.close()


def test_writers_of_other_ranks_find_the_specializations_stored_and_read_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One writer per rank, as each worker process has: the first to write a specialization stores
    it (compressed once), the others find it by its identity and compress nothing; every rank's
    events read back with their key and every specialization field."""
    compressed: list[str] = []
    real = specs.compress
    monkeypatch.setattr(specs, "compress", lambda text: compressed.append(text) or real(text))
    writers = [Journal(tmp_path) for _ in range(4)]
    try:
        for rank, w in enumerate(writers):
            w.write([compile_event(i, 16 << i, rank=rank) for i in range(5)])
            assert len(compressed) == 5  # only the first writer stored records
    finally:
        for w in writers:
            w.close()
    assert query(tmp_path, "SELECT COUNT(*) FROM specializations") == [(5,)]
    with Journal(tmp_path, readonly=True) as r:
        back = r.events(kind=EventKind.COMPILE, limit=100, newest_first=False)
        stats = r.stats()
    assert len(back) == 20
    for ev in back:
        block = ev.attrs["constexprs"]["BLOCK"]
        assert ev.key == f"[('*fp32', 'D'), {block}]"
        expected = triton_attrs(block, rank=ev.rank)
        assert {k: ev.attrs[k] for k in expected} == expected
    assert sorted((s.rank, s.count) for s in stats) == [(rank, 5) for rank in range(4)]


def test_ranks_in_one_batch_share_one_lookup_and_one_record(tmp_path: Path) -> None:
    """A batch holding every rank's compile of each specialization (the mixed layout): one record
    per specialization, every event pointing at its own."""
    with Journal(tmp_path) as j:
        ids = j.write([compile_event(i, 16 << (i // 8), rank=i % 8) for i in range(64)])
        back = j.events(kind=EventKind.COMPILE, limit=100, newest_first=False)
    assert ids == list(range(ids[0], ids[0] + 64))
    assert query(tmp_path, "SELECT COUNT(*) FROM specializations") == [(8,)]
    assert [e.attrs["constexprs"]["BLOCK"] for e in back] == [16 << (i // 8) for i in range(64)]
    assert [e.rank for e in back] == [i % 8 for i in range(64)]


@contextmanager
def home(user: str, directory: str) -> Iterator[None]:
    """Pretend ``HOME=directory`` and the user is ``user`` (redaction's caches cleared around)."""
    saved = (redact_mod.Path.home, redact_mod.getpass.getuser)
    import os

    old_home = os.environ.get("HOME")
    os.environ["HOME"] = directory
    redact_mod.Path.home = staticmethod(lambda: redact_mod.Path(directory))  # type: ignore[method-assign]
    redact_mod.getpass.getuser = lambda: user  # type: ignore[assignment]
    redact_mod._patterns.cache_clear()
    redact_mod._user_pattern.cache_clear()
    try:
        yield
    finally:
        redact_mod.Path.home, redact_mod.getpass.getuser = saved  # type: ignore[method-assign,assignment]
        if old_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old_home
        redact_mod._patterns.cache_clear()
        redact_mod._user_pattern.cache_clear()


def test_a_record_stored_under_its_identity_is_redacted(tmp_path: Path) -> None:
    """A specialization whose data holds the home directory (Triton's libdevice inside a venv
    there) takes the fast path and is stored redacted; a second writer finds that record; the user
    name appears nowhere in the file or the events read back."""
    journal = tmp_path / "j"
    with home("alice", "/home/alice"):
        attrs = {
            "specialization_data": triton_attrs(64, path="/home/alice/venv/libdevice.10.bc")["specialization_data"]
        }
        writers = [Journal(journal) for _ in range(2)]
        try:
            for rank, w in enumerate(writers):
                w.write([compile_event(0, 64, rank=rank, **attrs)])
        finally:
            for w in writers:
                w.close()
        with Journal(journal, readonly=True) as r:
            back = r.events(kind=EventKind.COMPILE, limit=10)
    assert len(back) == 2
    for ev in back:
        assert "~/venv/libdevice.10.bc" in ev.attrs["specialization_data"]
        assert "alice" not in json.dumps(ev.attrs)
    (data,) = query(journal, "SELECT data FROM specializations")[0:1]
    assert "alice" not in json.dumps(specs.decode(data[0]))
    assert query(journal, "SELECT COUNT(*) FROM specializations") == [(1,)]
    raw = b"".join(p.read_bytes() for p in journal.iterdir() if p.name.startswith(JOURNAL_FILE))
    assert b"alice" not in raw


@pytest.mark.parametrize("sizes", [(1,), (63, 1, 64), (65, 127), (130,), (200, 3)])
def test_multi_row_inserts_return_each_rows_id(tmp_path: Path, sizes: tuple[int, ...]) -> None:
    """Runs of compile events cut into multi-row statements of 64, 32, … 1 rows, with other events
    between runs: the ids returned are those of the rows, in order, and the aggregates count each
    event once."""
    events: list[Event] = []
    n = 0
    for size in sizes:
        events += [compile_event(n + i, 16 + (n + i) % 5, kernel=f"k{(n + i) % 7}") for i in range(size)]
        n += size
        events.append(make_event(EventKind.HOOK_ERROR, T0 + n, backend="triton", attrs={"uid": n}))
    for e in events:
        if e.kind is EventKind.COMPILE:
            e.attrs["uid"] = int(e.ts - T0)
    with Journal(tmp_path) as j:
        ids = j.write(events)
        rows = dict(query(tmp_path, "SELECT id, json_extract(attrs, '$.uid') FROM events"))
        stats = j.stats()
    assert len(ids) == len(events) and ids == sorted(ids)
    assert [rows[i] for i in ids] == [e.attrs["uid"] for e in events]
    assert sum(s.count for s in stats) == n


def test_an_unstorable_event_in_a_deferred_run_costs_only_itself(tmp_path: Path) -> None:
    """A rank past SQLite's 64-bit integers fails its multi-row statement: the run is written row
    by row, that event alone is dropped and counted, the others keep their own specialization."""
    events = [compile_event(i, 16 << i, rank=1) for i in range(6)]
    events[3] = events[3].model_copy(update={"rank": 2**70})
    with Journal(tmp_path) as j:
        ids = j.write(events)
        back = j.events(kind=EventKind.COMPILE, limit=10, newest_first=False)
        counters = j.counters()
    assert len(ids) == 5
    assert [e.attrs["constexprs"]["BLOCK"] for e in back] == [16 << i for i in (0, 1, 2, 4, 5)]
    assert [e.key for e in back] == [f"[('*fp32', 'D'), {16 << i}]" for i in (0, 1, 2, 4, 5)]
    assert counters[(0, "dropped_events")] == 1


def test_a_record_past_the_identity_bound_takes_the_careful_path(tmp_path: Path) -> None:
    """A specialization whose record is longer than ``_SPEC_BUDGET`` is stored by the careful path
    (under its text's digest), for every writer, and reads back whole."""
    big = json.dumps({"name": "add", "blob": "x" * (journal_mod._SPEC_BUDGET + 100)})
    writers = [Journal(tmp_path) for _ in range(2)]
    try:
        for rank, w in enumerate(writers):
            w.write([compile_event(0, 8, rank=rank, specialization_data=big), compile_event(1, 16, rank=rank)])
    finally:
        for w in writers:
            w.close()
    with Journal(tmp_path, readonly=True) as r:
        back = r.events(kind=EventKind.COMPILE, limit=10, newest_first=False)
    assert [e.attrs["specialization_data"] == big for e in back] == [True, False, True, False]
    assert query(tmp_path, "SELECT COUNT(*) FROM specializations") == [(2,)]
    digest = specs.digest(journal_mod._store_json(specs.split(dict(back[0].attrs), back[0].key)[1] or {}))
    assert query(tmp_path, "SELECT COUNT(*) FROM specializations WHERE digest = x'" + digest.hex() + "'") == [(1,)]


def test_kernel_labels_of_a_batch_respect_the_cap(tmp_path: Path) -> None:
    """New kernel names looked up and inserted once per batch: the first ``max_kernels`` get their
    own label in first-seen order, the rest ``_other``, across writers."""
    a, b = Journal(tmp_path, max_kernels=3), Journal(tmp_path, max_kernels=3)
    try:
        a.write([compile_event(i, 16, kernel=f"a{i % 2}") for i in range(4)])
        b.write([compile_event(i, 16, kernel=n) for i, n in enumerate(["a1", "b0", "b1", "a0", "b2"])])
        a.write([compile_event(9, 16, kernel="a2")])
    finally:
        a.close()
        b.close()
    labels = dict(query(tmp_path, "SELECT name, label FROM kernels"))
    assert labels == {"a0": "a0", "a1": "a1", "b0": "b0", "b1": "_other", "b2": "_other", "a2": "_other"}


# ---------------------------------------------------------------------------- redaction patterns
def _old_redact(text: str, homes: list[str], user: str | None) -> str:
    """jitwatch.redact as it was before the literal-first patterns (the reference)."""
    out = text
    for h in sorted(homes, key=len, reverse=True):
        out = re.sub(r"(?<![\w.\-])" + re.escape(h) + r"(?![^/\s'\",)\]}:;])", "~", out)
    out = re.sub(r"(?<![\w.])/(?:home|Users)/[^/\s'\",)\]}]+", "~", out)
    if user:
        out = re.sub(r"(?<=/)" + re.escape(user) + r"(?![^/\s'\",)\]}:;])", "<user>", out)
    return out


_FRAGMENTS = st.sampled_from(
    [
        *("/", "home", "Users", "alice", "root", "bob", ".", "-", "_", "x", " ", "'", '"', ",", ")", ":", "~", "é"),
        *("/home/", "/Users/", "/home/alice", "/root", "/alice", "/bob", "/srv/x-bob", "/rootfs", "alice/"),
    ]
)


@pytest.mark.parametrize(("user", "directory"), [("alice", "/home/alice"), ("root", "/root"), ("bob", "/srv/x-bob")])
@settings(max_examples=400, deadline=None, derandomize=True)
@given(parts=st.lists(_FRAGMENTS, max_size=12))
def test_literal_first_patterns_redact_exactly_as_before(user: str, directory: str, parts: list[str]) -> None:
    """The patterns that start with their literal (and check the character before it after it)
    change exactly what the previous patterns, with a leading lookbehind, changed."""
    text = "".join(parts)
    with home(user, directory):
        new = redact_mod.redact(text)
        may = redact_mod.may_need_redaction(text)
    expected = _old_redact(text, [directory], user if user != "root" and len(user) >= 3 else None)
    assert new == expected
    assert may or expected == text  # "no" is always right


def test_redaction_of_a_long_specialization_with_a_home_path() -> None:
    """The case the literal-first patterns are for: Triton's ``specialization_data`` naming
    libdevice inside a venv under the home directory (every path component rule still holds)."""
    data = triton_attrs(64, path="/home/alice/.venv/lib/libdevice.10.bc")["specialization_data"] * 4
    with home("alice", "/home/alice"):
        out = redact_mod.redact(data + " /scratch/alice/x /rootfs /home/alicex/y alice_kernel")
    assert "/home/alice" not in out and "~/.venv/lib/libdevice.10.bc" in out
    assert out.endswith(" /scratch/<user>/x /rootfs ~/y alice_kernel")


def test_two_raw_identities_that_redact_alike_in_one_batch_both_get_the_record(tmp_path: Path) -> None:
    """Two compiles whose ``specialization_data`` differ only in whose home directory it names
    (``/home/alice/...`` and ``/home/bob/...``, both ``~/...`` once redacted) have one identity
    digest: queued in the same run, each event still gets that record's id (neither is left with
    the placeholder id, losing its key and specialization)."""
    paths = ["/home/alice/venv/libdevice.10.bc", "/home/bob/venv/libdevice.10.bc"]
    with home("alice", "/home/alice"):
        events = [
            compile_event(i, 64, rank=i, specialization_data=triton_attrs(64, path=p)["specialization_data"])
            for i, p in enumerate(paths)
        ]
        with Journal(tmp_path) as j:
            ids = j.write(events)
            back = j.events(kind=EventKind.COMPILE, limit=10, newest_first=False)
    assert len(ids) == 2
    spec_ids = [r[0] for r in query(tmp_path, "SELECT spec_id FROM events ORDER BY id")]
    known = {r[0] for r in query(tmp_path, "SELECT id FROM specializations")}
    assert set(spec_ids) <= known, spec_ids
    for ev in back:
        assert ev.key == "[('*fp32', 'D'), 64]"
        assert "~/venv/libdevice.10.bc" in ev.attrs["specialization_data"]


def test_a_non_ascii_home_inside_tritons_ascii_json_is_redacted(tmp_path: Path) -> None:
    """Triton serializes ``specialization_data`` with ``json.dumps`` (``ensure_ascii``), so a home
    directory outside ``/home`` and ``/Users`` with a non-ASCII user name (``/data/josé``) is
    ``/data/jos\\u00e9`` there: neither it nor the user name elsewhere (``/scratch/josé``) reaches
    the journal file or the events read back."""
    with home("josé", "/data/josé"):
        data = json.dumps(
            {
                "name": "add",
                "options": {"extern_libs": [["libdevice", "/data/josé/venv/libdevice.10.bc"]]},
                "dump_dir": "/scratch/josé/triton",
            }
        )
        assert "jos\\u00e9" in data  # Triton's own encoding of it
        with Journal(tmp_path) as j:
            j.write([compile_event(0, 64, specialization_data=data)])
            (back,) = j.events(kind=EventKind.COMPILE, limit=10)
    stored = back.attrs["specialization_data"]
    assert "~/venv/libdevice.10.bc" in stored and "/scratch/<user>/triton" in stored
    assert "jos" not in json.dumps(back.attrs, ensure_ascii=False)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(JOURNAL_FILE))
    assert b"jos" not in raw
    (blob,) = query(tmp_path, "SELECT data FROM specializations")[0]
    assert "jos" not in json.dumps(specs.decode(blob), ensure_ascii=False)


def test_a_non_ascii_home_in_tritons_json_is_redacted_on_the_careful_path_too(tmp_path: Path) -> None:
    """The same ``/data/jos\\u00e9`` in ``specialization_data`` of an event whose other attrs are
    too long for the identity fast path (a serving compile's long reason): the careful path checks
    the record's JSON text, where that backslash is doubled, and must still redact it."""
    with home("josé", "/data/josé"):
        data = json.dumps({"name": "add", "options": {"extern_libs": [["libdevice", "/data/josé/venv/ld.bc"]]}})
        with Journal(tmp_path) as j:
            j.write([compile_event(0, 64, specialization_data=data, reason="r" * 3000)])
            (back,) = j.events(kind=EventKind.COMPILE, limit=10)
    assert "~/venv/ld.bc" in back.attrs["specialization_data"]
    assert "jos" not in json.dumps(back.attrs, ensure_ascii=False)
    (blob,) = query(tmp_path, "SELECT data FROM specializations")[0]
    assert "jos" not in json.dumps(specs.decode(blob), ensure_ascii=False)


def test_an_event_failing_after_its_specialization_was_queued_leaves_the_next_one_alone(tmp_path: Path) -> None:
    """An unvalidated event whose cache-hit bit is no number is dropped alone, and the event after
    it keeps its own (known) specialization: the dropped event's queued lookup used to name the row
    index the next event then took, and gave it the dropped event's record."""
    bad = compile_event(0, 16).model_copy(update={"cache_hit": "yes"})
    with Journal(tmp_path) as j:
        j.write([compile_event(1, 32)])  # known to this connection from now on
        ids = j.write([bad, compile_event(2, 32)])
        back = j.events(kind=EventKind.COMPILE, limit=10, newest_first=False)
    assert len(ids) == 1
    assert [e.attrs["constexprs"]["BLOCK"] for e in back] == [32, 32]
