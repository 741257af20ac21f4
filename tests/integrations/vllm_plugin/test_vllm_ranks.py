"""(3) Tensor parallelism: two CPU workers (TP=2) write one journal; each rank appears separately.

The CPU backend refuses to auto-bind OpenMP threads of two local workers on one NUMA node, so the
test binds them by hand: ``VLLM_CPU_OMP_THREADS_BIND="0|1"`` (worker 0 on core 0, worker 1 on core 1).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jitwatch.core.events import EventKind
from jitwatch.sidecar import create_app
from jitwatch.testing import read_events

from .vllm_engine import run_engine

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(420)]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="TP=2 on the CPU backend needs two cores")
def test_tensor_parallel_two_workers_two_ranks(tiny_model: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    result, out = run_engine(tmp_path, tiny_model, journal, "--tp", "2", env_extra={"VLLM_CPU_OMP_THREADS_BIND": "0|1"})
    assert result is not None and len(result["requests"][0]["token_ids"]) == 4
    events = read_events(journal)
    starts = {e.rank: e for e in events if e.kind is EventKind.WORKER_START}
    assert sorted(starts) == [0, 1], out[-3000:]
    assert starts[0].pid != starts[1].pid
    for rank, ev in starts.items():
        assert (ev.attrs["tp_rank"], ev.attrs["pp_rank"], ev.attrs["dp_rank"], ev.attrs["local_rank"]) == (
            rank,
            0,
            0,
            rank,
        )
    for kind in (EventKind.WARMUP_START, EventKind.WARMUP_COMPLETE, EventKind.FIRST_REQUEST):
        assert sorted(e.rank for e in events if e.kind is kind) == [0, 1], kind

    jit = TestClient(create_app(journal_dir=journal, token=None)).get("/jit").json()
    # Both TP workers exited cleanly with the engine: each recorded its rank stopped.
    assert jit["ready"] is False and jit["totals"]["ranks"] == 2 and jit["totals"]["ranks_ready"] == 0
    assert [(r["rank"], r["tp_rank"], r["state"]) for r in jit["ranks"]] == [(0, 0, "stopped"), (1, 1, "stopped")]
    assert all(r["first_request_latency_s"] > 0 for r in jit["ranks"])


def test_two_engines_one_journal_rank_offset(tiny_model: Path, tmp_path: Path) -> None:
    """Independent single-GPU engines (e.g. replicas) sharing a journal: ``JITWATCH_RANK`` offsets
    each engine's ranks, ``JITWATCH_DP_RANK`` labels the replica."""
    journal = tmp_path / "journal"
    run_engine(tmp_path, tiny_model, journal, env_extra={"JITWATCH_RANK": "4", "JITWATCH_DP_RANK": "1"})
    jit = TestClient(create_app(journal_dir=journal, token=None)).get("/jit").json()
    assert [(r["rank"], r["tp_rank"], r["dp_rank"], r["state"]) for r in jit["ranks"]] == [(4, 0, 1, "stopped")]
