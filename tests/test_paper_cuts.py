"""Newcomer paper cuts (issue 14), each as a real process, a real journal or real HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from jitwatch.cli.render import render_coverage, render_status
from jitwatch.store.journal import JOURNAL_FILE
from jitwatch.testing import free_port
from jitwatch.views.coverage import ArgumentCoverage, CoverageReport, KernelCoverage
from jitwatch.views.status import JitStatus
from tests._paths import ROOT

HOSTILE = "k[/]\x1b[2J\x1b]0;owned\x07[bold]x"


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "jitwatch.cli", *args],
        env={**base, "COLUMNS": "80", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ------------------------------------------------------------------------------ settings errors
def test_bad_port_is_one_line() -> None:
    res = _cli("status", env={"JITWATCH_PORT": "abc"})
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["jitwatch: JITWATCH_PORT='abc' is not an integer"], res.stderr
    assert "Usage" not in res.stderr and "╭" not in res.stderr


def test_unused_bad_setting_does_not_stop_a_command(tmp_path: Path) -> None:
    """``JITWATCH_MODE=loud`` is an error only where the mode is used: ``status`` and ``serve``
    run (serve answers /livez on 127.0.0.1); ``demo`` (its worker uses the mode) refuses."""
    status = _cli("status", "--url", "http://127.0.0.1:9", env={"JITWATCH_MODE": "loud"})
    assert "JITWATCH_MODE" not in status.stderr and "cannot reach" in status.stderr, status.stderr
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(JITWATCH_MODE="loud", JITWATCH_DIR=str(tmp_path / "j"), JITWATCH_PORT=str(port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jitwatch.cli", "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    demo = _cli("demo", "--exit", env={"JITWATCH_MODE": "loud"})
    assert demo.returncode == 2 and "JITWATCH_MODE='loud'" in demo.stderr


def test_settings_errors_are_kept_per_variable() -> None:
    from jitwatch.config import ConfigError, Settings

    s = Settings.from_env({"JITWATCH_MODE": "loud", "JITWATCH_PORT": "80"}, strict=False)
    assert s.port == 80 and s.require("JITWATCH_PORT") is s
    with pytest.raises(ConfigError, match="JITWATCH_MODE"):
        s.require("JITWATCH_MODE")
    with pytest.raises(ConfigError, match="JITWATCH_MODE"):
        Settings.from_env({"JITWATCH_MODE": "loud"})


# ------------------------------------------------------------------------------ replay settings
@pytest.fixture
def manifest_file(tmp_path: Path, harness: Any) -> Path:
    import torch

    from jitwatch.store.journal import Journal
    from jitwatch.testing import fresh_kernel_cache
    from jitwatch.warmup.manifest import record_from_journal, save
    from tests._paths import TRITON_TESTS

    sys.path.insert(0, str(TRITON_TESTS))
    import kernels_fieldcases as kf

    fresh_kernel_cache(kf.scale_copy)
    kf.scale_copy.warmup(torch.zeros(64), torch.zeros(65)[1:], 64, BLOCK=64, grid=(1,))
    harness.monitor.flush()
    with Journal(harness.journal_dir, readonly=True) as j:
        return save(record_from_journal(j, phases=None), tmp_path / "m.json")


def test_warmup_replay_honours_replay_and_target_variables(manifest_file: Path) -> None:
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'backends' / 'triton'}"}
    env["JITWATCH_MANIFEST_ALLOW"] = "kernels_fieldcases"
    res = _cli(
        "warmup", "replay", str(manifest_file), "--json", "--compile-only",
        env={**env, "JITWATCH_REPLAY_PARALLEL": "serial", "JITWATCH_REPLAY_WORKERS": "3"},
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    # the recording (harness) compiled into this TRITON_CACHE_DIR: loaded from it, nothing compiled
    assert (report["mode"], report["workers"], report["compiled"], report["on_disk"]) == ("serial", 3, 0, 1)
    res = _cli(
        "warmup", "replay", str(manifest_file), "--json", "--compile-only",
        env={**env, "JITWATCH_TARGET_ARCH": "80"}, timeout=300,
    )  # fmt: skip
    report = json.loads(res.stdout)
    assert report["skipped"] == 1 and "recorded for target" in report["results"][0]["reason"], report
    bad = _cli("warmup", "replay", str(manifest_file), env={**env, "JITWATCH_REPLAY_PARALLEL": "fast"})
    assert bad.returncode == 2 and "JITWATCH_REPLAY_PARALLEL" in bad.stderr


# ------------------------------------------------------------------------------ empty journal
@pytest.mark.parametrize("command", [["coverage"], ["manifest", "export", "-o", "OUT"], ["why"]])
def test_empty_journal_file_is_one_line(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / JOURNAL_FILE).touch()
    args = [str(tmp_path / "m.json") if a == "OUT" else a for a in command]
    res = _cli(*args, "--journal-dir", str(tmp_path))
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "not a jitwatch journal" in res.stderr
    assert not (tmp_path / "m.json").exists()


# ------------------------------------------------------------------------------ terminal output
def _status(text: str) -> JitStatus:
    now = time.time()
    return JitStatus.model_validate(
        {
            "generated_ts": now,
            "ready": False,
            "not_ready_reason": text,
            "mode": "warn",
            "journal_up": True,
            "ranks": [
                {"rank": 0, "state": "serving", "ready": True, "host": text, "pid": 1, "serving_compiles": 1,
                 "last_seen_ts": now, "started_ts": now}
            ],
            "kernels": [
                {"backend": "triton", "name": text, "compiles_warmup": 0, "compiles_serving": 1,
                 "compile_seconds": 0.5, "disk_cache_hits": 0, "ranks": [0], "autotune_runs": 0, "last_compile_ts": now,
                 "last_key": f"[('*fp32', 'D'), ('{text}', 1)]{{'num_warps': 4}}"}
            ],
            "recent_serving_compiles": [
                {"ts": now, "rank": 0, "backend": "triton", "kernel": text, "key": text, "duration_s": 0.5,
                 "request_id": 7, "pid": 1, "host": text, "reason": f"[num_warps] {text}"}
            ],
            "totals": {"ranks": 1, "ranks_ready": 1, "kernels": 1, "compiles": 1, "compiles_serving": 1},
        }
    )  # fmt: skip


def test_status_prints_journal_text_literally_at_80_columns() -> None:
    """A key with ``[/]`` (rich markup) no longer crashes ``status``; escape sequences are shown,
    not sent; at 80 columns nothing is cut with an ellipsis and no line is wider than 80."""
    console = Console(width=80, record=True, force_terminal=True, color_system=None)
    render_status(_status(HOSTILE), console)
    out = console.export_text()
    assert "\x1b" not in out and "\x07" not in out
    assert "k[/]\\x1b[2J\\x1b]0;owned\\x07[bold]x" in out.replace("\n", "").replace("│", "").replace(" ", "")
    assert "[num_warps]" in out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    for header in ("rank", "state", "warmup", "serving", "kernel", "why", "request"):
        assert header in out


def test_coverage_keeps_bracketed_names() -> None:
    """The per-argument table's option rows are named ``[num_warps]``: rich used to read it as markup."""
    report = CoverageReport(
        kernels=[
            KernelCoverage(
                kernel=HOSTILE, covered=1, total=2, ratio=0.5, warmup_keys=1, serving_keys=1, flags_known=False,
                uncovered=["[num_warps]:=2"],
                arguments=[
                    ArgumentCoverage(name="[num_warps]", kind="option", classes=["=4", "=2"], covered=["=4"],
                                     uncovered=["=2"], serving_only=["=2"])
                ],
            )
        ]
    )  # fmt: skip
    console = Console(width=80, record=True, force_terminal=True, color_system=None)
    render_coverage(report, console, verbose=True)
    out = console.export_text()
    assert out.count("[num_warps]") >= 2 and "\x1b" not in out and "…" not in out


