"""(2) ``vllm serve`` (OpenAI-compatible server) + ``jitwatch serve`` on the same journal, real HTTP."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from jitwatch.testing import free_port

from .vllm_engine import engine_env, start, stop, wait_http

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(420)]

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent


def test_vllm_serve_with_jitwatch_sidecar(tiny_model: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    env = engine_env(tmp_path, journal)
    vport, jport = free_port(), free_port()
    vllm_log, side_log = tmp_path / "vllm.log", tmp_path / "sidecar.log"
    vllm = start(
        [
            sys.executable,
            str(HERE / "vllm_cli.py"),  # = `vllm serve` (see vllm_cli.py for why not the console script)
            "serve",
            str(tiny_model),
            "--host",
            "127.0.0.1",
            "--port",
            str(vport),
            "--served-model-name",
            "tiny-llama",
            "--skip-tokenizer-init",
            "--dtype",
            "float32",
            "--max-model-len",
            "128",
            "--max-num-seqs",
            "4",
            "--max-num-batched-tokens",
            "128",
            "--enforce-eager",
        ],
        env,
        tmp_path,
        vllm_log,
    )
    sidecar = start(
        [str(BIN / "jitwatch"), "serve", "--host", "127.0.0.1", "--port", str(jport), "--journal-dir", str(journal)],
        env,
        tmp_path,
        side_log,
    )
    base = f"http://127.0.0.1:{jport}"
    try:
        wait_http(f"{base}/livez", sidecar, side_log, 60)
        # Before the engine's worker has warmed up, the sidecar is not ready.
        early = httpx.get(f"{base}/readyz", timeout=5)
        wait_http(f"http://127.0.0.1:{vport}/health", vllm, vllm_log, 300)
        ready = wait_http(f"{base}/readyz", sidecar, side_log, 30)
        assert ready.json()["ranks"] == {"0": "serving"}
        if early.status_code == 200:  # the worker was already warm: allowed, but then it must say so
            assert early.json()["ready"] is True
        else:
            assert early.status_code == 503 and early.json()["ready"] is False

        jit = httpx.get(f"{base}/jit", timeout=5).json()
        assert jit["ranks"][0]["first_request_latency_s"] is None  # no request yet

        resp = httpx.post(
            f"http://127.0.0.1:{vport}/v1/completions",
            json={"model": "tiny-llama", "prompt": [1, 5, 7, 11, 13], "max_tokens": 4, "ignore_eos": True},
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["usage"]["completion_tokens"] == 4

        deadline = time.monotonic() + 30
        while True:
            jit = httpx.get(f"{base}/jit", timeout=5).json()
            if jit["ranks"][0]["first_request_latency_s"] is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        (rank,) = jit["ranks"]
        assert rank["state"] == "serving" and rank["ready"] is True
        assert (rank["rank"], rank["tp_rank"], rank["pp_rank"], rank["dp_rank"]) == (0, 0, 0, 0)
        assert rank["warmup_duration_s"] is not None
        assert rank["first_request_latency_s"] > 0
        assert jit["totals"]["compiles_serving"] == 0
        (tmp_path / "jit.json").write_text(json.dumps(jit, indent=2))
        events = httpx.get(f"{base}/jit/events", params={"kind": "first_request"}, timeout=5).json()
        text = json.dumps(events)
        assert "vllm:" in text  # the first request's vLLM request id rides on the event
    finally:
        stop(vllm)
        stop(sidecar)


def test_vllm_serve_sigterm_is_not_ready_at_once(tiny_model: Path, tmp_path: Path) -> None:
    """An operator stops ``vllm serve`` the way a container runtime does: SIGTERM to its main process
    only (Kubernetes and Docker signal PID 1). vLLM 0.32's default shutdown (``--shutdown-timeout
    0``, "abort") SIGKILLs its engine and worker processes, so the worker runs no exit handler and
    records no stop. The sidecar, on the same machine, sees the worker's process gone
    (``jitwatch.core.process``): ``/readyz`` answers 503 within seconds, naming the pid, instead of
    READY until the heartbeat window (60 s) passes."""
    journal = tmp_path / "journal"
    env = engine_env(tmp_path, journal)
    vport, jport = free_port(), free_port()
    vllm_log, side_log = tmp_path / "vllm.log", tmp_path / "sidecar.log"
    args = [sys.executable, str(HERE / "vllm_cli.py"), "serve", str(tiny_model), "--host", "127.0.0.1"]
    args += ["--port", str(vport), "--served-model-name", "tiny-llama", "--skip-tokenizer-init", "--dtype"]
    args += ["float32", "--max-model-len", "128", "--max-num-seqs", "4", "--max-num-batched-tokens", "128"]
    vllm = start([*args, "--enforce-eager"], env, tmp_path, vllm_log)
    sidecar = start(
        [str(BIN / "jitwatch"), "serve", "--host", "127.0.0.1", "--port", str(jport), "--journal-dir", str(journal)],
        env,
        tmp_path,
        side_log,
    )
    base = f"http://127.0.0.1:{jport}"
    try:
        wait_http(f"{base}/livez", sidecar, side_log, 60)
        wait_http(f"http://127.0.0.1:{vport}/health", vllm, vllm_log, 300)
        assert wait_http(f"{base}/readyz", sidecar, side_log, 30).json()["ranks"] == {"0": "serving"}
        (worker,) = httpx.get(f"{base}/jit", timeout=5).json()["ranks"]
        vllm.send_signal(signal.SIGTERM)  # the main process only, as a container runtime does
        vllm.wait(90)
        deadline = time.monotonic() + 10  # far inside the 60 s heartbeat window
        while (ready := httpx.get(f"{base}/readyz", timeout=5)).status_code == 200:
            assert time.monotonic() < deadline, vllm_log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        body = ready.json()
        assert ready.status_code == 503 and body["exited_ranks"] == [0] and body["stale_ranks"] == [], body
        assert body["ranks"] == {"0": "exited"}, body
        assert body["reason"] == (
            f"the worker process of rank 0 (pid {worker['pid']}) exited without recording a stop (killed or crashed)"
        ), body
    finally:
        stop(vllm)
        stop(sidecar)
