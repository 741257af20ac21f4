"""The JIT monitor: turns Triton's compile callbacks into journal events, by phase.

Usage in a worker process::

    import jitwatch

    mon = jitwatch.install(mode="warn")  # hooks in; phase "startup"
    with mon.warmup():                   # phase "warmup"; span "jitwatch.warmup"
        run_warmup()                     # compiles here are expected
    # phase "serving": a compile now is a post-warmup compile (logged / raised per mode)
    with mon.request():                  # the first one's latency is recorded per rank
        serve()

One :class:`Monitor` per process (:func:`install` returns the existing one).
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import ContextDecorator, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jitwatch.config import Mode, Settings, detect_parallel_ranks, detect_rank, parse_mode
from jitwatch.events import Event, EventKind, Phase
from jitwatch.hooks import HookSet, ServingCompileError, TritonSupport
from jitwatch.redact import redact
from jitwatch.tracing import (
    ATTR_COMPILE_SECONDS,
    ATTR_DURATION_SECONDS,
    ATTR_KERNELS_COMPILED,
    ATTR_RANK,
    build_tracer_provider,
    warmup_span,
)
from jitwatch.writer import JournalWriter

log = logging.getLogger(__name__)

_WARNED_MAX = 4096
"""(kernel, key) pairs remembered for warn-once; the oldest is forgotten past this."""

_current_request: contextvars.ContextVar[int | None] = contextvars.ContextVar("jitwatch_request", default=None)


@dataclass
class _Pending:
    start_wall: float
    start_perf: float
    phase: Phase
    kernel: str
    module: str | None
    key: str
    kwargs: dict[str, Any]
    request_id: int | None
    stages: dict[str, float] | None = None
    cache_hit: bool | None = None


@dataclass
class WorkerIdentity:
    """Who this process is: global ``rank`` plus optional TP/PP/DP ranks and free-form labels."""

    rank: int
    tp_rank: int | None = None
    pp_rank: int | None = None
    dp_rank: int | None = None
    local_rank: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *, rank: int | None = None) -> WorkerIdentity:
        """Identity from the environment: ``rank`` as :func:`jitwatch.config.detect_rank`
        (``JITWATCH_RANK``, ``RANK``, ``LOCAL_RANK``, else 0) unless given; TP/PP/DP ranks from
        ``JITWATCH_TP_RANK``/``JITWATCH_PP_RANK``/``JITWATCH_DP_RANK``; ``local_rank`` from
        ``LOCAL_RANK``. Raises :class:`jitwatch.config.ConfigError` for a non-integer value."""
        ranks = detect_parallel_ranks(env)
        return cls(
            rank=detect_rank(env) if rank is None else rank,
            tp_rank=ranks["tp_rank"],
            pp_rank=ranks["pp_rank"],
            dp_rank=ranks["dp_rank"],
            local_rank=ranks["local_rank"],
        )

    def attrs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: v
            for k, v in (
                ("tp_rank", self.tp_rank),
                ("pp_rank", self.pp_rank),
                ("dp_rank", self.dp_rank),
                ("local_rank", self.local_rank),
            )
            if v is not None
        }
        out.update(self.labels)
        return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    inner = getattr(value, "value", None)  # tl.constexpr
    if inner is not None and type(value).__name__ == "constexpr":
        return _jsonable(inner)
    return redact(str(value))


def _name_constexprs(constants: Any, arg_names: list[str] | None) -> dict[str, Any]:
    """Triton passes constexprs keyed by argument-index paths, e.g. ``{(2,): 16}``; name them."""
    out: dict[str, Any] = {}
    if not isinstance(constants, dict):
        return out
    for path, value in constants.items():
        if isinstance(path, str):
            name = path
        elif isinstance(path, tuple) and path and isinstance(path[0], int) and arg_names and path[0] < len(arg_names):
            name = arg_names[path[0]] + "".join(f"[{i}]" for i in path[1:])
        else:
            name = str(path)
        out[name] = _jsonable(value)
    return out


def _compile_info(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``compile`` dict of a JIT hook call, or ``{}`` when missing or not a dict."""
    info = kwargs.get("compile")
    return info if isinstance(info, dict) else {}


def _hook_key(kwargs: dict[str, Any]) -> str | None:
    """Triton's in-memory cache key as a redacted string (``compute_cache_key`` returns a ``str`` in 3.6-3.9)."""
    key = kwargs.get("key")
    if key is None:
        key = _compile_info(kwargs).get("key")
    if key is None:
        return None
    try:
        return redact(str(key))
    except Exception:  # noqa: BLE001 - an odd object whose __str__ raises
        return f"<{type(key).__name__}>"


