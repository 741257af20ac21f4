"""jitwatch: observability for just-in-time compilation in LLM inference workers.

Public API (see ``docs/api.md``)::

    import jitwatch
    mon = jitwatch.install(mode="warn")
    with mon.warmup():
        ...
    with mon.request():
        ...

The package's layers (``docs/architecture.md``): :mod:`jitwatch.backends` → :mod:`jitwatch.core`
→ :mod:`jitwatch.store` → :mod:`jitwatch.views` → :mod:`jitwatch.sidecar` / :mod:`jitwatch.cli`,
with :mod:`jitwatch.warmup`, :mod:`jitwatch.kernels`, :mod:`jitwatch.integrations` and
:mod:`jitwatch.demo` beside them; :mod:`jitwatch.worker` wires a worker's monitor together.
"""

from __future__ import annotations

from jitwatch._version import __version__
from jitwatch.backends.base import Backend, BackendStatus, Capture, CompileKind, CompileSink
from jitwatch.config import Mode, Settings
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.core.identity import WorkerIdentity
from jitwatch.core.monitor import Monitor
from jitwatch.errors import ConfigError, JitwatchError, ServingCompileError
from jitwatch.worker import create_monitor, get_monitor, install, uninstall

__all__ = [
    "Backend",
    "BackendStatus",
    "Capture",
    "CompileKind",
    "CompileSink",
    "ConfigError",
    "Event",
    "EventKind",
    "JitwatchError",
    "Mode",
    "Monitor",
    "Phase",
    "ServingCompileError",
    "Settings",
    "WorkerIdentity",
    "__version__",
    "create_monitor",
    "get_monitor",
    "install",
    "uninstall",
]
