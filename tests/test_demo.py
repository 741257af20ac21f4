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

from jitwatch.config import Settings
from jitwatch.core.events import EventKind, Phase
from jitwatch.demo.runner import (
    DEMO_LABEL,
    DEMO_LABEL_VALUE,
    LOCK_FILE,
    STOPPED_LINE,
    DemoError,
    DemoOptions,
    DemoSetupError,
    default_journal_dir,
    journal_lock,
    reset_journal,
    run_demo,
)
from jitwatch.errors import ConfigError
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import free_port
from jitwatch.views.status import readiness
from tests._paths import ROOT


def demo_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    return {**env, "COLUMNS": "160", "JITWATCH_DIR": str(tmp_path / "unused"), **extra}


def run_demo_cli(tmp_path: Path, *flags: str, env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``jitwatch demo --exit`` as a subprocess; poll /readyz meanwhile; return what it saw."""
    port = free_port()
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--exit", "--port", str(port)]
    cmd += ["--journal-dir", str(tmp_path / "journal"), "--output-dir", str(out), *flags]
    env = demo_env(tmp_path, **(env_extra or {}))
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
    kernel compiles once in serving, with its key; the torch.compile sampler, warmed for one
    request, recompiles once when two are batched, with Dynamo's reason; /readyz goes 503 → 200."""
    r = run_demo_cli(tmp_path)
    jit, demo = r["jit"], r["demo"]
    assert jit["ready"] is True
    (rank,) = jit["ranks"]
    assert rank["state"] == "serving" and rank["warmup_compiles"] == 2 and rank["serving_compiles"] == 2
    assert rank["first_request_latency_s"] is not None and rank["first_request_latency_s"] > 0
    sm = kernel(jit, "slot_mapping_kernel")
    assert (sm["compiles_warmup"], sm["compiles_serving"]) == (1, 0)
    zero = kernel(jit, "zero_kv_blocks_kernel")
    assert (zero["compiles_warmup"], zero["compiles_serving"]) == (0, 1)
    (recent,) = [c for c in jit["recent_serving_compiles"] if c["backend"] == "triton"]
    assert recent["kernel"] == "zero_kv_blocks_kernel" and recent["key"] == zero["last_key"]
    assert "'*fp16'" in recent["key"] and recent["request_id"] == 3
    assert recent["request"] == "step-3"  # step names count from 1, like request ids
    (tc,) = [c for c in jit["recent_serving_compiles"] if c["backend"] == "torch_compile"]
    assert tc["kernel"] == "make_sampler.<locals>.sample_probs" and tc["request_id"] == 3
    assert tc["reason"] == "0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2"
    assert tc["reason_class"] == "size mismatch" and tc["compile_id"] == "0/1"
    sampler = kernel(jit, "make_sampler.<locals>.sample_probs")
    assert (sampler["backend"], sampler["compiles_warmup"], sampler["compiles_serving"]) == ("torch_compile", 1, 1)
    assert len({s["num_tokens"] for s in demo["scenario"]["steps"]}) >= 5
    assert demo["scenario"]["source"] in ("reference", "kernel")
    # /readyz: 503 first (worker starting / warming up), then 200 — seen by the demo and by us.
    assert [c for _, c in demo["readyz"]] == [503, 200]
    # ... and 503 again once the worker has exited (--exit: a clean exit records the rank stopped),
    # if a poll caught the moment between its exit and the demo stopping the sidecar.
    assert r["readyz_polled"][:2] == [503, 200] and r["readyz_polled"][2:] in ([], [503]), r["readyz_polled"]
    with Journal(tmp_path / "journal", readonly=True) as j:  # what `jitwatch serve` on it answers now
        after = readiness(j.latest_workers())
    assert after.ranks == {"0": "stopped"} and not after.ready, after
    assert after.reason is not None and after.reason.startswith("rank 0 stopped (clean exit at ")
    # The /readyz times count from the worker's spawn, the warmup's from its start: the line says
    # so, with the worker's start-up time (the seconds between them), and 200 came after both.
    started, warm, ready = demo["worker_started_s"], demo["warmup"]["seconds"], demo["readyz"][-1][0]
    assert 0 < started < ready and started + warm <= ready + 0.05, (started, warm, demo["readyz"])
    (line,) = [x for x in r["stdout"].splitlines() if x.startswith("/readyz: ")]
    assert f"(from the worker's spawn: it started in {started:.2f}s" in line, line
    m = r["metrics"]
    assert metric(m, "jitwatch_serving_compiles_total", kernel="zero_kv_blocks_kernel", rank="0") == 1
    assert 'jitwatch_serving_compiles_total{backend="triton",kernel="slot_mapping_kernel"' not in m
    assert metric(m, "jitwatch_compile_seconds_total", kernel="slot_mapping_kernel") > 0
    assert metric(m, "jitwatch_warmup_complete", rank="0") == 1
    assert metric(m, "jitwatch_recompiles_total", backend="torch_compile", reason_class="size mismatch") == 1
    assert "first-request latency" in r["stdout"] and "zero_kv_blocks_kernel" in r["stdout"]
    assert "size mismatch at index 0. expected 1, actual 2" in r["stdout"]


@pytest.mark.slow
def test_demo_closes_the_loop_with_the_commands_it_prints(tmp_path: Path) -> None:
    """Run 1 compiles the never-warmed zeroing kernel in serving; its summary ends with the two
    commands that close the loop. Run as printed (through a shell): the export writes a manifest
    in the demo's journal directory, and the demo again with that manifest replays it in its
    worker's warmup (JITWATCH_MANIFEST + JITWATCH_MANIFEST_ALLOW): run 2's journal has the zeroing
    kernel as a warmup compile and no serving compile of it. Fresh Triton caches in both runs: the
    kernel is compiled by the replay, not found on disk."""
    from jitwatch.testing import read_events

    first = run_demo_cli(tmp_path)
    assert kernel(first["jit"], "zero_kv_blocks_kernel")["compiles_serving"] == 1
    lines = first["stdout"].splitlines()
    (export,) = [line.split(": ", 1)[1] for line in lines if line.startswith("a warmup manifest of the Triton one: ")]
    (again,) = [
        line.split(": ", 1)[1]
        for line in lines
        if line.startswith("once this demo has stopped, replay it in the worker's warmup: ")
    ]
    journal_dir = tmp_path / "journal"
    assert f"--journal-dir {journal_dir}" in export and f"-o {journal_dir / 'manifest.json'}" in export
    # the narrowest allow prefix, the kernel's own module, as the warn line's and `why`'s fix name it
    allow = "JITWATCH_MANIFEST_ALLOW=jitwatch.kernels.kv_blocks"
    assert again.startswith(f"JITWATCH_MANIFEST={journal_dir / 'manifest.json'} {allow} "), again
    (warned,) = [line for line in lines if line.startswith("jitwatch: post-warmup compile of Triton kernel")]
    assert f"{allow}`" in warned, warned
    assert " demo --journal-dir " in again and " --exit" in again, again
    env = demo_env(tmp_path)
    res = subprocess.run(["/bin/sh", "-c", export], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (export, res.stdout, res.stderr)
    assert "zero_kv_blocks_kernel" in (journal_dir / "manifest.json").read_text()
    out = tmp_path / "out2"
    res = subprocess.run(
        ["/bin/sh", "-c", f"{again} --output-dir {out}"], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, (again, res.stdout, res.stderr)
    assert "manifest replayed in warmup: 1 entry" in res.stdout, res.stdout
    zero = kernel(json.loads((out / "jit.json").read_text()), "zero_kv_blocks_kernel")
    assert (zero["compiles_warmup"], zero["compiles_serving"]) == (1, 0), res.stdout + res.stderr
    compiles = [e for e in read_events(journal_dir, EventKind.COMPILE) if e.kernel == "zero_kv_blocks_kernel"]
    assert [e.phase for e in compiles] == [Phase.WARMUP], compiles
    assert "serving compile: triton zero_kv_blocks_kernel" not in res.stdout, res.stdout


@pytest.mark.slow
def test_demo_no_warmup(tmp_path: Path) -> None:
    """Before picture: the slot-mapping kernel compiles in serving, inside the first request."""
    jit = run_demo_cli(tmp_path, "--no-warmup")["jit"]
    sm = kernel(jit, "slot_mapping_kernel")
    assert (sm["compiles_warmup"], sm["compiles_serving"]) == (0, 1)
    # slot mapping + zeroing (Triton), the sampler's first compile and its batch-2 recompile (torch.compile)
    assert jit["ranks"][0]["serving_compiles"] == 4
    first = [c for c in jit["recent_serving_compiles"] if c["kernel"] == "slot_mapping_kernel"]
    assert [c["request_id"] for c in first] == [1]


@pytest.mark.slow
def test_demo_specialize_num_tokens(tmp_path: Path) -> None:
    """num_tokens specialized and warmed with one size: the ==1 and 'other' classes recompile."""
    jit = run_demo_cli(tmp_path, "--specialize-num-tokens")["jit"]
    sm = kernel(jit, "slot_mapping_kernel_specialized")
    assert (sm["compiles_warmup"], sm["compiles_serving"]) == (1, 2)
    assert jit["ranks"][0]["serving_compiles"] == 4  # + the torch.compile sampler's batch-2 recompile
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


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("JITWATCH_RANK", "-1", "JITWATCH_RANK=-1 is negative"),
        ("JITWATCH_TP_RANK", "x", "JITWATCH_TP_RANK='x' is not an integer"),
        ("JITWATCH_MODE", "off", "JITWATCH_MODE=off records nothing"),
        ("JITWATCH_BACKENDS", "nosuch", "unknown backend nosuch in JITWATCH_BACKENDS; known: "),
        ("JITWATCH_BACKENDS", "Triton", "did you mean JITWATCH_BACKENDS=triton"),
    ],
)
def test_worker_settings_are_checked_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str, message: str
) -> None:
    """Values only the worker reads fail up front as one setup error, not as a worker traceback."""
    monkeypatch.setenv(var, value)
    with pytest.raises(DemoSetupError, match=message):
        run_demo(DemoOptions(port=9, journal_dir=tmp_path / "j", exit_after=True))
    assert not (tmp_path / "j").exists()


