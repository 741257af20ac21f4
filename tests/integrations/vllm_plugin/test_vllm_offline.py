"""(1) Offline ``LLM(...)``: vLLM loads the plugin itself; the journal and the sidecar show the worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jitwatch.core.events import EventKind, Phase
from jitwatch.sidecar import create_app
from jitwatch.testing import read_events

from .vllm_engine import run_engine

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def offline_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    tmp = tmp_path_factory.mktemp("offline")
    journal = tmp / "journal"
    result, out = run_engine(
        tmp,
        tiny_model,
        journal,
        "--requests",
        "2",
        env_extra={"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "console"},
    )
    return journal, result or {}, out


def test_worker_warmup_and_first_request_journaled(offline_run: tuple[Path, dict, str]) -> None:
    journal, result, _ = offline_run
    assert len(result["requests"]) == 2 and all(len(r["token_ids"]) == 4 for r in result["requests"])
    events = read_events(journal)
    starts = [e for e in events if e.kind is EventKind.WORKER_START]
    # Exactly one monitored process: the worker. API-server and engine-core processes stay out.
    assert len(starts) == 1, [(e.pid, e.attrs) for e in starts]
    worker = starts[0]
    assert worker.rank == 0
    assert {k: worker.attrs.get(k) for k in ("tp_rank", "pp_rank", "dp_rank", "local_rank")} == {
        "tp_rank": 0,
        "pp_rank": 0,
        "dp_rank": 0,
        "local_rank": 0,
    }
    assert worker.attrs["vllm_version"] == "0.32.0"
    # --enforce-eager turns vLLM's JIT warmup off, so jitwatch runs the slot-mapping warmup itself.
    assert worker.attrs["slot_mapping_warmup"] == "jitwatch"
    kinds = [e.kind for e in sorted(events, key=lambda e: e.id or 0) if e.pid == worker.pid]
    assert (
        kinds.index(EventKind.WARMUP_START)
        < kinds.index(EventKind.WARMUP_COMPLETE)
        < kinds.index(EventKind.FIRST_REQUEST)
    )
    (first,) = [e for e in events if e.kind is EventKind.FIRST_REQUEST]
    assert first.duration_s is not None and first.duration_s > 0
    assert first.attrs["request"].startswith("vllm:")  # the engine step's vLLM request ids
    assert not [e for e in events if e.kind is EventKind.COMPILE and e.phase is Phase.SERVING]
    assert not [e for e in events if e.kind is EventKind.HOOK_ERROR]


def test_sidecar_jit_and_readyz_agree(offline_run: tuple[Path, dict, str]) -> None:
    journal, _, _ = offline_run
    client = TestClient(create_app(journal_dir=journal, token=None))
    jit = client.get("/jit").json()
    ready = client.get("/readyz")
    # The engine process has exited cleanly: its worker recorded the rank stopped (the journal
    # writer's close at exit), so /readyz is 503 at once, and /jit agrees.
    assert ready.status_code == 503 and ready.json()["ready"] is False
    assert "rank 0 stopped (clean exit at" in ready.json()["reason"], ready.json()
    assert jit["ready"] is False and jit["totals"]["ranks"] == 1
    (rank,) = jit["ranks"]
    assert rank["state"] == "stopped" and rank["ready"] is False and rank["stopped_ts"] is not None
    assert (rank["rank"], rank["tp_rank"], rank["pp_rank"], rank["dp_rank"]) == (0, 0, 0, 0)
    assert rank["warmup_end_ts"] >= rank["warmup_start_ts"]
    assert rank["first_request_latency_s"] > 0
    assert ready.json()["ranks"] == {"0": "stopped"}


def test_plugin_log_and_warmup_span(offline_run: tuple[Path, dict, str]) -> None:
    _, _, out = offline_run
    assert "jitwatch: monitoring vLLM worker rank=0 tp=0 pp=0 dp=0" in out
    assert "slot-mapping warmup ran through 1 block table with block id 1" in out
    # The console exporter prints the span JSON from the worker process.
    assert '"name": "jitwatch.warmup"' in out
    span = out[out.index('"name": "jitwatch.warmup"') :]
    for attr in ('"vllm.model":', '"vllm.tp_rank": 0', '"vllm.pp_rank": 0', '"jitwatch.rank": 0'):
        assert attr in span[:4000], attr
    assert '"jitwatch.warmup.state": "complete"' in span[:4000]
