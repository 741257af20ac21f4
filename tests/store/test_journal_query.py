"""Journal.events: its ``kind`` and ``phase`` filters take the enums, their string values, and (for
``kind``) iterables of either; anything else is a clear jitwatch error naming the accepted values."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jitwatch.core.events import EventKind, Phase
from jitwatch.errors import ConfigError, JitwatchError
from jitwatch.store.journal import Journal
from jitwatch.testing import JournalBuilder, MonitorHarness, RecordingSink, make_event


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    jb = JournalBuilder(tmp_path)
    jb.worker(0)
    jb.write(
        jb.event(EventKind.COMPILE, jb.t0 + 1, kernel="warm_k", key="k1", phase=Phase.WARMUP, duration_s=0.1),
        jb.event(EventKind.WARMUP_COMPLETE, jb.t0 + 2, phase=Phase.SERVING, duration_s=2.0),
        jb.event(EventKind.COMPILE, jb.t0 + 3, kernel="late_k", key="k2", phase=Phase.SERVING, duration_s=0.2),
    )
    return tmp_path


def _kernels(events: list) -> list[str | None]:
    return [e.kernel for e in events]


def test_kind_and_phase_as_strings_match_the_enums(journal: Path) -> None:
    with Journal(journal, readonly=True) as j:
        by_enum = j.events(kind=EventKind.COMPILE, newest_first=False)
        assert _kernels(by_enum) == ["warm_k", "late_k"]
        assert j.events(kind="compile", newest_first=False) == by_enum
        assert j.events(kind=["compile"], newest_first=False) == by_enum
        assert j.events(kind=("compile", EventKind.WARMUP_COMPLETE), newest_first=False) == j.events(
            kind=[EventKind.COMPILE, EventKind.WARMUP_COMPLETE], newest_first=False
        )
        assert [e.kind for e in j.events(kind={"warmup_complete"})] == [EventKind.WARMUP_COMPLETE]
        assert _kernels(j.events(kind="compile", phase="serving")) == ["late_k"]
        assert j.events(kind="compile", phase="serving") == j.events(kind=EventKind.COMPILE, phase=Phase.SERVING)
        assert j.events(kind=[]) == []


def test_defaults_are_newest_first_and_100(tmp_path: Path) -> None:
    jb = JournalBuilder(tmp_path)
    jb.write(*(jb.event(EventKind.COMPILE, jb.t0 + i, kernel=f"k{i}", key="k") for i in range(120)))
    with Journal(tmp_path, readonly=True) as j:
        got = j.events(kind="compile")
    assert _kernels(got) == [f"k{i}" for i in range(119, 19, -1)]


@pytest.mark.parametrize(
    ("kw", "accepted"),
    [
        ({"kind": "compiles"}, "'compile'"),
        ({"kind": ["compile", "nope"]}, "'warmup_complete'"),
        ({"kind": 7}, "'compile'"),
        ({"kind": [None]}, "'compile'"),
        ({"phase": "Serving"}, "'startup', 'warmup', 'serving'"),
        ({"phase": EventKind.COMPILE}, "'serving'"),
    ],
)
def test_unknown_values_are_a_clear_error(journal: Path, kw: dict, accepted: str) -> None:
    (param,) = kw
    with Journal(journal, readonly=True) as j:
        with pytest.raises(ConfigError) as info:
            j.events(**kw)
        assert j.events(kind="compile")  # the connection still answers
    assert isinstance(info.value, JitwatchError) and isinstance(info.value, ValueError)
    assert f"{param}=" in str(info.value) and accepted in str(info.value)


def test_harness_compiles_takes_a_phase_value(harness: MonitorHarness) -> None:
    """``MonitorHarness.compiles`` filtered by ``e.phase is phase``: a phase value matched nothing."""
    jb = JournalBuilder(harness.journal_dir)
    jb.write(jb.event(EventKind.COMPILE, time.time(), kernel="late_k", key="k", phase=Phase.SERVING))
    assert _kernels(harness.compiles("serving")) == _kernels(harness.compiles(Phase.SERVING)) == ["late_k"]
    assert harness.compiles("warmup") == []
    with pytest.raises(ConfigError, match="'startup', 'warmup', 'serving'"):
        harness.compiles("served")


def test_recording_sink_of_kind_takes_a_kind_value() -> None:
    """``RecordingSink.of_kind`` filtered by ``e.kind is kind``: a kind value matched nothing."""
    sink = RecordingSink()
    sink.submit(make_event(EventKind.COMPILE, 1.0, kernel="k"))
    sink.submit(make_event(EventKind.WARMUP_START, 2.0))
    assert [e.kernel for e in sink.of_kind("compile")] == [e.kernel for e in sink.of_kind(EventKind.COMPILE)] == ["k"]
    with pytest.raises(ConfigError, match="'compile'"):
        sink.of_kind("compiles")


def test_record_from_journal_takes_one_phase_value(journal: Path) -> None:
    """``record_from_journal(phases="serving")`` iterated the string's characters (``Phase('s')``)."""
    from jitwatch.warmup.manifest import record_from_journal

    with Journal(journal, readonly=True) as j:
        one = record_from_journal(j, phases="serving")
        assert one.phases == ["serving"]
        assert record_from_journal(j, phases=["serving", Phase.WARMUP]).phases == ["serving", "warmup"]
        with pytest.raises(ConfigError, match="phases='served'"):
            record_from_journal(j, phases=["served"])


