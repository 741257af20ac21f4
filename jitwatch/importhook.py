"""Run a callback right after a module is first imported, without importing it ourselves.

jitwatch must cost nothing for a library the host never imports (importing TileLang alone takes
about a second; see ``docs/architecture.md``). A backend therefore asks :func:`when_imported` to
be called back once the *host* imports the library: immediately if the module is already in
``sys.modules``, otherwise from a ``sys.meta_path`` finder (:pep:`451`) that lets the normal
finders locate the module, wraps its loader's ``exec_module`` for that one import, and calls the
callbacks after the module's code has run. The original loader is put back on the module's
``__spec__``/``__loader__`` before its code runs, so nothing of jitwatch stays on the module.

Used by every backend and by the vLLM plugin (``vllm.v1.worker.worker_base``). Callbacks run on the
importing thread, inside the host's ``import`` statement; an exception in one is passed to the
``on_error`` given and never reaches the host's import.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from jitwatch.text import logger

log = logger(__name__)

Callback = Callable[[ModuleType], None]
ErrorHandler = Callable[[str, BaseException], None]

_lock = threading.RLock()
_waiting: dict[str, list[tuple[int, Callback, ErrorHandler | None]]] = {}
_ids = iter(range(1, 2**62))
_searching = threading.local()


def _log_error(name: str, exc: BaseException) -> None:
    log.error("jitwatch: callback after importing %s failed: %s: %s", name, type(exc).__name__, exc)


def _run(name: str, module: ModuleType, callbacks: Sequence[tuple[int, Callback, ErrorHandler | None]]) -> None:
    for _, callback, on_error in callbacks:
        try:
            callback(module)
        except Exception as exc:  # noqa: BLE001 - never break the host's import
            try:
                (on_error or _log_error)(name, exc)
            except Exception:  # noqa: BLE001
                pass


class _Finder(importlib.abc.MetaPathFinder):
    """The one finder jitwatch keeps at the front of ``sys.meta_path`` while callbacks wait."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in _waiting or getattr(_searching, "active", False):
            return None
        _searching.active = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            _searching.active = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        spec.loader = _NotifyingLoader(loader, fullname)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        with _lock:
            callbacks = _waiting.pop(self._name, [])
            _maybe_remove_finder()
        _run(self._name, module, callbacks)

    def __getattr__(self, name: str) -> Any:  # get_code, is_package, get_resource_reader, ...
        return getattr(self._loader, name)


_finder = _Finder()


def _maybe_remove_finder() -> None:
    if not _waiting:
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass


def when_imported(name: str, callback: Callback, *, on_error: ErrorHandler | None = None) -> Callable[[], None]:
    """Call ``callback(module)`` once the module ``name`` is imported (now, if it already is).

    Args:
        name: full dotted module name, e.g. ``"triton"`` or ``"torch._dynamo"``.
        callback: runs on the importing thread right after the module's code ran; never imports
            ``name`` itself.
        on_error: called with ``(name, exception)`` when ``callback`` raises (default: logged).

    Returns:
        A function that cancels a callback still waiting (a no-op once it ran).
    """
    module = sys.modules.get(name)
    if module is not None:
        _run(name, module, [(0, callback, on_error)])
        return lambda: None
    with _lock:
        module = sys.modules.get(name)  # imported by another thread meanwhile
        if module is None:
            ident = next(_ids)
            _waiting.setdefault(name, []).append((ident, callback, on_error))
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
    if module is not None:
        _run(name, module, [(0, callback, on_error)])
        return lambda: None

    def cancel() -> None:
        with _lock:
            entries = _waiting.get(name)
            if entries:
                entries[:] = [e for e in entries if e[0] != ident]
                if not entries:
                    del _waiting[name]
            _maybe_remove_finder()

    return cancel


def waiting() -> dict[str, int]:
    """``{module name: callbacks waiting}`` (for status and tests)."""
    with _lock:
        return {name: len(entries) for name, entries in _waiting.items()}
