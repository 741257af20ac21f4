"""Installing into Triton's compile callbacks, chained with whatever was there before.

Mechanisms used (Triton ≥ 3.4, see ``docs/triton-support.md``):

* ``triton.knobs.runtime.jit_cache_hook`` — called by ``JITFunction._do_compile`` before every
  compile (in-memory cache miss, disk-cache hit included). jitwatch's hook **never returns a
  truthy value** of its own: Triton would then skip the compile *and the launch*.
* ``triton.knobs.runtime.jit_post_compile_hook`` — after the compile (in asynchronous compile
  mode, when the future finishes). Occupied only where the sink wants it
  (:meth:`HookSink.wants`: the Triton backend in ``error`` mode; otherwise its compilation
  listener ends the compile), or later through :meth:`HookSet.add_slot`.
* ``triton.knobs.compilation.listener`` — inside ``triton.compile``: per-stage times (µs) and
  whether the compile was a disk-cache hit. It also sees compiles that bypass ``JITFunction``.
* ``triton.knobs.autotuning.listener`` (Triton ≥ 3.8) — one call per autotune cache miss.
* Before 3.8 (3.4-3.7), where that listener does not exist: ``Autotuner.prune_configs`` and
  ``Autotuner._bench`` (``triton.runtime.autotuner``) are wrapped at class level. ``Autotuner.run``
  calls them only on an autotune cache miss (``prune_configs`` once, ``_bench`` once per pruned
  config), so nothing is added to the per-launch path (see :meth:`HookSet._install_autotuner_wrap`).

Each slot holds a single callable, so chaining is by hand: the previous value is kept, called
with the same arguments after jitwatch's own work, and its return value is returned; the
previous value is restored on :meth:`HookSet.uninstall` (or, if someone chained on top of us,
our hook turns into a pass-through). Where a slot was empty, jitwatch's own callable (the sink's
:meth:`HookSink.hook_body`) goes into the slot directly, with no chaining frame around it: a
compile then runs one jitwatch frame per hook plus the core's. Nothing is installed on the launch
path (``launch_enter_hook``/``launch_exit_hook`` stay untouched).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from jitwatch.errors import ServingCompileError
from jitwatch.text import logger

log = logger(__name__)

MIN_TRITON = (3, 4)
"""Oldest Triton whose ``knobs`` expose the JIT hooks jitwatch uses."""


class HookSink(Protocol):
    """What :class:`HookSet` calls; implemented by :class:`jitwatch.backends.triton.TritonBackend`."""

    def hook_body(self, slot: str, link: HookLink) -> Callable[..., Any]:
        """jitwatch's own callable for ``slot`` (a key of ``_SLOTS``), for one installation.

        It takes the slot's arguments as Triton passes them (keywords), does nothing once
        ``link.live`` is false, returns ``None`` (never truthy: a truthy ``jit_cache_hook`` makes
        Triton skip the compile and the launch) and never raises, except
        :class:`ServingCompileError` (error mode) from the post-compile hook and the listeners;
        its own faults it reports itself. :class:`HookSet` puts it into an empty slot as it is and
        wraps it in a chaining frame where the slot was occupied."""
        ...

    def wants(self, slot: str, support: TritonSupport) -> bool:
        """Whether jitwatch occupies ``slot`` (a key of ``_SLOTS``) with this Triton. An occupied
        JIT hook slot is not free: Triton builds a ``repr``, specialization data and a keyword
        dict for every occupied ``jit_cache_hook``/``jit_post_compile_hook`` on every compile."""
        ...

    def on_autotune(self, kwargs: dict[str, Any]) -> None: ...
    def on_hook_error(self, hook: str, exc: BaseException) -> None: ...
    def on_compile_skipped(self, kwargs: dict[str, Any]) -> None: ...


WRAPPED_DEPTH = 8
"""How many ``__wrapped__`` links :meth:`HookSet.replaced` follows from a slot's occupant."""

AUTOTUNER_WRAPPED = ("prune_configs", "_bench")
"""``triton.runtime.autotuner.Autotuner`` methods wrapped before Triton 3.8 (no autotuning listener)."""


@dataclass(frozen=True)
class TritonSupport:
    """What the installed Triton offers. ``reason`` explains a degraded mode.

    ``autotune_mechanism`` says where ``autotune`` events come from: ``"listener"``
    (``knobs.autotuning.listener``, Triton 3.8+), ``"autotuner_wrap"`` (class-level wrappers of
    ``Autotuner.prune_configs``/``Autotuner._bench``, Triton 3.4-3.7) or ``None`` (not recorded).
    """

    version: str | None
    jit_hooks: bool
    compilation_listener: bool
    autotuning_listener: bool
    reason: str | None = None
    autotune_mechanism: str | None = None


