"""jitwatch.core.monitor with no compiler at all: a toy backend drives the CompileSink protocol.

What the core owns, whatever the backend: phases at compile *start*, requests, ranks, warn-once,
error mode, first-request timing, in-flight compiles, backend status, hook errors, and that the
compiling thread only queues a deferred event (materialized later, by the sink).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from jitwatch import BackendStatus, Capture, CompileKind, CompileSink, JitwatchError, ServingCompileError
from jitwatch.config import Mode, Settings
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.core.identity import WorkerIdentity
from jitwatch.core.monitor import Monitor
from jitwatch.testing import RecordingSink


class ToyBackend:
    """A backend for a make-believe compiler: ``compile()`` is what its hook would call."""

    name: ClassVar[str] = "toy"
    label: ClassVar[str] = "toy kernel"

    def __init__(self, state: str = "active") -> None:
        self.sink: CompileSink | None = None
        self.state = state
        self.uninstalled = False

    def available(self) -> bool:
        return True

    def version(self) -> str | None:
        return "1.0"

    def install(self, sink: CompileSink) -> BackendStatus:
        self.sink = sink
        return BackendStatus(self.name, self.state, "1.0", ("toy.compile",))  # type: ignore[arg-type]

    def uninstall(self) -> None:
        self.uninstalled = True

    def compile(self, name: str, key: str, *, body: Any = None, detail: Any = None) -> None:
        assert self.sink is not None
        token = self.sink.begin(self.name, name)
        if body is not None:
            body()
        self.sink.finish(token, Capture(self.name, name, key, detail=detail))


def make(mode: str = "warn", **kw: Any) -> tuple[Monitor, ToyBackend, RecordingSink]:
    toy = ToyBackend()
    sink = RecordingSink()
    mon = Monitor(
        Settings(journal_dir=Path("/nonexistent")),
        sink=sink,
        mode=mode,
        identity=WorkerIdentity(rank=3, tp_rank=1, labels={"model": "m"}),
        backends=[toy],
        tracer_provider=False,
        **kw,
    ).install()
    return mon, toy, sink


def test_phase_is_taken_when_the_compile_begins() -> None:
    mon, toy, sink = make()
    toy.compile("a", "k1")
    with mon.warmup():
        toy.compile("a", "k2")
        # begins in warmup, ends in serving: still a warmup compile
        toy.compile("b", "k3", body=mon.activate)
    toy.compile("a", "k4")
    compiles = sink.of_kind(EventKind.COMPILE)
    assert [(e.kernel, e.key, e.phase) for e in compiles] == [
        ("a", "k1", Phase.STARTUP),
        ("a", "k2", Phase.WARMUP),
        ("b", "k3", Phase.WARMUP),
        ("a", "k4", Phase.SERVING),
    ]
    assert all(e.backend == "toy" and e.rank == 3 and e.attrs["tp_rank"] == 1 for e in compiles)
    assert all(e.attrs["model"] == "m" for e in compiles)
    assert mon.compiles_by_phase[Phase.WARMUP] == 2


def test_worker_start_lists_backends() -> None:
    mon, _toy, sink = make()
    (start,) = sink.of_kind(EventKind.WORKER_START)
    assert start.attrs["backends"] == {"toy": {"state": "active", "version": "1.0", "hooks": ["toy.compile"]}}
    assert "triton_version" not in start.attrs  # no triton backend: no 0.1 compatibility fields
    assert mon.backend_statuses["toy"].state == "active"


def test_detail_is_built_by_the_sink_not_on_the_compiling_thread() -> None:
    """The capture's detail callable runs when the event is materialized (the writer thread in a
    worker); the compiling thread only queues an object."""
    built_on: list[str] = []

    class LazySink(RecordingSink):
        def __init__(self) -> None:
            super().__init__()
            self.queued: list[Any] = []

        def submit(self, item: Any) -> bool:
            self.queued.append(item)
            return True

    lazy = LazySink()
    mon = Monitor(Settings(journal_dir=Path("/x")), sink=lazy, backends=[ToyBackend()], tracer_provider=False)
    mon.install()
    toy = mon.backends[0]
    assert isinstance(toy, ToyBackend)
    toy.compile("a", "k", detail=lambda: built_on.append(threading.current_thread().name) or {"x": 1})
    assert built_on == []
    deferred = [q for q in lazy.queued if not isinstance(q, Event)]
    t = threading.Thread(target=lambda: built_on.append(deferred[0].to_event().attrs["x"]), name="writer")
    t.start()
    t.join()
    assert built_on == ["writer", 1]


def test_warn_once_per_backend_name_and_key(caplog: pytest.LogCaptureFixture) -> None:
    mon, toy, _sink = make()
    mon.activate()
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        for key in ("k1", "k1", "k2"):
            toy.compile("a", key)
    lines = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0] == (
        "jitwatch: post-warmup compile of toy kernel 'a' on rank 3: never warmed (no compile of this kernel "
        "before serving) (fix: run what compiles a in warmup with serving's arguments and shapes (warmup "
        "manifests replay Triton kernels only, not toy's)); key k1"
    )


def test_reason_on_every_serving_compile_of_a_backend_without_explain() -> None:
    """Backend-neutral reasons: never warmed; a new key of a warmed name (kind ``unknown`` for a
    backend without ``explain``); a reason the compiler gave itself kept verbatim (``compiler``)."""
    mon, toy, sink = make()
    with mon.warmup():
        toy.compile("a", "k1")
    toy.compile("a", "k2")
    toy.compile("b", "k1")
    toy.compile("a", "k3", detail={"reason": "tensor 'x' size mismatch at index 0. expected 4, actual 8"})
    serving = [e for e in sink.of_kind(EventKind.COMPILE) if e.phase is Phase.SERVING]
    assert [(e.kernel, e.attrs["reason_kind"]) for e in serving] == [
        ("a", "unknown"),
        ("b", "never_warmed"),
        ("a", "compiler"),
    ]
    assert serving[0].attrs["reason"] == "new key; 1 other key of kernel a was warmed"
    # Manifests replay Triton kernels only: no fix of another backend's compile offers one.
    assert serving[0].attrs["fixes"] == [
        "run what compiles a in warmup with serving's arguments and shapes "
        "(warmup manifests replay Triton kernels only, not toy's)"
    ]
    assert not any("manifest export" in f for e in serving[:2] for f in e.attrs["fixes"])
    assert serving[2].attrs["reason"] == "tensor 'x' size mismatch at index 0. expected 4, actual 8"
    warm = [e for e in sink.of_kind(EventKind.COMPILE) if e.phase is not Phase.SERVING]
    assert all("reason" not in e.attrs for e in warm)


def test_new_key_fix_offers_a_manifest_only_where_manifests_replay() -> None:
    """The ``unknown`` reason's fix (:func:`jitwatch.backends.explain.new_key_fix`): a manifest of
    serving's keys for a backend whose compiles manifests replay, else warming what compiles it."""
    from jitwatch.backends.explain import MANIFEST_BACKENDS, new_key_fix, warm_fix

    (replayable,) = MANIFEST_BACKENDS
    assert new_key_fix("k", replayable) == "record a manifest of serving's keys and replay it in warmup"
    assert new_key_fix("k", "toy") == warm_fix("k", "toy")
    assert "manifest export" in new_key_fix("k", None)


