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
a clock read and a small object at ``begin``, a clock read, a counter and a queue append at
``finish`` (``docs/architecture.md``, "The compiling thread").
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import ContextDecorator, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from jitwatch.backends.base import Backend, BackendStatus, Capture, CompileKind, current_parent
from jitwatch.config import Mode, Settings, parse_mode
from jitwatch.core.diagnosis import Diagnoser, explainers_of
from jitwatch.core.events import DeferredEvent, Event, EventKind, Phase
from jitwatch.core.identity import WorkerIdentity
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

log = logging.getLogger(__name__)

_WARNED_MAX = 4096
"""(backend, name, key) triples remembered for warn-once; the oldest is forgotten past this."""

_current_request: contextvars.ContextVar[int | None] = contextvars.ContextVar("jitwatch_request", default=None)

_EVENT_KIND = {
    CompileKind.COMPILE: EventKind.COMPILE,
    CompileKind.AUTOTUNE: EventKind.AUTOTUNE,
    CompileKind.GRAPH_CAPTURE: EventKind.GRAPH_CAPTURE,
}


class EventSink(Protocol):
    """Where the monitor sends events: :class:`jitwatch.store.writer.JournalWriter` in a worker.

    ``submit`` must not block (it runs on compiling threads); it returns ``False`` when the event
    was dropped (and counted by the sink).
    """

    def submit(self, item: Event | DeferredEvent) -> bool: ...

    def flush(self, timeout: float = 5.0) -> bool: ...

    def close(self, timeout: float = 5.0) -> None: ...


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
    """A compile in flight: what :meth:`Monitor.begin` returned (opaque to backends)."""

    backend: str
    name: str
    phase: Phase
    request_id: int | None
    start_wall: float
    start_perf: float
    parent: str | None = None
    """The compile of another backend this one happened inside (``"torch_compile:0/1"``), if any."""


