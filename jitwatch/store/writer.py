"""Background journal writer used inside worker processes.

Backends' hooks run on the thread that compiles. The monitor hands the writer a deferred event
(references and timestamps) that :meth:`JournalWriter.submit` appends to a bounded buffer without
blocking and without waking anyone; one daemon thread wakes every :data:`WRITER_INTERVAL_S`
seconds (or at :data:`HIGH_WATER` buffered events, or on ``flush``), builds the events and writes
them to the journal in batches; a timed wake-up that finds events still arriving first waits for a
pause of :data:`SETTLE_S` (at most :data:`MAX_LAG_S`), so a burst of compiles is written after it.
A slow or failing disk therefore never blocks a compile, and a
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
next interval; it never counts as a dropped event. The compiles in flight are journaled into the
same row (:attr:`JournalWriter.inflight_source`) whether or not the worker heartbeats. At
:meth:`JournalWriter.close` (``jitwatch.uninstall()``, or the monitor's ``atexit`` handler at a
clean exit) the thread's last write records the worker stopped
(:meth:`~jitwatch.store.journal.Journal.mark_stopped`), so its rank is not ready at once rather
than after the stale window; when the process is exiting on an unhandled exception
(:attr:`JournalWriter.exit_exception`, set by the monitor's handler) it records the exit as not
clean instead (:meth:`~jitwatch.store.journal.Journal.mark_exited`: the rank reads ``exited``). A
``kill -9`` records nothing and is judged by the process or the heartbeat.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from jitwatch.core.events import DeferredEvent, Event, EventKind, EventLane
from jitwatch.store.journal import Journal, open_or_recover
from jitwatch.text import logger

log = logger(__name__)

_BATCH = 512
_BUSY_RETRIES = 3
"""Extra attempts for a batch that failed with ``SQLITE_BUSY``/``SQLITE_LOCKED`` (another writer
held the lock past the busy timeout): contention is not a storage fault, so retry before dropping."""
WRITER_INTERVAL_S = 0.1
"""Seconds between the writer thread's timed wake-ups: the most a ``kill -9`` of a worker can
lose of its events (those buffered and not yet committed), and the journal's usual lag."""
HIGH_WATER = 256
"""Buffered events that wake the writer before its interval is up."""
SETTLE_S = 0.02
"""After a timed wake-up with events buffered, the writer waits this long and writes only if no
event arrived meanwhile: while compiles keep arriving (a warmup, a burst of serving compiles)
it waits again, up to :data:`MAX_LAG_S`, so it does not run — taking the GIL, one transaction
per wake-up — between the compiles of a burst."""
MAX_LAG_S = 0.5
"""The longest the writer postpones a timed write while events keep arriving (:data:`SETTLE_S`):
the most a ``kill -9`` of a worker can lose while it compiles without pause (``docs/reliability.md``)."""
INFLIGHT_INTERVAL_S = 1.0
"""While compiles are in flight, the writer re-journals them at least this often (seconds), so the
sidecar's view of a running (or hung) compile is this fresh; a start or an end is journaled at the
next wake-up (every ``interval_s``)."""
MAINTENANCE_INTERVAL_S = 60.0
"""Seconds between the writer's retention passes (:meth:`~jitwatch.store.journal.Journal.maintain`:
events and worker rows past retention, WAL checkpoint); the first runs as soon as the journal is
open, so a short-lived worker prunes too."""
_REGISTRATION_KINDS = (
    EventKind.WORKER_START,
    EventKind.BACKEND_READY,
    EventKind.WARMUP_START,
    EventKind.WARMUP_COMPLETE,
    EventKind.FIRST_REQUEST,
)
"""Events that make up a worker's row: written again into a journal that replaced a deleted one."""
RETRY_INTERVAL_S = 1.0
"""While events are dropped and unreported, the writer thread retries the journal this often
(seconds) even if no new event arrives, so the ``dropped`` count lands once the fault clears."""