def test_demo_sidecar_does_not_read_the_port_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's own host and port replace JITWATCH_HOST/JITWATCH_PORT: a bad JITWATCH_PORT stops
    neither the setup checks nor the demo's sidecar (real uvicorn on 127.0.0.1), only other bad
    variables do."""
    from jitwatch.demo.runner import _Sidecar

    monkeypatch.setenv("JITWATCH_PORT", "abc")
    with socket.socket() as s:  # busy: the port check is the last setup step, after the variables
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(DemoSetupError, match=r"cannot bind .* \(use --port\)"):
            run_demo(DemoOptions(port=s.getsockname()[1], journal_dir=tmp_path / "j", exit_after=True))
    port = free_port()
    sidecar = _Sidecar("127.0.0.1", port, tmp_path / "j")
    sidecar.start()
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/livez", timeout=5).status_code == 200
    finally:
        sidecar.stop()
    monkeypatch.setenv("JITWATCH_STALE_SECONDS", "soon")
    with pytest.raises(ConfigError, match="JITWATCH_STALE_SECONDS"):
        _Sidecar("127.0.0.1", port, tmp_path / "j")


def test_default_journal_dir_is_per_port(tmp_path: Path) -> None:
    settings = Settings(journal_dir=tmp_path)
    assert default_journal_dir(9400, settings) == tmp_path / "demo-9400"
    assert default_journal_dir(9401, settings) == tmp_path / "demo-9401"


def test_second_demo_on_the_same_journal_refuses(tmp_path: Path) -> None:
    """The first demo holds an exclusive flock on <journal dir>/demo.lock; a second one (another
    port, same --journal-dir) refuses before touching the journal."""
    jdir = tmp_path / "j"
    jdir.mkdir()
    (jdir / JOURNAL_FILE).write_text("the first demo's journal")
    with journal_lock(jdir):
        assert (jdir / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(DemoSetupError, match="another jitwatch demo is using the journal directory"):
            run_demo(DemoOptions(port=free_port(), journal_dir=jdir, exit_after=True))
        # a second process sees the same (flock is per open file description, so test across processes)
        code = (
            "import sys; from pathlib import Path; from jitwatch.demo.runner import journal_lock, DemoSetupError\n"
            "try:\n    journal_lock(Path(sys.argv[1])).__enter__()\nexcept DemoSetupError: sys.exit(7)"
        )
        assert subprocess.run([sys.executable, "-c", code, str(jdir)], timeout=60).returncode == 7
    assert (jdir / JOURNAL_FILE).read_text() == "the first demo's journal"
    with journal_lock(jdir):  # released: free again
        pass


@pytest.mark.slow
def test_demo_error_mode_stops_with_one_clear_line(tmp_path: Path) -> None:
    """JITWATCH_MODE=error: the serving compile of the zeroing kernel stops the worker, as designed;
    the demo says so in one line and exits non-zero, with no traceback."""
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--exit", "--port", str(free_port())]
    cmd += ["--journal-dir", str(tmp_path / "journal")]
    proc = subprocess.run(
        cmd, env=demo_env(tmp_path, JITWATCH_MODE="error"), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "JITWATCH_MODE=error stopped the worker on the serving compile of zero_kv_blocks_kernel" in proc.stderr, (
        proc.stderr
    )


@pytest.mark.slow
def test_demo_sigterm_prints_stopped(tmp_path: Path) -> None:
    """Serving until interrupted: SIGTERM stops worker and sidecar and prints a 'stopped' line.
    Before that, the serving hint's `jitwatch status --url …` is run as printed, through a shell
    with the demo's PATH (with no jitwatch on it: .venv/bin is not on PATH after `make demo`)."""
    import signal

    port = free_port()
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--port", str(port)]
    cmd += ["--journal-dir", str(tmp_path / "journal")]
    (tmp_path / "bin").mkdir()
    env = demo_env(tmp_path, PATH=os.pathsep.join([str(tmp_path / "bin"), "/usr/bin", "/bin"]))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "Ctrl-C to stop" in line:
                break
        hint = next(ln for ln in seen if "Try:" in ln).rstrip("\n")
        status = hint.split(f"curl http://127.0.0.1:{port}/metrics", 1)[1].strip()
        assert status.endswith(f" status --url http://127.0.0.1:{port}") and status.startswith("/"), hint
        res = subprocess.run(["/bin/sh", "-c", status], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and "zero_kv_blocks_kernel" in res.stdout, (status, res.stdout, res.stderr)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(seen) + rest
    assert STOPPED_LINE in rest.splitlines() and "Traceback" not in rest
    with journal_lock(tmp_path / "journal"):  # the lock went with the process
        pass


@pytest.mark.slow
def test_demo_ctrl_c_prints_the_documented_stopped_line(tmp_path: Path) -> None:
    """Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group, the demo and
    its worker alike (the worker stops on its own, the demo then stops the sidecar). The demo
    prints STOPPED_LINE, the line README.md and docs/demo.md quote (README said
    `jitwatch demo: stopped`), and exits 0."""
    import signal

    port = free_port()
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--port", str(port), "--journal-dir", str(tmp_path / "j")]
    proc = subprocess.Popen(
        cmd,
        env=demo_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell's foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # pytest's may be ignored
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if "Ctrl-C to stop" in line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (rest, err)
    assert rest.splitlines()[-1] == STOPPED_LINE, rest
    assert "Traceback" not in rest + err, err


def test_summary_names_the_demo_journal_for_jitwatch_why(tmp_path: Path) -> None:
    """The demo's journal is <JITWATCH_DIR>/demo-<port>: the summary's `jitwatch why` hint must pass
    it, since a bare `jitwatch why` reads <JITWATCH_DIR> and answers "no journal at ..."."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    journal_dir = tmp_path / "demo-9400"
    jit = {
        "ranks": [{"rank": 0, "ready": True, "warmup_compiles": 1, "serving_compiles": 1}],
        "kernels": [],
        "recent_serving_compiles": [
            {
                "backend": "triton",
                "kernel": "zero_kv_blocks_kernel",
                "request_id": 3,
                "duration_s": 0.06,
                "reason": "never warmed (no compile of this kernel before serving)",
            }
        ],
    }
    report = DemoReport(journal_dir=journal_dir, url="http://127.0.0.1:9400", jit=jit)
    console = Console(record=True, width=400)
    print_summary(report, console)
    text = console.export_text()
    assert f"jitwatch why --journal-dir {journal_dir}" in text

    report.jit = {**jit, "recent_serving_compiles": []}
    console = Console(record=True, width=400)
    print_summary(report, console)
    assert "--journal-dir" not in console.export_text()


@pytest.mark.parametrize(("compiles", "shown"), [(1, "1 compile"), (2, "2 compiles"), (0, "0 compiles")])
def test_summary_counts_warmup_compiles_in_words(tmp_path: Path, compiles: int, shown: str) -> None:
    """The warmup line said ``2 compile(s)``; it counts in words as the rest of the CLI does."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    jit = {"ranks": [{"rank": 0, "ready": True, "warmup_duration_s": 0.5, "warmup_compiles": compiles}], "kernels": []}
    console = Console(record=True, width=400)
    print_summary(DemoReport(journal_dir=tmp_path, url="http://127.0.0.1:9400", jit=jit), console)
    (line,) = [line for line in console.export_text().splitlines() if line.startswith("warmup: ")]
    assert line.startswith(f"warmup: complete in 0.500s, {shown}") and "(s)" not in line, line


def test_summary_says_when_the_manifest_was_not_replayed(tmp_path: Path) -> None:
    """A JITWATCH_MANIFEST that could not be read was one log line near the top; the warmup line
    then read as if nothing had been asked for. It now says the manifest was not replayed."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    jit = {"ranks": [{"rank": 0, "ready": True, "warmup_duration_s": 0.5, "warmup_compiles": 2}], "kernels": []}
    for warmup, shown in [({"ran": True, "manifest_not_replayed": True}, True), ({"ran": True}, False)]:
        console = Console(record=True, width=400)
        print_summary(DemoReport(journal_dir=tmp_path, url="http://127.0.0.1:9400", jit=jit, warmup=warmup), console)
        (line,) = [line for line in console.export_text().splitlines() if line.startswith("warmup: ")]
        assert ("JITWATCH_MANIFEST NOT replayed" in line) is shown, line


@pytest.mark.slow
def test_demo_with_an_unreadable_manifest_says_so_in_its_summary(tmp_path: Path) -> None:
    """The demo with a truncated JITWATCH_MANIFEST: the worker logs why and warms as without one,
    and the summary's warmup line says the manifest was not replayed (exit 0, as before)."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "jitwatch-manifest", "entries": [')
    r = run_demo_cli(tmp_path, env_extra={"JITWATCH_MANIFEST": str(bad), "JITWATCH_MANIFEST_ALLOW": "jitwatch.kernels"})
    assert "jitwatch: not replaying warmup manifest" in r["stdout"], r["stdout"]
    (line,) = [x for x in r["stdout"].splitlines() if x.startswith("warmup: ")]
    assert "JITWATCH_MANIFEST NOT replayed" in line and "manifest replayed in warmup" not in line, line
    assert r["demo"]["warmup"].get("manifest_not_replayed") is True


def test_summary_offers_a_manifest_only_for_triton_serving_compiles(tmp_path: Path) -> None:
    """The record and replay commands are printed when a Triton kernel compiled in serving (with
    the demo's own options: --port, flags); with torch.compile's serving compiles alone the export
    would write nothing (exit 1) and a replay would warm nothing: only `why` and `coverage`."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, demo_args, print_summary

    tc = {"backend": "torch_compile", "kernel": "sample_probs", "request_id": 3, "reason": "0/0: size mismatch"}
    args = demo_args(DemoOptions(port=9555, exit_after=True, no_warmup=True), tmp_path)
    jit = {"ranks": [{"rank": 0, "ready": True}], "kernels": [], "recent_serving_compiles": [tc]}
    console = Console(record=True, width=400)
    print_summary(DemoReport(journal_dir=tmp_path, url="http://127.0.0.1:9555", jit=jit, demo_args=args), console)
    text = console.export_text()
    assert "why --journal-dir" in text and "manifest export" not in text and "JITWATCH_MANIFEST" not in text, text
    jit["recent_serving_compiles"] = [tc, {"backend": "triton", "kernel": "zero_kv_blocks_kernel", "request_id": 3}]
    console = Console(record=True, width=400)
    print_summary(DemoReport(journal_dir=tmp_path, url="http://127.0.0.1:9555", jit=jit, demo_args=args), console)
    (line,) = [
        x
        for x in console.export_text().splitlines()
        if x.startswith("once this demo has stopped, replay it in the worker's warmup: ")
    ]
    assert line.endswith(f" demo --journal-dir {tmp_path} --port 9555 --no-warmup --exit"), line
    assert f"JITWATCH_MANIFEST={tmp_path / 'manifest.json'} JITWATCH_MANIFEST_ALLOW=jitwatch.kernels " in line


def test_the_summary_s_replay_allows_the_modules_the_fix_names(demo_like_journal: Path, tmp_path: Path) -> None:
    """The summary's replay line allows the modules of the kernels the exported manifest holds,
    each kernel's own module, as the never-warmed fix (`jitwatch why`) names it: it allowed the
    demo's whole package, `jitwatch.kernels`, while the fix said `jitwatch.kernels.kv_blocks` (both
    work, as prefixes; a user comparing them was confused). Without a readable journal it falls
    back to the package."""
    import re

    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, manifest_modules, print_summary

    modules = manifest_modules(demo_like_journal)
    assert modules == ["jitwatch.kernels.kv_blocks"]
    assert manifest_modules(tmp_path / "none") == []
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    why = subprocess.run(
        [sys.executable, "-m", "jitwatch.cli", "why", "--journal-dir", str(demo_like_journal)],
        env={**env, "PYTHONPATH": str(ROOT), "COLUMNS": "400"},
        capture_output=True,
        text=True,
    )
    assert why.returncode == 0, why.stderr
    (fix_allow,) = set(re.findall(r"JITWATCH_MANIFEST_ALLOW=(\S+?)`", why.stdout))
    zero = {"backend": "triton", "kernel": "zero_kv_blocks_kernel", "request_id": 3}
    jit = {"ranks": [{"rank": 0, "ready": True}], "kernels": [], "recent_serving_compiles": [zero]}
    lines = []
    for given in (modules, []):
        report = DemoReport(journal_dir=demo_like_journal, url="http://x", jit=jit, manifest_modules=given)
        console = Console(record=True, width=400)
        print_summary(report, console)
        (line,) = [
            x for x in console.export_text().splitlines() if x.startswith("once this demo has stopped, replay it")
        ]
        lines.append(line)
    assert f" JITWATCH_MANIFEST_ALLOW={fix_allow} " in lines[0], (lines[0], fix_allow)
    assert " JITWATCH_MANIFEST_ALLOW=jitwatch.kernels " in lines[1], lines[1]


def test_the_readyz_line_says_what_it_waited_for(tmp_path: Path) -> None:
    """`warmup: complete in 1.285s` then `/readyz: 503 @0.02s → 200 @6.57s` left a new user asking
    what the other five seconds were: the /readyz times count from the worker's spawn, and the
    worker spends most of them starting (imports, jitwatch.install()) before its warmup begins.
    The line says so, and what /readyz waits for; without the start-up time (a worker that never
    said it started) it still says what the times count from."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    jit = {"ranks": [{"rank": 0, "ready": True, "warmup_duration_s": 1.285}], "kernels": []}
    lines = []
    for started in (5.214, None):
        report = DemoReport(journal_dir=tmp_path, url="http://x", jit=jit, worker_started_s=started)
        report.readyz = [(0.02, 503), (6.57, 200)]
        console = Console(record=True, width=400)
        print_summary(report, console)
        (line,) = [x for x in console.export_text().splitlines() if x.startswith("/readyz: ")]
        lines.append(line)
    assert lines[0] == (
        "/readyz: 503 @0.02s → 200 @6.57s (from the worker's spawn: it started in 5.21s, imports and "
        "jitwatch.install(), then warmed up in 1.285s; /readyz answers 200 once every rank has completed warmup)"
    )
    assert lines[1] == (
        "/readyz: 503 @0.02s → 200 @6.57s (from the worker's spawn; /readyz answers 200 once every rank has "
        "completed warmup)"
    )


