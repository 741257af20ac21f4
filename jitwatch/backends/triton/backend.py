"""The Triton backend: Triton's compile callbacks → backend-neutral captures.

:class:`~jitwatch.backends.triton.hooks.HookSet` occupies Triton's hook slots (chained with what
was there) with the callables :meth:`TritonBackend.hook_body` builds; they hand the core
references, and :func:`_capture` decodes Triton's payloads into a
:class:`~jitwatch.backends.base.Capture` on the journal writer's thread. Mechanisms (Triton ≥ 3.4):

* ``knobs.runtime.jit_cache_hook`` → ``jitwatch_jit_cache_hook`` → ``sink.begin``;
* ``knobs.compilation.listener`` → per-stage times (µs) and the disk-cache hit, matched to the
  compile in flight (several compiles of one kernel can be in flight in asynchronous compile
  mode), or a *listener-only* compile (Inductor, direct ``triton.compile``, degraded mode).
  Outside ``error`` mode the listener also ends the compile (``sink.end``) and
  ``knobs.runtime.jit_post_compile_hook`` is left as it was: Triton builds a ``repr``,
  specialization data and a keyword dict for every occupied JIT hook slot on every compile, so
  an empty post-compile slot takes that price off every compile (``docs/triton-support.md``);
* ``knobs.runtime.jit_post_compile_hook`` → ``jitwatch_jit_post_compile_hook`` → ``sink.end``,
  in ``error`` mode only (it raises :class:`~jitwatch.errors.ServingCompileError` there during
  serving, after Triton stored the kernel in its caches), and as a fallback once jitwatch's
  listener is found cut out of Triton's slot (:meth:`TritonBackend.listener_lost`);
* ``knobs.autotuning.listener`` (3.8+) or the ``Autotuner`` wrappers (3.4-3.7) → an ``autotune``
  capture per benchmark sweep.

A compile that raises (``CompilationError``, a ptxas error in an autotune config) calls no
Triton hook after ``jit_cache_hook``. So a synchronous compile is begun *watched*
(:meth:`~jitwatch.backends.base.CompileSink.begin_watched`) with its thread's id, which the hook
reads anyway; the compiling thread looks at no frame. On the journal writer's thread, once the
compile is 1 s old, the core walks that thread's stack and :class:`_FrameWatcher` looks there for
the ``JITFunction._do_compile`` frame whose ``signature`` argument is the very dict the hook got
(``compile["signature"]``; a fresh one per ``_do_compile`` call): once none is, the compile left
without a post-compile hook, the core drops it from the in-flight compiles and
:class:`_FrameWatcher` forgets it here and names the cause. A compile in Triton's asynchronous
compile mode (``triton.AsyncCompileMode``: ``_do_compile`` returns a future at once and the
post-compile hook fires when it is finalized) is begun unwatched; one whose hook call carried no
signature dict (a direct call of the hook, not from ``_do_compile``) is never dropped.

On the compiling thread the hooks read only what Triton hands them — the kernel's ``name``, the
``JITFunction``'s identity and the in-memory cache key (a ``str`` in Triton 3.5+) — plus one clock
read in the core, and keep references to the rest; names of constexprs, signature, options,
``specialization_data``, the source hash, stage times and the module are decoded by
:func:`_capture` on the journal writer's thread (``docs/architecture.md``, "The compiling thread").
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import CodeType, FrameType, ModuleType
from typing import Any

from jitwatch.backends.base import BackendStatus, Capture, CompileKind, CompileSink, LibraryBackend
from jitwatch.backends.explain import ExactKeyFixes, Reason, Seen
from jitwatch.backends.triton import explain as _explain
from jitwatch.backends.triton.hooks import HookLink, HookSet, TritonSupport
from jitwatch.config import Mode
from jitwatch.errors import ServingCompileError

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


_PLAIN = frozenset((str, int, float, bool, type(None)))
"""Types :func:`jsonable` returns as they are: a value of one of them is stored without a call."""


def compile_detail(kwargs: dict[str, Any], jit_function: Any, cache_key: str | None = None) -> dict[str, Any]:
    """``attrs`` of a compile event from the post-compile hook's keywords (writer thread).

    ``signature`` (parameter → Triton type), ``constexprs`` (named), ``declared_constexprs`` (the
    parameters declared ``tl.constexpr``: :func:`declared_constexprs`), ``options``,
    ``is_warmup_call``, ``specialization_data`` (Triton's JSON, what ``JITFunction.preload``
    takes), ``source_hash`` (``JITFunction.cache_key``: a hash of the kernel's source and
    dependencies, computed by Triton for this very compile) and ``cache_key`` (the compile's
    persistent-cache hash, ``metadata["hash"]`` from ``knobs.compilation.listener``: the
    ``TRITON_CACHE_DIR`` entry is its base32, the Redis remote cache's ``{key}`` too).
    """
    return _detail(_compile_info(kwargs), kwargs.get("is_manual_warmup", _UNSET), jit_function, cache_key)


_UNSET: Any = object()


def _detail(info: Any, warm: Any, jit_function: Any, cache_key: str | None) -> dict[str, Any]:
    """:func:`compile_detail` of Triton's ``compile`` dict ``info`` and ``is_manual_warmup``
    ``warm`` (:data:`_UNSET`: not given, ``info["is_warmup"]`` then); the keys in the order 0.1
    stored them. Values of the types in :data:`_PLAIN` (nearly all of them: Triton's types are
    strings, constexprs and options numbers) are taken as they are; :func:`jsonable` is called
    for the rest."""
    if info.__class__ is not dict:
        info = info if isinstance(info, dict) else {}
    if warm is _UNSET:
        warm = info.get("is_warmup")
    signature = info.get("signature")
    sig: dict[str, Any] | None = None
    if isinstance(signature, dict):
        sig = dict(signature)  # parameter name → Triton type: str → str (a C copy), else converted
        for k, v in sig.items():
            if k.__class__ is not str or v.__class__ not in _PLAIN:
                sig = {str(k): jsonable(v) for k, v in signature.items()}
                break
    options: dict[str, Any] = {}
    for k in OPTION_NAMES:
        v = info.get(k, _UNSET)
        if v is not _UNSET:
            options[k] = v if v.__class__ in _PLAIN else jsonable(v)
    out: dict[str, Any] = {
        "signature": sig,
        "constexprs": _constexprs(info.get("constants"), getattr(jit_function, "arg_names", None)),
        "options": options,
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
    declared = declared_constexprs(jit_function)
    if declared is not None:
        out["declared_constexprs"] = declared
    if cache_key is not None:
        out["cache_key"] = cache_key
        cache = cache_kind()
        if cache is not None:
            out["cache"] = cache
    return out


def declared_constexprs(jit_function: Any) -> list[str] | None:
    """The names of the kernel's parameters declared ``tl.constexpr`` (``JITFunction.constexprs``,
    their indices, with ``arg_names``; Triton 3.x), or ``None`` when the function does not say.
    Triton's signature and ``constants`` also show an integer argument passed as 1 as a constexpr
    (its ``==1`` specialization); this list tells the two apart. Writer thread; never raises."""
    try:
        indices, names = jit_function.constexprs, jit_function.arg_names
        return [str(names[i]) for i in indices]
    except Exception:  # noqa: BLE001 - not a JITFunction, or another Triton
        return None


def _constexprs(constants: Any, arg_names: Any) -> dict[str, Any]:
    """:func:`name_constexprs`, with the usual shape — one-element index paths, plain values —
    named without a call per item."""
    if constants.__class__ is not dict or arg_names.__class__ is not list:
        return name_constexprs(constants, arg_names if isinstance(arg_names, list) else None)
    out: dict[str, Any] = {}
    n = len(arg_names)
    for path, value in constants.items():
        if path.__class__ is tuple and len(path) == 1 and path[0].__class__ is int and 0 <= path[0] < n:
            name = arg_names[path[0]]
            if name.__class__ is not str:
                return name_constexprs(constants, arg_names)
            out[name] = value if value.__class__ in _PLAIN else jsonable(value)
        else:
            return name_constexprs(constants, arg_names)
    return out


def cache_kind() -> str | None:
    """``"remote"`` when Triton's cache manager (``knobs.cache.manager_class``,
    ``TRITON_CACHE_MANAGER``) is its ``RemoteCacheManager`` or a subclass (a compile's cache hit
    is then a remote-cache hit), ``"local"`` for the default file cache, ``None`` if unknown.
    Called on the writer thread (inside ``Capture.detail``); the knob is read every call (it can
    change at run time), the modules are imported once."""
    try:
        knobs_cache, remote = _CACHE_KNOBS or _cache_knobs()
        manager = knobs_cache.manager_class
        if manager is None:
            return "local"
        return "remote" if isinstance(manager, type) and issubclass(manager, remote) else "local"
    except Exception:  # noqa: BLE001 - an older Triton, or a manager class that does not import
        return None


_CACHE_KNOBS: list[Any] = []
"""``[triton.knobs.cache, RemoteCacheManager]`` once :func:`cache_kind` imported them."""


def _cache_knobs() -> list[Any]:
    import triton
    from triton.runtime.cache import RemoteCacheManager

    _CACHE_KNOBS[:] = [triton.knobs.cache, RemoteCacheManager]
    return _CACHE_KNOBS


# A compile in flight (jit_cache_hook → compilation listener → jit_post_compile_hook): a list,
# built with one BUILD_LIST on the compiling thread, indexed by these. The listener fills
# _P_SEEN.._P_META; ``_capture`` reads it all on the journal writer's thread. _P_IDENT is its key
# in the pending table, (_P_FID, _P_KEY), kept so that the listener does not build it again.
_P_TOKEN, _P_FN, _P_KEY, _P_COMPILE, _P_WARM, _P_NAME, _P_FID = range(7)
_P_SEEN, _P_TIMES, _P_HIT, _P_META, _P_IDENT = range(7, 12)
_TRITON = "triton"
_COMPILE = CompileKind.COMPILE


def _entry(token: Any, fn: Any, key: str | None, compile: Any, warm: Any, name: str, fid: int) -> list[Any]:
    return [token, fn, key, compile, warm, name, fid, False, None, None, None, (fid, key)]


def _slow_names(fn: Any) -> tuple[str, int]:
    """(kernel name, ``id`` of the ``JITFunction``) when ``fn`` is not a well-formed ``JitFunctionInfo``."""
    return fn_names(fn)[0], id(getattr(fn, "jit_function", None))


def _slow_key(key: Any, compile: Any) -> str | None:
    """:func:`hook_key` for a key that is not a ``str`` (Triton < 3.5, or malformed keywords)."""
    return hook_key({"key": key, "compile": compile})


def _do_compile_code() -> CodeType | None:
    """The code object of ``triton.runtime.jit.JITFunction._do_compile`` (through ``__wrapped__``
    if someone wrapped it): the frame that calls ``jit_cache_hook`` and, when a synchronous
    compile succeeds, ``jit_post_compile_hook`` (Triton 3.4-3.9). ``None`` if not found."""
    try:
        from triton.runtime.jit import JITFunction

        fn = inspect.unwrap(inspect.getattr_static(JITFunction, "_do_compile"))
        code = getattr(fn, "__code__", None)
        return code if isinstance(code, CodeType) else None
    except Exception:  # noqa: BLE001 - a vendor build without it: compiles are begun unwatched
        return None


def _async_mode_var() -> tuple[bool, Any]:
    """(whether this Triton has an asynchronous compile mode, the ``ContextVar`` that says one
    is active on this context: ``triton.runtime._async_compile.active_mode``, Triton 3.5+)."""
    try:
        from triton.runtime import _async_compile
    except Exception:  # noqa: BLE001 - before 3.5: no asynchronous compile mode
        return False, None
    var = getattr(_async_compile, "active_mode", None)
    return True, (var if callable(getattr(var, "get", None)) else None)


class _FrameWatcher:
    """The Triton side of watched compiles (:class:`~jitwatch.backends.base.FrameWatcher`),
    called by the core on the journal writer's thread."""

    __slots__ = ("code", "last", "lost", "pending", "replaced", "superseded")

    def __init__(
        self,
        code: CodeType,
        pending: dict[tuple[int, str | None], list[Any]],
        replaced: Callable[[str], bool] = lambda slot: False,
        lost: Callable[[], bool] | None = None,
    ) -> None:
        self.code = code
        self.pending = pending
        self.replaced = replaced
        """``slot → bool``: whether that Triton hook slot no longer holds jitwatch's own callable
        (:meth:`HookSet.replaced`): the cause of an abandoned compile then names the hook."""
        self.lost = lost
        """Called when a compile succeeded without jitwatch's listener while the listener was
        replaced (see :meth:`abandoned`); returns whether jitwatch took the post-compile slot for
        later compiles just now (``False`` in ``error`` mode, or once it already has)."""
        self.last: dict[int, list[Any]] = {}
        """:attr:`TritonBackend._last` (thread id → the entry its listener has not taken yet):
        an abandoned compile's entry is taken out of it by :meth:`abandoned`."""
        self.superseded: dict[int, list[Any]] = {}
        """``id(token)`` → the pending entry of a compile that raised and was begun again on its
        thread before the sweep dropped it (:meth:`CompileSink.begun_again`); emptied by
        :meth:`abandoned`."""

    def running(self, token: Any, stack: Sequence[FrameType]) -> bool | None:
        """Whether the compile begun with ``token`` still runs on ``stack`` (its thread's frames,
        innermost first): whether a frame there runs ``JITFunction._do_compile`` with, as its
        ``signature`` argument, the very dict the compile's ``jit_cache_hook`` call carried
        (``compile["signature"]``: Triton 3.4-3.9 build one per ``_do_compile`` call and hand
        that same dict to the hook). Identity, not frame ids: a retry of a compile that raised
        (the same kernel and key, on the same thread) runs with a dict of its own, and hooks
        chained around jitwatch's add frames without mattering. Frames' locals are read here,
        on the journal writer's thread (``frame.f_locals``), never on the compiling thread.

        ``None`` (cannot tell, kept) for a compile whose hook call carried no signature dict:
        not Triton's ``_do_compile`` calling (a test or tool calling the hook directly) or a
        hook chained on top of jitwatch's that rewrote the keywords. A compile no longer held
        here (its end is under way: the listener or the post-compile hook took it out and ends it
        next, inside ``_do_compile``; or the hooks were taken out) runs while any
        ``_do_compile`` frame is on the stack."""
        is_compile = self._is_do_compile
        entry = self._entry(token)
        if entry is None:
            return any(is_compile(frame.f_code) for frame in stack)
        info = entry[_P_COMPILE]
        signature = dict.get(info, "signature") if isinstance(info, dict) else None  # (a subclass's get not run)
        if not isinstance(signature, dict):
            return None
        for frame in stack:
            if is_compile(frame.f_code) and _local(frame, "signature") is signature:
                return True
        return self._elsewhere(signature)

    def _elsewhere(self, signature: dict[Any, Any]) -> bool:
        """Whether a ``_do_compile`` frame on any thread's stack holds ``signature``: the compile
        runs on another thread than the one that called jitwatch's hook (a ``jit_cache_hook`` on
        top of jitwatch's that calls it on a thread of its own, then joins it; that thread is gone
        while the compile runs). Asked only before answering ``False``, so once per compile
        dropped; the frames are not kept."""
        is_compile = self._is_do_compile
        for top in sys._current_frames().values():
            frame: FrameType | None = top
            while frame is not None:
                if is_compile(frame.f_code) and _local(frame, "signature") is signature:
                    return True
                frame = frame.f_back
        return False

    def _is_do_compile(self, code: Any) -> bool:
        """Whether ``code`` is Triton's ``JITFunction._do_compile``: :attr:`code`, or a code object
        named ``_do_compile`` with a ``signature`` variable. The second is Triton's own where
        ``JITFunction._do_compile`` was wrapped, before jitwatch installed, by a callable without
        ``__wrapped__`` (a profiler's ``def timed(self, *args, **kwargs)``): :attr:`code` is then
        the wrapper's, whose frame holds no ``signature``, and every compile 1 s old was dropped
        while it ran."""
        return code is self.code or (code.co_name == "_do_compile" and "signature" in code.co_varnames)

    def _entry(self, token: Any) -> list[Any] | None:
        """The pending entry of the compile begun with ``token`` (a compile that raised and was
        begun again: :attr:`superseded`), or ``None``."""
        found = self.superseded.get(id(token))
        if found is not None and found[_P_TOKEN] is token:
            return found
        for entry in list(self.pending.values()):  # a C-level copy
            if entry[_P_TOKEN] is token:
                return entry
        return None

    def abandoned(self, token: Any) -> tuple[str, str | None]:
        """Forget the compile begun with ``token`` (out of the compiles in flight, so the
        compilation listener never matches it) and say why it never ended, from whether the
        compilation listener saw it."""
        found = self.superseded.pop(id(token), None)
        for tid, entry in list(self.last.items()):  # a C-level copy
            if entry[_P_TOKEN] is token and self.last.get(tid) is entry:
                self.last.pop(tid, None)  # (a compile of that thread beginning in between: matched by _match)
        candidates: list[tuple[tuple[int, str | None] | None, list[Any]]] = (
            [(None, found)] if found is not None and found[_P_TOKEN] is token else []
        )
        for ident, entry in candidates or list(self.pending.items()):  # a C-level copy
            if entry[_P_TOKEN] is token:
                # Not atomic with the get: a compile of the same kernel and key beginning in
                # between loses its start (its end is then recorded as a compile whose start
                # was not seen), never its event.
                if ident is not None and self.pending.get(ident) is entry:
                    self.pending.pop(ident, None)
                if (
                    ident is not None  # not a failed compile begun again (its retry may be cached)
                    and not entry[_P_SEEN]
                    and self.lost is not None
                    and self.replaced("compilation_listener")
                    and _cached(entry)
                    and self.lost()  # only where the listener was ending compiles (not error mode)
                ):
                    return (
                        "Triton compiled and cached it but jitwatch's compilation listener was never "
                        "called: knobs.compilation.listener was replaced without chaining to jitwatch's; "
                        "jitwatch now ends compiles in jit_post_compile_hook",
                        entry[_P_KEY],
                    )
                if entry[_P_SEEN]:
                    return (
                        "Triton compiled it (the compilation listener saw it) but jitwatch's "
                        "jit_post_compile_hook never ran: a jit_post_compile_hook chained on top of "
                        "jitwatch's raised first (vLLM's monitor does in its error mode), or storing "
                        "the kernel raised",
                        entry[_P_KEY],
                    )
                if self.replaced("compilation_listener"):
                    return (
                        "jitwatch's jit_post_compile_hook never ran and jitwatch's compilation listener did "
                        "not see it, but triton.knobs.compilation.listener now holds another callable than "
                        "jitwatch's: the compile raised inside Triton, or — if that listener does not call "
                        "jitwatch's — Triton compiled it and a jit_post_compile_hook chained on top of "
                        "jitwatch's raised (jitwatch cannot tell which)",
                        entry[_P_KEY],
                    )
                if self.replaced("jit_cache_hook"):
                    return (
                        "no compilation listener call, no jit_post_compile_hook: the compile raised inside "
                        "Triton, or the jit_cache_hook installed on top of jitwatch's raised or returned a "
                        "truthy value after calling it (Triton then skips the compile and the launch)",
                        entry[_P_KEY],
                    )
                return (
                    "the compile raised inside Triton (no compilation listener call, no "
                    "jit_post_compile_hook): a CompilationError, a ptxas error (often one autotune "
                    "config) or an interrupt; the exception went to the host",
                    entry[_P_KEY],
                )
        return ("JITFunction._do_compile returned or raised without jit_post_compile_hook", None)


