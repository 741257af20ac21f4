"""``jitwatch why`` and :mod:`jitwatch.views.diagnosis` over real compiles (compile-only driver):
reasons written by the worker, the same reasons rebuilt at read time for a journal written without
them, ``/jit``'s recent serving compiles carrying them, and the CLI's output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import fresh_kernel_cache, monitored, read_events
from jitwatch.views.diagnosis import serving_reasons
from jitwatch.views.status import build_status
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf

REASON_FIELDS = ("reason", "reason_kind", "reason_changes", "fixes")


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One worker: the slot-mapping and offset-view cases, warmed then served."""
    jdir = tmp_path_factory.mktemp("why") / "journal"
    fresh_kernel_cache(kf.slot_mapping, kf.scale_copy)
    with monitored(journal_dir=jdir) as h:
        with h.monitor.warmup():
            for call in (*kf.CASES["slot_mapping"]["warmup"], *kf.CASES["offset_view"]["warmup"]):
                call()
        with h.monitor.request("req-1"):
            for call in (*kf.CASES["slot_mapping"]["serving"], *kf.CASES["offset_view"]["serving"]):
                call()
        h.monitor.flush()
    return jdir


EXPECTED = [  # newest first
    "dst_ptr: *fp32 aligned16 → unaligned",
    "block_table_stride: i32 %16 → ==1",
    "num_tokens: i32 %16 → other",
    "num_tokens: i32 %16 → ==1",
]


def test_serving_reasons_newest_first(journal: Path) -> None:
    with Journal(journal, readonly=True) as j:
        reasons = serving_reasons(j)
    assert [r.reason for r in reasons] == EXPECTED
    assert all(r.reason_kind == "argument" and r.request_id == 1 for r in reasons)
    assert reasons[0].changes[0].model_dump() == {
        "name": "dst_ptr",
        "kind": "argument",
        "before": "*fp32 aligned16",
        "after": "*fp32 unaligned",
        "fix": reasons[0].fixes[0],
        "warmed_elsewhere": False,
    }
    with Journal(journal, readonly=True) as j:
        only = serving_reasons(j, kernel="scale_copy")
    assert [r.kernel for r in only] == ["scale_copy"]


def test_reasons_rebuilt_at_read_time_for_a_journal_without_them(journal: Path, tmp_path: Path) -> None:
    """An older worker wrote no reasons: the reader computes the same ones from the journal."""
    events = read_events(journal)
    for e in events:
        for f in REASON_FIELDS:
            e.attrs.pop(f, None)
        e.id = None
    with Journal(tmp_path / "old") as j:
        j.write(events)
    with Journal(tmp_path / "old", readonly=True) as j:
        reasons = serving_reasons(j)
    assert [r.reason for r in reasons] == EXPECTED


def test_jit_recent_serving_compiles_carry_the_reason(journal: Path) -> None:
    with Journal(journal, readonly=True) as j:
        status = build_status(j)
    assert [c.reason for c in status.recent_serving_compiles] == EXPECTED
    assert all(c.reason_kind == "argument" and c.fixes for c in status.recent_serving_compiles)


