"""``compile_detail``'s fast paths (plain values taken as they are, one-element constexpr paths
named without a call) record exactly what the straightforward decoding did: compared with that
decoding (kept here as the reference) on real hook keywords and on odd shapes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from jitwatch.backends.triton.backend import (
    OPTION_NAMES,
    _capture,
    cache_kind,
    compile_detail,
    jsonable,
    name_constexprs,
)
from jitwatch.testing import TritonHookRecorder, fresh_kernel_cache


def _reference(kwargs: dict[str, Any], jit_function: Any, cache_key: str | None = None) -> dict[str, Any]:
    """``compile_detail`` as it was before the fast paths (jitwatch 5dfa503), with the declared
    constexprs added since."""
    info = kwargs.get("compile")
    info = info if isinstance(info, dict) else {}
    arg_names = getattr(jit_function, "arg_names", None)
    if not isinstance(arg_names, list):
        arg_names = None
    signature = info.get("signature")
    warm = kwargs.get("is_manual_warmup", info.get("is_warmup"))
    out: dict[str, Any] = {
        "signature": {str(k): jsonable(v) for k, v in signature.items()} if isinstance(signature, dict) else None,
        "constexprs": name_constexprs(info.get("constants"), arg_names),
        "options": {k: jsonable(info.get(k)) for k in OPTION_NAMES if k in info},
        "is_warmup_call": None if warm is None else bool(warm),
    }
    spec = info.get("specialization_data")
    if isinstance(spec, str):
        out["specialization_data"] = spec
    source_hash = getattr(jit_function, "cache_key", None)
    if isinstance(source_hash, str):
        out["source_hash"] = source_hash
    try:  # jitwatch 0.3: the parameters declared tl.constexpr, by name
        out["declared_constexprs"] = [str(jit_function.arg_names[i]) for i in jit_function.constexprs]
    except Exception:  # noqa: BLE001
        pass
    if cache_key is not None:
        out["cache_key"] = cache_key
        cache = cache_kind()
        if cache is not None:
            out["cache"] = cache
    return out


@triton.jit
def detail_kernel(out_ptr, x_ptr, n, alpha, BLOCK: tl.constexpr, FLAG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if FLAG:
        x = x * alpha
    tl.store(out_ptr + offs, x, mask=offs < n)


class _Fn:
    arg_names = ["a", "b", "c"]
    cache_key = "src-hash"


class _Str(str):
    pass


class _Constexpr:
    """Looks like ``tl.constexpr`` to :func:`jsonable` (``type(v).__name__``, ``.value``)."""

    def __init__(self, value: Any) -> None:
        self.value = value


_Constexpr.__name__ = "constexpr"

ODD: list[dict[str, Any]] = [
    {},
    {"compile": None},
    {"compile": {"signature": "not a dict", "constants": [1, 2]}},
    {"compile": {"signature": {"a": ("*fp32", "*fp16"), 3: "i32", _Str("c"): _Constexpr(4)}}},
    {"compile": {"constants": {(0,): _Constexpr(16), (1, 0): 2, "c": (1, 2), (7,): 1, (True,): 3}}},
    {"compile": {"constants": {(0,): _Constexpr(16), (1,): 2, (2,): (3, _Constexpr(4))}}},
    {"compile": {"constants": {(2,): 1.5, (0,): None}, "num_warps": _Constexpr(4), "num_stages": 2}},
    {"compile": {"is_warmup": True}, "is_manual_warmup": None},
    {"compile": {"is_warmup": 0}},
    {"compile": {"specialization_data": _Str("{}"), "enable_fp_fusion": False, "num_ctas": (1,)}},
]


@pytest.mark.parametrize("kwargs", ODD)
@pytest.mark.parametrize("cache_key", [None, "abc"])
def test_odd_shapes_are_decoded_as_before(kwargs: dict[str, Any], cache_key: str | None) -> None:
    for fn in (_Fn(), None, object()):
        assert compile_detail(kwargs, fn, cache_key) == _reference(kwargs, fn, cache_key)


def test_real_hook_keywords_are_decoded_as_before(compile_only: Any, triton_cache: Any) -> None:
    fresh_kernel_cache(detail_kernel)
    x = torch.empty(1024)
    with TritonHookRecorder() as rec:
        detail_kernel.warmup(x, x, 1024, 0.5, BLOCK=64, FLAG=True, grid=(1,))
        detail_kernel.warmup(x, x, 1000, 0.5, BLOCK=128, FLAG=False, num_warps=2, grid=(1,))
    assert len(rec.compiles) == 2
    for call in rec.compiles:
        kw = call.kwargs  # what jit_cache_hook was given; the post hook gets the same
        jf = kw["fn"].jit_function
        new, old = compile_detail(kw, jf, "h"), _reference(kw, jf, "h")
        assert new == old and list(new) == list(old)  # same fields, same order
        assert new["constexprs"] and new["options"] and new["signature"]
        # The writer thread's path (the in-flight list the hooks keep) decodes the same fields.
        entry = [None, kw["fn"], kw["key"], kw["compile"], kw.get("is_manual_warmup"), "detail_kernel", 0]
        entry += [True, None, None, {"hash": "h"}]
        captured = _capture(entry).detail
        assert isinstance(captured, dict)
        assert {k: v for k, v in captured.items() if k != "stages"} == old
