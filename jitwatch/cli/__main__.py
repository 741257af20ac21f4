"""``python -m jitwatch.cli``: the ``jitwatch`` command."""

from jitwatch.cli import app

app()
