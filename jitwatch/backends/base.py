"""The backend protocol: how a JIT compiler's callbacks reach jitwatch's backend-neutral core.

A *backend* adapts one JIT compiler (Triton, torch.compile, a DSL's JIT) to jitwatch. It knows the
compiler's hooks; the core (:class:`jitwatch.core.monitor.Monitor`) knows phases, requests, ranks
and modes and nothing of any compiler. The two meet here:

* the core calls :meth:`Backend.install` with a :class:`CompileSink` (the monitor itself);
* the backend, from inside the compiler's callbacks, calls the sink: :meth:`CompileSink.begin`
  when a compile starts, :meth:`CompileSink.finish` (or :meth:`CompileSink.cancel`) when it ends,
  :meth:`CompileSink.record` (or :meth:`CompileSink.ended`) for a compile it only saw end, and
  :meth:`CompileSink.hook_error` when its own code failed. Each record is a :class:`Capture` (or,
  through :meth:`CompileSink.end` and :meth:`CompileSink.ended`, a callable that builds one on the
  journal writer's thread).

Cost rules (``docs/architecture.md``, "The compiling thread"): ``begin``/``finish`` run on the
thread that compiles, so a backend gives them only what it already holds — names and the key as
the compiler made them. Anything that needs work (decoding a signature, making values JSON-able)
goes in :attr:`Capture.detail` as a callable: the core calls it later, on the journal writer's
thread. Redaction of home paths happens in the store, for every backend alike.

A backend is found by name: built-in ones in :data:`jitwatch.backends.BUILTIN`, third-party ones
through the ``jitwatch.backends`` entry-point group (``importlib.metadata``), and selected with
``JITWATCH_BACKENDS`` (default: every available one). Writing one: ``docs/architecture.md``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import FrameType, ModuleType
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from jitwatch.config import BACKEND_NAME_MAX_LENGTH, BACKEND_NAME_PATTERN
from jitwatch.importhook import when_imported

# The rule for a backend's name (BACKEND_NAME_PATTERN, BACKEND_NAME_MAX_LENGTH) lives in
# jitwatch.config, which parses JITWATCH_BACKENDS by it; the filters by backend (the sidecar's
# ?backend=, `jitwatch why --backend`) import it from here.


def backend_name_problem(name: str, given: str = "--backend {}") -> str | None:
    """Why ``name`` cannot be a backend's name (:data:`BACKEND_NAME_PATTERN`, at most
    :data:`BACKEND_NAME_MAX_LENGTH` characters), as one sentence, or ``None`` when it can.

    ``given`` shows how the user gave it, ``{}`` standing for the value: ``"--backend {}"`` (the
    CLI) gives ``--backend 'Triton' is not a backend name: lower-case letters, ... ; did you mean
    --backend triton?``, ``"?backend={}"`` (the sidecar's 422) ``?backend='Triton' is not ...; did
    you mean ?backend=triton?``. The suggestion is the lower-case, stripped value, when that is valid.
    """
    from jitwatch.config import backend_name_ok as valid

    if valid(name):
        return None
    lower = name.strip().lower()
    hint = f"; did you mean {given.format(lower)}?" if valid(lower) else ""
    return (
        f"{given.format(repr(name))} is not a backend name: lower-case letters, digits and _, starting with a"
        f" letter, at most {BACKEND_NAME_MAX_LENGTH} characters (e.g. triton, torch_compile){hint}"
    )


class CompileKind(str, Enum):
    """What one :class:`Capture` records.

    ``compile`` is one unit of JIT work a request can wait on: a Triton kernel specialization, a
    Dynamo graph, a DSL kernel. A compile served from the compiler's own persistent cache (Triton's
    ``TRITON_CACHE_DIR``, Inductor's FX-graph cache, TileLang's database) is still a ``compile``,
    with ``cache_hit=True``: a *load*, which costs milliseconds rather than seconds.
    """

    COMPILE = "compile"
    AUTOTUNE = "autotune"
    """A benchmark sweep over configurations (Triton ``@autotune`` cache miss, a DSL's tuner)."""
    GRAPH_CAPTURE = "graph_capture"
    """A CUDA-graph recording (torch.compile ``mode="reduce-overhead"``)."""


Detail = Mapping[str, Any] | Callable[[], Mapping[str, Any]]
"""Backend-specific detail of a capture, or a callable that builds it on the writer thread."""


RECOMPILE_REASON_CLASSES: tuple[str, ...] = (
    "first compile",
    "size mismatch",
    "stride mismatch",
    "dtype mismatch",
    "device mismatch",
    "requires_grad mismatch",
    "rank mismatch",
    "value change",
    "type change",
    "identity change",
    "global state",
    "other",
)
"""The whole domain of a compile's ``attrs.reason_class`` (the ``reason_class`` label of
``jitwatch_recompiles_total``): what a backend may classify a recompile as. The journal stores any
other value as ``other``, so no backend (a third-party one included) can grow the label's
cardinality; a new class is added here, in one place."""


@dataclass(slots=True)
class Capture:
    """One compile as a backend saw it (backend-neutral).

    Attributes:
        backend: the backend's :attr:`Backend.name` (``"triton"``); a metric label.
        name: what compiled — kernel, graph or function name; a metric label (capped).
        key: the specialization key in the compiler's own words (Triton's in-memory cache key,
            a Dynamo compile id and guard failure, a DSL's argument spec); never a label.
        kind: see :class:`CompileKind`.
        cache_hit: ``True`` when the compiler loaded the result from its persistent cache,
            ``False`` for a real compile, ``None`` when the backend cannot tell.
        module: Python module that defines ``name``, when known (manifests replay by it).
        stages: per-stage seconds (Triton: ``ttir``, ``ttgir``, …), when the compiler reports them.
        detail: backend-specific, JSON-able fields stored in the event's ``attrs`` (see
            :data:`Detail`); values that are not JSON types are stored as their ``str()``.
    """

    backend: str
    name: str
    key: str | None = None
    kind: CompileKind = CompileKind.COMPILE
    cache_hit: bool | None = None
    module: str | None = None
    stages: Mapping[str, float] | None = None
    detail: Detail | None = None


class FrameWatcher(Protocol):
    """A backend's side of the compiles it began with :meth:`CompileSink.begin_watched`; called
    on the journal writer's thread, never on a compiling thread. Knows what the sink does not:
    which frames run the backend's compiles, and the backend's own state of the compile."""

    def running(self, token: Any, stack: Sequence[FrameType]) -> bool | None:
        """Whether the compile begun with ``token`` still runs in one of ``stack``'s frames: the
        stack of the thread that began it, innermost frame first (empty when that thread has
        ended). ``True``: it runs (kept); ``False``: it left without an end (dropped as
        abandoned, :meth:`abandoned`); ``None``: the backend cannot tell this compile's frame
        (kept, asked again at the next sweep). Read the frames, keep none of them."""
        ...

    def abandoned(self, token: Any) -> tuple[str, str | None]:
        """The compile begun with ``token`` left its frame without ending: forget it in the
        backend and return (the probable cause in words, the compile's key or ``None``)."""
        ...


class CompileSink(Protocol):
    """What a backend calls; implemented by :class:`jitwatch.core.monitor.Monitor`.

    ``begin``, ``finish``, ``end``, ``cancel``, ``record`` and ``ended`` never raise, except
    :meth:`finish`, :meth:`end`, :meth:`record` and :meth:`ended` raising
    :class:`jitwatch.errors.ServingCompileError` in ``error`` mode for a serving-phase compile: the
    backend lets it reach the host after running any chained hook.
    """

    def begin(self, backend: str, name: str) -> Any:
        """A compile of ``name`` starts on this thread, now. Returns an opaque token holding the
        start time, phase and request, for :meth:`finish` or :meth:`cancel`."""
        ...

    def begin_watched(self, backend: str, name: str, thread_id: int, watcher: FrameWatcher) -> Any:
        """:meth:`begin` for a compile that runs synchronously on this thread, inside frames the
        backend can tell (``thread_id``: this thread's ``threading.get_ident()``, which the
        backend has at hand). The compiling thread does no frame work: on the journal writer's
        thread, once the compile has been in flight ``ABANDON_AFTER_S`` (1 s), the sink walks
        that thread's stack and asks ``watcher`` (:meth:`FrameWatcher.running`) whether the
        compile still runs there; if it left without :meth:`end`/:meth:`finish`/:meth:`cancel`
        (the compiler raised, or a hook chained after the backend's raised), the sink drops it
        from its in-flight compiles, asks ``watcher`` for the cause, counts it and logs it
        (:meth:`jitwatch.core.monitor.Monitor.sweep_abandoned`). Costs the compiling thread what
        :meth:`begin` costs, with two references more in the token."""
        ...

    def finish(self, token: Any, capture: Capture) -> None:
        """The compile begun with ``token`` ended now; record ``capture`` (duration from ``begin``)."""
        ...

    def end(self, token: Any, key: str | None, build: Callable[[Any], Capture], arg: Any) -> None:
        """:meth:`finish` for a ``compile`` (kind :attr:`CompileKind.COMPILE`) of the backend and
        name given to :meth:`begin`, whose :class:`Capture` is built later: ``build(arg)`` runs on
        the journal writer's thread, so the compiling thread only hands over references. ``key``
        (the compiler's own string, unredacted) is needed now: warn-once and the ``error``-mode
        message. The hot path for a backend whose callbacks fire on every compile (Triton)."""
        ...

    def cancel(self, token: Any) -> None:
        """The compile begun with ``token`` did not happen (a chained hook vetoed it, or it raised)."""
        ...

    def begun_again(self, token: Any) -> bool:
        """The backend saw the compile begun with ``token`` begin again (same kernel and key)
        before it ended. ``True``: ``token`` was begun with :meth:`begin_watched` on this thread,
        which cannot be inside two compiles of one kernel and key, so that compile raised; it is
        left in flight for the sweep to drop, count and log as abandoned (the backend's
        :meth:`FrameWatcher.abandoned` is asked for its cause then). ``False``: another thread's
        compile of the same key, or an unwatched one: cancelled (:meth:`cancel`). Optional: a
        backend calls :meth:`cancel` where the sink lacks it."""
        ...

    def admit(self, token: Any, capture: Capture) -> None:
        """Ask, before the compile begun with ``token`` does its work, whether the mode allows it.

        Returns (recording nothing) unless the mode is ``error`` and ``token`` began in the
        ``serving`` phase with ``capture.kind`` ``compile``: then the compile is recorded as
        :meth:`finish` would (duration so far, counted, journaled) and
        :class:`jitwatch.errors.ServingCompileError` is raised, so the backend can refuse the
        compile at its start (torch.compile) instead of after paying for it. The token is
        finished either way when it raises; the backend must not finish it again.
        """
        ...

    def record(self, capture: Capture, *, start_ts: float, duration_s: float) -> None:
        """Record a compile whose start was not seen: ``start_ts`` Unix seconds, ``duration_s``
        seconds. Phase and request are the current ones."""
        ...

    def ended(
        self, backend: str, name: str, key: str | None, duration_s: float, build: Callable[[Any], Capture], arg: Any
    ) -> None:
        """:meth:`record` for a ``compile`` (kind :attr:`CompileKind.COMPILE`) whose start was not
        seen and which ended now, on this thread, after ``duration_s`` seconds, with its
        :class:`Capture` built later, as :meth:`end` does: ``build(arg)`` runs on the journal
        writer's thread, so the compiling thread hands over the kernel's name, the key (warn-once,
        the ``error``-mode message) and the duration, and references. The Capture's backend, name
        and key must be these. Phase: the one in effect halfway through the compile (as
        :meth:`record`); request: this thread's current one. The hot path of a backend that sees
        compiles only at their end (Triton's compilation listener for Inductor's kernels and
        direct ``triton.compile`` calls). Optional: a backend calls :meth:`record` where the sink
        lacks it."""
        ...

    def hook_error(self, backend: str, where: str, exc: BaseException) -> None:
        """jitwatch's own code inside ``where`` (a hook name) raised ``exc``: count and log it."""
        ...

    def backend_ready(self, status: BackendStatus) -> None:
        """A backend that was waiting for its library (:attr:`BackendStatus.state` ``waiting``)
        has installed its hooks now that the host imported the library."""
        ...


# ---------------------------------------------------------------------- parent compiles
_parents: dict[int, str] = {}
_parents_lock = threading.Lock()
parent_marks: Mapping[int, str] = _parents
"""The marks :func:`enter_parent` set (thread id → the compile ref of its innermost open mark),
read-only: empty unless a backend marked one, so a caller on a hot path skips
:func:`current_parent` when it is falsy."""
_open_marks: dict[int, list[ParentMark]] = {}
"""Thread id → its open marks, oldest first (under ``_parents_lock``)."""


class ParentMark:
    """One :func:`enter_parent`: what :func:`exit_parent` takes back (opaque to callers)."""

    __slots__ = ("ident", "ref")

    def __init__(self, ident: int, ref: str) -> None:
        self.ident = ident
        self.ref = ref


def enter_parent(ref: str) -> ParentMark:
    """Mark this thread as inside compile ``ref`` (``"torch_compile:0/1"``: backend and the
    compiler's id), so compiles of other backends that start meanwhile are attributed to it
    (the monitor stores :func:`current_parent` in their ``attrs.parent``). Returns the mark for
    :func:`exit_parent`. Marks nest: the innermost open one is the thread's parent."""
    ident = threading.get_ident()
    mark = ParentMark(ident, ref)
    with _parents_lock:
        _open_marks.setdefault(ident, []).append(mark)
        _parents[ident] = ref
    return mark


def exit_parent(mark: ParentMark | None = None) -> None:
    """Undo :func:`enter_parent` (``mark``: what it returned), in any order: marks closed out of
    the order they were opened in (two monitors' torch.compile backends both mark a Dynamo compile
    and torch runs the end callbacks in the order the start callbacks ran) leave the innermost mark
    still open as the thread's parent, where restoring each mark's predecessor left the first
    backend's mark behind for good. ``None``: every mark of this thread."""
    with _parents_lock:
        ident = threading.get_ident() if mark is None else mark.ident
        marks = _open_marks.get(ident)
        if marks is not None and mark is not None:
            for i in range(len(marks) - 1, -1, -1):
                if marks[i] is mark:
                    del marks[i]
                    break
        if not marks or mark is None:
            _open_marks.pop(ident, None)
            _parents.pop(ident, None)
        else:
            _parents[ident] = marks[-1].ref


def current_parent() -> str | None:
    """The compile this thread is inside (see :func:`enter_parent`); when this thread is inside
    none but exactly one compile is open in the process, that one (a compiler that hands work to
    a helper thread, e.g. Inductor's asynchronous Triton compiles, is still attributed); else
    ``None``. One dictionary truth test in the common case (no compile marked anywhere)."""
    if not _parents:
        return None
    ref = _parents.get(threading.get_ident())
    if ref is not None:
        return ref
    with _parents_lock:
        refs = set(_parents.values())
    return refs.pop() if len(refs) == 1 else None


BackendState = Literal["active", "waiting", "unavailable", "failed"]


@dataclass(frozen=True)
class BackendStatus:
    """What one backend did at install time (journaled with the worker, shown in ``/jit``).

    ``state``: ``active`` (hooks in), ``waiting`` (library installed but not imported by the host
    yet: hooks go in when it is), ``unavailable`` (library not installed: nothing imported),
    ``failed`` (installing raised; ``degraded`` says why). ``hooks`` names the mechanisms
    occupied; ``degraded`` what is missing in this library version, if anything.
    """

    name: str
    state: BackendState
    version: str | None = None
    hooks: tuple[str, ...] = ()
    degraded: str | None = None

    def as_attrs(self) -> dict[str, Any]:
        """JSON-able form stored in the worker's journal row."""
        out: dict[str, Any] = {"state": self.state, "version": self.version, "hooks": list(self.hooks)}
        if self.degraded:
            out["degraded"] = self.degraded
        return out


@runtime_checkable
class Backend(Protocol):
    """One JIT compiler adapted to jitwatch. Instances are created with no arguments.

    Attributes:
        name: short identifier, a metric label value (:data:`BACKEND_NAME_PATTERN`).
        label: words for log lines, e.g. ``"Triton kernel"`` or ``"torch.compile graph"``.
        library: the distribution/module the backend watches (``"triton"``).
    """

    name: ClassVar[str]
    label: ClassVar[str]

    def available(self) -> bool:
        """Whether the library is installed. Must not import it (use :func:`module_available`)."""
        ...

    def version(self) -> str | None:
        """The library's version without importing it (:func:`distribution_version`), or ``None``."""
        ...

    def install(self, sink: CompileSink) -> BackendStatus:
        """Hook into the library (now if the host imported it, else when it does:
        :func:`jitwatch.importhook.when_imported`). Never raises for a library problem: returns
        a ``failed`` or degraded status instead."""
        ...

    def uninstall(self) -> None:
        """Remove every hook this backend installed, restoring what was there; cancel a pending
        deferred install. Idempotent."""
        ...


def module_available(name: str) -> bool:
    """Whether top-level module ``name`` can be imported, without importing it
    (:func:`importlib.util.find_spec` on a top-level name only consults the finders)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def distribution_version(*names: str) -> str | None:
    """The installed version of the first of the distributions ``names`` found (package
    metadata only, nothing imported), or ``None``."""
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - broken metadata
            continue
    return None


class LibraryBackend:
    """Base class for a backend that hooks into one library once the host imports it.

    Subclasses set :attr:`name`, :attr:`label`, :attr:`module` (the import that triggers hooking
    in, e.g. ``"triton"`` or ``"torch._dynamo"``) and :attr:`distributions` (for the version), and
    implement :meth:`hook_in` and :meth:`unhook`. :meth:`install` then does the rest the same way
    for every backend: ``unavailable`` (and nothing imported) when the library is not installed;
    hooks in at once when the host already imported :attr:`module`; otherwise waits for that
    import (:func:`jitwatch.importhook.when_imported`) and reports ``backend_ready`` then. A
    :meth:`hook_in` that raises makes the status ``failed``, after :meth:`unhook` took out what it
    had installed (so :meth:`unhook` must cope with a partial install); nothing reaches the host.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    module: ClassVar[str]
    distributions: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.sink: CompileSink | None = None
        self._cancel_wait: Callable[[], None] | None = None
        self._status: BackendStatus | None = None

    def available(self) -> bool:
        return module_available(self.module.partition(".")[0])

    def version(self) -> str | None:
        return distribution_version(*(self.distributions or (self.module.partition(".")[0],)))

    def install(self, sink: CompileSink) -> BackendStatus:
        if self._status is not None and self._status.state == "active":
            return self._status
        self.sink = sink
        loaded = sys.modules.get(self.module)
        if loaded is not None:
            return self._activate(loaded)
        if not self.available():
            return BackendStatus(self.name, "unavailable")
        self._cancel_wait = when_imported(self.module, self._on_import, on_error=self._import_error)
        return self._status or BackendStatus(self.name, "waiting", self.version())

    def uninstall(self) -> None:
        if self._cancel_wait is not None:
            self._cancel_wait()
            self._cancel_wait = None
        if self._status is not None and self._status.state == "active":
            self.unhook()
        self._status = None

    def status(self) -> BackendStatus | None:
        """The status after the last install attempt (``None`` while waiting)."""
        return self._status

    def hook_in(self, module: ModuleType) -> BackendStatus:
        """Install the hooks into the imported library; return the ``active`` (or degraded) status."""
        raise NotImplementedError

    def unhook(self) -> None:
        """Remove what :meth:`hook_in` installed."""
        raise NotImplementedError

    def report_error(self, where: str, exc: BaseException) -> None:
        """Count an error inside this backend's own code (never raises)."""
        if self.sink is not None:
            self.sink.hook_error(self.name, where, exc)

    def _activate(self, module: ModuleType) -> BackendStatus:
        try:
            self._status = self.hook_in(module)
        except Exception as exc:  # noqa: BLE001 - an unexpected library version must not stop the host
            try:  # take out what hook_in installed before it raised: uninstall() skips a failed backend
                self.unhook()
            except Exception as undo:  # noqa: BLE001
                self.report_error(f"undoing a failed hook into {self.module}", undo)
            self._status = BackendStatus(
                self.name, "failed", self.version(), degraded=f"hooking into {self.module} failed: {exc!r}"[:500]
            )
        return self._status

    def _on_import(self, module: ModuleType) -> None:
        status = self._activate(module)
        if self.sink is not None:
            self.sink.backend_ready(status)

    def _import_error(self, name: str, exc: BaseException) -> None:
        self.report_error(f"import of {name}", exc)


__all__ = [
    "BACKEND_NAME_MAX_LENGTH",
    "BACKEND_NAME_PATTERN",
    "Backend",
    "BackendState",
    "BackendStatus",
    "Capture",
    "CompileKind",
    "CompileSink",
    "Detail",
    "FrameWatcher",
    "LibraryBackend",
    "ParentMark",
    "backend_name_problem",
    "current_parent",
    "distribution_version",
    "enter_parent",
    "exit_parent",
    "module_available",
    "parent_marks",
]
