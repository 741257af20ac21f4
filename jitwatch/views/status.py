"""The ``GET /jit`` status document: pydantic models, :func:`build_status` and readiness.

Everything here is computed from one read-only :class:`~jitwatch.store.journal.Journal` (its
``latest_workers``, ``stats``, ``counters`` aggregates and the newest serving-phase
``compile`` events). Rendering for the terminal lives in :mod:`jitwatch.cli.render`. Times are
Unix seconds (float), durations seconds. Unlike the Prometheus metrics, the status carries
specialization keys (redacted of home paths by the store) and real kernel names (no ``_other``
folding), because it is read by people, not stored as time series.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from jitwatch.backends.explain import runnable_fixes
from jitwatch.config import DEFAULT_STALE_SECONDS
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.core.process import processes_exited
from jitwatch.store.journal import (
    ABANDONED_COUNTER,
    Journal,
    RecompileRow,
    StatRow,
    WorkerRow,
    backend_counter_of,
    skipped_rows_total,
)
from jitwatch.text import logger, utc_time
from jitwatch.views.coverage import CoverageReport, KernelCoverage, coverage_for_journal
from jitwatch.views.diagnosis import InflightCompile, inflight_of

log = logger(__name__)

RECENT_SERVING_COMPILES = 20
"""How many of the newest serving-phase compiles ``/jit`` lists."""

NO_WORKER_REASON = "no worker has registered"
NO_JOURNAL_REASON = "no journal yet"  # how a missing journal's error begins (jitwatch.sidecar)

WorkerState = Phase | Literal["stopped", "exited"]
"""A rank's latest worker: its phase, ``stopped`` (it recorded a clean stop) or ``exited`` (its
process was seen gone on the sidecar's machine without recording a stop: killed or crashed)."""


WORST_REQUESTS = 10
"""Stalled requests listed in ``/jit`` (the worst of the newest :data:`STALLS_SCANNED`)."""
STALLS_SCANNED = 500


class BackendInfo(BaseModel):
    """One backend in one worker (from its ``worker_start`` and ``backend_ready`` events)."""

    name: str
    state: str = Field(description="active / waiting (library not imported yet) / unavailable / failed.")
    version: str | None = None
    hooks: list[str] = Field(default_factory=list, description="Mechanisms occupied (hook slots, wrappers).")
    degraded: str | None = Field(default=None, description="What this library version lacks, or why it failed.")


class RankStatus(BaseModel):
    """The latest worker process of one global rank (a restarted worker replaces the old one)."""

    rank: int = Field(description="Global rank (JITWATCH_RANK, RANK or LOCAL_RANK).")
    state: WorkerState = Field(
        description="startup → warmup → serving; stopped once the worker shut down cleanly "
        "(jitwatch.uninstall() or its exit); exited once its process was seen gone on the sidecar's "
        "machine without recording a stop (killed or crashed), or once it recorded its exit on an unhandled "
        "exception (exit_exception): not ready until a new worker for the rank "
        "completes warmup."
    )
    ready: bool = Field(
        description="True once this worker has completed warmup (state serving), is not stale and has not "
        "stopped or exited."
    )
    stopped_ts: float | None = Field(
        default=None, description="Unix time the worker recorded its clean stop, seconds (state stopped)."
    )
    exit_exception: str | None = Field(
        default=None,
        description="Type of the unhandled exception the worker's process exited on, as it recorded at its exit "
        "(state exited; e.g. MemoryError, KeyboardInterrupt): the type, never the message.",
    )
    host: str
    pid: int
    tp_rank: int | None = None
    pp_rank: int | None = None
    dp_rank: int | None = None
    mode: str | None = Field(default=None, description="off / warn / error, as installed in the worker.")
    backends: list[BackendInfo] = Field(
        default_factory=list, description="Each backend the worker selected, with its state and version."
    )
    triton_version: str | None = Field(default=None, description="Triton version seen by the worker.")
    degraded: str | None = Field(default=None, description="Why some Triton hooks are unavailable, if any.")
    started_ts: float = Field(description="Unix time the monitor was installed, seconds.")
    last_seen_ts: float = Field(
        description="Unix time the worker was last seen (latest phase event or heartbeat), seconds."
    )
    stale: bool = Field(
        default=False,
        description="True when the worker heartbeats (JITWATCH_HEARTBEAT_SECONDS) but was last seen "
        "longer ago than the sidecar's stale window (--stale-after / JITWATCH_STALE_SECONDS): "
        "presumed dead; the rank is then not ready. False for a stopped or exited worker (known gone).",
    )
    warmup_start_ts: float | None = None
    warmup_end_ts: float | None = None
    warmup_duration_s: float | None = None
    warmup_compiles: int | None = Field(default=None, description="Compiles during warmup.")
    warmup_compile_seconds: float | None = None
    serving_compiles: int = Field(
        default=0,
        description="Compiles after warmup on this rank, summed over every worker that has held "
        "the rank (like jitwatch_serving_compiles_total); warmup_* fields describe the latest worker only.",
    )
    first_request_latency_s: float | None = Field(
        default=None, description="Latency of the first request after warmup, seconds."
    )
    first_request_ts: float | None = None
    inflight: list[InflightCompile] = Field(
        default_factory=list,
        description="Compiles running now (oldest first) with their age: one rank compiling while its "
        "peers wait in a collective shows here while it happens.",
    )
    oldest_inflight_age_s: float = Field(default=0.0, description="Age of the oldest in-flight compile, 0 if none.")
    collective_deadline_s: float | None = Field(
        default=None, description="The worker's collective deadline (JITWATCH_COLLECTIVE_DEADLINE_S or its default)."
    )


