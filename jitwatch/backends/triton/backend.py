"""The Triton backend: Triton's compile callbacks → backend-neutral captures.

:class:`~jitwatch.backends.triton.hooks.HookSet` occupies Triton's hook slots (chained with what
was there) and calls this adapter; the adapter decodes Triton's payloads into
:class:`~jitwatch.backends.base.Capture` objects for the core. Mechanisms (Triton ≥ 3.4):

* ``knobs.runtime.jit_cache_hook`` → :meth:`TritonBackend.on_pre_compile` → ``sink.begin``;
* ``knobs.compilation.listener`` → per-stage times (µs) and the disk-cache hit, matched to the
  compile in flight (several compiles of one kernel can be in flight in asynchronous compile
  mode), or a *listener-only* compile (Inductor, direct ``triton.compile``, degraded mode);
* ``knobs.runtime.jit_post_compile_hook`` → :meth:`TritonBackend.on_post_compile` → ``sink.finish``
  (raises :class:`~jitwatch.errors.ServingCompileError` in error mode during serving);
* ``knobs.autotuning.listener`` (3.8+) or the ``Autotuner`` wrappers (3.4-3.7) → an ``autotune``
  capture per benchmark sweep.

On the compiling thread the adapter reads only what the hooks hand it — the kernel's ``name``
and the in-memory cache key (a ``str`` in Triton 3.5+) — and defers everything else (signature,
constexpr names, options, ``specialization_data``, the source hash) to :meth:`Capture.detail`,
which the core evaluates on the journal writer's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from jitwatch.backends.base import BackendStatus, Capture, CompileKind, LibraryBackend
from jitwatch.backends.explain import Reason, Seen
from jitwatch.backends.triton import explain as _explain
from jitwatch.backends.triton.hooks import HookSet, TritonSupport

OPTION_NAMES = ("num_warps", "num_ctas", "num_stages", "enable_fp_fusion", "launch_cooperative_grid")
"""Compile options copied into a compile event's ``attrs.options``."""


def jsonable(value: Any) -> Any:
    """JSON-able form of a Triton value: ``tl.constexpr`` unwrapped, tuples as lists, else ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    inner = getattr(value, "value", None)  # tl.constexpr
    if inner is not None and type(value).__name__ == "constexpr":
        return jsonable(inner)
    return str(value)


def name_constexprs(constants: Any, arg_names: list[str] | None) -> dict[str, Any]:
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
        out[name] = jsonable(value)
    return out


def _compile_info(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``compile`` dict of a JIT hook call, or ``{}`` when missing or not a dict."""
    info = kwargs.get("compile")
    return info if isinstance(info, dict) else {}


def hook_key(kwargs: dict[str, Any]) -> str | None:
    """Triton's in-memory cache key as a string (``compute_cache_key`` returns one in 3.5-3.9)."""
    key = kwargs.get("key")
    if key is None:
        key = _compile_info(kwargs).get("key")
    if key is None or isinstance(key, str):
        return key
    try:
        return str(key)
    except Exception:  # noqa: BLE001 - an odd object whose __str__ raises
        return f"<{type(key).__name__}>"


def fn_names(fn: Any) -> tuple[str, str | None]:
    """(kernel, module) from ``JitFunctionInfo`` (``.name``, ``.module``) or a ``JITFunction``."""
    name = getattr(fn, "name", None)
    if not isinstance(name, str) or not name:
        inner = getattr(fn, "fn", None)
        name = getattr(inner, "__qualname__", None) or getattr(fn, "__qualname__", None)
    module = getattr(fn, "module", None)
    if not isinstance(module, str):
        module = getattr(getattr(fn, "fn", None), "__module__", None)
    return (str(name) if name else "<unknown>"), (str(module) if module else None)


def stage_seconds(times: Any) -> dict[str, float]:
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


