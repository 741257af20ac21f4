"""Replay a warmup manifest: precompile every recorded specialization before serving starts.

Each entry goes through Triton's own replay seam, ``JITFunction.preload(specialization_data)``
(Triton 3.0+): it rebuilds the exact specialization the worker compiled (unaligned pointers,
``== 1`` ints and constexprs included — which ``kernel.warmup`` with placeholder tensors cannot,
placeholders only ever warm the aligned-pointer variant), calls ``_do_compile`` with the recorded
in-memory key, fills the in-memory cache (and ``TRITON_CACHE_DIR``) and never launches. Every JIT
hook fires, so a monitor in its ``warmup`` phase records the replayed compiles as warmup compiles.
It works on a GPU and, with :mod:`jitwatch.backends.triton.compile_only`, on a CPU machine.

Safety — a manifest is data, never code:

* a module is imported **by name only** (``importlib.import_module``), and only when it is already
  imported or lies under one of the ``allow`` prefixes the caller gives; module and qualified
  names must be dotted Python identifiers (validated at load, before anything else);
* nothing is ever ``exec``'d or ``eval``'d, no file path is ever imported;
* the attribute reached must be a ``triton.runtime.jit.JITFunction`` (``@triton.autotune`` /
  ``@triton.heuristics`` wrappers are unwrapped through ``.fn``);
* an entry whose kernel cannot be resolved, whose ``source_hash`` differs from the kernel's
  ``JITFunction.cache_key`` (the source changed), or whose target differs from the active one is
  **skipped with a reason**; a failing compile is reported as ``failed``. Neither is fatal.

Parallel compiles (see ``docs/benchmarks.md``, "Parallel warmup"): ``parallel="threads"`` (the
``auto`` choice when Triton has it) runs every preload inside Triton's ``AsyncCompileMode`` (Triton
3.5+) with a ``ThreadPoolExecutor``: ``_do_compile`` submits the compile to the pool, and the
post-compile hook fires in the calling thread when the future is finalized. ``parallel="processes"``
compiles the entries in a spawn process pool (children run the compile-only driver for the recorded
target and fill the shared Triton disk cache), then preloads every entry here from that cache; it
measured slower than serial on a 2-core VM (child start-up), and is kept for hosts with many cores.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from jitwatch.backends.triton.resolve import module_allowed, resolve_kernel
from jitwatch.backends.triton.specialization import verified_preload_data
from jitwatch.config import JITWATCH_MANIFEST, JITWATCH_MANIFEST_ALLOW, Settings
from jitwatch.errors import ConfigError, KernelNotResolved, ManifestEntryRefused, ManifestError
from jitwatch.text import logger, plural
from jitwatch.warmup.manifest import Manifest, ManifestEntry, load

if TYPE_CHECKING:
    from jitwatch.core.monitor import Monitor

log = logger(__name__)

Parallel = Literal["auto", "serial", "threads", "processes"]
Status = Literal["compiled", "cached", "skipped", "refused", "failed"]


@dataclass
class EntryResult:
    """What replay did with one manifest entry; ``seconds`` is the wall time of its preload."""

    kernel: str
    key: str
    status: Status
    reason: str | None = None
    seconds: float = 0.0


@dataclass
class ReplayReport:
    """Outcome of :func:`replay`. ``wall_s`` is the whole replay, seconds; ``mode`` the strategy used."""

    results: list[EntryResult] = field(default_factory=list)
    wall_s: float = 0.0
    mode: str = "serial"
    workers: int = 1
    loaded: int = 0
    """Compiled kernels also loaded on the device (launcher built, module loaded)."""
    load_s: float = 0.0

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def compiled(self) -> int:
        return self.count("compiled")

    @property
    def skipped(self) -> int:
        return self.count("skipped")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def refused(self) -> int:
        """Entries refused as unsafe: a refused compile option, or a key its data does not reproduce."""
        return self.count("refused")

    @property
    def cached(self) -> int:
        """Entries nothing was compiled for: in this process's memory, or in Triton's disk cache."""
        return self.count("cached")

    @property
    def on_disk(self) -> int:
        """The :attr:`cached` entries Triton loaded from its disk cache (:data:`ON_DISK`)."""
        return sum(1 for r in self.results if r.status == "cached" and r.reason == ON_DISK)

    def summary(self) -> str:
        return (
            f"{plural(len(self.results), 'entry', 'entries')}: {self.compiled} compiled, {self.cached} already cached"
            + (f" ({self.on_disk} from Triton's disk cache), " if self.on_disk else ", ")
            + f"{self.skipped} skipped, {self.refused} refused, {self.failed} failed "
            f"in {self.wall_s:.2f} s "
            # a serial replay uses no pool: "(serial, 2 workers)" read as if two compiled at once
             + (f"({self.mode})" if self.mode == "serial" else f"({self.mode}, {plural(self.workers, 'worker')})")
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "mode": self.mode,
            "workers": self.workers,
            "loaded": self.loaded,
            "load_s": self.load_s,
            "compiled": self.compiled,
            "cached": self.cached,
            "on_disk": self.on_disk,
            "skipped": self.skipped,
            "failed": self.failed,
            "refused": self.refused,
            "results": [r.__dict__ for r in self.results],
        }


# ------------------------------------------------------------------------------------ resolving
def _current_target() -> dict[str, Any]:
    from triton.runtime import driver

    return dict(driver.active.get_current_target().__dict__)


def _in_memory(fn: Any, key: str) -> bool:
    from triton.runtime import driver

    try:
        device = driver.active.get_current_device()
        cache = fn.device_caches[device][0]
    except Exception:  # noqa: BLE001
        return False
    kernel = cache.get(key)
    return kernel is not None and not hasattr(kernel, "future")


@dataclass
class _Plan:
    entry: ManifestEntry
    fn: Any
    data: str
    on_disk: bool = False
    """Set by :class:`_DiskHits`' listener: Triton loaded this entry from its disk cache."""


