"""The docs cannot rot silently: the CLI reference matches the app, and the README indexes every page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jitwatch.cli import cli_doc
from tests._paths import ROOT


def test_cli_reference_matches_the_typer_app() -> None:
    """``docs/cli.md`` is what typer's generator prints for the current app (``make lint`` checks it too)."""
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    rendered = cli_doc.render()
    assert committed == rendered, "docs/cli.md is stale: run python -m jitwatch.cli.cli_doc --write"
    # Every top-level command and sub-app has its section.
    for name in ("serve", "status", "demo", "why", "coverage", "manifest", "warmup", "cache"):
        assert f"## `jitwatch {name}`" in rendered


def test_cli_reference_reads_as_plain_text() -> None:
    """docs/cli.md had raw HTML entities (``manifest&#x27;s``, ``1&lt;=x&lt;=10000``: typer's rich
    mode exported help text as HTML) and command summaries cut at 45 characters with ``...``. The
    text is the help as written: no entity, and each group's summaries are the commands' first
    sentences whole (read from the app's commands, not hard-coded)."""
    import typer.main

    from jitwatch.cli import app

    rendered = cli_doc.render()
    assert not re.search(r"&(#x?[0-9a-fA-F]+|lt|gt|amp|quot);", rendered), rendered
    assert "<span" not in rendered
    summaries = re.findall(r"^\* `([a-z][a-z-]*)`: (.*)$", rendered, re.M)
    assert {name for name, _ in summaries} >= {"serve", "status", "demo", "export", "merge", "replay", "check"}
    root = typer.main.get_command(app)
    commands = {
        **root.commands,
        **{n: c for g in root.commands.values() for n, c in getattr(g, "commands", {}).items()},
    }
    for name, summary in summaries:
        assert not summary.endswith("..."), (name, summary)
        first = " ".join((commands[name].help or "").split()).split(". ")[0].rstrip(".")
        assert summary.rstrip(".") == first, (name, summary, first)
    assert "manifest's kernels" in rendered and "1<=x<=10000" in rendered