def compile_detail(kwargs: dict[str, Any], jit_function: Any, cache_key: str | None = None) -> dict[str, Any]:
    """``attrs`` of a compile event from the post-compile hook's keywords (writer thread).

    ``signature`` (parameter → Triton type), ``constexprs`` (named), ``options``,
    ``is_warmup_call``, ``specialization_data`` (Triton's JSON, what ``JITFunction.preload``
    takes), ``source_hash`` (``JITFunction.cache_key``: a hash of the kernel's source and
    dependencies, computed by Triton for this very compile) and ``cache_key`` (the compile's
    persistent-cache hash, ``metadata["hash"]`` from ``knobs.compilation.listener``: the
    ``TRITON_CACHE_DIR`` entry is its base32, the Redis remote cache's ``{key}`` too).
    """
    info = _compile_info(kwargs)
    arg_names = getattr(jit_function, "arg_names", None)
    if not isinstance(arg_names, list):
        arg_names = None
    signature = info.get("signature")
    warm = kwargs.get("is_manual_warmup", info.get("is_warmup"))
    out: dict[str, Any] = {
        "signature": {str(k): jsonable(v) for k, v in signature.items()} if isinstance(signature, dict) else None,
        "constexprs": name_constexprs(info.get("constants"), arg_names),
        "options": {k: jsonable(info.get(k)) for k in OPTION_NAMES if k in info},
        "is_warmup_call": None if warm is None else bool(warm),
        # Triton's own ``repr`` kwarg is not kept: in 3.6-3.9 it zips parameters with the
        # characters of the (string) key and reads "x_ptr: (" — signature/constexprs say it right.
    }
    spec = info.get("specialization_data")
    if isinstance(spec, str):
        out["specialization_data"] = spec
    try:
        source_hash = getattr(jit_function, "cache_key", None)
    except Exception:  # noqa: BLE001
        source_hash = None
    if isinstance(source_hash, str):
        out["source_hash"] = source_hash
    if cache_key is not None:
        out["cache_key"] = cache_key
        cache = cache_kind()
        if cache is not None:
            out["cache"] = cache
    return out


def cache_kind() -> str | None:
    """``"remote"`` when Triton's cache manager (``knobs.cache.manager_class``,
    ``TRITON_CACHE_MANAGER``) is its ``RemoteCacheManager`` or a subclass (a compile's cache hit
    is then a remote-cache hit), ``"local"`` for the default file cache, ``None`` if unknown.
    Called on the writer thread (inside ``Capture.detail``)."""
    try:
        import triton

        manager = triton.knobs.cache.manager_class
        if manager is None:
            return "local"
        from triton.runtime.cache import RemoteCacheManager

        return "remote" if isinstance(manager, type) and issubclass(manager, RemoteCacheManager) else "local"
    except Exception:  # noqa: BLE001 - an older Triton, or a manager class that does not import
        return None


@dataclass(slots=True)
class _Pending:
    token: Any
    kernel: str
    module: str | None
    key: str | None
    kwargs: dict[str, Any]
    times: Any = None
    """``knobs.CompileTimes`` from the compilation listener, decoded on the writer thread."""
    seen: bool = False
    """The compilation listener has matched this compile."""
    cache_hit: bool | None = None
    cache_key: str | None = None


