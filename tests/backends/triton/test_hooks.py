"""jitwatch.backends.triton.hooks: chaining into Triton's single-slot hooks, with real compile-only compiles.

Chaining contract under test (see ``HookSet``): jitwatch records first, then calls the previous
occupant with identical arguments and returns its value; the previous occupant's exception
propagates unchanged; jitwatch's own faults are caught and counted; uninstall restores, or turns
into a pass-through when someone chained on top.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

import jitwatch
from jitwatch.backends.triton.hooks import HookSet, ServingCompileError, probe_triton
from jitwatch.core.events import EventKind, Phase
from jitwatch.testing import MonitorHarness, fresh_kernel_cache, monitored

HAS_AUTOTUNE_LISTENER = probe_triton().autotuning_listener
WRAPS = ["Autotuner._bench", "Autotuner.prune_configs"]
"""What ``installed_slots`` lists when the autotuner wrappers are installed (no autotuning listener)."""


@triton.jit
def hk_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


X = torch.empty(1024, dtype=torch.float32)


def compile_add(n: int = 1024, block: int = 64) -> Any:
    return hk_add.warmup(X, X, X, n, BLOCK=block, grid=(1,))


@pytest.fixture(autouse=True)
def _fresh_kernel() -> None:
    fresh_kernel_cache(hk_add)


class Spy:
    """A hook that records its calls and chains to whatever was in the slot before it."""

    def __init__(self, group: str, attr: str, result: Any = None, raises: BaseException | None = None) -> None:
        self.holder = getattr(triton.knobs, group)
        self.attr = attr
        self.result = result
        self.raises = raises
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.prev: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        if self.raises is not None:
            raise self.raises
        if self.prev is not None:
            out = self.prev(*args, **kwargs)
            return out if self.result is None else self.result
        return self.result

    def install(self) -> Spy:
        self.prev = getattr(self.holder, self.attr)
        setattr(self.holder, self.attr, self)
        return self

    def uninstall(self) -> None:
        if getattr(self.holder, self.attr) is self:
            setattr(self.holder, self.attr, self.prev)


def slots() -> dict[str, Any]:
    k = triton.knobs
    return {
        "pre": k.runtime.jit_cache_hook,
        "post": k.runtime.jit_post_compile_hook,
        "listener": k.compilation.listener,
        "launch_enter": k.runtime.launch_enter_hook,
        "launch_exit": k.runtime.launch_exit_hook,
    }


# ------------------------------------------------------------------------------------ chaining
def test_previous_hooks_fire_with_identical_kwargs(tmp_path, triton_cache) -> None:
    """A hook installed before jitwatch receives exactly the arguments Triton passed to jitwatch."""
    below = {n: Spy(g, a).install() for n, (g, a) in _PAIRS.items()}
    try:
        with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            above = {n: Spy(g, a).install() for n, (g, a) in _PAIRS.items()}
            try:
                assert compile_add() is not None
            finally:
                for s in above.values():
                    s.uninstall()
            compiles = h.compiles()
    finally:
        for s in reversed(below.values()):
            s.uninstall()
    assert len(compiles) == 1
    for name in _PAIRS:
        assert len(above[name].calls) == len(below[name].calls) == 1, name
        (a_args, a_kw), (b_args, b_kw) = above[name].calls[0], below[name].calls[0]
        assert a_args == b_args == ()
        assert a_kw.keys() == b_kw.keys()
        assert all(a_kw[k] is b_kw[k] for k in a_kw), name


_PAIRS = {
    "pre": ("runtime", "jit_cache_hook"),
    "post": ("runtime", "jit_post_compile_hook"),
    "listener": ("compilation", "listener"),
}


def test_previous_return_value_is_returned_and_ours_is_never_truthy() -> None:
    """Called directly (a unit test of the chain): prev's value comes back; alone, ours returns None.
    ``error`` mode (phase ``startup``: nothing raises), where jitwatch occupies all three slots."""
    sentinel = object()
    with monitored("error"):
        assert triton.knobs.runtime.jit_cache_hook(key="k", fn=None) is None
        assert triton.knobs.runtime.jit_post_compile_hook(key="k", fn=None) is None
    for group, attr in _PAIRS.values():
        spy = Spy(group, attr, result=sentinel).install()
        try:
            with monitored("error"):
                hook = getattr(getattr(triton.knobs, group), attr)
                assert hook is not spy
                assert hook(key="k", fn=None) is sentinel
        finally:
            spy.uninstall()


def test_previous_cache_hook_returning_true_skips_compile(harness: MonitorHarness) -> None:
    """Triton skips compile and launch when the chained jit_cache_hook returns True: nothing is recorded."""
    # Install the skipping hook below jitwatch: uninstall ours, put it in, reinstall a monitor.
    harness.monitor.uninstall()
    skip = Spy("runtime", "jit_cache_hook", result=True).install()
    try:
        with monitored(journal_dir=harness.journal_dir / "2", triton_cache_dir=harness.triton_cache_dir) as h2:
            assert compile_add() is None  # Triton returned without compiling
            assert len(skip.calls) == 1
            assert h2.compiles() == []
            assert h2.triton.pending() == 0 and h2.monitor.inflight() == []  # the skipped compile's start was discarded
    finally:
        skip.uninstall()


def test_uninstall_restores_previous_hooks(tmp_path) -> None:
    spies = {n: Spy(g, a).install() for n, (g, a) in _PAIRS.items()}
    try:
        before = slots()
        with monitored("error", journal_dir=tmp_path / "j") as h:
            during = slots()
            assert during["pre"] is not before["pre"]
            assert during["post"] is not before["post"]
            assert during["listener"] is not before["listener"]
            assert {"compilation_listener", "jit_cache_hook", "jit_post_compile_hook"} <= set(
                h.triton.hooks.installed_slots()
            )
        assert slots() == before
    finally:
        for s in reversed(spies.values()):
            s.uninstall()


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_post_compile_slot_held_in_error_mode_only(tmp_path, triton_cache, mode: str) -> None:
    """Outside ``error`` mode jitwatch leaves ``jit_post_compile_hook`` as it found it (Triton
    builds a ``repr``, specialization data and keywords for every occupied JIT hook on every
    compile) and its compilation listener ends the compile: one event, with stage times and
    the disk-cache hit, twice over (a miss, then a hit from a fresh in-memory cache)."""
    before = slots()
    with monitored(mode, journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        during = slots()
        held = h.triton.hooks.installed_slots()
        assert during["pre"] is not before["pre"] and during["listener"] is not before["listener"]
        if mode == "warn":
            assert during["post"] is before["post"] is None
            assert "jit_post_compile_hook" not in held
        else:
            assert during["post"] is not None and "jit_post_compile_hook" in held
        assert compile_add() is not None
        fresh_kernel_cache(hk_add)
        assert compile_add() is not None  # Triton's disk cache
        compiles = h.compiles()
        assert h.triton.pending() == 0 and h.monitor.inflight() == []
        assert h.monitor.hook_errors == 0
    assert [c.cache_hit for c in compiles] == [False, True]
    assert all(c.kernel == "hk_add" and c.attrs.get("stages") for c in compiles)
    assert compiles[0].key == compiles[1].key and compiles[0].attrs.get("specialization_data")
    assert slots() == before


def test_listener_replaced_without_chaining_falls_back_to_post_compile_hook(
    tmp_path, triton_cache, compile_only
) -> None:
    """A host replaces ``knobs.compilation.listener`` after jitwatch without chaining: the first
    compile never ends (dropped by the frame watch as abandoned, with that cause); jitwatch then
    installs ``jit_post_compile_hook``, says so in its backend status (``backend_ready``: hooks,
    ``degraded``) and records later compiles through it."""
    comp = triton.knobs.compilation
    with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        ours = comp.listener
        comp.listener = lambda **kwargs: None  # no chaining
        try:
            assert compile_add() is not None
            assert [s.name for s in h.monitor.inflight()] == ["hk_add"]
            deadline = time.monotonic() + 15
            while triton.knobs.runtime.jit_post_compile_hook is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert triton.knobs.runtime.jit_post_compile_hook is not None
            assert h.monitor.inflight() == [] and h.triton.pending() == 0
            status = h.monitor.backend_statuses["triton"]
            assert "jit_post_compile_hook" in status.hooks
            assert status.degraded and "replaced without chaining" in status.degraded
            fresh_kernel_cache(hk_add)
            assert compile_add(n=1000) is not None
            compiles = h.compiles()
            h.monitor.flush()
            (abandoned,) = h.events(EventKind.COMPILE_ABANDONED)
            ready = h.events(EventKind.BACKEND_READY)
        finally:
            comp.listener = ours
    assert "replaced without chaining" in abandoned.attrs["cause"]
    assert "jit_post_compile_hook" in abandoned.attrs["cause"]
    assert [c.kernel for c in compiles] == ["hk_add"]
    assert compiles[0].cache_hit is None  # no listener: no disk-cache hit or stage times
    assert ready and "jit_post_compile_hook" in ready[-1].attrs["hooks"]
    assert triton.knobs.runtime.jit_post_compile_hook is None  # restored at uninstall


def test_listener_declared_as_wrapping_jitwatchs_is_a_chain(
    tmp_path, triton_cache, compile_only, serial_ast_parse
) -> None:
    """A listener put on top of jitwatch's that declares it with ``functools.wraps``
    (``__wrapped__`` reaching jitwatch's, as ``warmup replay``'s does) is a chain: compiles in
    asynchronous compile mode still end in the listener, with stage times, and jitwatch keeps
    ``jit_post_compile_hook`` free and the backend undegraded."""
    comp = triton.knobs.compilation
    with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        ours = comp.listener
        # Triton < 3.8 starts degraded (no autotuning listener): the chain must add nothing to that
        degraded_before = h.monitor.backend_statuses["triton"].degraded

        @functools.wraps(ours)
        def host_listener(**kwargs):
            return ours(**kwargs)

        comp.listener = host_listener
        try:
            assert h.triton.hooks.replaced("compilation_listener") is False
            with ThreadPoolExecutor(2) as pool, triton.AsyncCompileMode(pool):
                compile_add(block=64)
                compile_add(block=128)
            compiles = h.compiles()
            status = h.monitor.backend_statuses["triton"]
            assert "jit_post_compile_hook" not in status.hooks and status.degraded == degraded_before
            assert triton.knobs.runtime.jit_post_compile_hook is None
            comp.listener = lambda **kwargs: ours(**kwargs)  # the same chain, undeclared
            assert h.triton.hooks.replaced("compilation_listener") is True
        finally:
            comp.listener = ours
    assert sorted(c.attrs["constexprs"]["BLOCK"] for c in compiles) == [64, 128]
    assert all(c.attrs.get("stages") for c in compiles)


@pytest.mark.parametrize("host", ["replaces", "chains"])
def test_listener_replaced_then_async_compiles_end_in_post_compile_hook(
    tmp_path, triton_cache, compile_only, serial_ast_parse, host: str
) -> None:
    """Compiles in asynchronous compile mode (vLLM's parallel warmup) are never watched by the
    frame watch, so a ``knobs.compilation.listener`` replaced without chaining would leave them in
    flight for good. When one begins with the listener slot holding another callable, jitwatch
    takes ``jit_post_compile_hook`` at once (it cannot tell there whether that listener chains):
    every compile ends exactly once, with stage times where the listener does chain."""
    comp = triton.knobs.compilation
    with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        ours = comp.listener
        comp.listener = (lambda **kwargs: None) if host == "replaces" else (lambda **kwargs: ours(**kwargs))
        try:
            with ThreadPoolExecutor(2) as pool, triton.AsyncCompileMode(pool):
                compile_add(block=64)
                compile_add(block=128)
            compiles = h.compiles()
            assert h.monitor.inflight() == [] and h.triton.pending() == 0
            status = h.monitor.backend_statuses["triton"]
            assert "jit_post_compile_hook" in status.hooks
            assert status.degraded and "whether it chains is unknown" in status.degraded
            assert h.monitor.hook_errors == 0
        finally:
            comp.listener = ours
    assert sorted(c.attrs["constexprs"]["BLOCK"] for c in compiles) == [64, 128]
    assert all(c.attrs.get("source") is None for c in compiles)
    assert all(bool(c.attrs.get("stages")) is (host == "chains") for c in compiles)
    assert triton.knobs.runtime.jit_post_compile_hook is None  # restored at uninstall


def test_post_compile_slot_taken_during_uninstall_is_restored(tmp_path, monkeypatch) -> None:
    """The fallback takes ``jit_post_compile_hook`` on the journal writer's thread (or a compiling
    thread) while the host may be uninstalling jitwatch: the slot must never be left holding a
    live jitwatch hook after ``uninstall`` returns. ``hook_body`` is slowed down (it waits until
    the uninstall has begun) to hold ``add_slot`` mid-way, deterministically."""
    from jitwatch.backends.triton import TritonBackend

    inside, proceed = threading.Event(), threading.Event()
    real = TritonBackend.hook_body

    def slow_hook_body(self: Any, slot: str, link: Any) -> Any:
        if slot == "jit_post_compile_hook":
            inside.set()
            proceed.wait(5)
        return real(self, slot, link)

    monkeypatch.setattr(TritonBackend, "hook_body", slow_hook_body)
    with monitored("warn", journal_dir=tmp_path / "j") as h:
        assert triton.knobs.runtime.jit_post_compile_hook is None
        taker = threading.Thread(target=h.triton.listener_lost)
        taker.start()
        assert inside.wait(5)
        remover = threading.Thread(target=h.monitor.uninstall)
        remover.start()
        time.sleep(0.3)  # the uninstall runs (or waits) now
        proceed.set()
        taker.join(5)
        remover.join(5)
        assert not taker.is_alive() and not remover.is_alive()
        assert triton.knobs.runtime.jit_post_compile_hook is None


def test_hook_on_top_keeps_working_after_our_uninstall(tmp_path, triton_cache) -> None:
    """Someone chains on top of jitwatch; jitwatch uninstalls; their hook (and the one below) still fire."""
    below = Spy("runtime", "jit_post_compile_hook").install()
    try:  # error mode (never serving here): jitwatch occupies jit_post_compile_hook
        with monitored("error", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            top = Spy("runtime", "jit_post_compile_hook").install()
            h.monitor.uninstall()
            assert triton.knobs.runtime.jit_post_compile_hook is top  # not cut out of the chain
            assert compile_add() is not None
            assert len(top.calls) == 1 and len(below.calls) == 1
            assert h.compiles() == []  # jitwatch is a pure pass-through now
            # Re-installing on top of that chain must not loop (each hook keeps its own previous).
            with monitored("error", journal_dir=tmp_path / "j2", triton_cache_dir=triton_cache) as h2:
                fresh_kernel_cache(hk_add)
                assert compile_add(n=1000) is not None
                assert len(h2.compiles()) == 1
            assert len(top.calls) == 2 and len(below.calls) == 2
            top.uninstall()
            # `top` restored what it replaced: jitwatch's (now pass-through) hook, which forwards to `below`.
            passthrough = triton.knobs.runtime.jit_post_compile_hook
            assert passthrough.__name__ == "jitwatch_jit_post_compile_hook"
            assert passthrough(key="k", fn=None) is None and len(below.calls) == 3
            triton.knobs.runtime.jit_post_compile_hook = below
    finally:
        below.uninstall()


def test_launch_hooks_untouched(tmp_path) -> None:
    """Nothing on the launch path: launch_enter_hook/launch_exit_hook are the same objects during and after."""
    before = slots()
    with monitored(journal_dir=tmp_path / "j") as h:
        during = slots()
        assert during["launch_enter"] is before["launch_enter"]
        assert during["launch_exit"] is before["launch_exit"]
        assert not any("launch" in s for s in h.triton.hooks.installed_slots())


# ------------------------------------------------------------------------------- hook faults
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"key": None, "fn": None},
        {"key": ("tuple", "key"), "fn": object(), "compile": "not a dict"},
        {"key": "k", "fn": types.SimpleNamespace(name=None, module=3, jit_function=None), "compile": {"constants": 5}},
        {"key": "k", "fn": None, "compile": {"signature": ["x"], "constants": {(99,): 1}}, "future_kwarg": object()},
    ],
    ids=["empty", "nones", "bad-compile", "odd-fn", "extra-kwarg"],
)
def test_malformed_kwargs_never_raise(kwargs: dict[str, Any]) -> None:
    """A future Triton may rename/drop/add kwargs: the hooks record what they can and never raise.

    Two post-compile calls → two compile events; the listener call, matching no started compile,
    is recorded as a listener-only compile (what a compile bypassing ``JITFunction`` looks like).
    ``error`` mode in phase ``startup``, where jitwatch occupies the post-compile slot.
    """
    with monitored("error") as h:
        rt = triton.knobs.runtime
        assert rt.jit_cache_hook(**kwargs) is None
        assert rt.jit_post_compile_hook(**kwargs) is None
        assert triton.knobs.compilation.listener(**kwargs) is None
        assert rt.jit_post_compile_hook("positional", 1, **kwargs) is None
        compiles = h.compiles()
        assert h.monitor.hook_errors == 0
    assert len(compiles) == 3
    assert [c.attrs.get("source") for c in compiles] == [None, "compilation_listener", None]
    assert compiles[1].kernel == "<unknown>"


def test_sink_exception_is_caught_counted_logged(harness: MonitorHarness, monkeypatch, caplog) -> None:
    """An exception inside jitwatch's own sink: caught, hook_error event → journal counter, logged;
    the compile proceeds and returns the kernel."""

    class Broken(list):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            raise ValueError("sink broke")

    # The hooks hold the monitor's bound methods (taken at install); break what they use inside.
    monkeypatch.setattr(harness.monitor, "_ended", Broken())
    with caplog.at_level(logging.ERROR, logger="jitwatch.core.monitor"):
        kernel = compile_add()
    assert kernel is not None
    assert harness.monitor.hook_errors == 1
    errors = harness.events(EventKind.HOOK_ERROR)
    assert len(errors) == 1
    assert errors[0].attrs["hook"] == "compilation_listener"  # warn mode: the listener ends the compile
    assert "ValueError: sink broke" in errors[0].attrs["error"]
    assert harness.counters()[(0, "hook_errors:triton")] == 1
    assert "sink broke" in caplog.text


def test_previous_hook_exception_propagates_unchanged_after_we_record(tmp_path, triton_cache) -> None:
    boom = RuntimeError("previous hook failed")
    below = Spy("runtime", "jit_post_compile_hook", raises=boom).install()
    try:
        with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            with pytest.raises(RuntimeError) as info:
                compile_add()
            assert info.value is boom
            compiles = h.compiles()
            assert len(compiles) == 1  # recorded before the previous hook ran
            assert h.monitor.hook_errors == 0
    finally:
        below.uninstall()


def test_previous_pre_hook_exception_discards_pending(tmp_path, triton_cache) -> None:
    boom = KeyError("pre")
    below = Spy("runtime", "jit_cache_hook", raises=boom).install()
    try:
        with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            with pytest.raises(KeyError) as info:
                compile_add()
            assert info.value is boom
            assert h.triton.pending() == 0 and h.monitor.inflight() == []
            assert h.compiles() == []
    finally:
        below.uninstall()


# ---------------------------------------------------------------------------- degraded Triton
class _Holder:
    pass


def _fake_knobs(runtime: bool, compilation: bool, autotuning: bool) -> types.SimpleNamespace:
    ns = types.SimpleNamespace()
    if runtime:
        ns.runtime = _Holder()
        ns.runtime.jit_cache_hook = None
        ns.runtime.jit_post_compile_hook = None
    else:
        ns.runtime = _Holder()  # a vendor build: the group exists, the slots do not
    if compilation:
        ns.compilation = _Holder()
        ns.compilation.listener = None
    ns.autotuning = _Holder()
    if autotuning:
        ns.autotuning.listener = None
    return ns


@pytest.mark.parametrize(
    ("runtime", "compilation", "autotuning", "expected", "phrase"),
    [
        (False, True, False, [*WRAPS, "compilation_listener"], "compilation listener only"),
        (True, True, False, [*WRAPS, "compilation_listener", "jit_cache_hook"], "autotuning"),
        (True, False, False, [*WRAPS, "jit_cache_hook", "jit_post_compile_hook"], "no per-stage times"),
        (False, False, False, [], "no compile is recorded"),
    ],
)
def test_missing_knobs_degrade_with_a_log(
    monkeypatch, caplog, tmp_path, runtime, compilation, autotuning, expected, phrase
) -> None:
    fake = _fake_knobs(runtime, compilation, autotuning)
    monkeypatch.setattr(triton, "knobs", fake)
    with caplog.at_level(logging.WARNING, logger="jitwatch"):
        with monitored(journal_dir=tmp_path / "j", compile_only=False) as h:
            assert h.triton.hooks.installed_slots() == expected
            assert h.triton.support is not None and h.triton.support.reason
            worker = h.events(EventKind.WORKER_START)[0]
            assert worker.attrs["degraded"] == h.triton.support.reason
    assert phrase in caplog.text
    if compilation:
        assert fake.compilation.listener is None  # restored


def test_no_knobs_at_all(monkeypatch, caplog, tmp_path) -> None:
    """Triton < 3.4 has no ``triton.knobs``: nothing is installed, nothing crashes, a warning says why."""
    monkeypatch.delattr(triton, "knobs")
    with caplog.at_level(logging.WARNING, logger="jitwatch"):
        with monitored(journal_dir=tmp_path / "j", compile_only=False) as h:
            assert h.triton.hooks.installed_slots() == []
    assert "no compile is recorded" in caplog.text


NO_AUTOTUNING_LISTENER = "no knobs.autotuning.listener (3.8+)"


def test_degraded_notice_is_logged_once_per_process(monkeypatch, caplog, tmp_path) -> None:
    """Triton 3.6 has no ``knobs.autotuning.listener``: its notice came out twice per monitor (the
    hook set logged it, then the monitor logged the backend's status). Now once per process at
    WARNING, however many monitors install (later ones at DEBUG); each worker still journals it.
    Real Triton when it lacks the listener (``.venv-triton36``), else Triton 3.9's knobs without it."""
    if probe_triton().autotuning_listener:
        monkeypatch.setattr(triton, "knobs", _fake_knobs(True, True, False))
    with caplog.at_level(logging.DEBUG, logger="jitwatch"):
        degraded = []
        for run in range(3):
            with monitored(journal_dir=tmp_path / f"j{run}", compile_only=False) as h:
                degraded.append(h.events(EventKind.WORKER_START)[0].attrs["degraded"])
    said = [r for r in caplog.records if NO_AUTOTUNING_LISTENER in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG], said
    assert said[0].name == "jitwatch.core.monitor" and said[0].getMessage() == f"jitwatch: {degraded[0]}"
    assert all(NO_AUTOTUNING_LISTENER in d for d in degraded)


@pytest.mark.skipif(probe_triton().autotuning_listener, reason="this Triton has knobs.autotuning.listener (3.8+)")
def test_degraded_notice_once_in_a_real_process(tmp_path) -> None:
    """The same in a fresh interpreter with the default logging set up, as a worker runs it: one
    ``jitwatch.install()`` and a compile, then a second monitor: the notice is one line on stderr."""
    import subprocess
    import sys

    from tests._paths import ROOT

    script = (
        "import logging, torch, triton, triton.language as tl, jitwatch\n"
        "from jitwatch.testing import compile_only_driver, monitored\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "@triton.jit\n"
        "def k(x_ptr, n, B: tl.constexpr):\n"
        "    o = tl.arange(0, B)\n"
        "    tl.store(x_ptr + o, 1.0, mask=o < n)\n"
        "with compile_only_driver():\n"
        "    jitwatch.install()\n"
        "    k.warmup(torch.zeros(16), 16, B=16, grid=(1,))\n"
        "    jitwatch.uninstall()\n"
        f"with monitored(journal_dir={str(tmp_path / 'j2')!r}):\n"
        "    pass\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "JITWATCH_DIR": str(tmp_path / "j1"),
        "TRITON_CACHE_DIR": str(tmp_path / "tc"),
    }
    (tmp_path / "notice_worker.py").write_text(script)  # @triton.jit needs its source in a file
    out = subprocess.run(
        [sys.executable, "notice_worker.py"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if NO_AUTOTUNING_LISTENER in ln]
    assert len(lines) == 1 and lines[0].startswith("WARNING:jitwatch.core.monitor:jitwatch: triton "), out.stderr


# ------------------------------------------------------------------------ vLLM's own monitor
class VllmJitMonitorEmulation:
    """Behaviour of ``vllm/utils/jit_monitor.py`` (vLLM 0.11+), rewritten for the test: after
    ``activate()`` its ``jit_post_compile_hook`` logs (warn) or raises ``RuntimeError`` (error)
    *before* calling the hook it replaced; in warn mode it then chains with the same kwargs."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seen: list[str] = []
        self.existing: Any = None
        self._hook: Any = None

    def activate(self) -> None:
        self.existing = triton.knobs.runtime.jit_post_compile_hook
        existing = self.existing

        def _on_jit_compile(**kwargs: Any) -> Any:
            name = getattr(kwargs.get("fn"), "name", "<unknown>")
            self.seen.append(name)
            if self.mode == "error":
                raise RuntimeError(f"Triton kernel JIT compilation during inference: {name}")
            if existing is not None:
                return existing(**kwargs)
            return None

        self._hook = _on_jit_compile
        triton.knobs.runtime.jit_post_compile_hook = _on_jit_compile

    def deactivate(self) -> None:
        if triton.knobs.runtime.jit_post_compile_hook is self._hook:
            triton.knobs.runtime.jit_post_compile_hook = self.existing


@pytest.mark.parametrize("vllm_mode", ["warn", "error"])
@pytest.mark.parametrize("order", ["jitwatch_first", "vllm_first"])
def test_with_vllm_monitor(tmp_path, triton_cache, compile_only, order: str, vllm_mode: str) -> None:
    """What each monitor sees for one serving-phase compile, per install order.

    vLLM activates its monitor at the end of warmup (``compile_or_warm_up_model``).

    jitwatch in ``warn`` mode leaves ``jit_post_compile_hook`` to vLLM and ends the compile in
    its compilation listener, which runs before any post-compile hook: in either order and either
    vLLM mode, both see the compile and vLLM's RuntimeError propagates unchanged. (jitwatch in
    ``error`` mode chains the post-compile slot: ``test_both_in_error_mode_vllm_exception_wins``.)
    """
    vllm = VllmJitMonitorEmulation(vllm_mode)
    try:
        if order == "vllm_first":
            compile_add(n=1024)  # warmup, before either monitor
            vllm.activate()
        with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            if order == "jitwatch_first":
                with h.monitor.warmup():
                    compile_add(n=1024)
                vllm.activate()
            else:
                h.monitor.activate()
            try:
                if vllm_mode == "error":
                    with pytest.raises(RuntimeError, match="during inference") as info:
                        compile_add(n=1000)
                    assert not isinstance(info.value, ServingCompileError)
                else:
                    compile_add(n=1000)
            finally:
                if order == "jitwatch_first":
                    vllm.deactivate()
            serving = h.compiles(Phase.SERVING)
    finally:
        vllm.deactivate()
    assert vllm.seen == ["hk_add"]
    assert len(serving) == 1


def test_vllm_error_monitor_on_top_of_jitwatch_error_mode_hides_the_compile(
    tmp_path, triton_cache, compile_only
) -> None:
    """jitwatch in ``error`` mode occupies ``jit_post_compile_hook``; vLLM's error-mode hook chained
    on top raises before calling it: jitwatch records no compile event, and the frame watch
    drops the compile from the in-flight list with that cause."""
    vllm = VllmJitMonitorEmulation("error")
    try:
        with monitored("error", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            with h.monitor.warmup():
                compile_add(n=1024)
            vllm.activate()
            try:
                with pytest.raises(RuntimeError, match="during inference") as info:
                    compile_add(n=1000)
                assert not isinstance(info.value, ServingCompileError)
            finally:
                vllm.deactivate()
            assert h.compiles(Phase.SERVING) == []
            deadline = time.monotonic() + 15
            while h.monitor.inflight() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert h.monitor.inflight() == []
            h.monitor.flush()
            (ev,) = h.events(EventKind.COMPILE_ABANDONED)
            assert "jit_post_compile_hook chained on top" in ev.attrs["cause"]
    finally:
        vllm.deactivate()


def test_both_in_error_mode_vllm_exception_wins(tmp_path, triton_cache, compile_only) -> None:
    """jitwatch error mode on top of vLLM error mode: jitwatch records, vLLM's RuntimeError propagates."""
    vllm = VllmJitMonitorEmulation("error")
    compile_add(n=1024)  # warmup
    vllm.activate()
    try:
        with monitored("error", journal_dir=tmp_path / "j2", triton_cache_dir=triton_cache) as h2:
            h2.monitor.activate()
            fresh_kernel_cache(hk_add)
            with pytest.raises(RuntimeError) as info:
                compile_add(n=1000)
            assert not isinstance(info.value, ServingCompileError)
            assert len(h2.compiles(Phase.SERVING)) == 1
    finally:
        vllm.deactivate()


# ------------------------------------------------------------------------------- autotuning
@pytest.mark.skipif(not HAS_AUTOTUNE_LISTENER, reason="knobs.autotuning.listener needs Triton 3.8+")
def test_autotune_listener_sink_unit() -> None:
    """Unit test of the sink: call our installed ``knobs.autotuning.listener`` with the kwargs
    ``Autotuner.run`` passes (Triton 3.8+). A real sweep needs launches: see the gpu-marked test in
    test_field_cases.py."""
    cfgs = [triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)]
    prev = Spy("autotuning", "listener").install()
    try:
        with monitored() as h:
            with h.monitor.warmup():
                pass
            # The sweep below lasted 0.25 s and ended now: it must lie inside serving, because a
            # record whose start was not seen takes the phase in effect halfway through it.
            time.sleep(0.3)
            listener = triton.knobs.autotuning.listener
            with h.monitor.request():
                out = listener(
                    fn=hk_add,
                    key=(1024, "torch.float32"),
                    best_config=cfgs[1],
                    configs_timings={cfgs[0]: [0.02, 0.01, 0.03], cfgs[1]: [0.01, 0.01, 0.02]},
                    duration=0.25,
                    cache_hit=False,
                )
            assert out is None
            listener(fn=hk_add, key=(2048,), best_config=cfgs[0], configs_timings={}, duration=None, cache_hit=True)
            events = h.events(EventKind.AUTOTUNE)
    finally:
        prev.uninstall()
    assert len(prev.calls) == 2  # chained, cache hits included
    assert len(events) == 1
    ev = events[0]
    assert ev.kernel == "hk_add"
    assert ev.phase is Phase.SERVING
    assert ev.duration_s == 0.25
    assert ev.key == "(1024, 'torch.float32')"
    assert ev.attrs["configs"] == 2
    assert "BLOCK: 64" in ev.attrs["best_config"]
    assert ev.attrs["module"] == __name__
    assert ev.attrs["request_id"] == 1