def test_cli_reference_does_not_depend_on_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Terminal width and ``JITWATCH_*`` settings of the caller do not change the generated text."""
    plain = cli_doc.render()
    monkeypatch.setenv("COLUMNS", "37")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("JITWATCH_PORT", "9999")
    monkeypatch.setenv("JITWATCH_HOST", "10.0.0.1")
    assert cli_doc.render() == plain


def test_cli_reference_does_not_depend_on_typers_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """typer's ``TYPER_USE_RICH=0`` (rich off: help text HTML-escaped differently) in the caller's
    environment does not change the generated text (``make lint`` failed on a current file)."""
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    monkeypatch.setenv("TYPER_USE_RICH", "0")
    monkeypatch.setenv("TYPER_STANDARD_TRACEBACK", "1")
    assert cli_doc.render() == committed
    assert cli_doc.main(["--check"]) == 0


def test_cli_reference_does_not_depend_on_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a directory holding another ``jitwatch`` package (another checkout), the generator
    still renders this checkout's app: ``python -m`` puts the working directory first on
    ``sys.path``, ahead of the ``PYTHONPATH`` the child is given."""
    other = tmp_path / "jitwatch"
    other.mkdir()
    (other / "__init__.py").write_text("raise ImportError('the other checkout')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert cli_doc.render() == (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    """``--check`` exits 1 on a stale file and 0 once ``--write`` has rewritten it."""
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n", encoding="utf-8")
    assert cli_doc.main(["--check", "--path", str(stale)]) == 1
    assert cli_doc.main(["--write", "--path", str(stale)]) == 0
    assert cli_doc.main(["--check", "--path", str(stale)]) == 0


def test_readme_links_every_docs_page() -> None:
    """README's Documentation section links each ``docs/*.md`` page (and ``docs/backends/``)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages, "no docs/*.md found"
    missing = sorted(pages - linked)
    assert not missing, f"docs pages not linked from README.md: {missing}"
    if any((ROOT / "docs" / "backends").glob("*.md")):
        assert "docs/backends/" in linked


def test_what_the_docs_say_ctrl_c_prints_is_what_the_demo_prints() -> None:
    """README.md said Ctrl-C prints `jitwatch demo: stopped`; while serving, the demo prints
    `jitwatch demo: stopped (worker and sidecar shut down)` (exit 0; the short line, exit 130, is
    for an interrupt before the scenario finished). Every page that says what the demo prints on
    Ctrl-C / SIGTERM quotes the line it prints while serving (``STOPPED_LINE``; the slow
    ``tests/test_demo.py`` interrupt tests check that line against a real run)."""
    from jitwatch.demo.runner import STOPPED_LINE

    claims = []
    for page in _TRANSCRIPT_PAGES:
        text = " ".join(page.read_text(encoding="utf-8").split())
        for m in re.finditer(r"(?:Ctrl-C|SIGTERM)[^.]{0,80}? prints `([^`]*)`", text):
            claims.append((page.name, m.group(1)))
    assert claims, "no page says what the demo prints on Ctrl-C"
    assert all(said == STOPPED_LINE for _, said in claims), claims


# --- Captured transcripts keep the shape of today's output -------------------------------------
#
# README.md and docs/*.md paste real `jitwatch why` / `coverage` / `status` output. Each block is
# checked against the same command run now on a real journal (compile-only Triton compiles): the
# `why` time stamps and line labels, the `status` header lines, and every rich table's title and
# column names. Numbers, kernels and times differ from run to run and are not compared.

_TRANSCRIPT_PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks.md")]


def _transcripts(command: str) -> list[tuple[str, list[str]]]:
    """``(where, output lines)`` of each ``$ jitwatch <command> …`` in a fenced block, its output
    running to the next ``$ `` line or the end of the block (commands without output are left out)."""
    out: list[tuple[str, list[str]]] = []
    for page in _TRANSCRIPT_PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        fenced = False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                fenced = not fenced
                continue
            if not (fenced and line.startswith(f"$ jitwatch {command}")):
                continue
            body: list[str] = []
            for nxt in lines[i + 1 :]:
                if nxt.startswith("```") or nxt.startswith("$ "):
                    break
                body.append(nxt)
            if body:
                out.append((f"{page.name}:{i + 1}", body))
    return out


def _tables(lines: list[str]) -> list[tuple[str, str, list[str]]]:
    """Rich tables in ``lines``: ``(text above it, its title's last line, column names)``. The text
    above runs from the previous table's bottom border (a title wrapped over lines is in it, joined
    by spaces); a header cell wrapped over lines is joined likewise."""
    tables: list[tuple[str, str, list[str]]] = []
    above: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("└"):
            above = []
            continue
        if not line.startswith("┏"):
            if line.strip() and not line.startswith(("│", "┃", "┡", "┗")):
                above.append(line.strip())
            continue
        cols: list[list[str]] = []
        for head in lines[i + 1 :]:
            if not head.startswith("┃"):
                break
            cells = [c.strip() for c in head.strip().strip("┃").split("┃")]
            cols = cols or [[] for _ in cells]
            for col, cell in zip(cols, cells, strict=True):
                if cell:
                    col.append(cell)
        tables.append((" ".join(above), above[-1] if above else "", [" ".join(c) for c in cols]))
        above = []
    return tables


@pytest.fixture(scope="module")
def served_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal with a warmup compile and a serving compile of one Triton kernel (in a request),
    and a torch.compile graph (Dynamo, the eager backend) warmed and recompiled in that request: a
    size mismatch, which `jitwatch status` lists under ``Recompiles by reason``."""
    import sqlite3
    import sys

    import torch
    import torch._dynamo

    from jitwatch.store.journal import JOURNAL_FILE
    from jitwatch.testing import fresh_kernel_cache, monitored
    from tests._paths import TRITON_TESTS

    sys.path.insert(0, str(TRITON_TESTS))
    import kernels_fieldcases as kf

    def sample_probs(logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=-1)

    jdir = tmp_path_factory.mktemp("journal")
    fresh_kernel_cache(kf.slot_mapping)
    torch._dynamo.reset()
    graph = torch.compile(sample_probs, backend="eager")
    try:
        with monitored("warn", journal_dir=jdir, triton_cache_dir=tmp_path_factory.mktemp("triton")) as h:
            with h.monitor.warmup():
                kf.CASES["slot_mapping"]["warmup"][0]()
                graph(torch.zeros(1, 8))
            with h.monitor.request():
                kf.CASES["slot_mapping"]["serving"][0]()
                graph(torch.zeros(2, 8))  # size mismatch at index 0: Dynamo recompiles
            h.monitor.flush()
            # The transcripts show a serving worker: copy the journal before the monitor's
            # uninstall records the worker stopped (its rank then is, rightly, not ready).
            serving = tmp_path_factory.mktemp("serving")
            with sqlite3.connect(jdir / JOURNAL_FILE) as src, sqlite3.connect(serving / JOURNAL_FILE) as dst:
                src.backup(dst)
    finally:
        torch._dynamo.reset()
    return serving


def _cli(*args: str, columns: int) -> list[str]:
    from typer.testing import CliRunner

    from jitwatch.cli import app

    res = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert res.exit_code in (0, 1), res.output
    return res.output.splitlines()


def _check_tables(where: str, doc: list[str], real: list[list[str]]) -> None:
    """Each table of the ``doc`` block is in one of the ``real`` outputs: a table whose title ends
    with the doc table's title (rich wraps a title wider than its table) and with the same columns."""
    documented = _tables(doc)
    assert documented or not any(line.startswith("┏") for line in doc), where
    for _, title, columns in documented:
        now = [cols for out in real for above, _, cols in _tables(out) if above.endswith(title)]
        assert now, f"{where}: table {title!r} is not in today's output"
        assert columns in now, f"{where}: table {title!r} has columns {columns}, today's {now}"


def test_coverage_transcripts_have_todays_tables(served_journal: Path) -> None:
    real = [_cli("coverage", "--journal-dir", str(served_journal), columns=w) for w in (100, 130, 150)]
    found = _transcripts("coverage")
    assert found, "no `$ jitwatch coverage` transcript found in the docs"
    for where, doc in found:
        _check_tables(where, doc, real)


def test_why_transcripts_have_todays_line_shapes(served_journal: Path) -> None:
    real = _cli("why", "--journal-dir", str(served_journal), columns=100)
    head = real[0]
    stamp = head.index(" rank ")  # the time stamp before it, its digits as 9s
    shape = re.sub(r"\d", "9", head[:stamp])
    labels = {line.split(":")[0].strip() for line in real if line.startswith("  ")}
    found = _transcripts("why")
    assert found, "no `$ jitwatch why` transcript found in the docs"
    for where, doc in found:
        assert not doc[0].startswith(" "), f"{where}: starts with {doc[0]!r}"
        for line in doc:
            if line.startswith("  "):
                assert line.split(":")[0].strip() in labels, f"{where}: {line!r} (today's labels: {labels})"
            else:
                assert re.sub(r"\d", "9", line[:stamp]) == shape and line[stamp:].startswith(" rank "), (
                    f"{where}: {line!r} is not today's shape {head!r}"
                )


def test_status_transcripts_have_todays_header_and_tables(served_journal: Path) -> None:
    import io

    from rich.console import Console

    from jitwatch.cli.render import render_status
    from jitwatch.store.journal import Journal
    from jitwatch.views.status import build_status

    url = "http://127.0.0.1:9400"
    with Journal(served_journal, readonly=True) as j:
        status = build_status(j).model_copy(update={"journal_dir": str(served_journal)})
    real = []
    for width in (100, 130, 80):  # the header lines below are the first's (at 80 a journal path may wrap)
        buf = io.StringIO()
        render_status(status, Console(file=buf, width=width, color_system=None), url)
        real.append(buf.getvalue().splitlines())
    line1, line2 = real[0][:2]
    journal_line = re.escape(line2).replace(re.escape(str(served_journal)), ".+").replace(re.escape(url), r"\S+")
    found = _transcripts("status")
    assert found, "no `$ jitwatch status` transcript found in the docs"
    for where, doc in found:
        assert doc[0] == line1, f"{where}: {doc[0]!r}, today: {line1!r}"
        assert re.fullmatch(journal_line, doc[1]), f"{where}: {doc[1]!r}, today: {line2!r}"
        _check_tables(where, doc, real)
