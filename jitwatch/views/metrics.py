"""Prometheus metrics built from the journal: a custom ``prometheus_client`` collector.

The sidecar answers ``GET /metrics`` by opening the journal read-only and turning its aggregates
(:meth:`~jitwatch.store.journal.Journal.kernel_stats`, ``histogram``, ``counters``, ``latest_workers``,
``kernel_label_counts``, ``count_events``) into metric families. The only thing kept between
scrapes is the last body per ``Accept`` header, reused while the journal is unchanged
(:class:`MetricsRenderer`); prometheus_client's multiprocess mode is not used (vLLM sets its own
``PROMETHEUS_MULTIPROC_DIR``; see ``docs/metrics.md``). Counters stay monotonic because the
aggregates are never decremented, even when retention retires old events.

Every family exported here is declared in :data:`jitwatch.views.contract.METRICS` (names, types,
labels); a test scrapes a real journal and checks there is nothing more and nothing less.
When the journal is missing or unreadable a scrape holds ``jitwatch_journal_up 0`` and nothing
else (never an HTTP 500).

Exposition formats: Prometheus text 0.0.4 by default, OpenMetrics 1.0 when the ``Accept`` header
asks for ``application/openmetrics-text`` (negotiated by
``prometheus_client.exposition.choose_encoder``, prometheus_client ≥ 0.20).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import sqlite3
import stat
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import quote

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from jitwatch.core.events import Phase
from jitwatch.errors import JournalCorruptError, JournalVersionError
from jitwatch.store.journal import (
    COMPILE_DURATION_BUCKETS,
    JOURNAL_FILE,
    OTHER_KERNEL,
    REQUESTS_DELAYED_COUNTER,
    Journal,
)
from jitwatch.views.contract import BY_NAME
from jitwatch.views.diagnosis import inflight_of
from jitwatch.views.status import backend_infos

log = logging.getLogger(__name__)

_RETIRED_RANK = -1
"""``Journal.prune`` books retired events on this pseudo-rank (journal-wide counter)."""


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""
    except Exception:  # noqa: BLE001 - broken metadata must not break a scrape
        return ""


def build_info_labels() -> dict[str, str]:
    """Label values of ``jitwatch_build_info``: installed versions (``""`` when absent).

    Read with :mod:`importlib.metadata` in the sidecar's environment (which may differ from the
    workers'; the workers' Triton version is in ``/jit`` under each rank).
    """
    return {
        "version": _version("jitwatch"),
        "triton_version": _version("triton"),
        "torch_version": _version("torch"),
        "vllm_version": _version("vllm"),
        "python_version": platform.python_version(),
    }


def _counter(name: str) -> CounterMetricFamily:
    spec = BY_NAME[name]
    return CounterMetricFamily(name, spec.help, labels=list(spec.labels), unit=spec.unit)


KernelKey = tuple[str, str, str]
"""(backend, kernel label, phase) — the labels of every per-kernel family (ranks summed)."""


def _per_kernel_counter(
    name: str, values: dict[KernelKey, float], *, present: dict[KernelKey, float]
) -> CounterMetricFamily:
    """Counter family over (backend, kernel label, phase), with a series only where
    ``present`` is non-zero (a kernel that only autotuned has no compile series, and vice versa)."""
    fam = _counter(name)
    for key in sorted(values):
        if present[key]:
            fam.add_metric(list(key), values[key])
    return fam


def _gauge(name: str) -> GaugeMetricFamily:
    spec = BY_NAME[name]
    return GaugeMetricFamily(name, spec.help, labels=list(spec.labels), unit=spec.unit)


def _info(name: str) -> InfoMetricFamily:
    spec = BY_NAME[name]
    # InfoMetricFamily appends "_info" to the sample name itself.
    return InfoMetricFamily(name.removesuffix("_info"), spec.help, labels=[])


def _opt(value: object) -> str:
    return "" if value is None else str(value)


def _coverage_ratios(journal: Journal, labels: dict[str, str]) -> dict[str, float]:
    """``jitwatch.views.coverage.journal_coverage_ratios`` (with the report cached between scrapes, see
    :func:`jitwatch.views.status.cached_coverage`); a failure there costs only this family."""
    from jitwatch.views.coverage import coverage_ratio_samples
    from jitwatch.views.status import cached_coverage

    try:
        return coverage_ratio_samples(cached_coverage(journal), labels)
    except sqlite3.Error:
        raise
    except Exception as exc:  # noqa: BLE001 - an unparsable key must not take /metrics down
        log.warning("jitwatch: specialization coverage failed: %s: %s", type(exc).__name__, exc)
        return {}


def journal_families(journal: Journal) -> list[Metric]:
    """Every journal-derived family (``jitwatch_journal_up`` and build info excluded).

    Raises ``sqlite3.Error`` when the journal cannot be read; callers turn that into
    ``jitwatch_journal_up 0``.
    """
    stats = journal.stats()
    hist = journal.histogram()
    counters = journal.counters()
    hook_errors = journal.backend_counter("hook_errors")
    workers = journal.latest_workers()
    named, folded = journal.kernel_label_counts()
    n_events = journal.count_events()

    # ---- per (backend, kernel label, phase, rank, kind): rows folded into "_other" are summed.
    sums: dict[str, dict[KernelKey, float]] = {
        kind: defaultdict(float)
        for kind in ("compile", "autotune", "graph_capture", "compile_s", "autotune_s", "graph_capture_s")
    }
    last_ts: dict[KernelKey, float] = {}
    serving: dict[tuple[str, str, str], float] = defaultdict(float)  # (backend, kernel label, rank)
    hits: dict[tuple[str, str, str], float] = defaultdict(float)
    hist_sum: dict[tuple[str, str, str], float] = defaultdict(float)
    for row in stats:
        label = row.label or OTHER_KERNEL
        key = (row.backend, label, row.phase.value)
        if row.kind not in ("compile", "autotune", "graph_capture"):
            continue
        sums[row.kind][key] += row.count
        sums[row.kind + "_s"][key] += row.seconds
        if row.kind == "compile":
            if row.phase is Phase.SERVING:
                serving[(row.backend, label, str(row.rank))] += row.count
            if row.last_ts is not None:
                last_ts[key] = max(last_ts.get(key, row.last_ts), row.last_ts)
            bpr = (row.backend, row.phase.value, str(row.rank))
            hits[bpr] += row.cache_hits
            hist_sum[bpr] += row.seconds

    out: list[Metric] = []

    compiles = sums["compile"]
    out.append(_per_kernel_counter("jitwatch_compiles_total", compiles, present=compiles))
    out.append(_per_kernel_counter("jitwatch_compile_seconds_total", sums["compile_s"], present=compiles))
    fam = _counter("jitwatch_serving_compiles_total")
    for skey in sorted(serving):
        if serving[skey]:
            fam.add_metric(list(skey), serving[skey])
    out.append(fam)

    fam = _counter("jitwatch_compile_disk_cache_hits_total")
    for bpr in sorted(hist_sum):
        fam.add_metric(list(bpr), hits[bpr])
    out.append(fam)

    spec = BY_NAME["jitwatch_compile_duration_seconds"]
    hfam = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels), unit=spec.unit)
    for (backend, rank, phase), counts in sorted(hist.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2].value)):
        buckets: list[tuple[str, float]] = []
        cumulative = 0
        for edge, n in zip((*COMPILE_DURATION_BUCKETS, float("inf")), counts, strict=True):
            cumulative += n
            buckets.append((floatToGoString(edge), float(cumulative)))
        bpr = (backend, phase.value, str(rank))
        hfam.add_metric(list(bpr), buckets, hist_sum.get(bpr, 0.0))
    out.append(hfam)

    spec = BY_NAME["jitwatch_request_compile_seconds"]
    rfam = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels), unit=spec.unit)
    for rank, (rcounts, rsum) in sorted(journal.request_histogram().items()):
        rbuckets: list[tuple[str, float]] = []
        cumulative = 0
        for edge, n in zip((*COMPILE_DURATION_BUCKETS, float("inf")), rcounts, strict=True):
            cumulative += n
            rbuckets.append((floatToGoString(edge), float(cumulative)))
        rfam.add_metric([str(rank)], rbuckets, rsum)
    out.append(rfam)
    fam_d = _counter("jitwatch_requests_delayed_total")
    for (backend, rank), value in sorted(journal.backend_counter(REQUESTS_DELAYED_COUNTER).items()):
        fam_d.add_metric([backend, str(rank)], value)
    out.append(fam_d)

    fam_g = _gauge("jitwatch_last_compile_timestamp_seconds")
    for key in sorted(last_ts):
        fam_g.add_metric(list(key), last_ts[key])
    out.append(fam_g)

    autotune = sums["autotune"]
    out.append(_per_kernel_counter("jitwatch_autotune_runs_total", autotune, present=autotune))
    out.append(_per_kernel_counter("jitwatch_autotune_seconds_total", sums["autotune_s"], present=autotune))
    captures = sums["graph_capture"]
    out.append(_per_kernel_counter("jitwatch_graph_captures_total", captures, present=captures))
    out.append(_per_kernel_counter("jitwatch_graph_capture_seconds_total", sums["graph_capture_s"], present=captures))

    # ---- recompiles by reason class (journal revision 3): "_other" kernels summed.
    recompiles: dict[tuple[str, str, str, str, str], float] = defaultdict(float)
    recompile_s: dict[tuple[str, str, str, str, str], float] = defaultdict(float)
    for rrow in journal.recompile_stats():
        rkey = (rrow.backend, rrow.label or OTHER_KERNEL, rrow.reason_class, rrow.phase.value, str(rrow.rank))
        recompiles[rkey] += rrow.count
        recompile_s[rkey] += rrow.seconds
    fam = _counter("jitwatch_recompiles_total")
    fam_s = _counter("jitwatch_recompile_seconds_total")
    for rkey in sorted(recompiles):
        fam.add_metric(list(rkey), recompiles[rkey])
        fam_s.add_metric(list(rkey), recompile_s[rkey])
    out += [fam, fam_s]

    # ---- per rank: the latest worker of each rank.
    complete = _gauge("jitwatch_warmup_complete")
    w_start = _gauge("jitwatch_warmup_start_timestamp_seconds")
    w_end = _gauge("jitwatch_warmup_complete_timestamp_seconds")
    w_dur = _gauge("jitwatch_warmup_duration_seconds")
    w_compiles = _gauge("jitwatch_warmup_compiles")
    first = _gauge("jitwatch_first_request_latency_seconds")
    started = _gauge("jitwatch_worker_start_timestamp_seconds")
    last_seen = _gauge("jitwatch_worker_last_seen_timestamp_seconds")
    info = _info("jitwatch_worker_info")
    backend_info = _info("jitwatch_backend_info")
    inflight_n = _gauge("jitwatch_inflight_compiles")
    inflight_age = _gauge("jitwatch_inflight_compile_age_seconds")
    deadline = _gauge("jitwatch_collective_deadline_seconds")
    now = time.time()
    for rank in sorted(workers):
        w = workers[rank]
        r = [str(rank)]
        running = inflight_of(w.attrs, now, last_seen=w.last_ts)  # a dead worker's list is not current
        inflight_n.add_metric(r, float(len(running)))
        inflight_age.add_metric(r, running[0].age_s if running else 0.0)
        d = w.attrs.get("collective_deadline_s")
        if isinstance(d, int | float) and not isinstance(d, bool):
            deadline.add_metric(r, float(d))
        complete.add_metric(r, 1.0 if w.state is Phase.SERVING else 0.0)
        started.add_metric(r, w.started_ts)
        last_seen.add_metric(r, w.last_ts)
        if w.warmup_start_ts is not None:
            w_start.add_metric(r, w.warmup_start_ts)
        if w.warmup_end_ts is not None:
            w_end.add_metric(r, w.warmup_end_ts)
        if w.warmup_duration_s is not None:
            w_dur.add_metric(r, w.warmup_duration_s)
        if w.warmup_compiles is not None:
            w_compiles.add_metric(r, float(w.warmup_compiles))
        if w.first_request_s is not None:
            first.add_metric(r, w.first_request_s)
        info.add_metric(
            [],
            {
                "rank": str(rank),
                "tp_rank": _opt(w.attrs.get("tp_rank")),
                "pp_rank": _opt(w.attrs.get("pp_rank")),
                "dp_rank": _opt(w.attrs.get("dp_rank")),
                "mode": _opt(w.mode),
                "state": w.state.value,
            },
        )
        for b in backend_infos(w.attrs):
            backend_info.add_metric(
                [], {"rank": str(rank), "backend": b.name, "version": _opt(b.version), "state": b.state}
            )
    out += [complete, w_start, w_end, w_dur, w_compiles, first, started, last_seen, info, backend_info]
    out += [inflight_n, inflight_age, deadline]

    # ---- specialization coverage (jitwatch.views.coverage), per kernel label; "_other" pooled.
    cov = _gauge("jitwatch_specialization_coverage_ratio")
    kernel_labels = {row.kernel: row.label for row in stats if row.backend == "triton"}
    for label, ratio in sorted(_coverage_ratios(journal, kernel_labels).items()):
        cov.add_metric(["triton", label], ratio)
    out.append(cov)

    # ---- counters: every rank seen anywhere gets a (possibly 0) series, so increase() works.
    # hook errors: every (backend, rank) of a worker's backends, plus any counted.
    ranks = {r for r in workers} | {r for (r, _name) in counters if r != _RETIRED_RANK}
    pairs = set(hook_errors) | {(b.name, rank) for rank, w in workers.items() for b in backend_infos(w.attrs)}
    errors = _counter("jitwatch_hook_errors_total")
    for backend, rank in sorted(pairs):
        errors.add_metric([backend, str(rank)], hook_errors.get((backend, rank), 0.0))
    dropped = _counter("jitwatch_dropped_events_total")
    for rank in sorted(ranks):
        dropped.add_metric([str(rank)], counters.get((rank, "dropped_events"), 0.0))
    out += [errors, dropped]
    lookups = _counter("jitwatch_remote_cache_lookups_total")
    for result, base in (("hit", "remote_cache_hits"), ("miss", "remote_cache_misses")):
        for (backend, rank), value in sorted(journal.backend_counter(base).items()):
            lookups.add_metric([backend, str(rank), result], value)
    out.append(lookups)
    export_dropped = _counter("jitwatch_export_dropped_events_total")
    for (exporter, rank), value in sorted(journal.backend_counter("export_dropped").items()):
        export_dropped.add_metric([exporter, str(rank)], value)
    out.append(export_dropped)

    ev = _gauge("jitwatch_journal_events")
    ev.add_metric([], float(n_events))
    retired = _counter("jitwatch_journal_retired_events_total")
    retired.add_metric([], counters.get((_RETIRED_RANK, "retired_events"), 0.0))
    labels = _gauge("jitwatch_kernel_labels")
    labels.add_metric(["named"], float(named))
    labels.add_metric(["folded"], float(folded))
    out += [ev, retired, labels]
    return out


class JournalCollector(Collector):
    """Collector that reads the journal in ``journal_dir`` on every ``collect()``.

    The journal is opened read-only (``Journal(..., readonly=True)``) and closed again at each
    scrape, so worker restarts and a journal that appears later need no sidecar restart.
    A missing, corrupt or locked journal yields only ``jitwatch_journal_up 0``.
    """

    def __init__(self, journal_dir: str | os.PathLike[str]) -> None:
        self.journal_dir = Path(journal_dir)

    def describe(self) -> Iterable[Metric]:
        return []  # unknown until a scrape; keeps registration from reading the journal

    def collect(self) -> Iterator[Metric]:
        families: list[Metric] | None
        try:
            with Journal(self.journal_dir, readonly=True) as journal:
                families = journal_families(journal)
        except FileNotFoundError as exc:  # no worker has written yet: normal at startup
            log.debug("jitwatch: %s", exc)
            families = None
        except (OSError, JournalCorruptError, JournalVersionError, sqlite3.Error, ValueError) as exc:
            log.warning("jitwatch: journal in %s unreadable for /metrics: %s", self.journal_dir, exc)
            families = None
        up = _gauge("jitwatch_journal_up")
        up.add_metric([], 0.0 if families is None else 1.0)
        yield up
        if families is None:
            return
        yield from families
        build = _info("jitwatch_build_info")
        build.add_metric([], build_info_labels())
        yield build


def make_registry(journal_dir: str | os.PathLike[str]) -> CollectorRegistry:
    """A fresh registry holding only a :class:`JournalCollector` (no process/GC collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JournalCollector(journal_dir))
    return registry


