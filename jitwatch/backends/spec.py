"""Describing a DSL compile's arguments as JSON: shapes, dtypes and constexprs as the library exposes them.

DSL compilers specialize on what their arguments carry: a tensor's shape and element type
(``torch.Tensor``, CuTeDSL's ``cute.Tensor``/fake tensors, TVM buffers), Python scalars and
strings as constexprs. :func:`describe` turns one argument into a small JSON-able value without
importing any library: it reads duck-typed attributes (``shape``, ``dtype``/``element_type``,
``device``) and falls back to the type's name. Runs on the journal writer's thread (inside
``Capture.detail``), never on the compiling thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_ITEMS = 16
"""Arguments described per call (the rest are counted, not listed)."""
MAX_TEXT = 120
"""Characters kept of any one ``str()``."""


def _text(value: Any) -> str:
    try:
        out = str(value)
    except Exception:  # noqa: BLE001 - a library object whose __str__ fails
        out = f"<{type(value).__name__}>"
    return out if len(out) <= MAX_TEXT else out[: MAX_TEXT - 1] + "…"


def _shape(value: Any) -> list[Any] | str | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return [d if isinstance(d, int) else _text(d) for d in tuple(shape)]
    except Exception:  # noqa: BLE001 - symbolic shapes that do not iterate
        return _text(shape)


def describe(value: Any, depth: int = 0) -> Any:
    """A JSON-able description of one argument: ``{"type", "shape", "dtype"}`` for a tensor-like,
    the value itself for ``bool``/``int``/``float``/``str``/``None`` (constexprs), a list for a
    short tuple/list, else ``{"type": name}``."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _text(value)
    shape = _shape(value)
    if shape is not None:
        out: dict[str, Any] = {"type": type(value).__name__, "shape": shape}
        dtype = getattr(value, "dtype", None) or getattr(value, "element_type", None)
        if dtype is not None:
            out["dtype"] = _text(dtype)
        return out
    if isinstance(value, (list, tuple)) and depth < 2:
        return [describe(v, depth + 1) for v in value[:MAX_ITEMS]]
    return {"type": type(value).__name__}


def describe_call(args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"args": [...], "kwargs": {...}}`` for a call, at most :data:`MAX_ITEMS` of each."""
    out: dict[str, Any] = {"args": [describe(a) for a in list(args)[:MAX_ITEMS]]}
    if len(args) > MAX_ITEMS:
        out["args_omitted"] = len(args) - MAX_ITEMS
    if kwargs:
        items = list(kwargs.items())
        out["kwargs"] = {str(k): describe(v) for k, v in items[:MAX_ITEMS]}
    return out


__all__ = ["MAX_ITEMS", "MAX_TEXT", "describe", "describe_call"]
