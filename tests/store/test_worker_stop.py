"""A worker's clean stop in the journal: :meth:`Journal.mark_stopped` and the journal writer's
close (real SQLite, real writer thread; the sidecar side is in ``tests/test_sidecar.py``)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.store.writer import CLOSE_GRACE_S, JournalWriter
from jitwatch.views.status import readiness

HOST = "node-a"


def register(j: Journal, pid: int, rank: int = 0, ts: float | None = None) -> float:
    """A worker that registered and completed warmup; returns its start time."""
    t = time.time() - 10 if ts is None else ts
    j.write(
        [
            Event(kind=EventKind.WORKER_START, ts=t, rank=rank, pid=pid, host=HOST, attrs={"heartbeat_s": 0.2}),
            Event(kind=EventKind.WARMUP_COMPLETE, ts=t + 1, rank=rank, pid=pid, host=HOST, phase=Phase.SERVING),
        ]
    )
    return t


def wait_for(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_mark_stopped_keeps_the_state_column_for_older_readers(tmp_path: Path) -> None:
    """The record lives in the row's attrs: ``state`` keeps ``serving`` (a reader that predates
    the record parses the row as before, nothing skipped), this reader sees ``stopped_ts``, the
    compiles in flight are cleared, and ``last_ts`` advances to the stop."""
    with Journal(tmp_path) as j:
        register(j, pid=7)
        assert j.set_inflight(HOST, 7, 0, [{"backend": "triton", "kernel": "k", "start_ts": time.time()}], time.time())
        stop = time.time()
        assert j.mark_stopped(HOST, 7, 0, stop)
        assert not j.mark_stopped(HOST, 8, 0, stop)  # no such worker: nothing written
        (w,) = j.workers()
        assert j.skipped_rows == 0
        assert w.state is Phase.SERVING and w.stopped_ts == stop and w.last_ts == stop
        assert w.attrs["exit"] == "clean" and "inflight" not in w.attrs and w.attrs["heartbeat_s"] == 0.2
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as raw:
        assert raw.execute("SELECT state, count(*) FROM workers").fetchone() == ("serving", 1)
    with Journal(tmp_path, readonly=True) as ro, pytest.raises(PermissionError):
        ro.mark_stopped(HOST, 7, 0, stop)


def test_a_worker_registering_again_replaces_the_record(tmp_path: Path) -> None:
    """The same (host, pid, rank) registering again (a pid reused in a container) is a new
    worker: its row no longer says stopped; a new pid for the rank is its latest worker."""
    with Journal(tmp_path) as j:
        t = register(j, pid=7)
        assert j.mark_stopped(HOST, 7, 0, t + 2)
        assert readiness(j.latest_workers(), now=t + 3).ranks == {"0": "stopped"}
        register(j, pid=7, ts=t + 4)
        (w,) = j.workers()
        assert w.stopped_ts is None
        assert j.mark_stopped(HOST, 7, 0, t + 5)
        register(j, pid=9, ts=t + 6)  # restarted: a new pid, the same rank
        latest = j.latest_workers()
        assert latest[0].pid == 9 and latest[0].stopped_ts is None
        assert readiness(latest, now=t + 7).ready


def test_readiness_names_the_stopped_ranks_and_when(tmp_path: Path) -> None:
    """Stopped ranks are not ready at once, not stale (known gone, not presumed dead), listed in
    ``not_ready_ranks`` with their clean-exit times in UTC; the other reasons still apply."""
    with Journal(tmp_path) as j:
        t = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
        for rank in (0, 1, 2):
            register(j, pid=100 + rank, rank=rank, ts=t)
        assert j.mark_stopped(HOST, 100, 0, t + 5)
        assert j.mark_stopped(HOST, 102, 2, t + 6)
        r = readiness(j.latest_workers(), now=t + 7, stale_after=60)
        assert not r.ready and r.ranks == {"0": "stopped", "1": "serving", "2": "stopped"}
        assert r.not_ready_ranks == [0, 2] and r.stale_ranks == []
        assert r.reason == "ranks 0, 2 stopped (clean exits at 2027-01-15 08:00:05 UTC, 2027-01-15 08:00:06 UTC)"
        r = readiness(j.latest_workers(), now=t + 600, stale_after=60)  # rank 1 silent for 10 min
        assert r.stale_ranks == [1] and r.not_ready_ranks == [0, 1, 2]
        assert r.reason is not None and r.reason.startswith("no heartbeat from rank 1"), r.reason
        assert r.reason.endswith(
            "; ranks 0, 2 stopped (clean exits at 2027-01-15 08:00:05 UTC, 2027-01-15 08:00:06 UTC)"
        )


def test_mark_exited_names_the_exception_and_reads_exited_first(tmp_path: Path) -> None:
    """A recorded exit on an unhandled exception: no ``stopped_ts`` (an older reader sees the row
    turn stale, as after a kill), the type kept and cut to its bound, the compiles in flight
    cleared; the rank is ``exited`` for any reader, and ``/readyz``'s reason lists the exited
    and stale ranks before the stopped ones (the incident first; it listed stopped first)."""
    with Journal(tmp_path) as j:
        t = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
        for rank in (0, 1, 2, 3):
            register(j, pid=100 + rank, rank=rank, ts=t)
        assert j.set_inflight(HOST, 101, 1, [{"backend": "triton", "kernel": "k", "start_ts": t + 3}], t + 3)
        assert j.mark_stopped(HOST, 100, 0, t + 5)
        assert j.mark_exited(HOST, 101, 1, t + 6, "torch.OutOfMemoryError")
        assert j.mark_exited(HOST, 103, 3, t + 6, "E" * 500)
        assert not j.mark_exited(HOST, 999, 1, t + 6, "MemoryError")  # no such worker
        with pytest.raises(ValueError):
            j.mark_exited(HOST, 102, 2, t + 6, " ")
        workers = j.latest_workers()
    w = workers[1]
    assert w.stopped_ts is None and w.state is Phase.SERVING and w.last_ts == t + 6
    assert w.exit_exception == "torch.OutOfMemoryError" and w.attrs["exit"] == "exception"
    assert "inflight" not in w.attrs and w.attrs["exited_ts"] == t + 6
    assert workers[3].exit_exception == "E" * 200
    r = readiness(workers, now=t + 600, stale_after=60)  # rank 2 silent for 10 min
    assert r.ranks == {"0": "stopped", "1": "exited", "2": "serving", "3": "exited"}
    assert r.exited_ranks == [1, 3] and r.stale_ranks == [2] and r.not_ready_ranks == [0, 1, 2, 3]
    assert r.reason == (
        f"the worker processes of ranks 1 (pid 101, torch.OutOfMemoryError), 3 (pid 103, {'E' * 200}) exited on "
        "an unhandled exception; no heartbeat from rank 2 (last seen 599s ago): worker gone?; "
        "rank 0 stopped (clean exit at 2027-01-15 08:00:05 UTC)"
    )


def test_writer_close_records_the_stop_of_its_worker_row_only(tmp_path: Path) -> None:
    """A writer given a worker row records it stopped at close (heartbeat or not); one without
    (a tool writing a journal) records nothing."""
    w = JournalWriter(tmp_path / "a", heartbeat=(HOST, 7, 0), heartbeat_s=0)
    assert w.submit(Event(kind=EventKind.WORKER_START, ts=time.time(), rank=0, pid=7, host=HOST))
    before = time.time()
    w.close()
    assert w.stop_recorded and w.stop_record_errors == 0
    with Journal(tmp_path / "a", readonly=True) as j:
        (row,) = j.workers()
        assert row.stopped_ts is not None and before <= row.stopped_ts <= time.time()
        assert j.count_events() == 1  # no event row for the stop

    w = JournalWriter(tmp_path / "b")
    assert w.submit(Event(kind=EventKind.WORKER_START, ts=time.time(), rank=0, pid=7, host=HOST))
    w.close()
    assert not w.stop_recorded
    with Journal(tmp_path / "b", readonly=True) as j:
        assert j.workers()[0].stopped_ts is None


def test_a_stop_that_cannot_be_written_is_counted_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A journal that cannot be opened (a file where its directory should be): close returns,
    the failure is counted and logged once, nothing raised."""
    caplog.set_level(logging.WARNING, logger="jitwatch")
    bad = tmp_path / "file"
    bad.write_text("not a directory")
    w = JournalWriter(bad, heartbeat=(HOST, 7, 0), heartbeat_s=0)
    w.close()
    assert w.stop_record_errors == 1 and not w.stop_recorded
    assert sum("stop was not journaled" in r.getMessage() for r in caplog.records) == 1


