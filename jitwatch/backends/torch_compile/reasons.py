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
"""One line of advice per reason class (``attrs.fixes`` of a recompile; shown by ``jitwatch why``)."""

_PREFIX = re.compile(r"^\s*\d+/\d+:\s*")


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


__all__ = ["FIRST_COMPILE", "FIXES", "REASON_CLASSES", "reason_class"]
