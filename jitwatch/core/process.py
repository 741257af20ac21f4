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

The sidecar asks at every probe and scrape (:func:`processes_exited`, one pass for every rank).
A process found running under its recorded start time is then watched through a pidfd
(``pidfd_open``, Linux 5.3+): later passes ask the kernel whether it exited with one ``poll`` for
all of them instead of reading ``/proc/<pid>/stat`` again (a pidfd names that process and no other,
even once its pid is reused), and a process found exited stays exited without any read. Where
pidfds are unavailable (an older kernel, a seccomp filter) every pass reads ``/proc`` as before.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Mapping, Sequence
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


def _watch_key(pid: Any, marker: Any, euid: int, reader: tuple[str, str, str | None]) -> tuple[int, int] | None:
    """``(pid, start_ticks)`` when ``marker`` (:func:`process_marker`) can be told by this reader
    (user ``euid``; ``reader``: its machine boot, PID namespace and time namespace) and was recorded
    by ``pid`` itself; ``None`` when it cannot be told (see :func:`process_exited`). Exact types
    (``type(x) is int``): a ``bool`` is no pid and no tick count."""
    if type(pid) is not int or pid <= 0 or not isinstance(marker, Mapping):
        return None
    start = marker.get("start_ticks")
    if type(start) is not int:
        return None
    recorder = marker.get("pid")
    if type(recorder) is not int or recorder != pid:  # the row names another process than the marker's
        return None
    if euid != 0 and euid != marker.get("uid"):  # another user's process may be hidden (hidepid): cannot tell
        return None
    # another machine (boot), PID namespace, or time namespace (start ticks are shown shifted by its offset)
    if (marker.get("boot_id"), marker.get("pid_namespace"), marker.get("time_namespace")) != reader:
        return None
    return pid, start


def _read_exited(pid: int, start: int) -> tuple[bool, bool]:
    """``(exited, running)`` of process ``pid`` started at ``start`` ticks, from ``/proc``:
    ``running`` only when ``/proc/<pid>/stat`` shows that very process, neither zombie nor dead."""
    stat = _stat(pid)
    if stat is None:  # gone, or hidden (hidepid hides a process its reader may not ptrace-read)
        return _no_such_process(pid), False
    if stat[1] != start:
        return True, False  # the pid was reused
    if stat[0] in ("Z", "X"):
        return not _threads_run(pid), False
    return False, True


