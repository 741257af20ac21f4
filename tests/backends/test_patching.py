"""The shared wrapping helper of the DSL backends (``jitwatch.backends.patching``): wrapped
functions keep their signatures, return values and exceptions; jitwatch's own failures are counted
and never reach the host; uninstall restores; another wrapper (vLLM's JIT monitor) coexists in
both install orders."""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

import pytest

from jitwatch.backends.patching import patch_attribute, unwrap_chain
from jitwatch.errors import ServingCompileError


class Recorder:
    """An ``Around`` that records what it saw and can be told to fail."""

    def __init__(self, *, fail_in: str | None = None, skip: bool = False, serving_error: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail_in = fail_in
        self.skip = skip
        self.serving_error = serving_error

    def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls.append(("before", (args, dict(kwargs))))
        if self.fail_in == "before":
            raise RuntimeError("jitwatch bug in before")
        return None if self.skip else {"args": args}

    def after(self, state: Any, result: Any) -> None:
        self.calls.append(("after", result))
        if self.fail_in == "after":
            raise RuntimeError("jitwatch bug in after")
        if self.serving_error:
            raise ServingCompileError("compile in serving")

    def failed(self, state: Any, exc: BaseException) -> None:
        self.calls.append(("failed", exc))
        if self.fail_in == "failed":
            raise RuntimeError("jitwatch bug in failed")


class Errors:
    def __init__(self) -> None:
        self.seen: list[tuple[str, BaseException]] = []

    def __call__(self, where: str, exc: BaseException) -> None:
        self.seen.append((where, exc))


def make_library() -> types.ModuleType:
    lib = types.ModuleType("fakelib")

    def compile(fn: str, shape: tuple[int, ...], *, arch: int = 90, **options: Any) -> dict[str, Any]:
        """Compile ``fn`` for ``shape``."""
        if fn == "bad":
            raise ValueError("library error: bad kernel")
        return {"fn": fn, "shape": shape, "arch": arch, **options}

    class Kernel:
        def __init__(self, source: str, target: str = "cuda") -> None:
            self.source, self.target = source, target

        @staticmethod
        def build(source: str) -> str:
            return f"built:{source}"

        @classmethod
        def from_database(cls, source: str) -> Kernel:
            return cls(source, "db")

    class Sub(Kernel):
        pass

    lib.compile = compile  # type: ignore[attr-defined]
    lib.Kernel = Kernel  # type: ignore[attr-defined]
    lib.Sub = Sub  # type: ignore[attr-defined]
    return lib


def test_signature_return_value_and_kwargs_pass_through() -> None:
    lib = make_library()
    original = lib.compile
    rec, errors = Recorder(), Errors()
    patch = patch_attribute(lib, "compile", rec, where="fakelib.compile", on_error=errors)
    assert lib.compile is not original
    assert inspect.signature(lib.compile) == inspect.signature(original)
    assert lib.compile.__name__ == "compile" and lib.compile.__doc__ == "Compile ``fn`` for ``shape``."
    assert unwrap_chain(lib.compile)[-1] is original
    # a keyword the wrapper has never heard of (a newer library version) reaches the library
    out = lib.compile("k", (8,), arch=100, new_option="x")
    assert out == {"fn": "k", "shape": (8,), "arch": 100, "new_option": "x"}
    assert rec.calls[0] == ("before", (("k", (8,)), {"arch": 100, "new_option": "x"}))
    assert rec.calls[1] == ("after", out)
    assert errors.seen == []
    patch.restore()
    assert lib.compile is original


def test_library_exceptions_reach_the_caller_unchanged() -> None:
    lib = make_library()
    rec, errors = Recorder(), Errors()
    patch_attribute(lib, "compile", rec, where="fakelib.compile", on_error=errors)
    with pytest.raises(ValueError, match="library error: bad kernel") as info:
        lib.compile("bad", (1,))
    assert rec.calls[-1] == ("failed", info.value)
    # the traceback still ends in the library's frame
    tb = info.tb
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_name == "compile" and tb.tb_frame.f_code.co_filename == __file__
    assert errors.seen == []


@pytest.mark.parametrize("where", ["before", "after", "failed"])
def test_a_wrapper_failure_is_caught_counted_and_never_reaches_the_host(where: str) -> None:
    lib = make_library()
    rec, errors = Recorder(fail_in=where), Errors()
    patch = patch_attribute(lib, "compile", rec, where="fakelib.compile", on_error=errors)
    for _ in range(3):
        if where == "failed":
            with pytest.raises(ValueError, match="library error"):  # the library's own error, not ours
                lib.compile("bad", (1,))
        else:
            assert lib.compile("k", (2,)) == {"fn": "k", "shape": (2,), "arch": 90}
    assert patch.errors == 3
    assert [w for w, _ in errors.seen] == ["fakelib.compile"] * 3
    assert all(str(e) == f"jitwatch bug in {where}" for _, e in errors.seen)


def test_a_failing_error_handler_is_swallowed_too() -> None:
    lib = make_library()

    def broken(where: str, exc: BaseException) -> None:
        raise OSError("the error path failed as well")

    patch_attribute(lib, "compile", Recorder(fail_in="before"), where="fakelib.compile", on_error=broken)
    assert lib.compile("k", (1,))["fn"] == "k"


def test_serving_compile_error_is_the_one_deliberate_raise() -> None:
    lib = make_library()
    errors = Errors()
    patch_attribute(lib, "compile", Recorder(serving_error=True), where="fakelib.compile", on_error=errors)
    with pytest.raises(ServingCompileError):
        lib.compile("k", (1,))
    assert errors.seen == []


def test_before_returning_none_skips_the_record() -> None:
    lib = make_library()
    rec = Recorder(skip=True)
    patch_attribute(lib, "compile", rec, where="fakelib.compile", on_error=Errors())
    lib.compile("k", (1,))
    assert [c[0] for c in rec.calls] == ["before"]


def test_methods_staticmethods_and_classmethods_keep_their_kind() -> None:
    lib = make_library()
    init, build, from_db = Recorder(), Recorder(), Recorder()
    raw_init = lib.Kernel.__dict__["__init__"]
    p1 = patch_attribute(lib.Kernel, "__init__", init, where="Kernel.__init__", on_error=Errors())
    p2 = patch_attribute(lib.Kernel, "build", build, where="Kernel.build", on_error=Errors())
    p3 = patch_attribute(lib.Kernel, "from_database", from_db, where="Kernel.from_database", on_error=Errors())
    assert isinstance(lib.Kernel.__dict__["build"], staticmethod)
    assert isinstance(lib.Kernel.__dict__["from_database"], classmethod)
    k = lib.Kernel("src", target="hip")
    assert (k.source, k.target) == ("src", "hip")
    assert init.calls[0][1][0][0] is k  # self is passed on
    assert lib.Kernel.build("s") == "built:s" and lib.Kernel("x").build("t") == "built:t"
    sub = lib.Sub.from_database("q")
    assert type(sub) is lib.Sub and sub.target == "db"  # cls is the subclass
    assert inspect.signature(lib.Kernel.__init__) == inspect.signature(raw_init)
    for p in (p3, p2, p1):
        p.restore()
    assert lib.Kernel.__dict__["__init__"] is raw_init
    assert isinstance(lib.Kernel.__dict__["build"], staticmethod)
    assert lib.Kernel.build("s") == "built:s"


def test_patching_an_inherited_method_and_restoring_removes_the_override() -> None:
    lib = make_library()
    patch = patch_attribute(lib.Sub, "build", Recorder(), where="Sub.build", on_error=Errors())
    assert "build" in lib.Sub.__dict__
    assert lib.Sub.build("a") == "built:a"
    patch.restore()
    assert "build" not in lib.Sub.__dict__ and lib.Sub.build("a") == "built:a"


def test_missing_entry_point_is_an_attribute_error() -> None:
    lib = make_library()
    with pytest.raises(AttributeError, match="no attribute 'compile_v2'"):
        patch_attribute(lib, "compile_v2", Recorder(), where="fakelib.compile_v2", on_error=Errors())
    lib.VERSION = "1"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="not callable"):
        patch_attribute(lib, "VERSION", Recorder(), where="fakelib.VERSION", on_error=Errors())


