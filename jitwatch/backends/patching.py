"""Wrapping a library's Python function without ever breaking it: the shared helper of the DSL backends.

CuTeDSL, TileLang and FlashInfer have no compile callback like Triton's ``jit_cache_hook``: the
only stable entry points are Python functions and methods (``cutlass.cute.compile``,
``tilelang.jit.kernel.JITKernel.__init__``, ``flashinfer.jit.core.JitSpec.build_and_load``). A
backend replaces such an attribute with a wrapper made here, and the wrapper keeps every promise
of the original:

* **the same call**: ``*args, **kwargs`` are passed on untouched (a keyword a newer library
  version adds reaches it), the return value and any exception the original raises reach the
  caller unchanged (same object, same traceback);
* **the same face**: :func:`functools.wraps` copies ``__name__``, ``__qualname__``, ``__doc__``,
  ``__module__`` and ``__dict__`` and sets ``__wrapped__``, so :func:`inspect.signature` of the
  wrapper is the original's; ``staticmethod``/``classmethod`` stay what they were;
* **jitwatch's own failures stay inside**: an exception in the backend's ``before``/``after`` code
  is passed to ``on_error`` (the backend counts it with ``CompileSink.hook_error``, which logs it)
  and the original runs or its result is returned as if jitwatch were absent. The one deliberate
  exception is :class:`jitwatch.errors.ServingCompileError` (``error`` mode), raised from
  ``after`` once the compile is recorded, or from ``before`` to refuse a compile at its start
  (``CompileSink.admit``: the original then never runs);
* **undo**: :meth:`Patch.restore` puts the original back when the attribute still holds this
  wrapper, and otherwise (someone wrapped *our* wrapper afterwards, e.g. vLLM's JIT monitor
  installed after jitwatch) turns the wrapper into a pass-through, so the other wrapper's chain
  keeps working. Either install order with another wrapper works: each calls the next.

Cost: one attribute check and two calls per wrapped call; nothing is wrapped on a kernel-launch
path (the backends wrap compile entry points only).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from jitwatch.errors import ServingCompileError
from jitwatch.text import logger

log = logger(__name__)

ErrorHandler = Callable[[str, BaseException], None]


class Around(Protocol):
    """What a backend runs around one wrapped call.

    ``before(args, kwargs)`` runs first and returns a state (``None``: nothing to record for this
    call, e.g. an in-memory cache hit). When it returned a state, ``after(state, result)`` runs
    after the original returned and ``failed(state, exc)`` after it raised. ``before`` and
    ``after`` may raise :class:`~jitwatch.errors.ServingCompileError`; anything else raised by
    these three is a jitwatch bug and goes to the patch's ``on_error``.
    """

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

    def after(self, state: Any, result: Any) -> None: ...

    def failed(self, state: Any, exc: BaseException) -> None: ...


class CancelOnFailure:
    """Mixin for an :class:`Around` whose state begins with the token its ``before`` got from
    ``sink.begin``: when the wrapped call raises, that compile did not happen, so ``failed``
    cancels it (nothing is recorded; the exception reaches the host unchanged)."""

    backend: Any

    def failed(self, state: Any, exc: BaseException) -> None:
        sink = self.backend.sink
        if sink is not None:
            sink.cancel(state[0])


_MISSING = object()


@dataclass
class Patch:
    """One replaced attribute: ``owner.attr`` was ``original`` (raw, as found in ``owner.__dict__``
    for a class) and is now ``installed``. ``active`` False makes the wrapper a pass-through."""

    owner: Any
    attr: str
    original: Any
    installed: Any
    where: str
    own_attribute: bool
    active: bool = True
    errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def restore(self) -> None:
        """Undo: put the original back if ``owner.attr`` is still this wrapper, else leave the
        attribute (another wrapper sits on top of ours) and make ours a pass-through. Idempotent."""
        self.active = False
        current = _raw(self.owner, self.attr)
        if current is not self.installed:
            return
        if self.own_attribute:
            setattr(self.owner, self.attr, self.original)
        else:  # the original came from a base class: remove our override
            try:
                delattr(self.owner, self.attr)
            except AttributeError:
                pass


def _raw(owner: Any, attr: str) -> Any:
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in klass.__dict__:
                return klass.__dict__[attr]
        return _MISSING
    return getattr(owner, attr, _MISSING)


def wrap_function(
    function: Callable[..., Any], around: Around, *, where: str, on_error: ErrorHandler, patch: Patch | None = None
) -> Callable[..., Any]:
    """A wrapper of ``function`` that runs ``around`` (see the module docstring for its promises).

    ``patch``, when given, is consulted for ``active`` and counts ``errors``.
    """

    def report(exc: BaseException) -> None:
        if patch is not None:
            with patch._lock:
                patch.errors += 1
                first = patch.errors == 1
        else:
            first = True
        if first:
            log.debug("jitwatch: wrapper of %s failed once (counted from now on): %r", where, exc)
        try:
            on_error(where, exc)
        except Exception:  # noqa: BLE001 - reporting must never reach the host
            pass

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if patch is not None and not patch.active:
            return function(*args, **kwargs)
        try:
            state = around.before(args, kwargs)
        except ServingCompileError:
            raise  # error mode refusing a compile at its start (CompileSink.admit)
        except Exception as exc:  # noqa: BLE001 - a jitwatch bug must not stop the host's call
            report(exc)
            state = None
        if state is None:
            return function(*args, **kwargs)
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:
            try:
                around.failed(state, exc)
            except Exception as inner:  # noqa: BLE001
                report(inner)
            raise
        try:
            around.after(state, result)
        except ServingCompileError:
            raise
        except Exception as exc:  # noqa: BLE001
            report(exc)
        return result

    return wrapper


def patch_attribute(owner: Any, attr: str, around: Around, *, where: str, on_error: ErrorHandler) -> Patch:
    """Replace ``owner.attr`` (a module's function, a class's method, staticmethod or
    classmethod) with a wrapper running ``around``; return the :class:`Patch` that undoes it.

    Raises:
        AttributeError: ``owner`` has no ``attr`` (a library version without this entry point:
            the backend reports itself degraded or failed instead).
        TypeError: the attribute is not callable.
    """
    raw = _raw(owner, attr)
    if raw is _MISSING:
        raise AttributeError(f"{where}: {getattr(owner, '__name__', owner)!r} has no attribute {attr!r}")
    own = not isinstance(owner, type) or attr in owner.__dict__
    patch = Patch(owner, attr, raw, None, where, own)
    if isinstance(raw, staticmethod):
        installed: Any = staticmethod(wrap_function(raw.__func__, around, where=where, on_error=on_error, patch=patch))
    elif isinstance(raw, classmethod):
        installed = classmethod(wrap_function(raw.__func__, around, where=where, on_error=on_error, patch=patch))
    elif callable(raw):
        installed = wrap_function(raw, around, where=where, on_error=on_error, patch=patch)
    else:
        raise TypeError(f"{where}: {attr!r} is not callable ({type(raw).__name__})")
    patch.installed = installed
    setattr(owner, attr, installed)
    return patch


def unwrap_chain(function: Any) -> list[Any]:
    """``function`` and every ``__wrapped__`` below it (for status and tests)."""
    out = [function]
    seen = {id(function)}
    while (inner := getattr(out[-1], "__wrapped__", None)) is not None and id(inner) not in seen:
        out.append(inner)
        seen.add(id(inner))
    return out


__all__ = ["Around", "CancelOnFailure", "ErrorHandler", "Patch", "patch_attribute", "unwrap_chain", "wrap_function"]