def _autotuner_class() -> type | None:
    """``triton.runtime.autotuner.Autotuner`` when it has both wrapped methods, else ``None``."""
    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:  # noqa: BLE001 - a vendor build without it
        return None
    if all(callable(inspect.getattr_static(Autotuner, name, None)) for name in AUTOTUNER_WRAPPED):
        return Autotuner
    return None


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
    if not jit and not listener:
        reason = (
            f"triton {version} has neither knobs.runtime.jit_cache_hook/jit_post_compile_hook nor "
            f"knobs.compilation.listener (needs >= {MIN_TRITON[0]}.{MIN_TRITON[1]}): no compile is recorded"
        )
    elif not jit:
        reason = (
            f"triton {version} has no knobs.runtime.jit_cache_hook/jit_post_compile_hook "
            f"(needs >= {MIN_TRITON[0]}.{MIN_TRITON[1]}); compile events come from the compilation "
            "listener only (no specialization key, signature or warmup flag)"
        )
    elif not listener:
        reason = f"triton {version} has no knobs.compilation.listener: no per-stage times or disk-cache hits"
    mechanism: str | None = None
    if autotune:
        mechanism = "listener"
    elif (jit or listener) and _autotuner_class() is not None:
        mechanism = "autotuner_wrap"
    if reason is None and mechanism == "autotuner_wrap":
        reason = (
            f"triton {version} has no knobs.autotuning.listener (3.8+): autotune runs are recorded by "
            "wrapping triton.runtime.autotuner.Autotuner.prune_configs/_bench (autotune cache misses only; "
            "duration includes config pruning; subclasses overriding them are not seen)"
        )
    elif reason is None and mechanism is None:
        reason = (
            f"triton {version} has no knobs.autotuning.listener (3.8+) and no wrappable "
            "Autotuner.prune_configs/_bench: autotune runs are not recorded as autotune events "
            "(each benchmarked config's compile still is a compile event)"
        )
    return TritonSupport(version, jit, listener, autotune, reason, mechanism)


_SLOTS = {
    "jit_cache_hook": ("runtime", "jit_cache_hook"),
    "jit_post_compile_hook": ("runtime", "jit_post_compile_hook"),
    "compilation_listener": ("compilation", "listener"),
    "autotuning_listener": ("autotuning", "listener"),
}
"""jitwatch slot name → (``triton.knobs`` group, attribute)."""


class HookLink:
    """One installation of one slot: the previous occupant, and whether jitwatch still records.

    Every hook jitwatch installs closes over its own link, so a hook left in someone else's chain
    after :meth:`HookSet.uninstall` keeps passing calls to *its* previous occupant (and a later
    re-install can never make the chain call itself).
    """

    __slots__ = ("live", "prev")

    def __init__(self, prev: Any) -> None:
        self.prev = prev
        self.live = True


class _Sweep:
    """One autotune sweep in progress on one thread: opened by ``prune_configs``, closed by the last ``_bench``."""

    __slots__ = ("benched", "configs", "key", "start", "timings", "tuner")

    def __init__(self, tuner: Any, start: float, configs: int, key: tuple[Any, ...]) -> None:
        self.tuner = tuner
        self.start = start  # time.perf_counter() seconds
        self.configs = configs
        self.key = key
        self.benched = 0
        self.timings: dict[Any, Any] = {}


