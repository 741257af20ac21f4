"""JIT backends: one folder each, found by name, selected by ``JITWATCH_BACKENDS``.

Built-in backends are listed in :data:`BUILTIN` (``name → "module:Class"``); third-party ones
register a class under the ``jitwatch.backends`` entry-point group of their own package::

    [project.entry-points."jitwatch.backends"]
    my_dsl = "my_package.jitwatch_backend:MyDSLBackend"

Looking backends up imports only the backend modules themselves, never the libraries they
watch (each backend's module defers that import to :meth:`~jitwatch.backends.base.Backend.install`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from jitwatch.backends.base import Backend
from jitwatch.errors import BackendError
from jitwatch.text import logger

log = logger(__name__)

ENTRY_POINT_GROUP = "jitwatch.backends"

BUILTIN: dict[str, str] = {
    "triton": "jitwatch.backends.triton:TritonBackend",
    "torch_compile": "jitwatch.backends.torch_compile:TorchCompileBackend",
    "cutedsl": "jitwatch.backends.cutedsl:CuteDSLBackend",
    "tilelang": "jitwatch.backends.tilelang:TileLangBackend",
    "flashinfer": "jitwatch.backends.flashinfer:FlashInferBackend",
    "deepgemm": "jitwatch.backends.deepgemm:DeepGemmBackend",
}
"""Backends shipped with jitwatch: name → ``"module:Class"``."""


def _load(target: str) -> type[Backend]:
    module_name, _, attr = target.partition(":")
    obj: type[Backend] = getattr(importlib.import_module(module_name), attr)
    return obj


def _entry_points() -> dict[str, Callable[[], type[Backend]]]:
    out: dict[str, Callable[[], type[Backend]]] = {}
    try:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # noqa: BLE001 - broken metadata must not stop the host
        log.warning("jitwatch: cannot read %s entry points: %s", ENTRY_POINT_GROUP, exc)
        return out
    for ep in eps:
        if ep.name in BUILTIN:
            if ep.value != BUILTIN[ep.name]:
                log.warning(
                    "jitwatch: ignoring entry point %s=%s: %r is a built-in backend", ep.name, ep.value, ep.name
                )
            continue
        out[ep.name] = ep.load
    return out


def registry() -> dict[str, Callable[[], type[Backend]]]:
    """Every known backend: name → a function that imports and returns its class."""
    out: dict[str, Callable[[], type[Backend]]] = {name: partial(_load, target) for name, target in BUILTIN.items()}
    out.update(_entry_points())
    return out


def check_names(names: Sequence[str], known: Mapping[str, object] | None = None) -> None:
    """Raise :class:`BackendError` when a name in ``names`` is not a known backend (built-in or a
    ``jitwatch.backends`` entry point; ``known``: :func:`registry`'s answer, when the caller has
    it); reads entry-point metadata only, imports nothing.

    Raises:
        BackendError: ``unknown backend ... in JITWATCH_BACKENDS; known: ...`` (``backends`` for more than one).
    """
    known = registry() if known is None else known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BackendError(
            f"unknown {'backend' if len(unknown) == 1 else 'backends'} {', '.join(unknown)} in JITWATCH_BACKENDS;"
            f" known: {', '.join(sorted(known))}"
        )


def create(names: Sequence[str] | None = None) -> list[Backend]:
    """Instantiate the backends named (``None``: every known one; the order of :func:`registry`).

    A backend whose class cannot be imported is logged and left out (a broken third-party package
    must not stop the host), so is one that does not follow the :class:`Backend` protocol.

    Raises:
        BackendError: a name in ``names`` is not a known backend (``JITWATCH_BACKENDS`` typo).
    """
    known = registry()
    wanted = list(known) if names is None else list(names)
    check_names(wanted, known)
    out: list[Backend] = []
    for name in wanted:
        try:
            cls = known[name]()
            backend = cls()
        except Exception as exc:  # noqa: BLE001
            log.error("jitwatch: cannot load backend %r: %s: %s", name, type(exc).__name__, exc)
            continue
        if not isinstance(backend, Backend) or getattr(backend, "name", None) != name:
            log.error("jitwatch: backend %r (%s) does not implement jitwatch.backends.base.Backend", name, cls)
            continue
        out.append(backend)
    return out


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "check_names", "create", "registry"]