def test_cli_why(journal: Path) -> None:
    out = CliRunner().invoke(app, ["why", "--journal-dir", str(journal), "--kernel", "slot_mapping"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert [ln for ln in lines if ln.startswith("  why: ")] == [f"  why: {r}" for r in reversed(EXPECTED[1:])]
    assert (
        '  fix: do_not_specialize=["num_tokens"] in @triton.jit (one binary for every value), or warm num_tokens=1'
        in lines
    )
    assert " rank 0 triton slot_mapping compiled in serving (" in lines[0] and "request 1)" in lines[0]
    as_json = CliRunner().invoke(app, ["why", "--journal-dir", str(journal), "--json", "--limit", "1"])
    assert [r["reason"] for r in json.loads(as_json.output)] == EXPECTED[:1]


@pytest.mark.parametrize("limit", [[], ["--limit", "2"]])
def test_cli_why_json_is_in_the_text_order(journal: Path, limit: list[str]) -> None:
    """--json lists the same compiles in the same order as the text, oldest first (it was newest
    first); --limit N keeps the newest N."""
    args = ["why", "--journal-dir", str(journal), *limit]
    text = CliRunner().invoke(app, args)
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert text.exit_code == as_json.exit_code == 0, (text.output, as_json.output)
    newest = EXPECTED[: int(limit[1])] if limit else EXPECTED
    assert [r["reason"] for r in json.loads(as_json.output)] == newest[::-1]
    assert [ln[len("  why: ") :] for ln in text.output.splitlines() if ln.startswith("  why: ")] == newest[::-1]
    ts = [r["ts"] for r in json.loads(as_json.output)]
    assert ts == sorted(ts)


def test_cli_why_empty_and_missing(tmp_path: Path) -> None:
    with monitored(journal_dir=tmp_path / "j") as h:
        h.monitor.flush()
    out = CliRunner().invoke(app, ["why", "--journal-dir", str(tmp_path / "j")])
    assert out.exit_code == 0 and "no serving-phase compiles" in out.output
    missing = CliRunner().invoke(app, ["why", "--journal-dir", str(tmp_path / "nope")])
    assert missing.exit_code == 1


def test_cli_journal_commands_name_a_demo_journal_beside_a_missing_one(tmp_path: Path) -> None:
    """`jitwatch demo` keeps its journal in <JITWATCH_DIR>/demo-<port>: a bare `jitwatch why`
    (coverage, manifest export) after it said only "no journal at <JITWATCH_DIR>/journal.db"; it
    now names the demo journal and the option that reads it."""
    with monitored(journal_dir=tmp_path / "demo-9400") as h:
        h.monitor.flush()
    demo = tmp_path / "demo-9400"
    for args in (["why"], ["coverage"], ["manifest", "export", "-o", str(tmp_path / "m.json")]):
        out = CliRunner().invoke(app, [*args, "--journal-dir", str(tmp_path)])
        assert out.exit_code == 1, out.output
        assert "no journal at" in out.output and f"pass --journal-dir {demo}" in out.output, out.output
    with monitored(journal_dir=tmp_path) as h:  # a journal of its own: read, no hint
        h.monitor.flush()
    out = CliRunner().invoke(app, ["why", "--journal-dir", str(tmp_path)])
    assert out.exit_code == 0 and "demo" not in out.output


def test_phase_of_reasons(journal: Path) -> None:
    """Warmup compiles carry no reason; every serving compile does."""
    for e in read_events(journal):
        if e.kind.value == "compile":
            assert ("reason" in e.attrs) == (e.phase is Phase.SERVING)


@pytest.mark.parametrize(
    "command",
    [["why"], ["why", "--json"], ["coverage"], ["coverage", "--json"], ["manifest", "export", "-o", "OUT"]],
)
def test_journal_commands_say_which_journal_they_read(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Without --journal-dir the journal commands read $JITWATCH_DIR, else the default directory:
    they say which on stderr (one ``journal: <dir> (...)`` line; stdout unchanged, so --json stays
    JSON); with --journal-dir, which names it, they add nothing."""
    import shutil

    args = [str(tmp_path / "m.json") if a == "OUT" else a for a in command]
    state = tmp_path / "state"
    shutil.copytree(journal, state / "jitwatch")  # the default: $XDG_STATE_HOME/jitwatch
    monkeypatch.delenv("JITWATCH_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("COLUMNS", "200")
    default = CliRunner().invoke(app, args)
    assert default.exit_code == 0, default.output
    assert default.stderr.splitlines()[0] == (
        f"journal: {state / 'jitwatch'} (the default: JITWATCH_DIR is unset; --journal-dir reads another)"
    )
    explicit = CliRunner().invoke(app, [*args, "--journal-dir", str(state / "jitwatch")])
    assert explicit.exit_code == 0 and "journal:" not in explicit.stderr
    if "--json" in args:  # stdout is the JSON document alone
        docs = [json.loads(r.stdout) for r in (default, explicit)]
        for doc in docs:
            if isinstance(doc, dict):
                doc.pop("generated_ts", None)
        assert docs[0] == docs[1]
    else:
        assert default.stdout == explicit.stdout

    monkeypatch.setenv("JITWATCH_DIR", str(journal))
    from_env = CliRunner().invoke(app, args)
    assert from_env.exit_code == 0, from_env.output
    assert from_env.stderr.splitlines()[0] == f"journal: {journal} (from JITWATCH_DIR)"


@pytest.mark.parametrize("blank", ["", "  "])
def test_journal_line_says_an_empty_jitwatch_dir_is_empty(
    journal: Path, tmp_path: Path, monkeypatch, blank: str
) -> None:
    """``JITWATCH_DIR=`` (set, empty) reads the default journal like an unset one, but the line said
    ``JITWATCH_DIR is unset``: someone who set it (to an empty expansion) was told it was not set.
    Only spaces is empty too (it was read as a directory named by those spaces, relative to the
    working directory)."""
    import shutil

    state = tmp_path / "state"
    shutil.copytree(journal, state / "jitwatch")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("JITWATCH_DIR", blank)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["why", "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        f"journal: {state / 'jitwatch'} (the default: JITWATCH_DIR is empty; --journal-dir reads another)"
    ]
    assert json.loads(res.stdout)


@pytest.mark.parametrize("command", [["why"], ["coverage", "--json"], ["manifest", "export", "-o", "OUT"]])
def test_a_missing_journal_says_where_its_directory_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """The ``journal: <dir> (...)`` line is printed only after a read: when the journal is missing,
    the error said ``no journal at <dir>/journal.db`` without saying that ``<dir>`` was
    JITWATCH_DIR's, or the default because JITWATCH_DIR was unset (a ``sudo``, another shell).
    With --journal-dir, which names it, nothing is added."""
    args = [str(tmp_path / "m.json") if a == "OUT" else a for a in command]
    monkeypatch.setenv("JITWATCH_DIR", str(tmp_path / "from-env"))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1 and res.stdout == ""
    assert res.stderr.strip() == f"jitwatch: no journal at {tmp_path / 'from-env' / 'journal.db'} (from JITWATCH_DIR)"
    monkeypatch.delenv("JITWATCH_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1 and res.stderr.strip() == (
        f"jitwatch: no journal at {tmp_path / 'state' / 'jitwatch' / 'journal.db'} "
        "(the default: JITWATCH_DIR is unset; --journal-dir reads another)"
    )
    res = CliRunner().invoke(app, [*args, "--journal-dir", str(tmp_path / "named")])
    assert res.exit_code == 1 and res.stderr.strip() == f"jitwatch: no journal at {tmp_path / 'named' / 'journal.db'}"


def test_coverage_names_a_missing_expect_journal_as_such(journal: Path, tmp_path: Path, monkeypatch) -> None:
    """A missing ``--expect-journal`` is not the journal read: its error names the option and its
    path, never ``(from JITWATCH_DIR)``, nor a ``--journal-dir`` hint for a demo journal beside it."""
    (tmp_path / "prev" / "demo-9400").mkdir(parents=True)
    (tmp_path / "prev" / "demo-9400" / "journal.db").write_bytes(b"")
    monkeypatch.setenv("JITWATCH_DIR", str(journal))
    res = CliRunner().invoke(app, ["coverage", "--expect-journal", str(tmp_path / "prev")])
    assert res.exit_code == 1, res.output
    assert res.stderr.strip() == (
        f"jitwatch: --expect-journal {tmp_path / 'prev'}: no journal at {tmp_path / 'prev' / 'journal.db'}"
    )


# ------------------------------------------------------------------------------ cache hit, module
def _serve_slot_mapping(journal_dir: Path, cache_dir: Path) -> None:
    """One worker warms then serves the slot-mapping case, Triton's disk cache in ``cache_dir``."""
    fresh_kernel_cache(kf.slot_mapping)
    with monitored(journal_dir=journal_dir, triton_cache_dir=cache_dir) as h:
        with h.monitor.warmup():
            for call in kf.CASES["slot_mapping"]["warmup"]:
                call()
        with h.monitor.request("req-1"):
            for call in kf.CASES["slot_mapping"]["serving"]:
                call()
        h.monitor.flush()


def test_cli_why_says_disk_cache_hit_or_cold_compile_and_the_module(tmp_path: Path) -> None:
    """`why` did not say whether a serving compile was a load from Triton's disk cache nor which
    module defines the kernel (neither in --json). A first run compiles cold; a second worker on
    the same TRITON_CACHE_DIR loads the same keys from disk: each says so, with the module."""
    cache = tmp_path / "triton-cache"
    for run in ("first", "second"):
        _serve_slot_mapping(tmp_path / run, cache)
    for run, state, hit in (("first", "cold compile", False), ("second", "disk-cache hit", True)):
        args = ["why", "--journal-dir", str(tmp_path / run)]
        text = CliRunner().invoke(app, args)
        as_json = CliRunner().invoke(app, [*args, "--json"])
        assert text.exit_code == as_json.exit_code == 0, (text.output, as_json.output)
        doc = json.loads(as_json.stdout)
        assert len(doc) == 3 and all(r["cache_hit"] is hit and r["module"] == kf.__name__ for r in doc), doc
        heads = [ln for ln in text.stdout.splitlines() if " compiled in serving (" in ln]
        assert len(heads) == 3 and all(f" s, {state}, request 1)" in ln for ln in heads), text.stdout
        assert text.stdout.splitlines().count(f"  from: module {kf.__name__}") == 3, text.stdout


def test_cli_why_shows_a_location_with_the_home_directory_as_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torch.compile compile's ``location`` (file:line) is shown, home directory as ``~`` (as
    the journal stores it); a compile whose backend said nothing of the cache omits the state."""
    from jitwatch import redact as redact_mod
    from jitwatch.core.events import Event, EventKind

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    caches = (redact_mod._patterns, redact_mod._user_pattern)
    for cache in caches:
        cache.cache_clear()
    common = {"backend": "torch_compile", "rank": 0, "pid": 7, "host": "node-a"}
    try:
        with Journal(tmp_path / "j") as j:
            j.write(
                [
                    Event(kind=EventKind.WARMUP_COMPLETE, ts=1.0, phase=Phase.SERVING, **common),
                    Event(
                        kind=EventKind.COMPILE,
                        ts=2.0,
                        duration_s=0.25,
                        phase=Phase.SERVING,
                        kernel="forward",
                        attrs={
                            "location": f"{home}/proj/model.py:42",
                            "reason": "0/1: guard",
                            "reason_kind": "compiler",
                        },
                        **common,
                    ),
                ]
            )
        text = CliRunner().invoke(app, ["why", "--journal-dir", str(tmp_path / "j")])
        as_json = CliRunner().invoke(app, ["why", "--journal-dir", str(tmp_path / "j"), "--json"])
    finally:
        for cache in caches:
            cache.cache_clear()
    assert text.exit_code == as_json.exit_code == 0, (text.output, as_json.output)
    (r,) = json.loads(as_json.stdout)
    assert r["location"] == "~/proj/model.py:42" and r["cache_hit"] is None and r["module"] is None, r
    lines = text.stdout.splitlines()
    assert lines[0].endswith(" rank 0 torch_compile forward compiled in serving (0.250 s)"), lines
    assert lines[1] == "  from: ~/proj/model.py:42" and str(home) not in text.stdout, lines


# ------------------------------------------------------------------------------ times
def test_cli_why_times_carry_the_date_and_utc(journal: Path) -> None:
    """`why` printed HH:MM:SS in local time, no date nor zone: across a fleet, ambiguous. Text:
    ``YYYY-MM-DD HH:MM:SS UTC``; --json: ``time``, ISO-8601 with the UTC offset, beside ``ts``."""
    from datetime import UTC, datetime

    args = ["why", "--journal-dir", str(journal)]
    text = CliRunner().invoke(app, args, env={"TZ": "America/New_York"})
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    heads = [ln for ln in text.stdout.splitlines() if " compiled in serving (" in ln]
    assert len(heads) == len(doc) == len(EXPECTED), text.output
    for head, r in zip(heads, doc, strict=True):
        when = datetime.fromtimestamp(r["ts"], UTC)
        assert head.startswith(when.strftime("%Y-%m-%d %H:%M:%S UTC rank 0 ")), (head, r["ts"])
        assert datetime.fromisoformat(r["time"]) == when.replace(microsecond=when.microsecond // 1000 * 1000)
        assert r["time"].endswith("+00:00") and "T" in r["time"], r["time"]
