"""``jitwatch.core.process``: a worker's process seen exited by a reader on the same machine, with
real processes and ``/proc`` (Linux)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jitwatch.core import process
from jitwatch.core.process import process_exited, process_marker
from jitwatch.store.journal import Journal
from jitwatch.views.status import exited_ranks, readiness

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux /proc only")

CHILD = (
    "import json, sys, time; from jitwatch.core.process import process_marker; "
    "print(json.dumps(process_marker()), flush=True); time.sleep(60)"
)


def _child() -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def test_a_running_process_has_not_exited_a_killed_one_has() -> None:
    proc, marker = _child()
    try:
        assert set(marker) - {"time_namespace"} == {"boot_id", "pid_namespace", "pid", "start_ticks", "uid"}
        assert process_exited(proc.pid, marker) is False
        proc.kill()
        deadline = time.monotonic() + 10
        while not process_exited(proc.pid, marker):  # a zombie until reaped: exited already
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.wait(10)
        assert process_exited(proc.pid, marker) is True  # reaped: no such process
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_reused_pid_is_another_process() -> None:
    """The pid runs, but not the process that recorded the marker (another start time)."""
    marker = process_marker()
    assert process_exited(os.getpid(), marker) is False
    assert process_exited(os.getpid(), {**marker, "start_ticks": marker["start_ticks"] + 1}) is True


@pytest.mark.parametrize(
    "change",
    [
        {"boot_id": "another-machine"},  # another machine (or a reboot): cannot tell
        {"pid_namespace": "pid:[1]"},  # another PID namespace (a container): cannot tell
        {"start_ticks": "12"},
        {"start_ticks": True},
        {"boot_id": None},
        {"pid": None},  # no pid (a marker from before it was recorded): cannot tell
        {"pid": 1},  # recorded by another process than the row's pid
        {"time_namespace": "time:[1]"},  # another time namespace: start ticks shown shifted
    ],
)
def test_what_cannot_be_told_is_not_exited(change: dict[str, Any]) -> None:
    proc, marker = _child()
    proc.kill()
    proc.wait(10)
    assert process_exited(proc.pid, marker) is True
    assert process_exited(proc.pid, {**marker, **change}) is False


@pytest.mark.parametrize("marker", [None, {}, [], "x", {"start_ticks": 1}])
@pytest.mark.parametrize("pid", [0, -1, True, "1", None, 2**80])
def test_odd_input_is_not_exited_and_never_raises(pid: Any, marker: Any) -> None:
    assert process_exited(pid, marker) is False


def test_proc_unreadable_means_cannot_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    proc, marker = _child()
    proc.kill()
    proc.wait(10)
    monkeypatch.setattr(process, "_read", lambda path: None)
    assert process_exited(proc.pid, marker) is False
    assert process.process_marker() == {}


def test_a_command_name_with_parentheses_and_spaces_parses() -> None:
    """``comm`` may hold ``) (`` and spaces: the fields are read after its last ``)``."""
    script = (
        "import ctypes, time; ctypes.CDLL(None).prctl(15, b'x) (y z', 0, 0, 0); "  # PR_SET_NAME: the comm field
        "print('up', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
        with open(f"/proc/{proc.pid}/stat") as f:
            text = f.read()
        assert "(x) (y z)" in text, text
        state_start = process._stat(proc.pid)
        assert state_start is not None and state_start[0] in "RSD"
        assert int(text.rpartition(")")[2].split()[19]) == state_start[1]
    finally:
        proc.kill()
        proc.wait(10)


def test_another_users_process_cannot_be_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader running as another user (not root) may not see the worker's ``/proc`` entry at all
    (``hidepid``): a missing entry then proves nothing."""
    proc, marker = _child()
    proc.kill()
    proc.wait(10)
    assert process_exited(proc.pid, marker) is True
    monkeypatch.setattr(process.os, "geteuid", lambda: marker["uid"] + 1 if marker["uid"] else 1)
    assert process_exited(proc.pid, marker) is False


HANDED_IDENTITY_WORKER = """
import sys
from dataclasses import replace
from pathlib import Path
import jitwatch
from jitwatch.config import Settings
from jitwatch.worker import create_monitor
identity = jitwatch.WorkerIdentity(rank=0, pid=int(sys.argv[2]))  # the launcher's pid, as a pickled identity holds
settings = replace(Settings.from_env(), journal_dir=Path(sys.argv[1]))
mon = create_monitor(settings, mode="warn", identity=identity, tracer_provider=False).install()
with mon.warmup():
    pass
mon.flush()
print("serving", flush=True)
sys.stdin.readline()
"""


