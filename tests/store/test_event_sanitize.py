"""One malformed event loses only itself: structural redaction, UTF-8-safe text, per-event drops.

Real SQLite journals; the first test goes through the monitor, its writer thread and a real
(compile-only) Triton compile inside a request whose id the client picked.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import MonitorHarness, fresh_kernel_cache
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

HOSTILE_ID = '/home/alice\\"}, "x": "'  # a home path, a backslash, then a quote: JSON text redaction broke it


def _compile(**attrs: Any) -> Event:
    base: dict[str, Any] = {
        "kind": EventKind.COMPILE,
        "phase": Phase.SERVING,
        "backend": "triton",
        "kernel": "k",
        "key": "[('i32', '')]",
        "duration_s": 0.01,
        "ts": time.time(),
        "host": "h",
        "pid": 1,
    }
    base.update(attrs)
    return Event(**base)


def test_request_id_with_home_path_and_quote_keeps_the_serving_compile(harness: MonitorHarness) -> None:
    """The compile inside a request named ``/home/alice\\"…`` is journaled (redacted), and so is
    everything in its batch."""
    fresh_kernel_cache(kf.scale_copy)
    harness.monitor.activate()
    with harness.monitor.request(HOSTILE_ID):
        kf.scale_copy.warmup(torch.zeros(64), torch.zeros(64), 64, BLOCK=16, grid=(1,))
    kf.scale_copy.warmup(torch.zeros(64), torch.zeros(64), 64, BLOCK=32, grid=(1,))
    compiles = harness.compiles(Phase.SERVING)
    assert len(compiles) == 2, compiles
    named = [e for e in compiles if e.attrs.get("request")]
    assert len(named) == 1
    assert named[0].attrs["request"] == '~"}, "x": "'  # the value redacted (home + user name), its quote intact
    with Journal(harness.journal_dir, readonly=True) as j:
        assert j.counters().get((0, "dropped_events"), 0) == 0


def test_lone_surrogates_are_replaced_not_fatal(tmp_path: Path) -> None:
    """A lone surrogate (not encodable as UTF-8) in the key, the kernel or an attribute key/value."""
    with Journal(tmp_path) as j:
        ids = j.write(
            [
                _compile(key="[('i32', '\ud800')]"),
                _compile(kernel="k\udfff", attrs={"\ud83d": ["x\udc80", {"n": float("inf")}]}),
                _compile(),
            ]
        )
        assert len(ids) == 3
        events = j.events(newest_first=False)
    assert [e.key for e in events] == ["[('i32', '?')]", "[('i32', '')]", "[('i32', '')]"]
    assert events[1].kernel == "k?" and events[1].attrs == {"?": ["x?", {"n": "inf"}]}


def test_unstorable_event_dropped_alone_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A rank beyond SQLite's 64-bit integers cannot be stored: that event is dropped and counted,
    the four others of the batch are written, aggregates included."""
    batch = [_compile(kernel=f"k{i}") for i in range(5)]
    batch[2] = _compile(kernel="bad", rank=2**70)
    with Journal(tmp_path) as j:
        ids = j.write(batch)
        assert len(ids) == 4
        assert [e.kernel for e in j.events(newest_first=False)] == ["k0", "k1", "k3", "k4"]
        assert j.counters()[(0, "dropped_events")] == 1.0
        stats = j._conn.execute("SELECT kernel FROM compile_stats ORDER BY kernel").fetchall()
        assert [r[0] for r in stats] == ["k0", "k1", "k3", "k4"]  # no half-written aggregate for "bad"
        j.write([_compile(kernel="bad", rank=2**70)])
        assert j.counters()[(0, "dropped_events")] == 2.0
    assert sum("dropped an event that cannot be stored" in r.message for r in caplog.records) == 1


def test_redaction_is_structural(tmp_path: Path) -> None:
    """Values and keys are redacted wherever they are nested; JSON punctuation in values survives."""
    with Journal(tmp_path) as j:
        j.write(
            [
                _compile(
                    key="[('/home/bob/x', 'D')]",
                    attrs={"a": {"/home/bob/k": ["/home/bob/lib.bc", 'q"/home/bob\\"']}, "n": 3},
                )
            ]
        )
        (ev,) = j.events()
    assert ev.key == "[('~/x', 'D')]"
    assert ev.attrs == {"a": {"~/k": ["~/lib.bc", 'q"~"']}, "n": 3}