# ------------------------------------------------------------------------------------ child pool
def _child_init(cache_dir: str | None, arch: int, warp_size: int, sys_path: list[str]) -> None:
    for p in sys_path:
        if p not in sys.path:
            sys.path.append(p)
    if cache_dir:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
    import triton

    from jitwatch.backends.triton.compile_only import CompileOnlyDriver

    if cache_dir:
        triton.knobs.cache.dir = cache_dir
    triton.runtime.driver.set_active(CompileOnlyDriver(arch, warp_size))


def _child_compile(module: str, qualname: str, data: str) -> tuple[bool, float, str | None]:
    """Runs in a pool child: compile one entry into the shared disk cache (compile-only driver)."""
    t0 = time.perf_counter()
    try:
        fn = resolve_kernel(module, qualname, allow=[module])
        kernel = fn.preload(data)
        if kernel is None:
            return False, time.perf_counter() - t0, "compile hook vetoed the compile"
        return True, time.perf_counter() - t0, None
    except Exception as exc:  # noqa: BLE001
        return False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"[:500]


def _default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _choose(parallel: Parallel, todo: int, workers: int) -> str:
    if parallel != "auto":
        return parallel
    # Measured on a 2-core VM with Triton 3.9 (docs/benchmarks.md, "Parallel warmup"): Triton's
    # AsyncCompileMode with a thread pool overlaps compiles (ptxas runs as a subprocess, much of
    # the MLIR pipeline runs without the GIL); a spawn process pool loses to serial because each
    # child pays interpreter + torch/triton import start-up before its first compile.
    if workers > 1 and todo >= 2 and _has_async_compile():
        return "threads"
    return "serial"