def test_a_worker_whose_identity_names_another_pid_is_not_read_as_exited(tmp_path: Path) -> None:
    """A :class:`~jitwatch.WorkerIdentity` built by a launcher and handed to its worker process
    (``multiprocessing``'s spawn pickles it, ``fork`` copies it) holds the launcher's pid: the
    worker row names the launcher, a live process of another start time than the worker's marker.
    That is no reused pid: the serving worker stays ready (before: 503 'the worker process of rank 0
    (pid <launcher>) exited', with both processes alive)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"OTEL_SDK_DISABLED": "true", "PYTHONPATH": os.pathsep.join(sys.path)})
    worker = subprocess.Popen(
        [sys.executable, "-c", HANDED_IDENTITY_WORKER, str(tmp_path), str(os.getpid())],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "serving"
        with Journal(tmp_path, readonly=True) as journal:
            workers = journal.latest_workers()
        assert workers[0].pid == os.getpid()
        assert exited_ranks(workers) == {}, readiness(workers)
        assert readiness(workers).ready, readiness(workers)
        assert workers[0].attrs["process"]["pid"] == worker.pid  # the marker names its own process
    finally:
        worker.kill()
        worker.wait(10)


NAMESPACE_READER = """
import importlib.util, json, subprocess, sys
LOAD = (
    "import importlib.util as u, sys; s = u.spec_from_file_location('p', sys.argv[1]); "
    "p = u.module_from_spec(s); s.loader.exec_module(p)"
)
exec(LOAD)
RECORD = (
    "; import json, os, time; print(json.dumps({'marker': p.process_marker(), 'whole': {"
    "'boot_id': p._boot_id(), 'pid_namespace': os.readlink('/proc/self/ns/pid'), 'pid': os.getpid(), "
    "'start_ticks': p._stat('self')[1], 'uid': os.geteuid()}}), flush=True); time.sleep(60)"
)
worker = subprocess.Popen([sys.executable, "-c", LOAD + RECORD, sys.argv[1]], stdout=subprocess.PIPE, text=True)
seen = json.loads(worker.stdout.readline())
# the marker a worker of f7e04fb recorded there, whole: the reader itself must not trust this /proc
print(json.dumps({"marker": seen["marker"], "exited": p.process_exited(worker.pid, seen["whole"])}))
worker.kill()
worker.wait()
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_a_proc_of_another_pid_namespace_cannot_tell() -> None:
    """A reader and worker in a PID namespace whose ``/proc`` is another namespace's (``unshare -p``
    without ``--mount-proc``, a container given the host's ``/proc``): ``/proc/<pid>`` is another
    process, or none. Cannot tell (before: a live worker read as exited)."""
    out = subprocess.run(
        ["unshare", "-p", "-f", sys.executable, "-c", NAMESPACE_READER, process.__file__],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["marker"] == {}, result  # a worker there records no marker
    assert result["exited"] is False, result  # nor does the reader read one as exited


HIDDEN_READER = """
import importlib.util, json, subprocess, sys
LOAD = "import sys, types; p = types.ModuleType('p'); exec(sys.argv[1], p.__dict__)"  # the module's source
exec(LOAD)
# PR_SET_DUMPABLE (4) to 0 after recording the marker
NONDUMPABLE = "; import ctypes, json, time; m = p.process_marker(); ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)"
worker = subprocess.Popen(
    [sys.executable, "-c", LOAD + NONDUMPABLE + "; print(json.dumps(m), flush=True); time.sleep(60)", sys.argv[1]],
    stdout=subprocess.PIPE,
    text=True,
)
marker = json.loads(worker.stdout.readline())
alive = p.process_exited(worker.pid, marker)
worker.kill()
worker.wait()
killed = p.process_exited(worker.pid, marker)
print(json.dumps({"marker": marker, "alive_read_exited": alive, "killed_read_exited": killed}))
"""


HIDDEN_SCRIPT = (
    'mount -t proc -o hidepid=2 proc /proc && exec setpriv --reuid 65534 --regid 65534 --clear-groups "$0" -c "$1" "$2"'
)
"""In a mount namespace of its own: ``/proc`` mounted ``hidepid=2``, then ``$0 -c $1 $2`` as ``nobody``."""


def _python_for_nobody() -> str | None:
    """An interpreter the user ``nobody`` (65534) can run there (the venv's may not be)."""
    for python in ("/usr/bin/python3", sys.executable):
        probe = ["unshare", "-m", "sh", "-c", HIDDEN_SCRIPT, python, "pass", ""]
        if os.path.exists(python) and subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
            return python
    return None


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None,
    reason="needs root, unshare(1) and setpriv(1)",
)
def test_a_process_hidden_by_hidepid_is_not_exited() -> None:
    """``/proc`` mounted ``hidepid=2`` (or systemd's ``ProtectProc=invisible``) hides a process its
    reader may not ptrace-read, even one of the reader's own user: a worker that is not dumpable
    (``prctl(PR_SET_DUMPABLE, 0)``, or after a credential change: setuid, a binary with file
    capabilities). Its missing ``/proc`` entry proves nothing; ``kill(pid, 0)`` tells a hidden
    process (``EPERM`` or success) from none (``ESRCH``). Before: the live worker read as exited."""
    python = _python_for_nobody()
    if python is None:
        pytest.skip("no interpreter the user nobody can run")
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", HIDDEN_SCRIPT, python, HIDDEN_READER, Path(process.__file__).read_text()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["marker"]["uid"] == 65534, result  # the reader's own user: the user check lets it through
    assert result["alive_read_exited"] is False, result
    assert result["killed_read_exited"] is True, result  # a killed one still reads as exited


