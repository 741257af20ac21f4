"""The command line shared by jitwatch's generated documents (``docs/metrics.md`` from the metrics
contract, ``docs/cli.md`` from the typer app): print, ``--write`` or ``--check`` one file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def generated_doc_main(
    argv: list[str] | None, *, module: str, description: str | None, doc_path: Path, render: Callable[[], str]
) -> int:
    """Run ``python -m <module> [--write | --check] [--path P]`` for the document ``render()``
    produces (default path ``doc_path``; ``description``: the module's docstring, for ``--help``):
    without a flag print it; ``--write`` rewrites the file;
    ``--check`` returns 1, with one line on stderr naming the command that rewrites it, when the file
    differs from ``render()`` or is missing. Returns the exit code (0 or 1); argparse exits 2 on
    bad arguments."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=(description or module).splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"rewrite {doc_path.name}")
    group.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    parser.add_argument("--path", type=Path, default=doc_path)
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        args.path.write_text(text, encoding="utf-8")
        return 0
    if args.check:
        current = args.path.read_text(encoding="utf-8") if args.path.exists() else ""
        if current != text:
            print(f"{args.path} is stale: run python -m {module} --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0
