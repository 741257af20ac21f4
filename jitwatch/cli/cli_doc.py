"""Render ``docs/cli.md`` (the CLI reference) from the typer app with typer's own generator.

Usage::

    python -m jitwatch.cli.cli_doc            # print the document
    python -m jitwatch.cli.cli_doc --write    # rewrite docs/cli.md
    python -m jitwatch.cli.cli_doc --check    # exit 1 if docs/cli.md is stale

The text is ``python -m typer jitwatch.cli utils docs --name jitwatch`` run in a child process whose
environment is pinned (``COLUMNS=100``, ``TERM=dumb``, no ``JITWATCH_*``, ``XDG_*`` or typer's own
``TYPER_*`` variables: ``TYPER_USE_RICH=0`` escapes the help text differently), so
the output depends only on the code and the installed typer version; it runs in this checkout's root
(``python -m`` puts the working directory first on ``sys.path``), whatever the caller's. ``make lint`` runs ``--check``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jitwatch.docgen import generated_doc_main

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
TITLE = "jitwatch CLI reference"
NOTE = (
    "Generated from the typer app (`jitwatch/cli/__init__.py`) by `python -m jitwatch.cli.cli_doc --write`;"
    " do not edit by hand. `make lint` fails when it is stale."
)


NOT_PASSED = ("JITWATCH_", "XDG_", "_TYPER", "TYPER_", "FORCE_COLOR")
"""Prefixes of the caller's variables the generator's child does not get (removed, never read:
jitwatch's own variables are parsed only in ``jitwatch.config``, and none may change the text)."""


def _pinned_env() -> dict[str, str]:
    """The child's environment: the caller's, less :data:`NOT_PASSED`, with the terminal pinned."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_PASSED)}
    env.update({"COLUMNS": "100", "LINES": "50", "TERM": "dumb", "NO_COLOR": "1", "LC_ALL": "C.UTF-8"})
    # This checkout's jitwatch, not an installed one.
    root = str(DOC_PATH.parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def render() -> str:
    """The CLI reference as markdown (str, ending in one newline).

    Raises:
        RuntimeError: typer's generator failed (its stderr is in the message).
    """
    with tempfile.TemporaryDirectory(prefix="jitwatch-cli-doc-") as tmp:
        out = Path(tmp) / "cli.md"
        cmd = [sys.executable, "-m", "typer", "jitwatch.cli", "utils", "docs", "--name", "jitwatch"]
        cmd += ["--title", TITLE, "--output", str(out)]
        # cwd: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH (a
        # `jitwatch` package there, another checkout, would be the one rendered)
        root = DOC_PATH.parents[1]
        proc = subprocess.run(cmd, env=_pinned_env(), cwd=root, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"typer utils docs failed (exit {proc.returncode}): {proc.stderr.strip()}")
        text = out.read_text(encoding="utf-8")
    head, sep, rest = text.partition("\n")
    return f"{head}\n\n{NOTE}\n{rest}" if sep else f"{head}\n\n{NOTE}\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m jitwatch.cli.cli_doc [--write | --check] [--path P]``: see
    :func:`jitwatch.docgen.generated_doc_main`."""
    return generated_doc_main(
        argv, module="jitwatch.cli.cli_doc", description=__doc__, doc_path=DOC_PATH, render=render
    )


if __name__ == "__main__":
    raise SystemExit(main())
