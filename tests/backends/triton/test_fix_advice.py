"""The fixes jitwatch gives for an int argument whose *type* changed between warmup and serving,
checked by doing what they say: real compiles through the compile-only driver (Triton 3.9 in
``.venv``, 3.6 in ``.venv-triton36``), counting the serving compiles left after each fix.

Triton (``native_specialize_impl``) keys an int by its type (``i32`` for -2^31 ≤ v < 2^31, ``i64``
beyond) and, unless ``do_not_specialize``, by its class (``==1`` folded into a constant, ``%16``,
``other``); a Python bool is ``u1``, never an int. ``do_not_specialize`` drops the class, not the
type. So an int warmed as an i64 and served as 1 is not fixed by ``do_not_specialize`` alone, and a
bool served where warmup passed an int is fixed only by warming a bool.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import Phase
from jitwatch.testing import fresh_kernel_cache, monitored


@triton.jit
def fa_scale(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask) * 2.0, mask=mask)


@triton.jit(do_not_specialize=["n"])
def fa_scale_dns(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask) * 2.0, mask=mask)


@triton.jit
def fa_flag(src_ptr, dst_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs)
    if flag:
        x = x * 2.0
    tl.store(dst_ptr + offs, x)


@triton.jit(do_not_specialize=["flag"])
def fa_flag_dns(src_ptr, dst_ptr, flag, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs)
    if flag:
        x = x * 2.0
    tl.store(dst_ptr + offs, x)


BIG = 2**31 + 16
"""An int Triton types i64 (≥ 2^31), a multiple of 16."""


def _launch(kernel: Any, value: Any) -> None:
    x, y = torch.zeros(64), torch.zeros(64)
    kernel.warmup(x, y, value, BLOCK=64, grid=(1,))


def serve(
    tmp_path: Path, kernel: Any, warm: Sequence[Any], served: Sequence[Any], caplog: pytest.LogCaptureFixture
) -> tuple[list[Any], list[str], Path]:
    """One worker: ``kernel`` warmed with each of ``warm``, then called with each of ``served`` in a
    request. Returns its serving compile events, its warning lines and its journal."""
    fresh_kernel_cache(kernel)
    jdir = tmp_path / f"j{len(list(tmp_path.iterdir()))}"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        with monitored(journal_dir=jdir, triton_cache_dir=tmp_path / "triton-cache") as h:
            with h.monitor.warmup():
                for v in warm:
                    _launch(kernel, v)
            with h.monitor.request("r"):
                for v in served:
                    _launch(kernel, v)
            compiles = h.compiles(Phase.SERVING)
    lines = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    return compiles, lines, jdir


def why_lines(jdir: Path) -> list[str]:
    out = CliRunner().invoke(app, ["why", "--journal-dir", str(jdir)], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    return [ln.strip() for ln in out.output.splitlines() if ln.startswith("  why: ") or ln.startswith("  fix: ")]


def test_int_warmed_as_i64_served_as_1_fix_names_the_type(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Warmed with an int > 2^31 (i64), served with 1: the fix is to warm 1 itself, or
    do_not_specialize *and* an i32 value; do_not_specialize alone still compiles, which the
    fix no longer suggests."""
    serving, lines, jdir = serve(tmp_path, fa_scale, [BIG], [1], caplog)
    assert [e.attrs["reason"] for e in serving] == ["n: i64 %16 → ==1"]
    (fix,) = serving[0].attrs["fixes"]
    assert fix.startswith("warm n=1 ") and 'do_not_specialize=["n"] in @triton.jit and warm n with an i32 value' in fix
    assert "(one binary for every value)" not in fix
    assert why_lines(jdir) == ["why: n: i64 %16 → ==1", f"fix: {fix}"]
    assert len(lines) == 1 and ": n: i64 %16 → ==1 (fix: warm n=1 " in lines[0], lines
    assert "(value 1)" not in lines[0] and "n: ==1," in lines[0]

    # the fix's first half: warm 1 too → no serving compile
    assert serve(tmp_path, fa_scale, [BIG, 1], [1], caplog)[0] == []
    # do_not_specialize alone (the old fix): 1 still compiles, and jitwatch says to warm an i32
    serving, _, _ = serve(tmp_path, fa_scale_dns, [BIG], [1], caplog)
    assert [e.attrs["reason"] for e in serving] == ["n: i64 any → i32 any"]
    assert serving[0].attrs["fixes"] == [
        "warm n with a value of type i32 (the int's type is in the key even under do_not_specialize)"
    ]
    # the fix's second half: do_not_specialize and an i32 value (any: 7 here) → 1, 16 and 5 compile nothing
    assert serve(tmp_path, fa_scale_dns, [BIG, 7], [1, 16, 5, 2**31 + 3], caplog)[0] == []
    # without do_not_specialize, an i32 value other than 1 does not cover 1 (the ==1 class)
    assert [e.attrs["reason"] for e in serve(tmp_path, fa_scale, [BIG, 7], [1], caplog)[0]] == ["n: i32 other → ==1"]


