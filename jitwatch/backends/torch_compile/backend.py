"""The torch.compile backend: Dynamo compiles and recompiles (with their guard-failure reasons),
lazy backward compiles and CUDA-graph recordings → backend-neutral captures.

Mechanisms (torch 2.11-2.13; each looked up at install time, a missing one degrades with one line):

* ``torch._dynamo.callback.callback_handler`` start/end callbacks (public since torch 2.6):
  ``CallbackArgs(callback_trigger, compile_id)`` for each Dynamo compile (``DYNAMO``), each
  deferred backward compile (``LAZY_BACKWARD``) and each CUDA-graph recording
  (``CUDAGRAPH_RECORDING``, ``mode="reduce-overhead"``). The start callback calls
  ``sink.begin``; ``torch._dynamo.reset()`` clears the handler's lists, so the backend wraps the
  handler's ``clear`` to register again afterwards.
* The compile's *recompile reason*, read at the start callback from Dynamo's per-thread metrics
  context (``torch._dynamo.utils.get_metrics_context()``, where ``_compile`` puts
  ``recompile_reason`` before tracing starts): so ``warn`` and ``error`` modes know it before
  the compile runs, and ``error`` mode can refuse the compile at its start.
* Compilation metrics: ``torch._dynamo.utils.record_compilation_metrics`` ends every Dynamo
  compile by building a ``CompilationMetrics`` record (the one ``get_compilation_metrics()``
  returns) and passing it to ``torch._dynamo.utils.log_compilation_event`` when
  ``torch._dynamo.config.log_compilation_metrics`` is true (the default). The backend wraps that
  module attribute (chaining to what was there) and finishes the compile there, with the
  frame's name and file:line, Dynamo vs backend (AOTAutograd/Inductor) seconds, FX-graph and
  AOTAutograd cache hits/misses, the failure if the compile failed. Without it (option off, or
  a torch that lacks it) the compile finishes at the end callback with what the start knew.

* AOT compiles: ``torch.compile(fn, fullgraph=True).aot_compile(...)`` (and
  ``torch._dynamo.aot_compile.aot_compile_module``) trace and compile through
  ``torch._dynamo.aot_compile.aot_compile_fullgraph``, which fires no callback and hands no
  compilation-metrics record for the compile: the backend wraps that module attribute (vLLM ≥ 0.32
  compiles its model this way by default on torch ≥ 2.10, ``VLLM_USE_AOT_COMPILE``).
* AOT loads: a saved AOT artifact (``AOTCompiledFunction.save_compiled_function``) comes back
  through ``torch._dynamo.aot_compile.AOTCompiledFunction.deserialize`` (called by
  ``torch.compiler.load_compiled_function``; vLLM's warm start reads
  ``<VLLM_CACHE_ROOT>/torch_compile_cache/torch_aot_compile/<hash>/rank_<r>_<dp>/model`` this
  way): the backend wraps that classmethod and records each load as a ``compile`` with
  ``cache_hit=True``, ``attrs.trigger = "aot_load"`` (once per artifact loaded, never per call).

* Inductor's runtime autotuning: ``torch._inductor.runtime.triton_heuristics.CachingAutotuner
  .benchmark_all_configs`` (wrapped when the host's Inductor imports that module) → an
  ``autotune`` capture per sweep.

While a Dynamo compile is open, :func:`jitwatch.backends.base.enter_parent` marks the thread, so
the Triton kernels Inductor compiles meanwhile carry ``attrs.parent = "torch_compile:<id>"``.

On the compiling thread the backend reads only what the callbacks hand over plus two attribute
reads (the metrics context, the ``_compile`` frame's code object); the metrics record is turned
into detail on the journal writer's thread.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from types import CodeType, ModuleType
from typing import Any

from jitwatch.backends.base import (
    BackendStatus,
    Capture,
    CompileKind,
    LibraryBackend,
    ParentMark,
    enter_parent,
    exit_parent,
)
from jitwatch.backends.patching import CancelOnFailure, Patch, patch_attribute
from jitwatch.backends.torch_compile.reasons import fix_for, reason_class
from jitwatch.errors import ServingCompileError
from jitwatch.importhook import when_imported
from jitwatch.text import logger

AUTOTUNER_MODULE = "torch._inductor.runtime.triton_heuristics"
"""Where Inductor's ``CachingAutotuner`` lives (torch 2.11-2.13)."""

log = logger(__name__)

BACKEND = "torch_compile"

_NAMES_MAX = 1024
"""Compile ids remembered (→ function name) for naming later CUDA-graph recordings / backwards."""

_METRICS_TRIGGERS = ("DYNAMO", "LAZY_BACKWARD")
"""Triggers whose compile ends with a compilation-metrics record (a lazy backward's has
``is_forward`` false): finished there, so a compile whose end callback torch did not run (it runs
only for the last of the compiles pending at once in the process) still ends, at its own end."""