def test_summary_lists_serving_compiles_oldest_first(tmp_path: Path) -> None:
    """/jit's recent_serving_compiles are newest first; the summary lists them oldest first, as
    `jitwatch why` does (it listed them newest first)."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    compiles = [
        {"backend": "triton", "kernel": f"k{i}", "request_id": i, "ts": 1_700_000_000.0 + i, "reason": f"r{i}"}
        for i in (3, 2, 1)  # newest first, as /jit serves them
    ]
    jit = {"ranks": [{"rank": 0, "ready": True}], "kernels": [], "recent_serving_compiles": compiles}
    console = Console(record=True, width=400)
    print_summary(DemoReport(journal_dir=tmp_path, url="http://127.0.0.1:9400", jit=jit), console)
    lines = [line for line in console.export_text().splitlines() if line.startswith("serving compile: ")]
    assert [line.split()[3] for line in lines] == ["k1", "k2", "k3"], lines


@pytest.fixture(scope="module")
def demo_like_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal like the demo's, from real compiles: warmup, then the zeroing kernel compiled in
    serving (compile-only Triton, as the demo's worker on CPU). The directory name has a space:
    the printed path must be quoted."""
    import torch

    from jitwatch.kernels.kv_blocks import zero_kv_blocks
    from jitwatch.testing import monitored

    journal_dir = tmp_path_factory.mktemp("hints") / "demo 9400"
    with monitored(journal_dir=journal_dir) as h:
        with h.monitor.warmup():
            pass
        zero_kv_blocks(torch.ones(8, 1024, dtype=torch.float16), torch.tensor([1, 2], dtype=torch.int32))
        assert h.monitor.flush()
    return journal_dir


