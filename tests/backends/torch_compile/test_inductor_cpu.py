"""Inductor's CPU backend, two processes sharing its caches (cold, then warm: a restart): the warm
process's Dynamo compiles are recorded as loads (``cache_hit``, ``fx_graph_cache: hit``) with their
cost, so the restart stall is not silent. Runs ``tests/gpu/torch_compile_scenario.py`` on CPU
(Inductor compiles C++ through the system compiler: ~20 s cold on a 2-core machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = ROOT / "tests" / "gpu" / "torch_compile_scenario.py"


def _run(label: str, tmp: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(
        JITWATCH_DIR=str(tmp / f"journal-{label}"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"),
        TRITON_CACHE_DIR=str(tmp / "triton"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        OTEL_SDK_DISABLED="true",
    )
    out = tmp / f"{label}.json"
    cmd = [sys.executable, str(SCENARIO), "--label", label, "--out", str(out), "--device", "cpu"]
    cmd += ["--mode", "default", "--dim", "64"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _serving_dynamo(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e for r in doc["requests"] for e in r["events"] if e["backend"] == "torch_compile" and e["kind"] == "compile"
    ]


@pytest.mark.slow
def test_warm_inductor_cache_restart_is_recorded_as_loads(tmp_path: Path) -> None:
    cold = _run("cold", tmp_path)
    warm = _run("warm", tmp_path)
    cold_c, warm_c = _serving_dynamo(cold), _serving_dynamo(warm)
    # the same recompiles, for the same reasons, in both processes
    assert [e["reason_class"] for e in cold_c] == [e["reason_class"] for e in warm_c] != []
    assert all(e["cache_hit"] is False and e["fx_graph_cache"] == "miss" for e in cold_c), cold_c
    assert all(e["cache_hit"] is True and e["fx_graph_cache"] == "hit" for e in warm_c), warm_c
    assert all(e["duration_s"] > 0 for e in warm_c)
    # the requests that recompiled carry their events in both runs
    for doc in (cold, warm):
        assert [r["request"] for r in doc["requests"] if r["events"]] == ["req0-b1", "req1-b17"]
    recent = warm["jit"]["recent_serving_compiles"]
    assert recent and all(c["cache_hit"] for c in recent if c["backend"] == "torch_compile")