def _fn_names(fn: Any) -> tuple[str, str | None]:
    """(kernel, module) from ``JitFunctionInfo`` (``.name``, ``.module``) or a ``JITFunction``."""
    name = getattr(fn, "name", None)
    if not isinstance(name, str) or not name:
        inner = getattr(fn, "fn", None)
        name = getattr(inner, "__qualname__", None) or getattr(fn, "__qualname__", None)
    module = getattr(fn, "module", None)
    if not isinstance(module, str):
        module = getattr(getattr(fn, "fn", None), "__module__", None)
    return (str(name) if name else "<unknown>"), (str(module) if module else None)


def _stage_seconds(times: Any) -> dict[str, float]:
    """``knobs.CompileTimes`` (µs) → ``{"ir_initialization": s, "ttir": s, …, "store_results": s}``."""
    out: dict[str, float] = {}
    if times is None:
        return out
    init = getattr(times, "ir_initialization", None)
    if init is not None:
        out["ir_initialization"] = init / 1e6
    for item in getattr(times, "lowering_stages", None) or []:
        try:
            name, us = item
            out[str(name)] = us / 1e6
        except (TypeError, ValueError):
            continue
    store = getattr(times, "store_results", None)
    if store is not None:
        out["store_results"] = store / 1e6
    return out