@pytest.mark.skipif(HAS_AUTOTUNE_LISTENER, reason="Triton 3.8+ has knobs.autotuning.listener")
def test_autotune_degraded_before_3_8(harness: MonitorHarness) -> None:
    """Triton < 3.8: no autotuning slot; the Autotuner wrappers instead, and worker_start says so."""
    slots_now = harness.triton.hooks.installed_slots()
    assert "autotuning_listener" not in slots_now
    assert set(WRAPS) <= set(slots_now)
    assert harness.triton.support is not None
    assert harness.triton.support.autotune_mechanism == "autotuner_wrap"
    start = harness.events(EventKind.WORKER_START)[0]
    assert "autotuning.listener" in start.attrs["degraded"]
    assert "prune_configs/_bench" in start.attrs["degraded"]
    assert set(WRAPS) <= set(start.attrs["hooks"])


def test_hookset_install_is_idempotent() -> None:
    class Sink:
        def hook_body(self, slot: str, link: Any) -> Any:
            def body(*a: Any, **k: Any) -> None:
                return None

            return body

        def wants(self, slot: str, support: Any) -> bool:
            return True

        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None

    hs = HookSet(Sink())  # type: ignore[arg-type]
    hs.install()
    first = slots()
    assert first["pre"] is not None and first["listener"] is not None
    hs.install()
    assert slots() == first
    hs.uninstall()
    hs.uninstall()


