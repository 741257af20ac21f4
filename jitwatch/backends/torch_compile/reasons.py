"""Dynamo's guard-failure text → a bounded reason class (a metric label).

Dynamo states why it recompiles as the first failing guard of the previous cache entry, prefixed
with that entry's compile id (``torch._dynamo.guards.get_and_maybe_log_recompilation_reasons``,
torch 2.11-2.13), e.g.::

    0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1
    0/1: tensor 'x' dtype mismatch. expected Float, actual Double
    0/0: flag == True                       # a Python value guard, with its source line
    0/0: ___check_obj_id(L['self'].mode, 140…)

The verbatim text stays in the event (``key`` and ``attrs.reason``); :func:`reason_class` folds
it into one of :data:`REASON_CLASSES` so that ``jitwatch_recompiles_total`` keeps a bounded label.
"""

from __future__ import annotations

import functools
import re

from jitwatch.backends.base import RECOMPILE_REASON_CLASSES

FIRST_COMPILE = "first compile"
"""A frame's first compile (no previous cache entry failed a guard)."""

REASON_CLASSES: tuple[str, ...] = RECOMPILE_REASON_CLASSES
"""Every value :func:`reason_class` returns (the ``reason_class`` label's whole domain)."""

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bsize mismatch\b|\bsizes? changed\b"), "size mismatch"),
    (re.compile(r"\bstride mismatch\b"), "stride mismatch"),
    (re.compile(r"\bdtype mismatch\b"), "dtype mismatch"),
    (re.compile(r"\bdevice mismatch\b"), "device mismatch"),
    (re.compile(r"\brequires_grad mismatch\b"), "requires_grad mismatch"),
    (re.compile(r"\brank mismatch\b|\bdimensionality\b"), "rank mismatch"),
    (
        re.compile(r"global[_ ]state|grad_mode|autocast|deterministic_algorithms|TorchFunctionMode", re.IGNORECASE),
        "global state",
    ),
    (re.compile(r"___check_type_id|\btype\(|\bisinstance\(|type mismatch"), "type change"),
    (re.compile(r"___check_obj_id|\bis not\b|\bid\("), "identity change"),
    (
        re.compile(r"==|!=|<=|>=|<|>|\blen\(|___check_len|\bnot\b|ValueMatch|EQUALS_MATCH|___dict_contains"),
        "value change",
    ),
)

FIXES: dict[str, str] = {
    "size mismatch": "warm this size, or mark the dimension dynamic (torch._dynamo.mark_dynamic / "
    "torch.compile(dynamic=True)); sizes 0 and 1 are always specialized",
    "stride mismatch": "pass contiguous inputs (or warm this layout)",
    "dtype mismatch": "warm this dtype, or cast inputs to the warmed dtype before the compiled call",
    "device mismatch": "warm on this device",
    "requires_grad mismatch": "serve under torch.no_grad()/inference_mode() as in warmup",
    "rank mismatch": "warm this number of dimensions",
    "value change": "warm this value, or make it a tensor / drop the Python branch on it "
    "(torch._dynamo.config.specialize_int=False for ints)",
    "type change": "warm this argument type",
    "identity change": "keep the guarded object alive and the same between calls (or warm the new one)",
    "global state": "serve under the global state warmup used (grad mode, autocast, deterministic algorithms)",
}
"""One line of advice per reason class (``attrs.fixes`` of a recompile; shown by ``jitwatch why``),
unless :func:`fix_for` has a concrete one (a size mismatch with its sizes: :func:`size_fix`)."""

_PREFIX = re.compile(r"^\s*\d+/\d+:\s*")

_SIZE_MISMATCH = re.compile(
    r"^\s*(?:(?P<graph>\d+/\d+):\s*)?tensor '(?P<tensor>.+?)' size mismatch at index (?P<index>\d{1,19})\. "
    r"expected (?P<expected>\d{1,19}), actual (?P<actual>\d{1,19})\b"
)
"""Dynamo's size guard failure (``0/0: tensor 'x' size mismatch at index 0. expected 1, actual 2``):
the first one of the line (``recompiles_verbose`` joins several with ``; ``); sizes of at most 19
digits (a tensor's sizes are int64: a longer number is no size to read)."""

FIX_CACHE_LINE_MAX = 1024
"""The longest reason line whose fix :func:`fix_for` caches (a longer one, a tensor with a huge
source name, is matched each time): the cache holds at most 256 lines of this size."""


