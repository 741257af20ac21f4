"""The worker-side entry points: a monitor wired to the journal writer and the selected backends.

:func:`install` is what a worker calls (``jitwatch.install``); :func:`create_monitor` builds the same
monitor without making it the process-wide one (tests, benchmarks, several monitors side by side).
This module is where the layers meet: the core monitor (:mod:`jitwatch.core.monitor`) gets the
store's :class:`~jitwatch.store.writer.JournalWriter` as its event sink and the backends from
:func:`jitwatch.backends.create`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from jitwatch._version import __version__
from jitwatch.backends.base import Backend
from jitwatch.config import Mode, Settings, journal_dir_value, parse_mode
from jitwatch.core.identity import WorkerIdentity
from jitwatch.core.monitor import EventSink, Monitor, NullSink
from jitwatch.export.otlp import build_event_exporters
from jitwatch.store.writer import JournalWriter
from jitwatch.text import logger

log = logger(__name__)


def export_resource(settings: Settings, identity: WorkerIdentity) -> dict[str, Any]:
    """OpenTelemetry resource attributes of this worker's exported events: host, pid, ranks,
    backends selected, jitwatch version (``service.name`` comes from ``OTEL_SERVICE_NAME``)."""
    attrs: dict[str, Any] = {
        "host.name": identity.host,
        "process.pid": identity.pid,
        "jitwatch.rank": identity.rank,
        "jitwatch.version": __version__,
        "jitwatch.backends": list(settings.backends) if settings.backends is not None else ["all"],
    }
    for name in ("tp_rank", "pp_rank", "dp_rank", "local_rank"):
        value = getattr(identity, name)
        if value is not None:
            attrs[f"jitwatch.{name}"] = value
    return attrs


def journal_writer(settings: Settings, identity: WorkerIdentity) -> JournalWriter:
    """A :class:`JournalWriter` for ``settings`` (directory, retention, queue, heartbeat) that
    heartbeats as ``identity`` and hands its events to the exporters ``JITWATCH_EVENTS_EXPORTER``
    selects (:func:`jitwatch.export.otlp.build_event_exporters`)."""
    return JournalWriter(
        settings.journal_dir,
        queue_size=settings.queue_size,
        rank=identity.rank,
        journal_kwargs={
            "retention_events": settings.retention_events,
            "retention_seconds": settings.retention_seconds,
            "max_kernels": settings.max_kernels,
        },
        heartbeat=(identity.host, identity.pid, identity.rank),
        heartbeat_s=settings.heartbeat_seconds,
        exporters=build_event_exporters(settings.events_exporter, export_resource(settings, identity)),
    )


def create_monitor(
    settings: Settings | None = None,
    *,
    mode: Mode | str | None = None,
    identity: WorkerIdentity | None = None,
    backends: Sequence[Backend] | None = None,
    sink: EventSink | None = None,
    tracer_provider: Any | None = None,
    span_attributes: dict[str, Any] | None = None,
) -> Monitor:
    """A new, not yet installed :class:`Monitor` writing to the journal of ``settings``.

    Args:
        settings: default :meth:`Settings.for_worker` (raises :class:`~jitwatch.errors.ConfigError`
            for a variable a worker reads; sidecar-only ones such as ``JITWATCH_PORT`` are not its concern).
        mode: default ``settings.mode``. In ``off`` mode no journal writer is created.
        identity: default :meth:`WorkerIdentity.from_settings`.
        backends: default those ``settings.backends`` (``JITWATCH_BACKENDS``) names.
        sink: default a :class:`JournalWriter` (:func:`journal_writer`).

    Raises:
        jitwatch.errors.BackendError: ``JITWATCH_BACKENDS`` names an unknown backend.
    """
    settings = settings or Settings.for_worker()
    resolved = parse_mode(mode) if mode is not None else settings.mode
    identity = identity or WorkerIdentity.from_settings(settings)
    if sink is None:
        sink = NullSink() if resolved is Mode.OFF else journal_writer(settings, identity)
    monitor = Monitor(
        settings,
        sink=sink,
        mode=resolved,
        identity=identity,
        backends=backends,
        tracer_provider=tracer_provider,
        span_attributes=span_attributes,
    )
    if isinstance(sink, JournalWriter) and sink.inflight_source is None:
        sink.inflight_source = monitor.inflight_snapshot  # in-flight compiles, journaled by the writer
    return monitor


_monitor: Monitor | None = None
_monitor_lock = threading.Lock()


def install(
    mode: Mode | str | None = None,
    *,
    rank: int | None = None,
    journal_dir: str | os.PathLike[str] | None = None,
    identity: WorkerIdentity | None = None,
    tracer_provider: Any | None = None,
    span_attributes: dict[str, Any] | None = None,
) -> Monitor:
    """Install the process-wide :class:`Monitor` (idempotent: returns the existing one, unchanged;
    a second call asking for another ``mode`` or ``journal_dir`` logs a warning saying so).

    Args:
        mode: ``off``/``warn``/``error``; default ``JITWATCH_MODE`` (``warn``).
        rank: global rank; default ``JITWATCH_RANK`` (offset) + ``RANK``/``LOCAL_RANK`` (or 0).
        journal_dir: default ``JITWATCH_DIR``; read as that variable is (``~`` expanded, blank =
            not given).

    Backends are those ``JITWATCH_BACKENDS`` selects (default: every available one); a backend
    whose library the host has not imported yet hooks in when it does.

    Raises:
        jitwatch.errors.ConfigError: a ``JITWATCH_*`` variable a worker reads has an unusable value
            (not for the sidecar-only ones, :data:`jitwatch.config.SIDECAR_ONLY_VARIABLES`), or
            ``mode`` is not a mode, or ``journal_dir`` has a ``~`` that cannot be expanded (on a
            second call too).
        jitwatch.errors.BackendError: ``JITWATCH_BACKENDS`` names an unknown backend.
    """
    global _monitor
    with _monitor_lock:
        asked_dir = _journal_dir_arg(journal_dir)
        if _monitor is not None:
            _warn_if_not_as_asked(_monitor, mode, asked_dir)
            return _monitor
        settings = Settings.for_worker()
        if asked_dir is not None:
            settings = replace(settings, journal_dir=asked_dir)
        if identity is None:
            identity = WorkerIdentity.from_settings(settings, rank=rank)
        _monitor = create_monitor(
            settings, mode=mode, identity=identity, tracer_provider=tracer_provider, span_attributes=span_attributes
        ).install()
        return _monitor


def _journal_dir_arg(journal_dir: str | os.PathLike[str] | None) -> Path | None:
    """``install(journal_dir=...)`` read as ``JITWATCH_DIR`` is (:func:`jitwatch.config.journal_dir_value`):
    whitespace around it dropped, ``~`` expanded, blank = not given. It was ``Path(value)`` as is:
    ``"~/x"`` made a directory named ``~`` in the working directory.

    Raises:
        jitwatch.errors.ConfigError: a ``~`` that cannot be expanded."""
    if journal_dir is None:
        return None
    return journal_dir_value(os.fspath(journal_dir), "journal_dir")


_MAX_WARNED_ASKS = 32
_warned_asks: set[tuple[str, ...]] = set()
"""What a second :func:`install` asked for and was warned about: each once per process, and no
more than :data:`_MAX_WARNED_ASKS` distinct asks (bounded memory for a caller that varies them)."""


def _warn_if_not_as_asked(monitor: Monitor, mode: Mode | str | None, journal_dir: Path | None) -> None:
    """A second :func:`install` that asks for another mode or journal directory than the monitor
    already installed gets that monitor unchanged: say so (one warning per distinct ask) rather
    than let ``install(mode="error")`` read as error mode while the monitor warns. Directories are
    compared absolute and normalised (``a/../b`` is ``b``; symbolic links are not resolved). A bad
    ``mode`` raises :class:`~jitwatch.errors.ConfigError` as on a first call."""
    asked: list[str] = []
    wanted = parse_mode(mode) if mode is not None else monitor.mode
    if wanted is not monitor.mode:
        asked.append(f"mode={wanted.value!r}, it runs in {monitor.mode.value!r}")
    running_dir = os.path.abspath(monitor.settings.journal_dir)
    if journal_dir is not None and os.path.abspath(journal_dir) != running_dir:
        asked.append(f"journal_dir={os.path.abspath(journal_dir)!r}, it writes to {running_dir!r}")
    key = tuple(asked)
    if asked and key not in _warned_asks and len(_warned_asks) < _MAX_WARNED_ASKS:
        _warned_asks.add(key)
        log.warning(
            "jitwatch: install() asked for %s: returned the monitor already installed, unchanged; "
            "call jitwatch.uninstall() first to install another",
            "; ".join(asked),
        )


_forked_away: list[Monitor] = []
"""Monitors inherited from the parent by a forked child: kept referenced (never collected, never
closed) so the child never touches the parent's journal connection."""


def _after_fork_in_child() -> None:
    """``os.register_at_fork(after_in_child=...)``: the child starts with no process-wide monitor.

    The parent's monitor is detached (:meth:`Monitor.detach_after_fork`: hooks restored, no
    ``atexit`` flush, its sink replaced): its writer thread does not exist in the child, so events
    given to it would be lost uncounted and the child's exit would wait 5 s. The child's own
    :func:`install` then builds a new monitor and journal writer with the child's pid."""
    global _monitor, _monitor_lock
    _monitor_lock = threading.Lock()  # another thread may have held it at fork time
    parent, _monitor = _monitor, None
    if parent is not None:
        _forked_away.append(parent)
        parent.detach_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def get_monitor() -> Monitor | None:
    """The process-wide monitor, if :func:`install` was called."""
    return _monitor


def uninstall() -> None:
    """Uninstall the process-wide monitor (restores every backend's hooks, closes its journal writer)."""
    global _monitor
    with _monitor_lock:
        if _monitor is not None:
            _monitor.uninstall()
            _monitor = None


__all__ = ["create_monitor", "get_monitor", "install", "journal_writer", "uninstall"]
