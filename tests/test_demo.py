"""``jitwatch demo`` end to end: a real sidecar, a real worker process, real Triton compiles."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from jitwatch.demo import DemoError, DemoOptions, reset_journal, run_demo
from jitwatch.journal import JOURNAL_FILE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_demo_cli(tmp_path: Path, *flags: str) -> dict[str, Any]:
    """Run ``jitwatch demo --exit`` as a subprocess; poll /readyz meanwhile; return what it saw."""
    port = free_port()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--exit", "--port", str(port)]
    cmd += ["--journal-dir", str(tmp_path / "journal"), "--output-dir", str(out), *flags]
    env = {**os.environ, "COLUMNS": "160", "JITWATCH_DIR": str(tmp_path / "unused")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    codes: list[int] = []
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            code = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code
            if not codes or codes[-1] != code:
                codes.append(code)
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, stdout
    return {
        "stdout": stdout,
        "readyz_polled": codes,
        "jit": json.loads((out / "jit.json").read_text()),
        "metrics": (out / "metrics.txt").read_text(),
        "demo": json.loads((out / "demo.json").read_text()),
    }


def kernel(jit: dict[str, Any], name: str) -> dict[str, Any]:
    (k,) = [k for k in jit["kernels"] if k["name"] == name]
    return k


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not in /metrics")


@pytest.mark.slow
def test_demo_default(tmp_path: Path) -> None:
    """Warmup compiles the slot-mapping kernel; >= 5 request sizes compile nothing; the zeroing
    kernel compiles once in serving, with its key; /readyz goes 503 → 200."""
    r = run_demo_cli(tmp_path)
    jit, demo = r["jit"], r["demo"]
    assert jit["ready"] is True
    (rank,) = jit["ranks"]
    assert rank["state"] == "serving" and rank["warmup_compiles"] == 1 and rank["serving_compiles"] == 1
    assert rank["first_request_latency_s"] is not None and rank["first_request_latency_s"] > 0
    sm = kernel(jit, "slot_mapping_kernel")
    assert (sm["compiles_warmup"], sm["compiles_serving"]) == (1, 0)
    zero = kernel(jit, "zero_kv_blocks_kernel")
    assert (zero["compiles_warmup"], zero["compiles_serving"]) == (0, 1)
    (recent,) = jit["recent_serving_compiles"]
    assert recent["kernel"] == "zero_kv_blocks_kernel" and recent["key"] == zero["last_key"]
    assert "'*fp16'" in recent["key"] and recent["request_id"] == 3
    assert len({s["num_tokens"] for s in demo["scenario"]["steps"]}) >= 5
    assert demo["scenario"]["source"] in ("reference", "kernel")
    # /readyz: 503 first (worker starting / warming up), then 200 — seen by the demo and by us.
    assert [c for _, c in demo["readyz"]] == [503, 200]
    assert r["readyz_polled"][0] == 503 and r["readyz_polled"][-1] == 200
    m = r["metrics"]
    assert metric(m, "jitwatch_compiles_total", kernel="slot_mapping_kernel", phase="warmup") == 1
    assert metric(m, "jitwatch_compiles_total", kernel="zero_kv_blocks_kernel", phase="serving") == 1
    assert 'kernel="slot_mapping_kernel",phase="serving"' not in m
    assert metric(m, "jitwatch_warmup_complete", rank="0") == 1
    assert "first-request latency" in r["stdout"] and "zero_kv_blocks_kernel" in r["stdout"]


@pytest.mark.slow
def test_demo_no_warmup(tmp_path: Path) -> None:
    """Before picture: the slot-mapping kernel compiles in serving, inside the first request."""
    jit = run_demo_cli(tmp_path, "--no-warmup")["jit"]
    sm = kernel(jit, "slot_mapping_kernel")
    assert (sm["compiles_warmup"], sm["compiles_serving"]) == (0, 1)
    assert jit["ranks"][0]["serving_compiles"] == 2
    first = [c for c in jit["recent_serving_compiles"] if c["kernel"] == "slot_mapping_kernel"]
    assert [c["request_id"] for c in first] == [1]


@pytest.mark.slow
def test_demo_specialize_num_tokens(tmp_path: Path) -> None:
    """num_tokens specialized and warmed with one size: the ==1 and 'other' classes recompile."""
    jit = run_demo_cli(tmp_path, "--specialize-num-tokens")["jit"]
    sm = kernel(jit, "slot_mapping_kernel_specialized")
    assert (sm["compiles_warmup"], sm["compiles_serving"]) == (1, 2)
    assert jit["ranks"][0]["serving_compiles"] == 3
    keys = {c["key"] for c in jit["recent_serving_compiles"] if c["kernel"] == "slot_mapping_kernel_specialized"}
    assert len(keys) == 2 and any(k.startswith("[('constexpr', 1)") for k in keys)


def test_reset_journal_removes_only_journal_files(tmp_path: Path) -> None:
    (tmp_path / JOURNAL_FILE).write_text("x")
    (tmp_path / (JOURNAL_FILE + "-wal")).write_text("x")
    (tmp_path / "keep.txt").write_text("mine")
    reset_journal(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DemoError, match="--port"):
            run_demo(DemoOptions(port=port, journal_dir=tmp_path / "j", exit_after=True))