class KernelStatus(BaseModel):
    """One kernel (or graph, or function) of one backend, summed over ranks."""

    backend: str = Field(description="The JIT backend that compiled it.")
    name: str
    ranks: list[int] = Field(description="Ranks that compiled it.")
    compiles_startup: int = 0
    compiles_warmup: int = 0
    compiles_serving: int = Field(default=0, description="Post-warmup compiles: what warmup missed.")
    compile_seconds: float = Field(default=0.0, description="Total compile wall time, seconds, every phase.")
    disk_cache_hits: int = Field(default=0, description="Compiles loaded from the compiler's persistent cache.")
    autotune_runs: int = 0
    autotune_seconds: float = 0.0
    graph_captures: int = Field(default=0, description="CUDA-graph recordings (torch.compile reduce-overhead).")
    graph_capture_seconds: float = 0.0
    last_key: str | None = Field(default=None, description="Specialization key of the latest compile.")
    last_compile_ts: float | None = None


@dataclasses.dataclass(slots=True)
class KernelAcc:
    """:class:`KernelStatus`'s fields summed in plain Python (pydantic's ``__setattr__`` is slow),
    plus the kernel's serving compiles per rank (see :func:`kernel_acc`)."""

    backend: str
    name: str
    ranks: list[int] = dataclasses.field(default_factory=list)
    compiles_startup: int = 0
    compiles_warmup: int = 0
    compiles_serving: int = 0
    compile_seconds: float = 0.0
    disk_cache_hits: int = 0
    autotune_runs: int = 0
    autotune_seconds: float = 0.0
    graph_captures: int = 0
    graph_capture_seconds: float = 0.0
    last_key: str | None = None
    last_compile_ts: float | None = None
    serving_by_rank: dict[int, int] = dataclasses.field(default_factory=dict)


class ServingCompile(BaseModel):
    """One compile that happened after warmup completed."""

    backend: str = Field(description="The JIT backend that compiled.")
    kernel: str | None
    key: str | None
    rank: int
    pid: int
    host: str
    ts: float = Field(description="Unix time the compile ended, seconds.")
    duration_s: float | None
    cache_hit: bool | None = None
    request_id: int | None = Field(default=None, description="Request marked with Monitor.request(), if any.")
    request: str | None = Field(default=None, description="That request's name (e.g. vLLM request ids), if any.")
    reason: str | None = Field(
        default=None,
        description="Why it compiled: 'n_cols: i32 %16 → ==1', 'never warmed (…)', …; for torch.compile "
        "Dynamo's guard failure verbatim (\"0/0: tensor 'x' size mismatch at index 0. expected 8, actual 1\").",
    )
    reason_kind: str | None = Field(
        default=None, description="argument / option / never_warmed / new_combination / compiler / unknown."
    )
    fixes: list[str] = Field(default_factory=list, description="What removes this compile (see `jitwatch why`).")
    reason_class: str | None = Field(
        default=None, description="torch.compile: the reason's class (the metrics' reason_class label)."
    )
    compile_id: str | None = Field(default=None, description="The compiler's id for it (Dynamo: frame/attempt, '0/1').")
    location: str | None = Field(default=None, description="file:line of the compiled function (redacted).")
    parent: str | None = Field(
        default=None,
        description="The compile it happened inside ('torch_compile:0/1' for a Triton kernel Inductor compiled).",
    )


class StalledRequest(BaseModel):
    """A marked serving request that waited on compiles (``request_stall`` event)."""

    rank: int
    pid: int
    host: str
    ts: float = Field(description="Unix time the request ended, seconds.")
    request_id: int | None = None
    request: str | None = Field(default=None, description="The request's name (e.g. vLLM request ids), if any.")
    compile_s: float = Field(description="Compile seconds inside the request, every backend.")
    latency_s: float | None = Field(default=None, description="The request's wall time, seconds.")
    compiled: list[dict[str, Any]] = Field(
        default_factory=list, description="The compiles inside it: backend, kernel, duration_s (first 20)."
    )


class RecompileReason(BaseModel):
    """Recompiles of one function for one reason class in one phase, summed over ranks (kept
    exact by the journal's aggregates, whatever retention removed)."""

    backend: str
    kernel: str
    reason_class: str
    phase: Phase
    ranks: list[int]
    count: int
    seconds: float = Field(default=0.0, description="Summed wall time, seconds.")
    last_reason: str | None = Field(default=None, description="The newest verbatim reason of this class.")
    last_ts: float | None = None


class BackendTotals(BaseModel):
    """One backend, summed over kernels and ranks."""

    name: str
    kernels: int = 0
    compiles_startup: int = 0
    compiles_warmup: int = 0
    compiles_serving: int = 0
    compile_seconds: float = Field(default=0.0, description="Seconds, every phase.")
    disk_cache_hits: int = 0
    autotune_runs: int = 0
    graph_captures: int = 0
    hook_errors: int = 0
    abandoned_compiles: int = Field(
        default=0,
        description="Compiles that began and never ended (the compiler raised: a CompilationError, a ptxas "
        "error in an autotune config), dropped from the in-flight compiles by the worker (compile_abandoned events).",
    )


