"""TileLang: every kernel compile and every load from its disk cache.

Mechanism (checked on tilelang 0.1.15, ``tilelang/jit/kernel.py`` and
``tilelang/cache/kernel_cache.py``): every path to a compiled kernel — ``@tilelang.jit``
(``JITImpl.__call__`` → ``JITImpl.compile`` on a miss of its per-function ``_kernel_cache``),
``tilelang.compile(...)`` and ``tilelang.cache.cached(...)`` — ends in ``KernelCache.cached``,
which keys the request (``KernelCache._generate_key``: a SHA-256 over the PrimFunc's script, target,
``out_idx``, pass configs, flags and the library's version), returns an in-memory hit as is, then
tries the disk cache (``TILELANG_CACHE_DIR``), whose hit is built with the classmethod
``JITKernel.from_database``, and otherwise compiles by constructing ``JITKernel(func, ...)``. The
same two entry points are the ones vLLM's JIT monitor wraps (``JITKernel.__init__``, skipping
``from_database=True``, and ``JITImpl.compile``).

Wrapped (with :mod:`jitwatch.backends.patching`):

* ``JITKernel.__init__`` — a real compile (lowering, device codegen, nvcc/NVRTC) unless called
  with ``from_database=True``; ``cache_hit=False``;
* ``JITKernel.from_database`` — a load from the disk cache; ``cache_hit=True``;
* ``KernelCache._generate_key`` — only to learn the library's cache key (the name of the entry's
  directory under the cache dir) for the compile or load that follows on the same thread. Missing
  in another version: records keep ``key=None`` and the status says ``degraded``.

An in-memory hit constructs nothing and is not recorded (it costs microseconds). The load's
duration covers building the kernel from the cached files (``from_database``: loading the
library, rebuilding the adapter), not the integrity check of the entry's files that
``KernelCache`` runs first.

Capture: ``name`` the PrimFunc's ``global_symbol`` (as vLLM names it), ``key`` the library's cache
key, ``detail``: ``target``, ``execution_backend``, ``out_idx``, ``spec`` (each buffer parameter's
shape and dtype), ``entry``.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

from jitwatch.backends.base import BackendStatus, Capture, LibraryBackend
from jitwatch.backends.patching import CancelOnFailure, Patch, patch_attribute

_local = threading.local()


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def kernel_name(func: Any) -> str:
    """The PrimFunc's ``global_symbol`` attribute, else its ``__name__``, else its type's name."""
    attrs = getattr(func, "attrs", None)
    try:
        symbol = attrs.get("global_symbol") if attrs is not None else None
    except Exception:  # noqa: BLE001 - TVM attribute maps differ across versions
        symbol = None
    if symbol is not None:
        return str(symbol)
    return str(getattr(func, "__name__", None) or type(func).__name__)


def buffer_spec(func: Any) -> list[dict[str, Any]]:
    """Shape and dtype of each buffer parameter of a TVM PrimFunc (``func.params`` and
    ``func.buffer_map``); symbolic dimensions as their expression text."""
    out: list[dict[str, Any]] = []
    buffer_map = getattr(func, "buffer_map", None) or {}
    for param in list(getattr(func, "params", []) or [])[:16]:
        buf = buffer_map.get(param) if hasattr(buffer_map, "get") else None
        if buf is None:
            out.append({"name": str(getattr(param, "name", param)), "dtype": str(getattr(param, "dtype", ""))})
            continue
        dims = [int(d) if type(d).__name__ == "IntImm" else str(d) for d in buf.shape]
        out.append({"name": str(buf.name), "shape": dims, "dtype": str(buf.dtype)})
    return out


class _Key:
    """Around ``KernelCache._generate_key(self, func, ...)``: remembers the key for this thread's
    next kernel of the same PrimFunc."""

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return (id(_arg(args, kwargs, 1, "func")),)

    def after(self, state: Any, result: Any) -> None:
        _local.key = (state[0], str(result)) if result is not None else None

    def failed(self, state: Any, exc: BaseException) -> None:
        pass


def _take_key(func: Any) -> str | None:
    """The key :class:`_Key` saw for ``func`` on this thread (an in-memory hit leaves one behind
    that no kernel takes: it is only used for the same PrimFunc object)."""
    entry: tuple[int, str] | None = getattr(_local, "key", None)
    _local.key = None
    return entry[1] if entry is not None and entry[0] == id(func) else None


class _Build(CancelOnFailure):
    """Around ``JITKernel.__init__(self, func, out_idx, execution_backend, target, target_host,
    verbose, pass_configs, from_database, ...)`` and ``JITKernel.from_database(cls, func, ...)``."""

    def __init__(self, backend: TileLangBackend, *, load: bool) -> None:
        self.backend = backend
        self.load = load

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sink = self.backend.sink
        if sink is None:
            return None
        if (
            self.load
        ):  # from_database(cls, func, host_src, device_src, lib_path, params, target, host, out_idx, backend)
            func = _arg(args, kwargs, 1, "func")
            target = _arg(args, kwargs, 6, "target")
            out_idx = _arg(args, kwargs, 8, "out_idx")
            execution_backend = _arg(args, kwargs, 9, "execution_backend")
        else:  # __init__(self, func, out_idx, execution_backend, target, target_host, verbose, pass_configs, from_db)
            if _arg(args, kwargs, 8, "from_database", False):
                return None  # the shell from_database builds: its load is recorded there
            func = _arg(args, kwargs, 1, "func")
            out_idx = _arg(args, kwargs, 2, "out_idx")
            execution_backend = _arg(args, kwargs, 3, "execution_backend", "tvm_ffi")
            target = _arg(args, kwargs, 4, "target", "auto")
        name = kernel_name(func)
        state = (sink.begin(self.backend.name, name), name, func, target, out_idx, execution_backend, _take_key(func))
        if not self.load:
            # a real compile is known before it runs: error mode refuses it here, before the
            # lowering and nvcc (CompileSink.admit records it and raises ServingCompileError)
            sink.admit(state[0], self._capture(state))
        return state

    def _capture(self, state: Any) -> Capture:
        _token, name, func, target, out_idx, execution_backend, key = state
        load = self.load

        def detail() -> dict[str, Any]:
            return {
                "entry": "JITKernel.from_database" if load else "JITKernel.__init__",
                "target": str(target) if target is not None else None,
                "execution_backend": str(execution_backend) if execution_backend is not None else None,
                "out_idx": out_idx if isinstance(out_idx, (int, list, tuple, type(None))) else str(out_idx),
                "spec": buffer_spec(func),
            }

        return Capture(self.backend.name, name, key=key, cache_hit=load, detail=detail)

    def after(self, state: Any, result: Any) -> None:
        sink = self.backend.sink
        assert sink is not None
        sink.finish(state[0], self._capture(state))


class TileLangBackend(LibraryBackend):
    """jitwatch's backend for TileLang; see the module docstring."""

    name = "tilelang"
    label = "TileLang kernel"
    module = "tilelang"
    distributions = ("tilelang",)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []

    def hook_in(self, module: ModuleType) -> BackendStatus:
        on_error = self.report_error
        kernel_mod = importlib.import_module("tilelang.jit.kernel")
        jit_kernel = kernel_mod.JITKernel
        hooks = []
        self._patches.append(
            patch_attribute(
                jit_kernel, "__init__", _Build(self, load=False), where="JITKernel.__init__", on_error=on_error
            )
        )
        hooks.append("tilelang.jit.kernel.JITKernel.__init__")
        degraded = []
        if "from_database" in jit_kernel.__dict__:
            self._patches.append(
                patch_attribute(
                    jit_kernel,
                    "from_database",
                    _Build(self, load=True),
                    where="JITKernel.from_database",
                    on_error=on_error,
                )
            )
            hooks.append("tilelang.jit.kernel.JITKernel.from_database")
        else:
            degraded.append("no JITKernel.from_database: disk-cache loads not recorded")
        try:
            cache_cls = importlib.import_module("tilelang.cache.kernel_cache").KernelCache
        except (ImportError, AttributeError):
            cache_cls = None
        if cache_cls is not None and "_generate_key" in cache_cls.__dict__:
            self._patches.append(
                patch_attribute(
                    cache_cls, "_generate_key", _Key(), where="KernelCache._generate_key", on_error=on_error
                )
            )
            hooks.append("tilelang.cache.kernel_cache.KernelCache._generate_key")
        else:
            degraded.append("no KernelCache._generate_key: records carry no cache key")
        return BackendStatus(
            self.name, "active", self.version(), tuple(hooks), "TileLang: " + "; ".join(degraded) if degraded else None
        )

    def unhook(self) -> None:
        for patch in reversed(self._patches):
            patch.restore()
        self._patches.clear()
