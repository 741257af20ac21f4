"""Test helpers for code that uses jitwatch (importable by users, like ``structlog.testing``).

* :func:`monitored` — a context manager giving a fresh :class:`~jitwatch.core.monitor.Monitor` whose
  journal lives in a temporary directory, with the compile-only driver active (real Triton
  compiles on a CPU machine, see :mod:`jitwatch.backends.triton.compile_only`) and a fresh ``TRITON_CACHE_DIR``.
* :class:`TritonHookRecorder` — records, independently of jitwatch, what Triton's own
  ``jit_cache_hook``/``jit_post_compile_hook``/``compilation.listener`` see; install it *before*
  jitwatch so jitwatch chains to it, then compare the two.
* :func:`fresh_kernel_cache` — forget a kernel's in-memory compile cache (Triton keeps one per
  ``JITFunction`` per process), so the next ``warmup`` goes through the hooks again.
* :class:`JournalBuilder` — writes made-up workers, phases and compiles into a real journal, for
  tests of views, the sidecar, dashboards and alerts that need no compiler at all.
* :class:`RecordingSink` — an in-memory event sink for a :class:`~jitwatch.core.monitor.Monitor`
  (events materialized as the journal writer would), for tests of the core and of backends.
* :func:`free_port` — a free TCP port on 127.0.0.1.

Example::

    from jitwatch.testing import TritonHookRecorder, monitored

    with TritonHookRecorder() as rec, monitored(mode="warn") as h:
        with h.monitor.warmup():
            my_kernel.warmup(x, 16, BLOCK=64, grid=(1,))
        compiles = h.compiles()          # jitwatch's compile events, from the journal
        assert [c.key for c in compiles] == rec.keys()

Requires Triton ≥ 3.4 (``triton.knobs``) for the recorder; the compile-only driver is checked
with Triton 3.6 and 3.9.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jitwatch.backends.base import Backend
from jitwatch.backends.triton import TritonBackend
from jitwatch.config import Mode, Settings
from jitwatch.core.events import DeferredEvent, Event, EventKind, Phase, as_member
from jitwatch.core.identity import WorkerIdentity
from jitwatch.core.monitor import Monitor
from jitwatch.redact import redact
from jitwatch.store.journal import Journal, event_kinds
from jitwatch.worker import create_monitor

__all__ = [
    "JournalBuilder",
    "MonitorHarness",
    "RecordedCompile",
    "RecordingSink",
    "TritonHookRecorder",
    "compile_only_driver",
    "free_port",
    "fresh_kernel_cache",
    "fresh_triton_cache",
    "make_event",
    "monitored",
    "read_events",
]


# ---------------------------------------------------------------------------------------------
# Triton's own view
# ---------------------------------------------------------------------------------------------
@dataclass
class RecordedCompile:
    """One compile as Triton's hooks reported it.

    ``key`` is ``redact(str(key))`` — the same string jitwatch journals. ``phase`` is what the
    recorder's ``phase`` callable returned when ``jit_cache_hook`` fired (``None`` without one).
    ``cache_hit`` comes from ``knobs.compilation.listener`` (Triton disk cache).
    """

    kernel: str
    key: str | None
    is_warmup: bool | None
    phase: Any = None
    cache_hit: bool | None = None
    completed: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict, repr=False)


class TritonHookRecorder:
    """Records what Triton's JIT hooks and compilation listener see, chained like jitwatch.

    Args:
        phase: optional callable returning the current phase (e.g. ``lambda: monitor.phase``),
            stored on each compile when its ``jit_cache_hook`` fires.

    Use as a context manager, or :meth:`install`/:meth:`uninstall`. Previous hooks are chained
    (called with identical arguments, return value passed back) and restored on uninstall.
    ``launch_enter_hook``/``launch_exit_hook`` are not touched.
    """

    def __init__(self, phase: Any = None) -> None:
        self._phase = phase
        self._lock = threading.Lock()
        self._prev: dict[str, Any] = {}
        self._mine: dict[str, Any] = {}
        self.started: list[RecordedCompile] = []
        self.listener_calls: list[dict[str, Any]] = []
        self._open: dict[tuple[int, str | None], RecordedCompile] = {}

    # -- install ---------------------------------------------------------------------------
    def install(self) -> TritonHookRecorder:
        import triton

        rt = triton.knobs.runtime
        comp = triton.knobs.compilation
        self._prev = {"pre": rt.jit_cache_hook, "post": rt.jit_post_compile_hook, "listener": comp.listener}
        self._mine = {"pre": self._pre, "post": self._post, "listener": self._listener}
        rt.jit_cache_hook = self._mine["pre"]
        rt.jit_post_compile_hook = self._mine["post"]
        comp.listener = self._mine["listener"]
        return self

    def uninstall(self) -> None:
        import triton

        rt = triton.knobs.runtime
        comp = triton.knobs.compilation
        if rt.jit_cache_hook is self._mine.get("pre"):
            rt.jit_cache_hook = self._prev["pre"]
        if rt.jit_post_compile_hook is self._mine.get("post"):
            rt.jit_post_compile_hook = self._prev["post"]
        if comp.listener is self._mine.get("listener"):
            comp.listener = self._prev["listener"]

    def __enter__(self) -> TritonHookRecorder:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- hooks -----------------------------------------------------------------------------
    @staticmethod
    def _ident(kwargs: dict[str, Any]) -> tuple[int, str | None]:
        fn = kwargs.get("fn")
        key = kwargs.get("key")
        return id(getattr(fn, "jit_function", None)), (redact(str(key)) if key is not None else None)

    def _pre(self, *args: Any, **kwargs: Any) -> Any:
        fn = kwargs.get("fn")
        ident = self._ident(kwargs)
        rec = RecordedCompile(
            kernel=str(getattr(fn, "name", "<unknown>")),
            key=ident[1],
            is_warmup=kwargs.get("is_manual_warmup"),
            phase=self._phase() if self._phase is not None else None,
            kwargs=kwargs,
        )
        with self._lock:
            self.started.append(rec)
            self._open[ident] = rec
        prev = self._prev.get("pre")
        return prev(*args, **kwargs) if prev is not None else None

    def _post(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            rec = self._open.pop(self._ident(kwargs), None)
            if rec is not None:
                rec.completed = True
        prev = self._prev.get("post")
        return prev(*args, **kwargs) if prev is not None else None

    def _listener(self, *args: Any, **kwargs: Any) -> Any:
        src = kwargs.get("src")
        fn = getattr(src, "fn", None)
        with self._lock:
            self.listener_calls.append(kwargs)
            for (fid, _), rec in self._open.items():
                info = rec.kwargs.get("compile") or {}
                configs = info.get("configs") or [None]
                if (
                    fid == id(fn)
                    and rec.cache_hit is None
                    and info.get("signature") == getattr(src, "signature", None)
                    and info.get("constants") == getattr(src, "constants", None)
                    and configs[0] == getattr(src, "attrs", None)
                ):
                    rec.cache_hit = bool(kwargs.get("cache_hit"))
                    break
        prev = self._prev.get("listener")
        return prev(*args, **kwargs) if prev is not None else None

    # -- views -----------------------------------------------------------------------------
    @property
    def compiles(self) -> list[RecordedCompile]:
        """Compiles whose ``jit_post_compile_hook`` fired, in start order."""
        with self._lock:
            return [r for r in self.started if r.completed]

    def keys(self, kernel: str | None = None) -> list[str | None]:
        """Keys of the completed compiles (optionally of one kernel), in start order."""
        return [r.key for r in self.compiles if kernel is None or r.kernel == kernel]

    def clear(self) -> None:
        with self._lock:
            self.started.clear()
            self.listener_calls.clear()
            self._open.clear()


# ---------------------------------------------------------------------------------------------
# Environment: driver, caches
# ---------------------------------------------------------------------------------------------
@contextmanager
def compile_only_driver(arch: int = 90) -> Iterator[Any]:
    """The compile-only driver (see :mod:`jitwatch.backends.triton.compile_only`) inside; the previous *active*
    driver slot restored after — also on a machine where Triton has no default driver (CPU), where
    ``triton.runtime.driver.reset_active()`` itself would raise (:func:`compile_only`)."""
    from jitwatch.backends.triton.compile_only import compile_only

    with compile_only(arch) as drv:
        yield drv


@contextmanager
def fresh_triton_cache(directory: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """``TRITON_CACHE_DIR`` pointed at ``directory`` (a new temp dir if ``None``, removed after)."""
    made = directory is None
    path = Path(tempfile.mkdtemp(prefix="jitwatch-triton-cache-")) if directory is None else Path(directory)
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old
        if made:
            shutil.rmtree(path, ignore_errors=True)


def fresh_kernel_cache(*kernels: Any) -> None:
    """Forget the in-memory compiled variants of ``kernels`` (``JITFunction`` or ``Autotuner``).

    Triton's in-memory cache lives in ``JITFunction.device_caches`` (per process, per kernel);
    after this the next call/warmup goes through ``jit_cache_hook`` again and may hit the disk
    cache (``cache_hit=True``).
    """
    for k in kernels:
        while k is not None and not hasattr(k, "device_caches"):
            k = getattr(k, "fn", None)
        if k is not None:
            k.device_caches.clear()


def read_events(journal_dir: str | os.PathLike[str], kind: EventKind | str | None = None) -> list[Event]:
    """Every event in the journal at ``journal_dir``, oldest first (optionally of one kind, as
    :meth:`Journal.events` takes it). A ``kind`` that is not one raises ``ConfigError`` (a
    ``ValueError``) also before the journal exists, so a misspelt kind cannot pass as "no events"."""
    kinds = None if kind is None else event_kinds(kind)
    if not (Path(journal_dir) / "journal.db").exists():
        return []
    with Journal(journal_dir) as j:
        return j.events(kind=kinds, limit=1_000_000, newest_first=False)


# ---------------------------------------------------------------------------------------------
# A monitor in a sandbox
# ---------------------------------------------------------------------------------------------
@dataclass
class MonitorHarness:
    """What :func:`monitored` yields."""

    monitor: Monitor
    journal_dir: Path
    triton_cache_dir: Path
    driver: Any

    def events(self, kind: EventKind | str | None = None) -> list[Event]:
        """Flush the monitor, then read the journal (oldest first)."""
        self.monitor.flush()
        return read_events(self.journal_dir, kind)

    def compiles(self, phase: Phase | str | None = None, kernel: str | None = None) -> list[Event]:
        """``compile`` events, optionally of one phase (a :class:`Phase` or its value) and/or
        kernel, oldest first. ``ConfigError`` (a ``ValueError``) for a phase that is not one."""
        phase = None if phase is None else as_member(Phase, phase, "phase")
        return [
            e
            for e in self.events(EventKind.COMPILE)
            if (phase is None or e.phase is phase) and (kernel is None or e.kernel == kernel)
        ]

    def counters(self) -> dict[tuple[int, str], float]:
        self.monitor.flush()
        with Journal(self.journal_dir) as j:
            return j.counters()

    def backend(self, name: str) -> Backend:
        """The monitor's installed backend called ``name`` (``KeyError`` if none)."""
        for b in self.monitor.backends:
            if b.name == name:
                return b
        raise KeyError(name)

    @property
    def triton(self) -> TritonBackend:
        """The monitor's Triton backend."""
        backend = self.backend("triton")
        assert isinstance(backend, TritonBackend)
        return backend