# ------------------------------------------------------------------------------------ progress
class _Progress:
    def __init__(self, enabled: bool, total: int, kernels: int, console: Any = None) -> None:
        self._p: Any = None
        self._task: Any = None
        self.kernels_total = kernels
        self.kernels_done: set[str] = set()
        if not enabled or total == 0:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._p = Progress(
            TextColumn("[bold]warmup replay"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("keys"),
            TextColumn("{task.fields[kernels]}"),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=False,
        )
        self._task = self._p.add_task("", total=total, kernels=f"0/{kernels} kernels")

    def __enter__(self) -> _Progress:
        if self._p is not None:
            self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()

    def advance(self, kernel: str, key: str, done_kernel: bool) -> None:
        if done_kernel:
            self.kernels_done.add(kernel)
        if self._p is not None:
            short = kernel.rsplit(".", 1)[-1]
            self._p.update(
                self._task,
                advance=1,
                description=f"{short} {key[:60]}",
                kernels=f"{len(self.kernels_done)}/{self.kernels_total} kernels",
            )


# ------------------------------------------------------------------------------------ replay
def replay(
    manifest: Manifest | str | os.PathLike[str],
    *,
    allow: Sequence[str] | None = None,
    parallel: Parallel = "auto",
    workers: int | None = None,
    progress: bool = False,
    console: Any = None,
    verify_source: bool = True,
    load_kernels: bool | None = None,
    key: bytes | None = None,
) -> ReplayReport:
    """Precompile every entry of ``manifest`` without launching anything.

    Args:
        manifest: a :class:`~jitwatch.warmup.manifest.Manifest` or a path to one (loaded and validated).
        allow: module prefixes that may be imported (see :func:`module_allowed`); modules already
            imported are always usable. ``None``: import nothing new.
        parallel: ``serial``; ``threads`` (Triton ``AsyncCompileMode`` + ``ThreadPoolExecutor``,
            Triton 3.5+); ``processes`` (spawn pool of compile-only children filling the disk
            cache, then preload here); ``auto`` picks threads for ≥ 2 compiles on > 1 CPU when
            Triton has ``AsyncCompileMode``, else serial.
        workers: pool size (default: CPU count, at most 8).
        progress: show a rich progress bar (keys done / total, kernels done / total).
        verify_source: skip entries whose ``source_hash`` differs from ``JITFunction.cache_key``.
        load_kernels: also load each compiled kernel on the device (``CompiledKernel._init_handles``:
            builds Triton's C launcher and loads the module, which a first launch otherwise pays
            for — measured 0.28 s for 3 kernels on an H200 with Triton 3.6). Default: on when the
            active driver is a real one, off under the compile-only driver. Still never launches.
        key: ``JITWATCH_MANIFEST_KEY`` bytes when ``manifest`` is a path: a valid HMAC is then required.

    Every entry is checked before it compiles
    (:func:`jitwatch.backends.triton.specialization.verified_preload_data`): only allow-listed
    compile options, and a key that the current kernel recomputes from the entry's
    ``specialization_data``; ``preload`` gets the key's own options. Anything else is ``refused``.

    Returns:
        A :class:`ReplayReport`; entries are ``compiled``, ``cached`` (nothing compiled: already in
        this process's in-memory cache, :data:`IN_MEMORY`, or loaded from Triton's disk cache,
        :data:`ON_DISK`, told apart by the compilation listener's ``cache_hit``; not with
        ``parallel="processes"``, whose children fill the disk cache first), ``skipped`` (with a
        reason), ``refused`` (unsafe: the reason names the option or the key mismatch) or
        ``failed`` (compile error).

    Raises:
        ManifestError: only when ``manifest`` is a path that does not load (see
            :func:`jitwatch.warmup.manifest.load`). Never raises for a single entry.
    """
    t_start = time.perf_counter()
    if not isinstance(manifest, Manifest):
        manifest = load(manifest, key=key)
    workers = workers or _default_workers()
    report = ReplayReport(workers=workers)
    try:
        target = _current_target()
    except Exception as exc:  # noqa: BLE001 - no usable Triton driver
        for e in manifest.entries:
            report.results.append(EntryResult(e.kernel, e.key, "skipped", f"no active Triton driver: {exc}"))
        report.wall_s = time.perf_counter() - t_start
        return report

    other_triton = _other_triton(manifest)
    plans: list[_Plan] = []
    resolved: dict[tuple[str, str], Any] = {}
    for entry in manifest.entries:
        if entry.backend != "triton":
            report.results.append(
                EntryResult(entry.kernel, entry.key, "skipped", f"backend {entry.backend!r} has no manifest replay")
            )
            continue
        ident = (entry.module, entry.qualname)
        try:
            fn = resolved.get(ident)
            if fn is None:
                fn = resolve_kernel(entry.module, entry.qualname, allow=allow)
                resolved[ident] = fn
        except KernelNotResolved as exc:
            report.results.append(EntryResult(entry.kernel, entry.key, "skipped", str(exc)))
            continue
        if entry.target and entry.target != target:
            report.results.append(
                EntryResult(entry.kernel, entry.key, "skipped", f"recorded for target {entry.target}, active {target}")
            )
            continue
        if verify_source and entry.source_hash is not None:
            try:
                current = str(fn.cache_key)
            except Exception as exc:  # noqa: BLE001
                report.results.append(EntryResult(entry.kernel, entry.key, "failed", f"cannot hash source: {exc}"))
                continue
            if current != entry.source_hash:
                report.results.append(
                    EntryResult(
                        entry.kernel,
                        entry.key,
                        "skipped",
                        f"source changed since recording (hash {current[:12]} != recorded {entry.source_hash[:12]})",
                    )
                )
                continue
        try:
            data = verified_preload_data(fn, entry.specialization_data, entry.key)
        except ManifestEntryRefused as exc:
            report.results.append(EntryResult(entry.kernel, entry.key, "refused", other_triton + str(exc)))
            continue
        if _in_memory(fn, entry.key):
            report.results.append(EntryResult(entry.kernel, entry.key, "cached", IN_MEMORY))
            continue
        plans.append(_Plan(entry, fn, data))

    mode = _choose(parallel, len(plans), workers)
    report.mode = mode
    if mode == "threads" and not _has_async_compile():
        mode = report.mode = "serial"
    remaining: dict[str, int] = {}
    for p in plans:
        remaining[p.entry.kernel] = remaining.get(p.entry.kernel, 0) + 1
    with _Progress(progress, len(plans), len(remaining), console) as bar:
        advanced: set[int] = set()
        lock = threading.Lock()

        def progressed(plan: _Plan) -> None:
            with lock:
                if id(plan) in advanced:
                    return
                advanced.add(id(plan))
                remaining[plan.entry.kernel] -= 1
                bar.advance(plan.entry.kernel, plan.entry.key, remaining[plan.entry.kernel] == 0)

        def done(plan: _Plan, result: EntryResult) -> None:
            if result.status == "compiled" and disk_hits.counting and plan.on_disk:
                result.status, result.reason = "cached", ON_DISK
            report.results.append(result)
            progressed(plan)

        # processes: the children fill the disk cache, so every load here would be a hit; not told apart.
        disk_hits = _DiskHits(on=mode != "processes" and bool(plans))
        with _outside_async_compile(), disk_hits:
            if mode == "processes" and plans:
                _prefill_disk_cache(plans, target, workers)
            if mode == "threads" and plans:
                _replay_threads(plans, workers, done, progressed)
            else:
                for plan in plans:
                    done(plan, _preload_one(plan))
        if load_kernels is None:
            load_kernels = not _compile_only_active()
        if load_kernels:
            _load_compiled(plans, report)
    report.wall_s = time.perf_counter() - t_start
    return report


def _other_triton(manifest: Manifest) -> str:
    """The start of a refused entry's reason when ``manifest`` was recorded with another Triton
    version than this process runs (``""`` when the same or unknown): Triton's keys, options and
    attributes change between versions, so such an entry is refused for a mismatch that says nothing
    about tampering (3.9 → 3.6: ``KeyError: 'Keyword argument fpsan_homomorphic_casts was specified
    but unrecognised'``; 3.6 → 3.9: ``attributes differ from what the key compiles``)."""
    try:
        import triton

        here = str(triton.__version__)
    except Exception:  # noqa: BLE001
        return ""
    recorded = manifest.triton_version
    if not recorded or recorded == here:
        return ""
    return (
        f"recorded with Triton {str(recorded)[:40]}, this is Triton {here}: re-record the manifest with this Triton; "
    )


def _compile_only_active() -> bool:
    from triton.runtime import driver

    from jitwatch.backends.triton.compile_only import CompileOnlyDriver

    try:
        return isinstance(driver.active, CompileOnlyDriver)
    except Exception:  # noqa: BLE001
        return True


def _load_compiled(plans: list[_Plan], report: ReplayReport) -> None:
    """``_init_handles`` on every kernel replay compiled (Triton 3.x private API, guarded)."""
    from triton.runtime import driver

    t0 = time.perf_counter()
    compiled = {(r.kernel, r.key) for r in report.results if r.status == "compiled" or r.reason == ON_DISK}
    device = driver.active.get_current_device()
    loaded = 0
    for plan in plans:
        if (plan.entry.kernel, plan.entry.key) not in compiled:
            continue
        try:
            kernel = plan.fn.device_caches[device][0].get(plan.entry.key)
            init = getattr(kernel, "_init_handles", None)
            if init is not None:
                init()
                loaded += 1
        except Exception as exc:  # noqa: BLE001 - the first launch will retry and raise properly
            log.info("jitwatch replay: could not load %s: %s: %s", plan.entry.kernel, type(exc).__name__, exc)
    report.loaded = loaded
    report.load_s = time.perf_counter() - t0


def _has_async_compile() -> bool:
    try:
        import triton

        return hasattr(triton, "AsyncCompileMode")
    except Exception:  # noqa: BLE001
        return False


@contextlib.contextmanager
def _outside_async_compile() -> Iterator[None]:
    """Replay's compiles run outside a ``triton.AsyncCompileMode`` the host has active in this
    context (its warmup compiling asynchronously): Triton's ``active_mode`` context variable is
    ``None`` inside, the host's again after. Inside the host's mode a threaded replay's own mode
    raised ``RuntimeError: Another AsyncCompileMode is already active``, and a serial replay's
    compiles went to the host's pool, reported ``compiled`` before they were. Nothing when this
    Triton has no asynchronous compile mode."""
    try:
        from triton.runtime._async_compile import active_mode
    except Exception:  # noqa: BLE001 - no AsyncCompileMode in this Triton
        yield
        return
    token = active_mode.set(None)
    try:
        yield
    finally:
        active_mode.reset(token)


IN_MEMORY = "already in this process's in-memory cache"
"""An entry's ``cached`` reason: the kernel was compiled (or loaded) earlier in this process."""
ON_DISK = "in Triton's disk cache: loaded, not compiled"
"""An entry's ``cached`` reason: Triton found the compile in its disk cache (``TRITON_CACHE_DIR``,
or a remote cache) and loaded it; nothing was compiled."""

_COMPILING = threading.local()
"""``.plan``: the entry whose compile this thread runs (set around ``preload`` and the pool's compiles)."""


class _DiskHits:
    """While entered, Triton's ``knobs.compilation.listener`` is wrapped (chained: the listener it
    held, jitwatch's own included, is still called with the same arguments) to note which plans
    Triton served from its disk cache (``cache_hit=True``: :attr:`_Plan.on_disk`). One wrapper
    for the process, shared by replays that overlap (two threads replaying at once): the first to
    enter installs it, the last to leave restores the listener it found, unless another listener
    was set on top meanwhile (then ours stays under it, a pass-through, not cut out of their
    chain). Leaving in any order leaves no replay listener behind (each replay's own wrapper,
    left in a non-nested order, stayed in the slot for good). Does nothing when ``on`` is false or
    Triton has no listener slot (before 3.4): every preload is then reported ``compiled``."""

    _lock = threading.Lock()
    _users = 0
    _knobs: Any = None
    _previous: Any = None
    _ours: Any = None

    def __init__(self, *, on: bool) -> None:
        self.on = on
        self.counting = False
        """Whether this replay's wrapper is in place: only then is ``plan.on_disk`` believed."""

    def __enter__(self) -> _DiskHits:
        if not self.on:
            return self
        try:
            from triton import knobs

            knobs.compilation.listener  # noqa: B018 - the slot exists (Triton >= 3.4)
        except Exception:  # noqa: BLE001 - no listener slot in this Triton
            return self
        cls = type(self)
        with cls._lock:
            if cls._users == 0:
                previous = knobs.compilation.listener

                def jitwatch_replay_listener(*args: Any, **kwargs: Any) -> Any:
                    plan = getattr(_COMPILING, "plan", None)
                    if plan is not None and kwargs.get("cache_hit") is True:
                        plan.on_disk = True
                    return previous(*args, **kwargs) if previous is not None else None

                # Declared the functools.wraps way: jitwatch's own Triton backend then knows its
                # listener still runs (HookSet.replaced), and does not fall back to jit_post_compile_hook.
                jitwatch_replay_listener.__wrapped__ = previous  # type: ignore[attr-defined]
                knobs.compilation.listener = jitwatch_replay_listener
                cls._knobs, cls._previous, cls._ours = knobs, previous, jitwatch_replay_listener
            cls._users += 1
        self.counting = True
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.counting:
            return
        self.counting = False
        cls = type(self)
        with cls._lock:
            cls._users -= 1
            if cls._users:
                return
            try:
                if cls._knobs.compilation.listener is cls._ours:
                    cls._knobs.compilation.listener = cls._previous
            finally:
                cls._knobs = cls._previous = cls._ours = None


def _preload_one(plan: _Plan) -> EntryResult:
    t0 = time.perf_counter()
    _COMPILING.plan = plan
    try:
        kernel = plan.fn.preload(plan.data)
    except Exception as exc:  # noqa: BLE001 - a bad entry never stops the warmup
        return EntryResult(
            plan.entry.kernel, plan.entry.key, "failed", f"{type(exc).__name__}: {exc}"[:500], time.perf_counter() - t0
        )
    finally:
        _COMPILING.plan = None
    seconds = time.perf_counter() - t0
    if kernel is None:
        return EntryResult(plan.entry.kernel, plan.entry.key, "skipped", "a jit_cache_hook vetoed the compile", seconds)
    return EntryResult(plan.entry.kernel, plan.entry.key, "compiled", None, seconds)


class _TrackingExecutor(Executor):
    """Wraps the pool so each compile Triton submits reports its completion (for the progress bar)
    and its own compile seconds; ``current`` is the plan whose ``preload`` is submitting."""

    def __init__(self, inner: Executor, on_done: Any) -> None:
        self.inner = inner
        self.on_done = on_done
        self.current: _Plan | None = None
        self.seconds: dict[int, float] = {}
        self.errors: dict[int, str] = {}

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        plan = self.current
        seconds = self.seconds
        errors = self.errors

        def timed() -> Any:
            t0 = time.perf_counter()
            _COMPILING.plan = plan  # this pool thread compiles plan's entry (_DiskHits)
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                if plan is not None:  # Triton's ignore_errors drops it; the report keeps why
                    errors[id(plan)] = f"{type(exc).__name__}: {exc}"[:500]
                raise
            finally:
                _COMPILING.plan = None
                if plan is not None:
                    seconds[id(plan)] = time.perf_counter() - t0

        fut = self.inner.submit(timed)
        if plan is not None:
            fut.add_done_callback(lambda _f: self.on_done(plan))
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)


