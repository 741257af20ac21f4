"""``jitwatch coverage`` on a journal with nothing to check (no events, or no compile event) says
so, on stdout, in ``--json`` and with ``--require-complete``, and never claims completeness; a
journal whose compiles all came before serving is complete everywhere. Real journals in temporary
directories, the real CLI (typer's runner), and the sidecar's ``/jit`` and ``/metrics`` over real
HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from tests.test_cli import TOKEN, serving

T0 = 1_700_000_000.0
runner = CliRunner()


def ev(kind: EventKind, ts: float, **fields: object) -> Event:
    """An event of rank 0 as a worker writes it (compiles: Triton's, unless ``backend`` is given)."""
    fields.setdefault("backend", "triton" if kind is EventKind.COMPILE else "")
    return Event(kind=kind, ts=ts, rank=0, pid=100, host="node-a", **fields)  # type: ignore[arg-type]


def coverage(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str, str]:
    res = runner.invoke(app, ["coverage", *args], env={"COLUMNS": "100", **(env or {})})
    return res.exit_code, res.stdout, res.stderr


def empty_journal(where: Path) -> Path:
    Journal(where).close()  # a journal.db with no event: a writer opened it and stopped before its first event
    return where


def no_compile_journal(where: Path) -> Path:
    with Journal(where) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
                ev(EventKind.WARMUP_START, T0 + 1, phase=Phase.WARMUP),
                ev(EventKind.WARMUP_COMPLETE, T0 + 2, phase=Phase.SERVING, duration_s=1.0),
            ]
        )
    return where


def warm_only_journal(where: Path) -> Path:
    """Compiles in warmup only: nothing served, no manifest, so every key needed is a warm one."""
    with Journal(where) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
                ev(EventKind.COMPILE, T0 + 1, phase=Phase.WARMUP, kernel="fused_add", key="k16", duration_s=0.3),
                ev(EventKind.COMPILE, T0 + 2, phase=Phase.WARMUP, kernel="fused_add", key="k32", duration_s=0.3),
                ev(EventKind.COMPILE, T0 + 3, phase=Phase.WARMUP, kernel="late_mul", key="k8", duration_s=0.2),
                ev(EventKind.WARMUP_COMPLETE, T0 + 4, phase=Phase.SERVING, duration_s=1.0),
            ]
        )
    return where


@pytest.fixture(params=["default", "option"])
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, list[str], dict[str, str | None]]:
    """An empty journal read as the default directory (JITWATCH_DIR unset) or with --journal-dir."""
    if request.param == "default":
        state = tmp_path / "state"
        jdir = empty_journal(state / "jitwatch")  # $XDG_STATE_HOME/jitwatch: the default
        return jdir, [], {"JITWATCH_DIR": None, "XDG_STATE_HOME": str(state)}
    jdir = empty_journal(tmp_path / "j")
    return jdir, ["--journal-dir", str(jdir)], {}


def test_an_empty_journal_is_nothing_to_check_not_complete(empty: tuple[Path, list[str], dict]) -> None:
    """It printed an empty table, then `complete: every expected key was compiled before serving`,
    exit 0 (only stderr, and only beside a demo journal, said the journal had no events). Now
    stdout says there is nothing to check, why, and what writes a journal."""
    jdir, args, env = empty
    code, out, err = coverage(*args, env=env)
    assert code == 0, out + err
    assert "complete" not in out and "┏" not in out, out  # no completeness, no empty table
    lines = out.splitlines()
    assert lines[0] == f"nothing to check: no events in the journal at {jdir}", out
    assert any("JITWATCH_DIR" in ln and "jitwatch.install()" in ln for ln in lines[1:]), out
    assert any("jitwatch demo --exit" in ln for ln in lines[1:]), out


def test_an_empty_journal_in_json_is_not_complete(empty: tuple[Path, list[str], dict]) -> None:
    """``--json`` carried ``"complete": true`` for an empty journal; now ``false``, with
    ``nothing_to_check`` and its reason (a script testing ``complete`` cannot read an all-clear)."""
    jdir, args, env = empty
    code, out, err = coverage(*args, "--json", env=env)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kernels"] == []
    assert doc["complete"] is False
    assert doc["nothing_to_check"] is True
    assert doc["nothing_to_check_reason"] == f"no events in the journal at {jdir}"


def test_require_complete_on_an_empty_journal_is_one_line(empty: tuple[Path, list[str], dict]) -> None:
    """`--require-complete` printed `complete: ...` on stdout and then `nothing to check` on
    stderr, exit 1: two answers. Now stdout is empty and stderr one line (besides the line naming
    a journal that --journal-dir did not name), exit 1; with --json the JSON says the same."""
    jdir, args, env = empty
    code, out, err = coverage(*args, "--require-complete", env=env)
    assert code == 1
    assert out == "", out
    lines = [ln for ln in err.splitlines() if not ln.startswith("journal: ")]
    assert lines == [
        f"jitwatch: coverage --require-complete: nothing to check: no events in the journal at {jdir}"
        " (is it the journal the workers write? --journal-dir / JITWATCH_DIR)"
    ], err
    code, out, err = coverage(*args, "--require-complete", "--json", env=env)
    assert code == 1 and json.loads(out)["complete"] is False, out