def test_error_mode_raises_after_recording() -> None:
    mon, toy, sink = make("error")
    with mon.warmup():
        toy.compile("a", "k1")  # warmup: no raise
    with pytest.raises(ServingCompileError) as info:
        toy.compile("a", "k2")
    assert isinstance(info.value, JitwatchError)
    assert (info.value.backend, info.value.kernel, info.value.key) == ("toy", "a", "k2")
    assert [e.key for e in sink.of_kind(EventKind.COMPILE)] == ["k1", "k2"]  # recorded before raising


def test_autotune_and_graph_capture_do_not_warn_or_raise() -> None:
    mon, toy, sink = make("error")
    mon.activate()
    assert toy.sink is not None
    toy.sink.record(Capture("toy", "a", "cfg", kind=CompileKind.AUTOTUNE), start_ts=1.0, duration_s=2.0)
    toy.sink.record(Capture("toy", "g", "0/1", kind=CompileKind.GRAPH_CAPTURE), start_ts=1.0, duration_s=0.1)
    kinds = [e.kind for e in sink.events if e.kind in (EventKind.AUTOTUNE, EventKind.GRAPH_CAPTURE)]
    assert kinds == [EventKind.AUTOTUNE, EventKind.GRAPH_CAPTURE]
    assert mon.compiles_by_phase[Phase.SERVING] == 0


