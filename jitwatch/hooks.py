"""Installing into Triton's compile callbacks, chained with whatever was there before.

Mechanisms used (Triton ≥ 3.4, see ``docs/triton-support.md``):

* ``triton.knobs.runtime.jit_cache_hook`` — called by ``JITFunction._do_compile`` before every
  compile (in-memory cache miss, disk-cache hit included). jitwatch's hook **never returns a
  truthy value** of its own: Triton would then skip the compile *and the launch*.
* ``triton.knobs.runtime.jit_post_compile_hook`` — after the compile (in asynchronous compile
  mode, when the future finishes).
* ``triton.knobs.compilation.listener`` — inside ``triton.compile``: per-stage times (µs) and
  whether the compile was a disk-cache hit. It also sees compiles that bypass ``JITFunction``.
* ``triton.knobs.autotuning.listener`` (Triton ≥ 3.8) — one call per autotune cache miss.

Each slot holds a single callable, so chaining is by hand: the previous value is kept, called
with the same arguments after jitwatch's own work, and its return value is returned; the
previous value is restored on :meth:`HookSet.uninstall` (or, if someone chained on top of us,
our hook turns into a pass-through). Nothing is installed on the launch path
(``launch_enter_hook``/``launch_exit_hook`` stay untouched).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

MIN_TRITON = (3, 4)
"""Oldest Triton whose ``knobs`` expose the JIT hooks jitwatch uses."""


class ServingCompileError(RuntimeError):
    """Raised in ``error`` mode for a compile during the serving phase (deliberately not caught)."""


class HookSink(Protocol):
    """What :class:`HookSet` calls; implemented by :class:`jitwatch.monitor.Monitor`."""

    def on_pre_compile(self, kwargs: dict[str, Any]) -> None: ...
    def on_post_compile(self, kwargs: dict[str, Any]) -> None: ...
    def on_compile_listener(self, kwargs: dict[str, Any]) -> None: ...
    def on_autotune(self, kwargs: dict[str, Any]) -> None: ...
    def on_hook_error(self, hook: str, exc: BaseException) -> None: ...


@dataclass(frozen=True)
class TritonSupport:
    """What the installed Triton offers. ``reason`` explains a degraded mode."""

    version: str | None
    jit_hooks: bool
    compilation_listener: bool
    autotuning_listener: bool
    reason: str | None = None

    @property
    def supported(self) -> bool:
        return self.jit_hooks


def _parse_version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def probe_triton() -> TritonSupport:
    """Probe the installed Triton with ``hasattr`` (vendor builds may lack hooks). Never raises."""
    try:
        import triton
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
        return TritonSupport(None, False, False, False, f"triton not importable: {exc}")
    version = getattr(triton, "__version__", None)
    knobs = getattr(triton, "knobs", None)
    runtime = getattr(knobs, "runtime", None)
    compilation = getattr(knobs, "compilation", None)
    autotuning = getattr(knobs, "autotuning", None)
    jit = runtime is not None and hasattr(runtime, "jit_cache_hook") and hasattr(runtime, "jit_post_compile_hook")
    listener = compilation is not None and hasattr(compilation, "listener")
    autotune = autotuning is not None and hasattr(autotuning, "listener")
    reason = None
    if not jit:
        reason = (
            f"triton {version} has no knobs.runtime.jit_cache_hook/jit_post_compile_hook "
            f"(needs >= {MIN_TRITON[0]}.{MIN_TRITON[1]}); compile events come from the "
            "compilation listener only, if present"
        )
    elif not autotune:
        reason = f"triton {version} has no knobs.autotuning.listener (3.8+): autotune runs not recorded"
    return TritonSupport(version, jit, listener, autotune, reason)


_SLOTS = {
    "jit_cache_hook": ("runtime", "jit_cache_hook"),
    "jit_post_compile_hook": ("runtime", "jit_post_compile_hook"),
    "compilation_listener": ("compilation", "listener"),
    "autotuning_listener": ("autotuning", "listener"),
}


class HookSet:
    """jitwatch's callables in Triton's hook slots, chained with the previous occupants."""

    def __init__(self, sink: HookSink) -> None:
        self._sink = sink
        self._previous: dict[str, Any] = {}
        self._installed: dict[str, Callable[..., Any]] = {}
        self.active = False
        self.support = probe_triton()

    # ------------------------------------------------------------------ install / uninstall
    def install(self) -> TritonSupport:
        """Install into every slot this Triton has; logs (once) what is missing. Never raises."""
        if self.active:
            return self.support
        support = self.support
        if support.reason:
            log.warning("jitwatch: %s", support.reason)
        if support.version is None:
            return support
        import triton

        makers: dict[str, Callable[[], Callable[..., Any]]] = {
            "jit_cache_hook": self._make_pre,
            "jit_post_compile_hook": self._make_post,
            "compilation_listener": lambda: self._make_listener("compilation_listener", self._sink.on_compile_listener),
            "autotuning_listener": lambda: self._make_listener("autotuning_listener", self._sink.on_autotune),
        }
        for slot, (group, attr) in _SLOTS.items():
            holder = getattr(triton.knobs, group, None)
            if holder is None or not hasattr(holder, attr):
                continue
            self._previous[slot] = getattr(holder, attr)
            fn = makers[slot]()
            setattr(holder, attr, fn)
            self._installed[slot] = fn
        self.active = True
        return support

    def uninstall(self) -> None:
        """Restore the previous hooks where ours is still in place; else become a pass-through."""
        if not self.active:
            return
        self.active = False
        try:
            import triton
        except Exception:  # noqa: BLE001
            return
        for slot, fn in self._installed.items():
            group, attr = _SLOTS[slot]
            holder = getattr(triton.knobs, group)
            if getattr(holder, attr) is fn:
                setattr(holder, attr, self._previous.get(slot))
            # else: someone chained on top of us; our hook stays as a pass-through.
        self._installed.clear()

    def installed_slots(self) -> list[str]:
        return sorted(self._installed)

    # ------------------------------------------------------------------ the hooks
    def _make_pre(self) -> Callable[..., Any]:
        def jitwatch_jit_cache_hook(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                try:
                    self._sink.on_pre_compile(kwargs)
                except Exception as exc:  # noqa: BLE001
                    self._sink.on_hook_error("jit_cache_hook", exc)
            prev = self._previous.get("jit_cache_hook")
            if prev is not None:
                return prev(*args, **kwargs)
            return None  # never truthy: a truthy value makes Triton skip compile and launch

        return jitwatch_jit_cache_hook

    def _make_post(self) -> Callable[..., Any]:
        def jitwatch_jit_post_compile_hook(*args: Any, **kwargs: Any) -> Any:
            deliberate: ServingCompileError | None = None
            if self.active:
                try:
                    self._sink.on_post_compile(kwargs)
                except ServingCompileError as exc:
                    deliberate = exc
                except Exception as exc:  # noqa: BLE001
                    self._sink.on_hook_error("jit_post_compile_hook", exc)
            prev = self._previous.get("jit_post_compile_hook")
            try:
                return prev(*args, **kwargs) if prev is not None else None
            finally:
                if deliberate is not None:
                    raise deliberate

        return jitwatch_jit_post_compile_hook

    def _make_listener(self, slot: str, target: Callable[[dict[str, Any]], None]) -> Callable[..., Any]:
        def jitwatch_listener(*args: Any, **kwargs: Any) -> Any:
            deliberate: ServingCompileError | None = None
            if self.active:
                try:
                    target(kwargs)
                except ServingCompileError as exc:  # error mode, listener-only compile
                    deliberate = exc
                except Exception as exc:  # noqa: BLE001
                    self._sink.on_hook_error(slot, exc)
            prev = self._previous.get(slot)
            try:
                return prev(*args, **kwargs) if prev is not None else None
            finally:
                if deliberate is not None:
                    raise deliberate

        jitwatch_listener.__name__ = f"jitwatch_{slot}"
        return jitwatch_listener