def _local(frame: FrameType, name: str) -> Any:
    """Local ``name`` of ``frame`` (another thread's, running), or ``None``. Writer thread only:
    ``f_locals`` builds the frame's locals dict (3.11, 3.12) or a proxy over them (3.13+)."""
    try:
        return frame.f_locals.get(name)
    except Exception:  # noqa: BLE001 - an odd frame: not the compile's
        return None


def _cached(entry: list[Any]) -> bool:
    """Whether Triton's in-memory kernel cache holds the compiled kernel of ``entry`` now
    (``JITFunction.device_caches[device][0][key]``, Triton 3.4-3.9, stored right after
    ``triton.compile`` returns): the compile succeeded. Never raises (``False`` if unsure)."""
    try:
        info = entry[_P_COMPILE]
        caches = entry[_P_FN].jit_function.device_caches
        kernel = caches[info["device"]][0].get(entry[_P_KEY])
    except Exception:  # noqa: BLE001 - another Triton layout: unsure
        return False
    return kernel is not None and hasattr(kernel, "metadata")


def listener_seconds(times: Any) -> float:
    """A compile's seconds from the compilation listener's ``times`` (``knobs.CompileTimes``,
    integer µs; the fields :func:`stage_seconds` reads): ``ir_initialization + Σ lowering_stages
    + store_results`` summed as integers and divided once — what ``CompileTimes.total`` computes
    (a property summing a generator, in 3.6 and 3.9 at least; twice as slow here) — in a plain loop
    (~0.3 µs on the 2-core VM; :func:`stage_seconds` and a sum of its values ~1.2 µs). The exact
    sum of the stage times Triton reported: the float sum of :func:`stage_seconds`'s values, which
    the event's ``attrs.stages`` hold, can differ from it in the last bit or two. Anything else
    (``None``, a vendor's object) takes :func:`stage_seconds`. Never raises."""
    try:
        us = times.ir_initialization + times.store_results
        for _stage, stage_us in times.lowering_stages:
            us += stage_us
        return us / 1e6
    except Exception:  # noqa: BLE001 - not a CompileTimes: decode it
        return sum(stage_seconds(times).values())


