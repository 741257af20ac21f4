"""Background journal writer used inside worker processes.

Triton's hooks run on the thread that compiles. They only build an :class:`~jitwatch.core.events.Event`
and put it on a bounded queue (:meth:`JournalWriter.submit`, non-blocking); one daemon thread
writes batches to the journal. A slow or failing disk therefore never blocks a compile, and a
storage fault (missing, read-only or full directory) costs dropped events, counted and logged
once per fault episode, never an exception in the host. When the fault clears the writer
reopens the journal, resumes, and records how many events were dropped (``dropped`` event →
``jitwatch_dropped_events_total``). While drops are unreported the thread retries every
:data:`RETRY_INTERVAL_S` seconds, so the count lands even if no new event arrives. Lock
contention (``SQLITE_BUSY``) is retried, not dropped; a corrupt file is moved aside by
:func:`~jitwatch.store.journal.open_or_recover`; a full or read-only disk never moves the file.

Liveness: given a ``heartbeat`` identity, the same thread advances the worker row's ``last_ts``
every ``heartbeat_s`` seconds (:meth:`~jitwatch.store.journal.Journal.heartbeat`, one ``UPDATE``), even
when no event arrives; the sidecar reports a rank ``stale`` (not ready) once that stops (the
worker died, e.g. ``kill -9``). A failed heartbeat is logged at debug level and retried at the
next interval; it never counts as a dropped event.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from jitwatch.core.events import DeferredEvent, Event, EventKind
from jitwatch.store.journal import Journal, open_or_recover

log = logging.getLogger(__name__)

_BATCH = 512
_BUSY_RETRIES = 3
"""Extra attempts for a batch that failed with ``SQLITE_BUSY``/``SQLITE_LOCKED`` (another writer
held the lock past the busy timeout): contention is not a storage fault, so retry before dropping."""
RETRY_INTERVAL_S = 1.0
"""While events are dropped and unreported, the writer thread retries the journal this often
(seconds) even if no new event arrives, so the ``dropped`` count lands once the fault clears."""


def _is_busy(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class JournalWriter:
    """Owns a daemon thread that drains a bounded event queue into the journal.

    Args:
        directory: journal directory.
        queue_size: events buffered before new ones are dropped (and counted).
        rank: rank stamped on the ``dropped`` bookkeeping event.
        journal_kwargs: passed to :class:`~jitwatch.store.journal.Journal` (retention, cap).
        heartbeat: ``(host, pid, rank)`` of the worker row to keep alive; ``None``: no heartbeat.
        heartbeat_s: seconds between heartbeats (``<= 0``: no heartbeat).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        queue_size: int = 10_000,
        rank: int = 0,
        journal_kwargs: dict[str, Any] | None = None,
        heartbeat: tuple[str, int, int] | None = None,
        heartbeat_s: float = 10.0,
    ) -> None:
        self.directory = Path(directory)
        self.rank = rank
        self.heartbeat = heartbeat if heartbeat_s > 0 else None
        self.heartbeat_s = heartbeat_s
        self.heartbeats_total = 0
        self._next_heartbeat = time.monotonic() + heartbeat_s
        self._journal_kwargs = journal_kwargs or {}
        self._queue: queue.Queue[Event | DeferredEvent | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._pending = 0  # submitted but not yet written or dropped
        self._done = threading.Condition(self._lock)
        self._dropped_unreported = 0
        self.dropped_total = 0
        self.written_total = 0
        self.bad_events = 0
        """Events dropped because building them failed (also in ``dropped_total``)."""
        self.fault: str | None = None
        self._journal: Journal | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="jitwatch-journal-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ producer side
    def submit(self, event: Event | DeferredEvent) -> bool:
        """Queue ``event`` without blocking; ``False`` (and counted as dropped) if the queue is full.

        A :class:`~jitwatch.core.events.DeferredEvent` is materialized on the writer thread; one
        whose ``to_event`` raises is dropped alone and counted."""
        with self._lock:
            if self._closed:
                self._count_dropped_locked(1)
                return False
            self._pending += 1
        try:
            self._queue.put_nowait(event)
            return True
        except queue.Full:
            with self._lock:
                self._pending -= 1
                self._count_dropped_locked(1)
                self._done.notify_all()
            return False

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far is written or dropped; ``False`` on timeout."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, timeout=timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Flush, stop the thread and close the journal. Idempotent."""
        self.flush(timeout)
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout)

    # ------------------------------------------------------------------ writer thread
    def _count_dropped_locked(self, n: int) -> None:
        self._dropped_unreported += n
        self.dropped_total += n

    def _run(self) -> None:
        while True:
            with self._lock:
                retry = self._dropped_unreported > 0 and not self._closed
            timeout = RETRY_INTERVAL_S if retry else None
            if self.heartbeat is not None:
                due = self._next_heartbeat - time.monotonic()
                if due <= 0:
                    self._beat()
                    continue
                timeout = due if timeout is None else min(timeout, due)
            try:
                item = self._queue.get(timeout=timeout) if timeout is not None else self._queue.get()
            except queue.Empty:
                if retry:
                    self._write([])  # only the pending ``dropped`` record: has the fault cleared?
                continue
            if item is None:
                break
            batch = [item]
            stop = False
            while len(batch) < _BATCH:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._write(batch)
            if stop:
                break
        with self._lock:
            unreported = self._dropped_unreported
        if unreported:
            self._write([])  # last chance to record the drop count before the thread ends
        if self._journal is not None:
            try:
                self._journal.close()
            except Exception:  # noqa: BLE001
                pass

    def _beat(self) -> None:
        """One heartbeat (writer thread only); failures are retried at the next interval."""
        self._next_heartbeat = time.monotonic() + self.heartbeat_s
        assert self.heartbeat is not None
        host, pid, rank = self.heartbeat
        try:
            if self._journal is None:
                self._journal = open_or_recover(self.directory, **self._journal_kwargs)
            if self._journal.heartbeat(host, pid, rank, time.time()):
                self.heartbeats_total += 1
        except Exception as exc:  # noqa: BLE001 - storage faults must never reach the host
            log.debug("jitwatch heartbeat to %s failed: %s: %s", self.directory, type(exc).__name__, exc)
            self._drop_journal()

    def _drop_journal(self) -> None:
        """Close the journal after a fault (it is reopened on the next write); never raises."""
        if self._journal is not None:
            try:
                self._journal.close()
            except Exception:  # noqa: BLE001
                pass
            self._journal = None

    def _materialize(self, batch: list[Event | DeferredEvent]) -> list[Event]:
        """Events of ``batch``; an item whose ``to_event`` raises is counted as dropped, alone."""
        out: list[Event] = []
        for item in batch:
            if isinstance(item, Event):
                out.append(item)
                continue
            try:
                out.append(item.to_event())
            except Exception as exc:  # noqa: BLE001 - one bad capture must not cost the batch
                self.bad_events += 1
                if self.bad_events <= 10:
                    log.error("jitwatch: dropped one event that could not be built: %s: %s", type(exc).__name__, exc)
                with self._lock:
                    self._count_dropped_locked(1)
        return out

    def _write(self, batch: list[Event | DeferredEvent]) -> None:
        events: list[Event] = []
        try:
            events = self._materialize(batch)
            self._write_attempts(events)
        except Exception as exc:  # noqa: BLE001 - storage faults must never reach the host
            if self.fault is None:
                log.error(
                    "jitwatch cannot write its journal in %s (%s: %s); dropping events until it recovers",
                    self.directory,
                    type(exc).__name__,
                    exc,
                )
            self.fault = f"{type(exc).__name__}: {exc}"
            self._drop_journal()
            with self._lock:
                self._count_dropped_locked(len(events))
        finally:
            with self._lock:
                self._pending -= len(batch)
                self._done.notify_all()

    def _write_attempts(self, batch: list[Event]) -> None:
        for attempt in range(_BUSY_RETRIES + 1):
            try:
                self._write_once(batch)
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or attempt == _BUSY_RETRIES:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def _write_once(self, batch: list[Event]) -> None:
        if self._journal is None:
            self._journal = open_or_recover(self.directory, **self._journal_kwargs)
        with self._lock:
            dropped = self._dropped_unreported
        to_write = list(batch)
        if dropped:
            to_write.append(Event.now(EventKind.DROPPED, rank=self.rank, attrs={"count": dropped}))
        if not to_write:
            return
        self._journal.write(to_write)
        with self._lock:
            self._dropped_unreported -= dropped
            self.written_total += len(batch)
        if self.fault is not None:
            log.warning("jitwatch journal %s writable again; %d events were dropped", self.directory, dropped)
            self.fault = None
