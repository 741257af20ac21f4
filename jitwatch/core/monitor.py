"""The JIT monitor: phases, requests, ranks and modes — for every backend, knowing none of them.

Usage in a worker process (through :func:`jitwatch.install`, which wires the monitor to the
journal writer and to the backends ``JITWATCH_BACKENDS`` selects)::

    import jitwatch

    mon = jitwatch.install(mode="warn")  # backends hooked in; phase "startup"
    with mon.warmup():                   # phase "warmup"; span "jitwatch.warmup"
        run_warmup()                     # compiles here are expected
    # phase "serving": a compile now is a post-warmup compile (logged / raised per mode)
    with mon.request():                  # the first one's latency is recorded per rank
        serve()

The monitor is the :class:`~jitwatch.backends.base.CompileSink` every backend reports to. It
stamps each capture with the phase and request current when the compile *began*, counts it,
applies the mode (``warn``: one log line per backend, name and key; ``error``: raise
:class:`~jitwatch.errors.ServingCompileError`), and hands the journal writer a deferred event
that is materialized on the writer's thread. On the compiling thread it does the least possible:
one ``time.perf_counter()`` read and a tuple at ``begin``; a clock read, a lock-free append of
(phase, seconds) for the counters, the warn-once dictionary lookup, a tuple and a buffer append at
``finish``/:meth:`Monitor.end`, and at :meth:`Monitor.ended` (a compile seen only at its end; one
comparison more for its phase). Wall-clock times, names, the key's redaction, the backend's detail
and the pydantic :class:`~jitwatch.core.events.Event` are built on the writer's thread
(``docs/architecture.md``, "The compiling thread").
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import logging
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ContextDecorator, contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from jitwatch.backends.base import Backend, BackendStatus, Capture, CompileKind, FrameWatcher, current_parent
from jitwatch.backends.base import parent_marks as _marks
from jitwatch.backends.explain import local_jitwatch, runnable_fix, why_json_command
from jitwatch.config import Mode, Settings, parse_mode
from jitwatch.core.diagnosis import Diagnoser, explainers_of
from jitwatch.core.events import DeferredEvent, Event, EventKind, EventLane, Phase, built_event
from jitwatch.core.identity import WorkerIdentity
from jitwatch.core.process import process_marker
from jitwatch.core.stalls import RequestStalls
from jitwatch.core.tracing import (
    ATTR_COMPILE_SECONDS,
    ATTR_DURATION_SECONDS,
    ATTR_KERNELS_COMPILED,
    ATTR_RANK,
    build_tracer_provider,
    warmup_span,
)
from jitwatch.errors import JitwatchError, ServingCompileError
from jitwatch.redact import redact
from jitwatch.text import logger, one_line

log = logger(__name__)

_WARNED_MAX = 4096
"""(backend, name, key) triples remembered for warn-once; the oldest is forgotten past this."""
_FOLD_AT = 4096
"""Compiles ended and not yet counted past which the compiling thread folds them itself."""
ABANDON_AFTER_S = 1.0
"""Seconds a compile begun with :meth:`Monitor.begin_watched` must have been in flight before
:meth:`Monitor.sweep_abandoned` may drop it (a compile that ends sooner is never looked at)."""
SWEEP_INTERVAL_S = 0.5
"""Least seconds between two looks at the compiling threads' stacks by
:meth:`Monitor.sweep_abandoned` (the journal writer's thread calls it every wake-up, 0.1 s)."""
_ABANDON_WARNED_MAX = 4096
"""(backend, name) pairs whose abandoned compile was logged; past this, the oldest is forgotten."""
_NOTICES_MAX = 256
"""Distinct backend notices remembered by :func:`_notice`; past this, every one is logged again."""
_notices: set[str] = set()
_notices_lock = threading.Lock()


def _notice(text: str) -> None:
    """Log a backend's ``degraded`` notice (what its library version lacks) at WARNING once per
    process, later ones at DEBUG: every monitor installed in the process (a re-install, a second
    :class:`Monitor`) reports the same backend status, and the notice says nothing new the second
    time. The status itself is still journaled each time (``worker_start``, ``backend_ready``).
    Never raises."""
    try:
        with _notices_lock:
            first = text not in _notices
            if first and len(_notices) < _NOTICES_MAX:
                _notices.add(text)
        log.log(logging.WARNING if first else logging.DEBUG, "jitwatch: %s", text)
    except Exception:  # noqa: BLE001 - a log handler's fault must not reach the host
        pass


def _forget_notices() -> None:
    """Forget which notices :func:`_notice` logged (a test's fresh process)."""
    with _notices_lock:
        _notices.clear()


_current_request: contextvars.ContextVar[int | None] = contextvars.ContextVar("jitwatch_request", default=None)

_EVENT_KIND = {
    CompileKind.COMPILE: EventKind.COMPILE,
    CompileKind.AUTOTUNE: EventKind.AUTOTUNE,
    CompileKind.GRAPH_CAPTURE: EventKind.GRAPH_CAPTURE,
}

# Enum members bound once: ``Phase.SERVING`` is a class-attribute lookup through the enum
# metaclass (~0.2 µs on the 2-core VM), too much to repeat on a compiling thread.
_SERVING = Phase.SERVING
_EK_COMPILE = EventKind.COMPILE
_COMPILE = CompileKind.COMPILE
_WARN = Mode.WARN
_ERROR = Mode.ERROR
_perf = time.perf_counter
_get_ident = threading.get_ident

# A compile token (what ``Monitor.begin`` returns): a plain tuple, indexed by these. A token of
# ``Monitor.begin_watched`` has two more: the compiling thread's id and the backend's FrameWatcher.
_T_BACKEND, _T_NAME, _T_PHASE, _T_REQUEST, _T_START, _T_PARENT = range(6)
_T_THREAD, _T_WATCHER = range(6, 8)
_WATCHED_LEN = 8
_by_start = itemgetter(_T_START)


class EventSink(Protocol):
    """Where the monitor sends events: :class:`jitwatch.store.writer.JournalWriter` in a worker.

    ``submit`` must not block (it runs on compiling threads); it returns ``False`` when the event
    was dropped (and counted by the sink).
    """

    def submit(self, item: Event | DeferredEvent) -> bool: ...

    def flush(self, timeout: float = 5.0) -> bool: ...

    def close(self, timeout: float = 5.0) -> None: ...


@runtime_checkable
class ExitRecordingSink(Protocol):
    """A sink that records how its worker exited (:class:`jitwatch.store.writer.JournalWriter`):
    :attr:`exit_exception`, set before ``close``, names the unhandled exception's type."""

    exit_exception: str | None


def exception_type_name(exc: BaseException) -> str:
    """``exc``'s type as recorded for an unclean exit: the qualified name, with its module unless
    built in (``MemoryError``, ``torch.OutOfMemoryError``). Never the message (it may hold user
    data). Never raises: the name and module are read through ``type``'s own descriptors (a
    metaclass cannot override them), a module that is not a ``str`` (a class attribute of any
    object) is left out, and any failure gives ``BaseException``."""
    try:
        kind = type(exc)
        name = type.__dict__["__qualname__"].__get__(kind)
        module = type.__dict__["__module__"].__get__(kind)
        if type(name) is not str or not name:
            return "BaseException"
        if type(module) is not str or module in ("", "builtins"):
            return name
        return f"{module}.{name}"
    except Exception:  # noqa: BLE001 - read at the host's exit: never raises
        return "BaseException"


def unhandled_exception() -> BaseException | None:
    """The exception the interpreter is exiting on, read in an ``atexit`` handler: Python's top-level
    error printing stores it in ``sys.last_exc`` (3.12+) / ``sys.last_value`` before the exit
    handlers run (an unhandled exception in the main thread, ``KeyboardInterrupt`` included).
    ``None`` otherwise: a normal end, or ``sys.exit(n)`` / ``SystemExit`` whatever ``n`` (the
    interpreter consumes the exception, and its code, before the handlers run: not knowable there).
    An exception in another thread ends only that thread and is not seen. Never raises."""
    try:  # no truth test: an exception class may define __bool__ / __len__ (falsy, or raising)
        exc = getattr(sys, "last_exc", None)
        if exc is None:
            exc = getattr(sys, "last_value", None)
        return exc if isinstance(exc, BaseException) and not isinstance(exc, SystemExit) else None
    except Exception:  # noqa: BLE001 - read at the host's exit: never raises
        return None


class NullSink:
    """A sink that keeps nothing (``off`` mode)."""

    def submit(self, item: Event | DeferredEvent) -> bool:
        return False

    def flush(self, timeout: float = 5.0) -> bool:
        return True

    def close(self, timeout: float = 5.0) -> None:
        return None


@dataclass(slots=True)
class Started:
    """A compile in flight, as :meth:`Monitor.inflight` lists it (``start_wall`` Unix seconds,
    ``start_perf`` ``time.perf_counter()`` seconds). :meth:`Monitor.begin`'s token itself is a
    plain tuple (opaque to backends); this view of it is built on demand."""

    backend: str
    name: str
    phase: Phase
    request_id: int | None
    start_wall: float
    start_perf: float
    parent: str | None = None
    """The compile of another backend this one happened inside (``"torch_compile:0/1"``), if any."""


def _wall(start_perf: float) -> float:
    """Unix seconds of a past ``time.perf_counter()`` reading (the writer thread converts; the
    compiling thread reads one clock)."""
    return time.time() - (_perf() - start_perf)


def _compile_event(item: tuple[Any, ...]) -> Event:
    """The :class:`Event` of a compile waiting for the journal writer, built on its thread.

    ``item`` is ``(_compile_event, monitor, token, duration_s, start_wall | None, capture | arg,
    build | None, warn, request_name, key)``: a plain tuple (one ``BUILD_TUPLE`` on the compiling
    thread) that a sink with ``plain_events`` (:class:`~jitwatch.store.writer.JournalWriter`)
    builds as ``item[0](item)``; any other sink gets it as a :class:`_CompileEvent`
    (:class:`~jitwatch.core.events.DeferredEvent`). ``build(arg)`` (when given) returns the
    :class:`Capture`; ``start_wall`` ``None`` means "convert the token's ``perf_counter`` start".
    A ``build`` (or a :attr:`Capture.detail` callable) that raises is a hook error (counted,
    logged, journaled); the compile is still journaled, from what the compiling thread handed over
    (:meth:`Monitor._unbuilt`; ``attrs.capture_error`` names the exception's type).
    """
    _, mon, token, duration, start, arg, build, warn, request_name, key = item
    if mon._ended:
        mon.fold_counts()
    if start is None:
        start = _wall(token[_T_START])
    c: Capture
    if build is None:
        c = arg
    else:
        try:
            c = build(arg)
        except Exception as exc:  # noqa: BLE001 - a backend's decoding fault: this event keeps what is known
            c = mon._unbuilt(token, key, exc)
    ident_attrs = mon._identity_attrs
    ident: WorkerIdentity = ident_attrs[0]
    if ident is not mon.identity:  # replaced since (the fields of one are read once)
        ident_attrs = mon._identity_attrs = (mon.identity, mon.identity.attrs())
        ident = ident_attrs[0]
    detail = c.detail
    if callable(detail):
        try:
            detail = detail()
        except Exception as exc:  # noqa: BLE001 - as a build that raises: a hook error, the event kept
            mon.hook_error(c.backend, "capture build (journal writer)", exc)
            detail = {"capture_error": type(exc).__name__}
    stages = c.stages
    attrs: dict[str, Any] = {"module": c.module, "stages": dict(stages) if stages else {}}
    if detail:
        attrs.update(detail)
    attrs.update(ident_attrs[1])
    parent = token[_T_PARENT]
    if parent is not None and parent != f"{c.backend}:{attrs.get('compile_id')}":
        attrs["parent"] = parent
    request_id = token[_T_REQUEST]
    if request_id is not None:
        attrs["request_id"] = request_id
        if request_name:
            attrs["request"] = request_name  # e.g. the vLLM request ids of the engine step
    for v in attrs.values():  # a None is not stored; usually there is none
        if v is None:
            attrs = {k: v for k, v in attrs.items() if v is not None}
            break
    # Every field is jitwatch's own and typed (a backend's Capture, the token, the identity):
    # built without pydantic's validation when the types are exactly right (built_event).
    event = built_event(
        _EK_COMPILE if c.kind is _COMPILE else _EVENT_KIND.get(c.kind, _EK_COMPILE),  # (Enum hash: a Python call)
        start + duration,
        start,
        duration,
        ident.rank,
        ident.pid,
        ident.host,
        token[_T_PHASE],
        c.backend,
        c.name,
        c.key,
        c.cache_hit,
        attrs,
    )
    diagnoser: Diagnoser | None = mon.diagnoser
    reason = diagnoser.observe(event) if diagnoser is not None else None
    if warn is not None and log.isEnabledFor(logging.WARNING):  # on the writer thread: with the reason
        why = f": {reason.text}" if reason is not None else ""
        # the manifest commands name this worker's journal and one absolute manifest (runnable_fix)
        # run as this interpreter's jitwatch (local_jitwatch: .venv/bin/jitwatch when not on PATH)
        command = local_jitwatch()
        fix = (
            f" (fix: {runnable_fix(reason.fixes[0], mon.journal_dir, command)})"
            if reason is not None and reason.fixes
            else ""
        )
        key = (
            ""
            if reason is not None and reason.text == c.key
            else _key_shown(diagnoser, event, mon.journal_dir, command)
        )
        log.warning("jitwatch: post-warmup compile of %s on rank %d%s%s%s", warn, ident.rank, why, fix, key)
    return event


def _key_shown(diagnoser: Diagnoser | None, event: Event, journal_dir: Path, command: str) -> str:
    """The warning line's end for ``event``'s key (writer thread): the specialization it stands
    for, in its backend's words (:meth:`Diagnoser.describe_key`), and the command that prints the
    full key, ``; specialization x_ptr: *fp32 aligned16, … (the full key: `jitwatch why --journal-dir
    <dir> --json`)``, run as ``command``; else the key itself (at most 2,000 characters), ``; key <key>``;
    nothing for a compile without a key (a torch.compile first compile: there is none to show)."""
    described = diagnoser.describe_key(event) if diagnoser is not None else None
    if described is None:
        return f"; key {redact(event.key)[:2000]}" if event.key else ""
    return f"; specialization {redact(described)} (the full key: {why_json_command(journal_dir, command)})"


class _CompileEvent(tuple[Any, ...]):
    """:func:`_compile_event`'s tuple as a :class:`~jitwatch.core.events.DeferredEvent`, for a
    sink without ``plain_events`` (a tuple subclass: one C call, ``tuple.__new__``)."""

    __slots__ = ()

    def to_event(self) -> Event:
        return _compile_event(self)


_new_event = tuple.__new__


def _stamp(ev: Event, ident: WorkerIdentity) -> Event:
    ev.pid, ev.host = ident.pid, ident.host
    return ev


class _Stamped:
    """A deferred event stamped with the worker's pid and host when the writer builds it."""

    __slots__ = ("ident", "inner")

    def __init__(self, inner: DeferredEvent, ident: WorkerIdentity) -> None:
        self.inner, self.ident = inner, ident

    def to_event(self) -> Event:
        return _stamp(self.inner.to_event(), self.ident)


class Monitor:
    """Records compiles, autotune runs and phase changes of one worker process, for every backend.

    Args:
        settings: journal directory, retention, queue size (default: :meth:`Settings.from_env`).
        sink: where events go (:class:`~jitwatch.store.writer.JournalWriter`); :func:`jitwatch.install`
            and :func:`jitwatch.worker.create_monitor` build one. Owned: closed by :meth:`uninstall`.
        mode: ``off``/``warn``/``error`` (default from settings, i.e. ``JITWATCH_MODE``).
        identity: ranks and labels (default: :meth:`WorkerIdentity.from_settings`).
        backends: the backends to install (default: :func:`jitwatch.backends.create` of
            ``settings.backends``, i.e. ``JITWATCH_BACKENDS``).
        tracer_provider: OpenTelemetry provider for the warmup span; default built from the
            ``OTEL_*`` environment (see :mod:`jitwatch.core.tracing`); pass ``False`` to disable.

    Thread-safe. Implements :class:`jitwatch.backends.base.CompileSink`.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        sink: EventSink,
        mode: Mode | str | None = None,
        identity: WorkerIdentity | None = None,
        backends: Sequence[Backend] | None = None,
        tracer_provider: Any | None = None,
        span_attributes: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.mode = parse_mode(mode) if mode is not None else self.settings.mode
        self.identity = identity or WorkerIdentity.from_settings(self.settings)
        self._identity_attrs: tuple[WorkerIdentity, dict[str, Any]] = (self.identity, self.identity.attrs())
        """The identity and its :meth:`~WorkerIdentity.attrs`, read once: every compile event
        carries them (rebuilt if :attr:`identity` is replaced; a ``WorkerIdentity`` handed to a
        monitor is not to be changed in place)."""
        self._state = "new"  # new → installed → uninstalled
        self.sink = sink  # the property: also whether it takes plain tuples (and its EventLane)
        if backends is None:
            from jitwatch.backends import create

            backends = create(self.settings.backends) if self.mode is not Mode.OFF else []
        self.backends: list[Backend] = list(backends)
        self.backend_statuses: dict[str, BackendStatus] = {}
        self._labels = {b.name: b.label for b in self.backends}
        self.diagnoser = Diagnoser(explainers_of(self.backends))
        """Writes the reason of each serving compile (on the journal writer's thread)."""
        self.stalls = RequestStalls()
        """Compile seconds inside each marked request (``jitwatch_request_compile_seconds``)."""
        self.phase = Phase.STARTUP
        self._phase_since = 0.0
        """Unix seconds of the last phase change (:meth:`begin_warmup`, :meth:`activate`), set
        before :attr:`phase`: :meth:`ended` looks the phase up by time only for a compile whose
        midpoint is older (:meth:`phase_at`)."""
        self._lock = threading.Lock()
        self._inflight: dict[int, tuple[Any, ...]] = {}  # id(token) → token (see begin)
        self._inflight_walls: dict[int, tuple[tuple[Any, ...], float]] = {}
        """id(token) → (token, its Unix start) of the compiles the last :meth:`inflight_snapshot`
        listed (writer thread only)."""
        self._warned: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # bounded: _WARNED_MAX
        self._request_ids = itertools.count(1)
        self._request_names: dict[int, str] = {}  # open requests' names, by request_id
        self.first_request_done = False
        self.requests_seen = 0
        self.hook_errors = 0
        self.abandoned_compiles = 0
        """Compiles dropped from the in-flight compiles by :meth:`sweep_abandoned`."""
        self._abandon_warned: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._next_sweep = 0.0  # time.perf_counter() seconds
        self._tallies: dict[Phase, list[Any]] = {p: [0, 0.0] for p in Phase}
        """phase → [compiles, compile seconds], folded from ``_ended`` under ``_lock``."""
        self._ended: deque[tuple[Any, ...]] = deque()
        """The queued tuple (:func:`_compile_event`: its token's phase, its seconds) of each
        compile ended since the last fold: appended without a lock (``deque.append`` is atomic),
        folded into ``_tallies`` by the journal writer's thread (as it builds each compile event),
        by every reader, and past :data:`_FOLD_AT`."""
        self.warmup_start: float | None = None
        self.warmup_end: float | None = None
        self._span_attributes = dict(span_attributes or {})
        self._tracer_provider = tracer_provider
        self._exception_at_install: BaseException | None = None  # see install()
        self._process_exception: BaseException | None = None  # see _note_process_exception()
        self._caught_exception_type: str | None = None  # see note_exit_exception()

    @property
    def sink(self) -> EventSink:
        """Where events go. A sink whose ``plain_events`` is ``True`` (the journal writer) is
        handed a compile as :func:`_compile_event`'s plain tuple and builds it as
        ``item[0](item)``; any other gets a :class:`~jitwatch.core.events.DeferredEvent`."""
        return self._sink

    @sink.setter
    def sink(self, sink: EventSink) -> None:
        self._sink = sink
        try:
            self._plain = getattr(sink, "plain_events", False) is True
            lane = getattr(sink, "lane", None) if self._plain else None
        except Exception:  # noqa: BLE001 - an odd sink object: it gets DeferredEvents
            self._plain, lane = False, None
        self._sink_lane = lane if isinstance(lane, EventLane) else None
        self._relane()

    def _relane(self) -> None:
        """Hand compiles to the sink's :class:`~jitwatch.core.events.EventLane` (appended to
        directly, no call into the sink) while installed; else through ``submit``."""
        self._lane = self._sink_lane if self._state == "installed" else None

    # ------------------------------------------------------------------ lifecycle
    @property
    def compiles_by_phase(self) -> dict[Phase, int]:
        """Compiles counted so far, by the phase each began in (a snapshot)."""
        with self._lock:
            self._fold()
            return {p: int(t[0]) for p, t in self._tallies.items()}

    @property
    def compile_seconds_by_phase(self) -> dict[Phase, float]:
        """Seconds those compiles took, by phase (a snapshot)."""
        with self._lock:
            self._fold()
            return {p: float(t[1]) for p, t in self._tallies.items()}

    def _fold(self) -> None:
        """Move ``_ended`` into ``_tallies`` (caller holds ``_lock``; appends may continue)."""
        ended, tallies = self._ended, self._tallies
        for _ in range(len(ended)):
            item = ended.popleft()  # a compile's queued tuple (see _compile_event)
            tally = tallies[item[2][_T_PHASE]]
            tally[0] += 1
            tally[1] += item[3]

    def fold_counts(self) -> None:
        """Fold the compiles ended so far into the per-phase counters (any thread; cheap when
        there is nothing to fold). Called by the journal writer's thread with each compile event."""
        if self._ended:
            with self._lock:
                self._fold()

    @property
    def active(self) -> bool:
        """Installed, not ``off``, not yet uninstalled: events are being recorded."""
        return self._state == "installed" and self.mode is not Mode.OFF

    @property
    def journal_dir(self) -> Path:
        return self.settings.journal_dir

    def install(self) -> Monitor:
        """Install every backend and register the worker in the journal. In ``off`` mode, does
        nothing. Idempotent while installed.

        Raises:
            JitwatchError: the monitor was uninstalled (make a new one: :func:`jitwatch.install`).
        """
        if self._state == "uninstalled":
            raise JitwatchError("this Monitor was uninstalled; create a new one with jitwatch.install()")
        if self.mode is Mode.OFF or self._state == "installed":
            return self
        self._state = "installed"
        self._relane()
        for backend in self.backends:
            try:
                status = backend.install(self)
            except Exception as exc:  # noqa: BLE001 - a broken backend must not stop the host
                status = BackendStatus(backend.name, "failed", degraded=f"install raised {type(exc).__name__}: {exc}")
                log.error("jitwatch: backend %s failed to install: %s", backend.name, status.degraded)
            with self._lock:
                self.backend_statuses.setdefault(backend.name, status)
            if status.degraded and status.state != "failed":
                _notice(status.degraded)
        if self._tracer_provider is None:
            self._tracer_provider = build_tracer_provider(
                resource_attributes={"jitwatch.rank": self.identity.rank, "process.pid": self.identity.pid}
            )
        elif self._tracer_provider is False:
            self._tracer_provider = None
        attrs: dict[str, Any] = {
            "mode": self.mode.value,
            "backends": {name: st.as_attrs() for name, st in self.backend_statuses.items()},
            **self.identity.attrs(),
        }
        triton = self.backend_statuses.get("triton")
        if triton is not None:  # the fields jitwatch 0.1 wrote, which its readers still look for
            attrs.update(triton_version=triton.version, hooks=list(triton.hooks), degraded=triton.degraded)
        attrs["collective_deadline_s"] = self.settings.collective_deadline_s
        attrs["collective_deadline_source"] = self.settings.collective_deadline_source
        if self.settings.heartbeat_seconds > 0:  # advertised: staleness is judged only for heartbeating workers
            attrs["heartbeat_s"] = self.settings.heartbeat_seconds
        marker = process_marker()
        if marker:  # a reader on this machine tells at once that this process exited (jitwatch.core.process)
            attrs["process"] = marker
        self._emit(EventKind.WORKER_START, attrs=attrs)
        # An exception printed before install (an interactive session) is not this worker's exit.
        self._exception_at_install = unhandled_exception()
        atexit.register(self._at_exit)
        self._watch_process_exception()
        return self

    def _watch_process_exception(self) -> None:
        """In a ``multiprocessing`` child (spawn, forkserver), an exception that ends the process's
        target is caught and printed by ``multiprocessing`` itself, which then exits through
        ``sys.exit(1)``: ``sys.last_value`` is never set and the exit read as a clean stop. Its
        finalizers run in a ``finally`` while that exception propagates
        (``multiprocessing.util._exit_function``), so one notes it there
        (:meth:`_note_process_exception`). Never raises."""
        try:
            import multiprocessing
            import multiprocessing.util

            if multiprocessing.parent_process() is not None:
                multiprocessing.util.Finalize(None, self._note_process_exception, exitpriority=100)
        except Exception as exc:  # noqa: BLE001 - optional: never fails the install
            log.debug("jitwatch: cannot watch the process target's exception: %s", type(exc).__name__)

    def _note_process_exception(self) -> None:
        """A ``multiprocessing`` finalizer: keep the exception propagating out of the process's
        target, if any, for :meth:`_at_exit`. A ``SystemExit`` is a chosen exit, unless its code
        is not 0 and it was raised while handling another exception, which is then kept: the
        target's wrapper caught the exception and exited on it (``torch.multiprocessing.spawn``
        writes the traceback for its parent, then ``sys.exit(1)``). Never raises."""
        try:
            exc = sys.exc_info()[1]
            if isinstance(exc, SystemExit):
                cause = exc.__context__
                failed = exc.code not in (None, 0)
                exc = cause if failed and isinstance(cause, BaseException) else None
            if exc is not None and not isinstance(exc, SystemExit):
                self._process_exception = exc
        except Exception:  # noqa: BLE001 - at the host's exit
            pass

    def note_exit_exception(self, exc: BaseException | None) -> None:
        """The host caught ``exc`` and will end on it, though Python will not see it unhandled:
        vLLM 0.32's worker process catches an exception raised out of an engine step per RPC
        (``WorkerProc._execute_worker_rpc``), answers FAILURE, and the engine, dying on it, ends
        the worker through a normal exit (the vLLM plugin calls this). At exit (:meth:`_at_exit`),
        with no unhandled exception, the worker records its exit as ``exited`` with ``exc``'s type
        (never the message) instead of a clean stop. ``None`` forgets it (the host went on: a later
        step succeeded). Only an :class:`Exception` counts: a ``SystemExit`` or
        ``KeyboardInterrupt`` is a stop. Only the type's name is kept, not ``exc``: its traceback
        holds the failed step's frames and their tensors, which must not outlive the step. Never
        raises."""
        try:
            if exc is None:
                self._caught_exception_type = None
            elif isinstance(exc, Exception):
                self._caught_exception_type = exception_type_name(exc)
        except Exception:  # noqa: BLE001 - on the host's failure path: never raises
            pass

    def _at_exit(self, timeout: float = 5.0) -> None:
        """``atexit``: the process exits without :meth:`uninstall`. Flush and close the sink, whose
        writer records this worker stopped (its rank not ready at once) after a normal end or
        ``sys.exit`` (any code: not knowable here), or exited when the interpreter is exiting on an
        unhandled exception (:func:`unhandled_exception`: ``MemoryError``, ``KeyboardInterrupt``;
        the record names the type, never the message), or after an exception the host caught and
        ended on (:meth:`note_exit_exception`), so the rank reads ``exited`` as after a ``kill -9``
        rather than a clean stop. Bounded by ``timeout`` seconds per step
        (:meth:`JournalWriter.close`), never raises. Backends' hooks stay: the host may still
        compile in later exit handlers (those events are dropped, counted)."""
        try:  # apart: whatever naming the exception does, the sink is still flushed and closed
            exc = unhandled_exception()
            if exc is None:
                exc = self._process_exception
            if exc is not None and exc is not self._exception_at_install and isinstance(self.sink, ExitRecordingSink):
                self.sink.exit_exception = exception_type_name(exc)
            elif exc is None and self._caught_exception_type is not None and isinstance(self.sink, ExitRecordingSink):
                self.sink.exit_exception = self._caught_exception_type
        except Exception as err:  # noqa: BLE001 - nothing may fail at the host's exit
            log.warning("jitwatch: naming the exception at exit failed: %s", type(err).__name__)
        try:
            self._submit_all(self.stalls.pending(self.identity.rank, self.identity.attrs()))
            self.sink.close(timeout)
        except Exception as exc:  # noqa: BLE001 - nothing may fail at the host's exit
            log.warning("jitwatch: closing the journal at exit failed: %s: %s", type(exc).__name__, exc)

    def uninstall(self) -> None:
        """Uninstall every backend (restoring the hooks they replaced) and flush and close the sink;
        the journal writer's close records this worker stopped (``/readyz``: its rank not ready)."""
        if self._state != "installed":
            self._state = "uninstalled"
            return
        self._state = "uninstalled"
        self._relane()
        for backend in self.backends:
            try:
                backend.uninstall()
            except Exception as exc:  # noqa: BLE001
                log.warning("jitwatch: backend %s failed to uninstall: %s: %s", backend.name, type(exc).__name__, exc)
        atexit.unregister(self._at_exit)
        self.sink.close()

    def detach_after_fork(self) -> None:
        """In a forked child (``os.register_at_fork``, see :mod:`jitwatch.worker`): restore the
        backends' hooks and drop the ``atexit`` flush, *without* touching the sink, whose writer
        thread exists only in the parent (flushing it would wait out its timeout, 5 s, at the
        child's exit; closing it could disturb the parent's journal connection). The sink is
        replaced by a :class:`NullSink`; the monitor is ``uninstalled``. Never raises."""
        self._state = "uninstalled"
        self._lane = None
        atexit.unregister(self._at_exit)
        self.sink = NullSink()
        for backend in self.backends:
            try:
                backend.uninstall()
            except Exception:  # noqa: BLE001 - nothing may fail in a fork handler
                pass

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every event so far is in the journal (``False`` on timeout), including the
        count of requests that waited on no compile (sent in batches otherwise)."""
        self._submit_all(self.stalls.pending(self.identity.rank, self.identity.attrs()))
        return self.sink.flush(timeout)

    # ------------------------------------------------------------------ phases
    def begin_warmup(self) -> None:
        """Enter the ``warmup`` phase (records ``warmup_start``)."""
        now = time.time()
        with self._lock:
            self._phase_since = now
            self.warmup_start = now
            self.phase = Phase.WARMUP
        self._emit(EventKind.WARMUP_START)

    def activate(self) -> None:
        """Enter ``serving``: warmup is complete; later compiles are post-warmup compiles.

        Records ``warmup_complete`` (duration from :meth:`begin_warmup`, or 0 if it was never
        called) and flushes the journal so the sidecar's readiness flips at once.
        """
        now = time.time()
        with self._lock:
            start = self.warmup_start if self.warmup_start is not None else now
            self.warmup_end = now
            self._phase_since = now
            self.phase = Phase.SERVING
            self._fold()
            compiled, seconds = self._tallies[Phase.WARMUP]
        self._emit(
            EventKind.WARMUP_COMPLETE,
            start_ts=start,
            duration_s=now - start,
            attrs={"kernels_compiled": compiled, "compile_seconds": seconds},
            phase=Phase.SERVING,
        )
        self.flush()

    @contextmanager
    def warmup(self, **span_attributes: Any) -> Iterator[Monitor]:
        """Context manager: ``warmup`` phase inside, ``serving`` after a normal exit.

        Emits the ``jitwatch.warmup`` OpenTelemetry span (see :mod:`jitwatch.core.tracing`). If the
        body raises, the span ends in ERROR, the phase stays ``warmup`` (readiness stays 503) and
        the exception propagates.
        """
        attrs = {ATTR_RANK: self.identity.rank, **self._span_attributes, **span_attributes}
        provider = None if self.mode is Mode.OFF else self._tracer_provider
        with warmup_span(provider, attrs) as span:
            self.begin_warmup()
            yield self
            self.activate()
            span.attributes.update(
                {
                    ATTR_KERNELS_COMPILED: self.compiles_by_phase[Phase.WARMUP],
                    ATTR_COMPILE_SECONDS: self.compile_seconds_by_phase[Phase.WARMUP],
                    ATTR_DURATION_SECONDS: (self.warmup_end or 0.0) - (self.warmup_start or 0.0),
                }
            )

    def request(self, name: str | None = None) -> _RequestMarker:
        """Context manager / decorator marking one request.

        The first request that *starts* in the ``serving`` phase is timed (wall clock, seconds)
        and recorded as ``first_request``; compiles inside any marked request carry its
        ``request_id`` (and ``name`` as ``request``).
        """
        return _RequestMarker(self, name)

    def inflight(self) -> list[Started]:
        """Compiles begun and not yet finished, oldest first (a snapshot)."""
        items = sorted(self._inflight.values(), key=_by_start)  # a C-level copy, then sorted
        now_wall, now_perf = time.time(), _perf()
        return [Started(t[0], t[1], t[2], t[3], now_wall - (now_perf - t[4]), t[4], t[5]) for t in items]

    def inflight_snapshot(self) -> list[dict[str, Any]]:
        """The compiles in flight now, oldest first, as JSON-able dicts (``backend``, ``kernel``,
        ``start_ts`` Unix seconds, ``phase``, ``request_id``). Called by the journal writer's
        thread (:attr:`jitwatch.store.writer.JournalWriter.inflight_source`), which journals it so
        a compile's age is visible while it runs — and while it hangs. Runs
        :meth:`sweep_abandoned` first, so a compile that raised is not listed as running.

        A compile's ``start_ts`` is converted from its ``perf_counter`` start once, by the first
        snapshot that lists it, and is the same in every later one: converted afresh it would move
        by the jitter between two clock reads each time, and the writer, which journals the list
        when it changes, would take every 0.1 s wake-up for a change. Writer thread only (the
        conversions are kept between calls)."""
        self.sweep_abandoned()
        items = sorted(self._inflight.values(), key=_by_start)  # a C-level copy, then sorted
        known = self._inflight_walls
        walls: dict[int, tuple[tuple[Any, ...], float]] = {}
        now_wall, now_perf = time.time(), _perf()
        out: list[dict[str, Any]] = []
        for t in items:
            seen = known.get(id(t))
            wall = seen[1] if seen is not None and seen[0] is t else now_wall - (now_perf - t[_T_START])
            walls[id(t)] = (t, wall)
            out.append(
                {
                    "backend": t[_T_BACKEND],
                    "kernel": t[_T_NAME],
                    "start_ts": wall,
                    "phase": t[_T_PHASE].value,
                    "request_id": t[_T_REQUEST],
                }
            )
        self._inflight_walls = walls
        return out

    # ------------------------------------------------------------------ CompileSink
    def begin(self, backend: str, name: str) -> Any:
        """A compile starts on this thread (see :class:`~jitwatch.backends.base.CompileSink`).

        The token is a tuple ``(backend, name, phase, request_id, perf_counter start, parent)``:
        one clock read (``time.perf_counter``; the writer thread converts it to Unix seconds)
        and one dictionary store (the in-flight table; atomic under the GIL)."""
        token = (backend, name, self.phase, _current_request.get(), _perf(), current_parent() if _marks else None)
        self._inflight[id(token)] = token
        return token

    def begin_watched(self, backend: str, name: str, thread_id: int, watcher: FrameWatcher) -> Any:
        """:meth:`begin` for a compile that runs on this thread, whose id (``threading.get_ident()``)
        is ``thread_id`` (see :meth:`CompileSink.begin_watched`): the token also holds
        ``thread_id`` and ``watcher``, for :meth:`sweep_abandoned`. No frame is looked at here."""
        token = (
            backend,
            name,
            self.phase,
            _current_request.get(),
            _perf(),
            current_parent() if _marks else None,
            thread_id,
            watcher,
        )
        self._inflight[id(token)] = token
        return token

    def sweep_abandoned(self, *, force: bool = False) -> int:
        """Drop the watched compiles (:meth:`begin_watched`) that left their thread without an
        end; returns how many. Journal writer's thread (from :meth:`inflight_snapshot`); never
        raises.

        Looks at most every :data:`SWEEP_INTERVAL_S` seconds (``force``: now), and only at
        compiles in flight for :data:`ABANDON_AFTER_S` or more. For each, it reads the stack of
        the thread that began it (its top frame from ``sys._current_frames()``, a CPython
        snapshot of every thread's top frame, then ``f_back`` down; empty when the thread has
        ended), once per thread and sweep, and asks the compile's backend whether the compile
        still runs in one of those frames (:meth:`FrameWatcher.running`): ``False`` drops it,
        ``True`` or ``None`` (the backend cannot tell) keeps it. The core knows thread ids
        and frames only; which frame is a compile's is the backend's to say. A compile still
        running — however slow — keeps its frame on the stack and is never dropped. For each one
        dropped: the backend forgets it and names the cause (:meth:`FrameWatcher.abandoned`),
        :attr:`abandoned_compiles` counts it, one warning per (backend, name) is logged, and a
        ``compile_abandoned`` event is journaled."""
        try:
            now = _perf()
            if not force and now < self._next_sweep:
                return 0
            self._next_sweep = now + SWEEP_INTERVAL_S
            old = [
                t
                for t in list(self._inflight.values())  # a C-level copy
                if len(t) == _WATCHED_LEN and now - t[_T_START] >= ABANDON_AFTER_S
            ]
            if not old:
                return 0
            tops = sys._current_frames()
            stacks: dict[int, list[Any]] = {}
            gone = []
            for t in old:  # (begun in that order: the in-flight table is filled at begin)
                stack = stacks.get(t[_T_THREAD])
                if stack is None:
                    stack = stacks[t[_T_THREAD]] = _stack(tops.get(t[_T_THREAD]))
                if self._running(t, stack) is False:
                    gone.append(t)
            del tops, stacks
            stack = []  # no frame outlives the look
            dropped = 0
            for t in gone:
                if self._inflight.pop(id(t), None) is not None:  # not ended meanwhile
                    dropped += 1
                    self._abandon(t)
            return dropped
        except Exception as exc:  # noqa: BLE001 - never into the writer thread
            self.hook_error("", "abandoned-compile sweep", exc)
            return 0

    def _running(self, token: tuple[Any, ...], stack: list[Any]) -> bool | None:
        try:
            return token[_T_WATCHER].running(token, stack)
        except Exception as exc:  # noqa: BLE001 - a backend fault: keep the compile listed
            self.hook_error(token[_T_BACKEND], "FrameWatcher.running", exc)
            return True

    def _abandon(self, token: tuple[Any, ...]) -> None:
        """Account for one compile :meth:`sweep_abandoned` dropped (writer thread)."""
        backend, name = token[_T_BACKEND], token[_T_NAME]
        cause, key = "it left its thread without an end", None
        try:
            cause, key = token[_T_WATCHER].abandoned(token)
        except Exception as exc:  # noqa: BLE001
            self.hook_error(backend, "FrameWatcher.abandoned", exc)
        self.abandoned_compiles += 1
        start = _wall(token[_T_START])
        first = (backend, name) not in self._abandon_warned
        if first:
            self._abandon_warned[(backend, name)] = None
            if len(self._abandon_warned) > _ABANDON_WARNED_MAX:
                self._abandon_warned.popitem(last=False)
            log.warning(
                "jitwatch: %s on rank %d began %.1f s ago and never ended: %s; dropped from the "
                "in-flight compiles (abandoned compiles in this worker: %d; later ones of this kernel are counted, "
                "not logged)",
                self._describe(backend, name),
                self.identity.rank,
                time.time() - start,
                cause,
                self.abandoned_compiles,
            )
        attrs: dict[str, Any] = {"cause": cause}
        if token[_T_REQUEST] is not None:
            attrs["request_id"] = token[_T_REQUEST]
        self._emit(
            EventKind.COMPILE_ABANDONED,
            backend=backend,
            kernel=name,
            key=key,
            phase=token[_T_PHASE],
            start_ts=start,
            attrs=attrs,
        )

    def cancel(self, token: Any) -> None:
        """The compile did not happen."""
        self._inflight.pop(id(token), None)

    def begun_again(self, token: Any) -> bool:
        """The backend saw the compile begun with ``token`` begin again before it ended (see
        :meth:`CompileSink.begun_again`): ``True`` when ``token`` is a watched compile of this
        thread still in flight (a retry of a compile that raised; :meth:`sweep_abandoned` drops
        and counts it once its backend finds it no longer running: the retry runs in frames of
        its own), else the token is cancelled and ``False``. Compiling thread; one ``threading.get_ident()``."""
        if len(token) == _WATCHED_LEN and token[_T_THREAD] == _get_ident() and id(token) in self._inflight:
            return True
        self._inflight.pop(id(token), None)
        return False

    def admit(self, token: Any, capture: Capture) -> None:
        """Before the compile's work: in ``error`` mode, a serving-phase compile is recorded and
        :class:`ServingCompileError` raised (see :meth:`CompileSink.admit`); otherwise a no-op."""
        if self.mode is _ERROR and token[_T_PHASE] is _SERVING and capture.kind is _COMPILE:
            self.finish(token, capture)

    def finish(self, token: Any, capture: Capture) -> None:
        """The compile begun with ``token`` ended now. Raises :class:`ServingCompileError` in
        ``error`` mode for a serving-phase compile (after the event is queued)."""
        duration = _perf() - token[_T_START]
        self._inflight.pop(id(token), None)
        self._record(token, duration, None, capture)

    def end(
        self,
        token: Any,
        key: str | None,
        build: Callable[[Any], Capture],
        arg: Any,
        *,
        duration_s: float | None = None,
        start_ts: float | None = None,
    ) -> None:
        """:meth:`finish` for a ``compile`` whose :class:`Capture` is built later: ``build(arg)``
        runs on the journal writer's thread (see :meth:`CompileSink.end`). The compile's backend
        and name are the token's; ``key`` is needed now for warn-once and the error message.
        ``duration_s`` and ``start_ts`` (Unix seconds) are given by :meth:`ended` for a compile
        whose start was not seen; otherwise both come from the token's ``perf_counter`` start.
        Raises :class:`ServingCompileError` in ``error`` mode for a serving-phase compile."""
        duration = _perf() - token[_T_START] if duration_s is None else duration_s
        self._inflight.pop(id(token), None)
        # _record, specialized for a compile and inlined: this runs once per compile of every kernel.
        request_id = token[_T_REQUEST]
        request_name = None
        if request_id is not None:
            self.stalls.compiled(request_id, token[_T_BACKEND], token[_T_NAME], duration)
            request_name = self._request_names.get(request_id)
        warn = None
        refuse = False
        if token[_T_PHASE] is _SERVING:
            mode = self.mode
            if mode is _WARN:
                if (token[_T_BACKEND], token[_T_NAME], key or "") not in self._warned:  # warned: one lookup
                    warn = self._first_warning(token[_T_BACKEND], token[_T_NAME], key)
            elif mode is _ERROR:
                refuse = True
        item = (_compile_event, self, token, duration, start_ts, arg, build, warn, request_name, key)
        ended = self._ended
        ended.append(item)  # counted without a lock: see _ended
        if len(ended) > _FOLD_AT:  # nobody folded for a while (no writer thread draining)
            self.fold_counts()
        lane = self._lane  # the journal writer's buffer, while installed: EventLane's contract
        if lane is not None:
            buf = lane.buf
            n = len(buf)
            if n < lane.room:
                buf.append(item)
                queued = True
                if n >= lane.high:
                    lane.wake()
            else:
                queued = lane.overflow()
        else:  # (a plain tuple only to a sink with plain_events: see the sink property)
            queued = self._state == "installed" and self._sink.submit(
                item if self._plain else _new_event(_CompileEvent, item)  # type: ignore[arg-type]
            )
        if warn is not None and not queued:
            self._warn_dropped(warn, key)
        if refuse:
            self._serving_compile(token[_T_BACKEND], token[_T_NAME], key)

    def ended(
        self, backend: str, name: str, key: str | None, duration_s: float, build: Callable[[Any], Capture], arg: Any
    ) -> None:
        """:meth:`record` for a ``compile`` that ended now on this thread, whose :class:`Capture`
        is built by ``build(arg)`` on the journal writer's thread (see
        :meth:`CompileSink.ended`): :meth:`end` with a token made now. Phase as :meth:`record`
        has it, the one in effect at the compile's midpoint: the current one unless the last phase
        change came after that midpoint (another thread's :meth:`activate` during the compile),
        which one comparison rules out. Raises :class:`ServingCompileError` in ``error`` mode for
        a serving-phase compile."""
        now = time.time()
        phase = self.phase  # first: _phase_since is set before it, so it is at least as new
        mid = now - duration_s / 2
        if mid < self._phase_since:  # rare: the phase changed during the compile
            phase = self.phase_at(mid)
        token = (backend, name, phase, _current_request.get(), 0.0, current_parent() if _marks else None)
        self.end(token, key, build, arg, duration_s=duration_s, start_ts=now - duration_s)

    def record(self, capture: Capture, *, start_ts: float, duration_s: float) -> None:
        """A compile whose start was not seen. Its phase is the one in effect halfway through it
        (a backend that notices a compile after the fact, e.g. DeepGEMM's cache watcher, may do
        so after warmup ended; the midpoint, not ``start_ts``, because times read from file
        mtimes are coarse: a compile begun just after warmup ended can carry a start a few ms
        before it); its request is this thread's current one."""
        phase = self.phase_at(start_ts + duration_s / 2)
        token = (capture.backend, capture.name, phase, _current_request.get(), 0.0, current_parent())
        self._record(token, duration_s, start_ts, capture)

    def phase_at(self, ts: float) -> Phase:
        """The phase in effect at Unix time ``ts``, from this monitor's warmup start and end
        (the current phase for any time after the last change)."""
        phase, start, end = self.phase, self.warmup_start, self.warmup_end
        if phase is Phase.SERVING and end is not None and ts < end:
            # activate() without begin_warmup(): warmup took no time, ending at `end`
            return Phase.WARMUP if start is not None and ts >= start else Phase.STARTUP
        if phase is Phase.WARMUP and start is not None and ts < start:
            return Phase.STARTUP
        return phase

    def hook_error(self, backend: str, where: str, exc: BaseException) -> None:
        """Count and log an exception caught inside jitwatch's code in ``where``; never raises."""
        try:
            self.hook_errors += 1
            if self.hook_errors <= 10 or self.hook_errors % 1000 == 0:
                log.error(
                    "jitwatch: error inside %s (count %d): %s: %s", where, self.hook_errors, type(exc).__name__, exc
                )
            self._emit(
                EventKind.HOOK_ERROR,
                backend=backend,
                attrs={"hook": where, "error": redact(f"{type(exc).__name__}: {exc}"[:2000])},
            )
        except Exception:  # noqa: BLE001 - the error path itself must never reach the host
            pass

    def backend_ready(self, status: BackendStatus) -> None:
        """A waiting backend installed its hooks (its library was imported by the host)."""
        with self._lock:
            self.backend_statuses[status.name] = status
        if status.degraded:
            _notice(status.degraded)
        self._emit(EventKind.BACKEND_READY, backend=status.name, attrs=status.as_attrs())

    # ------------------------------------------------------------------ internals
    def _emit(self, kind: EventKind, **fields: Any) -> None:
        if self._state != "installed" or self.mode is Mode.OFF:
            return
        fields.setdefault("phase", self.phase)
        # Every event carries the worker's TP/PP/DP ranks and labels, not only worker_start.
        fields["attrs"] = {**self.identity.attrs(), **(fields.get("attrs") or {})}
        ident = self.identity
        self.sink.submit(Event.now(kind, rank=ident.rank, pid=ident.pid, host=ident.host, **fields))

    def _record(self, token: tuple[Any, ...], duration: float, start_wall: float | None, capture: Capture) -> None:
        """Count, apply the mode and queue one compile (compiling thread: no Event, no strings
        built, no redaction; :class:`_CompileEvent` does that on the writer's thread).
        :meth:`end` is this, inlined for a ``compile`` whose capture is built later."""
        kind, backend, name, key = capture.kind, capture.backend, capture.name, capture.key
        phase = token[_T_PHASE]
        request_id = token[_T_REQUEST]
        compiled = kind is _COMPILE
        serving = compiled and phase is _SERVING
        mode = self.mode
        warn = self._first_warning(backend, name, key) if serving and mode is _WARN else None
        request_name = self._request_names.get(request_id) if request_id is not None else None
        item = (_compile_event, self, token, duration, start_wall, capture, None, warn, request_name, key)
        if compiled:
            if request_id is not None:
                self.stalls.compiled(request_id, backend, name, duration)
            ended = self._ended
            ended.append(item)
            if len(ended) > _FOLD_AT:
                self.fold_counts()
        queued = False
        if self._state == "installed":
            queued = self._sink.submit(item if self._plain else _new_event(_CompileEvent, item))  # type: ignore[arg-type]
        if warn is not None and not queued:
            self._warn_dropped(warn, key)
        if serving and mode is _ERROR:
            self._serving_compile(backend, name, key)

    def _unbuilt(self, token: tuple[Any, ...], key: str | None, exc: Exception) -> Capture:
        """The :class:`Capture` of a compile whose ``build`` (:meth:`end`, :meth:`ended`) raised
        ``exc`` on the journal writer's thread: counted and logged as a hook error of its backend,
        and the compile journaled with what the compiling thread handed over (backend, name, key;
        ``attrs.capture_error`` names the exception's type)."""
        backend = token[_T_BACKEND]
        self.hook_error(backend, "capture build (journal writer)", exc)
        return Capture(backend, token[_T_NAME], key, detail={"capture_error": type(exc).__name__})

    def _warn_dropped(self, warn: str, key: str | None) -> None:
        """The warn-mode line of a compile whose event was dropped: said here, without a reason."""
        log.warning(
            "jitwatch: post-warmup compile of %s on rank %d; key %s", warn, self.identity.rank, redact(key or "")[:2000]
        )

    def _submit_all(self, events: Sequence[Event | DeferredEvent]) -> None:
        if not events or self._state != "installed" or self.mode is Mode.OFF:
            return
        for ev in events:
            self.sink.submit(_Stamped(ev, self.identity) if not isinstance(ev, Event) else _stamp(ev, self.identity))

    def _describe(self, backend: str, name: str) -> str:
        label = self._labels.get(backend) or f"{backend} compile"
        return f"{label} {name!r}"

    def _serving_compile(self, backend: str, name: str, key: str | None) -> None:
        """``error`` mode: raise for a serving compile (its event is already queued)."""
        shown = redact(key or "")[:500]
        # the message is one line (a host logs it): a Dynamo reason's lines joined, controls escaped
        raise ServingCompileError(
            one_line(
                f"jitwatch: {self._describe(backend, name)} compiled during serving on rank {self.identity.rank} "
                f"(key {shown}); warmup should cover this specialization (JITWATCH_MODE=error; "
                "`jitwatch why` says which argument)"
            ),
            backend=backend,
            kernel=name,
            key=shown,
        )

    def _first_warning(self, backend: str, name: str, key: str | None) -> str | None:
        """``warn`` mode: the line's subject (``Triton kernel 'k'``) the first time this (backend,
        name, key) compiles in serving, else ``None``. The line itself is logged by the writer
        thread, once the event (and its reason) is built."""
        ident = (backend, name, key or "")
        if ident in self._warned:  # warned already: a dict lookup, no lock (the usual case)
            return None
        with self._lock:
            first = ident not in self._warned
            self._warned[ident] = None
            if len(self._warned) > _WARNED_MAX:
                self._warned.popitem(last=False)
        return self._describe(backend, name) if first else None


def _stack(frame: Any) -> list[Any]:
    """``frame`` and every frame below it on its thread's stack (``f_back``), innermost first;
    ``[]`` for ``None`` (the thread has ended)."""
    out: list[Any] = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


class _RequestMarker(ContextDecorator):
    def __init__(self, monitor: Monitor, name: str | None) -> None:
        self.monitor = monitor
        self.name = name
        self._state = threading.local()

    def __enter__(self) -> _RequestMarker:
        mon = self.monitor
        rid = next(mon._request_ids)
        timed = False
        serving = mon.phase is Phase.SERVING
        with mon._lock:
            mon.requests_seen += 1
            if serving and not mon.first_request_done:
                mon.first_request_done = True
                timed = True
        stack = getattr(self._state, "stack", None)
        if stack is None:
            stack = self._state.stack = []
        stack.append((rid, timed, serving, time.time(), time.perf_counter(), _current_request.set(rid)))
        if self.name:
            mon._request_names[rid] = self.name
        return self

    def __exit__(self, *exc: object) -> None:
        rid, timed, serving, start_wall, start_perf, token = self._state.stack.pop()
        latency = time.perf_counter() - start_perf
        _current_request.reset(token)
        mon = self.monitor
        mon._request_names.pop(rid, None)
        if timed:
            mon._emit(
                EventKind.FIRST_REQUEST,
                start_ts=start_wall,
                duration_s=latency,
                attrs={"request_id": rid, **({"request": self.name} if self.name else {})},
            )
        try:
            stalls = mon.stalls.finish(
                rid,
                serving=serving,
                name=self.name,
                start_wall=start_wall,
                latency_s=latency,
                rank=mon.identity.rank,
                ident_attrs=mon.identity.attrs,
            )
            if stalls:
                mon._submit_all(stalls)
        except Exception as exc:  # noqa: BLE001 - accounting must never reach the host
            mon.hook_error("", "request accounting", exc)


def current_request() -> int | None:
    """The ``request_id`` of the request marked on this thread/context, if any."""
    return _current_request.get()


__all__ = ["EventSink", "Monitor", "NullSink", "Started", "current_request"]
