"""Live aggregates: the sidecar's ``/metrics`` and ``/jit`` from memory, refreshed incrementally.

One :class:`LiveJournal` per journal directory (per sidecar process) keeps a long-lived read-only
connection and an in-memory copy of the journal's aggregates (:class:`LiveAggregates`). A request
first refreshes that copy, under one lock (concurrent requests wait for the same refresh: single
flight), then answers from memory:

* nothing committed since the last refresh (SQLite's ``PRAGMA data_version`` unchanged): no
  query at all;
* otherwise, in one read transaction (a WAL snapshot): the event-id watermark
  (:meth:`~jitwatch.store.journal.Journal.event_watermark`), and only the aggregate rows of the
  (backend, kernel, phase, rank) keys that events newer than the last watermark touched
  (``Journal.stats(after_id=…)``, ``recompile_stats(after_id=…)``): each such row replaces its
  copy. The small tables (workers, counters, the duration histogram, kernel-label counts) are
  read whole;
* a full rebuild when the copy cannot be trusted: the file was replaced (device/inode), the schema
  changed (a migration: ``PRAGMA schema_version``; the file is also opened again, as
  :class:`~jitwatch.store.journal.Journal` reads the table set and checks the revision once, at
  open), the watermark went backwards, or retention removed events newer than the watermark before this
  reader saw them (``count_events_after`` smaller than the ids assigned since).

Retention never changes the aggregates (the writer keeps them), so after it only the event count
is re-read. Several sidecars on one journal each keep their own copy; a restarted sidecar rebuilds.

SQLite tells a connection about commits only; at most every :data:`VERIFY_INTERVAL_S` the
connection drops its page cache and re-reads page 1 and the small tables from the file
(:meth:`~jitwatch.store.journal.Journal.verify_pages`): a damaged file raises (the caller answers
``jitwatch_journal_up 0``), and a digest of the small tables and the watermark that changed with no
commit seen (a backup copied over the file in place) rebuilds the copy.

``/readyz`` (:meth:`LiveJournal.readiness`) reads each rank's latest worker through a second
long-lived connection with its own lock (:class:`_Probe`), so a probe never waits for a refresh,
a rebuild or the first coverage report behind the copy's lock.

``/metrics``: per-kernel families (:data:`~jitwatch.views.metrics.KERNEL_FAMILIES`) keep one
formatted line per series; a refresh re-sums and re-formats only the series whose rows changed
(counts exactly, seconds with ``math.fsum``, so the floats are those of a full build whatever the
order), so an unchanged series costs nothing. The other families are formatted again only when the aggregates
changed; the in-flight gauges (which age with the clock) at every scrape, and
``jitwatch_worker_info`` whenever the set of ranks whose worker process was seen exited changed
(:func:`~jitwatch.views.status.exited_ranks`, read once per scrape: a poll of the watched
processes' pidfds, see :mod:`jitwatch.core.process`). The body is
byte-identical to :func:`jitwatch.views.metrics.render_uncached` (prometheus_client's own
exposition of the same families; a test checks it after writes, retention, replacement and with
two readers). Headers come from prometheus_client itself (a family without samples, encoded by the
encoder :func:`prometheus_client.exposition.choose_encoder` picks for the ``Accept`` header);
sample lines are written as prometheus_client 0.26 writes them for legacy-valid names (labels
sorted by name, values escaped ``\\`` ``\\n`` ``"``, :func:`prometheus_client.utils.floatToGoString`),
identical in text 0.0.4 and OpenMetrics 1.0.0. Any other negotiated format (OpenMetrics 2.0,
dot/value name escaping) is encoded by prometheus_client from families built from memory.

``/jit``: :func:`jitwatch.views.status.build_status` over the in-memory copy; the event-log
queries it needs (newest serving compiles, stalled requests) are cached until events of that kind
arrive or retention runs; coverage comes from :func:`~jitwatch.views.status.cached_coverage`
refreshed in the background; staleness and readiness are computed at answer time.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.openmetrics import exposition as om_exposition
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from jitwatch.config import DEFAULT_STALE_SECONDS
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.errors import JournalCorruptError, JournalVersionError
from jitwatch.store.journal import (
    JOURNAL_FILE,
    Journal,
    RecompileRow,
    StatRow,
    WorkerRow,
)
from jitwatch.text import logger
from jitwatch.views.contract import BY_NAME
from jitwatch.views.coverage import CoverageReport, coverage_labels, coverage_ratio_samples
from jitwatch.views.metrics import (
    KERNEL_FAMILIES,
    STAT_GROUPS,
    WORKER_INFO,
    BackendLabels,
    KernelSums,
    backend_names,
    build_info_family,
    coverage_family,
    families_from,
    inflight_families,
    journal_up_family,
    kernel_sums,
    recompile_key,
    render_uncached,
    skipped_rows_family,
    stat_series_keys,
    sum_kernel_group,
    sum_label_group,
    sum_phase_group,
    sum_rank_group,
    sum_recompile_group,
    sum_serving_group,
    worker_info_family,
)
from jitwatch.views.status import (
    DEFAULT_KERNELS_LIMIT,
    JitStatus,
    KernelAcc,
    Readiness,
    StatusParts,
    build_status,
    exited_ranks,
    guarded_coverage,
    kernel_acc,
    kernel_accs,
    status_parts,
)
from jitwatch.views.status import readiness as readiness_of

log = logger(__name__)

StatKey = tuple[str, str, str, int, str]
"""(backend, kernel, phase, rank, kind): one aggregate row."""
RecKey = tuple[str, str, str, str, int]
"""(backend, kernel, reason class, phase, rank): one recompile aggregate row."""

_GROUP_OF = {
    "jitwatch_compiles_total": "bp",
    "jitwatch_compile_seconds_total": "bk",
    "jitwatch_last_compile_timestamp_seconds": "bp",
    "jitwatch_autotune_runs_total": "kernel",
    "jitwatch_autotune_seconds_total": "kernel",
    "jitwatch_graph_captures_total": "kernel",
    "jitwatch_graph_capture_seconds_total": "kernel",
    "jitwatch_serving_compiles_total": "serving",
    "jitwatch_compile_disk_cache_hits_total": "bpr",
    "jitwatch_recompiles_total": "recompile",
    "jitwatch_recompile_seconds_total": "recompile",
}
"""Which series key each per-kernel family is drawn over (see :class:`KernelSums`)."""
assert set(_GROUP_OF) == KERNEL_FAMILIES


def _stat_key(row: StatRow) -> StatKey:
    return (row.backend, row.kernel, row.phase.value, row.rank, row.kind)


def _rec_key(row: RecompileRow) -> RecKey:
    return (row.backend, row.kernel, row.reason_class, row.phase.value, row.rank)


def _stat_order(sk: StatKey) -> tuple[str, str, int, str, str]:
    """:meth:`Journal.stats` order: backend, kernel, rank, phase, kind."""
    return (sk[0], sk[1], sk[3], sk[2], sk[4])


def _rec_order(rk: RecKey) -> tuple[str, str, int, str, str]:
    """:meth:`Journal.recompile_stats` order: backend, kernel, rank, phase, reason class."""
    return (rk[0], rk[1], rk[4], rk[3], rk[2])


def _escape(value: str) -> str:
    """A label value as prometheus_client 0.26 writes it (``openmetrics.exposition._escape`` with
    ``ALLOWUTF8``, used by both its text and OpenMetrics encoders)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _line(name: str, labels: Iterable[tuple[str, str]], value: float) -> bytes:
    """One sample line: ``name{a="x",b="y"} value`` with the labels sorted by name."""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels))
    if inner:
        return f"{name}{{{inner}}} {floatToGoString(value)}\n".encode()
    return f"{name} {floatToGoString(value)}\n".encode()


