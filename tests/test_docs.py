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