def render_uncached(journal_dir: str | os.PathLike[str], accept: str | None = None) -> tuple[bytes, str]:
    """One scrape built from the journal now: ``(body, content_type)`` for the ``Accept`` header.

    ``application/openmetrics-text`` → OpenMetrics 1.0; anything else, including an ``Accept``
    header prometheus_client cannot parse, → Prometheus text 0.0.4.
    """
    registry = make_registry(journal_dir)
    try:
        encoder, content_type = choose_encoder(accept or "")
        return encoder(registry), content_type
    except Exception as exc:  # noqa: BLE001 - a malformed Accept (e.g. "version=abc") must not be a 500
        log.debug("jitwatch: unusable Accept header %r (%s); answering text 0.0.4", accept, exc)
        return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4


RENDER_MAX_AGE_S = 60.0
"""A cached scrape body is rebuilt after this many seconds even when the journal did not change."""


class MetricsRenderer:
    """``/metrics`` for one journal directory, rebuilt only when the journal changed.

    Change detection is SQLite's own: ``PRAGMA data_version`` on a long-lived read-only
    connection changes whenever *another* connection commits (SQLite ≥ 3.8.8; every writer is
    another connection), and the file's device, inode and ctime are compared (a journal moved
    aside, replaced or checkpointed into is reopened, which invalidates the cache). While neither
    changed, a scrape is answered with the bytes built for the same ``Accept`` header and
    exposition format (byte-identical to :func:`render_uncached`); concurrent scrapes of a
    changed journal wait for one build instead of building it each (single flight). Nothing is
    cached when the journal cannot be opened (``jitwatch_journal_up 0`` is rebuilt every time).
    The cache lives in the sidecar process: a restarted sidecar, or a second sidecar on the same
    journal, builds its own from the journal, so retention and restarts need nothing special.
    """

    def __init__(self, journal_dir: str | os.PathLike[str]) -> None:
        self.journal_dir = Path(journal_dir)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._inode: tuple[int, int, int] | None = None
        self._generation = 0
        self._version: tuple[int, int] | None = None
        self._built_at = 0.0
        self._bodies: dict[str, tuple[bytes, str]] = {}  # Accept header → (body, content type)
        self.builds = 0
        """Scrapes that were built from the journal (the others were answered from the cache)."""

    def _journal_version(self) -> tuple[int, int] | None:
        """``(connection generation, data_version)``; ``None`` when it cannot be told."""
        path = self.journal_dir / JOURNAL_FILE
        try:
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):  # a link or FIFO: leave it to Journal's checks, uncached
                self._close()
                return None
            # Any change of the file itself (replaced, moved aside, checkpointed into) reconnects:
            # a new connection's data_version says nothing about the old one's.
            ident = (st.st_dev, st.st_ino, st.st_ctime_ns)
            if self._conn is None or ident != self._inode:
                self._close()
                self._conn = sqlite3.connect(  # used under self._lock only, from any server thread
                    f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
                )
                self._inode = ident
                self._generation += 1
            return (self._generation, int(self._conn.execute("PRAGMA data_version").fetchone()[0]))
        except (OSError, sqlite3.Error):
            self._close()
            return None

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        self._conn, self._inode = None, None

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """``(body, content_type)`` like :func:`render_uncached`, from the cache when the journal
        has not changed since it was built."""
        fmt = accept or ""
        with self._lock:
            version = self._journal_version()
            fresh = time.monotonic() - self._built_at < RENDER_MAX_AGE_S
            if version is not None and version == self._version and fresh and fmt in self._bodies:
                return self._bodies[fmt]
            if version != self._version or not fresh:
                self._bodies.clear()
                self._version, self._built_at = version, time.monotonic()
            result = render_uncached(self.journal_dir, accept)
            self.builds += 1
            if version is not None and b"jitwatch_journal_up 1" in result[0][:4096] and len(self._bodies) < 8:
                self._bodies[fmt] = result  # per Accept header as sent (a few distinct ones per scraper)
            return result


_RENDERERS: dict[Path, MetricsRenderer] = {}
_RENDERERS_LOCK = threading.Lock()


def renderer(journal_dir: str | os.PathLike[str]) -> MetricsRenderer:
    """The process's :class:`MetricsRenderer` for ``journal_dir`` (one per directory)."""
    key = Path(journal_dir).resolve()
    with _RENDERERS_LOCK:
        r = _RENDERERS.get(key)
        if r is None:
            r = _RENDERERS[key] = MetricsRenderer(key)
        return r


def render(journal_dir: str | os.PathLike[str], accept: str | None = None) -> tuple[bytes, str]:
    """One scrape: ``(body, content_type)`` for the ``Accept`` header given, through the
    directory's :class:`MetricsRenderer` (rebuilt only when the journal changed).

    ``application/openmetrics-text`` → OpenMetrics 1.0; anything else, including an ``Accept``
    header prometheus_client cannot parse, → Prometheus text 0.0.4.
    """
    return renderer(journal_dir).render(accept)