class Monitor:
    """Records compiles, autotune runs and phase changes of one worker process.

    Args:
        settings: journal directory, retention, queue size (default: :meth:`Settings.from_env`).
        mode: ``off``/``warn``/``error`` (default from settings, i.e. ``JITWATCH_MODE``).
        identity: ranks and labels (default: rank from ``JITWATCH_RANK``/``RANK``/``LOCAL_RANK``).
        tracer_provider: OpenTelemetry provider for the warmup span; default built from the
            ``OTEL_*`` environment (see :mod:`jitwatch.tracing`); pass ``False`` to disable.

    Thread-safe. The hooks only build an event and queue it (see :mod:`jitwatch.writer`).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        mode: Mode | str | None = None,
        identity: WorkerIdentity | None = None,
        tracer_provider: Any | None = None,
        span_attributes: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.mode = parse_mode(mode) if mode is not None else self.settings.mode
        self.identity = identity or WorkerIdentity.from_env()
        self.phase = Phase.STARTUP
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, str], _Pending] = {}
        self._warned: OrderedDict[tuple[str, str], None] = OrderedDict()  # bounded: _WARNED_MAX
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
        self._hooks = HookSet(self)
        self.writer: JournalWriter | None = None
        self.support: TritonSupport | None = None

    # ------------------------------------------------------------------ lifecycle
    def install(self) -> Monitor:
        """Hook into Triton and register the worker in the journal. In ``off`` mode, does nothing."""
        if self.mode is Mode.OFF or self.writer is not None:
            return self
        self.writer = JournalWriter(
            self.settings.journal_dir,
            queue_size=self.settings.queue_size,
            rank=self.identity.rank,
            journal_kwargs={
                "retention_events": self.settings.retention_events,
                "retention_seconds": self.settings.retention_seconds,
                "max_kernels": self.settings.max_kernels,
            },
            heartbeat=(self.identity.host, self.identity.pid, self.identity.rank),
            heartbeat_s=self.settings.heartbeat_seconds,
        )
        self.support = self._hooks.install()
        if self._tracer_provider is None:
            self._tracer_provider = build_tracer_provider(
                resource_attributes={"jitwatch.rank": self.identity.rank, "process.pid": self.identity.pid}
            )
        elif self._tracer_provider is False:
            self._tracer_provider = None
        self._emit(
            EventKind.WORKER_START,
            attrs={
                "mode": self.mode.value,
                "triton_version": self.support.version,
                "hooks": self._hooks.installed_slots(),
                "degraded": self.support.reason,
                # Advertised so the sidecar judges staleness only for workers that heartbeat.
                "heartbeat_s": self.settings.heartbeat_seconds if self.settings.heartbeat_seconds > 0 else None,
                **self.identity.attrs(),
            },
        )
        atexit.register(self.flush)
        return self

    def uninstall(self) -> None:
        """Restore the previous Triton hooks and flush the journal."""
        self._hooks.uninstall()
        atexit.unregister(self.flush)
        if self.writer is not None:
            self.writer.close()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every event so far is in the journal (``False`` on timeout)."""
        return self.writer.flush(timeout) if self.writer is not None else True

    @property
    def journal_dir(self) -> Path:
        return self.settings.journal_dir

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

        Emits the ``jitwatch.warmup`` OpenTelemetry span (see :mod:`jitwatch.tracing`). If the
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
        ``request_id``.
        """
        return _RequestMarker(self, name)

    # ------------------------------------------------------------------ hook sink
    def _identity_fields(self) -> dict[str, Any]:
        return {"rank": self.identity.rank, "pid": self.identity.pid, "host": self.identity.host}

    def _emit(self, kind: EventKind, **fields: Any) -> None:
        if self.writer is None:
            return
        fields.setdefault("phase", self.phase)
        # Every event carries the worker's TP/PP/DP ranks and labels, not only worker_start.
        fields["attrs"] = {**self.identity.attrs(), **(fields.get("attrs") or {})}
        ev = Event.now(kind, **self._identity_fields(), **fields)
        self.writer.submit(ev)

    def on_pre_compile(self, kwargs: dict[str, Any]) -> None:
        """``jit_cache_hook``: remember when (and in which phase/request) a compile started."""
        fn = kwargs.get("fn")
        kernel, module = _fn_names(fn)
        key = _hook_key(kwargs)
        jit_function = getattr(fn, "jit_function", None)
        pending = _Pending(
            start_wall=time.time(),
            start_perf=time.perf_counter(),
            phase=self.phase,
            kernel=kernel,
            module=module,
            key=key or "",
            kwargs=kwargs,
            request_id=_current_request.get(),
        )
        with self._lock:
            self._pending[(id(jit_function), key or "")] = pending

    def on_compile_skipped(self, kwargs: dict[str, Any]) -> None:
        """A hook chained below jitwatch's ``jit_cache_hook`` raised or returned truthy: no compile."""
        key = _hook_key(kwargs)
        jit_function = getattr(kwargs.get("fn"), "jit_function", None)
        with self._lock:
            self._pending.pop((id(jit_function), key or ""), None)

    def on_compile_listener(self, kwargs: dict[str, Any]) -> None:
        src = kwargs.get("src")
        fn = getattr(src, "fn", None)
        stages = _stage_seconds(kwargs.get("times"))
        cache_hit = kwargs.get("cache_hit")
        metadata = kwargs.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        match: _Pending | None = None
        with self._lock:
            candidates = (
                [p for (fid, _), p in self._pending.items() if fid == id(fn) and p.stages is None]
                if fn is not None
                else []
            )
            # Several compiles of one kernel can be in flight (async compile mode, vLLM's parallel
            # warmup) and finish in any order: match on what the listener's ``src`` carries.
            sig = getattr(src, "signature", None)
            consts = getattr(src, "constants", None)
            attrs = getattr(src, "attrs", None)

            def same(p: _Pending) -> bool | None:
                info = _compile_info(p.kwargs)
                if "signature" not in info:
                    return None  # malformed hook kwargs: cannot tell
                if info.get("signature") != sig or info.get("constants") != consts:
                    return False
                configs = info.get("configs")
                if attrs is not None and isinstance(configs, (list, tuple)) and configs and configs[0] != attrs:
                    return False
                return all(
                    info.get(opt) == metadata.get(opt)
                    for opt in ("num_warps", "num_stages", "num_ctas")
                    if opt in info and opt in metadata
                )

            verdicts = [(same(p), p) for p in candidates]
            match = next((p for v, p in verdicts if v is True), None) or next(
                (p for v, p in verdicts if v is None), None
            )
            if match is not None:
                match.stages = stages
                match.cache_hit = None if cache_hit is None else bool(cache_hit)
        if match is not None:
            return
        # A compile that did not come through JITFunction (Inductor, triton.compile, …), or a Triton
        # without the JIT hooks (degraded mode).
        name = metadata.get("name") or getattr(src, "name", None) or "<unknown>"
        duration = sum(stages.values())
        self._record_compile(
            kernel=str(name),
            module=None,
            key=redact(str(metadata["hash"])) if metadata.get("hash") is not None else None,
            phase=self.phase,
            start_wall=time.time() - duration,
            duration=duration,
            stages=stages,
            cache_hit=None if cache_hit is None else bool(cache_hit),
            extra={"source": "compilation_listener"},
            request_id=_current_request.get(),
        )

    def on_post_compile(self, kwargs: dict[str, Any]) -> None:
        """``jit_post_compile_hook``: record the compile (raises ``ServingCompileError`` in error mode)."""
        fn = kwargs.get("fn")
        key = _hook_key(kwargs)
        jit_function = getattr(fn, "jit_function", None)
        with self._lock:
            pending = self._pending.pop((id(jit_function), key or ""), None)
        end_perf = time.perf_counter()
        if pending is None:  # pre-hook missed (installed mid-compile, or another hook swallowed it)
            kernel, module = _fn_names(fn)
            pending = _Pending(
                start_wall=time.time(),
                start_perf=end_perf,
                phase=self.phase,
                kernel=kernel,
                module=module,
                key=key or "",
                kwargs=kwargs,
                request_id=_current_request.get(),
            )
        compile_info = _compile_info(kwargs)
        arg_names = getattr(jit_function, "arg_names", None)
        if not isinstance(arg_names, list):
            arg_names = None
        signature = compile_info.get("signature")
        warm = kwargs.get("is_manual_warmup", compile_info.get("is_warmup"))
        extra: dict[str, Any] = {
            "signature": {str(k): _jsonable(v) for k, v in signature.items()} if isinstance(signature, dict) else None,
            "constexprs": _name_constexprs(compile_info.get("constants"), arg_names),
            "options": {
                k: _jsonable(compile_info.get(k))
                for k in ("num_warps", "num_ctas", "num_stages", "enable_fp_fusion", "launch_cooperative_grid")
                if k in compile_info
            },
            "is_warmup_call": None if warm is None else bool(warm),
            # Triton's own ``repr`` kwarg is not kept: in 3.6-3.9 it zips parameters with the
            # characters of the (string) key and reads "x_ptr: (" — signature/constexprs say it right.
        }
        spec = compile_info.get("specialization_data")
        if isinstance(spec, str):
            # Redacted once, by the journal in the writer thread (it redacts every stored attr),
            # not here on the compiling thread.
            extra["specialization_data"] = spec
        try:  # JITFunction.cache_key: hash of the kernel's source and dependencies, computed by
            # Triton for this very compile (so cached); manifests use it to refuse stale replays.
            source_hash = getattr(jit_function, "cache_key", None)
        except Exception:  # noqa: BLE001
            source_hash = None
        if isinstance(source_hash, str):
            extra["source_hash"] = source_hash
        self._record_compile(
            kernel=pending.kernel,
            module=pending.module,
            key=key,
            phase=pending.phase,
            start_wall=pending.start_wall,
            duration=end_perf - pending.start_perf,
            stages=pending.stages or {},
            cache_hit=pending.cache_hit,
            extra=extra,
            request_id=pending.request_id,
        )

    def _record_compile(
        self,
        *,
        kernel: str,
        module: str | None,
        key: str | None,
        phase: Phase,
        start_wall: float,
        duration: float,
        stages: dict[str, float],
        cache_hit: bool | None,
        extra: dict[str, Any],
        request_id: int | None,
    ) -> None:
        with self._lock:
            self.compiles_by_phase[phase] += 1
            self.compile_seconds_by_phase[phase] += duration
        attrs = {"module": module, "stages": stages, **extra, **self.identity.attrs()}
        if request_id is not None:
            attrs["request_id"] = request_id
            name = self._request_names.get(request_id)
            if name:
                attrs["request"] = name  # e.g. the vLLM request ids of the engine step
        self._emit(
            EventKind.COMPILE,
            phase=phase,
            kernel=kernel,
            key=key,
            start_ts=start_wall,
            duration_s=duration,
            cache_hit=cache_hit,
            attrs={k: v for k, v in attrs.items() if v is not None},
        )
        if phase is Phase.SERVING:
            self._serving_compile(kernel, key or "")

    def _serving_compile(self, kernel: str, key: str) -> None:
        if self.mode is Mode.ERROR:
            raise ServingCompileError(
                f"jitwatch: Triton compiled kernel {kernel!r} during serving (key {key}); "
                "warmup should cover this specialization (JITWATCH_MODE=error)"
            )
        with self._lock:
            first = (kernel, key) not in self._warned
            self._warned[(kernel, key)] = None
            self._warned.move_to_end((kernel, key))
            if len(self._warned) > _WARNED_MAX:
                self._warned.popitem(last=False)
        if first:
            log.warning(
                "jitwatch: post-warmup compile of Triton kernel %r on rank %d, key %s; "
                "warmup should cover this specialization",
                kernel,
                self.identity.rank,
                key,
            )

    def on_autotune(self, kwargs: dict[str, Any]) -> None:
        """One ``autotune`` event per benchmark sweep (an autotune cache miss).

        Triton 3.8+: called as ``knobs.autotuning.listener`` by ``Autotuner.run`` with ``fn`` (the
        ``JITFunction``), ``key`` (tuple of key-argument values and dtypes), ``best_config``,
        ``configs_timings`` (``Config`` → ms list), ``duration`` (seconds, ``None`` on a cache hit)
        and ``cache_hit`` (Triton's autotune disk cache). Cache hits ran no benchmark and are not
        recorded. ``attrs.source`` is ``"autotuning_listener"``.

        Triton 3.4-3.7: called by :class:`jitwatch.hooks.HookSet`'s ``Autotuner._bench`` wrapper
        after the sweep's last config with the same keywords plus ``source="autotuner_wrap"``
        (``duration`` then runs from ``prune_configs`` to the end of the last ``_bench``).
        """
        fn = kwargs.get("fn")
        if kwargs.get("cache_hit"):
            return  # served from Triton's autotune disk cache: no benchmark ran
        kernel, module = _fn_names(fn)
        timings = kwargs.get("configs_timings")
        duration = kwargs.get("duration")
        best = kwargs.get("best_config")
        source = kwargs.get("source")
        attrs: dict[str, Any] = {
            "source": source if source == "autotuner_wrap" else "autotuning_listener",
            "configs": len(timings) if isinstance(timings, dict) else None,
            "best_config": redact(str(best)) if best is not None else None,
            "module": module,
            "request_id": _current_request.get(),
            **self.identity.attrs(),
        }
        key = kwargs.get("key")
        self._emit(
            EventKind.AUTOTUNE,
            kernel=kernel,
            key=redact(str(key)) if key is not None else None,
            duration_s=float(duration) if isinstance(duration, (int, float)) else None,
            attrs={k: v for k, v in attrs.items() if v is not None},
        )

    def on_hook_error(self, hook: str, exc: BaseException) -> None:
        self.hook_errors += 1
        if self.hook_errors <= 10 or self.hook_errors % 1000 == 0:
            log.error("jitwatch: error inside %s (count %d): %s: %s", hook, self.hook_errors, type(exc).__name__, exc)
        try:
            self._emit(EventKind.HOOK_ERROR, attrs={"hook": hook, "error": redact(f"{type(exc).__name__}: {exc}")})
        except Exception:  # noqa: BLE001
            pass