def test_process_wide_install_uses_module_functions(journal_dir, compile_only, triton_cache) -> None:
    mon = jitwatch.install("warn", rank=3, tracer_provider=False)
    assert jitwatch.install() is mon
    assert jitwatch.get_monitor() is mon
    assert mon.journal_dir == journal_dir
    compile_add()
    mon.flush()
    jitwatch.uninstall()
    assert jitwatch.get_monitor() is None
    from jitwatch.testing import read_events

    evs = read_events(journal_dir, EventKind.COMPILE)
    assert [e.rank for e in evs] == [3]


def test_compile_bypassing_jitfunction_is_a_listener_only_event(harness: MonitorHarness) -> None:
    """``triton.compile`` called directly (as Inductor does) fires only the compilation listener."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    src = ASTSource(fn=hk_add, signature=sig, constexprs={(4,): 32})
    triton.compile(src, target=GPUTarget("cuda", 90, 32))
    (ev,) = harness.compiles()
    assert ev.attrs["source"] == "compilation_listener"
    assert ev.kernel == "hk_add"
    assert ev.key and len(ev.key) == 64  # Triton's cache hash
    assert ev.cache_hit is False and "cubin" in ev.attrs["stages"]
    assert ev.duration_s == pytest.approx(sum(ev.attrs["stages"].values()))


def _direct_compile(block: int = 32) -> Any:
    """``triton.compile`` of ``hk_add`` called directly (as Inductor does): a listener-only compile."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return triton.compile(
        ASTSource(fn=hk_add, signature=sig, constexprs={(4,): block}), target=GPUTarget("cuda", 90, 32)
    )