class Totals(BaseModel):
    ranks: int = 0
    ranks_ready: int = 0
    kernels: int = 0
    compiles: int = 0
    compiles_startup: int = 0
    compiles_warmup: int = 0
    compiles_serving: int = 0
    compile_seconds: float = 0.0
    disk_cache_hits: int = 0
    autotune_runs: int = 0
    hook_errors: int = 0
    abandoned_compiles: int = Field(
        default=0,
        description="Compiles that began and never ended (the compiler raised: a CompilationError, a ptxas "
        "error in an autotune config), dropped from the in-flight compiles by the worker (compile_abandoned events).",
    )
    dropped_events: int = 0
    journal_events: int = Field(default=0, description="Events kept in the event log now.")
    retired_events: int = Field(default=0, description="Events removed by retention (still in the totals).")
    skipped_rows: int = Field(
        default=0,
        description="Journal rows this process's reads skipped because they make no sense (a rank out of range, "
        "a NaN count, an unknown phase...), counted at each read that skips one; the same count as "
        "jitwatch_journal_skipped_rows_total. Above 0: the journal holds rows this document leaves out (the "
        "sidecar's log names the first).",
    )


class JitStatus(BaseModel):
    """Body of ``GET /jit``."""

    generated_ts: float = Field(description="Unix time this status was built, seconds.")
    journal_up: bool = Field(description="False when the journal is missing or unreadable.")
    journal_error: str | None = None
    journal_dir: str | None = Field(
        default=None,
        description="The journal directory the sidecar reads, absolute, a home directory shown as `~` "
        "(jitwatch.redact); null when not built by a sidecar (or by one before 2026-12-03).",
    )
    mode: str | None = Field(
        default=None, description="The workers' mode (off/warn/error), 'mixed' if they differ, null if none."
    )
    ready: bool = Field(description="Same rule as /readyz: ≥ 1 rank and every rank has completed warmup.")
    not_ready_reason: str | None = None
    ranks: list[RankStatus] = Field(default_factory=list)
    kernels: list[KernelStatus] = Field(
        default_factory=list,
        description="Sorted by serving compiles, then all compiles (descending); at most `kernels` "
        "(query parameter, default 100) entries — totals.kernels counts them all.",
    )
    recent_serving_compiles: list[ServingCompile] = Field(
        default_factory=list, description=f"Newest first, at most {RECENT_SERVING_COMPILES}."
    )
    worst_requests: list[StalledRequest] = Field(
        default_factory=list,
        description=f"The {WORST_REQUESTS} recent requests that waited longest on compiles, worst first.",
    )
    recompile_reasons: list[RecompileReason] = Field(
        default_factory=list,
        description="Recompiles by (backend, function, reason class, phase): serving first, then by count; "
        "at most `kernels` entries.",
    )
    totals: Totals = Field(default_factory=Totals)
    backends: list[BackendTotals] = Field(default_factory=list, description="Per-backend totals, by name.")
    backends_in_journal: list[str] | None = Field(
        default=None,
        description="Only when `?backend=` names no backend the journal has kernels or counters of (a "
        "misspelt name such as `trtion`, or a backend that compiled nothing): the backends it has, by name, so "
        "the empty answer says why; null otherwise.",
    )
    coverage: list[KernelCoverage] = Field(
        default_factory=list,
        description="Specialization coverage per kernel (jitwatch.views.coverage): Triton's argument classes "
        "compiled before serving vs not.",
    )


class StatusSource(Protocol):
    """What :func:`build_status` reads: a read-only :class:`~jitwatch.store.journal.Journal`, or the
    sidecar's in-memory copy of it (:class:`jitwatch.views.live.LiveAggregates`)."""

    def latest_workers(self) -> dict[int, WorkerRow]: ...
    def stats(self) -> list[StatRow]: ...
    def counters(self) -> dict[tuple[int, str], float]: ...
    def count_events(self) -> int: ...
    def recompile_stats(self) -> list[RecompileRow]: ...
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
    ) -> list[Event]: ...


def worst_requests(journal: StatusSource, limit: int = WORST_REQUESTS) -> list[StalledRequest]:
    """The ``limit`` requests with the most compile seconds among the newest ``request_stall``
    events, worst first."""
    out: list[StalledRequest] = []
    for e in journal.events(kind=EventKind.REQUEST_STALL, limit=STALLS_SCANNED):
        compiled = e.attrs.get("compiled")
        out.append(
            StalledRequest(
                rank=e.rank,
                pid=e.pid,
                host=e.host,
                ts=e.ts,
                request_id=_opt_int(e.attrs.get("request_id")),
                request=_opt_str(e.attrs.get("request")),
                compile_s=e.duration_s or 0.0,
                latency_s=e.attrs.get("latency_s") if isinstance(e.attrs.get("latency_s"), float) else None,
                compiled=[c for c in compiled if isinstance(c, dict)] if isinstance(compiled, list) else [],
            )
        )
    return sorted(out, key=lambda r: -r.compile_s)[:limit]


class Readiness(BaseModel):
    """Body of ``GET /readyz`` (200 when ``ready``, else 503)."""

    status: Literal["ready", "not ready"]
    ready: bool
    reason: str | None = None
    ranks: dict[str, WorkerState] = Field(
        default_factory=dict,
        description="State of each rank's latest worker (stopped: it shut down cleanly; exited: its process was "
        "seen gone on this machine without recording a stop).",
    )
    not_ready_ranks: list[int] = Field(default_factory=list)
    stale_ranks: list[int] = Field(
        default_factory=list,
        description="Ranks whose latest worker stopped heartbeating for longer than the stale window: presumed "
        "dead (neither stopped nor exited ranks, which are known gone).",
    )
    exited_ranks: list[int] = Field(
        default_factory=list,
        description="Ranks whose latest worker's process was seen gone on this machine without recording a stop "
        "(killed or crashed; state exited): known gone, not ready at once, not in stale_ranks. Added 2026-12-03; "
        "until then such ranks were listed in stale_ranks with state serving.",
    )