def fix_for(reason: str | None) -> str | None:
    """The fix of a recompile whose Dynamo ``reason`` is ``reason``: for a size mismatch with its
    sizes (``tensor 'logits' size mismatch at index 0. expected 1, actual 2``) a concrete one,
    from the two sizes (:func:`size_fix`); else :data:`FIXES` of its :func:`reason_class`;
    ``None`` for a first compile or a class without advice. Read from the reason's first line
    (Dynamo appends the user's stack trace on the next ones); pure string matching, cached by that
    line (at most 256 lines of up to :data:`FIX_CACHE_LINE_MAX` characters: a recompile's reason
    repeats across ranks and restarts). Runs on the compiling thread; never raises."""
    if not reason:
        return None
    try:
        line = reason.splitlines()[0]
        return _fix_of_line(line) if len(line) <= FIX_CACHE_LINE_MAX else _fix_of_line.__wrapped__(line)
    except Exception:  # noqa: BLE001 - a fix is advice: never an exception in the host's compiled call
        return None


@functools.lru_cache(maxsize=256)
def _fix_of_line(line: str) -> str | None:
    m = _SIZE_MISMATCH.match(line)
    if m is not None:
        return size_fix(m["tensor"], int(m["index"]), int(m["expected"]), int(m["actual"]), graph=m["graph"])
    return FIXES.get(reason_class(line))


def size_fix(tensor: str, index: int, expected: int, actual: int, *, graph: str | None = None) -> str:
    """The fix of a recompile for a size mismatch of ``tensor``'s dimension ``index``: the graph
    it failed against (``graph``, Dynamo's compile id, ``0/0``) had size ``expected`` there, this
    call ``actual``. Dynamo (``automatic_dynamic_shapes``, the default) compiles the first size it
    sees for that size only and, at the second, one graph dynamic in that dimension for every size
    of 2 or more; sizes 0 and 1 are always specialized (neither ``mark_dynamic`` nor
    ``torch.compile(dynamic=True)`` covers them). So:

    * ``expected`` 0 or 1, ``actual`` 2 or more (warmup ran a batch of 1): warm with a batch of at
      least 2 as well (dimension 0; another dimension: that tensor at a size of at least 2 there);
    * ``actual`` 0 or 1: warm that size too;
    * both 2 or more: warm two different sizes, or ``mark_dynamic`` the dimension before the first
      call.

    Under ``torch.compile(dynamic=False)`` (which the compile's event does not say) no dimension
    turns dynamic: each text says so, warm every size served.
    """
    where = f"graph {graph}" if graph else "the graph it failed against"
    static = "(under torch.compile(dynamic=False) every size compiles on its own: warm each one served)"
    dim = "the batch dimension (index 0)" if index == 0 else f"dimension {index}"
    if expected <= 1 < actual:
        subject = (
            "a batch of at least 2" if index == 0 else f"tensor '{tensor}' at a size of at least 2 in dimension {index}"
        )
        return (
            f"warm with {subject} as well: {where} has '{tensor}' at size {expected} in {dim}, a size Dynamo "
            "always specializes (mark_dynamic and torch.compile(dynamic=True) do not change that), so the "
            "first size of 2 or more compiles again, one graph dynamic in that dimension for every size of 2 or "
            f"more {static}"
        )
    if actual <= 1:
        subject = f"a batch of {actual}" if index == 0 else f"tensor '{tensor}' at size {actual} in dimension {index}"
        return (
            f"warm with {subject} too: Dynamo always specializes sizes 0 and 1, so no dynamic graph covers it "
            "(mark_dynamic and torch.compile(dynamic=True) included)"
        )
    subject = (
        f"two different batch sizes of at least 2 (e.g. {expected} and {actual})"
        if index == 0
        else f"tensor '{tensor}' at two different sizes of at least 2 in dimension {index} "
        f"(e.g. {expected} and {actual})"
    )
    return (
        f"warm with {subject}: Dynamo compiles the first size it sees for that size only and makes "
        f"{dim} dynamic at the second; or mark it dynamic before the first call "
        f"(torch._dynamo.mark_dynamic(<tensor>, {index})); sizes 0 and 1 stay specialized {static}"
    )


def reason_class(reason: str | None) -> str:
    """The class of Dynamo's recompile ``reason`` (``None`` or empty → :data:`FIRST_COMPILE`).

    Returns one of :data:`REASON_CLASSES`. Pure string matching; about 2 µs per call.
    """
    if not reason:
        return FIRST_COMPILE
    text = _PREFIX.sub("", reason.splitlines()[0] if reason else "")
    for pattern, cls in _RULES:
        if pattern.search(text):
            return cls
    return "other"


__all__ = ["FIRST_COMPILE", "FIXES", "REASON_CLASSES", "fix_for", "reason_class", "size_fix"]
