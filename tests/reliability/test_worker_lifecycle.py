"""Worker lifecycle (issue 14): fork safety and install → uninstall → install, with real Triton
compiles (compile-only driver, CPU), a real ``os.fork`` and a real journal."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

KERNEL = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
    """
)

FORK = textwrap.dedent(
    """
    import atexit, json, os, sys, time
    sys.path.insert(0, sys.argv[2])
    os.environ["JITWATCH_DIR"] = sys.argv[1]
    import torch
    import jitwatch
    from jitwatch.core.events import EventKind
    from jitwatch.testing import compile_only_driver, fresh_triton_cache, read_events
    import kern_lifecycle as k

    out = {}
    with fresh_triton_cache(), compile_only_driver():
        parent = jitwatch.install(tracer_provider=False)
        k.add_one.warmup(torch.float32, 16, BLOCK=16, grid=(1,))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child 1: installs its own monitor
            os.close(r)
            mine = jitwatch.install(tracer_provider=False)
            k.add_one.warmup(torch.float32, 16, BLOCK=32, grid=(1,))
            flushed = mine.flush(10)
            t = time.monotonic()
            atexit._run_exitfuncs()  # what exit runs: must not wait on the parent's writer
            exit_s = time.monotonic() - t
            os.write(w, json.dumps({"same": mine is parent, "flushed": flushed, "exit_s": exit_s}).encode())
            os.close(w)
            os._exit(0)
        os.close(w)
        child = json.loads(os.read(r, 4096))
        os.waitpid(pid, 0)
        out["installing_child"] = child

        pid = os.fork()
        if pid == 0:  # child 2: never installs; a compile must not hang, its exit must be quick
            k.add_one.warmup(torch.float32, 16, BLOCK=64, grid=(1,))
            t = time.monotonic()
            atexit._run_exitfuncs()
            print(json.dumps({"exit_s": time.monotonic() - t}), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        k.add_one.warmup(torch.float32, 16, BLOCK=128, grid=(1,))  # the parent keeps writing
        assert parent.flush(10)
        compiles = read_events(sys.argv[1], EventKind.COMPILE)
        out["compiles"] = sorted((e.pid == os.getpid(), e.attrs.get("constexprs", {}).get("BLOCK")) for e in compiles)
        out["child_pid_in_journal"] = sorted({e.pid for e in compiles} - {os.getpid()}) != []
        jitwatch.uninstall()
    print("RESULT " + json.dumps(out), flush=True)
    """
)


def _kernel(tmp_path: Path) -> Path:
    mod = tmp_path / "mod"
    mod.mkdir()
    (mod / "kern_lifecycle.py").write_text(KERNEL)
    return mod