def test_listener_only_compile_is_decoded_on_the_journal_writer_thread(harness: MonitorHarness, monkeypatch) -> None:
    """A listener-only compile hands the core references (``CompileSink.ended``): the stage
    times are decoded and the Capture built on the journal writer's thread, never on the
    compiling thread; the journaled event is the one the compiling thread used to build (kernel,
    Triton's cache hash as key, disk-cache hit, stages, ``attrs.source``, nothing else)."""
    from jitwatch.backends.triton import backend as triton_backend

    real_capture, real_stages = triton_backend._listener_capture, triton_backend.stage_seconds
    on: dict[str, list[str]] = {"capture": [], "stages": []}

    def capture(arg: Any) -> Any:
        on["capture"].append(threading.current_thread().name)
        return real_capture(arg)

    def stages(times: Any) -> Any:
        on["stages"].append(threading.current_thread().name)
        return real_stages(times)

    monkeypatch.setattr(triton_backend, "_listener_capture", capture)
    monkeypatch.setattr(triton_backend, "stage_seconds", stages)
    miss = _direct_compile()
    hit = _direct_compile()  # the same source again: Triton's disk cache
    compiles = harness.compiles()
    assert on["capture"] == ["jitwatch-journal-writer"] * 2
    assert on["stages"] == ["jitwatch-journal-writer"] * 2
    assert [(e.kernel, e.key, e.cache_hit) for e in compiles] == [
        ("hk_add", miss.hash, False),
        ("hk_add", hit.hash, True),
    ]
    ident = set(harness.monitor.identity.attrs())
    for ev in compiles:
        assert set(ev.attrs) - ident == {"stages", "source"} and ev.attrs["source"] == "compilation_listener"
        assert ev.duration_s == pytest.approx(sum(ev.attrs["stages"].values()), rel=1e-12, abs=1e-12)
        assert ev.phase is Phase.STARTUP and ev.start_ts is not None
    assert "cubin" in compiles[0].attrs["stages"] and harness.monitor.hook_errors == 0