def test_close_is_bounded_while_another_process_holds_the_journal(tmp_path: Path) -> None:
    """Another connection holds the write lock: close gives up on the record within its bound
    (the daemon thread waits on), and the record lands once the lock is released."""
    w = JournalWriter(tmp_path, heartbeat=(HOST, 7, 0), heartbeat_s=0)
    assert w.submit(Event(kind=EventKind.WORKER_START, ts=time.time(), rank=0, pid=7, host=HOST))
    assert w.flush(10)
    holder = sqlite3.connect(tmp_path / JOURNAL_FILE, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        t0 = time.monotonic()
        w.close(timeout=0.5)
        assert time.monotonic() - t0 < 0.5 + CLOSE_GRACE_S + 0.5
        assert not w.stop_recorded
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert wait_for(lambda: w.stop_recorded, 15)


EXITING_WORKER = """
import sys
from dataclasses import replace
from pathlib import Path
from jitwatch.config import Settings
from jitwatch.worker import create_monitor
settings = replace(Settings.from_env(), journal_dir=Path(sys.argv[1]), heartbeat_seconds=0.2)
mon = create_monitor(settings, mode="warn", tracer_provider=False)
mon.install()
with mon.warmup():
    pass
mon.flush()
print("serving", flush=True)
sys.stdin.readline()
print("exiting", flush=True)
"""


def test_process_exit_is_bounded_when_the_record_cannot_be_written(tmp_path: Path) -> None:
    """A real worker exits normally while another process holds the journal's write lock: the
    exit handler gives up within its bound (5 s + 1 s grace), exit status 0 and no traceback;
    the row stays ``serving``, to turn stale as after a ``kill -9``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"OTEL_SDK_DISABLED": "true", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    worker = subprocess.Popen(
        [sys.executable, "-c", EXITING_WORKER, str(tmp_path)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        assert worker.stdout.readline().strip() == "serving"
        holder = sqlite3.connect(tmp_path / JOURNAL_FILE, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            worker.stdin.write("exit\n")
            worker.stdin.flush()
            assert worker.stdout.readline().strip() == "exiting"
            t0 = time.monotonic()
            code = worker.wait(30)
            took = time.monotonic() - t0
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        stderr = worker.stderr.read() if worker.stderr is not None else ""
        assert code == 0 and "Traceback" not in stderr, stderr
        assert took < 5.0 + CLOSE_GRACE_S + 2.0, took
        with Journal(tmp_path, readonly=True) as j:
            (row,) = j.workers()
            assert row.stopped_ts is None and row.state is Phase.SERVING
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)


ENDING_WORKER = """
import sys
from dataclasses import replace
from pathlib import Path
from jitwatch.config import Settings
from jitwatch.worker import create_monitor
settings = replace(Settings.from_env(), journal_dir=Path(sys.argv[1]), heartbeat_seconds=0.2)
mon = create_monitor(settings, mode="warn", tracer_provider=False)
mon.install()
with mon.warmup():
    pass
mon.flush()
"""

ENDINGS = {
    # (the worker's last statement, expected exit status, recorded exception type or None: a clean stop)
    "memory error": ("raise MemoryError('user prompt: secret-token-123')", 1, "MemoryError"),
    "keyboard interrupt": ("raise KeyboardInterrupt", -2, "KeyboardInterrupt"),
    "custom exception": (
        "class ShardLoadError(RuntimeError):\n    pass\nraise ShardLoadError('secret-token-123')",
        1,
        "__main__.ShardLoadError",
    ),
    "exception type with a module that is not a str": (
        # a class attribute __module__ of any object: comparing or printing it raises; the exit
        # handler named the type with it and, raising, skipped closing the journal (no record at all)
        "class Weird:\n    __hash__ = object.__hash__\n"
        "    def __eq__(self, other):\n        raise RuntimeError('no compare')\n"
        "    def __str__(self):\n        raise RuntimeError('no str')\n"
        "class OddError(Exception):\n    __module__ = Weird()\nraise OddError('secret-token-123')",
        1,
        "OddError",
    ),
    "falsy exception": (
        # an exception class that is also an empty container: a truth test read it as no exception
        "class EmptyBatchError(Exception):\n    def __len__(self):\n        return 0\n"
        "raise EmptyBatchError('secret-token-123')",
        1,
        "__main__.EmptyBatchError",
    ),
    "exception whose truth test raises": (
        "class OddTruthError(Exception):\n    def __bool__(self):\n        raise RuntimeError('no truth')\n"
        "raise OddTruthError('secret-token-123')",
        1,
        "__main__.OddTruthError",
    ),
    "sys.exit(0)": ("sys.exit(0)", 0, None),
    "sys.exit(3)": ("sys.exit(3)", 3, None),
    "normal end": ("pass", 0, None),
    "exception in another thread": (
        "import threading\nt = threading.Thread(target=lambda: 1 / 0)\nt.start()\nt.join()",
        0,
        None,
    ),
    "exception handled": ("try:\n    raise MemoryError\nexcept MemoryError:\n    pass", 0, None),
    # the host caught the exception and ends on it through a normal exit (vLLM's worker process)
    "caught exception noted, normal end": (
        "try:\n    raise MemoryError('secret-token-123')\nexcept MemoryError as e:\n    mon.note_exit_exception(e)",
        0,
        "MemoryError",
    ),
    "caught exception noted, sys.exit(0)": (
        "try:\n    raise ValueError('secret-token-123')\nexcept ValueError as e:\n    mon.note_exit_exception(e)\n"
        "sys.exit(0)",
        0,
        "ValueError",
    ),
    "caught exception noted, then forgotten": (
        "try:\n    raise MemoryError\nexcept MemoryError as e:\n    mon.note_exit_exception(e)\n"
        "mon.note_exit_exception(None)",
        0,
        None,
    ),
    "SystemExit noted": ("mon.note_exit_exception(SystemExit(1))", 0, None),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_real_worker_records_how_it_ended(tmp_path: Path, ending: str) -> None:
    """A real worker process ends each way: an unhandled exception in the main thread (Python runs
    the exit handlers after printing it) records the exit as not clean, naming the exception's
    type and never its message, and the rank reads ``exited`` first in ``/readyz``'s reason; a
    normal end, ``sys.exit`` with any code (Python drops the code before the handlers run) and an
    exception that ends another thread record a clean stop."""
    last, status, exception = ENDINGS[ending]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"OTEL_SDK_DISABLED": "true", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    (tmp_path / "journal").mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", ENDING_WORKER + last, str(tmp_path / "journal")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == status, proc.stderr
    with Journal(tmp_path / "journal", readonly=True) as j:
        (row,) = j.workers()
    state = readiness({0: row})
    if exception is None:
        assert row.stopped_ts is not None and row.exit_exception is None, row.attrs
        assert row.attrs["exit"] == "clean"
        assert state.ranks == {"0": "stopped"}
        assert state.exited_ranks == []
    else:
        assert row.stopped_ts is None and row.exit_exception == exception, row.attrs
        assert row.attrs["exit"] == "exception" and "secret-token-123" not in json.dumps(row.attrs)
        assert state.ranks == {"0": "exited"}
        assert state.exited_ranks == [0] and state.not_ready_ranks == [0] and state.stale_ranks == []
        assert (
            state.reason
            == f"the worker process of rank 0 (pid {row.pid}, {exception}) exited on an unhandled exception"
        )


def test_a_traceback_printed_before_install_is_not_the_workers_exit(tmp_path: Path) -> None:
    """``sys.last_value`` already set when the monitor is installed (an interactive session printed
    a traceback earlier) is not this worker's exit: a normal end after it records a clean stop."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"OTEL_SDK_DISABLED": "true", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    (tmp_path / "journal").mkdir()
    earlier = "import sys\nsys.last_type, sys.last_value = ValueError, ValueError('earlier')\n"
    proc = subprocess.run(
        [sys.executable, "-c", earlier + ENDING_WORKER, str(tmp_path / "journal")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    with Journal(tmp_path / "journal", readonly=True) as j:
        (row,) = j.workers()
    assert row.stopped_ts is not None and row.exit_exception is None, row.attrs


def test_writer_close_records_an_exit_on_an_exception_instead_of_a_stop(tmp_path: Path) -> None:
    """``exit_exception`` set before close (the monitor's exit handler): the last write records the
    exit as not clean, with the type, and no ``stopped_ts``."""
    w = JournalWriter(tmp_path, heartbeat=(HOST, 7, 0), heartbeat_s=0)
    assert w.submit(Event(kind=EventKind.WORKER_START, ts=time.time(), rank=0, pid=7, host=HOST))
    w.exit_exception = "MemoryError"
    w.close()
    assert w.stop_recorded and w.stop_record_errors == 0
    with Journal(tmp_path, readonly=True) as j:
        (row,) = j.workers()
    assert row.exit_exception == "MemoryError" and row.stopped_ts is None and row.attrs["exit"] == "exception"
    assert readiness({0: row}).ranks == {"0": "exited"}


SPAWNED_WORKER = """
import multiprocessing, sys
def target(journal_dir, worker, last):
    exec(worker.replace("Path(sys.argv[1])", repr(journal_dir).join(("Path(", ")"))) + last, {"__name__": "worker"})
if __name__ == "__main__":
    args = (sys.argv[1], sys.argv[2], sys.argv[3])
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    process.join(60)
    sys.exit(process.exitcode)
"""


@pytest.mark.parametrize(
    ("last", "status", "exception"),
    [("raise MemoryError('secret-token-123')", 1, "MemoryError"), ("pass", 0, None), ("sys.exit(3)", 3, None)],
)
def test_a_spawned_multiprocessing_worker_records_how_its_target_ended(
    tmp_path: Path, last: str, status: int, exception: str | None
) -> None:
    """A worker started by ``multiprocessing`` (spawn, as vLLM's workers may be): an exception out
    of its target is caught and printed by ``multiprocessing``, which exits with ``sys.exit(1)``
    (``sys.last_value`` never set), so it was recorded as a clean stop; it records the exit on the
    exception. A normal end and ``sys.exit(3)`` in the target stay clean stops."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"OTEL_SDK_DISABLED": "true", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    (tmp_path / "journal").mkdir()
    script = tmp_path / "parent.py"  # spawn re-imports the main module: it needs a file
    script.write_text(SPAWNED_WORKER)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "journal"), ENDING_WORKER, last],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == status, proc.stderr
    with Journal(tmp_path / "journal", readonly=True) as j:
        (row,) = j.workers()
    if exception is None:
        assert row.stopped_ts is not None and row.exit_exception is None, row.attrs
    else:
        assert row.stopped_ts is None and row.exit_exception == exception, row.attrs
        assert "secret-token-123" not in json.dumps(row.attrs)
        assert readiness({0: row}).ranks == {"0": "exited"}


TORCH_SPAWNED_WORKER = """
import sys
import torch.multiprocessing
def target(index, journal_dir, worker, last):
    exec(worker.replace("Path(sys.argv[1])", repr(journal_dir).join(("Path(", ")"))) + last, {"__name__": "worker"})
if __name__ == "__main__":
    try:
        torch.multiprocessing.spawn(target, args=(sys.argv[1], sys.argv[2], sys.argv[3]), nprocs=1)
    except torch.multiprocessing.ProcessRaisedException:
        sys.exit(1)
"""


@pytest.mark.parametrize(
    ("last", "status", "exception"),
    [("raise MemoryError('secret-token-123')", 1, "MemoryError"), ("pass", 0, None)],
)
def test_a_torch_spawned_worker_records_how_its_function_ended(
    tmp_path: Path, last: str, status: int, exception: str | None
) -> None:
    """``torch.multiprocessing.spawn`` wraps the worker function: an exception out of it is caught,
    its traceback written for the parent, and the process exits with ``sys.exit(1)`` raised while
    handling it. That reads as an exit on the exception (it recorded a clean stop); a normal end
    stays a clean stop."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITWATCH_")}
    env.update({"OTEL_SDK_DISABLED": "true", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    (tmp_path / "journal").mkdir()
    script = tmp_path / "parent.py"
    script.write_text(TORCH_SPAWNED_WORKER)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "journal"), ENDING_WORKER, last],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == status, proc.stderr
    with Journal(tmp_path / "journal", readonly=True) as j:
        (row,) = j.workers()
    if exception is None:
        assert row.stopped_ts is not None and row.exit_exception is None, row.attrs
    else:
        assert row.stopped_ts is None and row.exit_exception == exception, row.attrs
        assert "secret-token-123" not in json.dumps(row.attrs)
