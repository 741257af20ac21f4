"""Whether a worker's process still runs, told by a reader on the same machine (Linux ``/proc``).

A worker records its process once, at start (:func:`process_marker`, in its ``worker_start`` attrs
as ``process``): the machine's boot (``/proc/sys/kernel/random/boot_id``), its PID namespace
(``/proc/self/ns/pid``), its pid, its start time (``/proc/self/stat`` field 22, clock ticks since
boot), its effective user id and its time namespace (``/proc/self/ns/time``, where there is one). A
reader that shares that boot, that PID namespace (with a ``/proc`` of it) and that time namespace
sees the same process table and start times, and one running as the same user (or as root) sees
its processes even where ``/proc`` is mounted with ``hidepid`` (a pid missing there is confirmed
with ``kill(pid, 0)``), so ``/proc/<pid>/stat`` answers for the worker: no such process, another
process's start time under the same pid (the pid was reused), or a zombie with no thread left mean
the worker has exited (:func:`process_exited`). Anything else — another machine, container, time
namespace or user, a row naming another pid than its marker, a worker that recorded no marker
(older jitwatch, not Linux), ``/proc`` unreadable — is "cannot tell", and the reader keeps judging
by heartbeats alone.

This is how the sidecar knows at once that a worker killed without running its exit handlers
(``kill -9``, the OOM killer, ``vllm serve``'s default shutdown, which SIGKILLs its worker
processes) is gone, instead of after the heartbeat window.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

_STARTTIME_FIELD = 19
"""Index of ``starttime`` (field 22 of ``/proc/<pid>/stat``) among the fields after the ``comm``
field's closing parenthesis (which start at field 3, ``state``)."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _stat(pid: int | str) -> tuple[str, int] | None:
    """``(state, starttime)`` of ``/proc/<pid>/stat``, or ``None`` when there is no such process or
    the file does not parse. ``comm`` may hold spaces and parentheses: the fields after it start
    after the *last* ``)``."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    _, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) <= _STARTTIME_FIELD:
        return None
    try:
        return fields[0], int(fields[_STARTTIME_FIELD])
    except ValueError:
        return None


@lru_cache(maxsize=1)
def _boot_id() -> str | None:
    text = _read("/proc/sys/kernel/random/boot_id")
    return text.strip() or None if text is not None else None


def _pid_namespace() -> str | None:
    """This process's PID namespace, or ``None`` when ``/proc`` is not that namespace's: a ``/proc``
    of another namespace (``unshare -p`` without ``--mount-proc``, a container given the host's
    ``/proc``) shows other processes under this namespace's pids, so nothing read there is about
    them (its ``/proc/self`` names this process by another pid than ``os.getpid()``)."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return None
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _time_namespace() -> str | None:
    """This process's time namespace (``/proc/self/ns/time``), or ``None`` where the kernel has none
    (before Linux 5.6). ``/proc/<pid>/stat``'s start time is shown shifted by the reader's time
    namespace's boot-time offset, so start ticks compare only within one."""
    try:
        return os.readlink("/proc/self/ns/time")
    except OSError:
        return None


def _no_such_process(pid: int) -> bool:
    """Whether no process has ``pid`` in this PID namespace (``kill(pid, 0)``: ``ESRCH``). A process
    ``/proc`` hides (``hidepid``: another user's, or a non-dumpable one of the reader's own user)
    still exists for ``kill``, which answers ``EPERM`` or success: not gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it exists
        return False
    return False


def _threads_run(pid: int) -> bool:
    """Whether the zombie ``pid`` still has running threads: a process whose main thread ended
    (``pthread_exit``) shows state ``Z`` while its other threads run (``Threads:`` in
    ``/proc/<pid>/status`` above 1); an exited one keeps only its leader."""
    text = _read(f"/proc/{pid}/status")
    for line in (text or "").splitlines():
        if line.startswith("Threads:"):
            try:
                return int(line.split()[1]) > 1
            except (IndexError, ValueError):
                return False
    return False


def process_marker() -> dict[str, Any]:
    """This process, for a reader on the same machine: ``{"boot_id": str, "pid_namespace": str,
    "pid": int, "start_ticks": int, "uid": int, "time_namespace": str}`` (``/proc``; the time
    namespace only where the kernel has them; its own pid, ``os.getpid()``, which
    a worker row need not hold: a :class:`~jitwatch.WorkerIdentity` built in another process keeps
    that process's pid; clock ticks since boot; the effective user id), or ``{}`` when any part
    cannot be read (not Linux, no ``/proc``). Never raises."""
    try:
        boot, ns, stat, uid = _boot_id(), _pid_namespace(), _stat("self"), os.geteuid()
    except Exception:  # noqa: BLE001 - a marker is optional
        return {}
    if boot is None or ns is None or stat is None:
        return {}
    marker: dict[str, Any] = {"boot_id": boot, "pid_namespace": ns, "pid": os.getpid(), "start_ticks": stat[1]}
    marker["uid"] = uid
    time_ns = _time_namespace()
    if time_ns is not None:
        marker["time_namespace"] = time_ns
    return marker


def process_exited(pid: Any, marker: Any) -> bool:
    """Whether the worker process ``pid`` that recorded ``marker`` (:func:`process_marker`) has
    exited: ``True`` only when ``marker`` was recorded by ``pid`` itself (its ``pid``; a marker of
    another process, or one without a pid, cannot tell), names this machine's boot and this
    process's PID namespace, whose ``/proc`` this is, and this process's time namespace (start times
    are shown shifted by its boot-time offset), this process runs as the worker's user or as
    root (``hidepid`` hides other users' processes), and ``/proc/<pid>`` holds no process (which
    ``kill(pid, 0)`` confirms: ``hidepid`` also hides a non-dumpable process of the same user), one
    with another start time (the pid was reused), or a zombie (``Z``) or dead (``X``) one with no
    thread left running (a process whose main thread ended is ``Z`` while the others run). ``False``
    whenever that cannot be told (another machine, PID namespace, time namespace or user, a ``/proc``
    of another PID namespace, no or a malformed marker, ``/proc`` unreadable). A few small ``/proc`` reads; never
    raises."""
    try:
        if not isinstance(marker, Mapping) or isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            return False
        start, uid, recorder = marker.get("start_ticks"), marker.get("uid"), marker.get("pid")
        if isinstance(start, bool) or not isinstance(start, int):
            return False
        if isinstance(recorder, bool) or recorder != pid:  # the row names another process than the marker's
            return False
        if os.geteuid() not in (0, uid):  # another user's process may be hidden (hidepid): cannot tell
            return False
        boot, ns = _boot_id(), _pid_namespace()  # ns None: this /proc is another PID namespace's
        if boot is None or ns is None or marker.get("boot_id") != boot or marker.get("pid_namespace") != ns:
            return False
        if marker.get("time_namespace") != _time_namespace():  # start ticks are shown shifted by its offset
            return False
        if _read("/proc/self/stat") is None:  # /proc not readable here: cannot tell
            return False
        stat = _stat(pid)
        if stat is None:  # gone, or hidden (hidepid hides a process its reader may not ptrace-read)
            return _no_such_process(pid)
        if stat[1] != start:
            return True  # the pid was reused
        return stat[0] in ("Z", "X") and not _threads_run(pid)
    except Exception:  # noqa: BLE001 - cannot tell
        return False