def test_listener_only_compile_warns_once_per_key_in_serving(harness: MonitorHarness, caplog) -> None:
    harness.monitor.activate()
    time.sleep(0.01)
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        keys = [_direct_compile(32).hash, _direct_compile(32).hash, _direct_compile(64).hash]
        compiles = harness.compiles(Phase.SERVING)
    lines = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    assert [e.key for e in compiles] == keys and keys[0] == keys[1] != keys[2]
    assert len(lines) == 2 and all("Triton kernel 'hk_add'" in line for line in lines)
    assert keys[0] in lines[0] and keys[2] in lines[1]


def test_listener_only_compile_raises_in_error_mode_after_recording(tmp_path, triton_cache) -> None:
    with monitored("error", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        _direct_compile(32)  # startup: recorded, no raise
        h.monitor.activate()
        time.sleep(0.01)
        with pytest.raises(ServingCompileError, match="Triton kernel 'hk_add'"):
            _direct_compile(64)
        compiles = h.compiles()
    assert [(e.phase, e.attrs["source"]) for e in compiles] == [
        (Phase.STARTUP, "compilation_listener"),
        (Phase.SERVING, "compilation_listener"),
    ]


def test_listener_only_serving_compile_fix_warms_its_code_path_not_a_manifest(harness: MonitorHarness, caplog) -> None:
    """A listener-only compile cannot be in a manifest (no specialization_data): its fix says to
    run the code path that compiles it in warmup, in the event and the warn line; a JIT compile of
    the same kernel, also never warmed, still gets the manifest fix."""
    from jitwatch.backends.triton.explain import listener_only_fix

    harness.monitor.activate()
    time.sleep(0.01)
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        direct = _direct_compile(32)
        assert compile_add() is not None
        alone, jit = harness.compiles(Phase.SERVING)
    assert (alone.key, alone.attrs["source"], alone.attrs["reason_kind"]) == (
        direct.hash,
        "compilation_listener",
        "never_warmed",
    )
    assert alone.attrs["fixes"] == [listener_only_fix("hk_add")]
    (fix,) = alone.attrs["fixes"]
    assert "triton.compile" in fix and "torch.compile" in fix and "manifest export" not in fix
    assert "source" not in jit.attrs and "manifest export" in jit.attrs["fixes"][0]
    lines = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    assert len(lines) == 2 and direct.hash in lines[0]
    assert f"(fix: {fix})" in lines[0] and "manifest" in lines[1]


def test_listener_only_new_key_fix_warms_its_code_path(tmp_path, triton_cache) -> None:
    """A listener-only compile of a new key of a kernel whose other key compiled in warmup: the
    reason names the kernel, the fix is the listener-only one (not "record a manifest")."""
    from jitwatch.backends.triton.explain import listener_only_fix

    with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        with h.monitor.warmup():
            _direct_compile(32)
        _direct_compile(64)
        (late,) = h.compiles(Phase.SERVING)
    assert late.attrs["reason_kind"] == "unknown"
    assert late.attrs["reason"] == "new key; 1 other key of kernel hk_add was warmed"
    assert late.attrs["fixes"] == [listener_only_fix("hk_add")]


def test_listener_only_key_compiled_again_in_serving_is_not_called_new(tmp_path, triton_cache) -> None:
    """The same direct ``triton.compile`` in warmup and again in serving (no in-memory cache: a
    disk-cache hit): the serving compile's key is the warmed one, so its reason says it compiled
    again and its fix is to reuse the warmed kernel, not "new key" nor "warm it"."""
    from jitwatch.backends.triton.explain import compiled_again

    with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        with h.monitor.warmup():
            first = _direct_compile(32)
        again = _direct_compile(32)
        (late,) = h.compiles(Phase.SERVING)
    assert late.key == again.hash == first.hash and late.cache_hit is True
    assert late.attrs["reason"] == compiled_again("hk_add").text
    assert late.attrs["fixes"] == list(compiled_again("hk_add").fixes)
    assert "reuse" in late.attrs["fixes"][0] and "new key" not in late.attrs["reason"]


def test_listener_only_capture_that_raises_is_a_hook_error(harness: MonitorHarness, monkeypatch) -> None:
    """A fault in the deferred build (on the writer thread) is a Triton hook error, counted and
    journaled; the compile is still journaled with its name and key, and the JIT compile after it
    is whole."""
    from jitwatch.backends.triton import backend as triton_backend

    def broken(arg: Any) -> Any:
        raise ValueError("cannot decode the stage times")

    monkeypatch.setattr(triton_backend, "_listener_capture", broken)
    direct = _direct_compile()
    assert compile_add() is not None
    alone, jit = harness.compiles()
    assert (alone.kernel, alone.key, alone.attrs["capture_error"]) == ("hk_add", direct.hash, "ValueError")
    assert jit.kernel == "hk_add" and "signature" in jit.attrs and "capture_error" not in jit.attrs
    assert harness.monitor.hook_errors == 1
    (error,) = harness.events(EventKind.HOOK_ERROR)
    assert error.backend == "triton" and "cannot decode the stage times" in error.attrs["error"]
    assert harness.counters()[(0, "hook_errors:triton")] == 1


@pytest.mark.parametrize("where", ["same_thread", "other_thread"])
def test_direct_compile_is_not_matched_to_a_jit_compile_in_flight(tmp_path, triton_cache, where: str) -> None:
    """A direct ``triton.compile`` of a kernel (Inductor-style) with a signature *equal* to that of
    a JIT compile of the same kernel still in flight (before its listener call) stays a
    listener-only compile: outside ``error`` mode the listener ends JIT compiles, so a match would
    end the JIT compile early with the direct compile's duration, stage times and disk-cache hit,
    and the JIT compile's own listener call would then become a listener-only event.

    The JIT compile is held open in a ``jit_cache_hook`` installed before jitwatch's (it runs after
    jitwatch began the compile); there the direct compile runs (``same_thread``), or another thread
    runs it while this one waits (``other_thread``). The Triton cache starts empty: the direct
    compile misses it, the JIT compile then hits it."""
    from triton.compiler import ASTSource

    done: list[Any] = []

    def direct(info: dict[str, Any]) -> None:
        src = ASTSource(hk_add, dict(info["signature"]), dict(info["constants"]), info["configs"][0])
        done.append(triton.compile(src, options={"num_warps": info["num_warps"]}))

    def host_pre_hook(*args: Any, **kwargs: Any) -> None:
        if where == "same_thread":
            direct(kwargs["compile"])
        else:
            t = threading.Thread(target=direct, args=(kwargs["compile"],))
            t.start()
            t.join(120)
        return None

    rt = triton.knobs.runtime
    rt.jit_cache_hook = host_pre_hook
    try:
        with monitored("warn", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            assert compile_add() is not None
            assert len(done) == 1
            compiles = h.compiles()
            assert h.triton.pending() == 0 and h.monitor.inflight() == []
    finally:
        rt.jit_cache_hook = None
    by_source = {c.attrs.get("source"): c for c in compiles}
    assert len(compiles) == 2 and set(by_source) == {None, "compilation_listener"}
    jit, alone = by_source[None], by_source["compilation_listener"]
    assert alone.cache_hit is False and alone.key == done[0].hash  # the direct compile: a miss
    assert jit.cache_hit is True  # the JIT compile: a disk-cache hit, after the direct compile
    assert jit.duration_s >= alone.duration_s  # it began before the direct compile and ended after


# ------------------------------------------------------- autotune: Autotuner wrappers (< 3.8)
# Unit tests of the ``Autotuner.prune_configs``/``Autotuner._bench`` wrappers (Triton 3.4-3.7)
# driven through a REAL ``triton.autotune`` Autotuner and its real ``Autotuner.run``. Only the
# benchmarker is a stub (``do_bench=``): benchmarking needs launches, and the compile-only driver
# cannot launch. The stub never calls ``kernel_call``; it returns fixed timings. After the sweep,
# ``Autotuner.run`` launches the best config, which the compile-only driver refuses
# (``CompileOnlyLaunchError``) — the sweep and its event are complete by then. The same tests run on
# Triton 3.8+, where the event comes from ``knobs.autotuning.listener`` instead (same shape).
# The end-to-end sweep with real launches is the gpu test in test_field_cases.py (case 6).
from triton.runtime.autotuner import Autotuner  # noqa: E402

from jitwatch.backends.triton.compile_only import CompileOnlyLaunchError  # noqa: E402
from jitwatch.backends.triton.compile_only import compile_only as compile_only_driver  # noqa: E402

ORIGINAL_AUTOTUNER = {name: Autotuner.__dict__[name] for name in ("prune_configs", "_bench")}
AT_CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)]
MECHANISM = "listener" if HAS_AUTOTUNE_LISTENER else "autotuner_wrap"
SOURCE = "autotuning_listener" if HAS_AUTOTUNE_LISTENER else "autotuner_wrap"