@pytest.mark.parametrize("raw", [b"compile", bytearray(b"compile"), memoryview(b"compile")])
def test_bytes_are_one_value_named_as_given(journal: Path, raw: bytes | bytearray | memoryview) -> None:
    """``kind=b"compile"`` was iterated as an iterable of kinds: the error named ``kind=99`` (the
    byte ``c``), and ``record_from_journal(phases=b"serving")`` named ``phases=115``."""
    from jitwatch.warmup.manifest import record_from_journal

    with Journal(journal, readonly=True) as j:
        with pytest.raises(ConfigError) as info:
            j.events(kind=raw)
        with pytest.raises(ConfigError) as by_phase:
            record_from_journal(j, phases=raw)
    for err, param in ((info.value, "kind"), (by_phase.value, "phases")):
        text = str(err)
        assert text.startswith(f"{param}={raw!r} is bytes, not a"), text
        assert "=99 " not in text and "=115 " not in text


def test_read_events_refuses_a_bad_kind_before_the_journal_exists(tmp_path: Path) -> None:
    """``read_events(d, kind="compil")`` answered ``[]`` while ``d`` had no journal yet (and so did
    ``MonitorHarness.events`` before the first flush wrote one): a misspelt kind passed a test as
    "no events"."""
    from jitwatch.testing import read_events

    missing = tmp_path / "no-journal-yet"
    assert read_events(missing) == [] and read_events(missing, "compile") == []
    for bad in ("compil", b"compile", [None]):
        with pytest.raises(ConfigError, match="'compile'"):
            read_events(missing, bad)  # type: ignore[arg-type]
    jb = JournalBuilder(tmp_path / "j")
    jb.write(jb.event(EventKind.COMPILE, jb.t0, kernel="k", key="k1"))
    assert [e.kernel for e in read_events(tmp_path / "j", "compile")] == ["k"]
    with pytest.raises(ConfigError, match="kind='compil'"):
        read_events(tmp_path / "j", "compil")


@pytest.mark.parametrize("name", [b"jw-\xff", b"jw-\xe9 50%"])
def test_a_directory_whose_name_is_not_utf8_is_read(tmp_path: Path, name: bytes) -> None:
    """A journal written in a directory named with bytes that are not UTF-8 (``mkdir $'jw-\\xff'``)
    is read back read-only (the sidecar, why, coverage): the read-only ``file:`` URI quoted
    ``str(path)``, whose ``\\udcff`` cannot be UTF-8 (UnicodeEncodeError); it quotes the path's
    bytes now. ``%`` in the name stays a literal ``%``."""
    import os

    directory = tmp_path / os.fsdecode(name)
    with Journal(directory) as j:
        j.write([make_event(EventKind.COMPILE, time.time(), kernel="k_bytes", key="k1", phase=Phase.SERVING)])
    assert os.fsencode(directory) in [os.fsencode(p) for p in tmp_path.iterdir()]
    with Journal(directory, readonly=True) as r:
        assert [e.kernel for e in r.events(kind=EventKind.COMPILE, limit=10)] == ["k_bytes"]