def vllm_style_wrap(lib: types.ModuleType, log: list[str]) -> Any:
    """What vLLM's JIT monitor does to ``cutlass.cute.compile``: a functools.wraps wrapper that logs."""
    original = lib.compile

    @functools.wraps(original)
    def monitored(*args: Any, **kwargs: Any) -> Any:
        log.append("vllm")
        return original(*args, **kwargs)

    lib.compile = monitored
    return original


@pytest.mark.parametrize("order", ["vllm-first", "jitwatch-first"])
def test_coexists_with_another_wrapper_in_both_orders(order: str) -> None:
    lib = make_library()
    pristine = lib.compile
    log: list[str] = []
    rec = Recorder()
    if order == "vllm-first":
        vllm_style_wrap(lib, log)
        patch = patch_attribute(lib, "compile", rec, where="fakelib.compile", on_error=Errors())
    else:
        patch = patch_attribute(lib, "compile", rec, where="fakelib.compile", on_error=Errors())
        vllm_style_wrap(lib, log)
    assert lib.compile("k", (4,))["shape"] == (4,)
    assert log == ["vllm"] and [c[0] for c in rec.calls] == ["before", "after"]
    assert inspect.signature(lib.compile) == inspect.signature(pristine)
    patch.restore()
    # the other wrapper keeps working; ours no longer records
    assert lib.compile("k", (5,))["shape"] == (5,)
    assert log == ["vllm", "vllm"] and len(rec.calls) == 2
    if order == "vllm-first":
        assert lib.compile is not pristine and unwrap_chain(lib.compile)[-1] is pristine
    patch.restore()  # idempotent


def test_spec_describes_tensors_constexprs_and_long_calls() -> None:
    import torch

    from jitwatch.backends.spec import MAX_ITEMS, describe, describe_call

    t = torch.zeros(4, 8, dtype=torch.float16)
    assert describe(t) == {"type": "Tensor", "shape": [4, 8], "dtype": "torch.float16"}
    assert describe(3) == 3 and describe(True) is True and describe("bf16") == "bf16" and describe(None) is None
    assert describe((1, (2, t))) == [1, [2, {"type": "Tensor", "shape": [4, 8], "dtype": "torch.float16"}]]
    assert describe(object()) == {"type": "object"}
    assert len(describe("x" * 500)) == 120
    out = describe_call(tuple(range(MAX_ITEMS + 3)), {"block_m": 64})
    assert len(out["args"]) == MAX_ITEMS and out["args_omitted"] == 3 and out["kwargs"] == {"block_m": 64}


def test_serving_compile_error_from_before_refuses_the_call() -> None:
    lib = make_library()
    calls: list[str] = []

    class Refuse(Recorder):
        def before(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            raise ServingCompileError("refused at its start")

    original = lib.compile

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append("compiled")
        return original(*args, **kwargs)

    lib.compile = counting  # type: ignore[attr-defined]
    errors = Errors()
    patch_attribute(lib, "compile", Refuse(), where="fakelib.compile", on_error=errors)
    with pytest.raises(ServingCompileError, match="refused at its start"):
        lib.compile("k", (1,))
    assert calls == [] and errors.seen == []