class _CompileEvent:
    """A capture waiting for the journal writer, which calls :meth:`to_event` on its thread."""

    __slots__ = (
        "capture",
        "diagnoser",
        "duration",
        "ident",
        "parent",
        "phase",
        "request_id",
        "request_name",
        "start",
        "warn",
    )

    def __init__(
        self,
        capture: Capture,
        phase: Phase,
        request_id: int | None,
        request_name: str | None,
        start: float,
        duration: float,
        ident: WorkerIdentity,
        parent: str | None = None,
        diagnoser: Diagnoser | None = None,
        warn: str | None = None,
    ) -> None:
        self.capture = capture
        self.parent = parent
        self.diagnoser = diagnoser
        self.warn = warn  # the warn-mode line's subject, when this compile's line is due
        self.phase = phase
        self.request_id = request_id
        self.request_name = request_name
        self.start = start
        self.duration = duration
        self.ident = ident

    def to_event(self) -> Event:
        c = self.capture
        detail = c.detail() if callable(c.detail) else c.detail
        attrs: dict[str, Any] = {"module": c.module, "stages": dict(c.stages) if c.stages else {}}
        if detail:
            attrs.update(detail)
        attrs.update(self.ident.attrs())
        if self.parent is not None and self.parent != f"{c.backend}:{attrs.get('compile_id')}":
            attrs["parent"] = self.parent
        if self.request_id is not None:
            attrs["request_id"] = self.request_id
            if self.request_name:
                attrs["request"] = self.request_name  # e.g. the vLLM request ids of the engine step
        event = Event(
            kind=_EVENT_KIND.get(c.kind, EventKind.COMPILE),
            ts=self.start + self.duration,
            start_ts=self.start,
            duration_s=self.duration,
            rank=self.ident.rank,
            pid=self.ident.pid,
            host=self.ident.host,
            phase=self.phase,
            backend=c.backend,
            kernel=c.name,
            key=c.key,
            cache_hit=c.cache_hit,
            attrs={k: v for k, v in attrs.items() if v is not None},
        )
        reason = self.diagnoser.observe(event) if self.diagnoser is not None else None
        if self.warn is not None:  # here, on the writer thread: the line carries the reason
            why = f": {reason.text}" if reason is not None else ""
            fix = f" (fix: {reason.fixes[0]})" if reason is not None and reason.fixes else ""
            key = "" if reason is not None and reason.text == c.key else f"; key {redact(c.key or '')[:2000]}"
            log.warning(
                "jitwatch: post-warmup compile of %s on rank %d%s%s%s", self.warn, self.ident.rank, why, fix, key
            )
        return event


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
        self.sink = sink
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
        self._lock = threading.Lock()
        self._inflight: dict[int, Started] = {}
        self._warned: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # bounded: _WARNED_MAX
        self._request_ids = itertools.count(1)
        self._request_names: dict[int, str] = {}  # open requests' names, by request_id
        self.first_request_done = False
        self.requests_seen = 0
        self.hook_errors = 0
        self.compiles_by_phase: dict[Phase, int] = {p: 0 for p in Phase}
        self.compile_seconds_by_phase: dict[Phase, float] = {p: 0.0 for p in Phase}
        self.warmup_start: float | None = None
        self.warmup_end: float | None = None
        self._span_attributes = dict(span_attributes or {})
        self._tracer_provider = tracer_provider
        self._state = "new"  # new → installed → uninstalled

    # ------------------------------------------------------------------ lifecycle
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
        for backend in self.backends:
            try:
                status = backend.install(self)
            except Exception as exc:  # noqa: BLE001 - a broken backend must not stop the host
                status = BackendStatus(backend.name, "failed", degraded=f"install raised {type(exc).__name__}: {exc}")
                log.error("jitwatch: backend %s failed to install: %s", backend.name, status.degraded)
            with self._lock:
                self.backend_statuses.setdefault(backend.name, status)
            if status.degraded and status.state != "failed":
                log.warning("jitwatch: %s", status.degraded)
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
        self._emit(EventKind.WORKER_START, attrs=attrs)
        atexit.register(self.flush)
        return self

    def uninstall(self) -> None:
        """Uninstall every backend (restoring the hooks they replaced) and flush and close the sink."""
        if self._state != "installed":
            self._state = "uninstalled"
            return
        self._state = "uninstalled"
        for backend in self.backends:
            try:
                backend.uninstall()
            except Exception as exc:  # noqa: BLE001
                log.warning("jitwatch: backend %s failed to uninstall: %s: %s", backend.name, type(exc).__name__, exc)
        atexit.unregister(self.flush)
        self.sink.close()

    def detach_after_fork(self) -> None:
        """In a forked child (``os.register_at_fork``, see :mod:`jitwatch.worker`): restore the
        backends' hooks and drop the ``atexit`` flush, *without* touching the sink, whose writer
        thread exists only in the parent (flushing it would wait out its timeout, 5 s, at the
        child's exit; closing it could disturb the parent's journal connection). The sink is
        replaced by a :class:`NullSink`; the monitor is ``uninstalled``. Never raises."""
        self._state = "uninstalled"
        atexit.unregister(self.flush)
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
        with self._lock:
            self.phase = Phase.WARMUP
            self.warmup_start = time.time()
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
            self.phase = Phase.SERVING
            compiled = self.compiles_by_phase[Phase.WARMUP]
            seconds = self.compile_seconds_by_phase[Phase.WARMUP]
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
        with self._lock:
            items = list(self._inflight.values())
        return sorted(items, key=lambda s: s.start_perf)

    def inflight_snapshot(self) -> list[dict[str, Any]]:
        """The compiles in flight now, oldest first, as JSON-able dicts (``backend``, ``kernel``,
        ``start_ts`` Unix seconds, ``phase``, ``request_id``). Called by the journal writer's
        thread (:attr:`jitwatch.store.writer.JournalWriter.inflight_source`), which journals it so
        a compile's age is visible while it runs — and while it hangs."""
        items = list(self._inflight.values())  # a C-level copy: safe against concurrent begin()
        items.sort(key=lambda s: s.start_perf)
        return [
            {
                "backend": s.backend,
                "kernel": s.name,
                "start_ts": s.start_wall,
                "phase": s.phase.value,
                "request_id": s.request_id,
            }
            for s in items
        ]

    # ------------------------------------------------------------------ CompileSink
    def begin(self, backend: str, name: str) -> Started:
        """A compile starts on this thread (see :class:`~jitwatch.backends.base.CompileSink`)."""
        started = Started(
            backend, name, self.phase, _current_request.get(), time.time(), time.perf_counter(), current_parent()
        )
        self._inflight[id(started)] = started  # one dict store: atomic under the GIL
        return started

    def cancel(self, token: Any) -> None:
        """The compile did not happen."""
        self._inflight.pop(id(token), None)

    def admit(self, token: Any, capture: Capture) -> None:
        """Before the compile's work: in ``error`` mode, a serving-phase compile is recorded and
        :class:`ServingCompileError` raised (see :meth:`CompileSink.admit`); otherwise a no-op."""
        if self.mode is Mode.ERROR and token.phase is Phase.SERVING and capture.kind is CompileKind.COMPILE:
            self.finish(token, capture)

    def finish(self, token: Any, capture: Capture) -> None:
        """The compile begun with ``token`` ended now. Raises :class:`ServingCompileError` in
        ``error`` mode for a serving-phase compile (after the event is queued)."""
        duration = time.perf_counter() - token.start_perf
        self._inflight.pop(id(token), None)
        self._record(capture, token.phase, token.request_id, token.start_wall, duration, token.parent)

    def record(self, capture: Capture, *, start_ts: float, duration_s: float) -> None:
        """A compile whose start was not seen; phase and request are the current ones."""
        self._record(capture, self.phase, _current_request.get(), start_ts, duration_s, current_parent())

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
            log.warning("jitwatch: %s", status.degraded)
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

    def _record(
        self,
        capture: Capture,
        phase: Phase,
        request_id: int | None,
        start: float,
        duration: float,
        parent: str | None = None,
    ) -> None:
        serving = phase is Phase.SERVING and capture.kind is CompileKind.COMPILE
        if request_id is not None and capture.kind is CompileKind.COMPILE:
            self.stalls.compiled(request_id, capture.backend, capture.name, duration)
        if capture.kind is CompileKind.COMPILE:
            with self._lock:
                self.compiles_by_phase[phase] += 1
                self.compile_seconds_by_phase[phase] += duration
        warn = self._first_warning(capture) if serving and self.mode is Mode.WARN else None
        queued = False
        if self._state == "installed":
            name = self._request_names.get(request_id) if request_id is not None else None
            queued = self.sink.submit(
                _CompileEvent(
                    capture, phase, request_id, name, start, duration, self.identity, parent, self.diagnoser, warn
                )
            )
        if warn is not None and not queued:  # the event was dropped: say it here, without a reason
            log.warning(
                "jitwatch: post-warmup compile of %s on rank %d; key %s",
                warn,
                self.identity.rank,
                redact(capture.key or "")[:2000],
            )
        if serving and self.mode is Mode.ERROR:
            self._serving_compile(capture)

    def _submit_all(self, events: Sequence[Event | DeferredEvent]) -> None:
        if not events or self._state != "installed" or self.mode is Mode.OFF:
            return
        for ev in events:
            self.sink.submit(_Stamped(ev, self.identity) if not isinstance(ev, Event) else _stamp(ev, self.identity))

    def _describe(self, capture: Capture) -> str:
        label = self._labels.get(capture.backend) or f"{capture.backend} compile"
        return f"{label} {capture.name!r}"

    def _serving_compile(self, capture: Capture) -> None:
        """``error`` mode: raise for a serving compile (its event is already queued)."""
        shown = redact(capture.key or "")[:500]
        raise ServingCompileError(
            f"jitwatch: {self._describe(capture)} compiled during serving on rank {self.identity.rank} "
            f"(key {shown}); warmup should cover this specialization (JITWATCH_MODE=error; "
            "`jitwatch why` says which argument)",
            backend=capture.backend,
            kernel=capture.name,
            key=shown,
        )

    def _first_warning(self, capture: Capture) -> str | None:
        """``warn`` mode: the line's subject (``Triton kernel 'k'``) the first time this (backend,
        name, key) compiles in serving, else ``None``. The line itself is logged by the writer
        thread, once the event (and its reason) is built."""
        ident = (capture.backend, capture.name, capture.key or "")
        if ident in self._warned:  # warned already: a dict lookup, no lock (the usual case)
            return None
        with self._lock:
            first = ident not in self._warned
            self._warned[ident] = None
            if len(self._warned) > _WARNED_MAX:
                self._warned.popitem(last=False)
        return self._describe(capture) if first else None


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