def test_forked_child_gets_its_own_monitor_and_exits_promptly(tmp_path: Path) -> None:
    """Before: the child's install() returned the parent's monitor, whose writer thread does not
    exist in the child: its compiles were lost uncounted and its exit waited 5 s (atexit flush).
    Now the child starts with no monitor, install() gives it its own monitor and writer, its
    compile lands in the journal with its pid, and it exits at once; a child that never installs
    records nothing and exits at once; the parent keeps writing."""
    proc = subprocess.run(
        [sys.executable, "-c", FORK, str(tmp_path / "j"), str(_kernel(tmp_path))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ") or x.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    plain_child = json.loads(lines[0])
    child = out["installing_child"]
    assert child["same"] is False and child["flushed"] is True
    assert child["exit_s"] < 1.0, child  # was 5 s (atexit flush on the parent's dead writer)
    assert plain_child["exit_s"] < 1.0, plain_child
    assert out["child_pid_in_journal"] is True
    # parent: BLOCK 16 and 128; child 1: BLOCK 32; child 2 (never installed): nothing
    assert out["compiles"] == [[False, 32], [True, 16], [True, 128]], out["compiles"]


REINSTALL = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[2])
    os.environ["JITWATCH_DIR"] = sys.argv[1]
    import jitwatch
    from jitwatch.core.events import EventKind
    from jitwatch.testing import compile_only_driver, fresh_triton_cache, read_events

    first = jitwatch.install(tracer_provider=False)  # Triton not imported yet: the backend waits
    jitwatch.uninstall()
    second = jitwatch.install(tracer_provider=False)
    assert second is not first and second._state == "installed"
    import torch
    import kern_lifecycle as k
    with fresh_triton_cache(), compile_only_driver():
        k.add_one.warmup(torch.float32, 16, BLOCK=16, grid=(1,))
        jitwatch.uninstall()
        third = jitwatch.install(tracer_provider=False)
        k.add_one.warmup(torch.float32, 16, BLOCK=32, grid=(1,))
        assert third.flush(10)
    blocks = sorted(e.attrs["constexprs"]["BLOCK"] for e in read_events(sys.argv[1], EventKind.COMPILE))
    starts = len(read_events(sys.argv[1], EventKind.WORKER_START))
    print("RESULT", blocks, starts, third.backend_statuses["triton"].state)
    """
)


def test_install_uninstall_install_records_again(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", REINSTALL, str(tmp_path / "j"), str(_kernel(tmp_path))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    result = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")]
    assert proc.returncode == 0 and result, proc.stderr[-3000:]
    assert result[0] == "RESULT [16, 32] 3 active", result


SECOND_INSTALL = textwrap.dedent(
    """
    import os, sys
    home, work = sys.argv[1], sys.argv[2]
    os.environ["HOME"] = home
    os.environ["JITWATCH_DIR"] = "~/j"
    os.environ["JITWATCH_BACKENDS"] = "triton"
    os.chdir(work)
    import jitwatch
    from jitwatch.errors import ConfigError

    first = jitwatch.install(tracer_provider=False)
    same = jitwatch.install()  # nothing asked: silent
    # the same directory spelled four ways: silent
    for spelled in (os.path.join(home, "j"), home + "/x/../j/", os.path.relpath(os.path.join(home, "j")), " ~/j "):
        assert jitwatch.install(journal_dir=spelled) is first
    print("QUIET-DONE", flush=True)
    for _ in range(3):  # asked three times: one warning
        asked = jitwatch.install(mode="error", journal_dir=os.path.join(home, "other"))
    print("RESULT", same is first, asked is first, first.mode.value, str(first.settings.journal_dir), flush=True)
    try:
        jitwatch.install(mode="loud")
    except ConfigError as exc:
        print("REFUSED", exc, flush=True)
    jitwatch.uninstall()
    second = jitwatch.install(journal_dir="~/k", tracer_provider=False)  # ~ expanded, as JITWATCH_DIR
    print("SECOND", str(second.settings.journal_dir), os.path.isdir(os.path.join(work, "~")), flush=True)
    jitwatch.uninstall()
    """
)


def test_a_second_install_asking_for_another_mode_says_it_got_the_first(tmp_path: Path) -> None:
    """`install(); install(mode="error")` returned the warn-mode monitor without a word, so the
    caller read error mode; now one warning names what was asked and what runs, once however often
    it is asked. A second call asking nothing, or the same directory spelled otherwise (absolute,
    relative, `..`, `~`), stays silent; a bad mode is refused as on a first call.
    `install(journal_dir="~/k")` expands `~` as JITWATCH_DIR does (it made a directory named `~`)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_INSTALL, str(home), str(work)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "QUIET-DONE" in out, proc.stdout
    assert f"RESULT True True warn {home / 'j'}" in out, proc.stdout
    assert any(line.startswith("REFUSED JITWATCH_MODE='loud'") for line in out), proc.stdout
    assert f"SECOND {home / 'k'} False" in out, proc.stdout
    warned = [line for line in proc.stderr.splitlines() if "returned the monitor already installed" in line]
    assert len(warned) == 1, proc.stderr
    assert "mode='error', it runs in 'warn'" in warned[0], warned
    assert f"journal_dir={str(home / 'other')!r}, it writes to {str(home / 'j')!r}" in warned[0], warned