_FRAME_DEPTH = 40
"""How far up the stack the start callback looks for Dynamo's ``_compile`` frame."""


@dataclass(slots=True)
class _Open:
    """One compile between its start callback and its end (or its metrics record)."""

    token: Any
    trigger: str
    compile_id: str
    name: str
    location: str | None
    reason: str | None
    parent_prev: ParentMark | None = None
    parent_set: bool = False
    ended: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


_CLEAR_MARK = "__jitwatch_reregister__"
_clear_lock = threading.Lock()


def _reregister_after_clear(handler: Any, backend: TorchCompileBackend) -> None:
    """Make ``handler.clear`` (what ``torch._dynamo.reset()`` calls to empty the callback lists)
    register ``backend``'s callbacks again afterwards. One wrapper per handler serves every live
    backend (several monitors, install/uninstall in any order), and it wraps whatever ``clear`` is
    at that moment — the class's, or a host's own wrapper, which keeps working."""
    with _clear_lock:
        current = handler.clear
        found: set[Any] | None = getattr(current, _CLEAR_MARK, None)
        if found is None:
            live: set[Any] = set()
            wrapped = current

            def clear() -> None:
                try:
                    wrapped()  # torch's: empties the lists, *then* raises if a compile is pending
                finally:
                    for b in list(live):
                        b._register()

            setattr(clear, _CLEAR_MARK, live)
            clear.__wrapped__ = wrapped  # type: ignore[attr-defined]
            handler.clear = clear
            found = live
        found.add(backend)


def _stop_reregistering(handler: Any, backend: TorchCompileBackend) -> None:
    """Undo :func:`_reregister_after_clear` for ``backend``; the wrapper itself is removed when no
    backend needs it and it is still the outermost ``clear`` (a host that wrapped ``clear`` after
    jitwatch keeps its wrapper; jitwatch's inside it then re-registers nobody)."""
    with _clear_lock:
        current = handler.clear
        live = getattr(current, _CLEAR_MARK, None)
        if live is None:  # wrapped by someone after us: find ours inside the chain
            inner = getattr(current, "__wrapped__", None)
            while inner is not None and getattr(inner, _CLEAR_MARK, None) is None:
                inner = getattr(inner, "__wrapped__", None)
            live = getattr(inner, _CLEAR_MARK, None) if inner is not None else None
            if live is not None:
                live.discard(backend)
            return
        live.discard(backend)
        if not live:
            wrapped = current.__wrapped__
            if id(getattr(wrapped, "__self__", None)) == id(handler) and "clear" in vars(handler):
                del handler.clear  # the class's own method again
            else:
                handler.clear = wrapped


