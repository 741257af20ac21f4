"""jitwatch.views.status: the /jit document and the readiness rule, from journals written directly."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from jitwatch.cli.render import render_status
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import make_event
from jitwatch.views.status import (
    NO_WORKER_REASON,
    RECENT_SERVING_COMPILES,
    JitStatus,
    build_status,
    readiness,
)

T0 = 1_700_000_000.0
ev = make_event


def two_ranks(directory: Path) -> None:
    """Rank 0 warmed up and serving (with one serving compile); rank 1 still warming up."""
    with Journal(directory) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn", "tp_rank": 0, "pp_rank": 0, "dp_rank": 0}),
                ev(EventKind.WORKER_START, T0, rank=1, pid=101, attrs={"mode": "warn", "tp_rank": 1, "pp_rank": 0}),
                ev(EventKind.WARMUP_START, T0 + 1, phase=Phase.WARMUP),
                ev(EventKind.WARMUP_START, T0 + 1, rank=1, pid=101, phase=Phase.WARMUP),
                ev(EventKind.COMPILE, T0 + 2, phase=Phase.WARMUP, kernel="add", key="k16", duration_s=0.4),
                ev(
                    EventKind.COMPILE,
                    T0 + 2,
                    rank=1,
                    pid=101,
                    phase=Phase.WARMUP,
                    kernel="add",
                    key="k16",
                    duration_s=0.1,
                    cache_hit=True,
                ),
                ev(EventKind.AUTOTUNE, T0 + 2.5, phase=Phase.WARMUP, kernel="mm", key="a", duration_s=2.0),
                ev(
                    EventKind.WARMUP_COMPLETE,
                    T0 + 3,
                    phase=Phase.SERVING,
                    start_ts=T0 + 1,
                    duration_s=2.0,
                    attrs={"kernels_compiled": 1, "compile_seconds": 0.4},
                ),
                ev(EventKind.FIRST_REQUEST, T0 + 4, phase=Phase.SERVING, duration_s=0.125),
                ev(
                    EventKind.COMPILE,
                    T0 + 5,
                    phase=Phase.SERVING,
                    kernel="add",
                    key="k32",
                    duration_s=0.2,
                    attrs={"request_id": 7},
                ),
            ]
        )


def test_missing_journal_gives_valid_empty_status() -> None:
    st = build_status(None, error="no journal yet")
    assert st.journal_up is False
    assert st.ranks == [] and st.kernels == [] and st.recent_serving_compiles == []
    assert st.ready is False and st.not_ready_reason == NO_WORKER_REASON
    JitStatus.model_validate_json(st.model_dump_json())


def test_empty_journal(tmp_path: Path) -> None:
    Journal(tmp_path).close()
    with Journal(tmp_path, readonly=True) as j:
        st = build_status(j)
    assert st.journal_up is True and st.ranks == [] and st.ready is False
    assert st.mode is None


def test_ranks_kernels_and_serving_compiles(tmp_path: Path) -> None:
    two_ranks(tmp_path)
    with Journal(tmp_path, readonly=True) as j:
        st = build_status(j, now=T0 + 10)
    assert st.generated_ts == T0 + 10
    assert st.mode == "warn"
    assert st.ready is False
    assert "rank 1 (warmup)" in (st.not_ready_reason or "")

    r0, r1 = st.ranks
    assert (r0.rank, r0.state, r0.ready, r0.host, r0.pid) == (0, Phase.SERVING, True, "node-a", 100)
    assert (r0.tp_rank, r0.pp_rank, r0.dp_rank) == (0, 0, 0)
    assert (r0.warmup_start_ts, r0.warmup_end_ts, r0.warmup_duration_s) == (T0 + 1, T0 + 3, 2.0)
    assert r0.warmup_compiles == 1
    assert r0.first_request_latency_s == 0.125
    assert r0.serving_compiles == 1
    assert (r1.rank, r1.state, r1.ready, r1.pid) == (1, Phase.WARMUP, False, 101)
    assert (r1.tp_rank, r1.pp_rank, r1.dp_rank) == (1, 0, None)
    assert r1.warmup_end_ts is None and r1.serving_compiles == 0

    add = next(k for k in st.kernels if k.name == "add")
    assert st.kernels[0].name == "add"  # serving compiles sort first
    assert (add.compiles_warmup, add.compiles_serving) == (2, 1)
    assert add.ranks == [0, 1]
    assert add.compile_seconds == pytest.approx(0.7)
    assert add.disk_cache_hits == 1
    assert (add.last_key, add.last_compile_ts) == ("k32", T0 + 5)
    mm = next(k for k in st.kernels if k.name == "mm")
    assert (mm.autotune_runs, mm.autotune_seconds, mm.compiles_warmup) == (1, 2.0, 0)
    assert mm.last_key is None  # autotune runs are not compiles

    (recent,) = st.recent_serving_compiles
    assert (recent.kernel, recent.key, recent.rank, recent.ts, recent.duration_s, recent.request_id) == (
        "add",
        "k32",
        0,
        T0 + 5,
        0.2,
        7,
    )

    t = st.totals
    assert (t.ranks, t.ranks_ready, t.kernels, t.compiles, t.compiles_warmup, t.compiles_serving) == (2, 1, 2, 3, 2, 1)
    assert (t.disk_cache_hits, t.autotune_runs, t.journal_events) == (1, 1, 10)


def test_recent_serving_compiles_are_capped_newest_first(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.write([ev(EventKind.WORKER_START, T0, attrs={"mode": "error"})])
        j.write(
            [
                ev(EventKind.COMPILE, T0 + i, phase=Phase.SERVING, kernel="k", key=f"key{i}", duration_s=0.01)
                for i in range(RECENT_SERVING_COMPILES + 5)
            ]
        )
        j.write([ev(EventKind.COMPILE, T0 + 100, phase=Phase.WARMUP, kernel="k", key="w", duration_s=0.01)])
    with Journal(tmp_path, readonly=True) as j:
        st = build_status(j)
    assert len(st.recent_serving_compiles) == RECENT_SERVING_COMPILES
    assert [c.key for c in st.recent_serving_compiles][:2] == ["key24", "key23"]
    assert st.totals.compiles_serving == RECENT_SERVING_COMPILES + 5
    assert st.mode == "error"


def test_readiness_rules(tmp_path: Path) -> None:
    assert readiness({}).reason == NO_WORKER_REASON
    with Journal(tmp_path) as j:
        j.write([ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"})])
        assert readiness(j.latest_workers()).not_ready_ranks == [0]
        j.write([ev(EventKind.WARMUP_COMPLETE, T0 + 1, phase=Phase.SERVING, start_ts=T0, duration_s=1.0)])
        ok = readiness(j.latest_workers())
        assert ok.ready and ok.status == "ready" and ok.ranks == {"0": Phase.SERVING}
        # the rank's worker restarts: its new process has not warmed up, so the rank is not ready
        j.write([ev(EventKind.WORKER_START, T0 + 2, pid=200, attrs={"mode": "warn"})])
        again = readiness(j.latest_workers())
        assert not again.ready and again.not_ready_ranks == [0]
        assert "0 (startup)" in (again.reason or "")


def test_stale_ranks_are_not_ready(tmp_path: Path) -> None:
    """A worker that advertises a heartbeat and was last seen > stale_after ago is stale; one that
    never heartbeats (older worker, heartbeat off) is never judged; stale_after=0 is off."""
    with Journal(tmp_path) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn", "heartbeat_s": 10.0}),
                ev(EventKind.WORKER_START, T0, rank=1, pid=101, attrs={"mode": "warn"}),
                ev(EventKind.WARMUP_COMPLETE, T0 + 1, phase=Phase.SERVING, duration_s=1.0),
                ev(EventKind.WARMUP_COMPLETE, T0 + 1, rank=1, pid=101, phase=Phase.SERVING, duration_s=1.0),
            ]
        )
        workers = j.latest_workers()
        assert readiness(workers, now=T0 + 60, stale_after=60).ready
        late = readiness(workers, now=T0 + 91, stale_after=60)
        assert not late.ready and late.stale_ranks == [0] and late.not_ready_ranks == [0]
        assert "rank 0 (last seen 90s ago)" in (late.reason or "")
        assert readiness(workers, now=T0 + 10_000, stale_after=0).ready
        # a heartbeat (one UPDATE) brings it back; it never moves last_ts backwards
        assert j.heartbeat("node-a", 100, 0, T0 + 90)
        assert not j.heartbeat("node-a", 999, 0, T0 + 90)  # no such worker row: nothing written
        assert j.heartbeat("node-a", 100, 0, T0 + 5)
        assert j.latest_workers()[0].last_ts == T0 + 90
        assert readiness(j.latest_workers(), now=T0 + 91, stale_after=60).ready
        st = build_status(j, now=T0 + 200, stale_after=60)
    assert [(r.rank, r.stale, r.ready) for r in st.ranks] == [(0, True, False), (1, False, True)]
    assert not st.ready and "rank 0" in (st.not_ready_reason or "")
    out = Console(record=True, width=200)
    render_status(st, out)
    assert "stale" in out.export_text()


def test_mixed_modes(tmp_path: Path) -> None:
    with Journal(tmp_path) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
                ev(EventKind.WORKER_START, T0, rank=1, attrs={"mode": "error"}),
            ]
        )
        assert build_status(j).mode == "mixed"


def test_render_status_tables(tmp_path: Path) -> None:
    two_ranks(tmp_path)
    with Journal(tmp_path, readonly=True) as j:
        st = build_status(j)
    console = Console(record=True, width=200)
    render_status(st, console)
    out = console.export_text()
    assert "NOT READY" in out
    assert "Ranks" in out and "Kernels" in out and "Recent serving-phase compiles" in out
    assert "add" in out and "k32" in out and "warmup" in out
    assert "1/2 ranks ready" in out


def test_render_status_totals_count_every_phase(tmp_path: Path) -> None:
    """The totals line splits the compiles by every phase, startup included (they add up)."""
    with Journal(tmp_path) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
                ev(EventKind.COMPILE, T0 + 0.5, phase=Phase.STARTUP, kernel="early", duration_s=0.1),
                ev(EventKind.COMPILE, T0 + 1, phase=Phase.WARMUP, kernel="add", duration_s=0.2),
                ev(EventKind.COMPILE, T0 + 2, phase=Phase.SERVING, kernel="add", key="k2", duration_s=0.3),
            ]
        )
    with Journal(tmp_path, readonly=True) as j:
        st = build_status(j)
    console = Console(record=True, width=200)
    render_status(st, console)
    assert "3 compiles (1 startup, 1 warmup, 1 serving), 0.600s compiling" in console.export_text()


def test_status_carries_specialization_coverage(tmp_path: Path) -> None:
    sig = {"signature": {"x_ptr": "*fp32", "BLOCK": "constexpr"}}
    with Journal(tmp_path) as j:
        j.write(
            [
                ev(EventKind.WORKER_START, T0, attrs={"mode": "warn"}),
                ev(
                    EventKind.COMPILE,
                    T0 + 1,
                    phase=Phase.WARMUP,
                    kernel="cov_k",
                    key="[('*fp32', 'D'), ('constexpr', 16)]{'debug': False}",
                    attrs=sig,
                ),
                ev(
                    EventKind.COMPILE,
                    T0 + 2,
                    phase=Phase.SERVING,
                    kernel="cov_k",
                    key="[('*fp32', 'D'), ('constexpr', 32)]{'debug': False}",
                    attrs=sig,
                ),
            ]
        )
    with Journal(tmp_path, readonly=True) as j:
        st = build_status(j)
    (cov,) = st.coverage
    assert cov.kernel == "cov_k" and 0 < cov.ratio < 1
    assert any(u.startswith("BLOCK:") for u in cov.uncovered)


def test_coverage_cache_follows_new_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jitwatch.views.status as status_mod
    from jitwatch.views.status import cached_coverage

    monkeypatch.setattr(status_mod, "COVERAGE_REFRESH_S", 0.0)  # recompute on every new compile

    sig = {"signature": {"BLOCK": "constexpr"}}

    def compile_event(ts: float, block: int, phase: Phase) -> Event:
        return ev(EventKind.COMPILE, ts, phase=phase, kernel="c", key=f"[('constexpr', {block})]{{}}", attrs=sig)

    with Journal(tmp_path) as j:
        j.write([ev(EventKind.WORKER_START, T0), compile_event(T0 + 1, 16, Phase.WARMUP)])
        first = cached_coverage(j)
        assert cached_coverage(j) is first  # nothing new: served from the cache
        assert first.by_kernel()["c"].ratio == 1.0
        j.write([ev(EventKind.FIRST_REQUEST, T0 + 2, phase=Phase.SERVING, duration_s=0.1)])
        assert cached_coverage(j) is first  # not a compile: still cached
        j.write([compile_event(T0 + 3, 32, Phase.SERVING)])
        second = cached_coverage(j)
        assert second is not first and second.by_kernel()["c"].ratio == 0.5
        # Under a steady stream of compiles the report is recomputed at most every COVERAGE_REFRESH_S.
        monkeypatch.setattr(status_mod, "COVERAGE_REFRESH_S", 3600.0)
        j.write([compile_event(T0 + 4, 64, Phase.SERVING)])
        assert cached_coverage(j) is second
