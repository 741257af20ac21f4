"""``python -m jitwatch``: the ``jitwatch`` command."""

from jitwatch.cli import app

app()
