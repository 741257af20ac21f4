"""Triton's in-memory specialization keys, parsed as data (``ast.literal_eval``, never ``eval``)."""

from __future__ import annotations

import ast
from typing import Any


def parse_key(key: str) -> list[tuple[Any, ...]] | None:
    """Split Triton's in-memory cache key into its per-argument specialization tuples.

    Triton 3.5+ builds the key as ``str(specialization) + str(options)``, e.g.
    ``"[('*fp32', 'D'), ('i32', ''), ('constexpr', 64)]{'debug': False}"``. Each tuple is
    ``(type, spec)``: ``spec`` is ``'D'`` (pointer 16-byte aligned / int divisible by 16), ``''``
    (neither), ``None`` (not specialized: ``do_not_specialize``, floats, bools) or, for
    ``'constexpr'``, the value (an int equal to 1 becomes ``('constexpr', 1)``). Parsed with
    :func:`ast.literal_eval` (never ``eval``); returns ``None`` if the key has another shape.
    """
    end = _list_end(key)
    if end < 0:
        return None
    try:
        value = ast.literal_eval(key[: end + 1])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, list) or not all(isinstance(v, tuple) for v in value):
        return None
    return value


def key_options_text(key: str) -> str | None:
    """The ``str(options)`` part of a key (after the specialization list), ``None`` if no list."""
    end = _list_end(key)
    return None if end < 0 else key[end + 1 :]


def _list_end(key: str) -> int:
    """Index of the ``]`` closing the key's leading specialization list (quote-aware), else -1."""
    if not key.startswith("["):
        return -1
    depth = 0
    in_str: str | None = None
    esc = False
    end = -1
    for i, ch in enumerate(key):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == in_str:
                in_str = None
            continue
        if ch in "'\"":
            in_str = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
            if depth == 0:
                end = i
                break
    return end


def parse_key_options(key: str) -> dict[str, Any] | None:
    """The options dict that follows the specialization list in Triton's key (``{'debug': False,
    'num_warps': 2, …}``; launch options appear there when the caller or an autotune config set
    them). Parsed with :func:`ast.literal_eval`; ``None`` if there is none or it does not parse."""
    tail = (key_options_text(key) or "").strip()
    if not tail.startswith("{"):
        return None
    try:
        value = ast.literal_eval(tail)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


__all__ = ["key_options_text", "parse_key", "parse_key_options"]