def test_request_attribution_and_first_request() -> None:
    mon, toy, sink = make()
    mon.activate()
    with mon.request("vllm:r1,r2"):
        toy.compile("a", "k1")
    with mon.request():
        toy.compile("a", "k2")
    c1, c2 = sink.of_kind(EventKind.COMPILE)
    assert c1.attrs["request_id"] == 1 and c1.attrs["request"] == "vllm:r1,r2"
    assert c2.attrs["request_id"] == 2 and "request" not in c2.attrs
    (first,) = sink.of_kind(EventKind.FIRST_REQUEST)
    assert first.attrs == {"request_id": 1, "request": "vllm:r1,r2", "tp_rank": 1, "model": "m"}


def test_inflight_compiles_are_visible_while_they_run() -> None:
    mon, toy, _sink = make()
    seen: list[list[str]] = []
    toy.compile("slow", "k", body=lambda: seen.append([s.name for s in mon.inflight()]))
    assert seen == [["slow"]] and mon.inflight() == []
    assert toy.sink is not None
    token = toy.sink.begin("toy", "vetoed")
    toy.sink.cancel(token)
    assert mon.inflight() == []


def test_backend_ready_and_hook_errors() -> None:
    mon, _toy, sink = make()
    mon.backend_ready(BackendStatus("late", "active", "2.0", ("x",), degraded="no listener"))
    mon.hook_error("toy", "toy.compile", ValueError("bad payload"))
    (ready,) = sink.of_kind(EventKind.BACKEND_READY)
    assert ready.backend == "late" and ready.attrs["degraded"] == "no listener"
    (err,) = sink.of_kind(EventKind.HOOK_ERROR)
    assert (
        err.backend == "toy" and err.attrs["hook"] == "toy.compile" and "ValueError: bad payload" in err.attrs["error"]
    )
    assert mon.backend_statuses["late"].version == "2.0" and mon.hook_errors == 1


def test_a_backend_that_fails_to_install_is_reported_not_raised() -> None:
    class Broken(ToyBackend):
        name: ClassVar[str] = "broken"

        def install(self, sink: CompileSink) -> BackendStatus:
            raise RuntimeError("no such hook")

    sink = RecordingSink()
    mon = Monitor(Settings(journal_dir=Path("/x")), sink=sink, backends=[Broken(), ToyBackend()], tracer_provider=False)
    mon.install()
    assert mon.backend_statuses["broken"].state == "failed"
    assert "no such hook" in (mon.backend_statuses["broken"].degraded or "")
    assert mon.backend_statuses["toy"].state == "active"


def test_uninstall_then_install_is_a_clear_error() -> None:
    mon, toy, sink = make()
    mon.uninstall()
    assert toy.uninstalled and sink.closed and not mon.active
    with pytest.raises(JitwatchError, match="create a new one"):
        mon.install()


def test_off_mode_installs_no_backend() -> None:
    toy = ToyBackend()
    mon = Monitor(
        Settings(journal_dir=Path("/x")), sink=RecordingSink(), mode="off", backends=[toy], tracer_provider=False
    )
    mon.install()
    assert toy.sink is None and not mon.active


def test_a_compile_recorded_after_the_fact_takes_the_phase_of_its_start() -> None:
    """``record`` (a compile whose start was not seen, e.g. DeepGEMM's cache watcher noticing it
    after warmup ended) files it under the phase in effect halfway through the compile."""
    mon, toy, sink = make()
    assert toy.sink is not None
    before = time.time() - 60
    with mon.warmup():
        during = time.time()
        time.sleep(0.05)
    after = time.time() + 1
    for name, ts in (("before", before), ("during", during), ("after", after)):
        toy.sink.record(Capture("toy", name, name), start_ts=ts, duration_s=0.01)
    # a start stamped (coarsely) 3 ms before warmup ended, of a 2 s compile: a serving compile
    assert mon.warmup_end is not None
    toy.sink.record(Capture("toy", "edge", "edge"), start_ts=mon.warmup_end - 0.003, duration_s=2.0)
    phases = {e.kernel: e.phase for e in sink.of_kind(EventKind.COMPILE)}
    assert phases == {"before": Phase.STARTUP, "during": Phase.WARMUP, "after": Phase.SERVING, "edge": Phase.SERVING}
    assert mon.phase_at(during) is Phase.WARMUP and mon.phase is Phase.SERVING

    bare, _, _ = make()
    bare.activate()  # serving without a warmup: anything earlier was startup
    assert bare.phase_at(time.time() - 1) is Phase.STARTUP and bare.phase_at(time.time() + 1) is Phase.SERVING