class TritonBackend(LibraryBackend):
    """jitwatch's backend for Triton's ``@triton.jit`` kernels (Triton ≥ 3.4; below, degraded).

    See the module docstring for the mechanisms; ``docs/triton-support.md`` for versions.
    """

    name = "triton"
    label = "Triton kernel"
    module = "triton"
    distributions = ("triton", "pytorch-triton", "pytorch-triton-rocm")

    def __init__(self) -> None:
        super().__init__()
        self._hooks: HookSet | None = None
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, str], _Pending] = {}

    @property
    def hooks(self) -> HookSet | None:
        """The :class:`HookSet` in Triton's slots, once the backend is active."""
        return self._hooks

    @property
    def support(self) -> TritonSupport | None:
        """What the installed Triton offers (probed when the hooks went in)."""
        return self._hooks.support if self._hooks is not None else None

    def pending(self) -> int:
        """Compiles whose ``jit_cache_hook`` fired and whose post-compile hook has not yet."""
        with self._lock:
            return len(self._pending)

    def explain(self, new: Seen, baseline: Sequence[Seen]) -> Reason | None:
        """Why a serving compile happened: :func:`jitwatch.backends.triton.explain.explain`."""
        return _explain.explain(new, baseline)

    def hook_in(self, module: ModuleType) -> BackendStatus:
        hooks = self._hooks = HookSet(self)
        support = hooks.install()
        if support.version is None:
            return BackendStatus(self.name, "failed", degraded=support.reason)
        return BackendStatus(self.name, "active", support.version, tuple(hooks.installed_slots()), support.reason)

    def unhook(self) -> None:
        if self._hooks is not None:
            self._hooks.uninstall()
        with self._lock:
            self._pending.clear()

    # ------------------------------------------------------------------ HookSink (called by HookSet)
    def on_hook_error(self, hook: str, exc: BaseException) -> None:
        self.report_error(hook, exc)

    def on_pre_compile(self, kwargs: dict[str, Any]) -> None:
        """``jit_cache_hook``: a compile starts (phase and request are taken now, by the core)."""
        fn = kwargs.get("fn")
        name = getattr(fn, "name", None)
        module = getattr(fn, "module", None)
        if not isinstance(name, str) or not isinstance(module, str):
            name, module = fn_names(fn)
        key = hook_key(kwargs)
        sink = self.sink
        if sink is None:
            return
        token = sink.begin(self.name, name)
        pending = _Pending(token, name, module, key, kwargs)
        ident = (id(getattr(fn, "jit_function", None)), key or "")
        with self._lock:
            replaced = self._pending.get(ident)
            self._pending[ident] = pending
        if replaced is not None:
            sink.cancel(replaced.token)

    def on_compile_skipped(self, kwargs: dict[str, Any]) -> None:
        """A hook chained below jitwatch's ``jit_cache_hook`` raised or returned truthy: no compile."""
        ident = (id(getattr(kwargs.get("fn"), "jit_function", None)), hook_key(kwargs) or "")
        with self._lock:
            pending = self._pending.pop(ident, None)
        if pending is not None and self.sink is not None:
            self.sink.cancel(pending.token)

    def on_compile_listener(self, kwargs: dict[str, Any]) -> None:
        """``compilation.listener``: stage times and disk-cache hit for the matching compile in
        flight, or a listener-only compile of its own."""
        src = kwargs.get("src")
        fn = getattr(src, "fn", None)
        times = kwargs.get("times")
        cache_hit = kwargs.get("cache_hit")
        metadata = kwargs.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        match: _Pending | None = None
        with self._lock:
            if fn is not None:
                match = self._match(fn, src, metadata)
            if match is not None:
                match.times = times  # decoded on the writer thread (Capture.detail)
                match.seen = True
                match.cache_hit = None if cache_hit is None else bool(cache_hit)
                cache_key = metadata.get("hash")
                match.cache_key = cache_key if isinstance(cache_key, str) else None
        if match is not None or self.sink is None:
            return
        stages = stage_seconds(times)
        # A compile that did not come through JITFunction (Inductor, triton.compile, …), or a Triton
        # without the JIT hooks (degraded mode).
        name = metadata.get("name") or getattr(src, "name", None) or "<unknown>"
        duration = sum(stages.values())
        self.sink.record(
            Capture(
                backend=self.name,
                name=str(name),
                key=str(metadata["hash"]) if metadata.get("hash") is not None else None,
                cache_hit=None if cache_hit is None else bool(cache_hit),
                stages=stages,
                detail={"source": "compilation_listener"},
            ),
            start_ts=time.time() - duration,
            duration_s=duration,
        )

    def _match(self, fn: Any, src: Any, metadata: dict[str, Any]) -> _Pending | None:
        """The compile in flight that ``src`` belongs to (caller holds the lock). Several compiles
        of one kernel can be in flight (async compile mode, vLLM's parallel warmup) and finish in
        any order: match on the signature, constants, attrs and options ``src`` carries."""
        sig = getattr(src, "signature", None)
        consts = getattr(src, "constants", None)
        attrs = getattr(src, "attrs", None)
        unsure: _Pending | None = None
        for (fid, _), p in self._pending.items():
            if fid != id(fn) or p.seen:
                continue
            info = _compile_info(p.kwargs)
            if "signature" not in info:
                unsure = unsure or p  # malformed hook kwargs: cannot tell
                continue
            if info.get("signature") != sig or info.get("constants") != consts:
                continue
            configs = info.get("configs")
            if attrs is not None and isinstance(configs, (list, tuple)) and configs and configs[0] != attrs:
                continue
            if all(
                info.get(opt) == metadata.get(opt)
                for opt in ("num_warps", "num_stages", "num_ctas")
                if opt in info and opt in metadata
            ):
                return p
        return unsure

    def on_post_compile(self, kwargs: dict[str, Any]) -> None:
        """``jit_post_compile_hook``: the compile ended (raises ``ServingCompileError`` in error mode)."""
        sink = self.sink
        if sink is None:
            return
        fn = kwargs.get("fn")
        key = hook_key(kwargs)
        jit_function = getattr(fn, "jit_function", None)
        with self._lock:
            pending = self._pending.pop((id(jit_function), key or ""), None)
        if pending is None:  # pre-hook missed (installed mid-compile, or another hook swallowed it)
            kernel, module = fn_names(fn)
            pending = _Pending(sink.begin(self.name, kernel), kernel, module, key, kwargs)
        times = pending.times
        sink.finish(
            pending.token,
            Capture(
                backend=self.name,
                name=pending.kernel,
                key=key,
                cache_hit=pending.cache_hit,
                module=pending.module,
                detail=lambda: {
                    **compile_detail(kwargs, jit_function, pending.cache_key),
                    "stages": stage_seconds(times),
                },
            ),
        )

    def on_autotune(self, kwargs: dict[str, Any]) -> None:
        """One ``autotune`` capture per benchmark sweep (an autotune cache miss).

        Triton 3.8+: called as ``knobs.autotuning.listener`` by ``Autotuner.run`` with ``fn`` (the
        ``JITFunction``), ``key`` (tuple of key-argument values and dtypes), ``best_config``,
        ``configs_timings`` (``Config`` → ms list), ``duration`` (seconds, ``None`` on a cache hit)
        and ``cache_hit`` (Triton's autotune disk cache). Cache hits ran no benchmark and are not
        recorded. ``attrs.source`` is ``"autotuning_listener"``.

        Triton 3.4-3.7: called by :class:`HookSet`'s ``Autotuner._bench`` wrapper after the
        sweep's last config with the same keywords plus ``source="autotuner_wrap"`` (``duration``
        then runs from ``prune_configs`` to the end of the last ``_bench``).
        """
        if kwargs.get("cache_hit") or self.sink is None:
            return  # served from Triton's autotune disk cache: no benchmark ran
        kernel, module = fn_names(kwargs.get("fn"))
        timings = kwargs.get("configs_timings")
        duration = kwargs.get("duration")
        seconds = float(duration) if isinstance(duration, (int, float)) else 0.0
        best = kwargs.get("best_config")
        source = "autotuner_wrap" if kwargs.get("source") == "autotuner_wrap" else "autotuning_listener"
        key = kwargs.get("key")
        self.sink.record(
            Capture(
                backend=self.name,
                name=kernel,
                key=str(key) if key is not None else None,
                kind=CompileKind.AUTOTUNE,
                module=module,
                detail={
                    "source": source,
                    "configs": len(timings) if isinstance(timings, dict) else None,
                    "best_config": str(best) if best is not None else None,
                },
            ),
            start_ts=time.time() - seconds,
            duration_s=seconds,
        )


__all__ = ["TritonBackend", "compile_detail", "fn_names", "hook_key", "jsonable", "name_constexprs", "stage_seconds"]