def _frame_info() -> tuple[str | None, str | None]:
    """The name and ``file:line`` of the frame Dynamo is compiling, from the ``code`` argument of
    ``torch._dynamo.convert_frame._compile`` on this thread's stack
    (``(None, None)`` when not found). For a compiled ``nn.Module`` Dynamo compiles a wrapper
    (``external_utils.wrap_inline``'s ``inner``); the module's class and ``forward`` are named then."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return None, None
    depth = 0
    while frame is not None and depth < _FRAME_DEPTH:
        code = frame.f_code
        if code.co_name == "_compile" and code.co_filename.endswith("convert_frame.py"):
            local = frame.f_locals
            target = local.get("code")
            if isinstance(target, CodeType):
                return _describe(target, local.get("closure"))
        frame = frame.f_back  # type: ignore[assignment]
        depth += 1
    return None, None


def _describe(code: CodeType, closure: Any) -> tuple[str, str]:
    name = getattr(code, "co_qualname", code.co_name)
    location = f"{code.co_filename}:{code.co_firstlineno}"
    if code.co_name == "inner" and code.co_filename.endswith("external_utils.py") and closure:
        for cell in closure:
            try:
                obj = cell.cell_contents
            except ValueError:
                continue
            owner = getattr(obj, "__self__", obj)
            forward = getattr(type(owner), "forward", None)
            fcode = getattr(forward, "__code__", None)
            if isinstance(fcode, CodeType):
                return f"{type(owner).__qualname__}.forward", f"{fcode.co_filename}:{fcode.co_firstlineno}"
            fcode = getattr(obj, "__code__", None)
            if isinstance(fcode, CodeType):
                return getattr(fcode, "co_qualname", fcode.co_name), f"{fcode.co_filename}:{fcode.co_firstlineno}"
    return name, location


def _cache_state(hits: Any, misses: Any) -> str | None:
    try:
        h, m = int(hits or 0), int(misses or 0)
    except (TypeError, ValueError):
        return None
    if h and not m:
        return "hit"
    if m and not h:
        return "miss"
    if h and m:
        return "partial"
    return None


def metrics_detail(metrics: Any) -> dict[str, Any]:
    """JSON-able fields of one ``torch._dynamo.utils.CompilationMetrics`` record (every field
    optional; torch 2.11-2.13 names): seconds as floats, cache states ``hit``/``miss``/``partial``."""
    g = getattr
    out: dict[str, Any] = {}
    name = g(metrics, "co_name", None)
    if name:
        out["frame"] = name
        filename, line = g(metrics, "co_filename", None), g(metrics, "co_firstlineno", None)
        if filename:
            out["frame_location"] = f"{filename}:{line}"
    for src, dst in (
        ("entire_frame_compile_time_s", "entire_frame_s"),
        ("backend_compile_time_s", "backend_s"),
        ("inductor_compile_time_s", "inductor_s"),
        ("code_gen_time_s", "code_gen_s"),
        ("dynamo_time_before_restart_s", "dynamo_before_restart_s"),
    ):
        value = g(metrics, src, None)
        if isinstance(value, (int, float)):
            out[dst] = float(value)
    triton_us = g(metrics, "triton_compile_time_us", None)
    if isinstance(triton_us, (int, float)):
        out["triton_compile_s"] = triton_us / 1e6
    fx = _cache_state(
        (g(metrics, "inductor_fx_local_cache_hit_count", 0) or 0)
        + (g(metrics, "inductor_fx_remote_cache_hit_count", 0) or 0),
        (g(metrics, "inductor_fx_local_cache_miss_count", 0) or 0)
        + (g(metrics, "inductor_fx_remote_cache_miss_count", 0) or 0),
    )
    if fx:
        out["fx_graph_cache"] = fx
    aot = _cache_state(
        (g(metrics, "aotautograd_local_cache_hit_count", 0) or 0)
        + (g(metrics, "aotautograd_remote_cache_hit_count", 0) or 0),
        (g(metrics, "aotautograd_local_cache_miss_count", 0) or 0)
        + (g(metrics, "aotautograd_remote_cache_miss_count", 0) or 0),
    )
    if aot:
        out["aot_autograd_cache"] = aot
    for src in ("guard_count", "graph_op_count", "graph_node_count", "cache_size", "fail_type"):
        value = g(metrics, src, None)
        if value is not None:
            out[src] = value
    fail = g(metrics, "fail_reason", None)
    if fail:
        out["fail_reason"] = str(fail)[:2000]
    restarts = g(metrics, "restart_reasons", None)
    if restarts:
        out["restart_reasons"] = sorted(str(r)[:500] for r in restarts)[:10]
    if g(metrics, "has_guarded_code", None) is False:
        out["has_guarded_code"] = False
    return out


def _stages(detail: dict[str, Any]) -> dict[str, float] | None:
    total, backend = detail.get("entire_frame_s"), detail.get("backend_s")
    if not isinstance(total, float):
        return None
    stages = {"dynamo": max(0.0, total - (backend or 0.0))}
    if isinstance(backend, float):
        stages["backend"] = backend
    if isinstance(detail.get("inductor_s"), float):
        stages["inductor"] = detail["inductor_s"]
    return stages


def _cache_hit(detail: dict[str, Any]) -> bool | None:
    """A Dynamo compile is a *load* when its backend's graph came from Inductor's FX-graph cache
    (or, for AOTAutograd, its cache) with no miss; ``False`` on a miss; ``None`` when no cache
    was consulted (e.g. the ``eager`` backend)."""
    states = {detail.get("fx_graph_cache"), detail.get("aot_autograd_cache")} - {None}
    if not states:
        return None
    return states <= {"hit"}


def _aot_target(fn: Any) -> tuple[str, str | None]:
    """The name and ``file:line`` of what ``aot_compile_fullgraph`` compiles: a bound method is
    named after its object's class (``LlamaModel.forward``), an ``nn.Module`` after its class and
    ``forward``, a function by its qualified name."""
    owner = getattr(fn, "__self__", None)
    func = getattr(fn, "__func__", None) if owner is not None else None
    if func is None and not hasattr(fn, "__code__") and callable(getattr(type(fn), "forward", None)):
        owner, func = fn, type(fn).forward  # an nn.Module
    code = getattr(func if func is not None else fn, "__code__", None)
    location = f"{code.co_filename}:{code.co_firstlineno}" if isinstance(code, CodeType) else None
    if owner is not None and func is not None:
        return f"{type(owner).__qualname__}.{getattr(func, '__name__', 'forward')}", location
    if isinstance(code, CodeType):
        return getattr(code, "co_qualname", code.co_name), location
    return type(fn).__qualname__, location


class _AotCompile:
    """Around ``torch._dynamo.aot_compile.aot_compile_fullgraph(fn, example_inputs, ...)``: the
    whole AOT compile (Dynamo's trace, the backend's compile, the guards) as one ``compile``,
    ``attrs.trigger = "aot_compile"``. Error mode refuses a serving-phase one at its start, as it
    does a Dynamo compile; one that raises is recorded with ``fail_type`` (a Dynamo compile that
    raises is recorded too). Compiles of other backends inside carry ``torch_compile:aot`` as parent."""

    def __init__(self, backend: TorchCompileBackend) -> None:
        self.backend = backend

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sink = self.backend.sink
        if sink is None:
            return None
        fn = args[0] if args else kwargs.get("model")
        name, location = _aot_target(fn)
        detail: dict[str, Any] = {"trigger": "aot_compile", "reason": None, "reason_class": reason_class(None)}
        if location:
            detail["location"] = location
        token = sink.begin(self.backend.name, name)
        try:
            sink.admit(token, Capture(self.backend.name, name, detail=dict(detail)))
        except BaseException:
            sink.cancel(token)  # admit recorded it (error mode's deliberate raise); nothing in flight
            raise
        previous = enter_parent(f"{self.backend.name}:aot")
        return token, name, detail, previous, sink

    def after(self, state: Any, result: Any) -> None:
        token, name, detail, previous, sink = state
        exit_parent(previous)
        sink.finish(token, Capture(self.backend.name, name, detail=detail))

    def failed(self, state: Any, exc: BaseException) -> None:
        token, name, detail, previous, sink = state
        exit_parent(previous)
        detail = {**detail, "fail_type": type(exc).__name__, "fail_reason": str(exc)[:2000]}
        try:
            sink.finish(token, Capture(self.backend.name, name, detail=detail))
        except ServingCompileError:
            pass  # the host gets the compile's own exception


class _AotLoad(CancelOnFailure):
    """Around ``AOTCompiledFunction.deserialize(cls, data, f_globals, external_closure_data)``: one
    saved AOT artifact loaded (unpickled, its compiled graph rebuilt from the bytes; no trace, no
    backend compile) as one ``compile`` with ``cache_hit=True`` and ``attrs.trigger =
    "aot_load"``, the way the other backends record a load from their persistent cache. Named as
    the AOT compile that saved it names it (the traced code's ``co_qualname``,
    ``LlamaModel.forward``); ``key`` is ``sha256:`` and the first 16 hex digits of the artifact's
    bytes (the same artifact, the same key, wherever its cache directory lies). A load that raises
    is not recorded (its exception reaches the host, as a failed FlashInfer load's does); in
    ``error`` mode a serving-phase load raises after it is recorded, as every backend's load does."""

    def __init__(self, backend: TorchCompileBackend) -> None:
        self.backend = backend

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sink = self.backend.sink
        if sink is None:
            return None
        data = args[1] if len(args) > 1 else kwargs.get("data")
        return sink.begin(self.backend.name, "aot_load"), data, sink

    def after(self, state: Any, result: Any) -> None:
        token, data, sink = state
        code = getattr(getattr(result, "_artifacts", None), "original_code", None)
        name, location = "aot_load", None
        if isinstance(code, CodeType):
            name = getattr(code, "co_qualname", code.co_name)
            location = f"{code.co_filename}:{code.co_firstlineno}"
        size = key = None
        if isinstance(data, (bytes, bytearray, memoryview)):
            view = memoryview(data)
            size = view.nbytes  # bytes, whatever the view's format (len() counts its items)
            digest = hashlib.sha256(view if view.c_contiguous else view.tobytes())
            key = f"sha256:{digest.hexdigest()[:16]}"
        detail: dict[str, Any] = {"trigger": "aot_load", "entry": "AOTCompiledFunction.deserialize", "bytes": size}
        if location:
            detail["location"] = location
        sink.finish(token, Capture(self.backend.name, name, key=key, cache_hit=True, detail=detail))


class _AutotuneSweep(CancelOnFailure):
    """Around ``CachingAutotuner.benchmark_all_configs(self, *args, **kwargs)`` (Inductor's runtime
    autotuning): one ``autotune`` capture per sweep, named after the kernel."""

    def __init__(self, backend: TorchCompileBackend) -> None:
        self.backend = backend

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sink = self.backend.sink
        if sink is None or not args:
            return None
        autotuner = args[0]
        meta = getattr(autotuner, "inductor_meta", None) or {}
        name = str(meta.get("kernel_name") or getattr(getattr(autotuner, "fn", None), "__name__", "kernel"))
        return (sink.begin(self.backend.name, name), name, autotuner, sink)

    def after(self, state: Any, result: Any) -> None:
        token, name, autotuner, sink = state
        detail = {
            "trigger": "inductor_autotune",
            "configs": len(getattr(autotuner, "launchers", ()) or ()),
            "compile_id": str(getattr(autotuner, "compile_id", None)),
        }
        sink.finish(token, Capture(self.backend.name, name, kind=CompileKind.AUTOTUNE, detail=detail))


class TorchCompileBackend(LibraryBackend):
    """Dynamo compiles, recompiles (with Dynamo's guard-failure reason), lazy backward compiles
    and CUDA-graph recordings of ``torch.compile`` (torch ≥ 2.6 for the callbacks; tested on
    2.11 and 2.13). See the module docstring for the mechanisms; ``docs/backends/torch-compile.md``
    for what is seen and what is not."""

    name = BACKEND
    label = "torch.compile graph"
    module = "torch._dynamo"
    distributions = ("torch",)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._open: dict[tuple[int, str, str], _Open] = {}
        self._names: OrderedDict[str, str] = OrderedDict()
        self._ended_early: dict[int, tuple[str, str]] = {}
        """Per thread, the (trigger, compile id) of the last compile finished before its metrics
        record: refused by error mode at its start (recorded then), or finished at its end callback
        with no record expected. Its record, should it come (it follows on the same thread, with no
        other compile's start in between), is not recorded a second time; a start clears it."""
        self._handler: Any = None
        self._utils: Any = None
        self._config: Any = None
        self._orig_log: Any = None
        self._wrapped_log: Any = None
        self._reregistering = False  # listed by the handler's clear wrapper (_reregister_after_clear)
        self._metrics_context: Any = None
        self._degraded: list[str] = []
        self._autotune_patch: Patch | None = None
        self._aot_patch: Patch | None = None
        self._aot_load_patch: Patch | None = None
        self._cancel_autotuner_wait: Any = None

    # ------------------------------------------------------------------ install
    def hook_in(self, module: ModuleType) -> BackendStatus:
        from torch._dynamo import callback as cb  # the host imported torch._dynamo already

        handler = cb.callback_handler
        hooks = ["torch._dynamo.callback.callback_handler"]
        self._degraded = []
        self._handler = handler
        self._register()
        _reregister_after_clear(handler, self)  # survive torch._dynamo.reset(), which clears the handler
        self._reregistering = True
        dynamo_utils: Any = None
        dynamo_config: Any = None
        try:
            from torch._dynamo import config as dynamo_config
            from torch._dynamo import utils as dynamo_utils
        except Exception as exc:  # noqa: BLE001
            self._degraded.append(f"no compilation metrics ({type(exc).__name__}: {exc})")
        if dynamo_utils is not None:
            self._metrics_context = getattr(dynamo_utils, "get_metrics_context", None)
            if self._metrics_context is None:
                self._degraded.append("no torch._dynamo.utils.get_metrics_context: reasons only after the compile")
            original_log = getattr(dynamo_utils, "log_compilation_event", None)
            if callable(original_log) and hasattr(dynamo_utils, "record_compilation_metrics"):
                backend = self

                def log_compilation_event(metrics: Any) -> Any:
                    if backend._wrapped_log is log_compilation_event:  # else unhooked: a pass-through
                        try:
                            backend._on_metrics(metrics)
                        except Exception as exc:  # noqa: BLE001 - the chained logger always runs
                            backend.report_error("torch._dynamo.utils.log_compilation_event", exc)
                    return original_log(metrics)

                log_compilation_event.__wrapped__ = original_log  # type: ignore[attr-defined]  # see _metrics_pending
                self._utils, self._config = dynamo_utils, dynamo_config
                self._orig_log, self._wrapped_log = original_log, log_compilation_event
                dynamo_utils.log_compilation_event = log_compilation_event
                hooks.append("torch._dynamo.utils.log_compilation_event")
            else:
                self._degraded.append("no torch._dynamo.utils.log_compilation_event: no compile breakdown")
        try:
            from torch._dynamo import aot_compile as aot_module

            self._aot_patch = patch_attribute(
                aot_module,
                "aot_compile_fullgraph",
                _AotCompile(self),
                where="torch._dynamo.aot_compile.aot_compile_fullgraph",
                on_error=self.report_error,
            )
            hooks.append("torch._dynamo.aot_compile.aot_compile_fullgraph")
        except Exception as exc:  # noqa: BLE001 - a torch without AOT compile
            self._degraded.append(f"no AOT compiles ({type(exc).__name__}: {exc})")
        try:
            from torch._dynamo.aot_compile import AOTCompiledFunction

            self._aot_load_patch = patch_attribute(
                AOTCompiledFunction,
                "deserialize",
                _AotLoad(self),
                where="torch._dynamo.aot_compile.AOTCompiledFunction.deserialize",
                on_error=self.report_error,
            )
            hooks.append("torch._dynamo.aot_compile.AOTCompiledFunction.deserialize")
        except Exception as exc:  # noqa: BLE001 - a torch without AOT artifacts
            self._degraded.append(f"no AOT loads ({type(exc).__name__}: {exc})")
        self._cancel_autotuner_wait = when_imported(
            AUTOTUNER_MODULE, self._hook_autotuner, on_error=lambda name, exc: self.report_error(name, exc)
        )
        hooks.append(f"{AUTOTUNER_MODULE}.CachingAutotuner.benchmark_all_configs (when Inductor loads it)")
        degraded = "; ".join(self._degraded) or None
        if degraded:
            degraded = f"torch_compile backend degraded on torch {self.version()}: {degraded}"
        return BackendStatus(self.name, "active", self.version(), tuple(hooks), degraded)

    def _hook_autotuner(self, module: ModuleType) -> None:
        """Wrap Inductor's ``CachingAutotuner.benchmark_all_configs``: the benchmark sweep over a
        Triton kernel's configs that Inductor runs at the kernel's first launch (runtime
        autotuning; its ``TRITON_AUTOTUNING`` callback is disabled upstream). Recorded as an
        ``autotune`` capture named after the kernel, with the Dynamo ``compile_id`` it belongs to."""
        cls = getattr(module, "CachingAutotuner", None)
        if cls is None or not callable(getattr(cls, "benchmark_all_configs", None)) or self.sink is None:
            return
        self._autotune_patch = patch_attribute(
            cls,
            "benchmark_all_configs",
            _AutotuneSweep(self),
            where="CachingAutotuner.benchmark_all_configs",
            on_error=self.report_error,
        )

    def _register(self) -> None:
        handler = self._handler
        if handler is None:
            return
        if self._on_start not in handler.start_callbacks:
            handler.register_start_callback(self._on_start)
        if self._on_end not in handler.end_callbacks:
            handler.register_end_callback(self._on_end)

    def unhook(self) -> None:
        handler = self._handler
        if handler is not None:
            if self._reregistering:
                _stop_reregistering(handler, self)
            for lst, fn in ((handler.start_callbacks, self._on_start), (handler.end_callbacks, self._on_end)):
                while fn in lst:
                    lst.remove(fn)
        if self._utils is not None and getattr(self._utils, "log_compilation_event", None) is self._wrapped_log:
            self._utils.log_compilation_event = self._orig_log
        if self._cancel_autotuner_wait is not None:
            self._cancel_autotuner_wait()
            self._cancel_autotuner_wait = None
        if self._autotune_patch is not None:
            self._autotune_patch.restore()
            self._autotune_patch = None
        if self._aot_patch is not None:
            self._aot_patch.restore()
            self._aot_patch = None
        if self._aot_load_patch is not None:
            self._aot_load_patch.restore()
            self._aot_load_patch = None
        with self._lock:
            opened = list(self._open.values())
            self._open.clear()
        for o in opened:
            if self.sink is not None:
                self.sink.cancel(o.token)
            if o.parent_set:
                exit_parent(o.parent_prev)
        self._reregistering = False
        self._handler = self._utils = self._orig_log = self._wrapped_log = None

    # ------------------------------------------------------------------ callbacks
    def _reason_now(self) -> str | None:
        get = self._metrics_context
        if get is None:
            return None
        ctx = get()
        metrics = getattr(ctx, "_metrics", None)
        reason = metrics.get("recompile_reason") if isinstance(metrics, dict) else None
        return str(reason) if reason else None

    def _on_start(self, args: Any) -> None:
        sink = self.sink
        if sink is None:
            return
        opened: _Open | None = None
        self._ended_early.pop(threading.get_ident(), None)  # its record came, or will not
        try:
            trigger = getattr(args.callback_trigger, "name", str(args.callback_trigger))
            compile_id = str(args.compile_id)
            if trigger == "TRITON_AUTOTUNING":
                return
            reason = None
            location = None
            if trigger == "DYNAMO":
                name, location = _frame_info()
                reason = self._reason_now()
                name = name or self._names.get(compile_id) or f"frame {compile_id.partition('/')[0]}"
                with self._lock:
                    self._names[compile_id] = name
                    if len(self._names) > _NAMES_MAX:
                        self._names.popitem(last=False)
            else:
                name = self._names.get(compile_id) or f"graph {compile_id}"
            token = sink.begin(self.name, name)
            opened = _Open(token, trigger, compile_id, name, location, reason)
            with self._lock:
                self._open[(threading.get_ident(), trigger, compile_id)] = opened
            if trigger == "DYNAMO":
                opened.parent_prev = enter_parent(f"{self.name}:{compile_id}")
                opened.parent_set = True
        except Exception as exc:  # noqa: BLE001 - never reaches the host
            self.report_error("torch._dynamo start callback", exc)
            return
        if opened.trigger != "CUDAGRAPH_RECORDING":
            try:
                capture = self._capture(opened, None)
            except Exception as exc:  # noqa: BLE001 - jitwatch's fault: never into the host's compile
                self.report_error("torch._dynamo start callback", exc)
                return  # still open: finished (or, if its capture fails again, cancelled) at its end
            try:
                sink.admit(opened.token, capture)
            except BaseException:
                if opened.parent_set:
                    exit_parent(opened.parent_prev)
                    opened.parent_set = False
                self._close(opened)  # the sink recorded and finished it: error mode's deliberate raise
                if opened.trigger in _METRICS_TRIGGERS and self._record_follows():  # not recorded again
                    self._ended_early[threading.get_ident()] = (opened.trigger, opened.compile_id)
                raise

    def _on_end(self, args: Any) -> None:
        try:
            trigger = getattr(args.callback_trigger, "name", str(args.callback_trigger))
            key = (threading.get_ident(), trigger, str(args.compile_id))
            with self._lock:
                opened = self._open.get(key)
            if opened is None:
                return
            if opened.parent_set:
                exit_parent(opened.parent_prev)
                opened.parent_set = False
            if trigger in _METRICS_TRIGGERS and self._metrics_pending() and self._own_record():
                opened.ended = True  # finished by the compilation-metrics record that follows
                return
            self._close(opened)
            if trigger in _METRICS_TRIGGERS and self._record_follows():  # through a chain hiding jitwatch's
                self._ended_early[threading.get_ident()] = (trigger, opened.compile_id)
            self._finish(opened, None)
        except ServingCompileError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.report_error("torch._dynamo end callback", exc)

    def _metrics_pending(self) -> bool:
        """Whether torch's compilation-metrics record will reach jitwatch's wrapper: metrics
        logging is on and the wrapper is ``log_compilation_event`` or in its chain of
        ``__wrapped__`` (a host's ``functools.wraps`` wrapper installed after jitwatch's, another
        monitor's jitwatch wrapper)."""
        if self._utils is None or not getattr(self._config, "log_compilation_metrics", False):
            return False
        current = getattr(self._utils, "log_compilation_event", None)
        for _ in range(8):
            if current is self._wrapped_log:
                return True
            current = getattr(current, "__wrapped__", None)
            if current is None:
                return False
        return False

    def _record_follows(self) -> bool:
        """Whether torch builds and logs a metrics record for the compile ending (or refused) now,
        whether or not it reaches jitwatch's wrapper."""
        return bool(getattr(self._config, "log_compilation_metrics", False)) and self._own_record()

    def _own_record(self) -> bool:
        """Whether the compile ending now gets a compilation-metrics record of its own: its metrics
        context (entered before its callbacks run) is the thread's outermost. A compile nested in
        another's metrics context (a Dynamo compile run by the backend of an AOT compile, which has
        its own) gets none: torch merges its metrics into the outer one, whose record has no
        compile id of it. Unknown (a torch without the context's level): a record is expected."""
        get = self._metrics_context
        if get is None:
            return True
        level = getattr(get(), "_level", None)
        return not isinstance(level, int) or level <= 1

    def _on_metrics(self, metrics: Any) -> None:
        try:
            if getattr(metrics, "is_runtime", False):
                return
            trigger = "LAZY_BACKWARD" if getattr(metrics, "is_forward", True) is False else "DYNAMO"
            compile_id = str(getattr(metrics, "compile_id", None))
            key = (threading.get_ident(), trigger, compile_id)
            early = self._ended_early.pop(key[0], None)
            with self._lock:
                opened = self._open.get(key)
            if opened is None:
                if early is not None and early[1] == compile_id:
                    if early[0] == trigger:
                        return  # refused at its start, or finished at its end callback
                    if early[0] == "LAZY_BACKWARD" and getattr(metrics, "is_forward", None) is None:
                        return  # a backward refused at its start: torch marks is_forward=False only after it
                self._unopened(metrics, trigger)
                return
            if opened.parent_set:  # the end callback did not run (e.g. an exception path)
                exit_parent(opened.parent_prev)
                opened.parent_set = False
            self._close(opened)
        except Exception as exc:  # noqa: BLE001
            self.report_error("torch._dynamo.utils.log_compilation_event", exc)
            return
        self._finish(opened, metrics)  # may raise ServingCompileError only in error mode

    def _unopened(self, metrics: Any, trigger: str = "DYNAMO") -> None:
        """A metrics record of a Dynamo compile that no start callback opened (compiling thread).

        * Dynamo hitting its recompile limit (``torch._dynamo.config.recompile_limit``, 8 by
          default) fires no start callback, only this record (``fail_type`` ``Unsupported``,
          ``fail_reason`` "Dynamo recompile limit exceeded"): from then on the frame runs eagerly,
          a silent performance cliff. It is recorded as a compile that fell back
          (``attrs.fallback: "eager"``), with the guard failure that triggered it.
        * A compile whose start callback did not run: torch runs the start (and end) callbacks only
          for the outermost of the compiles pending at once in the process
          (``CompilationCallbackHandler.install_callbacks`` counts them across threads), so a Dynamo
          compile on one thread while a lazy backward compile or a CUDA-graph recording runs on
          another, fires none; so does one begun before ``install()`` (a Dynamo compile nested in
          another on the same thread has no record either: its metrics merge into the outer's).
          It is recorded from the record (start, duration, reason, breakdown),
          ``attrs.start_seen: false``. The same for a lazy backward compile (its record has
          ``is_forward`` false), named after its forward's frame.

        Either is warned about, counted and alerted on in serving like any compile; error mode
        does not raise here (the compile is over, or Dynamo has already given up on the frame;
        raising would only break the call): it logs the refusal at ERROR."""
        sink = self.sink
        if sink is None or getattr(metrics, "is_runtime", False):
            return
        raw_id = getattr(metrics, "compile_id", None)
        compile_id = str(raw_id)
        reason = str(getattr(metrics, "fail_reason", "") or "")
        start = getattr(metrics, "start_time", None)
        took = getattr(metrics, "entire_frame_compile_time_s", None)
        if trigger == "LAZY_BACKWARD":
            took_us = getattr(metrics, "duration_us", None)
            took = took_us / 1e6 if isinstance(took_us, int | float) else None
            name = self._names.get(compile_id) or f"graph {compile_id}"
            if raw_id is None or took is None:
                return
            capture = self._capture(_Open(None, trigger, compile_id, name, None, None), metrics)
            assert isinstance(capture.detail, dict)
            capture.detail["start_seen"] = False
            self._record_unopened(sink, capture, start, took)
            return
        name = str(getattr(metrics, "co_name", None) or self._names.get(f"{compile_id.partition('/')[0]}/0") or "")
        name = name or f"frame {compile_id.partition('/')[0]}"
        if "recompile limit" in reason.lower():
            guard = getattr(metrics, "recompile_reason", None)
            detail: dict[str, Any] = {
                "compile_id": compile_id,
                "trigger": "dynamo",
                "fallback": "eager",
                "fail_type": str(getattr(metrics, "fail_type", "") or ""),
                "reason": f"recompile limit exceeded: the frame now runs eagerly (last guard failure: {guard})",
                "reason_class": reason_class(str(guard)) if guard else "other",
                "fixes": [
                    "find why it recompiles (the guard failure above) and warm or mark that dimension dynamic;"
                    " raising torch._dynamo.config.recompile_limit only postpones the cliff"
                ],
            }
            location = getattr(metrics, "co_filename", None)
            if location:
                detail["location"] = f"{location}:{getattr(metrics, 'co_firstlineno', '')}"  # redacted by the journal
            capture = Capture(self.name, name, key=detail["reason"], detail=detail)
        elif raw_id is not None and getattr(metrics, "co_name", None) and isinstance(took, int | float):
            opened = _Open(None, "DYNAMO", compile_id, name, None, None)
            capture = self._capture(opened, metrics)
            assert isinstance(capture.detail, dict)
            capture.detail["start_seen"] = False
        else:
            return
        self._record_unopened(sink, capture, start, took)

    @staticmethod
    def _record_unopened(sink: Any, capture: Capture, start: Any, took: Any) -> None:
        try:
            sink.record(
                capture,
                start_ts=float(start) if isinstance(start, int | float) else time.time(),
                duration_s=float(took) if isinstance(took, int | float) else 0.0,
            )
        except ServingCompileError as exc:  # error mode: nothing left to refuse
            log.error("jitwatch: error mode cannot refuse this compile, it is over: %s", exc)

    # ------------------------------------------------------------------ captures
    def _close(self, opened: _Open) -> None:
        with self._lock:
            self._open.pop((threading.get_ident(), opened.trigger, opened.compile_id), None)
            stale = [k for k, o in self._open.items() if o.ended and k[0] == threading.get_ident()]
            stale_open = [self._open.pop(k) for k in stale]
        for o in stale_open:  # ended but no metrics record came: finish with what is known
            self._finish(o, None)

    def _finish(self, opened: _Open, metrics: Any) -> None:
        if self.sink is None:
            return
        try:
            capture = self._capture(opened, metrics)
        except Exception as exc:  # noqa: BLE001
            self.report_error("torch_compile capture", exc)
            self.sink.cancel(opened.token)
            return
        self.sink.finish(opened.token, capture)

    def _capture(self, opened: _Open, metrics: Any) -> Capture:
        kind = CompileKind.GRAPH_CAPTURE if opened.trigger == "CUDAGRAPH_RECORDING" else CompileKind.COMPILE
        base: dict[str, Any] = {
            "compile_id": opened.compile_id,
            "trigger": opened.trigger.lower(),
        }
        if opened.trigger == "DYNAMO":
            base["reason"] = opened.reason
            base["reason_class"] = reason_class(opened.reason)
        if opened.location:
            base["location"] = opened.location
        stages = None
        cache_hit = None
        if metrics is not None:
            detail = metrics_detail(metrics)
            stages = _stages(detail)
            cache_hit = _cache_hit(detail)
            if opened.reason is None and getattr(metrics, "recompile_reason", None):
                opened.reason = str(metrics.recompile_reason)
                base["reason"] = opened.reason
                base["reason_class"] = reason_class(opened.reason)
            base.update(detail)
            if "location" not in base and "frame_location" in base:
                base["location"] = base["frame_location"]
        fix = fix_for(opened.reason) if opened.trigger == "DYNAMO" else None  # cached by its first line; never raises
        if fix:
            base["fixes"] = [fix]
        return Capture(
            self.name,
            opened.name,
            key=opened.reason,
            kind=kind,
            cache_hit=cache_hit,
            stages=stages,
            detail=base,
        )


__all__ = ["BACKEND", "TorchCompileBackend", "metrics_detail"]