def _replay_threads(plans: list[_Plan], workers: int, done: Any, progressed: Any) -> None:
    """All preloads inside ``triton.AsyncCompileMode``: Triton submits each compile to the pool and
    finalizes it (in-memory cache + post-compile hook) in this thread when the mode exits."""
    import triton

    started: list[tuple[_Plan, str | None]] = []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jitwatch-replay") as pool:
        ex = _TrackingExecutor(pool, progressed)
        with triton.AsyncCompileMode(ex, ignore_errors=True):
            for plan in plans:
                ex.current = plan
                try:
                    plan.fn.preload(plan.data)
                    started.append((plan, None))
                except Exception as exc:  # noqa: BLE001
                    started.append((plan, f"{type(exc).__name__}: {exc}"[:500]))
            ex.current = None
    for plan, err in started:
        secs = ex.seconds.get(id(plan), 0.0)
        if err is not None:
            done(plan, EntryResult(plan.entry.kernel, plan.entry.key, "failed", err))
        elif _in_memory(plan.fn, plan.entry.key):
            done(plan, EntryResult(plan.entry.kernel, plan.entry.key, "compiled", None, secs))
        else:
            done(plan, _retry_in_thread(plan, ex.errors.get(id(plan), "asynchronous compile failed"), secs))


def _retry_in_thread(plan: _Plan, why: str, pool_seconds: float) -> EntryResult:
    """A compile that failed in the pool, compiled again in this thread (outside the async mode).

    Concurrent compiles can fail where the same compile alone succeeds: CPython 3.11's ``ast``
    module keeps its recursion-depth counter per interpreter, not per thread, so two Triton
    frontends parsing at once can raise ``SystemError: AST constructor recursion depth mismatch``
    (cpython gh-106905; seen here about once in 200 threaded replays under load). A real error
    (bad source, unsupported target) fails again and is reported with this attempt's message.
    """
    log.info("jitwatch replay: %s failed in the thread pool (%s); compiling it again here", plan.entry.kernel, why)
    result = _preload_one(plan)
    result.seconds += pool_seconds
    if result.status == "compiled":
        result.reason = f"compiled on a second, serial attempt; the threaded one failed: {why}"[:500]
    return result


