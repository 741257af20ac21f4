"""jitwatch.text: counts read right in messages ("1 kernel", not "1 kernels")."""

from __future__ import annotations

import pytest

from jitwatch.text import plural


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
