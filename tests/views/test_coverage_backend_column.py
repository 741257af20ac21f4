"""``jitwatch coverage`` names each row's backend at every terminal width, 80 columns included: a
Triton kernel and a torch.compile graph of the same name are two rows a reader can tell apart.
A real journal in a temporary directory, the real CLI (typer's runner with ``COLUMNS``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal

T0 = 1_700_000_000.0
GUARD = "0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2"


def compile_event(ts: float, backend: str, phase: Phase, key: str, **attrs: object) -> Event:
    return Event(
        kind=EventKind.COMPILE,
        ts=ts,
        rank=0,
        pid=100,
        host="node-a",
        backend=backend,
        phase=phase,
        kernel="sample_probs",
        key=key,
        duration_s=0.1,
        attrs=dict(attrs),
    )


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """One name, two backends: the Triton kernel fully warmed, the torch.compile graph recompiled
    in serving (Dynamo's guard failure as its reason)."""
    with Journal(tmp_path) as j:
        j.write(
            [
                compile_event(T0, "triton", Phase.WARMUP, "k-triton"),
                compile_event(T0 + 1, "torch_compile", Phase.WARMUP, "0/0"),
                compile_event(T0 + 2, "torch_compile", Phase.SERVING, "0/1", reason=GUARD, reason_kind="compiler"),
            ]
        )
    return tmp_path


def tables(out: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each rich table of ``out``: its column names and its rows, the lines of a folded cell joined
    by a space."""
    found: list[tuple[list[str], list[list[str]]]] = []
    head: list[list[str]] = []
    rows: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("┃"):
            cells = [c.strip() for c in line.strip("┃").split("┃")]
            head = [[*h, c] for h, c in zip(head, cells, strict=True)] if head else [[c] for c in cells]
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0] or not rows:  # a new row starts with its backend; else the previous row wraps on
                rows.append(cells)
            else:
                rows[-1] = [" ".join(x for x in (a, b) if x) for a, b in zip(rows[-1], cells, strict=True)]
        elif line.startswith("└"):
            found.append(([" ".join(x for x in h if x) for h in head], rows))
            head, rows = [], []
    return found


@pytest.mark.parametrize("columns", [80, 100, 130, 150])
def test_every_coverage_row_names_its_backend(journal: Path, columns: int) -> None:
    """At 80 columns the table had no backend column (there was none at any width): the Triton
    row and the torch.compile row read ``sample_probs`` both. Now the first column of both tables
    is the backend, never folded, and no line is wider than the terminal; the class detail
    column waits for 150 columns, so the others are not folded mid-word at 130."""
    res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(journal)], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert max(len(line) for line in out.splitlines()) <= columns, out
    # rich crops a table wider than the console to its width: the right border tells (the width alone cannot)
    assert all(line.rstrip()[-1] in "┓┃┩│┘" for line in out.splitlines() if line[:1] in "┏┃┡│└"), out
    assert "…" not in out
    (coverage_cols, coverage_rows), (missing_cols, missing_rows) = tables(out)
    assert coverage_cols[:4] == ["backend", "kernel", "keys", "coverage"], coverage_cols
    # the class detail (the Triton row's one exact key) needs 150 columns beside the backend; below, a line says so
    assert ("arg classes (detail)" in coverage_cols) is (columns >= 150), coverage_cols
    assert ("(arg classes (detail) left out below 150 columns; -v or --json show them)" in out) is (columns < 150)
    assert sorted(r[:4] for r in coverage_rows) == [
        ["torch_compile", "sample_probs", "1/2", "50%"],
        ["triton", "sample_probs", "1/1", "100%"],
    ], out
    assert missing_cols == ["backend", "kernel", "source", "why it would compile"], missing_cols
    assert [r[:3] for r in missing_rows] == [["torch_compile", "sample_probs", "serving"]], out
    assert missing_rows[0][3].replace(" ", "") == GUARD.replace(" ", ""), missing_rows


def test_the_verbose_tables_are_titled_by_backend(journal: Path) -> None:
    """``-v`` titled each kernel's argument table by its name alone (two ``sample_probs``), and gave
    the torch.compile graph, which has no argument classes, an empty table. Now each title names the
    backend, and a kernel without classes is one line saying it is covered by exact key."""
    res = CliRunner().invoke(app, ["coverage", "-v", "--journal-dir", str(journal)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    # the narrow-terminal line said "-v or --json show them" to a user who had passed -v
    assert "(arg classes (detail) left out below 150 columns; listed per argument below)" in (res.stdout), res.stdout
    assert "-v or --json show them" not in res.stdout
    lines = [line.strip() for line in res.stdout.splitlines()]
    assert "triton sample_probs (flags inferred from keys)" in lines, res.stdout
    assert "torch_compile sample_probs: no argument classes (covered by exact key)" in lines, res.stdout
    assert "sample_probs (flags inferred from keys)" not in lines
    tables_out = tables(res.stdout)
    assert len(tables_out) == 3, res.stdout  # kernels, expected keys, the Triton kernel's arguments
    assert tables_out[2][1] == [["[key]", "key", "k-triton", "", ""]], tables_out[2]


def test_a_backend_name_wider_than_the_terminal_folds_and_leaves_the_other_columns(tmp_path: Path) -> None:
    """The backend column was never folded, as wide as its widest name: a backend named wider than
    the terminal (a third-party backend's long name, an odd journal) took the whole table, and the
    kernel, keys and coverage columns were cut off at 80 columns (the row read only ``bbbb…``).
    A name of up to :data:`jitwatch.cli.render.WHOLE_MAX` characters stays whole; a longer one
    folds like any cell, and every row keeps its kernel and coverage."""
    from jitwatch.tables import WHOLE_MAX

    long_backend = "dsl_" + "b" * 146
    with Journal(tmp_path) as j:
        j.write(
            [
                compile_event(T0, "triton", Phase.WARMUP, "k-triton"),
                compile_event(T0 + 1, long_backend, Phase.WARMUP, "0/0"),
                compile_event(T0 + 2, long_backend, Phase.SERVING, "0/1"),
            ]
        )
    assert len("torch_compile") <= WHOLE_MAX < len(long_backend)
    for columns in (80, 150):
        res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(tmp_path)], env={"COLUMNS": str(columns)})
        assert res.exit_code == 0, res.output
        out = res.stdout
        assert max(len(line) for line in out.splitlines()) <= columns, out
        # rich crops a table wider than the console: its last column and right border go missing
        assert all(line.rstrip()[-1] in "┓┃┩│┘" for line in out.splitlines() if line[:1] in "┏┃┡│└"), out
        first_table = out.split("└", 1)[0]
        for text in ("kernel", "coverage", "1/2", "50%", "100%", "triton"):
            assert text in first_table, (columns, text, out)
        assert first_table.count("sample_probs") == 2, out
        assert long_backend in "".join(
            line.strip("│").split("│")[0].strip() for line in first_table.splitlines() if line.startswith("│")
        ), out
