"""CuTeDSL (``nvidia-cutlass-dsl``): every kernel compile and every load from its file cache.

Mechanism (checked on nvidia-cutlass-dsl 4.8.1, ``cutlass/base_dsl/compile_backend.py``): every
compile of a ``@cute.jit`` function — through ``cute.compile(fn, *args)`` (which vLLM's JIT
monitor wraps, and which forces ``no_cache=True``: it compiles at every engine start) and through
calling the function directly (JIT on call, which uses the in-memory ``jit_cache`` and the file
cache under ``CUTE_DSL_CACHE_DIR``) — goes through one method, ``CompilerBackend.compile(ctx)``.
It is reached only after the in-memory cache missed, so each call is either a real compile or a
load from the file cache. ``CompilerBackend._resolve_compile_cache(ctx)`` returns a
``CompileCacheState`` whose ``load_from_file_cache`` says which one: that is the capture's
``cache_hit``.

Wrapped (with :mod:`jitwatch.backends.patching`): ``CompilerBackend.compile`` and
``CompilerBackend._resolve_compile_cache``. Where ``CompilerBackend`` is missing (another
version), the backend falls back to ``CompileCallable.__call__`` (the class of ``cute.compile``):
explicit compiles only, no file-cache loads, reported as degraded. vLLM's wrapper of the module
attribute ``cutlass.cute.compile`` calls down into both, in either install order.

Capture: ``name`` the ``@cute.jit`` function's name, ``key`` the library's mangled function name,
which spells the specialization (``cutlass_add_one_Tensorgenerico321``: argument types, layout,
shape), ``detail``: ``module_hash`` (the file cache's key; ``None`` for ``cute.compile``, which
hashes nothing), ``arch`` (``CUTE_DSL_ARCH`` or the detected GPU), ``cache_enabled``, ``spec``
(argument shapes/dtypes and constexprs as passed).
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

from jitwatch.backends.base import BackendStatus, Capture, LibraryBackend
from jitwatch.backends.patching import CancelOnFailure, Patch, patch_attribute
from jitwatch.backends.spec import describe_call

_local = threading.local()


def _stack() -> list[dict[str, Any]]:
    stack: list[dict[str, Any]] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


class _Compile(CancelOnFailure):
    """Around ``CompilerBackend.compile(self, ctx)``."""

    def __init__(self, backend: CuteDSLBackend) -> None:
        self.backend = backend

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sink = self.backend.sink
        if sink is None or len(args) < 2:
            return None
        compiler, ctx = args[0], args[1]
        mangled = getattr(ctx, "function_name", None)
        name = getattr(ctx, "original_function_name", None) or mangled or "<cute.jit>"
        try:
            arch = compiler._resolve_compile_gpu_arch()
        except Exception:  # noqa: BLE001 - private helper; absence only loses a detail
            arch = None
        frame = {"file": None}
        _stack().append(frame)
        return (sink.begin(self.backend.name, str(name)), str(name), ctx, arch, frame, mangled)

    def after(self, state: Any, result: Any) -> None:
        token, name, ctx, arch, frame, mangled = state
        _pop(frame)
        sink = self.backend.sink
        assert sink is not None
        cache_enabled = bool(getattr(ctx, "cache_enabled", False))
        module_hash = getattr(ctx, "module_hash", None)
        full_args = getattr(ctx, "full_args", None) or ()
        full_kwargs = getattr(ctx, "full_kwargs", None) or {}
        loaded = frame["file"]

        def detail() -> dict[str, Any]:
            return {
                "arch": arch or None,
                "cache_enabled": cache_enabled,
                "entry": "CompilerBackend.compile",
                "module_hash": str(module_hash) if module_hash else None,
                "spec": describe_call(tuple(full_args), dict(full_kwargs)),
            }

        sink.finish(
            token,
            Capture(
                self.backend.name,
                name,
                key=str(mangled) if mangled else None,
                cache_hit=bool(loaded) if loaded is not None else (False if not cache_enabled else None),
                detail=detail,
            ),
        )

    def failed(self, state: Any, exc: BaseException) -> None:
        _pop(state[4])
        super().failed(state, exc)


def _pop(frame: dict[str, Any]) -> None:
    stack = _stack()
    if stack and stack[-1] is frame:
        stack.pop()


class _ResolveCache:
    """Around ``CompilerBackend._resolve_compile_cache(self, ctx)``: notes ``load_from_file_cache``
    for the enclosing compile on this thread."""

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        stack = _stack()
        return stack[-1] if stack else None

    def after(self, state: Any, result: Any) -> None:
        state["file"] = bool(getattr(result, "load_from_file_cache", False))

    def failed(self, state: Any, exc: BaseException) -> None:
        pass


class _CompileCallable(CancelOnFailure):
    """Fallback: around ``CompileCallable.__call__(self, func, *args, **kwargs)`` (``cute.compile``)."""

    def __init__(self, backend: CuteDSLBackend) -> None:
        self.backend = backend

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sink = self.backend.sink
        if sink is None or len(args) < 2:
            return None
        func = args[1]
        name = str(getattr(func, "__name__", None) or type(func).__name__)
        return (sink.begin(self.backend.name, name), name, args[2:], dict(kwargs))

    def after(self, state: Any, result: Any) -> None:
        token, name, rest, kw = state
        sink = self.backend.sink
        assert sink is not None
        kw.pop("options", None)
        sink.finish(
            token,
            Capture(
                self.backend.name,
                name,
                cache_hit=False,  # cute.compile forces no_cache=True
                detail=lambda: {"entry": "cute.compile", "spec": describe_call(rest, kw)},
            ),
        )


class CuteDSLBackend(LibraryBackend):
    """jitwatch's backend for CuTeDSL (``nvidia-cutlass-dsl``); see the module docstring."""

    name = "cutedsl"
    label = "CuTeDSL kernel"
    module = "cutlass.cute"
    distributions = ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl")

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []

    def hook_in(self, module: ModuleType) -> BackendStatus:
        on_error = self.report_error
        try:
            backend_mod = importlib.import_module("cutlass.base_dsl.compile_backend")
            klass = backend_mod.CompilerBackend
        except (ImportError, AttributeError):
            klass = None
        if klass is not None and "compile" in klass.__dict__:
            self._patches.append(
                patch_attribute(klass, "compile", _Compile(self), where="CompilerBackend.compile", on_error=on_error)
            )
            hooks = ["cutlass.base_dsl.compile_backend.CompilerBackend.compile"]
            degraded = None
            if "_resolve_compile_cache" in klass.__dict__:
                self._patches.append(
                    patch_attribute(
                        klass,
                        "_resolve_compile_cache",
                        _ResolveCache(),
                        where="CompilerBackend._resolve_compile_cache",
                        on_error=on_error,
                    )
                )
                hooks.append("cutlass.base_dsl.compile_backend.CompilerBackend._resolve_compile_cache")
            else:
                degraded = "CuTeDSL: no CompilerBackend._resolve_compile_cache: file-cache loads not told apart"
            return BackendStatus(self.name, "active", self.version(), tuple(hooks), degraded)
        compiler = importlib.import_module("cutlass.base_dsl.compiler")
        self._patches.append(
            patch_attribute(
                compiler.CompileCallable, "__call__", _CompileCallable(self), where="cute.compile", on_error=on_error
            )
        )
        return BackendStatus(
            self.name,
            "active",
            self.version(),
            ("cutlass.base_dsl.compiler.CompileCallable.__call__",),
            "CuTeDSL: no CompilerBackend.compile in this version: only cute.compile seen, not JIT-on-call "
            "compiles or file-cache loads",
        )

    def unhook(self) -> None:
        for patch in reversed(self._patches):
            patch.restore()
        self._patches.clear()