LEADER_EXITS = (
    "import ctypes, json, threading, time; from jitwatch.core.process import process_marker; "
    "print(json.dumps(process_marker()), flush=True); threading.Thread(target=time.sleep, args=(60,)).start(); "
    "ctypes.CDLL(None).pthread_exit(None)"  # the main thread ends; the process runs on in its other thread
)


def test_a_process_whose_main_thread_ended_is_not_exited() -> None:
    """A process whose main thread ended (``pthread_exit``: a host that embeds Python and serves from
    other threads) shows state ``Z`` in ``/proc/<pid>/stat`` while its other threads run; only a
    zombie with no thread left (``Threads: 1``, the leader) has exited. Before: read as exited."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", LEADER_EXITS], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        marker = json.loads(proc.stdout.readline())
        deadline = time.monotonic() + 10
        while (stat := process._stat(proc.pid)) is None or stat[0] != "Z":  # the leader is a zombie now
            assert time.monotonic() < deadline, stat
            time.sleep(0.05)
        assert proc.poll() is None
        assert process_exited(proc.pid, marker) is False
        proc.kill()
        proc.wait(10)
        assert process_exited(proc.pid, marker) is True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or not os.path.exists("/proc/self/ns/time"),
    reason="needs root, unshare(1) and time namespaces",
)
def test_a_worker_in_another_time_namespace_is_not_exited() -> None:
    """``/proc/<pid>/stat``'s start time is shown shifted by the reader's time namespace's boot-time
    offset (``unshare --time --boottime``; CRIU restores into one): a worker there records other
    start ticks than a reader outside sees for the same live process. Cannot tell (before: read as
    a reused pid, exited)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        ["unshare", "--time", "--boottime", "1000", sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        marker = json.loads(proc.stdout.readline())
        assert marker["pid"] == proc.pid  # unshare execs the interpreter in its own process
        assert process_exited(proc.pid, marker) is False
    finally:
        proc.kill()
        proc.wait(10)


EXITING_CHILD = (
    "import json, os, sys; from jitwatch.core.process import process_marker; "
    "print(json.dumps(process_marker()), flush=True); sys.stdin.readline(); os._exit(1)"
)


def _serving_fleet(directory: Path, children: dict[int, tuple[subprocess.Popen[str], dict[str, Any]]]) -> None:
    """A journal where each rank's worker is the given real child process (its own marker), serving."""
    from jitwatch.core.events import EventKind, Phase
    from jitwatch.testing import make_event

    t0 = time.time()
    events = []
    for rank, (proc, marker) in children.items():
        attrs = {"mode": "warn", "heartbeat_s": 10.0, "process": marker}
        events.append(make_event(EventKind.WORKER_START, t0, rank=rank, pid=proc.pid, attrs=attrs))
        events.append(
            make_event(
                EventKind.WARMUP_COMPLETE, t0 + 0.1, rank=rank, pid=proc.pid, phase=Phase.SERVING, duration_s=0.1
            )
        )
    with Journal(directory) as journal:
        journal.write(events)


def test_exited_ranks_are_known_gone_not_stale_and_the_reason_reads_right(tmp_path: Path) -> None:
    """Workers whose processes were SIGKILLed, or ended with ``os._exit(1)`` (no exit handler, no
    stop record): their ranks are ``exited`` (not ``serving``), listed in ``exited_ranks`` and
    ``not_ready_ranks`` but not in ``stale_ranks`` (known gone, not presumed dead), and the reason
    reads right for one rank and for several, without guessing ``killed?`` for a plain exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children: dict[int, tuple[subprocess.Popen[str], dict[str, Any]]] = {}
    try:
        for rank in (0, 1, 3):
            code = EXITING_CHILD if rank == 3 else CHILD
            proc = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
            assert proc.stdout is not None
            children[rank] = (proc, json.loads(proc.stdout.readline()))
        _serving_fleet(tmp_path, children)
        with Journal(tmp_path, readonly=True) as journal:
            workers = journal.latest_workers()
        assert readiness(workers).ready, readiness(workers)

        first, _ = children[0]
        first.kill()
        first.wait(10)
        one = readiness(workers, stale_after=60)
        assert one.ranks == {"0": "exited", "1": "serving", "3": "serving"}, one
        assert one.exited_ranks == [0] and one.stale_ranks == [] and one.not_ready_ranks == [0], one
        assert one.reason == (
            f"the worker process of rank 0 (pid {first.pid}) exited without recording a stop (killed or crashed)"
        )

        plain, _ = children[3]
        assert plain.stdin is not None
        plain.stdin.write("exit\n")
        plain.stdin.flush()
        assert plain.wait(10) == 1  # os._exit(1): no exit handler ran, no signal either
        several = readiness(workers, stale_after=60)
        assert several.ranks == {"0": "exited", "1": "serving", "3": "exited"}, several
        assert several.exited_ranks == [0, 3] and several.stale_ranks == [] and several.not_ready_ranks == [0, 3]
        assert several.reason == (
            f"the worker processes of ranks 0 (pid {first.pid}), 3 (pid {plain.pid}) exited without recording "
            "a stop (killed or crashed)"
        )
        assert exited_ranks(workers) == {0: first.pid, 3: plain.pid}

        # long past the heartbeat window: the exited ranks stay exited; the live one turns stale
        late = readiness(workers, now=time.time() + 600, stale_after=60)
        assert late.exited_ranks == [0, 3] and late.stale_ranks == [1] and late.not_ready_ranks == [0, 1, 3], late
        assert late.ranks == {"0": "exited", "1": "serving", "3": "exited"}
        assert late.reason is not None and late.reason.endswith(": worker gone?"), late.reason
    finally:
        for proc, _ in children.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_a_watched_process_is_asked_through_its_pidfd_without_reading_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a running process has been identified, later passes poll its pidfd: no ``/proc`` read at
    all, and its SIGKILL is still seen (as it is where no pidfd can be opened: ``/proc`` each pass)."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open")
    proc, marker = _child()
    reads: list[str] = []
    real_read = process._read
    try:
        assert process_exited(proc.pid, marker) is False  # identified through /proc, then watched
        assert (proc.pid, marker["start_ticks"]) in process._watched
        monkeypatch.setattr(process, "_read", lambda path: reads.append(path) or real_read(path))
        assert process_exited(proc.pid, marker) is False
        proc.kill()
        proc.wait(10)
        assert process_exited(proc.pid, marker) is True
        assert reads == [], reads
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    capped, capped_marker = _child()  # past the cap (WATCH_MAX descriptors): /proc at each pass
    monkeypatch.setattr(process, "WATCH_MAX", len(process._watched))
    try:
        assert process_exited(capped.pid, capped_marker) is False
        assert (capped.pid, capped_marker["start_ticks"]) not in process._watched
        capped.kill()
        capped.wait(10)
        assert process_exited(capped.pid, capped_marker) is True
    finally:
        if capped.poll() is None:
            capped.kill()
            capped.wait(10)
    monkeypatch.undo()

    other, other_marker = _child()  # no pidfd to be had: /proc at each pass, the same answers
    monkeypatch.delattr(process.os, "pidfd_open")
    try:
        assert process_exited(other.pid, other_marker) is False
        assert (other.pid, other_marker["start_ticks"]) not in process._watched
        other.kill()
        other.wait(10)
        assert process_exited(other.pid, other_marker) is True
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(10)