@contextmanager
def monitored(
    mode: Mode | str = Mode.WARN,
    *,
    rank: int = 0,
    identity: WorkerIdentity | None = None,
    journal_dir: str | os.PathLike[str] | None = None,
    triton_cache_dir: str | os.PathLike[str] | None = None,
    arch: int = 90,
    compile_only: bool = True,
    tracer_provider: Any = False,
    backends: Sequence[Backend] | None = None,
    heartbeat_seconds: float | None = None,
) -> Iterator[MonitorHarness]:
    """A fresh, installed :class:`Monitor` (not the process-wide one) in a sandbox.

    Journal in ``journal_dir`` (default: a temp dir, removed after), ``TRITON_CACHE_DIR`` at
    ``triton_cache_dir`` (default: a fresh temp dir), the compile-only driver for ``arch`` active
    when ``compile_only`` (set ``False`` on a GPU machine to launch for real), tracing off unless a
    provider is given, ``backends`` as :func:`jitwatch.create_monitor` (default: every available
    one), ``heartbeat_seconds`` as ``JITWATCH_HEARTBEAT_SECONDS`` (default: its default). On exit
    the monitor is uninstalled (every backend's hooks restored) and the previous driver and
    environment are put back.
    """
    own_journal = journal_dir is None
    jdir = Path(tempfile.mkdtemp(prefix="jitwatch-journal-")) if journal_dir is None else Path(journal_dir)
    settings = replace(Settings.from_env({}), journal_dir=jdir)
    if heartbeat_seconds is not None:
        settings = replace(settings, heartbeat_seconds=heartbeat_seconds)
    ident = identity or WorkerIdentity(rank=rank)
    try:
        with fresh_triton_cache(triton_cache_dir) as cache_dir:
            with compile_only_driver(arch) if compile_only else _nothing() as drv:
                mon = create_monitor(
                    settings, mode=mode, identity=ident, backends=backends, tracer_provider=tracer_provider
                ).install()
                try:
                    yield MonitorHarness(mon, jdir, cache_dir, drv)
                finally:
                    mon.uninstall()
    finally:
        if own_journal:
            shutil.rmtree(jdir, ignore_errors=True)


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