def stale_window(worker: WorkerRow, stale_after: float) -> float | None:
    """Seconds after which ``worker`` counts as stale, or ``None`` when it cannot be judged.

    Only workers that advertise a heartbeat (``heartbeat_s`` in their ``worker_start`` attrs,
    from ``JITWATCH_HEARTBEAT_SECONDS``) are judged: rows written by workers without one (heartbeat
    off, older jitwatch) only advance on events, so their age says nothing. The window is
    ``stale_after``, raised to 3 heartbeats for a worker with a longer interval; ``stale_after <= 0``
    turns the check off.
    """
    if stale_after <= 0:
        return None
    try:
        beat = float(worker.attrs.get("heartbeat_s") or 0.0)
    except (TypeError, ValueError):
        return None
    if not beat > 0:
        return None
    return max(stale_after, 3 * beat)


def worker_state(worker: WorkerRow, exited: bool = False) -> WorkerState:
    """``"stopped"`` once ``worker`` recorded its clean stop (:attr:`WorkerRow.stopped_ts`),
    ``"exited"`` when it recorded its exit on an unhandled exception
    (:attr:`WorkerRow.exit_exception`) or its process was seen gone without a record (``exited``:
    its rank is in :func:`exited_ranks`), else its phase."""
    if worker.exit_exception is not None:
        return "exited"
    if worker.stopped_ts is not None:
        return "stopped"
    return "exited" if exited else worker.state


def exited_ranks(workers: dict[int, WorkerRow]) -> dict[int, int]:
    """``{rank: pid}`` for each rank whose latest worker's process has exited without recording a
    stop, as a reader on the same machine and PID namespace sees it
    (:func:`jitwatch.core.process.processes_exited`, one pass for every rank: ``kill -9``, the OOM
    killer, ``vllm serve``'s default shutdown, a crash, ``os._exit``); ranks that cannot be told
    are left out (judged by heartbeat). Ranks whose worker recorded its exit on an unhandled
    exception (:attr:`WorkerRow.exit_exception`, any sidecar can read it) are in too, without a
    look at the process. Never raises."""
    recorded = {rank: w.pid for rank, w in sorted(workers.items()) if w.exit_exception is not None}
    candidates = [(rank, w) for rank, w in sorted(workers.items()) if rank not in recorded and w.stopped_ts is None]
    gone = processes_exited([(w.pid, w.attrs.get("process")) for _, w in candidates])
    seen = {rank: w.pid for (rank, w), exited in zip(candidates, gone, strict=True) if exited}
    return dict(sorted({**recorded, **seen}.items()))


def stale_ranks(
    workers: dict[int, WorkerRow], now: float, stale_after: float, exited: dict[int, int] | None = None
) -> dict[int, float]:
    """``{rank: seconds since last seen}`` (``now``, Unix seconds) for each rank whose latest worker
    is stale, presumed dead: it heartbeats and its window passed (:func:`stale_window`). A worker
    known gone is never stale: one that recorded its clean stop is ``stopped``, one whose process
    was seen exited (``exited``, default :func:`exited_ranks`) is ``exited``."""
    exited = exited_ranks(workers) if exited is None else exited
    out: dict[int, float] = {}
    for rank, w in sorted(workers.items()):
        if w.stopped_ts is not None or rank in exited:
            continue
        window = stale_window(w, stale_after)
        if window is not None and now - w.last_ts > window:
            out[rank] = now - w.last_ts
    return out


def _plural(count: int, one: str, several: str) -> str:
    return one if count == 1 else several