def _prefill_disk_cache(plans: list[_Plan], target: Mapping[str, Any], workers: int) -> None:
    """Compile ``plans`` in spawned compile-only children; they share this process's disk cache."""
    if target.get("backend") != "cuda":
        log.info("jitwatch replay: process pool needs a CUDA target, compiling in-process instead")
        return
    import multiprocessing

    import triton

    cache_dir = triton.knobs.cache.dir
    ctx = multiprocessing.get_context("spawn")
    futures: list[Future[tuple[bool, float, str | None]]] = []
    try:
        with ProcessPoolExecutor(
            max_workers=min(workers, len(plans)),
            mp_context=ctx,
            initializer=_child_init,
            initargs=(cache_dir, int(target["arch"]), int(target.get("warp_size", 32)), list(sys.path)),
        ) as pool:
            futures = [pool.submit(_child_compile, p.entry.module, p.entry.qualname, p.data) for p in plans]
            for fut in as_completed(futures):
                ok, _, err = fut.result()
                if not ok:
                    log.info("jitwatch replay: child compile failed (retrying in-process): %s", err)
    except Exception as exc:  # noqa: BLE001 - fall back to in-process compiles
        log.warning("jitwatch replay: process pool unavailable (%s); compiling in-process", exc)


# ------------------------------------------------------------------------------------ env entry
def replay_from_env(
    monitor: Monitor | None = None,
    *,
    settings: Settings | None = None,
    progress: bool = False,
) -> ReplayReport | None:
    """Replay the manifest named by ``JITWATCH_MANIFEST``, for integrations (the vLLM plugin).

    Call it inside the worker's warmup (``with monitor.warmup(): replay_from_env(monitor)``) so the
    replayed compiles are recorded as warmup compiles. Uses ``settings`` (default: the monitor's,
    else :meth:`Settings.for_worker`): ``manifest``, ``manifest_allow``, ``replay_parallel``,
    ``replay_workers``. Returns ``None`` when no manifest is set, when the monitor is already
    serving (replaying then would be post-warmup compiles) or when the manifest does not load;
    never raises, logs why. Entries not replayed (skipped, refused, failed) are one WARNING line
    (counts, the first reason, and the ``JITWATCH_MANIFEST_ALLOW`` value its modules need when they
    are not allowed); each entry's reason is logged at INFO.
    """
    if settings is None:
        try:
            settings = monitor.settings if monitor is not None else Settings.for_worker()
        except ConfigError as exc:
            log.error("jitwatch: not replaying a warmup manifest: %s", exc)
            return None
    path = settings.manifest
    if path is None:
        return None
    if monitor is not None and getattr(getattr(monitor, "phase", None), "value", None) == "serving":
        log.warning("jitwatch: %s set but the monitor is already serving; replay it during warmup", JITWATCH_MANIFEST)
        return None
    try:
        manifest = load(path, key=settings.manifest_key)
    except ManifestError as exc:
        log.error("jitwatch: not replaying warmup manifest: %s", exc)
        return None
    except Exception as exc:  # noqa: BLE001 - never break the host's warmup (load raises ManifestError only)
        log.error("jitwatch: not replaying warmup manifest %s: %s: %s", path, type(exc).__name__, exc)
        return None
    try:
        report = replay(
            manifest,
            allow=list(settings.manifest_allow),
            parallel=settings.replay_parallel,  # type: ignore[arg-type]
            workers=settings.replay_workers,
            progress=progress,
        )
    except Exception as exc:  # noqa: BLE001 - never break the host's warmup
        log.error("jitwatch: warmup manifest replay failed: %s: %s", type(exc).__name__, exc)
        return None
    log.info("jitwatch: warmup manifest %s: %s", Path(path).name, report.summary())
    for r in report.results:
        if r.status in ("skipped", "refused", "failed"):
            log.info("jitwatch: manifest entry %s %s: %s", r.kernel, r.status, r.reason)
    _warn_not_replayed(Path(path).name, manifest, report, settings.manifest_allow)
    return report