def test_a_journal_without_compiles_is_nothing_to_check_everywhere(tmp_path: Path) -> None:
    """A worker that registered and warmed up but compiled nothing: stdout said complete while
    `--require-complete` said nothing to check. Now all three say nothing to check."""
    jdir = no_compile_journal(tmp_path / "j")
    reason = f"no compile events in the journal at {jdir} (3 other events)"
    code, out, _ = coverage("--journal-dir", str(jdir))
    assert code == 0 and out.splitlines()[0] == f"nothing to check: {reason}", out
    assert "complete" not in out
    code, out, _ = coverage("--journal-dir", str(jdir), "--json")
    doc = json.loads(out)
    assert (doc["complete"], doc["nothing_to_check"], doc["nothing_to_check_reason"]) == (False, True, reason)
    code, out, err = coverage("--journal-dir", str(jdir), "--require-complete")
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"jitwatch: coverage --require-complete: nothing to check: {reason}"
        " (is it the journal the workers write? --journal-dir / JITWATCH_DIR)"
    ]


def test_a_journal_compiled_in_warmup_only_is_complete_everywhere(tmp_path: Path) -> None:
    """Compiles before serving and none in serving, no manifest: there is something to check (the
    keys needed are the warm ones) and nothing missed, so complete in all three, and the line says
    how many keys it checked."""
    jdir = warm_only_journal(tmp_path / "j")
    code, out, _ = coverage("--journal-dir", str(jdir))
    assert code == 0
    assert "complete: every expected key was compiled before serving (3 keys of 2 kernels)" in out, out
    assert "nothing to check" not in out
    code, out, _ = coverage("--journal-dir", str(jdir), "--json")
    doc = json.loads(out)
    assert (doc["complete"], doc["nothing_to_check"], doc["nothing_to_check_reason"]) == (True, False, None)
    assert sorted((k["kernel"], k["covered"], k["total"]) for k in doc["kernels"]) == [
        ("fused_add", 2, 2),
        ("late_mul", 1, 1),
    ]
    code, out, err = coverage("--journal-dir", str(jdir), "--require-complete")
    assert code == 0 and err == "", err


def test_expected_keys_against_an_empty_journal_are_incomplete_not_nothing_to_check(tmp_path: Path) -> None:
    """Expected keys (here a previous run's serving compile, ``--expect-journal``) with no compile
    at all: there is something to check, and all of it is missing."""
    jdir = empty_journal(tmp_path / "j")
    with Journal(tmp_path / "prev") as j:
        j.write([ev(EventKind.COMPILE, T0, phase=Phase.SERVING, kernel="late_mul", key="k32", duration_s=0.2)])
    args = ("--journal-dir", str(jdir), "--expect-journal", str(tmp_path / "prev"))
    code, _, err = coverage(*args, "--require-complete")
    assert code == 1 and "coverage incomplete: 1 expected key not compiled before serving" in err, err
    assert "nothing to check" not in err
    doc = json.loads(coverage(*args, "--json")[1])
    assert (doc["complete"], doc["nothing_to_check"], doc["nothing_to_check_reason"]) == (False, False, None)


def test_the_sidecar_reports_no_coverage_for_an_empty_journal(tmp_path: Path) -> None:
    """The sidecar has no completeness flag: ``/jit``'s ``coverage`` of an empty journal is an
    empty list and ``/metrics`` has no ``jitwatch_specialization_coverage_ratio`` sample (absent,
    not 1), over real HTTP."""
    jdir = empty_journal(tmp_path / "j")
    with serving(jdir) as base:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        body = httpx.get(f"{base}/jit", headers=headers, timeout=30).json()
        metrics = httpx.get(f"{base}/metrics", headers=headers, timeout=30).text
    assert body["coverage"] == [] and body["totals"]["compiles"] == 0
    assert "# TYPE jitwatch_specialization_coverage_ratio gauge" in metrics  # the family, with no sample
    samples = [ln for ln in metrics.splitlines() if ln.startswith("jitwatch_specialization_coverage_ratio")]
    assert samples == [], samples


def test_a_directory_without_a_journal_is_an_error_in_every_variant(tmp_path: Path) -> None:
    """docs/coverage.md said `--json` still prints JSON and a plain run exits 0 for nothing to
    check: true of a `journal.db` with no event only. A directory without `journal.db` is an
    error in every variant, one line on stderr, exit 1, nothing on stdout (no JSON: a journal
    command's errors are never JSON). And a sidecar started first does not create the file the
    docs said it leaves empty: `/jit` answers, the directory stays without `journal.db`."""
    jdir = tmp_path / "no worker yet"
    jdir.mkdir()
    with serving(jdir) as base:
        res = httpx.get(base + "/jit", headers={"Authorization": f"Bearer {TOKEN}"})
    assert res.status_code == 200, res.text
    assert not (jdir / "journal.db").exists(), sorted(p.name for p in jdir.iterdir())
    for variant in ([], ["--json"], ["--require-complete"], ["--json", "--require-complete"]):
        code, out, err = coverage("--journal-dir", str(jdir), *variant)
        assert (code, out) == (1, ""), (variant, out, err)
        assert err.splitlines() == [f"jitwatch: no journal at {jdir / 'journal.db'}"], (variant, err)
    assert not (jdir / "journal.db").exists()