def test_int_warmed_as_i32_served_as_i64_fix_says_which_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The other way round: warmed with 16 (i32), served with 2^31 + 3 (i64, not a multiple of 16):
    the fix names an i64 value of that class, which then covers it."""
    serving, _, _ = serve(tmp_path, fa_scale, [16], [2**31 + 3], caplog)
    assert [e.attrs["reason"] for e in serving] == ["n: i32 %16 → i64 other"]
    (fix,) = serving[0].attrs["fixes"]
    assert fix.startswith(
        "warm n with an i64 value that is not a multiple of 16 (value ≥ 2^31 or < -2^31; e.g. 2**31 + 1), or "
    )
    assert "warm n with an i64 value too" in fix
    assert serve(tmp_path, fa_scale, [16, -(2**31) - 5], [2**31 + 3], caplog)[0] == []
    assert serve(tmp_path, fa_scale_dns, [16, 2**40], [2**31 + 3], caplog)[0] == []


@pytest.mark.parametrize("kernel", [fa_flag, fa_flag_dns], ids=["specialized", "do_not_specialize"])
def test_bool_passed_to_an_int_parameter_fix_is_to_warm_a_bool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kernel: Any
) -> None:
    """Warmed with an int, served with True: Triton types the bool u1, so neither do_not_specialize
    nor another int removes the compile; warming a bool (False covers True) does."""
    serving, lines, jdir = serve(tmp_path, kernel, [7], [True], caplog)
    before = "i32 other" if kernel is fa_flag else "i32 any"
    assert [e.attrs["reason"] for e in serving] == [f"flag: {before} → u1"]
    (fix,) = serving[0].attrs["fixes"]
    assert fix.startswith("warm flag with a bool too (True or False)"), fix
    assert "neither 1 nor a multiple of 16" not in fix and 'do_not_specialize=["flag"]' not in fix
    assert why_lines(jdir) == [f"why: flag: {before} → u1", f"fix: {fix}"]
    assert f"(fix: {fix})" in lines[0]
    assert serve(tmp_path, kernel, [7, False], [True, False], caplog)[0] == []
    # ints of every class do not cover a bool
    assert len(serve(tmp_path, kernel, [7, 16, 1], [True], caplog)[0]) == 1


def test_int_passed_to_a_parameter_warmed_with_a_bool(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Warmed with a bool only, served with 7: the fix asks for an int of 7's class."""
    serving, _, _ = serve(tmp_path, fa_flag, [True], [7], caplog)
    assert [e.attrs["reason"] for e in serving] == ["flag: u1 → i32 other"]
    (fix,) = serving[0].attrs["fixes"]
    assert fix.startswith("warm flag with an i32 value neither 1 nor a multiple of 16 (e.g. 7) too: "), fix
    assert serve(tmp_path, fa_flag, [True, 3], [7], caplog)[0] == []


