"""DeepGEMM: every JIT compile this process pays for, seen through DeepGEMM's own cache directory.

Mechanism (checked on DeepGEMM 2.6.1, deepseek-ai/DeepGEMM ``54e2261``, ``csrc/jit/compiler.hpp``,
built against torch 2.11 and run on an H200 with NVCC 13.0): DeepGEMM's JIT lives entirely in its
C++ extension ``deep_gemm._C``. Each GEMM call picks a configuration from the shapes (block sizes,
stages, multicast, SM count …), generates a ``.cu`` that instantiates one kernel template, and calls
``Compiler::build(name, code)``: a per-process in-memory cache, then the disk cache
``$DG_JIT_CACHE_DIR/cache/kernel.<name>.<digest>/`` (default ``~/.deep_gemm``), else a compile: write
``kernel.cu`` into ``tmp/<uuid>/``, run NVCC (or NVRTC with ``DG_JIT_USE_NVRTC=1``) to
``kernel.cubin`` there, then rename the whole directory into ``cache/`` (atomically; a rank that
loses the race to a peer compiling the same configuration drops its copy). There is no Python
function that runs once per compile — the Python names are the per-GEMM launch path, which
jitwatch never wraps — and the compile runs **with the GIL held** (3 to 4 s on the H200 for a GEMM
configuration): every Python thread of the process, this backend's included, stands still.

So this backend watches the cache directory from a daemon thread that wakes every
:data:`POLL_SECONDS` (one ``stat`` of ``cache/`` per wake; the directory is listed only when its
mtime changed). The thread notes every **stall**: two consecutive clock reads of its own that lie
:data:`STALL_SECONDS` further apart than they should (across its sleep: the poll interval; across
a scan: nothing) — the process held the GIL in between; the last :data:`STALL_HISTORY` stalls of
the last :data:`STALL_MAX_AGE_SECONDS` are kept. A new entry ``kernel.<name>.<digest>`` is **this
process's compile** when one stall covers it: its ``kernel.cu`` written after the stall began, its
``kernel.cubin`` before it ended (± :data:`SLACK_SECONDS`). The entry may be listed at any later
wake (a stall that began inside the watcher's own ``stat``; a network filesystem's attribute
cache). A compile by another process (another rank sharing the directory) that happens while
this process's watcher keeps waking is not counted here. A rank whose rename lost to a peer's
counts its compile only when the peer's ``kernel.cu`` was written after this rank's stall began
(both started within about one poll interval, as ranks in lock step do); otherwise the winner's
entry is the peer's and this rank's compile is not recorded.

Capture: ``name`` the kernel template's cache tag (``sm90_bf16_gemm``, ``sm90_fp8_gemm_1d2d``,
``transpose_fp32`` …), ``key`` the digest DeepGEMM names the entry by (its own cache key), duration
``kernel.cubin``'s mtime minus ``kernel.cu``'s (the NVCC/NVRTC run; a first compile in a process
also pays ~0.5 s of one-time setup before it, reported as ``attrs.stall_s``, the watcher's gap),
``cache_hit`` ``False``; ``detail``: ``spec`` (the template arguments from ``kernel.cu``:
majors, M/N/K (0 = runtime), block sizes, stages, SM count, dtypes), ``cubin_bytes``, ``entry``.

Not seen, by construction: loads of an existing entry (a process that finds the configuration on
disk compiles nothing and stalls ~1 ms: nothing is recorded, which is what DeepGEMM itself
reports), the in-flight state of a compile (the watcher is frozen with the rest of the process),
and the request a compile stalled (the watcher thread is not the compiling thread). A DeepGEMM
build that releases the GIL while compiling leaves the watcher awake, so its compiles would not
be attributed (not recorded); ``sgl-deep-gemm`` 0.2.5 does so, and could not be run (its
``_C.so`` needs a newer libtorch than the GPU machine's torch 2.11; docs/backends/deepgemm.md).
Error mode cannot refuse a DeepGEMM compile: it is over, inside C++, before anything of jitwatch
runs; the compile is recorded and logged at ERROR instead.

Misattribution, by construction: another process's compile that starts and ends inside a stall
of this process is recorded as this process's too: a peer rank's shorter compile of another
configuration inside this rank's longer one (ranks in lock step with per-rank shapes), or inside a
stall with another cause (a long GIL-held C call, a ``SIGSTOP``, a starved cgroup). Times
compare file mtimes (the filesystem's clock) with this process's ``time.time()``: on a network
filesystem whose server clock is more than :data:`SLACK_SECONDS` off, this process's compiles are
counted as another process's.

``DG_JIT_CACHE_DIR`` set after ``import deep_gemm``: DeepGEMM reads it when its compiler is first
used, so the watcher follows the variable (checked at every wake) until it has recorded a compile.

Forking: the thread does not exist in a forked child, and nothing is recorded there; the child's
uninstall (``jitwatch.worker``'s fork handler) stops the watcher without touching the parent's
stop event, which the thread may have held at fork time.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any

from jitwatch.backends.base import BackendStatus, Capture, LibraryBackend
from jitwatch.errors import JitwatchError
from jitwatch.text import logger

log = logger(__name__)

POLL_SECONDS = 0.1
"""How often the watcher thread wakes (seconds). One ``os.stat`` per wake; the whole wake costs
~95 µs of the thread's CPU time at load 5 on a 2-core VM, 65 µs of it the timed wait itself
(``benchmarks/bench_deepgemm_watcher.py``): ~0.1 % of one core."""

STALL_SECONDS = 0.2
"""How much longer than expected a gap between two of the watcher's clock reads must be to count
as a stall of this process (seconds). DeepGEMM compiles take seconds, so a genuine stall is far
longer."""

SLACK_SECONDS = 0.05
"""Tolerance when comparing file mtimes with the watcher's clock reads (seconds)."""

