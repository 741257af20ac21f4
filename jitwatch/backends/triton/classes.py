"""Triton's per-argument specialization classes, named once for every place jitwatch shows them.

Triton 3.x (``JITFunction.run`` → ``native_specialize_impl``; the same in 3.6 and 3.9) puts each
argument of a launch in one ``(type, spec)`` entry of its in-memory key (:mod:`.keys`). This
module names that entry's class; the reason of a serving compile and the warning line
(:mod:`.explain`) and the coverage report (:mod:`jitwatch.views.coverage`) all read it here, so
the same argument has the same class name everywhere:

* pointer: ``('*fp32', 'D')`` → ``*fp32 aligned16`` (``data_ptr() % 16 == 0``); ``('*fp32', '')`` →
  ``*fp32 unaligned``; coverage ``*fp32:aligned16``, ``*fp32:unaligned``;
* int: ``('i32', 'D')`` → ``i32 %16`` (0 included); ``('i32', '')`` → ``i32 other``; coverage
  ``i32:%16``, ``i32:other``;
* int passed as 1: ``('constexpr', 1)`` → ``==1`` in both (Triton folds it into a constant: no int
  type in the key);
* pointer or int under ``do_not_specialize``: ``('i32', None)`` → ``i32 any``; coverage ``i32:any``
  (any value; the type is still in the key);
* bool, float: ``('u1', None)`` → ``u1`` in both (never value-specialized);
* ``tl.constexpr``: ``('constexpr', 64)`` → ``constexpr 64``; coverage ``=64``.

An int's type is ``i32`` for ``-2**31 <= v < 2**31``, ``i64`` outside that up to the int64 range,
``u64`` from ``2**63`` (:func:`int_type`); a Python ``bool`` is ``u1`` (an int to Python, not to
Triton). Pure functions of their arguments; nothing imported from Triton.
"""

from __future__ import annotations

from typing import Any

INT_TYPES = frozenset(("i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"))
"""Triton's integer argument types (a ``bool`` is ``u1``, not one of them)."""

ALIGNED = "aligned16"
UNALIGNED = "unaligned"
DIVISIBLE = "%16"
OTHER = "other"
ANY = "any"
ONE = "==1"
CONSTEXPR = "constexpr"
BOOL = "u1"

INT_RANGES = {"i32": "-2^31 ≤ value < 2^31", "i64": "value ≥ 2^31 or < -2^31", "u64": "value ≥ 2^63"}
"""The values Triton types as each int type (``native_specialize_impl``), for fixes."""


INT_EXAMPLES = {
    ("i32", DIVISIBLE): "16",
    ("i32", OTHER): "7",
    ("i64", DIVISIBLE): "2**31 + 16",
    ("i64", OTHER): "2**31 + 1",
    ("i64", ANY): "2**31",
    ("u64", DIVISIBLE): "2**63 + 16",
    ("u64", OTHER): "2**63 + 1",
    ("u64", ANY): "2**63",
}
"""A value of each int class, for fixes (``i32 any``: any i32, no example needed)."""

_VOWEL_SOUND = frozenset("aefhilmnorsx")
"""Letters whose spoken name starts with a vowel sound ("an i64", "an fp32", "an s…"; "a u64",
"a bf16")."""


def article(ty: Any) -> str:
    """The indefinite article before a type's name as it is read aloud, letter by letter:
    ``an`` before ``i32``, ``i64``, ``fp32`` (*eye*, *eff*), ``a`` before ``u64``, ``u1``, ``bf16``
    (*you*, *bee*). Never raises."""
    first = str(ty).lstrip("*")[:1].lower()
    return "an" if first in _VOWEL_SOUND else "a"


def int_type(value: int) -> str:
    """The type Triton gives a Python int argument: ``i32``, ``i64`` or ``u64`` (see
    :data:`INT_RANGES`)."""
    if -(2**31) <= value < 2**31:
        return "i32"
    if -(2**63) <= value < 2**63:
        return "i64"
    return "u64"


def is_int_type(ty: Any) -> bool:
    """Whether ``ty`` (a key entry's type) is one of Triton's integer types."""
    return isinstance(ty, str) and ty in INT_TYPES


def is_folded_one(entry: tuple[Any, Any], int_arg: bool) -> bool:
    """Whether ``entry`` is an int argument passed as 1: Triton writes it ``('constexpr', 1)``
    (``int_arg`` says the argument is an int, not a declared ``tl.constexpr``)."""
    return int_arg and entry[0] == CONSTEXPR and entry[1] == 1 and not isinstance(entry[1], bool)


def class_of(entry: tuple[Any, Any], *, int_arg: bool = False, align: bool = True) -> tuple[str | None, str | None]:
    """``(type, class)`` of one key entry ``(type, spec)``, in the module table's words:
    ``('i32', '%16')``, ``(None, '==1')`` (an int passed as 1, ``int_arg``), ``('u1', None)``,
    ``('constexpr', '64')`` (the value's ``repr``). ``align`` is false for an argument under
    ``do_not_specialize_on_alignment``, whose ``''`` spec means *any* (no ``% 16`` test). Never
    raises."""
    ty, spec = entry
    if ty == CONSTEXPR:
        if is_folded_one(entry, int_arg):
            return None, ONE
        return CONSTEXPR, repr(spec)
    if not isinstance(ty, str):
        return repr(entry), None
    if ty.startswith("*"):
        if spec == "D":
            return ty, ALIGNED
        return ty, ANY if spec is None or not align else UNALIGNED
    if ty in INT_TYPES:
        if spec is None or (spec == "" and not align):
            return ty, ANY
        return ty, DIVISIBLE if spec == "D" else OTHER
    return ty, None


def words(ty: str | None, cls: str | None) -> str:
    """A class as the reason, ``jitwatch why`` and the warning line write it: ``i32 %16``,
    ``==1``, ``u1``, ``constexpr 64``."""
    return " ".join(p for p in (ty, cls) if p)


def label(ty: str | None, cls: str | None) -> str:
    """A class as coverage labels it: ``i32:%16``, ``==1``, ``u1``, ``=64`` (a constexpr's value)."""
    if ty == CONSTEXPR:
        return f"={cls}"
    return ":".join(p for p in (ty, cls) if p)


def served_type(entry: tuple[Any, Any], int_arg: bool) -> str | None:
    """The type of the value behind ``entry``: an int passed as 1 is an ``i32`` (the type it has
    under ``do_not_specialize``, where Triton does not fold it), else the entry's type."""
    if is_folded_one(entry, int_arg):
        return "i32"
    ty = entry[0]
    return ty if isinstance(ty, str) else None


__all__ = [
    "ALIGNED",
    "ANY",
    "BOOL",
    "CONSTEXPR",
    "DIVISIBLE",
    "INT_EXAMPLES",
    "INT_RANGES",
    "INT_TYPES",
    "ONE",
    "OTHER",
    "UNALIGNED",
    "article",
    "class_of",
    "int_type",
    "is_folded_one",
    "is_int_type",
    "label",
    "served_type",
    "words",
]