def _open_pidfd(pid: int, start: int) -> int | None:
    """A pidfd of process ``pid`` if it is still the one started at ``start`` ticks (checked again
    once the pidfd is open: the pid may have been reused in between), else ``None``; ``None`` too
    where the kernel or a seccomp filter has no ``pidfd_open``."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    stat = _stat(pid)
    if stat is None or stat[1] != start or stat[0] in ("Z", "X"):
        os.close(fd)
        return None
    return fd


WATCH_MAX = 256
"""Processes watched at once (:func:`processes_exited`), each holding a file descriptor of the
reader's (a sidecar's soft limit is often 1024); past that a pass reads ``/proc`` for the others."""
WATCH_IDLE_S = 300.0
"""A process no pass asked about for this long is no longer watched (its pidfd closed), seconds."""
_GONE = -1
"""The watch of a process found exited: no pidfd, no read: exited for good."""
_watched: dict[tuple[int, int], list[Any]] = {}
"""``(pid, start ticks)`` → ``[pidfd or _GONE, monotonic time of the last pass that asked]``."""
_watch_lock = threading.Lock()
_pruned_at = 0.0


def _prune(now: float) -> None:
    """Forget processes no pass asked about for :data:`WATCH_IDLE_S` (call with the lock held)."""
    global _pruned_at
    if now - _pruned_at < 10.0:
        return
    _pruned_at = now
    for key, (fd, used) in list(_watched.items()):
        if now - used > WATCH_IDLE_S:
            del _watched[key]
            if fd != _GONE:
                os.close(fd)


def processes_exited(workers: Sequence[tuple[Any, Any]]) -> list[bool]:
    """:func:`process_exited` of each ``(pid, marker)`` of ``workers``, in order, in one pass: the
    reader's side (user, boot, PID and time namespaces) is read once; a process already known
    exited costs nothing, one watched through its pidfd (see the module docstring) costs its share
    of one ``poll`` for them all, and only a process seen for the first time (or where pidfds are
    unavailable) reads ``/proc/<pid>/stat``. Thread-safe; never raises (``False``: cannot tell)."""
    out = [False] * len(workers)
    try:
        euid, boot, ns, time_ns = os.geteuid(), _boot_id(), _pid_namespace(), _time_namespace()
        if boot is None or ns is None:  # ns None: this /proc is another PID namespace's
            return out
        reader = (boot, ns, time_ns)
        now = time.monotonic()
        proc_readable: bool | None = None
        polled: list[tuple[int, tuple[int, int], int]] = []
        with _watch_lock:
            for i, (pid, marker) in enumerate(workers):
                try:
                    key = _watch_key(pid, marker, euid, reader)
                    if key is None:
                        continue
                    watch = _watched.get(key)
                    if watch is not None:
                        watch[1] = now
                        if watch[0] == _GONE:
                            out[i] = True
                        else:
                            polled.append((i, key, watch[0]))
                        continue
                    if proc_readable is None:  # /proc not readable here: cannot tell
                        proc_readable = _read("/proc/self/stat") is not None
                    if not proc_readable:
                        continue
                    exited, running = _read_exited(*key)
                    out[i] = exited
                    if len(_watched) >= WATCH_MAX:
                        continue
                    if exited:
                        _watched[key] = [_GONE, now]  # an exited process never comes back
                    elif running and (fd := _open_pidfd(*key)) is not None:
                        _watched[key] = [fd, now]
                except Exception:  # noqa: BLE001 - this one cannot tell; the others still can
                    out[i] = False
            if polled:
                poller = select.poll()
                for _, _, fd in polled:
                    poller.register(fd, select.POLLIN)
                events = dict(poller.poll(0))
                for i, key, fd in polled:
                    event = events.get(fd, 0)
                    if event & (select.POLLIN | select.POLLHUP):  # the process exited (or was reaped)
                        out[i] = True
                        os.close(fd)
                        _watched[key][0] = _GONE
                    elif event:  # POLLERR / POLLNVAL: not a usable pidfd; read /proc next pass
                        del _watched[key]
            _prune(now)
    except Exception:  # noqa: BLE001 - cannot tell
        return out
    return out


def process_exited(pid: Any, marker: Any) -> bool:
    """Whether the worker process ``pid`` that recorded ``marker`` (:func:`process_marker`) has
    exited: ``True`` only when ``marker`` was recorded by ``pid`` itself (its ``pid``; a marker of
    another process, or one without a pid, cannot tell), names this machine's boot and this
    process's PID namespace, whose ``/proc`` this is, and this process's time namespace (start times
    are shown shifted by its boot-time offset), this process runs as the worker's user or as
    root (``hidepid`` hides other users' processes), and ``/proc/<pid>`` holds no process (which
    ``kill(pid, 0)`` confirms: ``hidepid`` also hides a non-dumpable process of the same user), one
    with another start time (the pid was reused), or a zombie (``Z``) or dead (``X``) one with no
    thread left running (a process whose main thread ended is ``Z`` while the others run); a
    process seen running before is asked through its pidfd instead (:func:`processes_exited`).
    ``False`` whenever that cannot be told (another machine, PID namespace, time namespace or user,
    a ``/proc`` of another PID namespace, no or a malformed marker, ``/proc`` unreadable). A few
    small ``/proc`` reads at most; never raises."""
    return processes_exited([(pid, marker)])[0]
