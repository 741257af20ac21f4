"""Issue 11 on a GPU: a 2-layer MLP under ``torch.compile(mode="reduce-overhead")`` warmed at batch 8,
serving batches 1, 17, 64, 300, 1, 17 — in two processes sharing Inductor's and Triton's caches
(cold, then warm: the normal state after a restart).

Checked in each process: every request that stalls (latency minus the same batch's steady-state
latency above 10 ms) has at least one recorded event inside it (a Dynamo compile or load, a
CUDA-graph recording, a Triton compile, an Inductor autotune sweep) — with one measured exception,
kept explicit: the first call of a *new size on a graph that is already dynamic* (batches 64 and
300 after 17) compiles nothing, yet stalled 15 ms once in the cold process on the H200 (torch
2.11; 5 ms warm): cudagraph trees' warmup run of the new size and the first GEMM of that shape,
neither a JIT compile with a hook. Such a request may stall up to :data:`UNHOOKED_MAX_S` without
an event; anything else unattributed fails. Serving Dynamo recompiles carry Dynamo's reason;
CUDA-graph recordings appear as graph captures. In the warm process the Dynamo compiles are
recorded as loads (``cache_hit``) with their cost: the restart stall is not silent.

The scenario itself is ``tests/gpu/torch_compile_scenario.py`` (one process per run); with
``JITWATCH_GPU_OUT`` set, each run's JSON document is written there (``scripts/gpu/torch_compile.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).with_name("torch_compile_scenario.py")
ROOT = Path(__file__).resolve().parents[2]
STALL_S = 0.010
NEW_SIZE_ON_DYNAMIC = {"req2-b64", "req3-b300"}
"""Requests whose batch size is new but the graph already dynamic: nothing compiles."""
UNHOOKED_MAX_S = 0.025
"""The stall such a request may show without any recorded event (measured: 15 ms cold, 5 ms warm)."""
EXTRA_ARGS = os.environ.get("JITWATCH_SCENARIO_ARGS", "").split()
"""Extra scenario arguments (e.g. ``--device cpu --backend eager --mode default`` for a dry run)."""


def _run(label: str, tmp: Path, caches: Path, out_dir: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(
        JITWATCH_DIR=str(tmp / f"journal-{label}"),
        TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"),
        TRITON_CACHE_DIR=str(caches / "triton"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        OTEL_SDK_DISABLED="true",
    )
    out = out_dir / f"torch_compile_{label}.json"
    proc = subprocess.run(
        [sys.executable, str(SCENARIO), "--label", label, "--out", str(out), *EXTRA_ARGS],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    sys.stderr.write(proc.stderr[-4000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _stalls(doc: dict[str, Any]) -> list[dict[str, Any]]:
    steady = {b: s for b, s in zip((r["batch"] for r in doc["requests"]), doc["steady_latency_s"], strict=True)}
    out = []
    for r in doc["requests"]:
        r["stall_s"] = r["latency_s"] - steady[r["batch"]]
        if r["stall_s"] > STALL_S:
            out.append(r)
    return out


def _summary(doc: dict[str, Any]) -> str:
    lines = [f"[{doc['label']}] torch {doc['torch']} on {doc['device']}, warmup {doc['warmup_s']:.2f}s"]
    for r in doc["requests"]:
        evs = ", ".join(
            f"{e['backend']}/{e['kind']} {e['kernel']} {e.get('compile_id') or ''} {1e3 * (e['duration_s'] or 0):.1f}ms"
            + (" load" if e.get("cache_hit") else "")
            for e in r["events"]
        )
        stall = 1e3 * r.get("stall_s", 0)
        lines.append(f"  {r['request']:<10} {1e3 * r['latency_s']:8.1f} ms (stall {stall:7.1f}) <- {evs or '-'}")
    return "\n".join(lines)


@pytest.mark.timeout(480)
def test_two_processes_every_serving_stall_is_attributed(tmp_path: Path) -> None:
    out_dir = Path(os.environ.get("JITWATCH_GPU_OUT") or tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    caches = tmp_path / "caches"
    cold = _run("cold", tmp_path, caches, out_dir)
    warm = _run("warm", tmp_path, caches, out_dir)
    report = []
    for doc in (cold, warm):
        stalls = _stalls(doc)
        report.append(_summary(doc))
        unattributed = [r for r in stalls if not r["events"]]
        bad = [
            r["request"]
            for r in unattributed
            if r["request"] not in NEW_SIZE_ON_DYNAMIC or r["stall_s"] > UNHOOKED_MAX_S
        ]
        report.append(
            f"  unattributed stalls > {1e3 * STALL_S:.0f} ms: "
            + (", ".join(f"{r['request']} {1e3 * r['stall_s']:.1f} ms" for r in unattributed) or "none")
        )
        assert not bad, f"{doc['label']}: stalls without a recorded event: {bad}\n" + "\n".join(report)
        tc_serving = [e for r in doc["requests"] for e in r["events"] if e["backend"] == "torch_compile"]
        recompiles = [e for e in tc_serving if e["kind"] == "compile"]
        assert recompiles, f"{doc['label']}: no serving Dynamo compile recorded"
        assert all(e["reason"] and e["reason_class"] for e in recompiles), recompiles
        assert any(e["kind"] == "graph_capture" for e in tc_serving), f"{doc['label']}: no CUDA-graph recording seen"
        assert doc["jit"]["recent_serving_compiles"], "nothing in /jit"
    warm_loads = [
        e for r in warm["requests"] for e in r["events"] if e["backend"] == "torch_compile" and e["cache_hit"]
    ]
    assert warm_loads, "the warm process recorded no Dynamo compile as a cache load"
    print("\n".join(report))
    (out_dir / "torch_compile_summary.txt").write_text("\n".join(report) + "\n")


if __name__ == "__main__":  # pragma: no cover - manual run
    sys.exit(pytest.main([__file__, "-s", "-v"]))