_WRITERS: weakref.WeakSet[JournalWriter] = weakref.WeakSet()
_FORK_ORPHANS: list[Any] = []
"""Journals inherited from the parent by a forked child: kept referenced, never closed there."""


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        try:
            writer._forked()
        except Exception:  # noqa: BLE001 - nothing may fail in a fork handler
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_busy(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class EventExporter(Protocol):
    """Something that sends journal events off-host (:mod:`jitwatch.export`), called by
    :class:`JournalWriter` on its own thread — never on a compiling thread.

    ``export`` receives each batch of materialized events before they are journaled; it must not
    block (queue and return) and should not raise (the writer catches, counts and logs once).
    ``dropped_total`` is monotonic: events the exporter could not deliver; the writer journals the
    growth as ``dropped`` events with ``attrs.exporter`` (counter ``export_dropped:<name>``).
    ``shutdown`` flushes within a bounded time when the writer closes.
    """

    name: str

    @property
    def dropped_total(self) -> int: ...

    def export(self, events: Sequence[Event]) -> None: ...

    def shutdown(self) -> None: ...


CLOSE_GRACE_S = 1.0
"""Seconds :meth:`JournalWriter.close` still waits for its thread's last writes (the worker's stop
record) when the flush used up the whole ``timeout``."""


class JournalWriter:
    """Owns a daemon thread that drains a bounded in-memory buffer into the journal.

    The producer side (:meth:`submit`, on compiling threads) appends to a ``collections.deque``
    and wakes nobody: the writer thread wakes every ``interval_s`` seconds, when the buffer
    reaches :data:`HIGH_WATER` items, or on :meth:`flush`/:meth:`close`. Waking a thread per
    event (``queue.Queue.put`` → ``Condition.notify``) cost a compile ~30 µs of GIL hand-off;
    a ``deque.append`` costs well under 1 µs. A timed wake-up that finds events arriving waits
    for a pause of ``settle_s`` (at most ``max_lag_s`` in all) before it writes, so a burst of
    compiles is written once, after it, rather than interrupted by the writer (the compiling
    thread costs nothing: the writer compares the buffer's length). The price: a ``kill -9`` of
    the worker loses what was buffered, at most ``interval_s + settle_s`` seconds of events, or
    ``max_lag_s`` while compiles arrive without pause (``docs/reliability.md``).

    Args:
        directory: journal directory.
        queue_size: events buffered before new ones are dropped (and counted).
        rank: rank stamped on the ``dropped`` bookkeeping event.
        journal_kwargs: passed to :class:`~jitwatch.store.journal.Journal` (retention, cap).
        heartbeat: ``(host, pid, rank)`` of this worker's row: kept alive every ``heartbeat_s``,
            where the compiles in flight are journaled (:attr:`inflight_source`), and recorded
            stopped at :meth:`close`; ``None``: none of these.
        heartbeat_s: seconds between heartbeats (``<= 0``: no heartbeat; compiles in flight are
            journaled all the same).
        interval_s: seconds between the writer's timed wake-ups (default :data:`WRITER_INTERVAL_S`).
        settle_s: pause without a new event that a timed write waits for (default
            :data:`SETTLE_S`; ``0``: write at every timed wake-up).
        max_lag_s: the longest a timed write waits for that pause (default :data:`MAX_LAG_S`).
        exporters: :class:`EventExporter` objects handed every batch on the writer thread.
    """

    plain_events = True
    """:meth:`submit` also takes a plain tuple whose first item builds the event from it,
    ``item[0](item)`` on the writer thread (the monitor's queued compiles: no ``DeferredEvent``
    object to allocate on the compiling thread)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        queue_size: int = 10_000,
        rank: int = 0,
        journal_kwargs: dict[str, Any] | None = None,
        heartbeat: tuple[str, int, int] | None = None,
        heartbeat_s: float = 10.0,
        interval_s: float = WRITER_INTERVAL_S,
        exporters: Sequence[EventExporter] = (),
        maintenance_s: float = MAINTENANCE_INTERVAL_S,
        settle_s: float = SETTLE_S,
        max_lag_s: float = MAX_LAG_S,
    ) -> None:
        self.directory = Path(directory)
        self.maintenance_s = maintenance_s
        self._next_maintenance = 0.0
        self._registration: dict[tuple[str, str], Event] = {}
        self.reopened_total = 0
        """Times the journal was found deleted or replaced and reopened."""
        self.rank = rank
        self.worker_row = heartbeat
        """``(host, pid, rank)`` of this worker's journal row (``None``: none), whatever ``heartbeat_s``."""
        self.heartbeat = heartbeat if heartbeat_s > 0 else None
        """:attr:`worker_row` when it heartbeats (``heartbeat_s > 0``), else ``None``."""
        self.heartbeat_s = heartbeat_s
        self.heartbeats_total = 0
        self.stop_recorded = False
        """Set by the writer thread once :meth:`close` recorded the worker's clean stop."""
        self.stop_record_errors = 0
        """Failed attempts to record the worker's clean stop (logged at warning level)."""
        self.exit_exception: str | None = None
        """Set before :meth:`close` (the monitor's exit handler) to the type name of the unhandled
        exception the process is exiting on: the last write then records the exit as not clean
        (:meth:`~jitwatch.store.journal.Journal.mark_exited`, the rank reads ``exited``) instead
        of a clean stop. ``None``: a clean stop."""
        self.interval_s = max(0.001, float(interval_s))
        self.settle_s = max(0.0, float(settle_s))
        self.max_lag_s = max(0.0, float(max_lag_s))
        self.settled_waits = 0
        """Timed writes postponed by :attr:`settle_s` because events kept arriving (a count)."""
        self._next_heartbeat = time.monotonic() + heartbeat_s
        self.inflight_source: Callable[[], list[dict[str, Any]]] | None = None
        """Set by :func:`jitwatch.worker.create_monitor` to the monitor's ``inflight_snapshot``:
        the writer journals the compiles in flight into :attr:`worker_row` (heartbeat or not).
        A compile that is still running must come back with the same ``backend``, ``kernel`` and
        ``start_ts``: those tell a change (journaled at the next wake-up) from a refresh (every
        :data:`INFLIGHT_INTERVAL_S`)."""
        self._inflight_sig: tuple[Any, ...] = ()
        self._inflight_next = 0.0
        self._journal_kwargs = journal_kwargs or {}
        self._queue_size = max(1, int(queue_size))
        self._buffer: deque[Event | DeferredEvent] = deque()
        self._wake = threading.Event()
        self.lane = EventLane(self._buffer, self._queue_size, HIGH_WATER - 1, self._wake_up, self._overflow)
        """The buffer as the monitor appends to it without calling :meth:`submit`
        (:class:`~jitwatch.core.events.EventLane`: the same checks, no call frame on the
        compiling thread). Its ``room`` is 0 once closed, or in a forked child."""
        self._urgent = False
        """Set by :meth:`flush` (and so :meth:`close`) before it sets :attr:`_wake`, cleared by the
        writer thread before it takes the buffer: a flush whose wake-up the writer cleared right
        after a timed wait (``wait`` returned, then ``clear``) is still not made to wait for a
        pause (:meth:`_settle`)."""
        self._lock = threading.Lock()
        self._taken = 0  # taken out of the buffer by the writer thread, ever (under the lock)
        self._handled = 0  # of those, written or dropped, ever (under the lock)
        self._done = threading.Condition(self._lock)
        self._dropped_unreported = 0
        self.dropped_total = 0
        self.written_total = 0
        self.bad_events = 0
        """Events dropped because building them failed (also in ``dropped_total``)."""
        self.fault: str | None = None
        self._journal: Journal | None = None
        self._closed = False
        self._stop = False
        self._next_retry = 0.0
        self.exporters = tuple(exporters)
        self._export_reported = {x.name: 0 for x in self.exporters}
        self._export_errors = 0
        self._thread = threading.Thread(target=self._run, name="jitwatch-journal-writer", daemon=True)
        self._thread.start()
        _WRITERS.add(self)

    def _forked(self) -> None:
        """In a forked child (``os.register_at_fork``): this writer's thread exists only in the
        parent. Make it inert here: closed (``submit`` returns ``False`` and counts a drop, never
        "written"), nothing pending (the buffered events are the parent's, which writes them),
        ``flush``/``close`` return at once, and the parent's SQLite connection is never used or
        closed by the child (kept referenced in :data:`_FORK_ORPHANS`)."""
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._wake = threading.Event()
        self.lane.room = 0  # first: a thread left in the child appends to nothing kept
        self._buffer = self.lane.buf = deque()
        self._handled = self._taken
        self._closed = True
        self._stop = True
        if self._journal is not None:
            _FORK_ORPHANS.append(self._journal)
            self._journal = None

    # ------------------------------------------------------------------ producer side
    def submit(self, event: Event | DeferredEvent) -> bool:
        """Buffer ``event`` without blocking or waking the writer; ``False`` (and counted as
        dropped) if ``queue_size`` events are already buffered or the writer is closed.

        A :class:`~jitwatch.core.events.DeferredEvent` is materialized on the writer thread; one
        whose ``to_event`` raises is dropped alone and counted."""
        buffer = self._buffer
        if self._closed or len(buffer) >= self._queue_size:
            return self._overflow()
        # No lock on the compiling thread: ``deque.append`` is atomic under the GIL, and flush()
        # counts what it waits for from the buffer's length and the writer's ``_taken``.
        buffer.append(event)
        if len(buffer) >= HIGH_WATER:
            self._wake_up()
        return True

    def _wake_up(self) -> None:
        """Wake the writer thread for a buffer at :data:`HIGH_WATER` (once, not per event past it)."""
        if not self._wake.is_set():
            self._wake.set()

    def _overflow(self) -> bool:
        """Count one event refused (buffer full, or closed); ``False``, as :meth:`submit` returns."""
        with self._lock:
            self._count_dropped_locked(1)
        return False

    def flush(self, timeout: float = 5.0) -> bool:
        """Wake the writer and wait until everything submitted so far is written or dropped;
        ``False`` on timeout."""
        with self._done:
            target = self._taken + len(self._buffer)  # everything submitted before this call
            if self._handled >= target:
                return True
            self._urgent = True  # before the wake-up, which a timed-out wait may clear unseen
            self._wake.set()
            return self._done.wait_for(lambda: self._handled >= target, timeout=timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Flush, stop the thread and close the journal. Idempotent.

        With a :attr:`worker_row`, the thread's last write records that worker stopped cleanly
        (:meth:`~jitwatch.store.journal.Journal.mark_stopped`: ``/readyz`` answers 503 for its
        rank at once instead of after the stale window). Bounded: returns within ``timeout``
        seconds, or :data:`CLOSE_GRACE_S` after the flush when that took them all; past that
        the daemon thread is left behind (a locked journal: the record is left undone and the
        rank turns stale as after a ``kill -9``). A failed record is logged and counted in
        :attr:`stop_record_errors`, never raised."""
        deadline = time.monotonic() + timeout
        self.flush(timeout)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.lane.room = 0
            self._stop = True
        self._wake.set()
        self._thread.join(max(deadline - time.monotonic(), min(timeout, CLOSE_GRACE_S)))

    # ------------------------------------------------------------------ writer thread
    def _count_dropped_locked(self, n: int) -> None:
        self._dropped_unreported += n
        self.dropped_total += n

    def _take(self) -> list[Event | DeferredEvent]:
        with self._lock:
            n = min(len(self._buffer), _BATCH)
            self._taken += n
            return [self._buffer.popleft() for _ in range(n)]

    def _run(self) -> None:
        while True:
            with self._lock:
                retry = self._dropped_unreported > 0 and not self._closed
                stop = self._stop
            if not stop:
                timeout = self.interval_s
                if self.heartbeat is not None:
                    due = self._next_heartbeat - time.monotonic()
                    if due <= 0:
                        self._beat()
                        continue
                    timeout = min(timeout, due)
                woken = self._wake.wait(timeout)
                self._wake.clear()
                if not woken and not self._urgent and self._buffer and self.settle_s > 0:
                    self._settle()
            self._urgent = False  # before the takes: they write everything a flush so far waits for
            wrote = False
            while True:
                batch = self._take()
                if not batch:
                    break
                self._write(batch)
                wrote = True
            if self.exporters:
                self._report_export_drops()
            if self.inflight_source is not None and self.worker_row is not None:
                self._inflight_tick()
            if self._journal is not None and time.monotonic() >= self._next_maintenance:
                self._maintain()
            if retry and not wrote and time.monotonic() >= self._next_retry:
                self._next_retry = time.monotonic() + RETRY_INTERVAL_S
                self._write([])  # only the pending ``dropped`` record: has the fault cleared?
            if stop:
                break
        if self.worker_row is not None:  # after the last batch, before exporters that may take long
            self._record_stop()
        for exporter in self.exporters:
            try:
                exporter.shutdown()  # bounded by the exporter's own timeout
            except Exception as exc:  # noqa: BLE001 - an exporter must never stop the writer
                log.debug("jitwatch: %s exporter shutdown failed: %s", exporter.name, exc)
        if self.exporters:
            self._report_export_drops()
        with self._lock:
            late = len(self._buffer)  # submitted while close() stopped the thread (submit takes no lock)
            if late:
                self._buffer.clear()
                self._count_dropped_locked(late)
                self._taken += late
                self._handled += late
                self._done.notify_all()
            unreported = self._dropped_unreported
        if unreported:
            self._write([])  # last chance to record the drop count before the thread ends
        if self._journal is not None:
            try:
                self._journal.close()
            except Exception:  # noqa: BLE001
                pass

    def _settle(self) -> None:
        """After a timed wake-up with events buffered: wait until ``settle_s`` pass without a new
        event, at most ``max_lag_s - interval_s`` more (the oldest buffered event may already be
        ``interval_s`` old), returning at once on :meth:`flush`, :data:`HIGH_WATER`, :meth:`close`
        or a heartbeat falling due. Compares ``len`` of the buffer: nothing on the compiling thread."""
        now = time.monotonic()
        until = now + max(0.0, self.max_lag_s - self.interval_s)
        if self.heartbeat is not None:
            until = min(until, self._next_heartbeat)
        seen = len(self._buffer)
        while now < until:
            if self._wake.wait(min(self.settle_s, until - now)) or self._urgent:
                self._wake.clear()
                return  # flush, close or high water: written now
            n = len(self._buffer)
            if n == seen:
                return  # quiet for settle_s
            self.settled_waits += 1
            seen = n
            now = time.monotonic()

    def _inflight_tick(self) -> None:
        """Journal the in-flight compiles when they changed, or every :data:`INFLIGHT_INTERVAL_S`
        while any is in flight (writer thread only; failures are retried at the next wake-up).
        Independent of the heartbeat: with ``heartbeat_s <= 0`` a running or hung compile is
        journaled all the same (it also advances the row's ``last_ts``), and a journal deleted or
        replaced meanwhile is reopened here, with this worker registered again, as a heartbeat
        would (one ``stat`` per update)."""
        assert self.inflight_source is not None and self.worker_row is not None
        try:
            items = self.inflight_source()
            sig = tuple((i.get("backend"), i.get("kernel"), i.get("start_ts")) for i in items)
            now = time.monotonic()
            if sig == self._inflight_sig and (not items or now < self._inflight_next):
                return
            if self._journal is None:
                self._journal = open_or_recover(self.directory, **self._journal_kwargs)
            else:  # deleted or replaced: a fresh journal with this worker registered (one stat)
                self._check_replaced()
            host, pid, rank = self.worker_row
            if self._journal.set_inflight(host, pid, rank, items, time.time()):
                self._inflight_sig = sig
                self._inflight_next = now + INFLIGHT_INTERVAL_S
        except Exception as exc:  # noqa: BLE001 - storage faults must never reach the host
            log.debug("jitwatch: in-flight compiles not journaled: %s: %s", type(exc).__name__, exc)

    def _maintain(self) -> None:
        """Retention pass (writer thread only); a failure is logged at debug level and retried at
        the next interval: the events are committed, and pruning is not a write of the host's."""
        self._next_maintenance = time.monotonic() + self.maintenance_s
        try:
            assert self._journal is not None
            if self._check_replaced():
                return  # a fresh journal: nothing to prune yet
            self._journal.maintain()
        except Exception as exc:  # noqa: BLE001 - storage faults must never reach the host
            log.debug("jitwatch journal retention pass failed, will retry: %s: %s", type(exc).__name__, exc)

    def _check_replaced(self) -> bool:
        """If ``journal.db`` was deleted or replaced under the open connection (``st_dev``/``st_ino``
        changed), reopen it (creating a fresh one) and write this worker's registration events
        into it again, so that what follows lands where readers look. Returns whether it did."""
        if self._journal is None or not self._journal.replaced():
            return False
        log.warning(
            "jitwatch journal %s was deleted or replaced while this worker wrote it; reopening", self._journal.path
        )
        self._drop_journal()
        self._journal = open_or_recover(self.directory, **self._journal_kwargs)
        self.reopened_total += 1
        again = sorted(self._registration.values(), key=lambda e: e.ts)
        if again:
            self._journal.write(again)
        return True

    def _remember_registration(self, events: Sequence[Event]) -> None:
        for ev in events:
            if ev.kind in _REGISTRATION_KINDS:
                self._registration[(ev.kind.value, ev.backend if ev.kind is EventKind.BACKEND_READY else "")] = ev

    def _beat(self) -> None:
        """One heartbeat (writer thread only); failures are retried at the next interval."""
        self._next_heartbeat = time.monotonic() + self.heartbeat_s
        assert self.heartbeat is not None
        host, pid, rank = self.heartbeat
        try:
            if self._journal is None:
                self._journal = open_or_recover(self.directory, **self._journal_kwargs)
            self._check_replaced()
            if self._journal.heartbeat(host, pid, rank, time.time()):
                self.heartbeats_total += 1
        except Exception as exc:  # noqa: BLE001 - storage faults must never reach the host
            log.debug("jitwatch heartbeat to %s failed: %s: %s", self.directory, type(exc).__name__, exc)
            self._drop_journal()

    def _record_stop(self) -> None:
        """The worker's clean stop, at :meth:`close` (writer thread only, after the last batch), or
        its exit on an unhandled exception when :attr:`exit_exception` is set; a failure is logged
        and counted (:attr:`stop_record_errors`), never raised."""
        assert self.worker_row is not None
        host, pid, rank = self.worker_row
        exception = self.exit_exception
        try:
            if self._journal is None:
                self._journal = open_or_recover(self.directory, **self._journal_kwargs)
            self._check_replaced()
            if exception:
                recorded = self._journal.mark_exited(host, pid, rank, time.time(), exception)
            else:
                recorded = self._journal.mark_stopped(host, pid, rank, time.time())
            if recorded:
                self.stop_recorded = True
        except Exception as exc:  # noqa: BLE001 - storage faults must never reach the host (at its exit)
            self.stop_record_errors += 1
            log.warning(
                "jitwatch: the worker's stop was not journaled in %s: %s: %s", self.directory, type(exc).__name__, exc
            )

    def _drop_journal(self) -> None:
        """Close the journal after a fault (it is reopened on the next write); never raises."""
        if self._journal is not None:
            try:
                self._journal.close()
            except Exception:  # noqa: BLE001
                pass
            self._journal = None

    def _materialize(self, batch: list[Event | DeferredEvent]) -> list[Event]:
        """Events of ``batch`` (a plain tuple ``item`` built as ``item[0](item)``, see
        :attr:`plain_events`); an item whose ``to_event`` raises is counted as dropped, alone."""
        out: list[Event] = []
        for item in batch:
            if isinstance(item, Event):
                out.append(item)
                continue
            try:
                out.append(item[0](item) if item.__class__ is tuple else item.to_event())
            except Exception as exc:  # noqa: BLE001 - one bad capture must not cost the batch
                self.bad_events += 1
                if self.bad_events <= 10:
                    log.error("jitwatch: dropped one event that could not be built: %s: %s", type(exc).__name__, exc)
                with self._lock:
                    self._count_dropped_locked(1)
        return out

    def _export(self, events: list[Event]) -> None:
        """Hand ``events`` to every exporter (writer thread); an exporter that raises is logged
        once and counted, never propagated."""
        for exporter in self.exporters:
            try:
                exporter.export(events)
            except Exception as exc:  # noqa: BLE001 - an exporter must never stop the journal
                self._export_errors += 1
                if self._export_errors == 1:
                    log.error("jitwatch: the %s event exporter failed: %s: %s", exporter.name, type(exc).__name__, exc)

    def _report_export_drops(self) -> None:
        """Journal what the exporters could not deliver since the last report, as ``dropped``
        events with ``attrs.exporter`` (retried at the next wake-up if the journal fails)."""
        drops: list[Event] = []
        totals: dict[str, int] = {}
        for exporter in self.exporters:
            try:
                total = int(exporter.dropped_total)
            except Exception:  # noqa: BLE001
                continue
            new = total - self._export_reported.get(exporter.name, 0)
            if new > 0:
                totals[exporter.name] = total
                drops.append(
                    Event.now(EventKind.DROPPED, rank=self.rank, attrs={"count": new, "exporter": exporter.name})
                )
        if not drops:
            return
        try:
            if self._journal is None:
                self._journal = open_or_recover(self.directory, **self._journal_kwargs)
            self._journal.write(drops)
        except Exception as exc:  # noqa: BLE001 - storage faults must never reach the host
            log.debug("jitwatch: could not journal exporter drops yet: %s", exc)
            self._drop_journal()
            return
        self._export_reported.update(totals)

    def _write(self, batch: list[Event | DeferredEvent]) -> None:
        events: list[Event] = []
        try:
            events = self._materialize(batch)
            if self.exporters:
                self._export(events)
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
                self._handled += len(batch)
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
        else:
            self._check_replaced()
        with self._lock:
            dropped = self._dropped_unreported
        to_write = list(batch)
        if dropped:
            to_write.append(Event.now(EventKind.DROPPED, rank=self.rank, attrs={"count": dropped}))
        if not to_write:
            return
        ids = self._journal.write(to_write)
        self._remember_registration(batch)
        # An event the journal could not store (its own values, e.g. a rank past SQLite's 64 bits)
        # was dropped alone and counted there (dropped_events): never count it as written here.
        lost = max(0, len(to_write) - len(ids))
        with self._lock:
            self._dropped_unreported -= dropped
            self.written_total += len(batch) - lost
            self.dropped_total += lost
        if self.fault is not None:
            log.warning("jitwatch journal %s writable again; %d events were dropped", self.directory, dropped)
            self.fault = None
