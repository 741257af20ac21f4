"""``jitwatch demo``: a sidecar and a worker process with real compiles, end to end.

* :mod:`.runner` — the parent: journal, sidecar, worker process, summary (``jitwatch demo``);
* :mod:`.worker` — the worker (``python -m jitwatch.demo.worker``): warmup, requests, a serving
  compile warmup misses.
"""

from jitwatch.demo.runner import (
    DemoOptions,
    DemoReport,
    default_journal_dir,
    journal_lock,
    print_summary,
    reset_journal,
    run_demo,
    save_report,
)
from jitwatch.errors import DemoError, DemoSetupError

__all__ = [
    "DemoError",
    "DemoOptions",
    "DemoReport",
    "DemoSetupError",
    "default_journal_dir",
    "journal_lock",
    "print_summary",
    "reset_journal",
    "run_demo",
    "save_report",
]