def readiness(
    workers: dict[int, WorkerRow],
    *,
    now: float | None = None,
    stale_after: float = DEFAULT_STALE_SECONDS,
    exited: dict[int, int] | None = None,
) -> Readiness:
    """Ready when at least one rank is known and every rank's latest worker is ``serving``, not
    stopped (a clean shutdown it recorded: not ready at once), not exited (its process seen gone on
    this machine without a stop, :func:`exited_ranks`: not ready at once, listed in
    ``exited_ranks``) and not stale (:func:`stale_window`: presumed dead, listed in
    ``stale_ranks``); ``now`` defaults to ``time.time()``, Unix seconds; ``exited``, the caller's
    :func:`exited_ranks` of the same ``workers``, when it has them already."""
    if not workers:
        return Readiness(status="not ready", ready=False, reason=NO_WORKER_REASON)
    now = time.time() if now is None else now
    exited = exited_ranks(workers) if exited is None else exited
    states = {str(rank): worker_state(w, rank in exited) for rank, w in sorted(workers.items())}
    stale = stale_ranks(workers, now, stale_after, exited)
    stopped = {rank: w.stopped_ts for rank, w in sorted(workers.items()) if w.stopped_ts is not None}
    waiting = [
        rank
        for rank, w in sorted(workers.items())
        if w.state is not Phase.SERVING and rank not in stale and rank not in stopped and rank not in exited
    ]
    # The incidents first (exited, then stale: a dead peer hangs the job), then the planned stops.
    reasons: list[str] = []
    crashed = {r: workers[r] for r in exited if workers[r].exit_exception is not None}
    if crashed:
        detail = ", ".join(f"{r} (pid {w.pid}, {w.exit_exception})" for r, w in crashed.items())
        whose = _plural(len(crashed), "the worker process of rank", "the worker processes of ranks")
        reasons.append(f"{whose} {detail} exited on an unhandled exception")
    killed = {r: pid for r, pid in exited.items() if r not in crashed}
    if killed:
        detail = ", ".join(f"{r} (pid {pid})" for r, pid in killed.items())
        whose = _plural(len(killed), "the worker process of rank", "the worker processes of ranks")
        reasons.append(f"{whose} {detail} exited without recording a stop (killed or crashed)")
    if stale:
        detail = ", ".join(f"{r} (last seen {age:.0f}s ago)" for r, age in stale.items())
        gone = _plural(len(stale), "worker gone?", "workers gone?")
        reasons.append(f"no heartbeat from {_plural(len(stale), 'rank', 'ranks')} {detail}: {gone}")
    if stopped:
        at = ", ".join(utc_time(ts) for ts in stopped.values())
        listed = ", ".join(str(r) for r in stopped)
        exits = _plural(len(stopped), "clean exit", "clean exits")
        reasons.append(f"{_plural(len(stopped), 'rank', 'ranks')} {listed} stopped ({exits} at {at})")
    if waiting:
        detail = ", ".join(f"{r} ({workers[r].state.value})" for r in waiting)
        reasons.append(f"warmup not complete on {_plural(len(waiting), 'rank', 'ranks')} {detail}")
    if reasons:
        return Readiness(
            status="not ready",
            ready=False,
            reason="; ".join(reasons),
            ranks=states,
            not_ready_ranks=sorted([*stopped, *exited, *waiting, *stale]),
            stale_ranks=sorted(stale),
            exited_ranks=sorted(exited),
        )
    return Readiness(status="ready", ready=True, ranks=states)


def _opt_int(value: object) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def _opt_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def backend_infos(attrs: dict[str, Any]) -> list[BackendInfo]:
    """The worker row's ``backends`` attrs (jitwatch 0.2) as models; a 0.1 worker's Triton fields
    (``triton_version``, ``hooks``, ``degraded``) as one ``triton`` entry."""
    raw = attrs.get("backends")
    out: list[BackendInfo] = []
    if isinstance(raw, dict):
        for name, info in sorted(raw.items()):
            if not isinstance(info, dict):
                continue
            hooks = info.get("hooks")
            out.append(
                BackendInfo(
                    name=str(name),
                    state=str(info.get("state") or "unknown"),
                    version=_opt_str(info.get("version")),
                    hooks=[str(h) for h in hooks] if isinstance(hooks, list) else [],
                    degraded=_opt_str(info.get("degraded")),
                )
            )
    elif attrs.get("triton_version") is not None or attrs.get("hooks") is not None:
        hooks = attrs.get("hooks")
        out.append(
            BackendInfo(
                name="triton",
                state="active" if hooks else "failed",
                version=_opt_str(attrs.get("triton_version")),
                hooks=[str(h) for h in hooks] if isinstance(hooks, list) else [],
                degraded=_opt_str(attrs.get("degraded")),
            )
        )
    return out


def _mode(modes: Iterable[str | None]) -> str | None:
    seen = {m for m in modes if m}
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else "mixed"


DEFAULT_KERNELS_LIMIT = 100
"""Kernels listed in ``/jit`` by default (``totals.kernels`` always counts them all)."""


