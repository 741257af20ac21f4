"""Prometheus metrics built from the journal: a custom ``prometheus_client`` collector.

The journal's aggregates (:meth:`~jitwatch.store.journal.Journal.stats`, ``recompile_stats``,
``histogram``, ``counters``, ``latest_workers``, ``kernel_label_counts``, ``count_events``) become
metric families here (:func:`journal_families`, :func:`families_from`). The sidecar answers
``GET /metrics`` from an in-memory copy of those aggregates refreshed incrementally, with one
formatted line kept per series (:mod:`jitwatch.views.live`, byte-identical to
:func:`render_uncached`); prometheus_client's multiprocess mode is not used (vLLM sets its own
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
import math
import os
import platform
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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

from jitwatch.config import DEFAULT_STALE_SECONDS, backend_name_ok
from jitwatch.core.events import Phase
from jitwatch.errors import JournalCorruptError, JournalVersionError
from jitwatch.store.journal import (
    ABANDONED_COUNTER,
    COMPILE_DURATION_BUCKETS,
    OTHER_KERNEL,
    REQUESTS_DELAYED_COUNTER,
    Journal,
    RecompileRow,
    StatRow,
    WorkerRow,
    backend_counter_of,
    request_histogram_of,
    skipped_rows_total,
)
from jitwatch.text import logger
from jitwatch.views.contract import (
    BACKEND_STATES,
    BUILTIN_BACKENDS,
    BUILTIN_EXPORTERS,
    BY_NAME,
    MAX_BACKEND_LABELS,
    MAX_EXPORTER_LABELS,
    MAX_VERSION_LABELS,
    OTHER_BACKEND,
    VERSION_LABEL_PATTERN,
)
from jitwatch.views.diagnosis import inflight_of
from jitwatch.views.status import backend_infos, exited_ranks, worker_state

log = logger(__name__)

_RETIRED_RANK = -1
"""``Journal.prune`` books retired events on this pseudo-rank (journal-wide counter)."""


_bounded_logged: set[str] = set()


class BoundedValues:
    """A label's value for each string a journal holds: bounded cardinality. The journal is a file
    any process can write: its rows can hold any string (a buggy or hostile writer, a third-party
    backend, another jitwatch version). A string gets its own value when ``ok(string)`` and it is
    one of ``always`` or among the first ``cap`` such strings in sorted order (``always`` counted
    first); the empty string stays empty (``keep_empty``); every other string is
    :data:`OTHER_BACKEND` (its series summed into that value's). Depends on the set of strings
    only (a full build and the sidecar's incremental copy agree). Logged once per process and
    ``label`` when a string is folded."""

    __slots__ = ("folded", "named")

    def __init__(
        self,
        values: Iterable[str],
        *,
        label: str,
        ok: Callable[[str], bool],
        cap: int,
        always: Iterable[str] = (),
        keep_empty: bool = True,
    ) -> None:
        every = set(values)
        valid = {v for v in every if v and ok(v)}
        first = sorted(valid.intersection(always))
        rest = sorted(valid.difference(always))
        self.named: frozenset[str] = frozenset(first + rest[: max(0, cap - len(first))])
        if keep_empty:
            self.named |= {""}
        folded = sorted(every - self.named)
        self.folded = len(folded)
        """Distinct strings folded into :data:`OTHER_BACKEND`."""
        if folded and label not in _bounded_logged:
            _bounded_logged.add(label)
            log.warning(
                "jitwatch: %d %s label value(s) in the journal exported as %s=%r (not a valid value, or more"
                " than %d distinct), e.g. %.80r",
                len(folded),
                label,
                label,
                OTHER_BACKEND,
                cap,
                folded[0],
            )

    def __call__(self, value: str) -> str:
        return value if value in self.named else OTHER_BACKEND

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.named == self.named

    def __hash__(self) -> int:
        return hash(self.named)


class BackendLabels(BoundedValues):
    """The ``backend`` label value of each backend name in a journal (:class:`BoundedValues`):
    names that follow the backend-name rule (:data:`~jitwatch.config.BACKEND_NAME_PATTERN`, at most
    64 characters), :data:`BUILTIN_BACKENDS` always, up to :data:`MAX_BACKEND_LABELS` in all."""

    __slots__ = ()

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(names, label="backend", ok=backend_name_ok, cap=MAX_BACKEND_LABELS, always=BUILTIN_BACKENDS)


def _version_ok(value: str) -> bool:
    return re.fullmatch(VERSION_LABEL_PATTERN, value) is not None


def _state_ok(value: str) -> bool:
    return value in BACKEND_STATES


def backend_names(
    stat_backends: Iterable[str],
    hist: Iterable[tuple[str, int, Phase]],
    counters: Iterable[tuple[int, str]],
    workers: Mapping[int, WorkerRow],
) -> set[str]:
    """Every backend name the metric families would show: of the aggregate rows
    (``stat_backends``: compile and recompile rows), the duration histogram's keys, the per-backend
    counters and the workers' backends."""
    out = set(stat_backends)
    out.update(key[0] for key in hist)
    for _rank, name in counters:
        base, sep, backend = name.partition(":")
        if sep and base in _BACKEND_COUNTERS:
            out.add(backend)
    for w in workers.values():
        out.update(b.name for b in backend_infos(w.attrs))
    return out


_BACKEND_COUNTERS = frozenset(
    ("hook_errors", ABANDONED_COUNTER, REQUESTS_DELAYED_COUNTER, "remote_cache_hits", "remote_cache_misses")
)
"""The per-backend counters the families show with a ``backend`` label."""


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


def skipped_rows_family() -> CounterMetricFamily:
    """``jitwatch_journal_skipped_rows_total``: this process's
    :func:`~jitwatch.store.journal.skipped_rows_total`, read now (the sidecar's live copy formats it
    at each scrape)."""
    family = _counter("jitwatch_journal_skipped_rows_total")
    family.add_metric([], float(skipped_rows_total()))
    return family


def _counter(name: str) -> CounterMetricFamily:
    spec = BY_NAME[name]
    return CounterMetricFamily(name, spec.help, labels=list(spec.labels), unit=spec.unit)


KernelKey = tuple[str, str, str]
"""(backend, kernel label, phase) — the labels of the autotune and graph-capture families (ranks summed)."""
PhaseKey = tuple[str, str]
"""(backend, phase) — ``jitwatch_compiles_total`` and ``jitwatch_last_compile_timestamp_seconds``."""
LabelKey = tuple[str, str]
"""(backend, kernel label) — ``jitwatch_compile_seconds_total`` (phases and ranks summed)."""
RecompileKey = tuple[str, str, str, str, str]
"""(backend, kernel label, reason class, phase, rank) of the recompile families."""


def _gauge(name: str) -> GaugeMetricFamily:
    spec = BY_NAME[name]
    return GaugeMetricFamily(name, spec.help, labels=list(spec.labels), unit=spec.unit)


def _info(name: str) -> InfoMetricFamily:
    spec = BY_NAME[name]
    # InfoMetricFamily appends "_info" to the sample name itself.
    return InfoMetricFamily(name.removesuffix("_info"), spec.help, labels=[])


def journal_up_family(up: bool) -> GaugeMetricFamily:
    """``jitwatch_journal_up``: 1 when the journal was read, 0 when it was missing or unreadable."""
    family = _gauge("jitwatch_journal_up")
    family.add_metric([], 1.0 if up else 0.0)
    return family


def build_info_family() -> InfoMetricFamily:
    """``jitwatch_build_info`` with :func:`build_info_labels`."""
    family = _info("jitwatch_build_info")
    family.add_metric([], build_info_labels())
    return family


def _opt(value: object) -> str:
    return "" if value is None else str(value)


def _coverage_ratios(journal: Journal, labels: dict[str, str]) -> dict[str, float]:
    """``jitwatch.views.coverage.journal_coverage_ratios`` (with the report cached between scrapes, see
    :func:`jitwatch.views.status.cached_coverage`); a failure there costs only this family."""
    from jitwatch.views.coverage import coverage_ratio_samples
    from jitwatch.views.status import guarded_coverage

    report = guarded_coverage(journal)
    return {} if report is None else coverage_ratio_samples(report, labels)


def coverage_family(coverage: dict[str, float]) -> GaugeMetricFamily:
    """``jitwatch_specialization_coverage_ratio`` from the ratios per kernel label
    (:func:`jitwatch.views.coverage.coverage_ratio_samples`: ``_other`` pooled); Triton's alone."""
    family = _gauge("jitwatch_specialization_coverage_ratio")
    for label, ratio in sorted(coverage.items()):
        family.add_metric(["triton", label], ratio)
    return family


INFLIGHT_FAMILIES = ("jitwatch_inflight_compiles", "jitwatch_inflight_compile_age_seconds")
"""The families that change with the clock alone (compiles age while they run)."""


def inflight_families(
    workers: dict[int, WorkerRow],
    now: float,
    stale_after: float = DEFAULT_STALE_SECONDS,
    exited: Mapping[int, int] | None = None,
) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    """``jitwatch_inflight_compiles`` and ``jitwatch_inflight_compile_age_seconds`` per rank,
    aged at ``now`` (Unix seconds); a worker silent for more than ``stale_after`` seconds (the
    sidecar's ``--stale-after``, the same window ``/jit`` uses) has no current list
    (:func:`inflight_of`), nor has one whose process the sidecar saw exit (``exited``,
    :func:`~jitwatch.views.status.exited_ranks`): its compiles ended with it, at once instead of
    after the window (the collective-deadline alert would age a dead process's compile)."""
    inflight_n = _gauge(INFLIGHT_FAMILIES[0])
    inflight_age = _gauge(INFLIGHT_FAMILIES[1])
    gone = exited or {}
    for rank in sorted(workers):
        w = workers[rank]
        running = inflight_of(w.attrs, now, last_seen=w.last_ts, stale_after=stale_after, exited=rank in gone)
        inflight_n.add_metric([str(rank)], float(len(running)))
        inflight_age.add_metric([str(rank)], running[0].age_s if running else 0.0)
    return inflight_n, inflight_age


WORKER_INFO = "jitwatch_worker_info"
"""The family that changes with the worker processes alone (``state="exited"``, read from ``/proc``)."""


def worker_info_family(workers: dict[int, WorkerRow], exited: Mapping[int, int]) -> InfoMetricFamily:
    """``jitwatch_worker_info`` of each rank's latest worker; ``state`` as ``/jit`` has it
    (:func:`~jitwatch.views.status.worker_state`): ``exited`` for the ranks in ``exited``
    (:func:`~jitwatch.views.status.exited_ranks` of ``workers``, read once by the caller)."""
    info = _info(WORKER_INFO)
    for rank in sorted(workers):
        w = workers[rank]
        state = worker_state(w, rank in exited)
        info.add_metric(
            [],
            {
                "rank": str(rank),
                "tp_rank": _opt(w.attrs.get("tp_rank")),
                "pp_rank": _opt(w.attrs.get("pp_rank")),
                "dp_rank": _opt(w.attrs.get("dp_rank")),
                "mode": _opt(w.mode),
                "state": state if isinstance(state, str) else state.value,
            },
        )
    return info


class AggregateSource(Protocol):
    """What the families are built from: a read-only :class:`~jitwatch.store.journal.Journal`, or
    the sidecar's in-memory copy of its aggregates (:class:`jitwatch.views.live.LiveAggregates`)."""

    def histogram(self) -> dict[tuple[str, int, Phase], list[int]]: ...
    def counters(self) -> dict[tuple[int, str], float]: ...
    def latest_workers(self) -> dict[int, WorkerRow]: ...
    def kernel_label_counts(self) -> tuple[int, int]: ...
    def count_events(self) -> int: ...


SUMMED_KINDS = ("compile", "autotune", "graph_capture")
"""Stat-row kinds exported per kernel (ranks summed)."""


@dataclass
class KernelSums:
    """The per-kernel aggregates every big family is drawn from, keyed by the families' label
    values in contract order (``rank`` as a string), summed over ranks and over the kernels folded
    into ``_other`` (counts exactly, seconds with :func:`math.fsum`: the same floats however they
    are computed, a full build here or per changed key in :mod:`jitwatch.views.live`)."""

    kinds: dict[str, dict[KernelKey, float]] = field(
        default_factory=lambda: {k + s: {} for k in SUMMED_KINDS for s in ("", "_s")}
    )
    """``autotune``/``graph_capture`` counts and ``…_s`` seconds per (backend, label, phase) (the
    ``compile`` entries stay empty: compiles are summed per ``bp``, ``bk``, ``bpr`` and ``serving``)."""
    phase_compiles: dict[PhaseKey, float] = field(default_factory=dict)
    """Compiles per (backend, phase), kernels and ranks summed."""
    last_ts: dict[PhaseKey, float] = field(default_factory=dict)
    """Latest compile per (backend, phase), any kernel and rank (Unix seconds)."""
    label_compiles: dict[LabelKey, float] = field(default_factory=dict)
    """Compiles per (backend, kernel label), phases and ranks summed."""
    label_seconds: dict[LabelKey, float] = field(default_factory=dict)
    """Compile seconds per (backend, kernel label), phases and ranks summed."""
    serving: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """Serving compiles per (backend, label, rank)."""
    hits: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """Disk-cache hits per (backend, phase, rank); same keys as ``hist_sum``."""
    hist_sum: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """Compile seconds per (backend, phase, rank): the duration histogram's ``_sum``."""
    recompiles: dict[RecompileKey, float] = field(default_factory=dict)
    recompile_s: dict[RecompileKey, float] = field(default_factory=dict)

    def series(self) -> dict[str, tuple[dict[Any, float], dict[Any, float] | None]]:
        """``{family: (values, present)}`` of every family drawn from these sums: a series per key
        of ``values`` (sorted), only where ``present`` is non-zero when given."""
        k = self.kinds
        return {
            "jitwatch_compiles_total": (self.phase_compiles, self.phase_compiles),
            "jitwatch_compile_seconds_total": (self.label_seconds, self.label_compiles),
            "jitwatch_serving_compiles_total": (self.serving, self.serving),
            "jitwatch_compile_disk_cache_hits_total": (self.hits, None),
            "jitwatch_last_compile_timestamp_seconds": (self.last_ts, None),
            "jitwatch_autotune_runs_total": (k["autotune"], k["autotune"]),
            "jitwatch_autotune_seconds_total": (k["autotune_s"], k["autotune"]),
            "jitwatch_graph_captures_total": (k["graph_capture"], k["graph_capture"]),
            "jitwatch_graph_capture_seconds_total": (k["graph_capture_s"], k["graph_capture"]),
            "jitwatch_recompiles_total": (self.recompiles, None),
            "jitwatch_recompile_seconds_total": (self.recompile_s, None),
        }


KERNEL_FAMILIES = frozenset(KernelSums().series())
"""Families drawn from :class:`KernelSums` (the big ones: per kernel)."""


STAT_GROUPS = ("kernel", "serving", "bpr", "bp", "bk")
"""The series-key groups of :func:`stat_series_keys`."""


def stat_series_keys(row: StatRow, backends: BackendLabels) -> dict[str, tuple[str, ...]]:
    """The series keys a :class:`StatRow` feeds, per group: ``kernel`` (backend, label, phase) for
    the autotune and graph-capture count/seconds families, and for compiles ``bpr`` (backend, phase, rank: disk-cache
    hits, the histogram's ``_sum``), ``bp`` (backend, phase: compiles and the latest compile time),
    ``bk`` (backend, label: compile seconds) and, in serving, ``serving`` (backend, label, rank).
    The backend is its label value (``backends``)."""
    if row.kind not in SUMMED_KINDS:
        return {}
    label = row.label or OTHER_KERNEL
    backend = backends(row.backend)
    if row.kind != "compile":  # autotune and graph-capture families; compiles have their own groups
        return {"kernel": (backend, label, row.phase.value)}
    keys: dict[str, tuple[str, ...]] = {
        "bpr": (backend, row.phase.value, str(row.rank)),
        "bp": (backend, row.phase.value),
        "bk": (backend, label),
    }
    if row.phase is Phase.SERVING:
        keys["serving"] = (backend, label, str(row.rank))
    return keys


def recompile_key(row: RecompileRow, backends: BackendLabels) -> RecompileKey:
    return (backends(row.backend), row.label or OTHER_KERNEL, row.reason_class, row.phase.value, str(row.rank))


def sum_kernel_group(sums: KernelSums, key: KernelKey, rows: Iterable[StatRow]) -> None:
    """Set ``key``'s counts and seconds from all of its rows (any order).

    Counts are integers (exact in a float); seconds are summed with :func:`math.fsum` (correctly
    rounded, so the same whatever the order or the way the rows arrived: a full build here, or
    only the changed keys in :mod:`jitwatch.views.live`)."""
    counts: dict[str, int] = {}
    seconds: dict[str, list[float]] = {}
    for row in rows:
        counts[row.kind] = counts.get(row.kind, 0) + row.count
        seconds.setdefault(row.kind, []).append(row.seconds)
    for kind in SUMMED_KINDS:
        if kind in counts:
            sums.kinds[kind][key] = float(counts[kind])
            sums.kinds[kind + "_s"][key] = math.fsum(seconds[kind])
        else:
            sums.kinds[kind].pop(key, None)
            sums.kinds[kind + "_s"].pop(key, None)


def sum_phase_group(sums: KernelSums, key: PhaseKey, counts: Iterable[int], last_ts: Iterable[float | None]) -> None:
    """Set the compiles of (backend, phase) ``key`` and its latest compile time (Unix seconds) from
    its compile rows' counts and ``last_ts`` values (any order; exact)."""
    sums.phase_compiles[key] = float(sum(counts))
    latest = max((t for t in last_ts if t is not None), default=None)
    if latest is None:
        sums.last_ts.pop(key, None)
    else:
        sums.last_ts[key] = latest


def sum_label_group(sums: KernelSums, key: LabelKey, rows: Iterable[StatRow]) -> None:
    """Set the compiles and compile seconds (:func:`math.fsum`) of (backend, label) ``key`` from
    its compile rows (any order)."""
    rows = list(rows)
    sums.label_compiles[key] = float(sum(r.count for r in rows))
    sums.label_seconds[key] = math.fsum(r.seconds for r in rows)


def sum_rank_group(sums: KernelSums, key: tuple[str, str, str], hits: Iterable[int], seconds: Iterable[float]) -> None:
    """Set the disk-cache hits and the duration histogram's ``_sum`` (:func:`math.fsum`) of
    (backend, phase, rank) ``key`` from its compile rows' ``cache_hits`` and ``seconds`` (any order)."""
    sums.hits[key] = float(sum(hits))
    sums.hist_sum[key] = math.fsum(seconds)


def sum_serving_group(sums: KernelSums, key: tuple[str, str, str], counts: Iterable[int]) -> None:
    """Set the serving compiles of (backend, label, rank) ``key`` from its serving compile rows' counts."""
    sums.serving[key] = float(sum(counts))


def sum_recompile_group(sums: KernelSums, key: RecompileKey, rows: Iterable[RecompileRow]) -> None:
    """Set the recompiles and recompile seconds (:func:`math.fsum`) of ``key`` from its rows (any order)."""
    rows = list(rows)
    sums.recompiles[key] = float(sum(r.count for r in rows))
    sums.recompile_s[key] = math.fsum(r.seconds for r in rows)


def kernel_sums(stats: Iterable[StatRow], recompiles: Iterable[RecompileRow], backends: BackendLabels) -> KernelSums:
    """:class:`KernelSums` of every row: counts summed exactly, seconds with :func:`math.fsum`;
    backends by their label value (``backends``)."""
    sums = KernelSums()
    groups: dict[str, dict[Any, list[StatRow]]] = {g: {} for g in STAT_GROUPS}
    for row in stats:
        for group, key in stat_series_keys(row, backends).items():
            groups[group].setdefault(key, []).append(row)
    for kkey, rows in groups["kernel"].items():
        sum_kernel_group(sums, kkey, rows)
    for bpr, rows in groups["bpr"].items():
        sum_rank_group(sums, bpr, (r.cache_hits for r in rows), (r.seconds for r in rows))
    for skey, rows in groups["serving"].items():
        sum_serving_group(sums, skey, (r.count for r in rows))
    for bp, rows in groups["bp"].items():
        sum_phase_group(sums, bp, (r.count for r in rows), (r.last_ts for r in rows))
    for bk, rows in groups["bk"].items():
        sum_label_group(sums, bk, rows)
    recs: dict[RecompileKey, list[RecompileRow]] = {}
    for rrow in recompiles:
        recs.setdefault(recompile_key(rrow, backends), []).append(rrow)
    for rkey, rrows in recs.items():
        sum_recompile_group(sums, rkey, rrows)
    return sums


def journal_families(journal: Journal, stale_after: float = DEFAULT_STALE_SECONDS) -> list[Metric]:
    """Every journal-derived family (``jitwatch_journal_up`` and build info excluded).

    Raises ``sqlite3.Error`` when the journal cannot be read; callers turn that into
    ``jitwatch_journal_up 0``.
    """
    stats = journal.stats()
    recompiles = journal.recompile_stats()
    names = backend_names(
        [r.backend for r in stats] + [r.backend for r in recompiles],
        journal.histogram(),
        journal.counters(),
        journal.latest_workers(),
    )
    backends = BackendLabels(names)
    sums = kernel_sums(stats, recompiles, backends)
    from jitwatch.views.coverage import coverage_labels

    kernel_labels = coverage_labels(stats)
    return families_from(
        journal,
        sums,
        _coverage_ratios(journal, kernel_labels),
        backends=backends,
        now=time.time(),
        stale_after=stale_after,
    )


def _fold_hist(
    hist: dict[tuple[str, int, Phase], list[int]], backends: BackendLabels
) -> dict[tuple[str, int, str], list[int]]:
    """The duration histogram by (backend label value, rank, phase value): folded backends' bucket
    counts summed."""
    out: dict[tuple[str, int, str], list[int]] = {}
    for (backend, rank, phase), counts in hist.items():
        key = (backends(backend), rank, phase.value)
        have = out.get(key)
        out[key] = list(counts) if have is None else [a + b for a, b in zip(have, counts, strict=True)]
    return out


def _buckets(counts: Iterable[int]) -> list[tuple[str, float]]:
    """A histogram's cumulative ``(le, count)`` pairs from its per-bucket ``counts`` (one per
    :data:`COMPILE_DURATION_BUCKETS` edge, then ``+Inf``)."""
    out: list[tuple[str, float]] = []
    cumulative = 0
    for edge, n in zip((*COMPILE_DURATION_BUCKETS, float("inf")), counts, strict=True):
        cumulative += n
        out.append((floatToGoString(edge), float(cumulative)))
    return out


def families_from(
    source: AggregateSource,
    sums: KernelSums,
    coverage: dict[str, float],
    *,
    backends: BackendLabels,
    now: float,
    kernel_series: bool = True,
    stale_after: float = DEFAULT_STALE_SECONDS,
    exited: Mapping[int, int] | None = None,
) -> list[Metric]:
    """Every journal-derived family, in exposition order, from ``source``'s aggregates, the
    per-kernel ``sums`` and the coverage ratios per kernel label; ``now`` (Unix seconds) ages
    in-flight compiles (of workers heard from within ``stale_after`` seconds).
    ``kernel_series=False``: the :data:`KERNEL_FAMILIES` come without samples (a caller that
    keeps their lines itself fills them in). ``exited``: :func:`~jitwatch.views.status.exited_ranks`
    of the source's workers when the caller read them already (default: read here, once).
    ``backends``: each backend name's label value (:class:`BackendLabels` of every name in
    ``source`` and ``sums``, :func:`backend_names`)."""
    hist = _fold_hist(source.histogram(), backends)
    counters = source.counters()

    def by_backend(base: str) -> dict[tuple[str, int], float]:
        out: dict[tuple[str, int], float] = {}
        for (backend, rank), value in backend_counter_of(counters, base).items():
            key = (backends(backend), rank)
            out[key] = out.get(key, 0.0) + value
        return out

    hook_errors = by_backend("hook_errors")
    abandoned = by_backend(ABANDONED_COUNTER)
    workers = source.latest_workers()
    named, folded = source.kernel_label_counts()
    n_events = source.count_events()
    series = sums.series()

    def kernel_family(name: str) -> CounterMetricFamily | GaugeMetricFamily:
        fam = _gauge(name) if BY_NAME[name].type == "gauge" else _counter(name)
        if kernel_series:
            values, present = series[name]
            for key in sorted(values):
                if present is None or present.get(key):
                    fam.add_metric(list(key), values[key])
        return fam

    out: list[Metric] = []
    out.append(kernel_family("jitwatch_compiles_total"))
    out.append(kernel_family("jitwatch_compile_seconds_total"))
    out.append(kernel_family("jitwatch_serving_compiles_total"))
    out.append(kernel_family("jitwatch_compile_disk_cache_hits_total"))

    spec = BY_NAME["jitwatch_compile_duration_seconds"]
    hfam = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels), unit=spec.unit)
    for (backend, rank, phase), counts in sorted(hist.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        bpr = (backend, phase, str(rank))
        hfam.add_metric(list(bpr), _buckets(counts), sums.hist_sum.get(bpr, 0.0))
    out.append(hfam)

    spec = BY_NAME["jitwatch_request_compile_seconds"]
    rfam = HistogramMetricFamily(spec.name, spec.help, labels=list(spec.labels), unit=spec.unit)
    for rank, (rcounts, rsum) in sorted(request_histogram_of(counters).items()):
        rfam.add_metric([str(rank)], _buckets(rcounts), rsum)
    out.append(rfam)
    fam_d = _counter("jitwatch_requests_delayed_total")
    for (backend, rank), value in sorted(by_backend(REQUESTS_DELAYED_COUNTER).items()):
        fam_d.add_metric([backend, str(rank)], value)
    out.append(fam_d)

    out.append(kernel_family("jitwatch_last_compile_timestamp_seconds"))
    out.append(kernel_family("jitwatch_autotune_runs_total"))
    out.append(kernel_family("jitwatch_autotune_seconds_total"))
    out.append(kernel_family("jitwatch_graph_captures_total"))
    out.append(kernel_family("jitwatch_graph_capture_seconds_total"))
    out.append(kernel_family("jitwatch_recompiles_total"))
    out.append(kernel_family("jitwatch_recompile_seconds_total"))

    # ---- per rank: the latest worker of each rank.
    complete = _gauge("jitwatch_warmup_complete")
    w_start = _gauge("jitwatch_warmup_start_timestamp_seconds")
    w_end = _gauge("jitwatch_warmup_complete_timestamp_seconds")
    w_dur = _gauge("jitwatch_warmup_duration_seconds")
    w_compiles = _gauge("jitwatch_warmup_compiles")
    first = _gauge("jitwatch_first_request_latency_seconds")
    started = _gauge("jitwatch_worker_start_timestamp_seconds")
    last_seen = _gauge("jitwatch_worker_last_seen_timestamp_seconds")
    exited = exited_ranks(workers) if exited is None else exited
    info = worker_info_family(workers, exited)
    backend_info = _info("jitwatch_backend_info")
    inflight_n, inflight_age = inflight_families(workers, now, stale_after, exited)
    deadline = _gauge("jitwatch_collective_deadline_seconds")
    infos: list[tuple[int, str, str, str]] = []
    for rank in sorted(workers):
        w = workers[rank]
        r = [str(rank)]
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
        for b in backend_infos(w.attrs):
            if backends(b.name) != b.name:
                continue  # a folded name: no info series of its own (its counters are under _other)
            infos.append((rank, b.name, _opt(b.version), b.state))
    # version and state are strings of the worker row (any writer): bounded like backend names
    versions = BoundedValues((i[2] for i in infos), label="version", ok=_version_ok, cap=MAX_VERSION_LABELS)
    states = BoundedValues((i[3] for i in infos), label="state", ok=_state_ok, cap=len(BACKEND_STATES))
    for rank, name, version, state in infos:
        backend_info.add_metric(
            [], {"rank": str(rank), "backend": name, "version": versions(version), "state": states(state)}
        )
    out += [complete, w_start, w_end, w_dur, w_compiles, first, started, last_seen, info, backend_info]
    out += [inflight_n, inflight_age, deadline]

    out.append(coverage_family(coverage))

    # ---- counters: every rank seen anywhere gets a (possibly 0) series, so increase() works.
    # hook errors: every (backend, rank) of a worker's backends, plus any counted.
    ranks = {r for r in workers} | {r for (r, _name) in counters if r != _RETIRED_RANK}
    pairs = set(hook_errors) | {(backends(b.name), rank) for rank, w in workers.items() for b in backend_infos(w.attrs)}
    errors = _counter("jitwatch_hook_errors_total")
    for backend, rank in sorted(pairs):
        errors.add_metric([backend, str(rank)], hook_errors.get((backend, rank), 0.0))
    gone = _counter("jitwatch_abandoned_compiles_total")
    for backend, rank in sorted(set(abandoned) | pairs):
        gone.add_metric([backend, str(rank)], abandoned.get((backend, rank), 0.0))
    dropped = _counter("jitwatch_dropped_events_total")
    for rank in sorted(ranks):
        dropped.add_metric([str(rank)], counters.get((rank, "dropped_events"), 0.0))
    out += [errors, gone, dropped]
    lookups = _counter("jitwatch_remote_cache_lookups_total")
    for result, base in (("hit", "remote_cache_hits"), ("miss", "remote_cache_misses")):
        for (backend, rank), value in sorted(by_backend(base).items()):
            lookups.add_metric([backend, str(rank), result], value)
    out.append(lookups)
    export_dropped = _counter("jitwatch_export_dropped_events_total")
    raw_dropped = backend_counter_of(counters, "export_dropped")
    exporters = BoundedValues(
        (e for e, _rank in raw_dropped),
        label="exporter",
        ok=backend_name_ok,
        cap=MAX_EXPORTER_LABELS,
        always=BUILTIN_EXPORTERS,
        keep_empty=False,
    )
    folded_dropped: dict[tuple[str, int], float] = {}
    for (exporter, rank), value in raw_dropped.items():
        key = (exporters(exporter), rank)
        folded_dropped[key] = folded_dropped.get(key, 0.0) + value
    for (exporter, rank), value in sorted(folded_dropped.items()):
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
    out.append(skipped_rows_family())  # last: the count after this build's own reads
    return out


class JournalCollector(Collector):
    """Collector that reads the journal in ``journal_dir`` on every ``collect()``.

    The journal is opened read-only (``Journal(..., readonly=True)``) and closed again at each
    scrape, so worker restarts and a journal that appears later need no sidecar restart.
    A missing, corrupt or locked journal yields only ``jitwatch_journal_up 0``. ``stale_after``:
    see :func:`inflight_families`.
    """

    def __init__(self, journal_dir: str | os.PathLike[str], stale_after: float = DEFAULT_STALE_SECONDS) -> None:
        self.journal_dir = Path(journal_dir)
        self.stale_after = stale_after

    def describe(self) -> Iterable[Metric]:
        return []  # unknown until a scrape; keeps registration from reading the journal

    def collect(self) -> Iterator[Metric]:
        families: list[Metric] | None
        try:
            with Journal(self.journal_dir, readonly=True) as journal:
                families = journal_families(journal, self.stale_after)
        except FileNotFoundError as exc:  # no worker has written yet: normal at startup
            log.debug("jitwatch: %s", exc)
            families = None
        except (OSError, JournalCorruptError, JournalVersionError, sqlite3.Error, ValueError) as exc:
            log.warning("jitwatch: journal in %s unreadable for /metrics: %s", self.journal_dir, exc)
            families = None
        yield journal_up_family(families is not None)
        if families is None:
            return
        yield from families
        yield build_info_family()


def make_registry(journal_dir: str | os.PathLike[str], stale_after: float = DEFAULT_STALE_SECONDS) -> CollectorRegistry:
    """A fresh registry holding only a :class:`JournalCollector` (no process/GC collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JournalCollector(journal_dir, stale_after))
    return registry


def render_uncached(
    journal_dir: str | os.PathLike[str], accept: str | None = None, stale_after: float = DEFAULT_STALE_SECONDS
) -> tuple[bytes, str]:
    """One scrape built from the journal now: ``(body, content_type)`` for the ``Accept`` header;
    ``stale_after``: see :func:`inflight_families`.

    ``application/openmetrics-text`` → OpenMetrics 1.0; anything else, including an ``Accept``
    header prometheus_client cannot parse, → Prometheus text 0.0.4.
    """
    registry = make_registry(journal_dir, stale_after)
    try:
        encoder, content_type = choose_encoder(accept or "")
        return encoder(registry), content_type
    except Exception as exc:  # noqa: BLE001 - a malformed Accept (e.g. "version=abc") must not be a 500
        log.debug("jitwatch: unusable Accept header %r (%s); answering text 0.0.4", accept, exc)
        return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4


def render(
    journal_dir: str | os.PathLike[str], accept: str | None = None, stale_after: float = DEFAULT_STALE_SECONDS
) -> tuple[bytes, str]:
    """One scrape: ``(body, content_type)`` for the ``Accept`` header given, from the directory's
    live in-memory aggregates (:func:`jitwatch.views.live.live`: refreshed incrementally,
    byte-identical to :func:`render_uncached`).

    ``application/openmetrics-text`` → OpenMetrics 1.0; anything else, including an ``Accept``
    header prometheus_client cannot parse, → Prometheus text 0.0.4.
    """
    from jitwatch.views.live import live  # live builds on this module

    return live(journal_dir).render(accept, stale_after)
