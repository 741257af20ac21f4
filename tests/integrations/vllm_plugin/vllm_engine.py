"""Engine subprocess helpers for the ``vllm`` tests (imported by the test modules)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ENGINE_TIMEOUT_S = 300


def engine_env(tmp_path: Path, journal: Path, **extra: str) -> dict[str, str]:
    """Environment for an engine subprocess: the jitwatch plugin selected through ``VLLM_PLUGINS``,
    journal in ``journal``, a fresh Triton cache, CPU KV cache of 1 GiB, no network lookups."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JITWATCH_", "OTEL_", "VLLM_"))}
    env.update(
        JITWATCH_DIR=str(journal),
        TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
        VLLM_PLUGINS="jitwatch",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        OTEL_SDK_DISABLED="true",
    )
    env.update(extra)
    return env


def run_engine(
    tmp_path: Path, model: Path, journal: Path, *args: str, env_extra: dict[str, str] | None = None, check: bool = True
) -> tuple[dict[str, Any] | None, str]:
    """Run ``engine_app.py offline`` in a subprocess; return (its RESULT json, combined output)."""
    env = engine_env(tmp_path, journal, **(env_extra or {}))
    proc = subprocess.run(
        [sys.executable, str(HERE / "engine_app.py"), "--model", str(model), *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=ENGINE_TIMEOUT_S,
    )
    out = proc.stdout
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    if check and (proc.returncode != 0 or result is None):
        raise AssertionError(f"engine exited {proc.returncode}; output tail:\n{out[-6000:]}")
    return result, out


def start(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start a server in its own session (so :func:`stop` can end it and its children)."""
    fh = open(log, "wb")
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM the process group started by :func:`start`, SIGKILL it after ``timeout``."""
    import signal

    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except ProcessLookupError:
            pass


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float, status: int = 200) -> Any:
    """Poll ``url`` until it answers ``status``; fail early if ``proc`` exits."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited {proc.returncode}:\n{log.read_text(errors='replace')[-6000:]}")
        try:
            last = httpx.get(url, timeout=5)
            if last.status_code == status:
                return last
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(
        f"{url} not {status} after {timeout}s (last: {last!r}):\n{log.read_text(errors='replace')[-6000:]}"
    )