@pytest.fixture(autouse=True)
def _autotuner_restored() -> Any:
    yield
    now = {name: Autotuner.__dict__.get(name) for name in ORIGINAL_AUTOTUNER}
    if now != ORIGINAL_AUTOTUNER:
        for name, fn in ORIGINAL_AUTOTUNER.items():
            setattr(Autotuner, name, fn)
        pytest.fail(f"test left Autotuner methods changed: {now}")


class StubBench:
    """``do_bench`` stand-in: returns ``timings[i]`` for the i-th config benchmarked; never launches."""

    def __init__(self, raises: BaseException | None = None) -> None:
        self.calls = 0
        self.raises = raises

    def __call__(self, kernel_call: Any, quantiles: Any) -> list[float]:
        self.calls += 1
        if self.raises is not None:
            raise self.raises
        return [0.05, 0.04, 0.06] if self.calls % 2 else [0.01, 0.01, 0.02]  # the 2nd config wins


def make_tuner(bench: StubBench, cache_results: bool = False) -> Autotuner:
    """A fresh Autotuner (empty in-memory autotune cache) over ``hk_add``."""
    tuner = triton.autotune(configs=AT_CONFIGS, key=["n"], do_bench=bench, cache_results=cache_results)(hk_add)
    assert isinstance(tuner, Autotuner)
    return tuner


