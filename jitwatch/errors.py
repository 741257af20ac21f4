"""Every exception jitwatch raises on purpose derives from :class:`JitwatchError`.

One base, so a host can catch "anything jitwatch refused" in one clause; each subclass also
derives from the builtin it refines (``ValueError`` for bad input, ``RuntimeError`` for a state
that forbids the operation, ``LookupError`` for a name that resolves to nothing), so existing
``except ValueError`` code keeps working.

Errors are defined here, in the bottom layer, so that any layer can raise them and a caller can
import them without importing the layer that raises (``docs/architecture.md``).
"""

from __future__ import annotations


class JitwatchError(Exception):
    """Base of every jitwatch error."""


class ConfigError(JitwatchError, ValueError):
    """A ``JITWATCH_*`` variable (or an equivalent argument) holds a value jitwatch cannot use;
    the message names the variable and what was expected."""


class ServingCompileError(JitwatchError, RuntimeError):
    """Raised in ``error`` mode for a compile during the serving phase.

    Deliberately not caught by jitwatch: it reaches the host from inside the compiler's callback
    (for Triton, from ``knobs.runtime.jit_post_compile_hook``, after any chained hook ran).
    ``backend``, ``kernel`` and ``key`` say what compiled (``key`` redacted of home paths).
    """

    def __init__(
        self, message: str, *, backend: str | None = None, kernel: str | None = None, key: str | None = None
    ) -> None:
        super().__init__(message)
        self.backend = backend
        self.kernel = kernel
        self.key = key


class BackendError(JitwatchError, RuntimeError):
    """A backend cannot be selected or installed (unknown name in ``JITWATCH_BACKENDS``, a
    backend class that does not follow :class:`jitwatch.backends.base.Backend`)."""


class JournalCorruptError(JitwatchError, RuntimeError):
    """The journal file exists but is not a readable SQLite database (``SQLITE_CORRUPT`` /
    ``SQLITE_NOTADB`` or a failed ``quick_check``). Only this error moves a journal aside."""


class JournalVersionError(JitwatchError, RuntimeError):
    """The journal was written by a jitwatch whose schema this one cannot read or write.

    The message names both schema revisions and both jitwatch versions; the file is left alone
    (never moved aside): upgrade jitwatch or point ``JITWATCH_DIR`` elsewhere."""


class JournalUnsafeError(JitwatchError, PermissionError):
    """The journal directory or one of its files cannot be used safely: a symlink or a
    non-regular file where ``journal.db``/``-wal``/``-shm`` should be, a directory or file owned
    by another user, or a directory others may write that jitwatch could not make owner-only.
    The message names the path and what to do; nothing is created or followed
    (see :mod:`jitwatch.store.safety`)."""


class ManifestError(JitwatchError, ValueError):
    """A warmup manifest cannot be used: unreadable, not JSON, truncated, malformed or hostile."""


class ManifestVersionError(ManifestError):
    """The manifest was written by a newer jitwatch (format version above this one's)."""


class ManifestEntryRefused(ManifestError):
    """One manifest entry may not be replayed: a refused compile option (named in the message) or a
    key that its ``specialization_data`` does not reproduce with the current kernel."""


class KernelNotResolved(JitwatchError, LookupError):
    """A manifest entry's kernel could not (or may not) be imported; ``str()`` is the reason."""


class CompileOnlyLaunchError(JitwatchError, RuntimeError):
    """Something tried to launch a kernel while the compile-only Triton driver is active."""


class PortUnavailableError(JitwatchError, RuntimeError):
    """``host:port`` cannot be bound (in use by a listener, or not an address of this host)."""


class DemoError(JitwatchError, RuntimeError):
    """``jitwatch demo`` failed while running (the worker failed); the message says why."""

    exit_code: int = 1
    """The CLI's exit status for this error."""


class DemoSetupError(DemoError):
    """``jitwatch demo`` cannot start (port in use, journal or output directory unusable, journal
    locked by another demo, bad variable); checked before anything runs."""

    exit_code = 2


class PluginError(JitwatchError, RuntimeError):
    """The vLLM plugin failed in ``error`` mode (``JITWATCH_MODE=error``); otherwise it logs."""


class StoreError(JitwatchError, RuntimeError):
    """Shared storage (a manifest directory, a Redis server, a Triton cache) could not be reached or
    read, or a location string is not one jitwatch understands."""


__all__ = [
    "BackendError",
    "CompileOnlyLaunchError",
    "ConfigError",
    "DemoError",
    "DemoSetupError",
    "JitwatchError",
    "JournalCorruptError",
    "JournalVersionError",
    "KernelNotResolved",
    "ManifestEntryRefused",
    "ManifestError",
    "ManifestVersionError",
    "PluginError",
    "PortUnavailableError",
    "ServingCompileError",
    "StoreError",
]
