"""``built_event``: compile events jitwatch builds itself skip pydantic's validation, and are the
same objects validation makes — checked field for field on real compiles of several backends
(Triton's JIT hooks and its compilation listener on the compile-only driver, torch.compile on
CPU) and on a hand-made capture through ``Monitor.record``."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
import torch
import triton
import triton.language as tl

from jitwatch import WorkerIdentity
from jitwatch.backends.base import Capture
from jitwatch.backends.torch_compile import TorchCompileBackend
from jitwatch.backends.triton import TritonBackend
from jitwatch.core import events as events_mod
from jitwatch.core.events import Event, EventKind, Phase, built_event
from jitwatch.testing import MonitorHarness, fresh_kernel_cache, monitored

FIELDS = (
    "kind",
    "ts",
    "start_ts",
    "duration_s",
    "rank",
    "pid",
    "host",
    "phase",
    "backend",
    "kernel",
    "key",
    "cache_hit",
    "attrs",
)


@triton.jit
def built_scale(out_ptr, x_ptr, n, alpha, BLOCK: tl.constexpr, USE_ALPHA: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if USE_ALPHA:
        x = x * alpha
    tl.store(out_ptr + offs, x, mask=m)


@triton.jit
def built_never(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32), mask=offs < n)


X = torch.empty(4096, dtype=torch.float32)


def _same_as_validated(ev: Event) -> None:
    """``ev`` is the object ``Event(...)`` of its own fields makes: same state (``__dict__``,
    fields set, extra, private), same type of every field, same JSON."""
    validated = Event(**{f: getattr(ev, f) for f in FIELDS})
    assert ev.__getstate__() == validated.__getstate__()
    for f in (*FIELDS, "id"):
        assert type(getattr(ev, f)) is type(getattr(validated, f)), f
    assert ev.model_dump_json() == validated.model_dump_json()
    assert ev == validated


class _Spy:
    """Wraps ``events._built`` (the unvalidated path) and checks each event it makes against
    validation of the same fields at once (before the diagnoser adds its reason)."""

    def __init__(self) -> None:
        self.made: list[Event] = []
        self.real = events_mod._built

    def __call__(self, *args: Any) -> Event:
        ev = self.real(*args)
        assert dict(zip(FIELDS, args, strict=True))["attrs"] is ev.attrs  # handed over, not copied
        _same_as_validated(ev)
        self.made.append(ev)
        return ev


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    s = _Spy()
    monkeypatch.setattr(events_mod, "_built", s)
    return s


def test_this_pydantic_takes_the_unvalidated_path() -> None:
    assert events_mod._CONSTRUCT, f"pydantic {pydantic.VERSION}: built_event validates every event"


def test_built_event_equals_validation_and_falls_back_for_other_types() -> None:
    fields: dict[str, Any] = dict(
        kind=EventKind.COMPILE,
        ts=12.5,
        start_ts=12.0,
        duration_s=0.5,
        rank=3,
        pid=77,
        host="node-a",
        phase=Phase.SERVING,
        backend="triton",
        kernel="k",
        key="key",
        cache_hit=True,
        attrs={"module": "m", "stages": {"ttir": 0.1}, "tp_rank": 1},
    )
    ev = built_event(**fields)
    _same_as_validated(ev)
    assert ev.attrs is fields["attrs"]
    ev.id = 5  # assignment goes through pydantic as on a validated event
    assert ev.model_fields_set == Event(**fields).model_fields_set | {"id"}
    assert built_event(**fields).model_fields_set == Event(**fields).model_fields_set  # not shared
    # Not exactly the declared types: validated (coerced) as Event(...) would.
    for name, value in (("ts", 12), ("rank", True), ("cache_hit", 1), ("phase", "serving"), ("kernel", None)):
        odd = built_event(**{**fields, name: value})
        assert odd == Event(**{**fields, name: value})
        _same_as_validated(odd)
    assert type(built_event(**{**fields, "ts": 12}).ts) is type(Event(**{**fields, "ts": 12}).ts)
    # ...and rejected as Event(...) would: a non-str attrs key, a non-numeric time.
    with pytest.raises(pydantic.ValidationError):
        built_event(**{**fields, "attrs": {1: "x"}})
    with pytest.raises(pydantic.ValidationError):
        built_event(**{**fields, "ts": "soon"})


def _events(h: MonitorHarness) -> list[Event]:
    return [e for e in h.events() if e.kind in (EventKind.COMPILE, EventKind.AUTOTUNE, EventKind.GRAPH_CAPTURE)]


def test_real_triton_compiles_take_the_unvalidated_path_and_equal_validation(spy: _Spy) -> None:
    fresh_kernel_cache(built_scale, built_never)
    ident = WorkerIdentity(rank=2, tp_rank=1, dp_rank=0, labels={"vllm_model": "m"})
    with monitored("warn", identity=ident, backends=[TritonBackend()]) as h:
        with h.monitor.warmup():
            built_scale.warmup(X, X, 1024, 0.5, BLOCK=64, USE_ALPHA=True, grid=(1,))
        with h.monitor.request(name="req-1"):  # a never-warmed key in serving, inside a request
            built_scale.warmup(X, X, 1024, 0.5, BLOCK=128, USE_ALPHA=False, grid=(1,))
        built_never.warmup(X, 1024, BLOCK=64, grid=(1,))  # nothing of it compiled before serving
        fresh_kernel_cache(built_scale)  # the same keys again: disk-cache hits
        built_scale.warmup(X, X, 1024, 0.5, BLOCK=64, USE_ALPHA=True, grid=(1,))
        built_scale.warmup(X, X, 1024, 0.5, BLOCK=128, USE_ALPHA=False, grid=(1,))
        sig = {"out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
        triton.compile(
            triton.compiler.ASTSource(built_never, sig, {(2,): 32})
        )  # not through the JIT hooks: the listener-only capture (Monitor.record)
        journaled = _events(h)
    compiles = [e for e in spy.made if e.backend == "triton"]
    assert len(compiles) == 6, [(e.kernel, e.attrs.get("source")) for e in compiles]
    assert [e.cache_hit for e in compiles[:5]] == [False, False, False, True, True]
    assert compiles[5].attrs.get("source") == "compilation_listener"
    assert compiles[1].attrs["request"] == "req-1" and compiles[1].attrs["tp_rank"] == 1
    assert compiles[1].attrs["vllm_model"] == "m" and compiles[1].attrs["reason_kind"] == "argument"
    assert compiles[2].attrs["reason_kind"] == "never_warmed"
    assert compiles[4].attrs["reason_kind"] == "argument"  # a disk-cache hit is explained the same way
    for ev in compiles:
        _same_as_validated(ev)  # again, after the diagnoser wrote its reason
    # What the journal stored is what was built (redaction aside: no home paths here).
    assert [(e.kernel, e.key, e.cache_hit, e.phase, e.attrs) for e in journaled] == [
        (e.kernel, e.key, e.cache_hit, e.phase, e.attrs) for e in compiles
    ]


def test_real_torch_compile_events_take_the_unvalidated_path_and_equal_validation(spy: _Spy) -> None:
    import torch._dynamo

    def scale(x: Any, flag: bool) -> Any:
        return (x * 2 + (1 if flag else 0)).sum()

    torch._dynamo.reset()
    try:
        with monitored("warn", backends=[TorchCompileBackend()], compile_only=False) as h:
            f = torch.compile(scale, backend="eager")
            with h.monitor.warmup():
                f(torch.randn(8, 4), True)
            f(torch.randn(8, 4), False)  # a guard failure: Dynamo's own reason
            f(torch.randn(3, 4), False)
            h.monitor.flush()
    finally:
        torch._dynamo.reset()
    made = [e for e in spy.made if e.backend == "torch_compile"]
    assert len(made) >= 3
    assert any(e.phase is Phase.SERVING and e.attrs.get("reason_kind") == "compiler" for e in made)
    for ev in made:
        _same_as_validated(ev)


def test_a_capture_with_other_types_is_validated_like_before(spy: _Spy, caplog: pytest.LogCaptureFixture) -> None:
    """A backend's capture whose fields are not exactly typed (an ``int`` start, a ``str``
    subclass name) takes the validated path; one validation rejects is dropped and counted,
    as before."""

    class Name(str):
        pass

    start = int(time.time()) - 5
    with monitored("warn", backends=[]) as h:
        h.monitor.record(Capture("toyjit", Name("k"), key="(1,)", detail={"shape": [1]}), start_ts=start, duration_s=1)
        h.monitor.record(Capture("toyjit", "k2", key="(2,)", detail={2: "non-str key"}), start_ts=start, duration_s=1.0)
        with caplog.at_level(logging.ERROR, logger="jitwatch"):
            stored = [e for e in h.events(EventKind.COMPILE)]
        dropped = h.monitor.sink.bad_events  # type: ignore[attr-defined]
    assert spy.made == []
    assert [(e.kernel, e.ts, e.attrs["shape"]) for e in stored] == [("k", start + 1.0, [1])]
    assert dropped == 1


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.getLogger("jitwatch").setLevel(logging.ERROR)
    yield
    logging.getLogger("jitwatch").setLevel(logging.NOTSET)