def sweep(tuner: Autotuner, n: int = 1024) -> None:
    with pytest.raises(CompileOnlyLaunchError):
        tuner[(1,)](X, X, X, n)


def test_autotune_mechanism_and_install_restores_originals(tmp_path, triton_cache) -> None:
    """3.8+: the listener, Autotuner untouched. < 3.8: both methods wrapped while installed and the
    very same function objects back afterwards."""
    assert probe_triton().autotune_mechanism == MECHANISM
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        assert h.triton.support is not None and h.triton.support.autotune_mechanism == MECHANISM
        wrapped = {name: Autotuner.__dict__[name] is not fn for name, fn in ORIGINAL_AUTOTUNER.items()}
        slots_now = h.triton.hooks.installed_slots()
    if HAS_AUTOTUNE_LISTENER:
        assert wrapped == {"prune_configs": False, "_bench": False}
        assert not set(WRAPS) & set(slots_now) and "autotuning_listener" in slots_now
    else:
        assert wrapped == {"prune_configs": True, "_bench": True}
        assert set(WRAPS) <= set(slots_now)
    assert {name: Autotuner.__dict__[name] for name in ORIGINAL_AUTOTUNER} == ORIGINAL_AUTOTUNER


def test_autotune_sweep_event_then_cache_hit_emits_nothing(harness: MonitorHarness) -> None:
    """Unit test of the wrappers (stub benchmarker): one miss → one autotune event of the 3.8+ shape;
    a cache hit (no prune, no _bench) → nothing; a new key → a second event."""
    bench = StubBench()
    tuner = make_tuner(bench)
    with harness.monitor.warmup():
        sweep(tuner)
    sweep(tuner)  # in-memory autotune cache hit: Autotuner.run calls neither wrapped method
    assert bench.calls == 2
    with harness.monitor.request():
        sweep(tuner, n=2048)
    events = harness.events(EventKind.AUTOTUNE)
    assert [(e.phase, e.key) for e in events] == [
        (Phase.WARMUP, "(1024, 'torch.float32', 'torch.float32', 'torch.float32')"),
        (Phase.SERVING, "(2048, 'torch.float32', 'torch.float32', 'torch.float32')"),
    ]
    for ev in events:
        assert ev.kernel == "hk_add"
        assert ev.attrs["module"] == __name__
        assert ev.attrs["configs"] == len(AT_CONFIGS)
        assert ev.attrs["source"] == SOURCE
        assert "BLOCK: 64" in ev.attrs["best_config"]
        assert ev.duration_s is not None and ev.duration_s >= 0
    assert "request_id" not in events[0].attrs and events[1].attrs["request_id"] == 1
    assert harness.monitor.hook_errors == 0


