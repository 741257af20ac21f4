"""FlashInfer: every JIT module build and every load of a prebuilt or cached one.

Mechanism (checked on flashinfer-python 0.7.2.post1, ``flashinfer/jit/core.py``): FlashInfer
generates one *JIT spec* per kernel family and configuration (``JitSpecNvcc`` for nvcc + ninja
modules, ``JitSpecCuteDsl`` for its CuTe-DSL kernels), named after what it specializes on
(``silu_and_mul``, ``batch_decode_with_kv_cache_dtype_q_f16_…_head_dim_qk_128_…``). Every caller
(about 250 call sites, each behind ``functools.cache``) gets the module through one template
method, ``JitSpec.build_and_load()``: ``try_load()`` (a prebuilt AOT artifact from
``flashinfer-jit-cache``/``flashinfer-cubin``), else, under a file lock, ``build()`` (nvcc
through ninja in ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<arch>/cached_ops/<name>/``;
a no-op when the ``.so`` there is up to date) and ``load()``.

Wrapped (with :mod:`jitwatch.backends.patching`): ``JitSpec.build_and_load`` — the stall a
request waits on. Whether it compiled is the library's own artifact: the spec's library path
(``get_library_path()``: the AOT artifact or ``cached_ops/<name>/<name>.so``) is stat'ed before
and after; a file that is new or rewritten means a build (``cache_hit=False``), an unchanged one a
load from FlashInfer's cache (``cache_hit=True``). That stat runs only when ``build_and_load`` is
called (once per module per process), never per kernel launch.

Several processes (the ranks of one engine) that need the same module wait on FlashInfer's file
lock while one of them builds it, then load it: the ``.so`` is new to each of them. So the
``build`` method of each ``JitSpec`` subclass defined when FlashInfer is imported (``JitSpecNvcc``,
``JitSpecCuteDsl``) is wrapped too, only to stat the ``.so`` around it (ninja, run by ``build``
after the lock, no-ops when another process built it meanwhile): a new ``.so`` that did not change
during this process's ``build`` is a load (``cache_hit=True``, ``built_elsewhere``), the wait
included in its duration. A subclass defined later keeps the ``.so`` test alone.

Capture: ``name`` and ``key`` the spec's name (it spells the configuration), ``detail``:
``spec_type`` (``JitSpecNvcc``, ``JitSpecCuteDsl``), ``aot`` (a prebuilt artifact), ``sources``
(how many), ``library`` (the artifact's path; home directories are redacted by the store).
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

from jitwatch.backends.base import BackendStatus, Capture, LibraryBackend
from jitwatch.backends.patching import CancelOnFailure, Patch, patch_attribute


def _artifact(spec: Any) -> tuple[str | None, tuple[int, int] | None]:
    """The spec's library path and its (mtime_ns, size), or ``None`` when absent."""
    try:
        path = spec.get_library_path()
    except Exception:  # noqa: BLE001 - a spec type without one: no cache information
        return None, None
    try:
        st = path.stat()
    except OSError:
        return str(path), None
    return str(path), (st.st_mtime_ns, st.st_size)


_local = threading.local()


def _calls() -> list[dict[str, bool]]:
    calls: list[dict[str, bool]] | None = getattr(_local, "calls", None)
    if calls is None:
        calls = _local.calls = []
    return calls


def _pop(call: dict[str, bool]) -> None:
    calls = _calls()
    if calls and calls[-1] is call:
        calls.pop()


class _Build:
    """Around ``build(self, ...)`` of a ``JitSpec`` subclass: notes whether the spec's ``.so``
    changed during it (ninja rebuilt it; a no-op leaves it untouched) for the enclosing
    ``build_and_load`` on this thread. Records nothing itself."""

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        calls = _calls()
        if not calls or not args:
            return None
        return calls[-1], args[0], _artifact(args[0])[1]

    def after(self, state: Any, result: Any) -> None:
        call, spec, before = state
        after = _artifact(spec)[1]
        if after is not None and after != before:
            call["built"] = True

    def failed(self, state: Any, exc: BaseException) -> None:
        pass


