"""The core monitor with the Triton backend: compile events from real compile-only compiles, phases, modes."""

from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from jitwatch import Mode, ServingCompileError, WorkerIdentity
from jitwatch.config import ConfigError, Settings
from jitwatch.core.events import EventKind, Phase
from jitwatch.core.monitor import NullSink
from jitwatch.testing import MonitorHarness, TritonHookRecorder, fresh_kernel_cache, monitored, read_events
from jitwatch.worker import create_monitor


@triton.jit
def mon_scale(out_ptr, x_ptr, n, alpha, BLOCK: tl.constexpr, USE_ALPHA: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if USE_ALPHA:
        x = x * alpha
    tl.store(out_ptr + offs, x, mask=m)


X = torch.empty(4096, dtype=torch.float32)


def compile_scale(n: int = 1024, block: int = 64, use_alpha: bool = True):
    return mon_scale.warmup(X, X, n, 0.5, BLOCK=block, USE_ALPHA=use_alpha, grid=(1,))


@pytest.fixture(autouse=True)
def _fresh_kernel() -> None:
    fresh_kernel_cache(mon_scale)


def test_one_event_per_compile_with_every_field(harness: MonitorHarness) -> None:
    t0 = time.time()
    with harness.monitor.warmup():
        assert compile_scale() is not None
    t1 = time.time()
    compiles = harness.compiles()
    assert len(compiles) == 1
    ev = compiles[0]
    assert ev.kernel == "mon_scale"
    assert ev.phase is Phase.WARMUP
    assert ev.key and "('constexpr', 64)" in ev.key
    assert ev.attrs["signature"] == {
        "out_ptr": "*fp32",
        "x_ptr": "*fp32",
        "n": "i32",
        "alpha": "fp32",
        "BLOCK": "constexpr",
        "USE_ALPHA": "constexpr",
    }
    assert ev.attrs["constexprs"] == {"BLOCK": 64, "USE_ALPHA": True}
    assert ev.attrs["options"]["num_warps"] == 4
    assert ev.attrs["module"] == __name__
    assert ev.attrs["is_warmup_call"] is True
    assert t0 <= ev.start_ts <= ev.ts <= t1
    assert ev.duration_s is not None and 0 < ev.duration_s <= t1 - t0
    stages = ev.attrs["stages"]
    for stage in ("ir_initialization", "ttir", "ttgir", "llir", "ptx", "cubin"):
        assert stage in stages and stages[stage] >= 0
    assert sum(stages.values()) <= ev.duration_s + 0.01
    assert ev.cache_hit is False
    assert (ev.rank, ev.pid, ev.host) == (0, os.getpid(), socket.gethostname())
    # the in-memory cache now holds it: same call, no second compile
    compile_scale()
    assert len(harness.compiles()) == 1
    assert harness.monitor.compiles_by_phase[Phase.WARMUP] == 1


def test_each_new_specialization_is_one_event(harness: MonitorHarness) -> None:
    compile_scale(n=1024)  # 'D'
    compile_scale(n=1000)  # plain i32
    compile_scale(n=1)  # ==1: constant
    compile_scale(n=1024, block=128)  # constexpr
    compile_scale(n=2048)  # same class as 1024: no compile
    compiles = harness.compiles()
    assert len(compiles) == 4
    assert len({c.key for c in compiles}) == 4
    assert [c.attrs["constexprs"].get("BLOCK") for c in compiles] == [64, 64, 64, 128]
    assert compiles[2].attrs["constexprs"].get("n") == 1  # Triton folds n == 1 into a constexpr
    assert all(c.phase is Phase.STARTUP for c in compiles)


def test_disk_cache_hit_after_in_memory_cache_cleared(harness: MonitorHarness) -> None:
    compile_scale()
    fresh_kernel_cache(mon_scale)  # same TRITON_CACHE_DIR, empty in-memory cache
    compile_scale()
    first, second = harness.compiles()
    assert first.key == second.key
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert "cubin" not in second.attrs["stages"]  # nothing lowered on a hit


@pytest.mark.slow
def test_disk_cache_hit_in_second_process(harness: MonitorHarness) -> None:
    """A second worker process with the same TRITON_CACHE_DIR and journal: cache_hit True, its own pid."""
    compile_scale()
    harness.monitor.flush()
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from jitwatch.testing import compile_only_driver
        from jitwatch import WorkerIdentity, create_monitor
        from jitwatch.config import Settings
        from pathlib import Path
        import test_monitor_triton as test_monitor
        with compile_only_driver():
            mon = create_monitor(Settings(journal_dir=Path({str(harness.journal_dir)!r})),
                                 identity=WorkerIdentity(rank=1), tracer_provider=False).install()
            test_monitor.compile_scale()
            mon.uninstall()
        """
    )
    env = {**os.environ, "TRITON_CACHE_DIR": str(harness.triton_cache_dir)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    compiles = harness.compiles()
    assert len(compiles) == 2
    assert [c.cache_hit for c in compiles] == [False, True]
    assert [c.rank for c in compiles] == [0, 1]
    assert compiles[1].pid != os.getpid()
    assert compiles[0].key == compiles[1].key


def test_phases_startup_warmup_serving(harness: MonitorHarness) -> None:
    mon = harness.monitor
    assert mon.phase is Phase.STARTUP
    compile_scale(n=1024)
    with mon.warmup():
        assert mon.phase is Phase.WARMUP
        compile_scale(n=1000)
    assert mon.phase is Phase.SERVING
    compile_scale(n=1)
    phases = [c.phase for c in harness.compiles()]
    assert phases == [Phase.STARTUP, Phase.WARMUP, Phase.SERVING]
    kinds = [e.kind for e in harness.events() if e.kind is not EventKind.COMPILE]
    assert kinds == [EventKind.WORKER_START, EventKind.WARMUP_START, EventKind.WARMUP_COMPLETE]
    done = harness.events(EventKind.WARMUP_COMPLETE)[0]
    assert done.attrs["kernels_compiled"] == 1
    assert done.attrs["compile_seconds"] > 0


def test_begin_warmup_activate_without_context_manager(harness: MonitorHarness) -> None:
    mon = harness.monitor
    mon.begin_warmup()
    compile_scale()
    mon.activate()
    compile_scale(n=1000)
    assert [c.phase for c in harness.compiles()] == [Phase.WARMUP, Phase.SERVING]


def test_failed_warmup_stays_in_warmup(harness: MonitorHarness) -> None:
    with pytest.raises(ZeroDivisionError):
        with harness.monitor.warmup():
            compile_scale()
            raise ZeroDivisionError
    assert harness.monitor.phase is Phase.WARMUP
    assert harness.events(EventKind.WARMUP_COMPLETE) == []


def test_request_ids_and_first_request(harness: MonitorHarness) -> None:
    mon = harness.monitor
    with mon.request():  # before serving: not timed
        pass
    with mon.warmup():
        compile_scale()
    with mon.request("first"):
        compile_scale(n=1000)
    with mon.request():
        pass
    serving = harness.compiles(Phase.SERVING)
    assert len(serving) == 1 and serving[0].attrs["request_id"] == 2
    firsts = harness.events(EventKind.FIRST_REQUEST)
    assert len(firsts) == 1
    assert firsts[0].attrs == {"request_id": 2, "request": "first"}
    assert firsts[0].duration_s is not None and firsts[0].duration_s >= serving[0].duration_s


def test_every_event_carries_parallel_ranks_and_request_names(tmp_path: Path, triton_cache: Path) -> None:
    """TP/PP/DP ranks ride on every event (not only worker_start); a named request's name rides on
    the compiles inside it (the vLLM plugin names requests after vLLM's request ids)."""
    ident = WorkerIdentity(rank=3, tp_rank=1, pp_rank=0, dp_rank=2)
    with monitored("warn", identity=ident, journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        with h.monitor.warmup():
            compile_scale()
        with h.monitor.request("vllm:req-7"):
            compile_scale(n=1000)
        events = h.events()
    kinds = {e.kind for e in events}
    assert {EventKind.WARMUP_START, EventKind.WARMUP_COMPLETE, EventKind.FIRST_REQUEST, EventKind.COMPILE} <= kinds
    for e in events:
        assert (e.rank, e.attrs.get("tp_rank"), e.attrs.get("pp_rank"), e.attrs.get("dp_rank")) == (3, 1, 0, 2), e
    serving = [e for e in events if e.kind is EventKind.COMPILE and e.phase is Phase.SERVING]
    assert len(serving) == 1 and serving[0].attrs["request"] == "vllm:req-7"


# ----------------------------------------------------------------------------------- modes
def test_warn_logs_once_per_kernel_and_key(harness: MonitorHarness, caplog) -> None:
    harness.monitor.activate()
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        compile_scale(n=1000)
        fresh_kernel_cache(mon_scale)
        compile_scale(n=1000)  # same key again (disk hit): recorded, not logged again
        compile_scale(n=1)  # new key: logged
        harness.monitor.flush()  # the line is logged by the writer thread, with the reason
    warnings = [r for r in caplog.records if "post-warmup compile" in r.getMessage()]
    assert len(warnings) == 2
    assert "'mon_scale'" in warnings[0].getMessage() and "rank 0" in warnings[0].getMessage()
    assert "never warmed" in warnings[0].getMessage()
    assert len(harness.compiles(Phase.SERVING)) == 3


@pytest.mark.parametrize("on_path", [False, True])
def test_the_warn_line_commands_run_as_printed_without_an_activated_venv(
    harness: MonitorHarness, caplog, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, on_path: bool
) -> None:
    """The warn line's fix (record a manifest) and its pointer to the full key (`why --json`) name
    this interpreter's jitwatch: README's `make demo` leaves .venv not activated, where a bare
    `jitwatch` is "command not found". With this interpreter's jitwatch first on PATH, the bare
    command. The journal keeps the fix as written (bare, relative)."""
    from jitwatch.backends.explain import MANIFEST_EXPORT

    bindir = os.path.dirname(sys.executable)
    script = os.path.join(bindir, "jitwatch")
    if not os.path.exists(script):
        pytest.skip("no jitwatch script next to this interpreter")
    monkeypatch.setenv("PATH", (bindir + os.pathsep if on_path else "") + str(tmp_path))
    jw = "jitwatch" if on_path else shlex.quote(script)  # /work/... (not under a home here)
    harness.monitor.activate()
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        compile_scale()  # never warmed: the fix records and replays a manifest
        harness.monitor.flush()
    (line,) = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    jdir = shlex.quote(str(harness.journal_dir))
    assert f"record a manifest (`{jw} manifest export --journal-dir {jdir} -o {jdir}/manifest.json`)" in line, line
    assert line.endswith(f"(the full key: `{jw} why --journal-dir {jdir} --json`)"), line
    assert ("`jitwatch manifest export" in line and "`jitwatch why" in line) is on_path, line
    (event,) = harness.compiles(Phase.SERVING)
    assert MANIFEST_EXPORT in event.attrs["fixes"][0]  # stored as written


def test_the_warn_line_shows_the_specialization_not_the_raw_key(
    harness: MonitorHarness, caplog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warn line says what the key means, per argument in `jitwatch why`'s words, and the
    launch options the key carries; it ended with Triton's raw key, a Python list and dict glued
    together (``[('*fp32', 'D'), ...]{'debug': False, ...}``). The full key stays in the journal
    (and `jitwatch why --json`, which the line names with its journal). The description is built
    on the journal writer's thread, never on the compiling thread."""
    import threading

    from jitwatch.backends.explain import local_jitwatch
    from jitwatch.backends.triton import explain as triton_explain

    described_on: list[str] = []
    describe = triton_explain.describe_key

    def spy(key: str | None, attrs: Any) -> str | None:
        described_on.append(threading.current_thread().name)
        return describe(key, attrs)

    monkeypatch.setattr(triton_explain, "describe_key", spy)
    harness.monitor.activate()
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        mon_scale.warmup(X, X, 1000, 0.5, BLOCK=64, USE_ALPHA=True, num_warps=8, grid=(1,))
        harness.monitor.flush()
    (line,) = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    (event,) = harness.compiles(Phase.SERVING)
    assert event.key is not None and event.key.startswith("[(") and "num_warps" in event.key
    assert event.key not in line and "[(" not in line and "{'" not in line, line
    assert line.endswith(
        "; specialization out_ptr: *fp32 aligned16, x_ptr: *fp32 aligned16, n: i32 other, alpha: fp32, "
        "BLOCK: constexpr 64, USE_ALPHA: constexpr True, num_warps=8 "
        f"(the full key: `{local_jitwatch()} why --journal-dir {harness.journal_dir} --json`)"
    ), line
    assert described_on and threading.main_thread().name not in described_on, described_on


@triton.jit
def mon_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_the_warn_line_tells_an_int_passed_as_1_from_a_constexpr_1(harness: MonitorHarness, caplog) -> None:
    """Triton's key and signature show a runtime int passed as 1 as ``constexpr`` (its ``==1``
    specialization), like a parameter declared ``tl.constexpr``: the line read ``n: constexpr 1``,
    which sends the reader to a constexpr that does not exist. The event now carries the kernel's
    declared constexprs (``attrs["declared_constexprs"]``, kept in the specialization record), so
    ``n`` reads ``==1`` and the declared ``BLOCK`` passed as 1 stays ``constexpr 1``."""
    fresh_kernel_cache(mon_one)
    harness.monitor.activate()
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        mon_one.warmup(X, 1, BLOCK=1, grid=(1,))
        harness.monitor.flush()
    (line,) = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    assert "; specialization x_ptr: *fp32 aligned16, n: ==1, BLOCK: constexpr 1" in line, line
    (event,) = harness.compiles(Phase.SERVING)
    assert event.attrs["declared_constexprs"] == ["BLOCK"]
    assert event.attrs["signature"]["n"] == "constexpr"  # Triton's own words, kept


def test_describe_key_does_not_parse_a_key_past_the_journal_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key longer than the journal stores (``DESCRIBED_KEY_MAX_CHARS``) is not parsed on the
    writer's thread (a 1.4 MB key took 2.1 s there): ``describe_key`` returns ``None`` at once, and
    the warning line shows the key, cut. A key at the cap is still described."""
    from jitwatch.backends.triton import explain as triton_explain

    parsed: list[int] = []
    real = triton_explain.parse_key

    def spy(key: str) -> Any:
        parsed.append(len(key))
        return real(key)

    monkeypatch.setattr(triton_explain, "parse_key", spy)
    attrs = {"signature": {f"a{i}": "i32" for i in range(4000)}}
    head = "[" + ", ".join("('i32', 'D')" for _ in range(4000))
    fits = head[: triton_explain.DESCRIBED_KEY_MAX_CHARS - 40].rsplit(",", 1)[0] + "]{'num_warps': 4}"
    assert triton_explain.describe_key(fits, attrs) is not None and parsed
    parsed.clear()
    huge = head + "]{'num_warps': 4}"
    assert len(huge) > triton_explain.DESCRIBED_KEY_MAX_CHARS
    assert triton_explain.describe_key(huge, attrs) is None
    assert parsed == []


def test_without_a_signature_no_constexpr_1_is_read_as_an_int(harness: MonitorHarness) -> None:
    """``declared_constexprs`` names parameters; a key's arguments are named only by the event's
    ``signature``. Without it (attrs of a Triton whose compile dict has none, or cut by the journal's
    size caps) the arguments are ``arg0``, ``arg1``, …, none of them a declared name: the line must
    not call the declared ``BLOCK`` passed as 1 an int folded to 1 — it keeps Triton's word."""
    from jitwatch.backends.triton.explain import describe_key

    fresh_kernel_cache(mon_one)
    mon_one.warmup(X, 1, BLOCK=1, grid=(1,))
    (event,) = harness.compiles()
    attrs = {k: v for k, v in event.attrs.items() if k != "signature"}
    assert attrs["declared_constexprs"] == ["BLOCK"]
    assert describe_key(event.key, attrs) == "arg0: *fp32 aligned16, arg1: constexpr 1, arg2: constexpr 1"
    described = describe_key(event.key, event.attrs)  # with it: told apart
    assert described == "x_ptr: *fp32 aligned16, n: ==1, BLOCK: constexpr 1"


def test_error_mode_raises_records_and_still_chains(tmp_path, triton_cache) -> None:
    calls: list[str] = []
    prev_post = triton.knobs.runtime.jit_post_compile_hook
    triton.knobs.runtime.jit_post_compile_hook = lambda **kw: calls.append(kw["fn"].name)
    try:
        with monitored("error", journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            with h.monitor.warmup():
                compile_scale()  # warmup compiles are fine
            with pytest.raises(ServingCompileError, match="mon_scale") as info:
                compile_scale(n=1000)
            assert isinstance(info.value, RuntimeError)
            serving = h.compiles(Phase.SERVING)
    finally:
        triton.knobs.runtime.jit_post_compile_hook = prev_post
    assert calls == ["mon_scale", "mon_scale"]
    assert len(serving) == 1


def test_off_mode_installs_and_records_nothing(tmp_path, compile_only, triton_cache) -> None:
    knobs = triton.knobs
    before = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener)
    jdir = tmp_path / "j"
    mon = create_monitor(Settings(journal_dir=jdir), mode="off", tracer_provider=False).install()
    try:
        assert (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook, knobs.compilation.listener) == before
        with mon.warmup():
            compile_scale()
        with mon.request():
            compile_scale(n=1000)
        assert mon.flush()
    finally:
        mon.uninstall()
    assert not jdir.exists()
    assert isinstance(mon.sink, NullSink) and not mon.active


# ------------------------------------------------------------------------------- identity
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, 0),
        ({"LOCAL_RANK": "5"}, 5),
        ({"RANK": "3", "LOCAL_RANK": "1"}, 3),
        ({"JITWATCH_RANK": "7", "LOCAL_RANK": "1"}, 8),
        ({"JITWATCH_RANK": "7", "RANK": "3", "LOCAL_RANK": "1"}, 10),
    ],
)
def test_rank_from_env(monkeypatch, env: dict[str, str], expected: int) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ident = WorkerIdentity.from_env()
    assert ident.rank == expected
    assert ident.local_rank == (int(env["LOCAL_RANK"]) if "LOCAL_RANK" in env else None)


def test_rank_explicit_beats_env_and_parallel_ranks(monkeypatch, tmp_path, compile_only, triton_cache) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("JITWATCH_TP_RANK", "1")
    monkeypatch.setenv("JITWATCH_PP_RANK", "0")
    import jitwatch

    mon = jitwatch.install(rank=9, journal_dir=tmp_path / "j", tracer_provider=False)
    compile_scale()
    mon.flush()
    ev = read_events(tmp_path / "j", EventKind.COMPILE)[0]
    assert ev.rank == 9
    assert ev.attrs["tp_rank"] == 1 and ev.attrs["pp_rank"] == 0
    start = read_events(tmp_path / "j", EventKind.WORKER_START)[0]
    assert start.attrs["tp_rank"] == 1 and start.attrs["mode"] == "warn"


def test_bad_rank_env_raises_config_error(monkeypatch) -> None:
    monkeypatch.setenv("JITWATCH_TP_RANK", "zero")
    with pytest.raises(ConfigError, match="JITWATCH_TP_RANK"):
        WorkerIdentity.from_env()


def test_identity_labels_go_into_compile_attrs(tmp_path, triton_cache) -> None:
    ident = WorkerIdentity(rank=2, tp_rank=2, dp_rank=0, labels={"model": "tiny"})
    with monitored(identity=ident, journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
        compile_scale()
        ev = h.compiles()[0]
    assert ev.rank == 2
    assert {ev.attrs[k] for k in ("tp_rank", "dp_rank", "model")} == {2, 0, "tiny"}


def test_uninstall_flushes_and_is_idempotent(tmp_path, triton_cache, compile_only) -> None:
    mon = create_monitor(Settings(journal_dir=tmp_path / "j"), mode=Mode.WARN, tracer_provider=False).install()
    compile_scale()
    mon.uninstall()
    mon.uninstall()
    assert len(read_events(tmp_path / "j", EventKind.COMPILE)) == 1


class _ReversedExecutor(Executor):
    """Runs the submitted compiles only once ``expected`` are queued, last first (on the caller's
    thread): compiles of one kernel then finish in the opposite order to their start."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.tasks: list[tuple[Future[Any], Any]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self.tasks.append((fut, lambda: fn(*args, **kwargs)))
        if len(self.tasks) == self.expected:
            for f, call in reversed(self.tasks):
                f.set_result(call())
        return fut


@pytest.mark.parametrize("executor", ["reversed", "threads"])
def test_async_compile_mode_like_vllm_warmup(
    tmp_path, triton_cache, compile_only, serial_ast_parse, executor: str
) -> None:
    """vLLM compiles warmup keys in parallel (``triton.AsyncCompileMode``, Triton 3.5+): compiles of
    one kernel run on other threads and finish in any order; the post-compile hook fires when the
    futures are finalized. Each compile must still get *its own* stages and disk-cache flag.

    The n=1000 variant is put in the disk cache first, so a mix-up between it and the n=1024
    variant (same signature and constexprs, different alignment attrs) shows as a wrong cache_hit.
    """
    compile_scale(n=1000)  # populate the disk cache for this key (no monitor yet)
    fresh_kernel_cache(mon_scale)
    with TritonHookRecorder() as rec:
        with monitored(journal_dir=tmp_path / "j", triton_cache_dir=triton_cache) as h:
            with h.monitor.warmup():
                pool = _ReversedExecutor(3) if executor == "reversed" else ThreadPoolExecutor(2)
                with pool, triton.AsyncCompileMode(pool):
                    for n in (1024, 1000, 1):
                        compile_scale(n=n)
            compiles = h.compiles()
            pending = h.triton.pending()
    assert len(compiles) == 3 == len(rec.compiles)
    assert all(c.attrs.get("source") is None for c in compiles)  # no unmatched listener call
    assert sorted(c.key or "" for c in compiles) == sorted(r.key or "" for r in rec.compiles)
    assert all(c.phase is Phase.WARMUP for c in compiles)
    hits = {("'i32', ''" in (c.key or "")): c.cache_hit for c in compiles if "constexpr', 1)" not in (c.key or "")}
    assert hits == {True: True, False: False}
    for c in compiles:
        assert ("cubin" in c.attrs["stages"]) is (c.cache_hit is False)
    assert pending == 0


@triton.jit
def mon_moe_like(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    topk_weights_ptr,
    sorted_token_ids_ptr,
    expert_ids_ptr,
    num_tokens_post_padded_ptr,
    N,
    K,
    EM,
    num_valid_tokens,
    stride_am,
    stride_ak,
    stride_be,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsk,
    stride_bsn,
    group_n,
    group_k,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    x = tl.load(a_ptr + offs * stride_am, mask=offs < EM)
    tl.store(c_ptr + offs * stride_cm, x, mask=offs < EM)


def test_the_warn_line_of_a_kernel_with_many_arguments_keeps_its_block_sizes_and_options(
    harness: MonitorHarness, caplog
) -> None:
    """A never-warmed kernel shaped like vLLM's fused_moe_kernel (27 runtime arguments, then its
    block sizes as constexprs, then the launch options): its warn line has no reason but "never
    warmed", so its specialization is what the reader warms from. It was cut at 400 characters,
    which dropped the block sizes and ``num_warps``, the autotuned part (the raw key the line
    showed before held them: up to 2,000 characters). Now the line holds them all."""
    fresh_kernel_cache(mon_moe_like)
    harness.monitor.activate()
    t = torch.empty(4096, dtype=torch.float16)
    ints = [4096, 4096, 1000, 999] + [1] * 12 + [128, 128]
    with caplog.at_level(logging.WARNING, logger="jitwatch.core.monitor"):
        mon_moe_like.warmup(
            *([t] * 9),
            *ints,
            BLOCK_SIZE_M=64,
            BLOCK_SIZE_N=128,
            BLOCK_SIZE_K=32,
            GROUP_SIZE_M=8,
            num_warps=8,
            grid=(1,),
        )
        harness.monitor.flush()
    (line,) = [r.getMessage() for r in caplog.records if "post-warmup compile" in r.getMessage()]
    spec = line.split("; specialization ", 1)[1].split(" (the full key: ", 1)[0]
    assert "…" not in spec, line
    assert spec.startswith("a_ptr: *fp16 aligned16, b_ptr: *fp16 aligned16"), spec
    assert spec.endswith(
        "BLOCK_SIZE_M: constexpr 64, BLOCK_SIZE_N: constexpr 128, BLOCK_SIZE_K: constexpr 32, "
        "GROUP_SIZE_M: constexpr 8, num_warps=8"
    ), spec
