"""A real serving-phase Triton compile inside a real vLLM request, attributed to that request.

The CPU backend compiles no Triton kernel of its own, so a logits processor (``vllm_testprocs.py``)
compiles jitwatch's slot-mapping kernel (compile-only driver, sm_90) from ``update_state`` — inside
the worker's ``execute_model`` for the step that admits the first real request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from jitwatch.core.events import EventKind, Phase
from jitwatch.sidecar import create_app
from jitwatch.testing import read_events

from .vllm_engine import run_engine

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(400)]


def test_serving_compile_attributed_to_vllm_request(tiny_model: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    result, out = run_engine(tmp_path, tiny_model, journal, "--compile-in-request")
    assert result is not None
    assert "COMPILE_IN_REQUEST source=reference slots=[16, 17, 18]" in out
    (vllm_request,) = [r["request_id"] for r in result["requests"]]

    events = read_events(journal)
    serving = [e for e in events if e.kind is EventKind.COMPILE and e.phase is Phase.SERVING]
    assert [e.kernel for e in serving] == ["slot_mapping_kernel"], [(e.kernel, e.phase) for e in events]
    (compile_ev,) = serving
    (first,) = [e for e in events if e.kind is EventKind.FIRST_REQUEST]
    # The compile happened inside the engine step that carried the vLLM request.
    assert compile_ev.attrs["request_id"] == first.attrs["request_id"]
    assert vllm_request in first.attrs["request"]
    assert compile_ev.attrs["tp_rank"] == 0 and compile_ev.attrs["vllm_version"] == "0.32.0"
    assert "post-warmup compile of Triton kernel 'slot_mapping_kernel'" in out

    jit = TestClient(create_app(journal_dir=journal, token=None)).get("/jit").json()
    assert jit["totals"]["compiles_serving"] == 1
    (recent,) = jit["recent_serving_compiles"]
    assert recent["kernel"] == "slot_mapping_kernel" and recent["rank"] == 0
    assert recent["request_id"] == first.attrs["request_id"]
    assert jit["ranks"][0]["serving_compiles"] == 1