def build_status(
    journal: StatusSource | None,
    *,
    error: str | None = None,
    now: float | None = None,
    kernels_limit: int = DEFAULT_KERNELS_LIMIT,
    stale_after: float = DEFAULT_STALE_SECONDS,
    backend: str | None = None,
    coverage: list[KernelCoverage] | None = None,
    parts: StatusParts | None = None,
    journal_dir: str | os.PathLike[str] | None = None,
) -> JitStatus:
    """Build the ``/jit`` document from ``journal`` (``None``: missing journal → empty status).

    ``backend``: only that backend's kernels, totals and serving compiles (ranks are listed
    whatever the filter).

    ``stale_after``: seconds without a heartbeat after which a rank is ``stale`` and not ready
    (:func:`readiness`); ``now``: Unix seconds, default ``time.time()``.

    ``kernels_limit`` bounds the ``kernels`` and ``coverage`` lists (most serving compiles first),
    so a journal with thousands of kernel names still gives a small, fast answer.

    ``coverage``: the coverage section as computed already (the sidecar's live path); default
    :func:`cached_coverage` of ``journal`` (which must then be a :class:`Journal`).

    ``parts``: :func:`status_parts` of ``journal`` for the same ``backend`` and ``kernels_limit``,
    computed already (the sidecar keeps them while the aggregates are unchanged); everything that
    depends on the clock (staleness, readiness, in-flight ages) is computed here, at ``now``.

    ``journal_dir``: the journal's directory, named by the serving compiles' fixes
    (:func:`status_parts`).

    Raises ``sqlite3.Error`` if the journal cannot be read mid-way (the sidecar catches it).
    """
    now = time.time() if now is None else now
    if journal is None:  # missing: nobody registered; unreadable: why, not "no worker" (unknown)
        reason = error if error and not error.startswith(NO_JOURNAL_REASON) else NO_WORKER_REASON
        return JitStatus(generated_ts=now, journal_up=False, journal_error=error, ready=False, not_ready_reason=reason)
    if parts is None:
        parts = status_parts(journal, kernels_limit=kernels_limit, backend=backend, journal_dir=journal_dir)
    workers, serving_by_rank = parts.workers, parts.serving_by_rank
    totals = parts.totals.model_copy()
    totals.skipped_rows = skipped_rows_total()  # now, after the reads of this build's parts

    exited = exited_ranks(workers)  # once: /proc read at one moment for the ranks and the reason alike
    stale = stale_ranks(workers, now, stale_after, exited)
    ranks: list[RankStatus] = []
    for rank, w in sorted(workers.items()):
        inflight = inflight_of(w.attrs, now, last_seen=w.last_ts, stale_after=stale_after, exited=rank in exited)
        ranks.append(
            RankStatus(
                rank=rank,
                state=worker_state(w, rank in exited),
                ready=w.state is Phase.SERVING and rank not in stale and rank not in exited and w.stopped_ts is None,
                stopped_ts=w.stopped_ts,
                exit_exception=w.exit_exception,
                stale=rank in stale,
                host=w.host,
                pid=w.pid,
                tp_rank=_opt_int(w.attrs.get("tp_rank")),
                pp_rank=_opt_int(w.attrs.get("pp_rank")),
                dp_rank=_opt_int(w.attrs.get("dp_rank")),
                mode=w.mode,
                backends=backend_infos(w.attrs),
                triton_version=_opt_str(w.attrs.get("triton_version")),
                degraded=_opt_str(w.attrs.get("degraded")),
                started_ts=w.started_ts,
                last_seen_ts=w.last_ts,
                warmup_start_ts=w.warmup_start_ts,
                warmup_end_ts=w.warmup_end_ts,
                warmup_duration_s=w.warmup_duration_s,
                warmup_compiles=w.warmup_compiles,
                warmup_compile_seconds=w.warmup_compile_seconds,
                serving_compiles=serving_by_rank.get(rank, 0),
                first_request_latency_s=w.first_request_s,
                first_request_ts=w.first_request_ts,
                inflight=inflight,
                oldest_inflight_age_s=inflight[0].age_s if inflight else 0.0,
                collective_deadline_s=_opt_float(w.attrs.get("collective_deadline_s")),
            )
        )
    totals.ranks = len(ranks)
    totals.ranks_ready = sum(r.ready for r in ranks)
    ready = readiness(workers, now=now, stale_after=stale_after, exited=exited)
    return JitStatus(
        generated_ts=now,
        journal_up=True,
        mode=_mode(w.mode for w in workers.values()),
        ready=ready.ready,
        not_ready_reason=ready.reason,
        ranks=ranks,
        kernels=parts.kernels,
        recent_serving_compiles=parts.recent_serving_compiles,
        recompile_reasons=parts.recompile_reasons,
        worst_requests=parts.worst_requests,
        totals=totals,
        backends=parts.backends,
        backends_in_journal=parts.backends_in_journal,
        coverage=_coverage_section(journal, coverage)[:kernels_limit] if backend in (None, "triton") else [],
    )


@dataclasses.dataclass
class StatusParts:
    """What :func:`build_status` reads from the aggregates and the event log, without the clock:
    kept by the sidecar while the aggregates do not change (:mod:`jitwatch.views.live`)."""

    workers: dict[int, WorkerRow]
    serving_by_rank: dict[int, int]
    kernels: list[KernelStatus]
    backends: list[BackendTotals]
    totals: Totals
    """Everything but ``ranks`` and ``ranks_ready`` (judged at answer time)."""
    recent_serving_compiles: list[ServingCompile]
    recompile_reasons: list[RecompileReason]
    worst_requests: list[StalledRequest]
    backends_in_journal: list[str] | None = None
    """:attr:`JitStatus.backends_in_journal`: set only when ``backend`` matched nothing."""


_BACKEND_SUMS = (
    "kernels",
    "compiles_startup",
    "compiles_warmup",
    "compiles_serving",
    "compile_seconds",
    "disk_cache_hits",
    "autotune_runs",
    "graph_captures",
)
""":class:`BackendTotals` fields summed over a backend's kernels (``kernels`` counted)."""


def kernel_acc(backend: str, name: str, rows: Iterable[StatRow]) -> KernelAcc:
    """One kernel's ``/jit`` entry summed over its aggregate rows (in :meth:`Journal.stats` order:
    the float sums and the latest key on a tie depend on it)."""
    k = KernelAcc(backend=backend, name=name)
    for row in rows:
        if row.rank not in k.ranks:
            k.ranks.append(row.rank)
        if row.kind == EventKind.AUTOTUNE.value:
            k.autotune_runs += row.count
            k.autotune_seconds += row.seconds
            continue
        if row.kind == EventKind.GRAPH_CAPTURE.value:
            k.graph_captures += row.count
            k.graph_capture_seconds += row.seconds
            continue
        if row.phase is Phase.STARTUP:
            k.compiles_startup += row.count
        elif row.phase is Phase.WARMUP:
            k.compiles_warmup += row.count
        else:
            k.compiles_serving += row.count
            k.serving_by_rank[row.rank] = k.serving_by_rank.get(row.rank, 0) + row.count
        k.compile_seconds += row.seconds
        k.disk_cache_hits += row.cache_hits
        if row.last_ts is not None and (k.last_compile_ts is None or row.last_ts > k.last_compile_ts):
            k.last_compile_ts = row.last_ts
            k.last_key = row.last_key
    k.ranks.sort()
    return k


