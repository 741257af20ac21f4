"""Collective danger in a real vLLM engine (CPU backend, TP=2): rank 1 compiles a Triton kernel
inside an engine step (held open until the test releases it) while rank 0 goes on to the step's
collective and waits; ``/jit`` shows rank 1's in-flight compile and its age while it happens, and
rank 0 with nothing in flight."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jitwatch.sidecar import create_app

from .vllm_engine import HERE, engine_env, start, stop

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(420)]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="TP=2 on the CPU backend needs two cores")
def test_tp2_rank_compiling_while_peer_waits_shows_in_flight(tiny_model: Path, tmp_path: Path) -> None:
    journal, release, log = tmp_path / "journal", tmp_path / "release", tmp_path / "engine.log"
    env = engine_env(
        tmp_path,
        journal,
        VLLM_CPU_OMP_THREADS_BIND="0|1",
        DIAG_COMPILE_RANK="1",
        DIAG_HOLD_FILE=str(release),
        JITWATCH_HEARTBEAT_SECONDS="1",
    )
    cmd = [sys.executable, str(HERE / "engine_app.py"), "--model", str(tiny_model), "--tp", "2", "--compile-in-request"]
    proc: subprocess.Popen[bytes] = start(cmd, env, tmp_path, log)
    try:
        client = TestClient(create_app(journal_dir=journal, token=None))
        seen: dict[int, Any] | None = None
        saw_held = False
        end = time.monotonic() + 300
        while time.monotonic() < end and proc.poll() is None:
            try:
                ranks = {r["rank"]: r for r in client.get("/jit").json()["ranks"]}
            except Exception:  # noqa: BLE001 - journal not there yet
                ranks = {}
            held = [c for c in ranks.get(1, {}).get("inflight", []) if c["kernel"] == "slot_mapping_kernel"]
            if held and held[0]["age_s"] >= 3:
                saw_held = True
                # rank 0 may be finishing a compile of its own (vLLM torch.compiles
                # get_masked_input_and_mask on the first TP step); then it waits with nothing in flight.
                if ranks[0]["inflight"] == []:
                    seen = ranks
                    break
            time.sleep(0.5)
        assert saw_held and seen is not None, log.read_text()[-4000:]
        (c,) = [c for c in seen[1]["inflight"] if c["kernel"] == "slot_mapping_kernel"]
        assert (c["backend"], c["kernel"], c["phase"]) == ("triton", "slot_mapping_kernel", "serving")
        assert seen[0]["inflight"] == [] and seen[0]["state"] == "serving"
        assert seen[1]["oldest_inflight_age_s"] >= 3 and seen[0]["oldest_inflight_age_s"] == 0
        release.touch()
        assert proc.wait(300) == 0, log.read_text()[-4000:]
    finally:
        release.touch()
        stop(proc)
    jit = TestClient(create_app(journal_dir=journal, token=None)).get("/jit").json()
    (recent,) = [c for c in jit["recent_serving_compiles"] if c["kernel"] == "slot_mapping_kernel"]
    assert recent["rank"] == 1 and recent["duration_s"] >= 3 and recent["reason"]
    assert all(r["inflight"] == [] for r in jit["ranks"])
