"""jitwatch.text: counts read right in messages ("1 kernel", not "1 kernels"); every jitwatch log
record is one line."""

from __future__ import annotations

import io
import logging
import re

import pytest

from jitwatch.text import MAX_LOG_LINE, logger, one_line, plural
from tests._paths import ROOT


@pytest.mark.parametrize(
    ("count", "noun", "nouns", "expected"),
    [
        (1, "kernel", None, "1 kernel"),
        (0, "kernel", None, "0 kernels"),
        (2, "specialization", None, "2 specializations"),
        (1, "entry", "entries", "1 entry"),
        (12, "entry", "entries", "12 entries"),
        (-1, "key", None, "-1 keys"),
    ],
)
def test_plural(count: int, noun: str, nouns: str | None, expected: str) -> None:
    assert plural(count, noun, nouns) == expected


def test_jitwatch_command_is_the_one_that_runs_as_printed(tmp_path, monkeypatch) -> None:
    """`jitwatch` when this interpreter's script is the one on PATH; else that script's path
    (README's `make demo`: .venv/bin not on PATH), shown by ``show_path``; the fixes printed for a
    journal (:func:`~jitwatch.backends.explain.local_jitwatch`) show a home as ``~``."""
    import os
    import shlex
    import sys

    from jitwatch.backends.explain import local_jitwatch
    from jitwatch.text import jitwatch_command

    bindir = os.path.dirname(sys.executable)
    script = os.path.join(bindir, "jitwatch")
    if not os.path.exists(script):
        pytest.skip("no jitwatch script next to this interpreter")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{tmp_path}")
    assert jitwatch_command() == local_jitwatch() == "jitwatch"
    monkeypatch.setenv("PATH", str(tmp_path))  # not activated
    assert jitwatch_command() == shlex.quote(script)
    assert jitwatch_command(lambda p: f"<{p}>") == f"<{script}>"
    home = os.path.dirname(os.path.dirname(bindir))  # the .venv's parent as the home directory
    monkeypatch.setenv("HOME", home)
    assert local_jitwatch() == f"~/{shlex.quote(os.path.relpath(script, home))}"
    other = tmp_path / "jitwatch"  # another install's jitwatch first on PATH: not this interpreter's
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    assert jitwatch_command() == shlex.quote(script)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("guard failure(s):\n  - 0/0: size\n  - 0/1: dtype", "guard failure(s): - 0/0: size; - 0/1: dtype"),
        ("a\r\n\r\nb\rc\x0bd\x0ce\x1cf\x85g\u2028h\u2029i", "a; b; c; d; e; f; g; h; i"),
        ("ok\njitwatch: forged record", "ok; jitwatch: forged record"),
        ("\x1b[31mred\x7f\x9b\ttab", "\\x1b[31mred\\x7f\\x9b\ttab"),
        ("\n\n", ""),
    ],
)
def test_one_line(text: str, expected: str) -> None:
    assert one_line(text) == expected


def test_one_line_is_bounded_and_says_how_much_it_cut() -> None:
    line = one_line("x" * (MAX_LOG_LINE * 3))
    assert len(line) <= MAX_LOG_LINE and line.endswith(f"… ({MAX_LOG_LINE * 2 + 40} more characters)"), line[-60:]
    assert one_line("y" * 100, 50).startswith("y" * 10) and len(one_line("y" * 100, 50)) <= 50


def test_a_jitwatch_logger_writes_each_record_as_one_line() -> None:
    """A handler of the host's (here: a stream) gets one line per record, whatever the arguments."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    log = logger("jitwatch.test_one_line")
    assert logger("jitwatch.test_one_line").filters == log.filters and len(log.filters) == 1  # added once
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("reason %s; key %r", "0/0: a\nWARNING jitwatch forged", "k\n")
        log.error("plain %d", 3)
    finally:
        log.removeHandler(handler)
    assert stream.getvalue().splitlines() == [
        "WARNING jitwatch.test_one_line reason 0/0: a; WARNING jitwatch forged; key 'k\\n'",
        "ERROR jitwatch.test_one_line plain 3",
    ]


def test_every_jitwatch_module_logs_through_a_one_line_logger() -> None:
    """``logging.getLogger`` in jitwatch only in jitwatch.text (and for asyncio's logger, which
    jitwatch does not write to): every module's ``log`` is ``jitwatch.text.logger(...)``."""
    found = []
    for path in sorted((ROOT / "jitwatch").rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"=\s*logging\.getLogger\(", line):
                found.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert found == [
        'jitwatch/httpguard.py: logger = logging.getLogger("asyncio")',
        "jitwatch/text.py: log = logging.getLogger(name)",
    ], found