def kernel_accs(stats: Iterable[StatRow]) -> dict[tuple[str, str], KernelAcc]:
    """:func:`kernel_acc` of every (backend, kernel) of ``stats`` (:meth:`Journal.stats` order), in
    that order."""
    rows: dict[tuple[str, str], list[StatRow]] = {}
    for row in stats:
        rows.setdefault((row.backend, row.kernel), []).append(row)
    return {key: kernel_acc(key[0], key[1], kr) for key, kr in rows.items()}


def status_parts(
    journal: StatusSource,
    *,
    kernels_limit: int = DEFAULT_KERNELS_LIMIT,
    backend: str | None = None,
    accs: dict[tuple[str, str], KernelAcc] | None = None,
    journal_dir: str | os.PathLike[str] | None = None,
) -> StatusParts:
    """The clock-free parts of :func:`build_status` (same arguments). ``accs``: :func:`kernel_accs`
    of ``journal.stats()`` computed already (the sidecar keeps them per kernel), in (backend,
    kernel) order. ``journal_dir``: the journal's directory (default ``journal.directory``, a
    :class:`Journal`'s), which the serving compiles' fixes name in their manifest commands
    (:func:`~jitwatch.backends.explain.runnable_fix`; the journal keeps them as written).
    Raises ``sqlite3.Error``."""
    if journal_dir is None:
        journal_dir = getattr(journal, "directory", None)
    workers = journal.latest_workers()
    if accs is None:
        accs = kernel_accs(journal.stats())
    counters = journal.counters()
    hook_errors = backend_counter_of(counters, "hook_errors")
    abandoned = backend_counter_of(counters, ABANDONED_COUNTER)

    serving_by_rank: dict[int, int] = {}
    kernels = {key: k for key, k in accs.items() if backend is None or key[0] == backend}
    sums: dict[str, dict[str, Any]] = {}  # plain dicts first: pydantic's __setattr__ is slow
    for k in kernels.values():
        for rank, n in k.serving_by_rank.items():
            serving_by_rank[rank] = serving_by_rank.get(rank, 0) + n
        acc = sums.get(k.backend)
        if acc is None:
            acc = sums[k.backend] = dict.fromkeys(_BACKEND_SUMS, 0)
            acc["compile_seconds"] = 0.0
        acc["kernels"] += 1
        for f in _BACKEND_SUMS[1:]:
            acc[f] += getattr(k, f)
    per_backend = {name: BackendTotals(name=name, **acc) for name, acc in sums.items()}
    totals = Totals()
    for (name, _rank), value in hook_errors.items():
        if backend is None or name == backend:
            per_backend.setdefault(name, BackendTotals(name=name)).hook_errors += int(value)
    for (name, _rank), value in abandoned.items():
        if backend is None or name == backend:
            per_backend.setdefault(name, BackendTotals(name=name)).abandoned_compiles += int(value)
    present = None  # the filter matched nothing: which backends the journal has, as a hint
    if backend is not None and backend not in per_backend:
        named = {name for name, _ in accs} | {name for name, _ in hook_errors} | {name for name, _ in abandoned}
        present = sorted(name for name in named if name)  # "": a counter of no backend (dropped events)
    for b in per_backend.values():
        totals.compiles_startup += b.compiles_startup
        totals.compiles_warmup += b.compiles_warmup
        totals.compiles_serving += b.compiles_serving
        totals.compile_seconds += b.compile_seconds
        totals.disk_cache_hits += b.disk_cache_hits
        totals.autotune_runs += b.autotune_runs
    totals.compiles = totals.compiles_startup + totals.compiles_warmup + totals.compiles_serving
    totals.kernels = len(kernels)

    totals.hook_errors = int(sum(b.hook_errors for b in per_backend.values()))
    totals.abandoned_compiles = int(sum(b.abandoned_compiles for b in per_backend.values()))
    totals.dropped_events = int(sum(v for (r, name), v in counters.items() if name == "dropped_events"))
    totals.retired_events = int(sum(v for (r, name), v in counters.items() if name == "retired_events"))
    totals.journal_events = journal.count_events()

    recent = [
        ServingCompile(
            backend=e.backend or "triton",
            kernel=e.kernel,
            key=e.key,
            rank=e.rank,
            pid=e.pid,
            host=e.host,
            ts=e.ts,
            duration_s=e.duration_s,
            cache_hit=e.cache_hit,
            request_id=_opt_int(e.attrs.get("request_id")),
            request=_opt_str(e.attrs.get("request")),
            reason=_opt_str(e.attrs.get("reason")),
            reason_kind=_opt_str(e.attrs.get("reason_kind")),
            fixes=runnable_fixes(e.attrs.get("fixes"), journal_dir),
            reason_class=_opt_str(e.attrs.get("reason_class")),
            compile_id=_opt_str(e.attrs.get("compile_id")),
            location=_opt_str(e.attrs.get("location")),
            parent=_opt_str(e.attrs.get("parent")),
        )
        for e in journal.events(
            kind=EventKind.COMPILE, phase=Phase.SERVING, backend=backend, limit=RECENT_SERVING_COMPILES
        )
    ]

    reasons: dict[tuple[str, str, str, Phase], RecompileReason] = {}
    for rr in journal.recompile_stats():
        if backend is not None and rr.backend != backend:
            continue
        item = reasons.get((rr.backend, rr.kernel, rr.reason_class, rr.phase))
        if item is None:
            item = reasons[(rr.backend, rr.kernel, rr.reason_class, rr.phase)] = RecompileReason(
                backend=rr.backend, kernel=rr.kernel, reason_class=rr.reason_class, phase=rr.phase, ranks=[], count=0
            )
        if rr.rank not in item.ranks:
            item.ranks.append(rr.rank)
        item.count += rr.count
        item.seconds += rr.seconds
        if rr.last_ts is not None and (item.last_ts is None or rr.last_ts > item.last_ts):
            item.last_ts, item.last_reason = rr.last_ts, rr.last_reason
    recompile_reasons = sorted(
        reasons.values(), key=lambda r: (r.phase is not Phase.SERVING, -r.count, r.backend, r.kernel, r.reason_class)
    )[:kernels_limit]

    return StatusParts(
        workers=workers,
        serving_by_rank=serving_by_rank,
        kernels=[
            KernelStatus(**{f: getattr(k, f) for f in KernelStatus.model_fields})
            for k in sorted(
                kernels.values(), key=lambda k: (-k.compiles_serving, -(k.compiles_warmup + k.compiles_startup), k.name)
            )[:kernels_limit]
        ],
        backends=[per_backend[name] for name in sorted(per_backend)],
        totals=totals,
        recent_serving_compiles=recent,
        recompile_reasons=recompile_reasons,
        worst_requests=worst_requests(journal),
        backends_in_journal=present,
    )