def example(fix: str) -> int:
    """The value a fix gives as ``(…; e.g. 2**31 + 16)`` / ``(e.g. 16)``, as an int (digits, ``**``, ``+``
    only)."""
    import re

    m = re.search(r"e\.g\. ([0-9*+ ]+)\)", fix)
    assert m, fix
    total = 0
    for term in m.group(1).split("+"):
        base, _, exp = term.strip().partition("**")
        total += int(base) ** int(exp) if exp else int(base)
    return total


TYPE_CHANGES = [
    # warmed with, served, reason, the fix's first words (the type named), a value of the old type and the
    # served class that does not cover it (what "warm n = a multiple of 16" read as, warmup having passed one)
    (BIG, 16, "n: i64 %16 → i32 %16", "warm n with an i32 multiple of 16 (e.g. 16), or ", 2**32),
    (
        BIG,
        7,
        "n: i64 %16 → i32 other",
        "warm n with an i32 value neither 1 nor a multiple of 16 (e.g. 7), or ",
        BIG + 1,
    ),
    (
        16,
        BIG,
        "n: i32 %16 → i64 %16",
        "warm n with an i64 multiple of 16 (value ≥ 2^31 or < -2^31; e.g. 2**31 + 16)",
        32,
    ),
    (16, 2**63 + 32, "n: i32 %16 → u64 %16", "warm n with a u64 multiple of 16 (value ≥ 2^63; e.g. 2**63 + 16), ", BIG),
    (
        2**63 + 32,
        7,
        "n: u64 %16 → i32 other",
        "warm n with an i32 value neither 1 nor a multiple of 16 (e.g. 7)",
        2**63 + 1,
    ),
]


@pytest.mark.parametrize(
    ("warm", "served", "reason", "start", "old_type"), TYPE_CHANGES, ids=[c[2] for c in TYPE_CHANGES]
)
def test_type_change_fix_names_the_type_and_its_example_covers_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, warm: int, served: int, reason: str, start: str, old_type: int
) -> None:
    """A pure type change (``i64 %16 → i32 %16``): the fix names the new type and gives a value of
    it, which, warmed, covers the served one; a value of the warmed type in the same class (what an
    untyped "a multiple of 16" allows) does not. Articles read aloud: "an i32", "a u64"."""
    serving, lines, jdir = serve(tmp_path, fa_scale, [warm], [served], caplog)
    assert [e.attrs["reason"] for e in serving] == [reason]
    (fix,) = serving[0].attrs["fixes"]
    assert fix.startswith(start), fix
    assert "an u" not in fix and "a i" not in fix.replace("a int", "")
    assert why_lines(jdir) == [f"why: {reason}", f"fix: {fix}"] and f"(fix: {fix})" in lines[0]
    assert serve(tmp_path, fa_scale, [warm, example(fix)], [served], caplog)[0] == []
    assert len(serve(tmp_path, fa_scale, [warm, old_type], [served], caplog)[0]) == 1