def test_worker_row_attrs_are_stored_like_events(tmp_path: Path) -> None:
    """``set_inflight`` and ``backend_ready`` rewrite the worker row's attrs through the events'
    storing path: home paths redacted (also ones a row already held, e.g. from an older
    jitwatch), non-ASCII kept as UTF-8 rather than ``\\uXXXX`` escapes that hide it from
    redaction, NaN stored as its name."""
    import sqlite3

    with Journal(tmp_path) as j:
        j.write([Event.now(EventKind.WORKER_START, host="h", pid=1, attrs={"mode": "warn"})])
        with sqlite3.connect(tmp_path / "journal.db") as raw:  # a row an older writer left
            raw.execute("""UPDATE workers SET attrs='{"mode": "warn", "note": "/home/bob/old"}'""")
        assert j.set_inflight("h", 1, 0, [{"kernel": "fn at /home/bob/model.py", "start_ts": 1.0, "x": "é"}], 2.0)
        j.write(
            [
                Event.now(
                    EventKind.BACKEND_READY,
                    host="h",
                    pid=1,
                    backend="late",
                    attrs={"state": "active", "hooks": ["/home/bob/late.py"], "version": "1"},
                )
            ]
        )
        (w,) = j.workers()
        (text,) = j._conn.execute("SELECT attrs FROM workers").fetchone()
    assert w.attrs["note"] == "~/old"
    assert w.attrs["inflight"] == [{"kernel": "fn at ~/model.py", "start_ts": 1.0, "x": "é"}]
    assert w.attrs["backends"]["late"]["hooks"] == ["~/late.py"]
    assert "/home/bob" not in text and "é" in text


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    __repr__ = __str__


def test_foreign_object_whose_str_raises_costs_only_that_value(tmp_path: Path) -> None:
    """A host object in attrs whose ``__str__`` raises (RuntimeError, not a storage error) used to
    fail the whole batch ("cannot write its journal", 0 of 2 written): now that value is stored as
    ``<unprintable TYPE>`` and both events are written, in either order."""
    bad = _compile(attrs={"v": _Unprintable(), "nested": {_Unprintable(): 1}})
    good = _compile(attrs={"ok": 1})
    with Journal(tmp_path) as j:
        j.write([bad, good])
        j.write([good, bad])
        events = j.events(kind=EventKind.COMPILE, newest_first=False)
    assert len(events) == 4
    weird = [e for e in events if "v" in e.attrs]
    assert len(weird) == 2 and all(e.attrs["v"] == "<unprintable _Unprintable>" for e in weird)


def test_an_inflating_specialization_record_is_refused_on_read(tmp_path: Path) -> None:
    """Someone who can write the journal file replaces a specialization record with a few hundred
    bytes inflating to 200 MB: readers refuse the record (the event keeps its other fields)
    instead of serving 200 MB keys from /jit."""
    import sqlite3
    import zlib

    from jitwatch.store import specs

    with Journal(tmp_path) as j:
        j.write([_compile(attrs={"ok": 1, "signature": {"x": "*fp32"}})])
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = bytes([specs.DICT_ID]) + comp.compress(b'{"key":"' + b"k" * 200_000_000 + b'"}') + comp.flush()
    assert len(bomb) < 300_000
    con = sqlite3.connect(tmp_path / "journal.db")
    con.execute("UPDATE specializations SET data = ?", (bomb,))
    con.commit()
    con.close()
    with Journal(tmp_path, readonly=True) as j:
        (ev,) = j.events(kind=EventKind.COMPILE)
    assert ev.attrs.get("spec_unreadable") is True
    assert len(ev.key or "") < 20_000


def test_reason_class_label_is_bounded_to_the_known_classes(tmp_path: Path) -> None:
    """A backend (third-party, say) that puts free text in ``attrs.reason_class`` cannot grow the
    ``reason_class`` label: anything outside RECOMPILE_REASON_CLASSES is stored as ``other``."""
    from jitwatch.backends.base import RECOMPILE_REASON_CLASSES

    phrases = [f"expected 8 actual {n}" for n in range(20)] + ["size mismatch"]
    with Journal(tmp_path) as j:
        j.write([_compile(backend="toyjit", attrs={"reason_class": p, "reason": p}) for p in phrases])
        classes = {r.reason_class: r.count for r in j.recompile_stats()}
    assert classes == {"other": 20, "size mismatch": 1}
    assert set(classes) <= set(RECOMPILE_REASON_CLASSES)