_LISTENER_SOURCE = _explain.LISTENER_ONLY_SOURCE


def _listener_capture(arg: tuple[Any, Any, Any, Any]) -> Capture:
    """The :class:`Capture` of a listener-only compile (:meth:`TritonBackend._listener_only`),
    built on the journal writer's thread: the kernel's name and Triton's cache hash as its key
    (read on the compiling thread), stage times, the disk-cache hit."""
    name, key, times, hit = arg
    return Capture(
        _TRITON,
        name,
        key,
        _COMPILE,
        None if hit is None else bool(hit),
        None,
        stage_seconds(times),
        {"source": _LISTENER_SOURCE},
    )


def _capture(entry: list[Any]) -> Capture:
    """The :class:`Capture` of one JIT compile, built on the journal writer's thread
    (:meth:`CompileSink.end`): names, module, signature, constexprs, options, stage times,
    the persistent-cache hash — everything the compiling thread only held references to."""
    fn = entry[_P_FN]
    module = getattr(fn, "module", None)
    if module.__class__ is not str:
        module = fn_names(fn)[1]
    metadata = entry[_P_META]
    cache_key = metadata.get("hash") if metadata.__class__ is dict else None
    hit = entry[_P_HIT]
    warm = entry[_P_WARM]
    detail = _detail(
        entry[_P_COMPILE],
        _UNSET if warm is None else warm,
        getattr(fn, "jit_function", None),
        cache_key if cache_key.__class__ is str else None,
    )
    detail["stages"] = stage_seconds(entry[_P_TIMES])
    return Capture(
        _TRITON, entry[_P_NAME], entry[_P_KEY], _COMPILE, None if hit is None else bool(hit), module, None, detail
    )


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
        self._pending: dict[tuple[int, str | None], list[Any]] = {}
        """(``id`` of the ``JITFunction``, key) → the compile in flight (see ``_P_*``). Only
        single dict operations touch it (atomic under the GIL): no lock on the compiling thread."""
        self._last: dict[int, list[Any]] = {}
        """Thread id (``threading.get_ident()``) → the compile that thread began last and whose
        compilation listener has not come yet: the one a synchronous compile's listener belongs to
        (checked by identity of Triton's ``signature`` dict). Taken out by that listener; a
        compile that raised is taken out by the sweep (:meth:`_FrameWatcher.abandoned`) or
        replaced by its thread's next compile (an unwatched one that raised on a thread that then
        ended stays until that thread id compiles again: one entry per thread id, where a
        ``threading.local`` freed it with the thread). A dict keyed by thread, not a
        ``threading.local``: one C-level store and pop instead of the local's attribute protocol
        (~1,000 instructions per compile)."""
        self.watching: str | None = None
        """Why synchronous compiles are not watched for an end that never comes (``None``: they
        are; see the module docstring), set when the hooks go in."""
        self._ending = [False]
        """``[True]`` while the compilation listener ends JIT compiles (no post-compile hook
        installed): set when the hooks go in, cleared by :meth:`listener_lost`."""
        self._lost_reason: str | None = None
        self._lost_lock = threading.Lock()

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
        return len(self._pending)

    def explain(self, new: Seen, baseline: Sequence[Seen]) -> Reason | None:
        """Why a serving compile happened: :func:`jitwatch.backends.triton.explain.explain`."""
        return _explain.explain(new, baseline)

    def by_exact_key(self, attrs: Mapping[str, Any]) -> bool:
        """Whether a compile is compared by exact key (a listener-only compile, its key Triton's
        cache hash): :func:`jitwatch.backends.triton.explain.by_exact_key`."""
        return _explain.by_exact_key(attrs)

    def exact_key_fixes(self, name: str) -> ExactKeyFixes:
        """The fixes of a listener-only serving compile of ``name``, in Triton's words:
        :func:`jitwatch.backends.triton.explain.exact_key_fixes`."""
        return _explain.exact_key_fixes(name)

    def describe_key(self, key: str | None, attrs: Mapping[str, Any]) -> str | None:
        """The specialization a key stands for, for the warning line (writer thread):
        :func:`jitwatch.backends.triton.explain.describe_key`."""
        return _explain.describe_key(key, attrs)

    def hook_in(self, module: ModuleType) -> BackendStatus:
        self._lost_reason = None
        hooks = self._hooks = HookSet(self)
        support = hooks.install()
        if support.version is None:
            return BackendStatus(self.name, "failed", degraded=support.reason)
        return self._backend_status(support)

    def _backend_status(self, support: TritonSupport) -> BackendStatus:
        hooks = self._hooks
        slots = tuple(hooks.installed_slots()) if hooks is not None else ()
        parts = [support.reason] if support.reason else []
        if self.watching is not None and support.jit_hooks:
            parts.append(f"a Triton compile that raises stays listed in flight ({self.watching})")
        if self._lost_reason is not None:
            parts.append(self._lost_reason)
        return BackendStatus(self.name, "active", support.version, slots, "; ".join(parts) or None)

    def wants(self, slot: str, support: TritonSupport) -> bool:
        """Every slot but ``jit_post_compile_hook`` outside ``error`` mode, where the compilation
        listener ends compiles (see the module docstring). A sink without a ``mode`` keeps all."""
        if slot != "jit_post_compile_hook":
            return True
        mode = getattr(self.sink, "mode", Mode.ERROR)
        self._ending[0] = ending = support.jit_hooks and support.compilation_listener and mode is not Mode.ERROR
        return not ending

    def listener_lost(self, chains: bool | None = False) -> bool:
        """jitwatch's compilation listener was cut out of Triton's slot (a host replaced
        ``knobs.compilation.listener`` without chaining): JIT compiles now end in a
        ``jit_post_compile_hook`` installed here, and the backend's status (``/jit``: hooks,
        ``degraded``) says so through ``sink.backend_ready``. Called on the journal writer's
        thread when a watched compile was found cached by Triton yet never seen by the listener
        (:class:`_FrameWatcher`), or on a compiling thread when a compile in asynchronous compile
        mode (never watched) begins while the listener slot holds another callable than
        jitwatch's (``chains``: ``None``, whether it chains is unknown there; the post-compile
        hook then ends compiles either way). Returns whether the post-compile slot is held now.
        Never raises."""
        hooks = self._hooks
        if hooks is None or not self._ending[0]:
            return False
        try:
            with self._lost_lock:  # the writer thread and compiling threads: one add_slot
                if not self._ending[0]:
                    return False
                self._ending[0] = False  # first: the listener, if it still runs, no longer ends compiles
                took = hooks.add_slot("jit_post_compile_hook")
            how = "without chaining to jitwatch's" if chains is False else "(whether it chains is unknown)"
            self._lost_reason = (
                f"knobs.compilation.listener was replaced {how}: compiles end in "
                "jit_post_compile_hook, with no stage times or disk-cache hit"
                + ("" if chains is False else " unless that listener calls jitwatch's")
            )
            if self.sink is not None:
                self.sink.backend_ready(self._backend_status(hooks.support))
            return took
        except Exception as exc:  # noqa: BLE001 - never into the writer thread
            self.report_error("listener_lost", exc)
            return False

    def _slot_replaced(self, slot: str) -> bool:
        """:meth:`HookSet.replaced` of ``slot`` (``False`` without hooks)."""
        hooks = self._hooks
        return hooks is not None and hooks.replaced(slot)

    def unhook(self) -> None:
        if self._hooks is not None:
            self._hooks.uninstall()
        self._pending.clear()
        self._last.clear()

    # ------------------------------------------------------------------ HookSink (called by HookSet)
    def on_hook_error(self, hook: str, exc: BaseException) -> None:
        self.report_error(hook, exc)

    def hook_body(self, slot: str, link: HookLink) -> Callable[..., Any]:
        """jitwatch's own callable for ``slot`` (see :meth:`HookSink.hook_body`), built once per
        installation. Each takes Triton's keywords as parameters (no ``**kwargs`` dict), holds
        what it needs in closure cells (no attribute chains) and, on the compiling thread, only
        takes references and one clock read (in ``sink.begin``/``sink.end``); everything else is
        decoded on the journal writer's thread by :func:`_capture`."""
        sink = self.sink
        if sink is None:
            raise RuntimeError("TritonBackend.hook_body before install()")
        if slot == "jit_cache_hook":
            return self._make_pre(link, sink)
        if slot == "jit_post_compile_hook":
            return self._make_post(link, sink)
        if slot == "compilation_listener":
            return self._make_listener(link)
        return self._make_autotune(link)

    def _make_pre(self, link: HookLink, sink: CompileSink) -> Callable[..., Any]:
        """``jit_cache_hook``: a compile starts (phase and request are taken now, by the core).

        A synchronous compile is begun watched (``sink.begin_watched``) with the thread id the
        hook reads anyway (for :attr:`_last`): no frame is looked at on the compiling thread; the
        sweep on the journal writer's thread finds the compile's ``JITFunction._do_compile``
        frame by its ``signature`` dict (:meth:`_FrameWatcher.running`). One in asynchronous
        compile mode is begun unwatched."""
        begin, cancel, report = sink.begin, sink.cancel, self.report_error
        pending, last, backend, get_ident = self._pending, self._last, self.name, threading.get_ident
        found = _do_compile_code()
        has_async, async_var = _async_mode_var()
        begin_watched = getattr(sink, "begin_watched", None)
        begun_again = getattr(sink, "begun_again", None)
        if found is None:
            self.watching = "JITFunction._do_compile not found"
        elif has_async and async_var is None:
            self.watching = "triton.runtime._async_compile.active_mode not found"
        elif begin_watched is None:
            self.watching = "the sink has no begin_watched"
        else:
            self.watching = None
        watch = self.watching is None
        code: CodeType = found if found is not None else _do_compile_code.__code__  # never matched unless watching
        watcher = _FrameWatcher(code, pending, self._slot_replaced, self.listener_lost)
        watcher.last = last
        ending, replaced, lost = self._ending, self._slot_replaced, self.listener_lost
        superseded = watcher.superseded
        async_get = async_var.get if async_var is not None else None

        def jitwatch_jit_cache_hook(
            *args: Any,
            key: Any = None,
            repr: Any = None,
            fn: Any = None,
            compile: Any = None,
            is_manual_warmup: Any = None,
            already_compiled: Any = None,
            **future: Any,
        ) -> None:
            if not link.live:
                return None
            try:
                try:
                    name, fid = fn.name, id(fn.jit_function)
                    if name.__class__ is not str:
                        raise AttributeError
                except AttributeError:
                    name, fid = _slow_names(fn)
                if key.__class__ is not str:
                    key = _slow_key(key, compile)
                tid = get_ident()
                if async_get is not None and async_get() is not None:  # asynchronous compile mode: unwatched
                    if ending[0] and replaced("compilation_listener"):
                        # Never watched, so never found by the sweep: if that listener does not
                        # chain, this compile would never end. The post-compile hook ends it instead.
                        lost(None)
                    token = begin(backend, name)
                elif watch:
                    token = begin_watched(backend, name, tid, watcher)  # type: ignore[misc]
                else:
                    token = begin(backend, name)
                ident = (fid, key)
                entry = [token, fn, key, compile, is_manual_warmup, name, fid, False, None, None, None, ident]
                held = pending.setdefault(ident, entry)  # one atomic step: check and insert
                if held is not entry:  # the same kernel and key began before and never ended
                    held_token = held[_P_TOKEN]
                    if begun_again is not None:  # kept where FrameWatcher.abandoned finds it, first
                        superseded[id(held_token)] = held
                    pending[ident] = entry
                    if begun_again is None:
                        cancel(held_token)
                    elif not begun_again(held_token):  # another thread's compile: cancelled
                        superseded.pop(id(held_token), None)
                    # else a retry of a compile that raised on this thread: left for the sweep
                last[tid] = entry
            except Exception as exc:  # noqa: BLE001 - never into Triton
                report("jit_cache_hook", exc)
            return None  # never truthy: a truthy value makes Triton skip compile and launch

        return jitwatch_jit_cache_hook

    def _make_listener(self, link: HookLink) -> Callable[..., Any]:
        """``compilation.listener``: stage times and disk-cache hit for the matching compile in
        flight (references only; decoded on the writer thread), or a listener-only compile."""
        last, report, match, alone = self._last, self.report_error, self._match, self._listener_only
        ending, pending, get_ident = self._ending, self._pending, threading.get_ident
        sink = self.sink
        end = sink.end if sink is not None else None

        def jitwatch_compilation_listener(
            *args: Any,
            src: Any = None,
            metadata: Any = None,
            metadata_group: Any = None,
            times: Any = None,
            cache_hit: Any = None,
            **future: Any,
        ) -> Any:
            if not link.live:
                return None
            try:
                # A synchronous compile: the one this thread began last, same signature object.
                # Else another compile in flight (match), or none: a listener-only compile, found
                # without raising (a raise and catch costs the compiling thread ~1 µs).
                entry = last.pop(get_ident(), None)
                try:
                    if (
                        entry is None
                        or entry[_P_SEEN]
                        or entry[_P_COMPILE]["signature"] is not src.signature
                        or entry[_P_FN].jit_function is not src.fn  # (id(...) != id(...) without two ints)
                    ):
                        if entry is not None and not entry[_P_SEEN]:
                            last.setdefault(get_ident(), entry)  # not this listener's: left for its own
                        entry = match(src, metadata) if pending else None
                except (AttributeError, LookupError, TypeError):
                    entry = match(src, metadata)
                if entry is not None:
                    entry[_P_TIMES] = times
                    entry[_P_HIT] = cache_hit
                    entry[_P_META] = metadata
                    entry[_P_SEEN] = True
                    if ending[0] and end is not None:  # no post-compile hook: the compile ends here
                        ident = entry[_P_IDENT]
                        if pending.get(ident) is entry:
                            pending.pop(ident, None)
                        end(entry[_P_TOKEN], entry[_P_KEY], _capture, entry)
                else:
                    alone(src, metadata, times, cache_hit)
            except ServingCompileError:
                raise  # error mode, listener-only compile
            except Exception as exc:  # noqa: BLE001
                report("compilation_listener", exc)
            return None

        return jitwatch_compilation_listener

    def _make_post(self, link: HookLink, sink: CompileSink) -> Callable[..., Any]:
        """``jit_post_compile_hook``: the compile ended (raises ``ServingCompileError`` in error mode)."""
        begin, end, report, pending, backend = sink.begin, sink.end, self.report_error, self._pending, self.name

        def jitwatch_jit_post_compile_hook(
            *args: Any,
            key: Any = None,
            repr: Any = None,
            fn: Any = None,
            compile: Any = None,
            is_manual_warmup: Any = None,
            already_compiled: Any = None,
            **future: Any,
        ) -> None:
            if not link.live:
                return None
            try:
                try:
                    fid = id(fn.jit_function)
                except AttributeError:
                    fid = id(None)
                if key.__class__ is not str:
                    key = _slow_key(key, compile)
                entry = pending.pop((fid, key), None)
                if entry is None:  # pre-hook missed (installed mid-compile, or another hook swallowed it)
                    name, fid = _slow_names(fn)
                    entry = _entry(begin(backend, name), fn, key, compile, is_manual_warmup, name, fid)
                end(entry[_P_TOKEN], key, _capture, entry)
            except ServingCompileError:
                raise  # error mode: the one deliberate raise
            except Exception as exc:  # noqa: BLE001
                report("jit_post_compile_hook", exc)
            return None

        return jitwatch_jit_post_compile_hook

    def _make_autotune(self, link: HookLink) -> Callable[..., Any]:
        on_autotune, report = self.on_autotune, self.report_error

        def jitwatch_autotuning_listener(*args: Any, **kwargs: Any) -> None:
            if not link.live:
                return None
            try:
                on_autotune(kwargs)
            except ServingCompileError:
                raise
            except Exception as exc:  # noqa: BLE001
                report("autotuning_listener", exc)
            return None

        return jitwatch_autotuning_listener

    def on_compile_skipped(self, kwargs: dict[str, Any]) -> None:
        """A hook chained below jitwatch's ``jit_cache_hook`` raised or returned truthy: no compile."""
        fn = kwargs.get("fn")
        ident = (id(getattr(fn, "jit_function", None)), hook_key(kwargs))
        entry = self._pending.pop(ident, None)
        if entry is not None and self.sink is not None:
            self.sink.cancel(entry[_P_TOKEN])

    def _listener_only(self, src: Any, metadata: Any, times: Any, cache_hit: Any) -> None:
        """A compile that did not come through ``JITFunction`` (Inductor, ``triton.compile``, …),
        or a Triton without the JIT hooks (degraded mode): ended with
        :meth:`~jitwatch.backends.base.CompileSink.ended`. On the compiling thread: the kernel's
        name and Triton's cache hash from ``metadata`` (two dictionary reads), the duration from
        ``times`` (:func:`listener_seconds`) and a tuple of references; the stage times are decoded
        and the :class:`Capture` built by :func:`_listener_capture` on the journal writer's thread.
        """
        sink = self.sink
        if sink is None:
            return
        if isinstance(metadata, dict):
            name = metadata.get("name")
            key = metadata.get("hash")
        else:
            name = key = None
        if name.__class__ is not str or not name:
            name = str(name or getattr(src, "name", None) or "<unknown>")
        if key is not None and key.__class__ is not str:
            key = str(key)
        duration = listener_seconds(times)
        arg = (name, key, times, cache_hit)
        ended = getattr(sink, "ended", None)
        if ended is not None:
            ended(_TRITON, name, key, duration, _listener_capture, arg)
        else:  # a sink without CompileSink.ended: the Capture is built here
            sink.record(_listener_capture(arg), start_ts=time.time() - duration, duration_s=duration)

    def _match(self, src: Any, metadata: Any) -> list[Any] | None:
        """The compile in flight that ``src`` belongs to when it is not the one this thread began
        last (asynchronous compile mode compiles on a pool thread; vLLM's parallel warmup). Several
        compiles of one kernel can be in flight and finish in any order: match on the signature,
        constants, attrs and options ``src`` carries.

        The signature must be the very dict the JIT hooks got: ``JITFunction._do_compile``
        (3.4-3.9) builds the ``ASTSource`` from the ``signature`` it passes to ``jit_cache_hook``.
        An equal but distinct dict is a compile that bypassed ``JITFunction`` (Inductor, a direct
        ``triton.compile`` of the same kernel on this or another thread): never a JIT compile in
        flight, which it would otherwise end (outside ``error`` mode the listener ends compiles)
        with its own duration, stage times and disk-cache hit."""
        fn = getattr(src, "fn", None)
        if fn is None:
            return None
        if not isinstance(metadata, dict):
            metadata = {}
        fid = id(fn)
        sig = getattr(src, "signature", None)
        consts = getattr(src, "constants", None)
        attrs = getattr(src, "attrs", None)
        unsure: list[Any] | None = None
        for p in list(self._pending.values()):  # a C-level copy: safe against concurrent hooks
            if p[_P_FID] != fid or p[_P_SEEN]:
                continue
            info = p[_P_COMPILE] if isinstance(p[_P_COMPILE], dict) else {}
            if "signature" not in info:
                unsure = unsure or p  # malformed hook kwargs: cannot tell
                continue
            if info.get("signature") is not sig or info.get("constants") != consts:
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
        configs = len(timings) if isinstance(timings, dict) else None

        def detail() -> dict[str, Any]:  # on the journal writer's thread: Config.__str__ formats every kwarg
            return {"source": source, "configs": configs, "best_config": str(best) if best is not None else None}

        self.sink.record(
            Capture(
                backend=self.name,
                name=kernel,
                key=str(key) if key is not None else None,
                kind=CompileKind.AUTOTUNE,
                module=module,
                detail=detail,
            ),
            start_ts=time.time() - seconds,
            duration_s=seconds,
        )


__all__ = ["TritonBackend", "compile_detail", "fn_names", "hook_key", "jsonable", "name_constexprs", "stage_seconds"]
