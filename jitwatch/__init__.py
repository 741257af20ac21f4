"""jitwatch: observability for Triton JIT compilation in LLM inference workers.

Public API (see ``docs/api.md``)::

    import jitwatch
    mon = jitwatch.install(mode="warn")
    with mon.warmup():
        ...
    with mon.request():
        ...
"""

from __future__ import annotations

__version__ = "0.1.0"

from jitwatch.config import ConfigError, Mode, Settings  # noqa: E402
from jitwatch.events import Event, EventKind, Phase  # noqa: E402
from jitwatch.hooks import ServingCompileError  # noqa: E402
from jitwatch.monitor import Monitor, WorkerIdentity, get_monitor, install, uninstall  # noqa: E402

__all__ = [
    "ConfigError",
    "Event",
    "EventKind",
    "Mode",
    "Monitor",
    "Phase",
    "ServingCompileError",
    "Settings",
    "WorkerIdentity",
    "__version__",
    "get_monitor",
    "install",
    "uninstall",
]