# ---------------------------------------------------------------------------------------------
# Journals and sinks without a compiler
# ---------------------------------------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class RecordingSink:
    """An :class:`~jitwatch.core.monitor.EventSink` that keeps events in memory.

    Deferred events are materialized at :meth:`submit` (on the calling thread, unlike the journal
    writer), so a test sees exactly what the journal would store, minus redaction.
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.closed = False
        self._lock = threading.Lock()

    def submit(self, item: Event | DeferredEvent) -> bool:
        ev = item if isinstance(item, Event) else item.to_event()
        with self._lock:
            self.events.append(ev)
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        return True

    def close(self, timeout: float = 5.0) -> None:
        self.closed = True

    def of_kind(self, kind: EventKind | str) -> list[Event]:
        """Events of one kind (an :class:`EventKind` or its value), in submission order.
        ``ConfigError`` (a ``ValueError``) for a kind that is not one."""
        kind = as_member(EventKind, kind, "kind")
        with self._lock:
            return [e for e in self.events if e.kind is kind]


COMPILE_LIKE = (EventKind.COMPILE, EventKind.AUTOTUNE, EventKind.GRAPH_CAPTURE, EventKind.HOOK_ERROR)


def make_event(
    kind: EventKind, ts: float, *, rank: int = 0, pid: int = 100, host: str = "node-a", **fields: Any
) -> Event:
    """An :class:`Event` as a worker would journal it; compile-like kinds get ``backend="triton"``
    unless a backend is given."""
    if kind in COMPILE_LIKE:
        fields.setdefault("backend", "triton")
    return Event(kind=kind, ts=ts, rank=rank, pid=pid, host=host, **fields)


class JournalBuilder:
    """Writes made-up events into a real journal (``Journal(directory)``), for tests that need a
    journal's contents but no compiler: views, sidecar, dashboards, alert rules.

    Times are Unix seconds from ``t0``; every method writes at once (one transaction) and returns
    the events written. Example::

        b = JournalBuilder(tmp_path)
        b.worker(rank=0)
        b.warmup(rank=0, compiles=[("add", 0.3)])
        b.compile("add", phase=Phase.SERVING, ts=b.t0 + 10, duration_s=0.09)
    """

    def __init__(self, directory: str | os.PathLike[str], *, host: str = "node-a", t0: float = 1_700_000_000.0) -> None:
        self.directory = Path(directory)
        self.host = host
        self.t0 = t0

    def event(self, kind: EventKind, ts: float | None = None, *, rank: int = 0, pid: int = 100, **fields: Any) -> Event:
        """An :class:`Event` (not written) with this builder's host (:func:`make_event`)."""
        return make_event(kind, self.t0 if ts is None else ts, rank=rank, pid=pid, host=self.host, **fields)

    def write(self, *events: Event) -> list[Event]:
        """Write ``events`` in one transaction."""
        with Journal(self.directory) as j:
            j.write(list(events))
        return list(events)

    def worker(
        self,
        rank: int = 0,
        *,
        pid: int = 100,
        ts: float | None = None,
        mode: str = "warn",
        backends: Sequence[str] = ("triton",),
        **attrs: Any,
    ) -> list[Event]:
        """A ``worker_start`` with the given backends active (and their fields, as a monitor writes)."""
        info: dict[str, dict[str, Any]] = {
            b: {"state": "active", "version": "3.9.0" if b == "triton" else None, "hooks": []} for b in backends
        }
        return self.write(
            self.event(
                EventKind.WORKER_START,
                ts,
                rank=rank,
                pid=pid,
                attrs={
                    "mode": mode,
                    "backends": info,
                    "triton_version": "3.9.0" if "triton" in backends else None,
                    **attrs,
                },
            )
        )

    def compile(
        self,
        kernel: str,
        *,
        backend: str = "triton",
        phase: Phase = Phase.WARMUP,
        ts: float | None = None,
        duration_s: float = 0.1,
        key: str | None = None,
        rank: int = 0,
        pid: int = 100,
        cache_hit: bool | None = None,
        kind: EventKind = EventKind.COMPILE,
        attrs: dict[str, Any] | None = None,
    ) -> list[Event]:
        """One compile-like event (``kind``: compile, autotune or graph_capture) ending at ``ts``."""
        end = self.t0 if ts is None else ts
        return self.write(
            self.event(
                kind,
                end,
                rank=rank,
                pid=pid,
                phase=phase,
                backend=backend,
                kernel=kernel,
                key=key,
                start_ts=end - duration_s,
                duration_s=duration_s,
                cache_hit=cache_hit,
                attrs=dict(attrs or {}),
            )
        )

    def warmup(
        self,
        rank: int = 0,
        *,
        pid: int = 100,
        start: float | None = None,
        end: float | None = None,
        compiles: Sequence[tuple[str, float]] = (),
        backend: str = "triton",
    ) -> list[Event]:
        """``warmup_start``, one warmup compile per ``(kernel, seconds)``, ``warmup_complete``."""
        t_start = self.t0 + 1 if start is None else start
        t_end = t_start + 1 + len(compiles) if end is None else end
        events = [self.event(EventKind.WARMUP_START, t_start, rank=rank, pid=pid, phase=Phase.WARMUP)]
        for i, (kernel, seconds) in enumerate(compiles):
            ts = t_start + 0.5 + i * (t_end - t_start) / (len(compiles) + 1)
            events.append(
                self.event(
                    EventKind.COMPILE,
                    ts,
                    rank=rank,
                    pid=pid,
                    phase=Phase.WARMUP,
                    backend=backend,
                    kernel=kernel,
                    start_ts=ts - seconds,
                    duration_s=seconds,
                )
            )
        events.append(
            self.event(
                EventKind.WARMUP_COMPLETE,
                t_end,
                rank=rank,
                pid=pid,
                phase=Phase.SERVING,
                start_ts=t_start,
                duration_s=t_end - t_start,
                attrs={"kernels_compiled": len(compiles), "compile_seconds": sum(s for _, s in compiles)},
            )
        )
        return self.write(*events)

    def first_request(
        self, rank: int = 0, *, pid: int = 100, ts: float | None = None, latency_s: float = 0.01
    ) -> list[Event]:
        """The rank's ``first_request`` event."""
        end = self.t0 + 10 if ts is None else ts
        return self.write(
            self.event(
                EventKind.FIRST_REQUEST,
                end,
                rank=rank,
                pid=pid,
                phase=Phase.SERVING,
                start_ts=end - latency_s,
                duration_s=latency_s,
            )
        )