class _BuildAndLoad(CancelOnFailure):
    """Around ``JitSpec.build_and_load(self)``."""

    def __init__(self, backend: FlashInferBackend) -> None:
        self.backend = backend

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        sink = self.backend.sink
        if sink is None or not args:
            return None
        spec = args[0]
        name = str(getattr(spec, "name", None) or type(spec).__name__)
        _path, stamp = _artifact(spec)
        call = {"built": False, "watched": type(spec) in self.backend.build_watched}
        _calls().append(call)
        return (sink.begin(self.backend.name, name), name, spec, stamp, call)

    def failed(self, state: Any, exc: BaseException) -> None:
        _pop(state[4])
        super().failed(state, exc)

    def after(self, state: Any, result: Any) -> None:
        token, name, spec, before, call = state
        _pop(call)
        sink = self.backend.sink
        assert sink is not None
        path, after = _artifact(spec)
        cache_hit = None if after is None else before == after
        elsewhere = cache_hit is False and call["watched"] and not call["built"]
        if elsewhere:  # a new .so this process did not build: another process built it while this one waited
            cache_hit = True
        try:
            aot = bool(getattr(spec, "is_aot", False))
        except Exception:  # noqa: BLE001
            aot = None
        spec_type = type(spec).__name__
        sources = getattr(spec, "sources", None)

        def detail() -> dict[str, Any]:
            return {
                "entry": "JitSpec.build_and_load",
                "spec_type": spec_type,
                "aot": aot,
                "sources": len(sources) if isinstance(sources, (list, tuple)) else None,
                "library": path,
                **({"built_elsewhere": True} if elsewhere else {}),
            }

        sink.finish(token, Capture(self.backend.name, name, key=name, cache_hit=cache_hit, detail=detail))


class FlashInferBackend(LibraryBackend):
    """jitwatch's backend for FlashInfer's JIT; see the module docstring."""

    name = "flashinfer"
    label = "FlashInfer JIT module"
    module = "flashinfer.jit.core"
    distributions = ("flashinfer-python",)

    def __init__(self) -> None:
        super().__init__()
        self._patches: list[Patch] = []
        self.build_watched: set[type] = set()
        """The ``JitSpec`` subclasses whose ``build`` (their own or inherited) is wrapped."""

    def hook_in(self, module: ModuleType) -> BackendStatus:
        core = importlib.import_module("flashinfer.jit.core")
        spec_cls = core.JitSpec
        if "build_and_load" not in spec_cls.__dict__:
            return BackendStatus(
                self.name,
                "failed",
                self.version(),
                degraded="FlashInfer: no JitSpec.build_and_load in this version (checked: 0.7.2.post1)",
            )
        self._patches.append(
            patch_attribute(
                spec_cls,
                "build_and_load",
                _BuildAndLoad(self),
                where="JitSpec.build_and_load",
                on_error=self.report_error,
            )
        )
        hooks = ["flashinfer.jit.core.JitSpec.build_and_load"]
        pending, seen = list(spec_cls.__subclasses__()), set()
        while pending:
            cls = pending.pop(0)
            if cls in seen:
                continue
            seen.add(cls)
            pending.extend(cls.__subclasses__())
            if callable(cls.__dict__.get("build")) and not getattr(cls.build, "__isabstractmethod__", False):
                self._patches.append(
                    patch_attribute(cls, "build", _Build(), where=f"{cls.__name__}.build", on_error=self.report_error)
                )
                hooks.append(f"{cls.__module__}.{cls.__qualname__}.build")
        self.build_watched = {
            cls for cls in seen if any(base in seen and "build" in base.__dict__ for base in cls.__mro__)
        }
        return BackendStatus(self.name, "active", self.version(), tuple(hooks))

    def unhook(self) -> None:
        for patch in reversed(self._patches):
            patch.restore()
        self._patches.clear()
        self.build_watched = set()