STALL_HISTORY = 64
"""Stalls remembered (the most recent ones), for entries listed after the stall that wrote them."""

STALL_MAX_AGE_SECONDS = 300.0
"""Stalls older than this (seconds, by their end) no longer explain a new entry."""

_ENTRY = re.compile(r"kernel\.([A-Za-z0-9_]{1,128})\.([0-9a-f]{8,64})")
_TEMPLATE_HEAD = re.compile(r"&\s*[A-Za-z_][A-Za-z0-9_:]{0,200}\s*<")
_TEMPLATE_TAIL = re.compile(r">\s*\)\s*;")
_SOURCE_CAP = 64 * 1024
_ARGS_CAP = 4096


def cache_root(environ: Any = os.environ) -> Path:
    """DeepGEMM's JIT cache root: ``$DG_JIT_CACHE_DIR``, else ``~/.deep_gemm`` (as
    ``Compiler::Compiler`` in ``csrc/jit/compiler.hpp`` of DeepGEMM 2.6.1 chooses it)."""
    configured = environ.get("DG_JIT_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(environ.get("HOME") or os.path.expanduser("~")) / ".deep_gemm"


def template_spec(source: str) -> str | None:
    """The kernel's template arguments from a generated ``kernel.cu`` (``&sm90_bf16_gemm_impl<…>);``
    in ``__instantiate_kernel``), whitespace collapsed, at most 512 characters; ``None`` when the
    source has no such instantiation. Linear in the source's length: the first ``&name<`` after
    ``__instantiate_kernel``, then the first ``>);`` within 4,096 characters of it."""
    at = source.find("__instantiate_kernel")
    if at < 0:
        return None
    head = _TEMPLATE_HEAD.search(source, at)
    if head is None:
        return None
    tail = _TEMPLATE_TAIL.search(source, head.end(), head.end() + _ARGS_CAP)
    if tail is None:
        return None
    return " ".join(source[head.end() : tail.start()].split())[:512]


class CacheWatcher:
    """The daemon thread that turns new DeepGEMM cache entries into this process's compiles.

    Args:
        backend: the backend whose ``sink`` receives the compiles and whose ``report_error``
            counts a failure inside the watcher.
        root: DeepGEMM's cache root (:func:`cache_root`).
        poll_s: wake interval in seconds.

    Memory: the names of the entries in ``cache/`` now (the last listing, not every name ever
    seen) and at most :data:`STALL_HISTORY` stalls.
    """

    def __init__(self, backend: DeepGemmBackend, root: Path, poll_s: float = POLL_SECONDS) -> None:
        self.backend = backend
        self.root = root
        self.cache = os.path.join(root, "cache")  # a str: a Path join per wake costs more than the stat
        self.poll_s = poll_s
        self.compiles = 0
        self.foreign = 0
        self.listable = True
        self.stalls: deque[tuple[float, float]] = deque(maxlen=STALL_HISTORY)
        self._seen: frozenset[str] = frozenset()
        self._cache_mtime: int | None = None
        self._relist = False
        self._adopting = False
        self._env = os.environ.get("DG_JIT_CACHE_DIR") or None
        self._began = time.time()
        self.listed = threading.Event()
        """Set once the watcher thread has listed the entries already there (:meth:`baseline`)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def start(self) -> None:
        """Start the thread, which first lists the entries already there (:meth:`baseline`: not
        compiles of this process). The calling thread (the host's, importing DeepGEMM) makes one
        ``stat`` of ``cache/`` (:attr:`listable`) and reads the clock; it lists nothing: a big
        cache directory, or one on a network filesystem, would hold up the host's import."""
        self._pid = os.getpid()
        self._began = time.time()
        self.listable = self._usable()
        self.listed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jitwatch-deepgemm-cache", daemon=True)
        self._thread.start()

    def _usable(self) -> bool:
        """``cache/`` is a directory this process can list, or does not exist yet under a root that
        is, or may become, a directory (one ``stat``, one ``access``)."""
        try:
            st = os.stat(self.cache)
        except FileNotFoundError:
            return True
        except OSError:  # the root is a file, a symlink loop, unreadable
            return False
        return stat.S_ISDIR(st.st_mode) and os.access(self.cache, os.R_OK | os.X_OK)

    def baseline(self) -> int:
        """List the entries in ``cache/`` now (the watcher thread's first step): they are not
        compiles of this process, except those a stall since :meth:`start` covers (a compile the
        host ran between the import and this listing froze this thread too: the gap from
        :meth:`start`'s clock read to this one is a stall, and its entry is this process's).
        Sets :attr:`listed`. Returns how many entries were recorded as this process's compiles."""
        try:
            self.note(self._began, time.time(), 0.0)
            self._cache_mtime = self._mtime()
            names = self._names()
            if names is None and not self._missing():
                self.listable = False
            self._seen = frozenset(names or ())
            if not self.stalls:
                return 0  # nothing this process compiled since start(): no entry to stat
            return sum(self._entry(name, adopting=True) for name in sorted(self._seen))
        finally:
            self.listed.set()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds). Idempotent. In a forked
        child (where the thread does not exist) the parent's stop event is left alone: the thread
        may have held its lock at fork time, and setting it would then never return."""
        if self._pid != os.getpid():
            self._stop, self._thread = threading.Event(), None
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _missing(self) -> bool:
        """``cache/`` does not exist yet under a root that is, or may become, a directory."""
        try:
            os.stat(self.cache)
        except FileNotFoundError:
            return True
        except OSError:  # the root is a file, a symlink loop, unreadable
            return False
        return False

    def _mtime(self) -> int | None:
        try:
            return os.stat(self.cache).st_mtime_ns
        except OSError:
            return None

    def _names(self) -> list[str] | None:
        try:
            return os.listdir(self.cache)
        except OSError:
            return None

    def _run(self) -> None:
        try:
            self.baseline()
        except Exception as exc:  # noqa: BLE001 - never let the watcher die or reach the host
            self.backend.report_error("deepgemm cache watcher", exc)
        last = time.time()
        while not self._stop.wait(self.poll_s):
            now = time.time()
            try:
                self.note(last, now, self.poll_s)
                env = os.environ.get("DG_JIT_CACHE_DIR") or None
                if env != self._env and self.compiles == 0:
                    self._env = env
                    self.follow(cache_root())
                self.scan(now)
            except Exception as exc:  # noqa: BLE001 - never let the watcher die or reach the host
                self.backend.report_error("deepgemm cache watcher", exc)
            last = time.time()
            self.note(now, last, 0.0)  # a stall that began inside the scan's own system calls

    def follow(self, root: Path) -> None:
        """Watch ``root`` from now on: the host set ``DG_JIT_CACHE_DIR`` after importing DeepGEMM,
        which reads it when its compiler is first used (``LazyInit<Compiler>``), not at import.
        Its entries are not another process's compiles; those a remembered stall covers are this
        process's (a compile right after the change, before this wake)."""
        self.root = root
        self.cache = os.path.join(root, "cache")
        self._cache_mtime, self._relist, self._seen, self._adopting = None, False, frozenset(), True

    def note(self, before: float, after: float, expected: float) -> bool:
        """Two consecutive clock reads of the watcher (Unix seconds) that should lie ``expected``
        seconds apart: remember ``(before, after)`` as a stall when they lie :data:`STALL_SECONDS`
        further apart. Returns whether it was one."""
        if after - before < expected + STALL_SECONDS:
            return False
        self.stalls.append((before, after))
        return True

    def scan(self, now: float) -> int:
        """Look for entries that appeared since the last listing and record those this process
        compiled (a remembered stall covers them); ``now`` is this wake (Unix seconds). Returns how
        many were recorded."""
        mtime = self._mtime()
        if mtime is None or (mtime == self._cache_mtime and not self._relist):
            return 0
        names = self._names()
        if names is None:
            return 0
        # a directory's mtime has the kernel's clock-tick granularity: a rename later in the tick of
        # this listing leaves it unchanged, so a changed directory is listed once more at the next wake
        self._relist = mtime != self._cache_mtime
        self._cache_mtime = mtime
        current = frozenset(names)
        new = current - self._seen
        self._seen = current
        adopting, self._adopting = self._adopting, False
        while self.stalls and self.stalls[0][1] < now - STALL_MAX_AGE_SECONDS:
            self.stalls.popleft()
        return sum(self._entry(name, adopting) for name in sorted(new))

    def _covering(self, start: float, end: float) -> tuple[float, float] | None:
        for before, after in reversed(self.stalls):
            if start >= before - SLACK_SECONDS and end <= after + SLACK_SECONDS:
                return before, after
        return None

    def _entry(self, name: str, adopting: bool = False) -> int:
        match = _ENTRY.fullmatch(name)
        if match is None:
            return 0
        path = self.root / "cache" / name
        try:
            source = os.stat(path / "kernel.cu")
            cubin = os.stat(path / "kernel.cubin")
        except OSError:
            return 0  # not a complete entry (DeepGEMM renames complete ones only)
        start, end = source.st_mtime, cubin.st_mtime
        stall = self._covering(start, end)
        if stall is None:
            if not adopting:  # an entry already in a directory this watcher just followed
                self.foreign += 1
                log.debug("jitwatch: DeepGEMM cache entry %s compiled by another process", name)
            return 0
        tag, digest = match.groups()
        spec = None
        if stat.S_ISREG(source.st_mode):  # never open a FIFO or a device: a read could wait forever
            try:
                with open(path / "kernel.cu", encoding="utf-8", errors="replace") as f:
                    spec = template_spec(f.read(_SOURCE_CAP))
            except OSError:
                pass
        detail = {
            "entry": "deep_gemm cache directory (GIL-held compile)",
            "spec": spec,
            "cubin_bytes": cubin.st_size,
            "stall_s": round(stall[1] - stall[0], 6),
        }
        capture = Capture(self.backend.name, tag, key=digest, cache_hit=False, detail=detail)
        sink = self.backend.sink
        if sink is None:
            return 0
        self.compiles += 1
        try:
            sink.record(capture, start_ts=start, duration_s=max(0.0, end - start))
        except JitwatchError as exc:  # error mode: the compile is over; nothing left to refuse
            log.error("jitwatch: DeepGEMM compiled %s during serving (error mode cannot refuse it): %s", tag, exc)
        return 1


class DeepGemmBackend(LibraryBackend):
    """jitwatch's backend for DeepGEMM's JIT; see the module docstring."""

    name = "deepgemm"
    label = "DeepGEMM JIT kernel"
    module = "deep_gemm"
    distributions = ("deep_gemm", "deep-gemm", "sgl-deep-gemm")

    def __init__(self) -> None:
        super().__init__()
        self.watcher: CacheWatcher | None = None

    def hook_in(self, module: ModuleType) -> BackendStatus:
        root = cache_root()
        watcher = CacheWatcher(self, root)
        watcher.start()
        self.watcher = watcher
        degraded = None
        if not hasattr(module, "_C"):
            degraded = "DeepGEMM: no deep_gemm._C extension in this build (checked: 2.6.1); nothing will compile"
        elif not watcher.listable:
            degraded = (
                "DeepGEMM: its cache directory ($DG_JIT_CACHE_DIR/cache) cannot be listed; no compile will be seen"
            )
        return BackendStatus(
            self.name,
            "active",
            self.version() or getattr(module, "__version__", None),
            ("DG_JIT_CACHE_DIR watcher",),
            degraded,
        )

    def unhook(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