@pytest.mark.parametrize("on_path", [False, True])
def test_every_hint_runs_as_printed(demo_like_journal: Path, tmp_path: Path, on_path: bool) -> None:
    """Every command the summary prints runs as printed, through a shell, as a user pasting it
    would: `why`, `coverage` and `manifest export` (which needs -o: the hint said only "also
    `coverage` / `manifest export` with the same --journal-dir", and `manifest export --journal-dir
    X` alone is a usage error). After `make demo`, `jitwatch` is .venv/bin/jitwatch, not on PATH:
    the commands name this interpreter's script unless that one is on PATH; run with and without
    the environment's bin directory on PATH."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, jitwatch_command, print_summary

    bin_dir = os.path.dirname(sys.executable)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    path = os.pathsep.join([bin_dir, "/usr/bin", "/bin"]) if on_path else str(empty)
    jit = {
        "ranks": [{"rank": 0, "ready": True, "warmup_compiles": 0, "serving_compiles": 1}],
        "kernels": [],
        "recent_serving_compiles": [
            {"backend": "triton", "kernel": "zero_kv_blocks_kernel", "request_id": 3, "duration_s": 0.06,
             "reason": "never warmed (no compile of this kernel before serving)"}
        ],
    }  # fmt: skip
    old_path = os.environ["PATH"]
    os.environ["PATH"] = path
    try:
        console = Console(record=True, width=60)  # narrower than the lines: they must not be cut
        print_summary(DemoReport(journal_dir=demo_like_journal, url="http://127.0.0.1:9400", jit=jit), console)
        jw = jitwatch_command()
        assert (jw == "jitwatch") is on_path
    finally:
        os.environ["PATH"] = old_path
    text = console.export_text()
    commands = [line.split(": ", 1)[1] for line in text.splitlines() if f": {jw} " in line]
    assert [c.split(" --journal-dir")[0].removeprefix(jw + " ") for c in commands] == [
        "why",
        "coverage",
        "manifest export",
    ], text
    assert all(c.startswith("jitwatch " if on_path else f"{bin_dir}/jitwatch ") for c in commands), commands
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update(PATH=path, PYTHONPATH=str(ROOT), COLUMNS="200", JITWATCH_DIR=str(tmp_path / "unused"))
    manifest = demo_like_journal / "manifest.json"
    manifest.unlink(missing_ok=True)
    outputs = []
    for command in commands:
        res = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, (command, res.stderr)
        outputs.append(res.stdout)
    assert "triton zero_kv_blocks_kernel compiled in serving" in outputs[0]
    assert "zero_kv_blocks_kernel" in outputs[1]
    assert outputs[2].startswith(f"wrote {manifest}: 1 specialization of 1 kernel (serving)"), outputs[2]


@pytest.mark.parametrize("with_torch_compile", [False, True])
def test_the_summary_says_what_the_manifest_covers(tmp_path: Path, with_torch_compile: bool) -> None:
    """Manifests record Triton kernels only: with a Triton and a torch.compile serving compile
    (the demo's run), the export line says it covers the Triton one (it said "a warmup manifest of
    them": 1 of 2, and the replay left the torch.compile recompile), and the torch.compile one gets
    its own fix, as /jit gives it; with Triton compiles only, "of them"."""
    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    tc_fix = "warm with a batch of at least 2 as well (torch.compile specializes on the first size)"
    serving = [
        {"backend": "torch_compile", "kernel": "make_sampler.<locals>.sample_probs", "request_id": 3,
         "duration_s": 0.1, "reason": "0/0: tensor 'logits' size mismatch at index 0. expected 1, actual 2",
         "fixes": [tc_fix]},
        {"backend": "triton", "kernel": "zero_kv_blocks_kernel", "request_id": 3, "duration_s": 0.06,
         "reason": "never warmed (no compile of this kernel before serving)"},
    ][0 if with_torch_compile else 1 :]  # fmt: skip
    jit = {"ranks": [{"rank": 0, "ready": True, "serving_compiles": len(serving)}], "kernels": [],
           "recent_serving_compiles": serving}  # fmt: skip
    console = Console(record=True, width=300)
    print_summary(DemoReport(journal_dir=tmp_path, url="http://127.0.0.1:9400", jit=jit), console)
    lines = console.export_text().splitlines()
    (export,) = [line for line in lines if line.startswith("a warmup manifest of ")]
    others = [line for line in lines if line.startswith("not in the manifest")]
    if with_torch_compile:
        assert export.startswith("a warmup manifest of the Triton one: "), export
        assert others == [
            "not in the manifest (it holds Triton kernels only): torch_compile "
            f"make_sampler.<locals>.sample_probs; its fix: {tc_fix}"
        ], lines
    else:
        assert export.startswith("a warmup manifest of them: ") and others == [], lines


def test_the_fix_of_a_never_warmed_kernel_closes_the_loop_as_printed(demo_like_journal: Path, tmp_path: Path) -> None:
    """`jitwatch why`'s fix of a kernel warmup never compiled, followed as printed, removes the
    serving compile: its record command (with the journal `why` read, and -o) writes a manifest;
    its replay is the worker's own warmup with `JITWATCH_MANIFEST=<manifest>
    JITWATCH_MANIFEST_ALLOW=<the kernel's module>` (the vLLM plugin's `replay_from_env`), after
    which the kernel compiles in warmup and not in serving. (It said `jitwatch warmup replay
    manifest.json`: exit 1 without --allow, and in its own process it only filled Triton's disk
    cache: the worker still compiled in serving, and `why` printed the same fix again.)

    The two commands run in different directories, each through a shell, as an operator's shell
    and a worker's launcher would: the manifest is one absolute path (the journal directory's
    `manifest.json`, quoted: the directory's name has a space), not `manifest.json`, which the
    worker resolved against its own working directory and did not find. `why --json` gives the
    same fix as the text (it named no journal: the export read the default one)."""
    import re
    import shlex

    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    # README's `make demo`: .venv not activated, its bin directory not on PATH
    env.update(PYTHONPATH=str(ROOT), COLUMNS="200", JITWATCH_DIR=str(tmp_path / "unused"), PATH="/usr/bin:/bin")
    script = shlex.quote(os.path.join(os.path.dirname(sys.executable), "jitwatch"))
    jw = f"{sys.executable} -m jitwatch.cli"
    why = subprocess.run(
        [*jw.split(), "why", "--journal-dir", str(demo_like_journal)], env=env, capture_output=True, text=True
    )
    assert why.returncode == 0, why.stderr
    (fix,) = [line.removeprefix("  fix: ") for line in why.stdout.splitlines() if line.startswith("  fix: ")]
    as_json = subprocess.run(
        [*jw.split(), "why", "--journal-dir", str(demo_like_journal), "--json"], env=env, capture_output=True, text=True
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)[-1]["fixes"] == [fix]
    commands = re.findall(r"`([^`]+)`", fix)
    manifest = demo_like_journal / "manifest.json"
    assert [c.split()[0] for c in commands] == [
        script,  # runnable as printed: the bare `jitwatch` was "command not found"
        f"JITWATCH_MANIFEST={shlex.quote(str(manifest))}".split()[0],
        "jitwatch",  # names `jitwatch demo` (the vLLM plugin, ...), not a command line
        "jitwatch.warmup.replay.replay_from_env()",
        "Monitor.warmup()",
        "jitwatch.warmup.replay.replay()",
        "Monitor.warmup()",
    ], fix
    export, replay_env = commands[0], commands[1]
    assert export == (
        f"{script} manifest export --journal-dir {shlex.quote(str(demo_like_journal))} -o {shlex.quote(str(manifest))}"
    ), fix
    assert replay_env == (
        f"JITWATCH_MANIFEST={shlex.quote(str(manifest))} JITWATCH_MANIFEST_ALLOW=jitwatch.kernels.kv_blocks"
    ), fix
    manifest.unlink(missing_ok=True)
    ops, worker_dir = tmp_path / "ops", tmp_path / "worker"
    ops.mkdir()
    worker_dir.mkdir()
    res = subprocess.run(
        ["/bin/sh", "-c", export],  # as printed
        cwd=ops,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert res.stdout.startswith(f"wrote {manifest}: 1 specialization of 1 kernel (serving)"), res.stdout
    assert manifest.is_file() and not (ops / "manifest.json").exists()
    # The worker of the next run, started elsewhere: its warmup replays the manifest the fix's
    # variables name, set by the shell as printed.
    worker = (
        "import torch\n"
        "from jitwatch.kernels.kv_blocks import zero_kv_blocks\n"
        "from jitwatch.config import Settings\n"
        "from jitwatch.testing import monitored\n"
        "from jitwatch.warmup.replay import replay_from_env\n"
        "with monitored(journal_dir='run2') as h:\n"
        "    with h.monitor.warmup():\n"
        "        report = replay_from_env(h.monitor, settings=Settings.from_env())\n"
        "    zero_kv_blocks(torch.ones(8, 1024, dtype=torch.float16), torch.tensor([1, 2], dtype=torch.int32))\n"
        "    assert h.monitor.flush()\n"
        "    print(report.summary())\n"
        "    n = [len(h.compiles(p, 'zero_kv_blocks_kernel')) for p in ('serving', 'warmup')]\n"
        "    print('serving', n[0], 'warmup', n[1])\n"
    )
    res = subprocess.run(
        ["/bin/sh", "-c", f"{replay_env} {shlex.quote(sys.executable)} -c {shlex.quote(worker)}"],
        cwd=worker_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert res.stdout.splitlines()[-1] == "serving 0 warmup 1", res.stdout


def test_the_warning_line_and_jit_name_the_journal_in_the_fix(demo_like_journal: Path, tmp_path: Path) -> None:
    """The fix of a kernel warmup never compiled, as the worker's warn-mode line and the sidecar's
    `/jit` (`recent_serving_compiles[].fixes`) give it, names the journal the export reads and the
    absolute manifest the replay reads, as `jitwatch why` does (they said `jitwatch manifest export
    -o manifest.json`: the default journal, and a manifest relative to each command's directory)."""
    import re
    import shlex

    from tests.test_cli import TOKEN, serving

    journal = tmp_path / "run 1"
    worker = (  # a process of its own: this one has the kernel compiled already (the fixture)
        "import logging, sys, torch\n"
        "from jitwatch.kernels.kv_blocks import zero_kv_blocks\n"
        "from jitwatch.testing import monitored\n"
        "logging.basicConfig(stream=sys.stdout, format='%(message)s')\n"
        "with monitored(journal_dir=sys.argv[1]) as h:\n"
        "    with h.monitor.warmup():\n"
        "        pass\n"
        "    zero_kv_blocks(torch.ones(8, 1024, dtype=torch.float16), torch.tensor([1, 2], dtype=torch.int32))\n"
        "    assert h.monitor.flush()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    res = subprocess.run(
        [sys.executable, "-c", worker, str(journal)],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},  # .venv not activated
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    (line,) = [m for m in res.stdout.splitlines() if m.startswith("jitwatch: post-warmup compile of")]
    manifest = shlex.quote(str(journal / "manifest.json"))
    script = shlex.quote(os.path.join(os.path.dirname(sys.executable), "jitwatch"))  # not on PATH
    export = f"`{script} manifest export --journal-dir {shlex.quote(str(journal))} -o {manifest}`"
    replay = f"`JITWATCH_MANIFEST={manifest} JITWATCH_MANIFEST_ALLOW=jitwatch.kernels.kv_blocks`"
    assert export in line and replay in line, line
    assert line.endswith(f"(the full key: `{script} why --journal-dir {shlex.quote(str(journal))} --json`)"), line
    # the journal keeps the fix as every version wrote it; the sidecar names its own journal
    with serving(demo_like_journal) as base:
        doc = httpx.get(base + "/jit", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        raw = httpx.get(base + "/jit/events?kind=compile", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    (fix,) = doc["recent_serving_compiles"][0]["fixes"]
    stored = [f for e in raw if e["phase"] == "serving" for f in e["attrs"]["fixes"]]
    assert "`jitwatch manifest export -o manifest.json`" in stored[0], stored
    assert re.findall(r"`([^`]+)`", fix)[:2] == [
        f"jitwatch manifest export --journal-dir {shlex.quote(str(demo_like_journal))}"
        f" -o {shlex.quote(str(demo_like_journal / 'manifest.json'))}",
        f"JITWATCH_MANIFEST={shlex.quote(str(demo_like_journal / 'manifest.json'))}"
        " JITWATCH_MANIFEST_ALLOW=jitwatch.kernels.kv_blocks",
    ], fix
    # `jitwatch coverage --json` (and /jit's coverage section): the journal it read, too
    from jitwatch.store.journal import Journal
    from jitwatch.views.coverage import coverage_for_journal

    with Journal(demo_like_journal, readonly=True) as j:
        report = coverage_for_journal(j)
    (missing,) = [m for k in report.kernels if k.kernel == "zero_kv_blocks_kernel" for m in k.missing]
    assert f"--journal-dir {shlex.quote(str(demo_like_journal))} -o " in missing.fixes[0], missing.fixes


def test_demo_refuses_to_reset_a_journal_it_did_not_create(tmp_path: Path) -> None:
    """`jitwatch demo --journal-dir <dir>` reset <dir>'s journal at start, whoever wrote it: pointed
    at a real worker's journal it wiped it without a word. Now a journal in a directory where no
    demo ran (no demo.lock) is refused, one line, exit 2, untouched, unless --force; a directory a
    demo used before is reset as always."""
    from typer.testing import CliRunner

    from jitwatch.cli import app
    from jitwatch.testing import JournalBuilder

    jdir = tmp_path / "prod"
    jb = JournalBuilder(jdir)
    jb.write(jb.event(EventKind.COMPILE, jb.t0, backend="triton", kernel="k", phase=Phase.SERVING))
    before = (jdir / JOURNAL_FILE).read_bytes()
    res = CliRunner().invoke(app, ["demo", "--exit", "--port", str(free_port()), "--journal-dir", str(jdir)])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    assert line == (
        f"jitwatch demo: {jdir} holds a journal that jitwatch demo did not create (no {LOCK_FILE}):"
        " the demo resets its journal at start; pass --force to reset it, or another --journal-dir"
    ), line
    assert (jdir / JOURNAL_FILE).read_bytes() == before and not (jdir / LOCK_FILE).exists()
    # --force passes that check (the busy port is the next one: nothing was reset)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DemoSetupError, match="--port"):
            run_demo(DemoOptions(port=port, journal_dir=jdir, exit_after=True, force=True))
        # a directory a demo used before (its demo.lock) passes this check (what its journal holds
        # is checked next, under the lock: test_demo_refuses_a_journal_a_real_worker_wrote_to)
        demo_dir = tmp_path / "demo-old"
        demo_dir.mkdir()
        with journal_lock(demo_dir):
            pass
        JournalBuilder(demo_dir).worker(**{DEMO_LABEL: DEMO_LABEL_VALUE})
        with pytest.raises(DemoSetupError, match="--port"):
            run_demo(DemoOptions(port=port, journal_dir=demo_dir, exit_after=True))
    assert (jdir / JOURNAL_FILE).read_bytes() == before


def test_what_a_demo_journal_may_hold(tmp_path: Path) -> None:
    """check_journal_writers (real SQLite): a journal whose every writer has a worker row labelled
    as the demo's worker passes; events of another process, a worker row without the label, and a
    later worker registering under the demo worker's own host, pid and rank (a reused pid: its
    worker_start replaces the row) are refused, naming what was found and --force; nothing changes."""
    from jitwatch.demo.runner import check_journal_writers
    from jitwatch.testing import JournalBuilder

    check_journal_writers(tmp_path / "missing")  # no journal: nothing to lose
    jdir = tmp_path / "demo-9400"
    jb = JournalBuilder(jdir)
    Journal(jdir).close()
    check_journal_writers(jdir)  # the empty journal the demo creates
    jb.worker(pid=7, **{DEMO_LABEL: DEMO_LABEL_VALUE})
    jb.compile("k", pid=7, phase=Phase.SERVING)
    check_journal_writers(jdir)
    jb.compile("k", pid=8, rank=1, phase=Phase.SERVING)
    jb.compile("k", pid=8, rank=1, phase=Phase.SERVING)
    refusal = "; the demo resets its journal at start; pass --force to reset it, or another --journal-dir"
    with pytest.raises(DemoSetupError) as exc:
        check_journal_writers(jdir)
    assert str(exc.value) == (
        f"{jdir} holds a journal that a process other than jitwatch demo's worker wrote to:"
        " 2 events of pid 8 on host node-a (rank 1)" + refusal
    )
    jb.worker(pid=9, rank=2)
    with pytest.raises(DemoSetupError) as exc:
        check_journal_writers(jdir)
    assert str(exc.value) == (
        f"{jdir} holds a journal that 2 processes other than jitwatch demo's worker wrote to: 3 events"
        " (pid 8 on host node-a, rank 1: 2 events; pid 9 on host node-a, rank 2: 1 event)" + refusal
    )
    other = tmp_path / "reused-pid"
    jb = JournalBuilder(other)
    jb.worker(pid=7, **{DEMO_LABEL: DEMO_LABEL_VALUE})
    jb.compile("k", pid=7, phase=Phase.SERVING)
    check_journal_writers(other)
    jb.worker(pid=7, ts=jb.t0 + 60)  # another process, the same host, pid and rank
    with pytest.raises(DemoSetupError, match=r"of pid 7 on host node-a \(rank 0\); the demo resets"):
        check_journal_writers(other)
    (bad := tmp_path / "bad").mkdir()
    (bad / JOURNAL_FILE).write_text("not a database")
    with pytest.raises(DemoSetupError, match=r"cannot read .*pass --force"):
        check_journal_writers(bad)
    assert (bad / JOURNAL_FILE).read_text() == "not a database"


REAL_WORKER = (  # a real worker, not the demo's: its own process, compile-only Triton, the journal argv[1]
    "import sys, torch\n"
    "from jitwatch.kernels.kv_blocks import zero_kv_blocks\n"
    "from jitwatch.testing import monitored\n"
    "with monitored(journal_dir=sys.argv[1]) as h:\n"
    "    with h.monitor.warmup():\n"
    "        pass\n"
    "    zero_kv_blocks(torch.ones(8, 1024, dtype=torch.float16), torch.tensor([1, 2], dtype=torch.int32))\n"
    "    assert h.monitor.flush()\n"
    "    print(h.monitor.identity.pid)\n"
)


def _writers(jdir: Path) -> dict[tuple[str, int, int], int]:
    """Events of each ``(host, pid, rank)`` in the journal in ``jdir`` (SQLite, read-only)."""
    import sqlite3

    conn = sqlite3.connect(f"{(jdir / JOURNAL_FILE).as_uri()}?mode=ro", uri=True)
    try:
        return {
            (h, p, r): n for h, p, r, n in conn.execute("SELECT host, pid, rank, COUNT(*) FROM events GROUP BY 1, 2, 3")
        }
    finally:
        conn.close()


@pytest.mark.slow
def test_demo_refuses_a_journal_a_real_worker_wrote_to(tmp_path: Path) -> None:
    """Reproduced in a new-user trial: `jitwatch demo --journal-dir D` once (D/demo.lock stays), a
    real worker then journals compiles in D, and the next `jitwatch demo --journal-dir D` deleted
    them without --force: demo.lock was the only check. Now the demo's worker labels its worker row
    and the demo resets only a journal whose every writer has it. Real processes throughout: a demo
    killed with kill -9 (parent and worker) leaves a journal the next demo still knows as its own;
    a real worker's compiles (compile-only Triton) then make it refuse, one line, exit 2, the
    journal and demo.lock untouched; --force resets it."""
    import contextlib
    import re
    import signal

    jdir = tmp_path / "D"
    env = demo_env(tmp_path)

    def demo(*flags: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--exit", "--port", str(free_port())]
        return subprocess.run(
            [*cmd, "--journal-dir", str(jdir), *flags], env=env, capture_output=True, text=True, timeout=300
        )

    # 1. a demo serving, killed with kill -9 (parent, then its worker) once its worker has journaled
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--port", str(free_port()), "--journal-dir", str(jdir)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "Ctrl-C to stop" in line:
                break
        (pid,) = re.findall(r"^worker pid (\d+) ", "".join(seen), re.M)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):  # it may have ended already (its stdout's reader died)
            os.kill(int(pid), signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)
    assert set(_writers(jdir)) == {(socket.gethostname(), int(pid), 0)}, _writers(jdir)
    # 2. the next demo resets its own journal: no --force needed
    res = demo()
    assert res.returncode == 0, res.stdout + res.stderr
    # 3. a real worker journals its compiles there
    run = subprocess.run(
        [sys.executable, "-c", REAL_WORKER, str(jdir)],
        env={**{k: v for k, v in env.items() if k != "JITWATCH_DIR"}, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    worker_pid = int(run.stdout.split()[-1])
    writers = _writers(jdir)
    (key,) = [k for k in writers if k[1] == worker_pid]
    assert writers[key] >= 2, writers  # its worker_start and its compiles, at least
    lock = (jdir / LOCK_FILE).read_text()
    # 4. the next demo refuses, naming them and --force; nothing deleted
    res = demo()
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line == (
        f"jitwatch demo: {jdir} holds a journal that a process other than jitwatch demo's worker wrote to:"
        f" {writers[key]} events of pid {worker_pid} on host {key[0]} (rank 0); the demo resets its journal at"
        " start; pass --force to reset it, or another --journal-dir"
    ), line
    assert _writers(jdir) == writers and (jdir / LOCK_FILE).read_text() == lock
    # 5. --force resets it (the worker's events are gone: only the new demo worker's)
    res = demo("--force")
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(k[1] != worker_pid for k in _writers(jdir)), _writers(jdir)


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_demo_creates_its_directories_0700(tmp_path: Path, umask: int) -> None:
    """`jitwatch demo` created <JITWATCH_DIR> (the parent of its demo-<port> journal) 0755 while the
    README says the journal directory is owner-only: every directory it creates is 0700 now, under
    any umask. (A busy port stops the demo right after the directories are made.)"""
    import stat

    from typer.testing import CliRunner

    from jitwatch.cli import app

    state = tmp_path / "state" / "jitwatch"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        old = os.umask(umask)
        try:
            res = CliRunner().invoke(
                app,
                ["demo", "--exit", "--port", str(port), "--output-dir", str(tmp_path / "out" / "o")],
                env={"JITWATCH_DIR": str(state)},
            )
        finally:
            os.umask(old)
    assert res.exit_code == 2 and "--port" in res.output, res.output
    for path in (tmp_path / "state", state, state / f"demo-{port}", tmp_path / "out", tmp_path / "out" / "o"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, (path, oct(path.stat().st_mode))


def test_a_journal_dir_with_brackets_is_printed_as_it_is(tmp_path: Path) -> None:
    """The demo's first line, ``sidecar on <url> (journal <dir>)``, went through rich markup: a
    journal directory with ``[/b]`` in its name stopped the demo with rich's MarkupError traceback
    (sidecar started, no worker), one with ``[red]`` printed another path. Now printed literally.
    The worker is given no time (worker_timeout_s): the demo stops right after that line."""
    from rich.console import Console

    jdir = tmp_path / "a [/b] [red]x"
    console = Console(record=True, width=400)
    with pytest.raises(DemoError, match="did not reach"):
        run_demo(
            DemoOptions(port=free_port(), journal_dir=jdir, exit_after=True, worker_timeout_s=0.01), console=console
        )
    assert f"(journal {jdir})" in console.export_text(), console.export_text()


def test_a_journal_dir_whose_name_is_not_utf8_is_printed_escaped(tmp_path: Path) -> None:
    """A journal directory named with a byte that is not UTF-8 (``mkdir $'jw-\\xff'``): the demo's
    first line and its summary's commands are UTF-8 (they held ``\\udcff``: UnicodeEncodeError on a
    UTF-8 terminal), the byte shown as ``\\xff``; the commands quote the path as ``$'...'``.
    The worker is given no time (worker_timeout_s): the demo stops right after the first line."""
    import io

    from rich.console import Console

    from jitwatch.demo.runner import DemoReport, print_summary

    jdir = tmp_path / os.fsdecode(b"jw-\xff")
    out = io.StringIO()
    with pytest.raises(DemoError, match="did not reach"):
        run_demo(
            DemoOptions(port=free_port(), journal_dir=jdir, exit_after=True, worker_timeout_s=0.01),
            console=Console(file=out, width=400),
        )
    first = out.getvalue().encode("utf-8").decode()  # strict
    assert f"(journal {tmp_path}/jw-\\xff)" in first, first
    jit = {
        "ranks": [{"rank": 0, "ready": True, "warmup_compiles": 1, "serving_compiles": 1}],
        "kernels": [],
        "recent_serving_compiles": [
            {"backend": "triton", "kernel": "zero_kv_blocks_kernel", "request_id": 3, "duration_s": 0.06}
        ],
    }
    out = io.StringIO()
    print_summary(DemoReport(journal_dir=jdir, url="http://127.0.0.1:9400", jit=jit), Console(file=out, width=400))
    text = out.getvalue().encode("utf-8").decode()
    assert f"why --journal-dir $'{tmp_path}/jw-\\xff'" in text, text
    assert f"-o $'{tmp_path}/jw-\\xff/manifest.json'" in text, text


def test_a_demo_lock_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    """The lock was opened O_RDWR | O_CREAT and truncated to the pid: a demo.lock symlink planted
    in the journal directory (a shared JITWATCH_DIR such as /tmp) emptied the file it pointed at
    (~/.bashrc). Now opened O_NOFOLLOW: refused in one line, the target untouched."""
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    jdir = tmp_path / "j"
    jdir.mkdir(mode=0o700)
    (jdir / LOCK_FILE).symlink_to(victim)
    with pytest.raises(DemoSetupError, match="symlink"), journal_lock(jdir):
        pass
    assert victim.read_text() == "keep me\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another uid needs root")
def test_demo_refuses_a_journal_directory_of_another_user(tmp_path: Path) -> None:
    """The demo reset (deleted) the journal files and took its lock in a journal directory another
    user owns (their demo-<port> under a shared JITWATCH_DIR), before the worker's writer refused
    the directory. Now refused before anything is touched, as the journal writer refuses it."""
    jdir = tmp_path / "demo-9400"
    jdir.mkdir(mode=0o777)
    (jdir / LOCK_FILE).write_text("")
    (jdir / JOURNAL_FILE).write_text("theirs")
    os.chown(jdir, 65534, 65534)
    with pytest.raises(DemoSetupError, match="owned by uid 65534"):
        run_demo(DemoOptions(port=free_port(), journal_dir=jdir, exit_after=True))
    assert (jdir / JOURNAL_FILE).read_text() == "theirs"


def test_the_first_line_keeps_the_journal_path_whole_in_a_narrow_terminal(tmp_path: Path) -> None:
    """``sidecar on <url> (journal <dir>)`` was wrapped at the terminal's width: at 100 columns the
    default ``~/.local/state/jitwatch/demo-9400`` of a longer home went onto the next line, split
    from ``(journal``. The line is printed unwrapped, as the summary's command lines are."""
    from rich.console import Console

    jdir = tmp_path / ("long-directory-name-" * 4) / "demo-9400"
    console = Console(record=True, width=60)
    with pytest.raises(DemoError, match="did not reach"):
        run_demo(
            DemoOptions(port=free_port(), journal_dir=jdir, exit_after=True, worker_timeout_s=0.01), console=console
        )
    first = console.export_text().splitlines()[0]
    assert first.startswith("jitwatch demo: sidecar on http://127.0.0.1:") and first.endswith(f"(journal {jdir})"), (
        console.export_text()
    )


def test_demo_on_all_interfaces_warns_as_serve_does(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``jitwatch demo --host 0.0.0.0`` served kernel names and keys on every interface, without a
    token, and said nothing: ``jitwatch serve --host 0.0.0.0`` logs a warning (README: "a warning
    is logged for all-interfaces binds"). The demo's sidecar logs the same one."""
    import logging

    from rich.console import Console

    opts = DemoOptions(
        host="0.0.0.0", port=free_port(), journal_dir=tmp_path / "j", exit_after=True, worker_timeout_s=0.01
    )
    with caplog.at_level(logging.WARNING, logger="jitwatch.sidecar"), pytest.raises(DemoError, match="did not reach"):
        run_demo(opts, console=Console(record=True, width=200))
    assert "jitwatch sidecar bound to all interfaces (0.0.0.0) WITHOUT a token (JITWATCH_TOKEN)" in caplog.text, (
        caplog.text
    )


@pytest.mark.slow
def test_demo_says_so_when_its_worker_dies_while_serving(tmp_path: Path) -> None:
    """The worker killed (``kill -9``) while the demo served: the demo stopped its sidecar and
    exited 0 without a word, as if asked to stop. Now one line says what happened, exit 1."""
    import re
    import signal

    port = free_port()
    cmd = [sys.executable, "-m", "jitwatch.cli", "demo", "--port", str(port), "--journal-dir", str(tmp_path / "j")]
    proc = subprocess.Popen(cmd, env=demo_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "Ctrl-C to stop" in line:
                break
        (pid,) = re.findall(r"^worker pid (\d+) ", "".join(seen), re.M)
        os.kill(int(pid), signal.SIGKILL)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (rest, err)
    assert "jitwatch demo: the worker exited while serving (killed by SIGKILL); the sidecar is shut down" in err, err
    assert STOPPED_LINE not in rest and "Traceback" not in rest + err