class _One(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return iter(self.metrics)


_EOF = b"# EOF\n"
_COVERAGE = "jitwatch_specialization_coverage_ratio"
_WORKER_INFO_NAME = WORKER_INFO.removesuffix("_info")
"""prometheus_client's name of the ``jitwatch_worker_info`` family (its samples keep ``_info``)."""
_LINE_CACHE_MAX = 50_000
"""Formatted lines of the other families kept (sample name, labels, value → line); bounded."""
Encoder = Callable[[Collector], bytes]


def _fast_format(encoder: Encoder) -> str | None:
    """``"text"`` or ``"om"`` when the lines written here are what ``encoder`` would write (text
    0.0.4/1.0 or OpenMetrics 1.0.0 with underscore or UTF-8 name escaping: our names are
    legacy-valid, so both leave them as they are); ``None`` for anything else."""
    func = getattr(encoder, "func", encoder)
    keywords: dict[str, Any] = getattr(encoder, "keywords", {}) or {}
    escaping = keywords.get("escaping", om_exposition.UNDERSCORES)
    if escaping not in (om_exposition.UNDERSCORES, om_exposition.ALLOWUTF8):
        return None
    if func is generate_latest:
        return "text"
    if func is om_exposition.generate_latest and keywords.get("version", "1.0.0") == "1.0.0":
        return "om"
    return None


class LiveAggregates:
    """The in-memory copy of one journal's aggregates (see the module docstring).

    Implements the reads :func:`~jitwatch.views.metrics.families_from` and
    :func:`~jitwatch.views.status.build_status` use, with :class:`~jitwatch.store.journal.Journal`'s
    signatures and results. ``version`` grows with every change a refresh found.
    """

    def __init__(self) -> None:
        self.rows: dict[StatKey, StatRow] = {}
        self.recompiles: dict[RecKey, RecompileRow] = {}
        self.backends = BackendLabels(())
        """The ``backend`` label values the sums are keyed by (a change rebuilds the copy)."""
        self.row_backends: set[str] = set()
        """Backend names of :attr:`rows` and :attr:`recompiles`."""
        self.sums = KernelSums()
        self.hist: dict[tuple[str, int, Phase], list[int]] = {}
        self.counter_values: dict[tuple[int, str], float] = {}
        self.workers: dict[int, WorkerRow] = {}
        self.label_counts = (0, 0)
        self.n_events = 0
        self.version = 0
        self.members_version = 0
        """Grows when a new aggregate row (a kernel, rank or phase not seen before) appears."""
        self._groups: dict[str, dict[Any, set[Any]]] = {g: {} for g in ("kernel", "serving", "bk", "recompile")}
        """Series key → the rows it sums, per group; ``bpr`` and ``bp`` keep their rows' values
        instead (``_bpr_*``, ``_bp_*``)."""
        self._by_name: dict[tuple[str, str], set[StatKey]] = {}  # (backend, kernel) → its rows, for /jit
        self._accs: dict[tuple[str, str], KernelAcc] = {}
        self._accs_dirty: set[tuple[str, str]] = set()
        self._accs_ordered: tuple[int, dict[tuple[str, str], KernelAcc]] | None = None
        self._bpr_seconds: dict[Any, dict[StatKey, float]] = {}
        self._bpr_hits: dict[Any, dict[StatKey, int]] = {}
        self._bp_counts: dict[Any, dict[StatKey, int]] = {}
        self._bp_last: dict[Any, dict[StatKey, float | None]] = {}
        self.events_cache: dict[tuple[Any, ...], list[Event]] = {}
        self.events_reader: Callable[..., list[Event]] | None = None
        self._stats: tuple[int, list[StatRow]] | None = None

    # ---------------------------------------------------------------- reads (Journal's signatures)
    def stats(self) -> list[StatRow]:
        if self._stats is None or self._stats[0] != self.version:
            self._stats = (self.version, [self.rows[k] for k in sorted(self.rows, key=_stat_order)])
        return self._stats[1]

    def recompile_stats(self) -> list[RecompileRow]:
        return [self.recompiles[k] for k in sorted(self.recompiles, key=_rec_order)]

    def histogram(self) -> dict[tuple[str, int, Phase], list[int]]:
        return self.hist

    def counters(self) -> dict[tuple[int, str], float]:
        return self.counter_values

    def latest_workers(self) -> dict[int, WorkerRow]:
        return self.workers

    def kernel_label_counts(self) -> tuple[int, int]:
        return self.label_counts

    def count_events(self) -> int:
        return self.n_events

    def events(
        self,
        *,
        kind: EventKind | Iterable[EventKind] | None = None,
        phase: Phase | None = None,
        kernel: str | None = None,
        rank: int | None = None,
        since: float | None = None,
        limit: int = 100,
        newest_first: bool = True,
        backend: str | None = None,
    ) -> list[Event]:
        """:meth:`Journal.events`, read through the live connection and kept until events that
        could change the answer (serving compiles, stalled requests) arrive or retention runs."""
        kinds = kind if kind is None or isinstance(kind, EventKind) else tuple(kind)
        key = (kinds, phase, kernel, rank, since, limit, newest_first, backend)
        hit = self.events_cache.get(key)
        if hit is None:
            if self.events_reader is None:
                raise RuntimeError("no journal to read events from")
            hit = self.events_reader(
                kind=kinds,
                phase=phase,
                kernel=kernel,
                rank=rank,
                since=since,
                limit=limit,
                newest_first=newest_first,
                backend=backend,
            )
            if len(self.events_cache) >= 64:
                self.events_cache.clear()
            self.events_cache[key] = hit
        return hit

    def kernel_accs(self) -> dict[tuple[str, str], KernelAcc]:
        """:func:`~jitwatch.views.status.kernel_accs` of :meth:`stats`, re-summed only for the
        kernels whose rows changed (each from all of its rows, in the same order)."""
        if self._accs_ordered is not None and self._accs_ordered[0] == self.version and not self._accs_dirty:
            return self._accs_ordered[1]
        for key in self._accs_dirty:
            rows = [self.rows[sk] for sk in sorted(self._by_name[key], key=_stat_order)]
            self._accs[key] = kernel_acc(key[0], key[1], rows)
        self._accs_dirty.clear()
        ordered = {key: self._accs[key] for key in sorted(self._accs)}
        self._accs_ordered = (self.version, ordered)
        return ordered

    def drop_events(self, new: set[tuple[str, str]]) -> None:
        """Forget the cached :meth:`events` answers that events of these (kind, phase) could change."""
        for key in list(self.events_cache):
            kinds, phase = key[0], key[1]
            wanted = (
                None if kinds is None else {kinds.value} if isinstance(kinds, EventKind) else {k.value for k in kinds}
            )
            if any((wanted is None or k in wanted) and (phase is None or phase.value == p) for k, p in new):
                del self.events_cache[key]

    # ---------------------------------------------------------------- updates
    def load(self, rows: list[StatRow], recompiles: list[RecompileRow], backends: BackendLabels) -> None:
        """Every row (a full rebuild): sums computed like a full build, backends by their label
        values (``backends``)."""
        self.rows = {_stat_key(r): r for r in rows}
        self.recompiles = {_rec_key(r): r for r in recompiles}
        self.backends = backends
        self.row_backends = {k[0] for k in self.rows} | {k[0] for k in self.recompiles}
        self.sums = kernel_sums(self.stats(), self.recompile_stats(), backends)
        for g in self._groups.values():
            g.clear()
        self._bpr_seconds.clear()
        self._bpr_hits.clear()
        self._by_name.clear()
        self._bp_counts.clear()
        self._bp_last.clear()
        for sk, row in self.rows.items():
            self._index(sk, row)
        self._accs = kernel_accs(self.stats())
        self._accs_dirty.clear()
        self._accs_ordered = None
        for rk, rrow in self.recompiles.items():
            self._groups["recompile"].setdefault(recompile_key(rrow, backends), set()).add(rk)
        self.members_version += 1

    def _index(self, sk: StatKey, row: StatRow) -> dict[str, Any]:
        """File ``sk`` under the series keys it feeds; returns ``{group: series key}``."""
        self._by_name.setdefault((sk[0], sk[1]), set()).add(sk)
        self._accs_dirty.add((sk[0], sk[1]))
        keys = stat_series_keys(row, self.backends)
        groups = self._groups
        for group, key in keys.items():
            members = groups.get(group)
            if members is not None:
                members.setdefault(key, set()).add(sk)
        bpr = keys.get("bpr")
        if bpr is not None:  # the big group: its values kept apart, summed at C speed
            self._bpr_seconds.setdefault(bpr, {})[sk] = row.seconds
            self._bpr_hits.setdefault(bpr, {})[sk] = row.cache_hits
        bp = keys.get("bp")
        if bp is not None:  # as big: every compile row of a backend and phase
            self._bp_counts.setdefault(bp, {})[sk] = row.count
            self._bp_last.setdefault(bp, {})[sk] = row.last_ts
        return keys

    def update(self, rows: list[StatRow], recompiles: list[RecompileRow]) -> dict[str, set[Any]]:
        """Replace the rows given (each a key's current totals); re-sum the series they feed
        (their backends must have the label values of :attr:`backends`: else :meth:`load`).
        Returns the changed series keys per group (``kernel``, ``serving``, ``bpr``, ``bp``, ``bk``,
        ``recompile``)."""
        dirty: dict[str, set[Any]] = {g: set() for g in (*STAT_GROUPS, "recompile")}
        for row in rows:
            sk = _stat_key(row)
            old = self.rows.get(sk)
            if old == row:
                continue
            if old is None:
                self.members_version += 1
                self.row_backends.add(row.backend)
            self.rows[sk] = row
            for group, key in self._index(sk, row).items():
                dirty[group].add(key)
        for rrow in recompiles:
            rk = _rec_key(rrow)
            if self.recompiles.get(rk) == rrow:
                continue
            self.recompiles[rk] = rrow
            self.row_backends.add(rrow.backend)
            skey = recompile_key(rrow, self.backends)
            self._groups["recompile"].setdefault(skey, set()).add(rk)
            dirty["recompile"].add(skey)
        self._resum(dirty)
        return dirty

    def _resum(self, dirty: dict[str, set[Any]]) -> None:
        """Recompute the dirty series from all of their rows, as
        :func:`~jitwatch.views.metrics.kernel_sums` does (exact counts, ``math.fsum`` seconds)."""
        rows, sums, groups = self.rows, self.sums, self._groups
        for key in dirty["kernel"]:
            sum_kernel_group(sums, key, [rows[sk] for sk in groups["kernel"][key]])
        for key in dirty["serving"]:
            sum_serving_group(sums, key, (rows[sk].count for sk in groups["serving"][key]))
        for key in dirty["bpr"]:
            sum_rank_group(sums, key, self._bpr_hits[key].values(), self._bpr_seconds[key].values())
        for key in dirty["bp"]:
            sum_phase_group(sums, key, self._bp_counts[key].values(), self._bp_last[key].values())
        for key in dirty["bk"]:
            sum_label_group(sums, key, [rows[sk] for sk in groups["bk"][key]])
        for key in dirty["recompile"]:
            sum_recompile_group(sums, key, (self.recompiles[rk] for rk in groups["recompile"][key]))


class _KernelFamily:
    """The sample lines of one per-kernel family: one per series, in series order; a changed
    value replaces its line in place, and the body is joined again only after a change."""

    __slots__ = ("joined", "labels", "lines", "name", "position")

    def __init__(self, name: str) -> None:
        self.name = name
        self.labels = BY_NAME[name].labels
        self.lines: list[bytes] = []
        self.position: dict[Any, int] = {}  # series key → index in lines (keys sorted)
        self.joined: bytes | None = b""

    def update(self, changes: dict[Any, float | None]) -> None:
        """Set (a value) or remove (``None``) the series of ``changes``."""
        added: dict[Any, bytes] = {}
        removed: set[Any] = set()
        for key, value in changes.items():
            pos = self.position.get(key)
            if value is None:
                if pos is not None:
                    removed.add(key)
                continue
            line = _line(self.name, zip(self.labels, key, strict=True), value)
            if pos is None:
                added[key] = line
            elif self.lines[pos] != line:
                self.lines[pos] = line
                self.joined = None
        if added or removed:  # the key set changed: re-sort (rare: a new kernel, rank or phase)
            merged = {k: self.lines[i] for k, i in self.position.items() if k not in removed}
            merged.update(added)
            order = sorted(merged)
            self.lines = [merged[k] for k in order]
            self.position = {k: i for i, k in enumerate(order)}
            self.joined = None

    def body(self) -> bytes:
        if self.joined is None:
            self.joined = b"".join(self.lines)
        return self.joined


class _Reopen(Exception):
    """Open the journal again and rebuild: its schema changed since the live connection opened it
    (a migration), or its file changed without a commit (copied over in place)."""


VERIFY_INTERVAL_S = 2.0
"""Seconds between two :meth:`~jitwatch.store.journal.Journal.verify_pages` of a long-lived
connection (the live copy's, the probes'): how long a journal damaged or copied over in place
(no commit SQLite sees) can go unnoticed."""


def _open_follower(journal_dir: Path) -> Journal | None:
    """A read-only :class:`Journal` worth keeping open to follow ``journal_dir``, or ``None``
    (missing, not a regular file, unreadable, or only readable ``immutable``)."""
    try:
        journal = Journal(journal_dir, readonly=True)
    except (OSError, JournalCorruptError, JournalVersionError, sqlite3.Error, ValueError) as exc:
        log.debug("jitwatch: journal in %s not readable: %s", journal_dir, exc)
        return None
    if journal.immutable:  # never sees later writes: not worth keeping
        journal.close()
        return None
    return journal


def _regular_file_id(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path`` when it is a regular file (not a link, FIFO…), else ``None``."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


class _Probe:
    """``/readyz``'s view of one journal: each rank's latest worker, over a read-only connection of
    its own, so that probes never wait behind ``/metrics`` or ``/jit`` (a first scrape computing
    specialization coverage holds the live copy's lock for seconds).

    A probe costs one ``lstat`` and ``PRAGMA data_version`` when nothing was committed; the workers
    table is read again after a commit (rows unchanged since are not parsed again) and, with the
    page cache dropped, every :data:`VERIFY_INTERVAL_S` (:meth:`Journal.verify_pages`)."""

    def __init__(self, journal_dir: Path) -> None:
        self.journal_dir = journal_dir
        self._lock = threading.Lock()
        self._journal: Journal | None = None
        self._workers: dict[int, WorkerRow] | None = None
        self._data_version: int | None = None
        self._verified_at = -VERIFY_INTERVAL_S

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._journal is not None:
            try:
                self._journal.close()
            except sqlite3.Error:
                pass
        self._journal, self._workers, self._data_version = None, None, None

    def latest_workers(self) -> dict[int, WorkerRow] | None:
        """:meth:`Journal.latest_workers` as of now, or ``None`` when the journal cannot be
        followed (missing, replaced by a link, unreadable, damaged): the caller opens it to say why."""
        with self._lock:
            file_id = _regular_file_id(self.journal_dir / JOURNAL_FILE)
            if file_id is None:
                self._drop()
                return None
            if self._journal is None or self._journal.file_id != file_id:
                self._drop()
                self._journal = _open_follower(self.journal_dir)
                if self._journal is None:
                    return None
            journal = self._journal
            try:
                now = time.monotonic()
                if now - self._verified_at >= VERIFY_INTERVAL_S:
                    version, _ = journal.verify_pages()  # raises on damage; the cache is dropped either way
                    self._verified_at = now
                    self._workers = None  # read again from the file
                else:
                    version = journal.data_version()
                if self._workers is None or version != self._data_version:
                    with journal.snapshot():
                        self._workers = journal.latest_workers()
                        self._data_version = journal.data_version()
                return self._workers
            except (sqlite3.Error, ValueError) as exc:
                log.warning("jitwatch: journal in %s unreadable for /readyz: %s", self.journal_dir, exc)
                self._drop()
                return None
            except BaseException:
                self._drop()
                raise


class LiveJournal:
    """``/metrics`` and ``/jit`` of one journal directory from :class:`LiveAggregates`.

    Thread-safe (one lock; a request waits for a refresh in progress instead of starting its own).
    When the journal is missing or unreadable nothing is kept: ``/metrics`` is
    :func:`~jitwatch.views.metrics.render_uncached` (``jitwatch_journal_up 0``) and ``/jit`` the
    caller's own path.
    """

    def __init__(self, journal_dir: str | os.PathLike[str]) -> None:
        self.journal_dir = Path(journal_dir)
        self._lock = threading.Lock()
        self._journal: Journal | None = None
        self._file: tuple[int, int] | None = None
        self._agg: LiveAggregates | None = None
        self._data_version: int | None = None
        self._schema: int | None = None
        self._watermark = 0
        self._retired = 0.0
        self._version = 0
        """The last :attr:`LiveAggregates.version` (a rebuilt copy continues from it)."""
        self._digest: int | None = None
        """:meth:`Journal.small_tables_digest` of the snapshot the copy was last refreshed from."""
        self._verified_at = -VERIFY_INTERVAL_S
        """``time.monotonic()`` of the last :meth:`Journal.verify_pages` (at most every
        :data:`VERIFY_INTERVAL_S`)."""
        self._probe = _Probe(self.journal_dir)
        self._families: dict[str, _KernelFamily] = {}
        self._headers: dict[tuple[str, str, str, str, str], bytes] = {}
        self._chunks: dict[str, tuple[int, list[tuple[str, bytes]]]] = {}
        self._family_chunks: dict[str, dict[str, tuple[list[Any], bytes]]] = {}
        self._coverage_text: tuple[tuple[str, int], bytes] | None = None
        self._info_text: dict[str, tuple[tuple[int, tuple[int, ...]], bytes]] = {}
        """Per format: ``jitwatch_worker_info`` formatted for (aggregates version, exited ranks)."""
        self._coverage: tuple[CoverageReport, int, dict[str, float]] | None = None
        self._coverage_gen = 0
        self._build_info: list[Metric] | None = None
        self._lines: dict[tuple[str, tuple[tuple[str, str], ...], float], bytes] = {}
        self._parts: dict[tuple[int, str | None, int], StatusParts] = {}
        self.rebuilds = 0
        """Full reads of the aggregates (first request, replaced file, migration, missed deletes)."""
        self.refreshes = 0
        """Incremental refreshes that found the journal changed."""

    # ---------------------------------------------------------------- journal state
    def close(self) -> None:
        with self._lock:
            self._drop()
        self._probe.close()

    def _drop(self) -> None:
        if self._journal is not None:
            try:
                self._journal.close()
            except sqlite3.Error:
                pass
        self._journal, self._file, self._agg, self._data_version = None, None, None, None
        self._chunks.clear()
        self._family_chunks.clear()
        self._parts.clear()

    def _refresh(self) -> LiveAggregates | None:
        """Bring the copy up to date (call with the lock held); ``None`` when the journal cannot
        be followed (missing, unreadable, immutable): the caller answers without the copy."""
        file_id = _regular_file_id(self.journal_dir / JOURNAL_FILE)
        if file_id is None:  # missing, or a link or FIFO (Journal's own checks refuse those)
            self._drop()
            return None
        for attempt in range(2):
            if self._journal is None or file_id != self._file:
                self._drop()
                opened = _open_follower(self.journal_dir)
                if opened is None:
                    return None
                self._journal, self._file = opened, opened.file_id
            journal = self._journal
            try:
                now = time.monotonic()
                if now - self._verified_at >= VERIFY_INTERVAL_S:  # page cache dropped, file re-read
                    version, digest = journal.verify_pages()
                    self._verified_at = now
                    if self._agg is not None and version == self._data_version:
                        if digest == self._digest:
                            return self._agg
                        log.warning(
                            "jitwatch: journal in %s changed without a commit (copied over in place?);"
                            " reading it again",
                            self.journal_dir,
                        )
                        raise _Reopen  # rebuild the copy from the file as it is now
                else:
                    version = journal.data_version()
                    if self._agg is not None and version == self._data_version:
                        return self._agg
                self._apply(journal)
                self._data_version = version
            except _Reopen:  # a migration, or the file changed in place: open it again, rebuild
                self._drop()
                if attempt:
                    return None
                continue
            except (sqlite3.Error, ValueError) as exc:
                log.warning("jitwatch: journal in %s unreadable for live aggregates: %s", self.journal_dir, exc)
                self._drop()
                return None
            except BaseException:  # anything else may have left the copy half-updated: never reuse it
                self._drop()
                raise
            return self._agg
        return None

    def _apply(self, journal: Journal) -> None:
        with journal.snapshot():
            schema = journal.schema_cookie()
            if (schema != self._schema) if self._agg is not None else journal.tables_changed():
                raise _Reopen  # a migration since this connection opened the file
            watermark = journal.event_watermark()
            counters = journal.counters()
            retired = counters.get((-1, "retired_events"), 0.0)
            agg = self._agg
            full = agg is None or schema != self._schema or watermark < self._watermark
            if agg is not None and not full and retired != self._retired:
                # retention ran: did it remove events this reader has not seen (their keys unknown)?
                full = journal.count_events_after(self._watermark) != watermark - self._watermark
            hist, workers = journal.histogram(), journal.latest_workers()
            if agg is not None and not full:
                rows, recompiles = journal.stats(self._watermark), journal.recompile_stats(self._watermark)
                stat_backends = agg.row_backends.union(r.backend for r in rows).union(r.backend for r in recompiles)
                # a backend name newly named (or displaced) re-keys every series: rebuild
                full = BackendLabels(backend_names(stat_backends, hist, counters, workers)) != agg.backends
            if full or agg is None:
                agg = LiveAggregates()
                agg.version = self._version  # versions key the caches: never reused after a rebuild
                self._chunks.clear()
                self._parts.clear()
                rows, recompiles = journal.stats(), journal.recompile_stats()
                stat_backends = {r.backend for r in rows}.union(r.backend for r in recompiles)
                agg.load(rows, recompiles, BackendLabels(backend_names(stat_backends, hist, counters, workers)))
                agg.n_events = journal.count_events()
                self._families = {name: _KernelFamily(name) for name in sorted(KERNEL_FAMILIES)}
                dirty = None
                self.rebuilds += 1
            else:
                kinds = journal.new_event_kinds(self._watermark) if watermark != self._watermark else set()
                dirty = agg.update(rows, recompiles)
                if retired != self._retired:
                    agg.n_events = journal.count_events()
                    agg.events_cache.clear()
                else:
                    agg.n_events += watermark - self._watermark
                    agg.drop_events(kinds)
                self.refreshes += 1
            agg.counter_values = counters
            agg.hist = hist
            agg.workers = workers
            agg.label_counts = journal.kernel_label_counts()
            digest = journal.small_tables_digest()
        agg.events_reader = journal.events
        agg.version += 1
        self._version = agg.version
        self._agg, self._schema, self._watermark, self._retired = agg, schema, watermark, retired
        self._digest = digest
        self._update_lines(agg, dirty)

    def _update_lines(self, agg: LiveAggregates, dirty: dict[str, set[Any]] | None) -> None:
        series = agg.sums.series()
        for name, fam in self._families.items():
            values, present = series[name]
            keys: Iterable[Any] = values if dirty is None else dirty[_GROUP_OF[name]]
            changes: dict[Any, float | None] = {}
            for key in keys:
                ok = key in values and (present is None or present.get(key))
                changes[key] = values[key] if ok else None
            fam.update(changes)

    # ---------------------------------------------------------------- /metrics
    def _header(self, metric: Metric, fmt: str, encoder: Encoder) -> bytes:
        key = (metric.name, metric.type, metric.documentation, metric.unit, fmt)
        header = self._headers.get(key)
        if header is None:
            empty = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            header = encoder(_One([empty]))
            if fmt == "om" and header.endswith(_EOF):
                header = header[: -len(_EOF)]
            self._headers[key] = header
        return header

    def _coverage_ratios(self, agg: LiveAggregates, journal: Journal) -> dict[str, float]:
        report = guarded_coverage(journal, background=True)
        if report is None:
            return {}
        if self._coverage is None or self._coverage[0] is not report or self._coverage[1] != agg.members_version:
            labels = coverage_labels(agg.rows.values())
            self._coverage = (report, agg.members_version, coverage_ratio_samples(report, labels))
            self._coverage_gen += 1
        return self._coverage[2]

    def _coverage_chunk(self, coverage: dict[str, float], fmt: str, encoder: Encoder) -> bytes:
        key = (fmt, self._coverage_gen)
        if self._coverage_text is None or self._coverage_text[0] != key:
            self._coverage_text = (key, self._format(coverage_family(coverage), fmt, encoder))
        return self._coverage_text[1]

    def _worker_info_chunk(self, agg: LiveAggregates, exited: dict[int, int], fmt: str, encoder: Encoder) -> bytes:
        """``jitwatch_worker_info`` formatted, again only when the workers or the exited ranks changed."""
        key = (agg.version, tuple(exited))
        cached = self._info_text.get(fmt)
        if cached is None or cached[0] != key:
            cached = self._info_text[fmt] = (key, self._format(worker_info_family(agg.workers, exited), fmt, encoder))
        return cached[1]

    def _format(self, metric: Metric, fmt: str, encoder: Encoder) -> bytes:
        family = _KERNEL_METRIC_NAMES.get(metric.name)
        if family is not None:
            return self._header(metric, fmt, encoder) + self._families[family].body()
        parts = [self._header(metric, fmt, encoder)]
        cache = self._lines
        for s in metric.samples:
            if s.timestamp is not None or s.exemplar is not None or s.native_histogram is not None:
                raise ValueError(f"sample {s.name} needs prometheus_client's encoder")
            key = (s.name, tuple(s.labels.items()), s.value)
            line = cache.get(key)
            if line is None:
                if len(cache) >= _LINE_CACHE_MAX:
                    cache.clear()
                line = cache[key] = _line(s.name, s.labels.items(), s.value)
            parts.append(line)
        return b"".join(parts)

    def render(self, accept: str | None = None, stale_after: float = DEFAULT_STALE_SECONDS) -> tuple[bytes, str]:
        """One scrape: ``(body, content_type)`` for the ``Accept`` header, byte-identical to
        :func:`~jitwatch.views.metrics.render_uncached` (see the module docstring); in-flight
        compiles of workers silent for more than ``stale_after`` seconds are not counted
        (:func:`~jitwatch.views.metrics.inflight_families`)."""
        try:
            encoder, content_type = choose_encoder(accept or "")
        except Exception as exc:  # noqa: BLE001 - a malformed Accept (e.g. "version=abc") must not be a 500
            log.debug("jitwatch: unusable Accept header %r (%s); answering text 0.0.4", accept, exc)
            encoder, content_type = generate_latest, CONTENT_TYPE_PLAIN_0_0_4
        with self._lock:
            agg = self._refresh()
            journal = self._journal
            if agg is None or journal is None:
                return render_uncached(self.journal_dir, accept, stale_after)
            try:
                return self._render(agg, journal, encoder, content_type, stale_after)
            except (sqlite3.Error, ValueError) as exc:
                log.warning("jitwatch: journal in %s unreadable for /metrics: %s", self.journal_dir, exc)
                self._drop()
        return render_uncached(self.journal_dir, accept, stale_after)

    def _render(
        self, agg: LiveAggregates, journal: Journal, encoder: Encoder, content_type: str, stale_after: float
    ) -> tuple[bytes, str]:
        now = time.time()
        exited = exited_ranks(agg.workers)  # the worker processes, read once per scrape (pidfds, /proc)
        coverage = self._coverage_ratios(agg, journal)
        fmt = _fast_format(encoder)
        if self._build_info is None:
            self._build_info = [build_info_family()]
        up = journal_up_family(True)
        if fmt is None:  # another exposition: prometheus_client encodes families built from memory
            families = families_from(
                agg, agg.sums, coverage, backends=agg.backends, now=now, stale_after=stale_after, exited=exited
            )
            return encoder(_One([up, *families, *self._build_info])), content_type
        cached = self._chunks.get(fmt)
        if cached is None or cached[0] != agg.version:
            # Coverage (a family per kernel, changing only with the background report) is formatted
            # apart; every other family is formatted again only when its samples changed.
            families = families_from(agg, agg.sums, {}, backends=agg.backends, now=now, kernel_series=False, exited={})
            previous = self._family_chunks.setdefault(fmt, {})
            chunks: list[tuple[str, bytes]] = []
            for m in families:
                if m.name in (_COVERAGE, _WORKER_INFO_NAME):  # formatted at each scrape, below
                    chunks.append((m.name, b""))
                    continue
                if m.name in _KERNEL_METRIC_NAMES:  # their own line cache
                    chunks.append((m.name, self._format(m, fmt, encoder)))
                    continue
                old = previous.get(m.name)
                if old is None or old[0] != m.samples:
                    old = previous[m.name] = (m.samples, self._format(m, fmt, encoder))
                chunks.append((m.name, old[1]))
            self._chunks[fmt] = cached = (agg.version, chunks)
        cov = self._coverage_chunk(coverage, fmt, encoder)
        clock = {m.name: m for m in (*inflight_families(agg.workers, now, stale_after, exited), skipped_rows_family())}
        info = self._worker_info_chunk(agg, exited, fmt, encoder)
        body = [self._format(up, fmt, encoder)]
        for name, chunk in cached[1]:
            if name in clock:
                chunk = self._format(clock[name], fmt, encoder)
            elif name == _COVERAGE:
                chunk = cov
            elif name == _WORKER_INFO_NAME:
                chunk = info
            body.append(chunk)
        body.append(self._format(self._build_info[0], fmt, encoder))
        if fmt == "om":
            body.append(_EOF)
        return b"".join(body), content_type

    # ---------------------------------------------------------------- /readyz
    def readiness(self, *, stale_after: float, now: float | None = None) -> Readiness | None:
        """``/readyz``: :func:`~jitwatch.views.status.readiness` of each rank's latest worker, read
        through the probes' own connection (:class:`_Probe`: never waits for this copy's lock, a
        refresh or coverage); staleness is judged at ``now`` (default ``time.time()``). ``None``
        when the journal cannot be followed (the caller opens it to say why)."""
        workers = self._probe.latest_workers()
        if workers is None:
            return None
        return readiness_of(workers, now=now, stale_after=stale_after)

    # ---------------------------------------------------------------- /jit
    def status(
        self,
        *,
        kernels_limit: int = DEFAULT_KERNELS_LIMIT,
        stale_after: float,
        backend: str | None = None,
        now: float | None = None,
    ) -> JitStatus | None:
        """The ``/jit`` document from memory (:func:`~jitwatch.views.status.build_status`), or
        ``None`` when the journal cannot be followed (the caller builds it from the journal).
        Raises ``sqlite3.Error`` when a read fails mid-way."""
        with self._lock:
            agg = self._refresh()
            journal = self._journal
            if agg is None or journal is None:
                return None
            coverage = None
            if backend in (None, "triton"):
                report = guarded_coverage(journal, background=True)
                coverage = [] if report is None else report.kernels
            key = (agg.version, backend, kernels_limit)
            parts = self._parts.get(key)
            if parts is None:
                if len(self._parts) >= 16 or any(k[0] != agg.version for k in self._parts):
                    self._parts.clear()
                parts = self._parts[key] = status_parts(
                    agg,
                    kernels_limit=kernels_limit,
                    backend=backend,
                    accs=agg.kernel_accs(),
                    journal_dir=self.journal_dir,
                )
            return build_status(
                agg,
                now=now,
                kernels_limit=kernels_limit,
                stale_after=stale_after,
                backend=backend,
                coverage=coverage,
                parts=parts,
            )


def _prometheus_name(name: str) -> str:
    spec = BY_NAME[name]
    return name.removesuffix("_total") if spec.type == "counter" else name


_KERNEL_METRIC_NAMES = {_prometheus_name(n): n for n in KERNEL_FAMILIES}
"""prometheus_client's family name (a counter's without ``_total``) → contract name."""


_LIVE: dict[Path, LiveJournal] = {}
_LIVE_LOCK = threading.Lock()


def live(journal_dir: str | os.PathLike[str]) -> LiveJournal:
    """The process's :class:`LiveJournal` for ``journal_dir`` (one per directory)."""
    key = Path(journal_dir).resolve()
    with _LIVE_LOCK:
        r = _LIVE.get(key)
        if r is None:
            r = _LIVE[key] = LiveJournal(key)
        return r