_coverage_cache: dict[str, tuple[tuple[int, int | None, float], CoverageReport, float]] = {}
_coverage_lock = threading.Lock()
_coverage_computing: dict[str, threading.Lock] = {}  # one per journal file: single flight
_coverage_background: set[str] = set()
COVERAGE_REFRESH_S = 15.0
"""While compiles keep arriving, coverage is recomputed at most this often (seconds)."""


def _coverage_key(journal: Journal) -> tuple[int, int | None, float]:
    newest = journal.events(kind=EventKind.COMPILE, limit=1)
    retired = sum(v for (_rank, name), v in journal.counters().items() if name == "retired_events")
    return (journal.path.stat().st_ino, newest[0].id if newest else None, retired)  # inode: a replaced file


def cached_coverage(journal: Journal, *, background: bool = False) -> CoverageReport:
    """``coverage_for_journal(journal)``, recomputed only when the journal's compile events changed.

    The report depends only on the newest compile events still kept, so it is cached per journal
    file under (file inode, newest ``compile`` event id, events retired so far): a scrape or ``/jit`` with no new
    compile costs two indexed queries instead of re-parsing up to 20 000 keys (~1 s on one core).
    While compiles keep arriving the report may lag by up to :data:`COVERAGE_REFRESH_S` seconds.
    Concurrent callers that find it out of date compute it once (single flight, per journal file).
    ``background=True``: when a report of the same file exists, return it at once and recompute in
    a background thread (its own read-only connection) — the sidecar's live path, which must not
    spend a second of a request on it; only the first report of a file is computed inline.
    Thread-safe. Raises ``sqlite3.Error`` like :func:`~jitwatch.views.coverage.coverage_for_journal`.
    """
    key = _coverage_key(journal)
    cache_id = str(journal.path.resolve())
    now = time.monotonic()
    with _coverage_lock:
        hit = _coverage_cache.get(cache_id)
        computing = _coverage_computing.setdefault(cache_id, threading.Lock())
    if hit is not None and (hit[0] == key or (hit[0][0] == key[0] and now - hit[2] < COVERAGE_REFRESH_S)):
        return hit[1]  # unchanged, or changed but recomputed less than COVERAGE_REFRESH_S ago
    if background and hit is not None and hit[0][0] == key[0]:
        _refresh_coverage_in_background(cache_id, journal.directory, computing)
        return hit[1]
    with computing:
        with _coverage_lock:
            hit = _coverage_cache.get(cache_id)
        if hit is not None and hit[0] == key:
            return hit[1]  # another caller computed it while this one waited
        report = coverage_for_journal(journal)
        with _coverage_lock:
            _coverage_cache[cache_id] = (key, report, time.monotonic())
    return report


def _refresh_coverage_in_background(cache_id: str, directory: Path, computing: threading.Lock) -> None:
    with _coverage_lock:
        if cache_id in _coverage_background:
            return
        _coverage_background.add(cache_id)

    def run() -> None:
        try:
            with computing, Journal(directory, readonly=True) as journal:
                key = _coverage_key(journal)
                report = coverage_for_journal(journal)
                with _coverage_lock:
                    _coverage_cache[cache_id] = (key, report, time.monotonic())
        except Exception as exc:  # noqa: BLE001 - the last report stays; the next request retries
            log.debug("jitwatch: background coverage refresh failed: %s: %s", type(exc).__name__, exc)
        finally:
            with _coverage_lock:
                _coverage_background.discard(cache_id)

    threading.Thread(target=run, name="jitwatch-coverage", daemon=True).start()


def _coverage_section(journal: StatusSource, given: list[KernelCoverage] | None) -> list[KernelCoverage]:
    if given is not None:
        return given
    if not isinstance(journal, Journal):
        return []
    report = guarded_coverage(journal)
    return [] if report is None else report.kernels


def guarded_coverage(journal: Journal, *, background: bool = False) -> CoverageReport | None:
    """:func:`cached_coverage`, or ``None`` (logged as a warning) when it fails with anything but
    the journal's own ``sqlite3.Error`` (re-raised): an unparsable key costs only the coverage
    section of ``/jit`` or the coverage family of ``/metrics``, never the whole answer."""
    try:
        return cached_coverage(journal, background=background)
    except sqlite3.Error:
        raise
    except Exception as exc:  # noqa: BLE001
        log.warning("jitwatch: specialization coverage failed: %s: %s", type(exc).__name__, exc)
        return None