class _RequestMarker(ContextDecorator):
    def __init__(self, monitor: Monitor, name: str | None) -> None:
        self.monitor = monitor
        self.name = name
        self._state = threading.local()

    def __enter__(self) -> _RequestMarker:
        mon = self.monitor
        rid = next(mon._request_ids)
        timed = False
        with mon._lock:
            mon.requests_seen += 1
            if mon.phase is Phase.SERVING and not mon.first_request_done:
                mon.first_request_done = True
                timed = True
        stack = getattr(self._state, "stack", None)
        if stack is None:
            stack = self._state.stack = []
        stack.append((rid, timed, time.time(), time.perf_counter(), _current_request.set(rid)))
        if self.name:
            mon._request_names[rid] = self.name
        return self

    def __exit__(self, *exc: object) -> None:
        rid, timed, start_wall, start_perf, token = self._state.stack.pop()
        _current_request.reset(token)
        self.monitor._request_names.pop(rid, None)
        if timed:
            self.monitor._emit(
                EventKind.FIRST_REQUEST,
                start_ts=start_wall,
                duration_s=time.perf_counter() - start_perf,
                attrs={"request_id": rid, **({"request": self.name} if self.name else {})},
            )


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
    """Install the process-wide :class:`Monitor` (idempotent: returns the existing one).

    Args:
        mode: ``off``/``warn``/``error``; default ``JITWATCH_MODE`` (``warn``).
        rank: global rank; default ``JITWATCH_RANK``, ``RANK``, ``LOCAL_RANK`` or 0.
        journal_dir: default ``JITWATCH_DIR``.

    Raises:
        jitwatch.config.ConfigError: a ``JITWATCH_*`` variable has an unusable value.
    """
    global _monitor
    with _monitor_lock:
        if _monitor is not None:
            return _monitor
        settings = Settings.from_env()
        if journal_dir is not None:
            from dataclasses import replace

            settings = replace(settings, journal_dir=Path(journal_dir))
        if identity is None:
            identity = WorkerIdentity.from_env(rank=rank)
        _monitor = Monitor(
            settings, mode=mode, identity=identity, tracer_provider=tracer_provider, span_attributes=span_attributes
        ).install()
        return _monitor


def get_monitor() -> Monitor | None:
    """The process-wide monitor, if :func:`install` was called."""
    return _monitor


def uninstall() -> None:
    """Uninstall the process-wide monitor (restores previous Triton hooks)."""
    global _monitor
    with _monitor_lock:
        if _monitor is not None:
            _monitor.uninstall()
            _monitor = None
