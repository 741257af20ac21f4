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

from jitwatch.config import ConfigError, Mode, Settings
from jitwatch.events import Event, EventKind, Phase
from jitwatch.hooks import ServingCompileError
from jitwatch.monitor import Monitor, WorkerIdentity, get_monitor, install, uninstall

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