def needed_modules(manifest: Manifest, allow: Sequence[str] = ()) -> list[str]:
    """The distinct modules (dotted names, in entry order) that ``manifest``'s entries name and
    that no prefix in ``allow`` allows (:func:`~jitwatch.backends.triton.resolve.module_allowed`):
    what ``--allow`` / ``JITWATCH_MANIFEST_ALLOW`` must add for them to be replayed. Text only:
    nothing is imported. Never raises for a loaded manifest (its names are checked at load)."""
    return list(
        dict.fromkeys(
            e.module
            for e in manifest.entries
            if isinstance(e.module, str) and e.module and e.module.isprintable() and not module_allowed(e.module, allow)
        )
    )


def _warn_not_replayed(name: str, manifest: Manifest, report: ReplayReport, allow: Sequence[str]) -> None:
    """One WARNING line when entries of the manifest ``name`` were not replayed (skipped, refused,
    failed): the counts, the first entry's reason, and, when modules its entries need are neither
    imported nor under ``allow``, the ``JITWATCH_MANIFEST_ALLOW`` value that allows them (text only,
    never imported; at most five, then ``…``). Never raises."""
    try:
        bad = [r for r in report.results if r.status in ("skipped", "refused", "failed")]
        if not bad:
            return
        first = bad[0]
        reason = " ".join(str(first.reason or "").split())[:300]
        line = (
            f"jitwatch: warmup manifest {name}: {len(bad)} of {len(report.results)} entries not replayed "
            f"({report.skipped} skipped, {report.refused} refused, {report.failed} failed; "
            f"first: {first.kernel} {first.status}: {reason})"
        )
        needed = needed_modules(manifest, allow)
        if needed:
            value = ",".join([*allow, *needed[:5]])
            line += f"; its modules are not imported and not allowed: set {JITWATCH_MANIFEST_ALLOW}={value}" + (
                f" (and {len(needed) - 5} more)" if len(needed) > 5 else ""
            )
        log.warning("%s", line)
    except Exception:  # noqa: BLE001 - a hint only, never break the host's warmup
        return


__all__ = [
    "EntryResult",
    "KernelNotResolved",
    "ReplayReport",
    "replay",
    "replay_from_env",
]