# ------------------------------------------------------------------------------ sidecar
def test_empty_token_refused() -> None:
    res = _cli("serve", "--token", "", "--port", str(free_port()))
    assert res.returncode == 2 and "--token is empty" in res.stderr, res.stderr
    from jitwatch.config import ConfigError, Settings
    from jitwatch.sidecar import create_app

    with pytest.raises(ConfigError, match="empty"):
        create_app(Path("/nonexistent"), token=" ", settings=Settings.from_env({}))


def test_a_whitespace_token_variable_is_one_line() -> None:
    """`JITWATCH_TOKEN="   " jitwatch serve` was create_app's ConfigError as a traceback, exit 1;
    now one line, exit 2, as `--token " "`. With --token given the variable is not read."""
    res = _cli("serve", "--port", str(free_port()), env={"JITWATCH_TOKEN": "   "}, timeout=30)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines == ["jitwatch: JITWATCH_TOKEN is only whitespace: set a real token, or unset it to serve without one"]
    res = _cli("serve", "--token", "abc", "--journal-dir", "/dev/null", env={"JITWATCH_TOKEN": "   "}, timeout=30)
    assert res.returncode == 2 and "JITWATCH_TOKEN" not in res.stderr, res.stderr  # refused for /dev/null only


@pytest.fixture
def sidecar(tmp_path: Path) -> Any:
    """``jitwatch serve`` with a non-ASCII token, as a real process on 127.0.0.1."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(JITWATCH_DIR=str(tmp_path / "j"), JITWATCH_TOKEN="jeton-sécurité-日本")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jitwatch.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None
        try:
            httpx.get(url + "/livez", timeout=1)
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    yield url, env
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)


def test_non_ascii_token_matches(sidecar: Any) -> None:
    url, env = sidecar
    good = "jeton-sécurité-日本".encode()
    assert httpx.get(url + "/jit", headers={"Authorization": b"Bearer " + good}).status_code == 200
    assert httpx.get(url + "/jit", headers={"Authorization": b"Bearer " + good[:-1]}).status_code == 401
    latin1 = "jeton-sécurité".encode("latin-1")  # other bytes for a similar text: refused
    assert httpx.get(url + "/jit", headers={"Authorization": b"Bearer " + latin1}).status_code == 401
    res = _cli("status", "--url", url, "--json", env={"JITWATCH_TOKEN": env["JITWATCH_TOKEN"]})
    # the token was accepted (a 401 exits 1): the answer is the status of a journal with no worker,
    # NOT READY, exit 3
    assert res.returncode == 3 and json.loads(res.stdout)["ready"] is False, res.stderr


@pytest.mark.parametrize("path", ["/livez", "/readyz"])
def test_probes_answer_head_and_options(sidecar: Any, path: str) -> None:
    url, _ = sidecar
    get = httpx.get(url + path)
    head = httpx.head(url + path)
    assert head.status_code == get.status_code and head.status_code != 405
    assert head.content == b""
    opts = httpx.options(url + path)
    assert opts.status_code == 204 and "HEAD" in opts.headers["allow"]


# ------------------------------------------------------------------------------ scripts and demo
def test_make_vllm_env_takes_any_python(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "make-vllm-env.sh"
    assert "python3.1" not in script.read_text()
    old = tmp_path / "python"
    old.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.8.10' && exit 0\nexit 1\n")
    old.chmod(0o755)
    res = subprocess.run(["bash", str(script), str(tmp_path / "venv")], env={**os.environ, "PYTHON": str(old)},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2 and "Python 3.8.10 is too old" in res.stderr, res.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.slow
def test_demo_interrupted_early_removes_its_triton_cache(tmp_path: Path) -> None:
    """SIGTERM while the worker compiles its warmup: no ``jitwatch-demo-triton-*`` directory stays."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(TMPDIR=str(tmp), JITWATCH_DIR=str(tmp_path / "unused"))
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--exit", "--port", str(free_port())]
    proc = subprocess.Popen(
        [*cmd, "--journal-dir", str(tmp_path / "journal")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while not any(p.is_dir() and any(p.iterdir()) for p in tmp.glob("jitwatch-demo-triton-*")):
            assert proc.poll() is None and time.monotonic() < deadline, "the worker never started compiling"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(2)  # a worker left running would keep writing into its cache
    assert list(tmp.glob("jitwatch-demo-triton-*")) == [], out


# ------------------------------------------------------------------------------ docs
def test_readme_cpu_worker_example_runs(tmp_path: Path) -> None:
    """The README's "On a CPU machine" example, run as a file in a fresh process."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### On a CPU machine", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "example.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(JITWATCH_DIR=str(tmp_path / "j"), TRITON_CACHE_DIR=str(tmp_path / "c"), PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, str(tmp_path / "example.py")], env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "post-warmup compile of Triton kernel 'scale'" in res.stderr
    assert res.stdout.strip().splitlines()[-1] == "{'startup': 0, 'warmup': 1, 'serving': 1}", res.stdout


def test_kernel_warmup_warms_what_its_arguments_are(compile_only: Any) -> None:
    """docs/triton-support.md: real tensors keep their alignment in ``kernel.warmup`` (an offset
    view warms the unaligned variant); only a dtype placeholder stands for an aligned pointer."""
    import torch

    from jitwatch.testing import TritonHookRecorder, fresh_kernel_cache
    from tests._paths import TRITON_TESTS

    sys.path.insert(0, str(TRITON_TESTS))
    import kernels_fieldcases as kf

    fresh_kernel_cache(kf.scale_copy)
    with TritonHookRecorder() as rec:
        kf.scale_copy.warmup(torch.zeros(64), torch.zeros(65)[1:], 64, BLOCK=64, grid=(1,))
        kf.scale_copy.warmup(torch.float32, torch.float32, 64, BLOCK=64, grid=(1,))
        kf.scale_copy.run(torch.zeros(64), torch.zeros(65)[1:], 64, BLOCK=64, grid=(1,), warmup=True)
    keys = [c.key for c in rec.started]
    assert len(keys) == 2, keys  # the run(..., warmup=True) with the same view compiled nothing new
    assert "('*fp32', '')" in str(keys[0]) and "('*fp32', '')" not in str(keys[1])


def test_status_end_to_end_with_hostile_journal_text(tmp_path: Path) -> None:
    """Journal text with rich markup and terminal escapes, served by a real sidecar, printed by a
    real ``jitwatch status`` at 80 columns: exit 0, the text shown literally, no escape sent."""
    from jitwatch.core.events import Event, EventKind, Phase
    from jitwatch.store.journal import Journal

    now = time.time()
    common: dict[str, Any] = {"backend": "triton", "host": "h", "pid": 1, "rank": 0}
    with Journal(tmp_path / "j") as j:
        j.write(
            [
                Event(kind=EventKind.WORKER_START, phase=Phase.STARTUP, ts=now, attrs={"mode": "warn"}, **common),
                Event(kind=EventKind.WARMUP_COMPLETE, phase=Phase.SERVING, ts=now, start_ts=now, duration_s=0.1,
                      **common),
                Event(kind=EventKind.COMPILE, phase=Phase.SERVING, ts=now, duration_s=0.2, kernel=HOSTILE,
                      key=f"[('*fp32', '{HOSTILE}')]{{'num_warps': 4}}", attrs={"request": HOSTILE}, **common),
            ]
        )  # fmt: skip
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(JITWATCH_DIR=str(tmp_path / "j"), JITWATCH_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "jitwatch.cli", "serve"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None
            try:
                httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        res = _cli("status", env={"JITWATCH_PORT": str(port), "TERM": "xterm-256color"})
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout
    # each table's columns, their folded lines joined (a cell wraps beside other wrapped cells:
    # the dated times, 2026-12-03 on one line and 01:07:56 UTC on the next)
    columns: list[str] = []
    body: list[list[str]] = []
    for line in res.stdout.splitlines():
        if line.startswith("│"):
            body.append([f.replace(" ", "") for f in line.split("│")[1:-1]])
        elif body:
            columns += ["".join(col) for col in zip(*body, strict=True)]
            body = []
    assert sum("k[/]\\x1b[2J\\x1b]0;owned\\x07[bold]x" in col for col in columns) >= 2, res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 80


def test_worker_ignores_sidecar_only_settings(tmp_path: Path) -> None:
    """``install()`` in a real process: a bad ``JITWATCH_PORT`` (read by the sidecar only) does not
    stop a worker; a bad worker variable (``JITWATCH_QUEUE_SIZE``) still does, naming it."""
    code = "import jitwatch; m = jitwatch.install(); print('installed', m.mode.value); jitwatch.uninstall()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(JITWATCH_DIR=str(tmp_path / "j"), JITWATCH_PORT="abc", JITWATCH_TOKEN="", JITWATCH_BACKENDS="none")
    ok = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "installed warn" in ok.stdout, ok.stderr
    env["JITWATCH_QUEUE_SIZE"] = "lots"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "JITWATCH_QUEUE_SIZE='lots'" in bad.stderr