def test_class_names_agree_between_the_warn_line_why_and_coverage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One worker, two kernels: the class of each served argument reads the same in the warning
    line, ``jitwatch why`` and ``jitwatch coverage`` (``i32 any`` / ``i32:any``, ``==1``,
    ``aligned16``), from :mod:`jitwatch.backends.triton.classes`."""
    import json

    from jitwatch.backends.triton import classes

    jdir = tmp_path / "j"
    fresh_kernel_cache(fa_scale, fa_scale_dns)
    x, y = torch.zeros(64), torch.zeros(64)
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        with monitored(journal_dir=jdir, triton_cache_dir=tmp_path / "tc") as h:
            with h.monitor.warmup():
                fa_scale.warmup(x, y, 16, BLOCK=64, grid=(1,))
                fa_scale_dns.warmup(x, y, BIG, BLOCK=64, grid=(1,))
            fa_scale.warmup(x, y[1:], 1, BLOCK=64, grid=(1,))
            fa_scale_dns.warmup(x, y, 5, BLOCK=64, grid=(1,))
            h.monitor.flush()
    lines = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    reasons = ["dst_ptr: *fp32 aligned16 → unaligned; n: i32 %16 → ==1", "n: i64 any → i32 any"]
    assert [ln.split(" on rank 0: ", 1)[1].split(" (fix: ")[0] for ln in lines] == reasons
    assert "dst_ptr: *fp32 unaligned, n: ==1, BLOCK: constexpr 64" in lines[0]
    assert "n: i32 any, BLOCK: constexpr 64" in lines[1]
    assert [ln for ln in why_lines(jdir) if ln.startswith("why: ")] == [f"why: {r}" for r in reasons]

    out = CliRunner().invoke(app, ["coverage", "--journal-dir", str(jdir), "--json"])
    assert out.exit_code == 0, out.output
    report = {k["kernel"]: k for k in json.loads(out.stdout)["kernels"]}
    only = {k: {a["name"]: a["serving_only"] for a in v["arguments"] if a["serving_only"]} for k, v in report.items()}
    one, any_i32 = classes.label(None, classes.ONE), classes.label("i32", classes.ANY)
    assert only == {"fa_scale": {"dst_ptr": ["*fp32:unaligned"], "n": [one]}, "fa_scale_dns": {"n": [any_i32]}}
    assert (one, any_i32) == ("==1", "i32:any")
    assert [m["reason"] for k in ("fa_scale", "fa_scale_dns") for m in report[k]["missing"]] == reasons
    # the same class, written each way: words in the reason, label in coverage
    for ty, cls in (("i32", classes.ANY), (None, classes.ONE), ("*fp32", classes.UNALIGNED)):
        assert classes.words(ty, cls) in " ".join(lines) and classes.label(ty, cls) in json.dumps(only)


def test_describe_and_classify_use_the_same_class_names() -> None:
    """coverage's ``classify`` (a value) and the reason's words (a key entry) name the same class."""
    from jitwatch.backends.triton import classes
    from jitwatch.backends.triton.explain import describe_key
    from jitwatch.views.coverage import ArgInfo, classify

    key = "[('*fp32', 'D'), ('*fp32', ''), ('i64', None), ('constexpr', 1), ('u1', None), ('constexpr', 64)]{}"
    sig = {"a_ptr": "*fp32", "b_ptr": "*fp32", "m": "i64", "n": "constexpr", "flag": "u1", "BLOCK": "constexpr"}
    described = describe_key(key, {"signature": sig, "declared_constexprs": ["BLOCK"]})
    assert (
        described == "a_ptr: *fp32 aligned16, b_ptr: *fp32 unaligned, m: i64 any, n: ==1, flag: u1, BLOCK: constexpr 64"
    )
    cases: list[tuple[ArgInfo, Any, str]] = [
        (ArgInfo("m", "int", specialize=False, align=False), 2**40, "i64 any"),
        (ArgInfo("n", "int"), 1, "==1"),
        (ArgInfo("flag", "int"), True, "u1"),
    ]
    for info, value, words in cases:
        assert classify(info, value).replace(":", " ") == words and words in described
    assert classes.words("*fp32", classes.ALIGNED) in described
    assert "(value 1)" not in described and "not specialized" not in described


def test_article_before_every_type_name() -> None:
    """ "an" before a name read with a vowel sound (i…: eye, fp…: eff), "a" before the others (u…:
    you, bf…: bee), for every int type Triton has and the float and bool types."""
    from jitwatch.backends.triton import classes

    an = {t for t in classes.INT_TYPES if t.startswith("i")} | {"fp16", "fp32", "fp64", "fp8e4nv", "*fp32"}
    a = {t for t in classes.INT_TYPES if t.startswith("u")} | {"u1", "bf16", "*bf16"}
    assert len(an) == 10 and len(a) == 7
    assert {t: classes.article(t) for t in an | a} == {**dict.fromkeys(an, "an"), **dict.fromkeys(a, "a")}