def test_autotuner_warmup_emits_nothing(harness: MonitorHarness) -> None:
    """``Autotuner.warmup`` prunes and compiles every config but benchmarks nothing: no autotune
    event (its open sweep must not leak into the next real one)."""
    bench = StubBench()
    tuner = make_tuner(bench)
    tuner.warmup(X, X, X, 1024, grid=(1,))
    assert len(harness.compiles()) == len(AT_CONFIGS)
    assert harness.events(EventKind.AUTOTUNE) == []
    sweep(tuner)
    (ev,) = harness.events(EventKind.AUTOTUNE)
    assert ev.attrs["configs"] == len(AT_CONFIGS) and bench.calls == len(AT_CONFIGS)


def test_autotune_disk_cache_hit_emits_nothing(harness: MonitorHarness) -> None:
    """``cache_results=True``: a second Autotuner finds the timings on disk (``check_disk_cache``),
    prunes but runs no ``_bench``: no event (3.8+: the listener's ``cache_hit=True`` is dropped)."""
    first, second = StubBench(), StubBench()
    sweep(make_tuner(first, cache_results=True))
    sweep(make_tuner(second, cache_results=True))
    assert (first.calls, second.calls) == (len(AT_CONFIGS), 0)
    assert len(harness.events(EventKind.AUTOTUNE)) == 1


def test_autotune_benchmark_exception_propagates_unchanged(harness: MonitorHarness) -> None:
    """An exception from the original ``_bench`` (here the benchmarker's) leaves ``Autotuner.run``
    unchanged and aborts the sweep: no event, no hook error; the next sweep is recorded."""
    boom = ValueError("benchmarker broke")
    bench = StubBench(raises=boom)
    tuner = make_tuner(bench)
    with pytest.raises(ValueError) as info:
        tuner[(1,)](X, X, X, 1024)
    assert info.value is boom
    assert harness.events(EventKind.AUTOTUNE) == [] and harness.monitor.hook_errors == 0
    bench.raises = None
    sweep(tuner)
    assert len(harness.events(EventKind.AUTOTUNE)) == 1


def test_autotune_sink_fault_is_counted_not_raised(tmp_path, triton_cache, monkeypatch) -> None:
    """A fault inside jitwatch's part never reaches Triton: the sweep completes, the error is counted."""
    from jitwatch.backends.triton import TritonBackend

    def broken(self: Any, kwargs: dict[str, Any]) -> None:
        raise RuntimeError("jitwatch bug")

    monkeypatch.setattr(TritonBackend, "on_autotune", broken)  # before install: the 3.8+ listener binds it then
    bench = StubBench()
    with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        sweep(make_tuner(bench))  # reaches the launch: the sweep was not interrupted
        assert bench.calls == len(AT_CONFIGS)
        assert h.monitor.hook_errors == 1
        (err,) = h.events(EventKind.HOOK_ERROR)
    assert "jitwatch bug" in err.attrs["error"]


@pytest.mark.skipif(HAS_AUTOTUNE_LISTENER, reason="the Autotuner wrappers are installed only before Triton 3.8")
def test_autotuner_wrap_chains_with_other_wrappers(tmp_path, triton_cache) -> None:
    """Someone else's class-level ``_bench`` wrapper below jitwatch is called and restored on
    uninstall; one installed on top of jitwatch survives jitwatch's uninstall (ours passes through)."""
    calls: list[str] = []

    def wrap(name: str, inner: Any) -> Any:
        def other_bench(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return inner(self, *args, **kwargs)

        return other_bench

    below = wrap("below", ORIGINAL_AUTOTUNER["_bench"])
    Autotuner._bench = below  # type: ignore[method-assign]
    try:
        with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            ours = Autotuner.__dict__["_bench"]
            assert ours is not below
            above = wrap("above", ours)
            Autotuner._bench = above  # type: ignore[method-assign]
            sweep(make_tuner(StubBench()))
            assert calls == ["above", "below"] * len(AT_CONFIGS)
            assert [e.attrs["configs"] for e in h.events(EventKind.AUTOTUNE)] == [len(AT_CONFIGS)]
            journal = h.journal_dir
        assert Autotuner.__dict__["_bench"] is above  # not cut out of their chain
        assert Autotuner.__dict__["prune_configs"] is ORIGINAL_AUTOTUNER["prune_configs"]
        calls.clear()
        bench = StubBench()
        with compile_only_driver():
            sweep(make_tuner(bench))  # ours is a pass-through now
        assert calls == ["above", "below"] * len(AT_CONFIGS) and bench.calls == len(AT_CONFIGS)
        from jitwatch.testing import read_events

        assert len(read_events(journal, EventKind.AUTOTUNE)) == 1
        Autotuner._bench = below  # type: ignore[method-assign]
        with monitored(journal_dir=tmp_path / "j2", triton_cache_dir=triton_cache):
            assert Autotuner.__dict__["_bench"] is not below
        assert Autotuner.__dict__["_bench"] is below  # restored exactly
    finally:
        Autotuner._bench = ORIGINAL_AUTOTUNER["_bench"]  # type: ignore[method-assign]
