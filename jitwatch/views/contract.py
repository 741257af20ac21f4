"""The metrics contract: every metric jitwatch exports, in one place.

This tuple is the single source of truth that the collector (:mod:`jitwatch.views.metrics`), the
documentation (``docs/metrics.md``, generated and checked by a test), the Grafana dashboard and
the Prometheus rules are checked against. Names are the *exposed* names (a counter's ``_total``
included). Follows Prometheus conventions: ``jitwatch_`` prefix, base units (seconds),
``_total`` counters, ``_info`` metadata, ``_timestamp_seconds`` for Unix times.

Specialization keys are never labels (unbounded); they live in ``/jit`` and the events.
``backend`` values are the installed backends' names (a handful), bounded whatever the journal
holds: at most :data:`MAX_BACKEND_LABELS` names that follow the backend-name rule (jitwatch's own,
:data:`BUILTIN_BACKENDS`, always among them) get their own value; any other string a journal row
holds (a buggy or hostile writer) is counted under ``backend="_other"``
(:class:`jitwatch.views.metrics.BackendLabels`).
``kernel`` values are capped (``JITWATCH_MAX_KERNELS``, default 500): kernels first seen after the
cap share ``kernel="_other"``.

Cardinality by design (for a fleet journal of 100k compiles over 500 kernels and 8 ranks: 3,776
series, ``benchmarks/bench_series.py``): the only kernel-by-rank product is
``jitwatch_serving_compiles_total``, which the post-warmup-compile alert needs and which is rare by
definition. The one other per-kernel family, ``jitwatch_compile_seconds_total``, has neither rank
nor phase (one series per kernel). Compile counts by phase are ``jitwatch_compiles_total`` (no
kernel, no rank), per rank the duration histogram (``jitwatch_compile_duration_seconds``, per
backend, phase and rank); the latest compile time is per backend and phase. Per-kernel counts and
times by phase and rank are in ``/jit`` and the events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram", "info"]

OTHER_BACKEND = "_other"
"""The ``backend`` label value of every backend name without its own (never a valid backend name:
it starts with ``_``)."""
MAX_BACKEND_LABELS = 16
"""At most this many distinct backend names get their own ``backend`` label value (the empty name
of the vLLM plugin's hook errors and :data:`OTHER_BACKEND` aside)."""
BUILTIN_BACKENDS = ("triton", "torch_compile", "cutedsl", "tilelang", "flashinfer", "deepgemm")
"""jitwatch's own backends (``jitwatch.backends.BUILTIN``; a test keeps the two equal): always
named, whatever else the journal holds."""

BACKEND_STATES = ("active", "waiting", "unavailable", "failed", "unknown")
"""The ``state`` label values of ``jitwatch_backend_info``: ``jitwatch.backends.base.BackendState``
and ``unknown`` (a worker row without one; a test keeps them equal). Any other string a worker row
holds is :data:`OTHER_BACKEND`."""
VERSION_LABEL_PATTERN = r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}"
"""What a ``version`` label value of ``jitwatch_backend_info`` looks like (PEP 440 and local
versions, a git hash; at most 64 characters); any other string is :data:`OTHER_BACKEND`."""
MAX_VERSION_LABELS = 16
"""At most this many distinct versions get their own ``version`` value (sorted; the empty one, an
unknown version, aside); the rest are :data:`OTHER_BACKEND`."""
BUILTIN_EXPORTERS = ("otlp",)
"""jitwatch's own event exporters (``JITWATCH_EVENTS_EXPORTER``): always named."""
MAX_EXPORTER_LABELS = 8
"""At most this many distinct exporter names (backend-name rule, built-ins first, then sorted) get
their own ``exporter`` value; the rest are summed under :data:`OTHER_BACKEND`."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    labels: tuple[str, ...]
    unit: str
    help: str


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "jitwatch_compiles_total",
        "counter",
        ("backend", "phase"),
        "",
        "JIT compiles by backend and phase, all kernels and ranks summed (Triton: in-memory cache misses; "
        "loads from a persistent cache included). Per rank: jitwatch_compile_duration_seconds_count; per "
        "kernel and rank during serving: jitwatch_serving_compiles_total; per kernel and phase: /jit "
        "kernels[].compiles_startup / compiles_warmup / compiles_serving.",
    ),
    MetricSpec(
        "jitwatch_serving_compiles_total",
        "counter",
        ("backend", "kernel", "rank"),
        "",
        "Serving-phase (post-warmup) compiles by backend, kernel and rank: the one per-kernel family with "
        "a rank label, since every serving compile is an alert.",
    ),
    MetricSpec(
        "jitwatch_compile_seconds_total",
        "counter",
        ("backend", "kernel"),
        "seconds",
        "Wall time spent compiling each kernel, all phases and ranks summed (Triton: from jit_cache_hook to "
        "the compilation listener, to jit_post_compile_hook in error mode). Per phase and rank: "
        "jitwatch_compile_duration_seconds_sum.",
    ),
    MetricSpec(
        "jitwatch_compile_disk_cache_hits_total",
        "counter",
        ("backend", "phase", "rank"),
        "",
        "Compiles loaded from the compiler's persistent cache (Triton: TRITON_CACHE_DIR, per "
        "knobs.compilation.listener).",
    ),
    MetricSpec(
        "jitwatch_compile_duration_seconds",
        "histogram",
        ("backend", "phase", "rank"),
        "seconds",
        "Distribution of compile durations (buckets 1 ms … 60 s). No kernel label by design.",
    ),
    MetricSpec(
        "jitwatch_request_compile_seconds",
        "histogram",
        ("rank",),
        "seconds",
        "Compile seconds spent inside each marked serving request (Monitor.request(); every vLLM engine "
        "step through the plugin), every backend summed; requests that compiled nothing are in the first "
        "bucket. Buckets 1 ms … 60 s.",
    ),
    MetricSpec(
        "jitwatch_requests_delayed_total",
        "counter",
        ("backend", "rank"),
        "",
        "Marked serving requests that waited on at least one compile of this backend.",
    ),
    MetricSpec(
        "jitwatch_inflight_compiles",
        "gauge",
        ("rank",),
        "",
        "Compiles running now in the rank's latest worker (journaled by its writer thread every second "
        "while any runs).",
    ),
    MetricSpec(
        "jitwatch_inflight_compile_age_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "Age of the oldest compile running now in the rank's latest worker, 0 when none: grows while a "
        "compile runs or hangs, so a rank compiling while its peers wait in a collective shows before "
        "the collective's deadline.",
    ),
    MetricSpec(
        "jitwatch_collective_deadline_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "The worker's collective deadline: JITWATCH_COLLECTIVE_DEADLINE_S, else the smallest of "
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS / TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC set, else 300 under vLLM, "
        "else 600.",
    ),
    MetricSpec(
        "jitwatch_last_compile_timestamp_seconds",
        "gauge",
        ("backend", "phase"),
        "seconds",
        "Unix time of the backend's most recent compile in this phase, any kernel, any rank (per kernel: "
        "/jit kernels[].last_compile_ts).",
    ),
    MetricSpec(
        "jitwatch_autotune_runs_total",
        "counter",
        ("backend", "kernel", "phase"),
        "",
        "Autotune sweeps that benchmarked configs (Triton: @triton.autotune cache misses).",
    ),
    MetricSpec(
        "jitwatch_autotune_seconds_total",
        "counter",
        ("backend", "kernel", "phase"),
        "seconds",
        "Time spent benchmarking autotune configs.",
    ),
    MetricSpec(
        "jitwatch_graph_captures_total",
        "counter",
        ("backend", "kernel", "phase"),
        "",
        "CUDA-graph recordings (torch.compile mode=reduce-overhead), by graph.",
    ),
    MetricSpec(
        "jitwatch_graph_capture_seconds_total",
        "counter",
        ("backend", "kernel", "phase"),
        "seconds",
        "Time spent recording CUDA graphs.",
    ),
    MetricSpec(
        "jitwatch_recompiles_total",
        "counter",
        ("backend", "kernel", "reason_class", "phase", "rank"),
        "",
        "Recompiles by normalized reason (torch.compile: Dynamo guard failures; reason_class is one of a "
        "fixed set such as 'size mismatch', 'dtype mismatch', 'value change', 'other'; the verbatim "
        "reason is in /jit and the events).",
    ),
    MetricSpec(
        "jitwatch_recompile_seconds_total",
        "counter",
        ("backend", "kernel", "reason_class", "phase", "rank"),
        "seconds",
        "Wall time of those recompiles (torch.compile: Dynamo start callback to its compilation-metrics record).",
    ),
    MetricSpec(
        "jitwatch_warmup_complete",
        "gauge",
        ("rank",),
        "",
        "1 when the rank's latest worker has completed warmup (phase serving), else 0.",
    ),
    MetricSpec(
        "jitwatch_warmup_start_timestamp_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "Unix time the rank's latest worker began warmup.",
    ),
    MetricSpec(
        "jitwatch_warmup_complete_timestamp_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "Unix time the rank's latest worker completed warmup.",
    ),
    MetricSpec(
        "jitwatch_warmup_duration_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "Duration of the rank's latest warmup.",
    ),
    MetricSpec(
        "jitwatch_warmup_compiles",
        "gauge",
        ("rank",),
        "",
        "Compiles during the rank's latest warmup.",
    ),
    MetricSpec(
        "jitwatch_first_request_latency_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "Latency of the first request after warmup complete, on the rank's latest worker.",
    ),
    MetricSpec(
        "jitwatch_worker_start_timestamp_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "Unix time the rank's latest worker installed the monitor.",
    ),
    MetricSpec(
        "jitwatch_worker_last_seen_timestamp_seconds",
        "gauge",
        ("rank",),
        "seconds",
        "Unix time the rank's latest worker was last seen (phase event or heartbeat, every "
        "JITWATCH_HEARTBEAT_SECONDS); time() minus this is how long a dead worker has been gone.",
    ),
    MetricSpec(
        "jitwatch_worker_info",
        "info",
        ("rank", "tp_rank", "pp_rank", "dp_rank", "mode", "state"),
        "",
        "Identity and state of the rank's latest worker (value 1); empty label when a rank kind is unknown. "
        "state: startup / warmup / serving; stopped once it recorded a clean stop; exited once the sidecar saw "
        "its process gone on the sidecar's machine without a stop (killed or crashed: at the next scrape, where "
        "the sidecar shares the worker's machine and PID namespace; elsewhere only "
        "jitwatch_worker_last_seen_timestamp_seconds tells, after the heartbeat window), or once the worker "
        "recorded its exit on an unhandled Python exception (any sidecar reads it). One series per rank.",
    ),
    MetricSpec(
        "jitwatch_specialization_coverage_ratio",
        "gauge",
        ("backend", "kernel"),
        "",
        "Share (0..1) of the Triton kernel's specialization keys needed that were compiled before serving: "
        "keys compiled in startup or warmup (replayed manifests included) / those plus the keys first "
        "compiled in serving; 1 = warmup compiled every key the kernel needed, below 1 = serving compiled "
        "some (jitwatch coverage lists them). Listener-only compiles (a direct triton.compile, Inductor's "
        "kernels) count by exact key. The per-argument class share is a detail of jitwatch coverage and "
        "/jit, not this metric. A kernel has a sample once it compiled; a journal with no Triton compile has "
        "none (absent, never 1: nothing checked is not covered).",
    ),
    MetricSpec(
        "jitwatch_hook_errors_total",
        "counter",
        ("backend", "rank"),
        "",
        "Exceptions caught inside jitwatch's hooks, by backend (never raised into the host); "
        "backend is empty for the vLLM plugin's own failures.",
    ),
    MetricSpec(
        "jitwatch_abandoned_compiles_total",
        "counter",
        ("backend", "rank"),
        "",
        "Compiles that began and never ended — the compiler raised (Triton: a CompilationError, a ptxas "
        "error in an autotune config) — dropped from the in-flight compiles by the worker about 1 s "
        "after they began; each is a compile_abandoned event naming the kernel and the cause.",
    ),
    MetricSpec(
        "jitwatch_backend_info",
        "info",
        ("rank", "backend", "version", "state"),
        "",
        "Each backend of the rank's latest worker (value 1): library version and state "
        "(active / waiting / unavailable / failed / unknown; any other string _other). "
        "version: the library's version (empty when unknown; _other when not version-like or past 16 distinct).",
    ),
    MetricSpec(
        "jitwatch_dropped_events_total",
        "counter",
        ("rank",),
        "",
        "Events a worker could not journal (queue full or storage fault).",
    ),
    MetricSpec(
        "jitwatch_remote_cache_lookups_total",
        "counter",
        ("backend", "rank", "result"),
        "",
        "Compiles that looked in a shared remote compile cache, by result (hit: loaded from it; miss: "
        "compiled), backend and rank (Triton: TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager). "
        "Absent for workers with a local cache.",
    ),
    MetricSpec(
        "jitwatch_export_dropped_events_total",
        "counter",
        ("exporter", "rank"),
        "",
        "Events an off-host exporter could not deliver (exporter: otlp; collector down, timed out or its queue "
        "full), by worker rank. Absent until an exporter drops one. Exporter names outside the name rule, "
        "or past 8 distinct, are summed under exporter=_other.",
    ),
    MetricSpec(
        "jitwatch_journal_events",
        "gauge",
        (),
        "",
        "Events currently kept in the journal's event log (bounded by retention).",
    ),
    MetricSpec(
        "jitwatch_journal_retired_events_total",
        "counter",
        (),
        "",
        "Events removed from the event log by retention (aggregates and metrics keep them).",
    ),
    MetricSpec(
        "jitwatch_journal_skipped_rows_total",
        "counter",
        (),
        "",
        "Journal rows the sidecar's reads skipped because they make no sense (a rank outside 0..2**31-1, a NaN, "
        "negative or text count, an unknown phase or kind...: a buggy or hostile writer, a damaged file), counted "
        "at each read that skips one (a row read on every scrape counts on every scrape); the sidecar logs the "
        "first per connection. Any increase means the journal holds rows /metrics and /jit leave out.",
    ),
    MetricSpec(
        "jitwatch_kernel_labels",
        "gauge",
        ("state",),
        "",
        'Distinct kernel names: state=named have their own label, state=folded share kernel="_other".',
    ),
    MetricSpec(
        "jitwatch_journal_up",
        "gauge",
        (),
        "",
        "1 when the sidecar could read the journal on this scrape, else 0.",
    ),
    MetricSpec(
        "jitwatch_build_info",
        "info",
        ("version", "triton_version", "torch_version", "vllm_version", "python_version"),
        "",
        "Versions of jitwatch and of the stack it watches, as seen by the sidecar (value 1).",
    ),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}


def exposed_series_names() -> set[str]:
    """Every series name a scrape can contain (histogram ``_bucket``/``_sum``/``_count`` included)."""
    out: set[str] = set()
    for m in METRICS:
        if m.type == "histogram":
            out.update({m.name + "_bucket", m.name + "_sum", m.name + "_count"})
        else:
            out.add(m.name)
    return out