def _tuning_key(tuner: Any, run_kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The autotune cache key exactly as ``Autotuner.run`` (3.4-3.9) computes it: the values of
    ``tuner.keys`` among the arguments, then ``str(dtype)`` of every argument that has a ``dtype``."""
    nargs = getattr(tuner, "nargs", None) or {}
    arg_names = tuner.arg_names
    all_args = {**nargs, **run_kwargs}
    args = {k: v for (k, v) in all_args.items() if k in arg_names}
    key = [args[k] for k in tuner.keys if k in args]
    for arg in args.values():
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key)


def _jit_function(tuner: Any) -> Any:
    """The ``JITFunction`` under an ``Autotuner`` (through ``Heuristics`` wrappers), as the 3.8+ listener gets it."""
    from triton.runtime.jit import JITFunction

    fn = tuner.fn
    for _ in range(16):
        if isinstance(fn, JITFunction):
            return fn
        fn = getattr(fn, "fn", None)
    return tuner.fn


class HookSet:
    """jitwatch's callables in Triton's hook slots, chained with the previous occupants.

    Chaining contract, per slot (tested in ``tests/backends/triton/test_hooks.py``):

    * jitwatch's own work runs first and never raises into Triton, except
      :class:`ServingCompileError` in ``error`` mode; an exception inside jitwatch is caught and
      reported to :meth:`HookSink.on_hook_error`.
    * The previous occupant is then called with the *same* positional and keyword arguments and
      its return value is returned (so a previous ``jit_cache_hook`` that returns ``True`` still
      makes Triton skip the compile). jitwatch's own ``jit_cache_hook`` returns ``None``.
    * An exception from the previous occupant propagates unchanged (jitwatch has already recorded
      its event), and takes precedence over jitwatch's own ``ServingCompileError``.
    """

    def __init__(self, sink: HookSink) -> None:
        self._sink = sink
        self._links: dict[str, tuple[Any, str, HookLink, Callable[..., Any]]] = {}
        # "Autotuner.<name>" → (class, name, link, our wrapper, whether the class had its own attribute)
        self._wraps: dict[str, tuple[type, str, HookLink, Callable[..., Any], bool]] = {}
        self._sweeps = threading.local()  # .by_tuner: {id(autotuner): _Sweep}, this thread's open sweeps
        self.active = False
        self.support = probe_triton()
        self._knobs: Any = None
        self._lock = threading.Lock()
        """Held by :meth:`add_slot` and :meth:`uninstall`: a slot taken on another thread while
        jitwatch uninstalls is either restored by it or never taken."""

    # ------------------------------------------------------------------ install / uninstall
    def install(self) -> TritonSupport:
        """Install into every slot this Triton has. Never raises.

        Returns the :class:`TritonSupport` probed at this moment; what is missing (degraded mode,
        ``reason``) is not logged here: it is in the backend's status (``degraded``), which the
        monitor logs once per process (it was logged here too, so every notice came out twice).
        A Triton that cannot be imported is logged here (its backend's status is ``failed``, which
        the monitor does not log).
        """
        if self.active:
            return self.support
        self.support = support = probe_triton()
        if support.version is None:
            log.warning("jitwatch: %s", support.reason)
            return support
        try:
            import triton

            knobs = getattr(triton, "knobs", None)
        except Exception:  # noqa: BLE001 - probed above; a broken install degrades to nothing
            knobs = None
        self._knobs = knobs
        for slot in _SLOTS:
            if self._sink.wants(slot, support):
                self._occupy(slot)
        if support.autotune_mechanism == "autotuner_wrap":
            self._install_autotuner_wrap()
        self.active = True
        return support

    def add_slot(self, slot: str) -> bool:
        """Occupy ``slot`` (a key of ``_SLOTS``) now, after :meth:`install` left it out (any
        thread: one attribute store into ``triton.knobs``, under a lock shared with
        :meth:`uninstall`). Returns whether jitwatch holds it afterwards; ``False`` when not
        installed (or uninstalled meanwhile) or the knob is missing. Never raises."""
        with self._lock:
            if not self.active:
                return False
            if slot in self._links:
                return True
            return self._occupy(slot)

    def _occupy(self, slot: str) -> bool:
        """Put jitwatch's callable for ``slot`` into Triton's knob, chained with what is there."""
        group, attr = _SLOTS[slot]
        holder = getattr(self._knobs, group, None)
        if holder is None or not hasattr(holder, attr):
            return False
        try:
            link = HookLink(getattr(holder, attr))
            body = self._sink.hook_body(slot, link)
            fn = body if link.prev is None else self._chain(slot, link, body)
            setattr(holder, attr, fn)
        except Exception as exc:  # noqa: BLE001 - a read-only/odd knob: skip that slot
            log.warning("jitwatch: cannot install into triton.knobs.%s.%s: %s", group, attr, exc)
            return False
        self._links[slot] = (holder, attr, link, fn)
        return True

    def holds(self, slot: str) -> Any:
        """jitwatch's callable installed in ``slot`` (a key of ``_SLOTS``), ``None`` if not held."""
        held = self._links.get(slot)
        return held[3] if held is not None else None

    def uninstall(self) -> None:
        """Stop recording; restore each previous hook where ours is still in the slot.

        Where someone chained on top of jitwatch, jitwatch's hook stays in their chain as a pure
        pass-through to the hook it replaced (removing it would cut their chain). Waits for an
        :meth:`add_slot` in progress on another thread (one attribute store).
        """
        with self._lock:
            self._uninstall()

    def _uninstall(self) -> None:
        if not self.active:
            return
        self.active = False
        for slot, (holder, attr, link, fn) in list(self._links.items()):
            link.live = False
            try:
                if getattr(holder, attr, None) is fn:
                    setattr(holder, attr, link.prev)
            except Exception as exc:  # noqa: BLE001
                log.warning("jitwatch: cannot restore %s: %s", slot, exc)
        self._links.clear()
        for slot, (cls, name, link, fn, had_own) in list(self._wraps.items()):
            link.live = False
            try:
                if cls.__dict__.get(name) is fn:
                    if had_own:
                        setattr(cls, name, link.prev)
                    else:
                        delattr(cls, name)
            except Exception as exc:  # noqa: BLE001
                log.warning("jitwatch: cannot restore %s: %s", slot, exc)
        self._wraps.clear()
        self._sweeps.__dict__.clear()

    def replaced(self, slot: str) -> bool:
        """Whether ``slot`` (a key of ``_SLOTS``) holds another callable than the one jitwatch put
        there: someone chained on top of jitwatch's hook or replaced it after :meth:`install`.
        A callable that declares what it wraps the ``functools.wraps`` way (``__wrapped__``, up to
        :data:`WRAPPED_DEPTH` levels) and so reaches jitwatch's is a declared chain, not a
        replacement (jitwatch's own ``warmup replay`` listener does this). ``False`` for a slot
        jitwatch does not occupy. One ``getattr`` per level; never raises."""
        held = self._links.get(slot)
        if held is None:
            return False
        holder, attr, _link, fn = held
        try:
            current = getattr(holder, attr, None)
            for _ in range(WRAPPED_DEPTH):
                if current is fn:
                    return False
                current = getattr(current, "__wrapped__", None)
                if current is None:
                    break
            return True
        except Exception:  # noqa: BLE001 - an odd knob object
            return False

    def installed_slots(self) -> list[str]:
        """Names of the slots jitwatch currently occupies: keys of ``_SLOTS``, plus
        ``"Autotuner._bench"`` and ``"Autotuner.prune_configs"`` where those are wrapped (< 3.8)."""
        return sorted([*self._links, *self._wraps])

    # ------------------------------------------------------------------ Autotuner wrappers (< 3.8)
    def _install_autotuner_wrap(self) -> None:
        """Wrap ``Autotuner.prune_configs`` and ``Autotuner._bench`` at class level (Triton 3.4-3.7).

        Mechanism (``triton/runtime/autotuner.py``, 3.4-3.7): on an autotune cache miss,
        ``Autotuner.run`` computes the tuning key, calls ``self.prune_configs(kwargs)`` once, then
        ``self._bench(*args, config=c, **kwargs)`` once per pruned config (inside ``benchmark()``,
        skipped when ``check_disk_cache`` finds the timings on disk). A cache hit calls neither, so
        the per-launch path is untouched. ``Autotuner.warmup`` calls ``prune_configs`` but never
        ``_bench``: its open sweep is simply replaced by the next one and emits nothing.

        The wrappers call the previous attribute (the original, or someone else's wrapper) with the
        same arguments and return its value; its exceptions propagate unchanged. jitwatch's own part
        never raises (faults go to :meth:`HookSink.on_hook_error`). Never raises.
        """
        cls = _autotuner_class()
        if cls is None:
            return
        makers = {"prune_configs": self._make_prune_wrapper, "_bench": self._make_bench_wrapper}
        for name in AUTOTUNER_WRAPPED:
            slot = f"Autotuner.{name}"
            try:
                had_own = name in cls.__dict__
                link = HookLink(inspect.getattr_static(cls, name))
                fn = makers[name](link, slot)
                setattr(cls, name, fn)
            except Exception as exc:  # noqa: BLE001
                log.warning("jitwatch: cannot wrap triton.runtime.autotuner.%s: %s", slot, exc)
                continue
            self._wraps[slot] = (cls, name, link, fn, had_own)

    @staticmethod
    def _call_prev(prev: Any, tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the previous class attribute as the method it was (functions and descriptors bind)."""
        bind = getattr(type(prev), "__get__", None)
        if bind is not None:
            return bind(prev, tuner, type(tuner))(*args, **kwargs)
        return prev(*args, **kwargs)

    def _open_sweeps(self) -> dict[int, _Sweep]:
        by_tuner: dict[int, _Sweep] | None = getattr(self._sweeps, "by_tuner", None)
        if by_tuner is None:
            by_tuner = self._sweeps.by_tuner = {}
        return by_tuner

    def _make_prune_wrapper(self, link: HookLink, slot: str) -> Callable[..., Any]:
        def prune_configs(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            pruned = self._call_prev(link.prev, tuner, args, kwargs)  # exceptions propagate unchanged
            if link.live:
                try:
                    run_kwargs = args[0] if args else kwargs.get("kwargs")
                    self._open_sweeps()[id(tuner)] = _Sweep(
                        tuner,
                        start,
                        len(pruned),
                        _tuning_key(tuner, run_kwargs if isinstance(run_kwargs, dict) else {}),
                    )
                except Exception as exc:  # noqa: BLE001
                    self._report(slot, exc)
            return pruned

        prune_configs.__qualname__ = "jitwatch_Autotuner.prune_configs"
        prune_configs.__wrapped__ = link.prev  # type: ignore[attr-defined]
        return prune_configs

    def _make_bench_wrapper(self, link: HookLink, slot: str) -> Callable[..., Any]:
        def _bench(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                timing = self._call_prev(link.prev, tuner, args, kwargs)
            except BaseException:
                if link.live:  # the sweep is aborted (Triton re-raises out of Autotuner.run)
                    try:
                        self._open_sweeps().pop(id(tuner), None)
                    except Exception as exc:  # noqa: BLE001
                        self._report(slot, exc)
                raise
            if link.live:
                try:
                    self._bench_done(tuner, kwargs.get("config"), timing)
                except Exception as exc:  # noqa: BLE001
                    self._report(slot, exc)
            return timing

        _bench.__qualname__ = "jitwatch_Autotuner._bench"
        _bench.__wrapped__ = link.prev  # type: ignore[attr-defined]
        return _bench

    def _bench_done(self, tuner: Any, config: Any, timing: Any) -> None:
        sweeps = self._open_sweeps()
        sweep = sweeps.get(id(tuner))
        if sweep is None or sweep.tuner is not tuner:
            return  # a _bench outside Autotuner.run's sweep (called directly): not a sweep
        sweep.benched += 1
        sweep.timings[config] = timing
        if sweep.benched < sweep.configs:
            return
        del sweeps[id(tuner)]
        duration = time.perf_counter() - sweep.start
        try:
            best = min(sweep.timings, key=sweep.timings.__getitem__)  # as Autotuner.run picks it
        except Exception:  # noqa: BLE001 - incomparable timings from a custom do_bench
            best = None
        self._sink.on_autotune(
            {
                "fn": _jit_function(tuner),
                "key": sweep.key,
                "best_config": best,
                "configs_timings": sweep.timings,
                "duration": duration,
                "cache_hit": False,
                "source": "autotuner_wrap",
            }
        )

    # ------------------------------------------------------------------ the hooks
    def _report(self, hook: str, exc: BaseException) -> None:
        try:
            self._sink.on_hook_error(hook, exc)
        except Exception:  # noqa: BLE001 - the error path itself must never reach Triton
            pass

    def _discard(self, kwargs: dict[str, Any]) -> None:
        try:
            self._sink.on_compile_skipped(kwargs)
        except Exception as exc:  # noqa: BLE001
            self._report("jit_cache_hook", exc)

    def _chain(self, slot: str, link: HookLink, body: Callable[..., Any]) -> Callable[..., Any]:
        """``body`` followed by the slot's previous occupant (see the class docstring)."""
        if slot == "jit_cache_hook":
            return self._chain_pre(link, body)
        return self._chain_after(link, body, f"jitwatch_{slot}")

    def _chain_pre(self, link: HookLink, body: Callable[..., Any]) -> Callable[..., Any]:
        def jitwatch_jit_cache_hook(*args: Any, **kwargs: Any) -> Any:
            body(*args, **kwargs)  # never raises, returns None
            prev = link.prev
            try:
                result = prev(*args, **kwargs)
            except BaseException:
                if link.live:
                    self._discard(kwargs)  # the compile will not happen
                raise
            if result and link.live:
                self._discard(kwargs)  # the previous hook told Triton to skip this compile
            return result

        return jitwatch_jit_cache_hook

    @staticmethod
    def _chain_after(link: HookLink, body: Callable[..., Any], name: str) -> Callable[..., Any]:
        def chained(*args: Any, **kwargs: Any) -> Any:
            deliberate: ServingCompileError | None = None
            try:
                body(*args, **kwargs)
            except ServingCompileError as exc:  # error mode: raised after the previous hook ran
                deliberate = exc
            # The previous hook always runs; its exception (e.g. vLLM's error mode) wins, unchanged.
            result = link.prev(*args, **kwargs)
            if deliberate is not None:
                raise deliberate
            return result

        chained.__name__ = chained.__qualname__ = name
        return chained