def test_counts_from_many_threads_are_exact_and_reach_warmup_complete() -> None:
    """Compiles are counted without a lock on the compiling thread (appended, folded later):
    none is lost across threads, and ``warmup_complete`` carries the exact warmup figures."""
    mon, toy, sink = make()
    mon.begin_warmup()
    threads = [
        threading.Thread(target=lambda i=i: [toy.compile(f"k{i}", f"key{j}") for j in range(200)]) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mon.activate()
    (done,) = sink.of_kind(EventKind.WARMUP_COMPLETE)
    assert done.attrs["kernels_compiled"] == 1600
    assert mon.compiles_by_phase[Phase.WARMUP] == 1600
    warm = [e for e in sink.of_kind(EventKind.COMPILE) if e.phase is Phase.WARMUP]
    assert done.attrs["compile_seconds"] == pytest.approx(sum(e.duration_s or 0.0 for e in warm))


def test_counts_stay_bounded_with_a_sink_that_never_builds_events() -> None:
    """A sink that keeps deferred events without building them (nothing folds the counts on
    another thread): the compiling thread folds past a bound, and the figures stay exact."""
    from jitwatch.core import monitor as core_monitor

    class Keep(RecordingSink):
        def submit(self, item: Any) -> bool:
            return True

    mon = Monitor(
        Settings(journal_dir=Path("/nonexistent")),
        sink=Keep(),
        mode="warn",
        backends=[toy := ToyBackend()],
        tracer_provider=False,
    ).install()
    for j in range(core_monitor._FOLD_AT + 10):
        toy.compile("a", f"k{j}")
    assert len(mon._ended) <= core_monitor._FOLD_AT
    assert mon.compiles_by_phase[Phase.STARTUP] == core_monitor._FOLD_AT + 10


def test_end_builds_the_capture_on_the_sink_side_with_the_token_s_name() -> None:
    """``CompileSink.end``: the Capture comes from ``build(arg)`` when the event is built (by the
    sink), not on the compiling thread; warn-once and error mode use the token's name and the key."""
    mon, _toy, sink = make()
    mon.activate()
    built: list[Any] = []

    def build(arg: Any) -> Capture:
        built.append(arg)
        return Capture("toy", "lazy", arg["key"], cache_hit=True, module="m", detail={"x": 1})

    real_submit = sink.submit
    queued: list[Any] = []
    sink.submit = queued.append  # type: ignore[method-assign,assignment]  # hold it unbuilt
    token = mon.begin("toy", "lazy")
    mon.end(token, "k1", build, {"key": "k1"})
    assert built == [] and mon.inflight() == []  # nothing built on this thread
    sink.submit = real_submit  # type: ignore[method-assign]
    for item in queued:
        sink.submit(item)
    (ev,) = sink.of_kind(EventKind.COMPILE)
    assert built == [{"key": "k1"}]
    assert (ev.kernel, ev.key, ev.cache_hit, ev.phase) == ("lazy", "k1", True, Phase.SERVING)
    assert ev.attrs["x"] == 1 and ev.attrs["module"] == "m"
    assert ev.start_ts is not None and ev.ts == pytest.approx(ev.start_ts + (ev.duration_s or 0.0))
    mon.mode = Mode.ERROR
    with pytest.raises(ServingCompileError, match="toy kernel 'lazy'"):
        mon.end(mon.begin("toy", "lazy"), "k2", build, {"key": "k2"})


# ------------------------------------------------------------------ ended: a compile seen only at its end
def _ended_capture(arg: dict[str, Any]) -> Capture:
    arg["built_on"].append(threading.get_ident())
    return Capture("toy", arg["name"], arg["key"], cache_hit=False, stages={"s": arg["d"]}, detail={"x": 1})


def _ended(mon: Monitor, name: str, key: str | None, d: float = 0.01) -> dict[str, Any]:
    arg: dict[str, Any] = {"name": name, "key": key, "d": d, "built_on": []}
    mon.ended("toy", name, key, d, _ended_capture, arg)
    return arg


def test_ended_builds_the_capture_on_the_thread_that_builds_the_event() -> None:
    """``CompileSink.ended``: the compiling thread hands over name, key, duration and references;
    ``build(arg)`` runs where the event is built (the journal writer's thread in a worker): here
    another thread. The event is what ``record`` of the same Capture would journal."""
    mon, _toy, sink = make()
    real_submit = sink.submit
    queued: list[Any] = []
    sink.submit = queued.append  # type: ignore[method-assign,assignment]  # hold it unbuilt
    with mon.request("r1"):
        t0 = time.time()
        arg = _ended(mon, "late", "k1", 0.25)
        t1 = time.time()
    assert arg["built_on"] == [] and len(queued) == 1  # nothing built on the compiling thread
    assert mon.compiles_by_phase[Phase.STARTUP] == 1 and mon.compile_seconds_by_phase[Phase.STARTUP] == 0.25
    sink.submit = real_submit  # type: ignore[method-assign]
    writer = threading.Thread(target=lambda: [sink.submit(item) for item in queued])
    writer.start()
    writer.join()
    assert arg["built_on"] == [writer.ident] and writer.ident != threading.get_ident()
    mon.record(
        Capture("toy", "late", "k1", cache_hit=False, stages={"s": 0.25}, detail={"x": 1}),
        start_ts=t0 - 0.25,
        duration_s=0.25,
    )
    ev, rec = sink.of_kind(EventKind.COMPILE)
    assert (ev.backend, ev.kernel, ev.key, ev.cache_hit, ev.phase, ev.duration_s) == (
        "toy",
        "late",
        "k1",
        False,
        Phase.STARTUP,
        0.25,
    )
    assert t0 - 0.25 <= (ev.start_ts or 0.0) <= t1 - 0.25 and ev.ts == pytest.approx((ev.start_ts or 0.0) + 0.25)
    assert ev.attrs["request_id"] == 1 and ev.attrs["request"] == "r1"
    assert {k: v for k, v in ev.attrs.items() if k not in ("request_id", "request")} == rec.attrs


def test_ended_takes_the_phase_at_the_compile_s_midpoint() -> None:
    """As ``record``: the phase in effect halfway through the compile, here with the warmup's end
    during the compile; the current phase when the compile began after the last change."""
    mon, _toy, sink = make()
    mon.begin_warmup()
    time.sleep(0.2)
    mon.activate()
    time.sleep(0.1)
    assert mon.warmup_start is not None and mon.warmup_end is not None
    targets = {
        "before": mon.warmup_start - 0.1,
        "during": (mon.warmup_start + mon.warmup_end) / 2,
        "after": mon.warmup_end + 0.05,
    }
    for name, mid in targets.items():
        _ended(mon, name, name, 2 * (time.time() - mid))
    phases = {e.kernel: e.phase for e in sink.of_kind(EventKind.COMPILE)}
    assert phases == {"before": Phase.STARTUP, "during": Phase.WARMUP, "after": Phase.SERVING}
    assert mon.compiles_by_phase == {Phase.STARTUP: 1, Phase.WARMUP: 1, Phase.SERVING: 1}


def test_ended_warns_once_per_name_and_key_and_raises_in_error_mode(caplog: pytest.LogCaptureFixture) -> None:
    mon, _toy, sink = make()
    mon.activate()
    time.sleep(0.05)  # the compiles' midpoints (5 ms back) after the warmup's end
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        for key in ("k1", "k1", "k2"):
            _ended(mon, "a", key)
    lines = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    assert len(lines) == 2 and lines[0].startswith("jitwatch: post-warmup compile of toy kernel 'a' on rank 3")
    assert lines[0].endswith("key k1") and lines[1].endswith("key k2")
    mon.mode = Mode.ERROR
    with pytest.raises(ServingCompileError, match=r"toy kernel 'b'.*key k3"):
        _ended(mon, "b", "k3")
    assert [e.kernel for e in sink.of_kind(EventKind.COMPILE)] == ["a", "a", "a", "b"]  # recorded, then raised
    assert mon.compiles_by_phase[Phase.SERVING] == 4


def test_a_build_that_raises_is_a_hook_error_and_loses_no_event() -> None:
    """A backend's ``build`` raising on the writer's thread (``end`` or ``ended``): counted and
    journaled as a hook error of its backend; the compile is still journaled with the name and key
    the compiling thread handed over, and events around it are whole."""
    mon, toy, sink = make()

    def broken(arg: Any) -> Capture:
        raise ValueError("cannot decode")

    _ended(mon, "before", "k0")
    mon.ended("toy", "bad", "k1", 0.5, broken, None)
    mon.end(mon.begin("toy", "bad2"), "k2", broken, None)
    toy.compile("bad3", "k3", detail=lambda: 1 / 0)  # a Capture.detail callable: the same
    toy.compile("after", "k4")
    assert mon.hook_errors == 3
    errors = sink.of_kind(EventKind.HOOK_ERROR)
    assert [(e.backend, e.attrs["hook"]) for e in errors] == [("toy", "capture build (journal writer)")] * 3
    assert "ValueError: cannot decode" in errors[0].attrs["error"]
    compiles = sink.of_kind(EventKind.COMPILE)
    assert [(e.kernel, e.key) for e in compiles] == [
        ("before", "k0"),
        ("bad", "k1"),
        ("bad2", "k2"),
        ("bad3", "k3"),
        ("after", "k4"),
    ]
    assert compiles[1].duration_s == 0.5 and compiles[1].attrs["capture_error"] == "ValueError"
    assert compiles[3].attrs["capture_error"] == "ZeroDivisionError"
    assert compiles[0].attrs["x"] == 1 and "capture_error" not in compiles[4].attrs
    assert mon.compiles_by_phase[Phase.STARTUP] == 5


# ------------------------------------------------------------------ plain tuples for the journal writer
class PlainSink(RecordingSink):
    """A sink that takes the monitor's compiles as plain tuples (``plain_events``, as the journal
    writer does) and builds each one as the writer does, ``item[0](item)``."""

    plain_events = True

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[Any] = []

    def submit(self, item: Any) -> bool:
        self.raw.append(item)
        return super().submit(item[0](item) if item.__class__ is tuple else item)


def _same_fields(ev: Event) -> tuple[Any, ...]:
    attrs = {k: v for k, v in ev.attrs.items() if k != "request_id"}
    return (ev.kind, ev.backend, ev.kernel, ev.key, ev.phase, ev.rank, ev.cache_hit, attrs)


def test_a_plain_events_sink_gets_tuples_that_build_the_same_events() -> None:
    """The journal writer (``plain_events``) is handed each compile as a plain tuple (no
    DeferredEvent object on the compiling thread); any other sink a DeferredEvent. Both build the
    same events, count the same compiles and warn once the same."""
    sinks = (PlainSink(), RecordingSink())
    mons = []
    for sink in sinks:
        toy = ToyBackend()
        mon = Monitor(
            Settings(journal_dir=Path("/nonexistent")),
            sink=sink,
            mode="warn",
            identity=WorkerIdentity(rank=3),
            backends=[toy],
            tracer_provider=False,
        ).install()
        toy.compile("warm", "k0")  # finish → _record
        mon.activate()
        with mon.request("r1"):
            mon.end(mon.begin("toy", "lazy"), "k1", lambda arg: Capture("toy", "lazy", arg, module="m"), "k1")
        mon.end(mon.begin("toy", "lazy"), "k1", lambda arg: Capture("toy", "lazy", arg, module="m"), "k1")
        mons.append(mon)
    plain, deferred = sinks
    assert len([it for it in plain.raw if it.__class__ is tuple]) == 3  # the three compiles
    assert [_same_fields(e) for e in plain.of_kind(EventKind.COMPILE)] == [
        _same_fields(e) for e in deferred.of_kind(EventKind.COMPILE)
    ]
    assert plain.of_kind(EventKind.COMPILE)[1].attrs["request"] == "r1"
    assert mons[0].compiles_by_phase == mons[1].compiles_by_phase
    assert mons[0].compiles_by_phase[Phase.SERVING] == 2
    assert mons[0]._warned == mons[1]._warned  # warned once: one (backend, name, key)
    assert Monitor(sink=deferred, mode="off", backends=[])._plain is False
    mons[1].sink = plain  # replacing the sink re-reads it
    assert mons[1]._plain is True
