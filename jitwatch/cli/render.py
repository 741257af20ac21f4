"""Terminal rendering for the CLI (rich tables): ``jitwatch status`` and ``jitwatch coverage``.

Views (:mod:`jitwatch.views`) build pydantic documents; this module only prints them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from jitwatch.views.coverage import CoverageReport
from jitwatch.views.status import JitStatus

if TYPE_CHECKING:
    from rich.console import Console


def _ts(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def render_status(status: JitStatus, console: Console) -> None:
    """Print ``status`` as rich tables (what ``jitwatch status`` shows)."""
    from rich.table import Table

    headline = "[green]READY[/green]" if status.ready else f"[yellow]NOT READY[/yellow] ({status.not_ready_reason})"
    if not status.journal_up:
        headline += f" [red]journal unavailable[/red] {status.journal_error or ''}"
    console.print(f"jitwatch: {headline}   mode={status.mode or '-'}")

    ranks = Table(title="Ranks")
    for col in (
        "rank",
        "state",
        "host",
        "pid",
        "tp/pp/dp",
        "warmup",
        "warmup compiles",
        "serving compiles",
        "first req",
    ):
        ranks.add_column(col)
    for r in status.ranks:
        tpd = "/".join("-" if v is None else str(v) for v in (r.tp_rank, r.pp_rank, r.dp_rank))
        state = f"[green]{r.state.value}[/green]" if r.ready else f"[yellow]{r.state.value}[/yellow]"
        if r.stale:
            state += f" [red]stale[/red] (last seen {_ts(r.last_seen_ts)})"
        ranks.add_row(
            str(r.rank),
            state,
            r.host,
            str(r.pid),
            tpd,
            _secs(r.warmup_duration_s),
            "-" if r.warmup_compiles is None else str(r.warmup_compiles),
            str(r.serving_compiles),
            _secs(r.first_request_latency_s),
        )
    console.print(ranks)

    kernels = Table(title="Kernels")
    for col in (
        "backend",
        "kernel",
        "warmup",
        "serving",
        "compile s",
        "disk hits",
        "autotune",
        "last compile",
        "last key",
    ):
        kernels.add_column(col, overflow="fold")
    for k in status.kernels:
        serving = f"[red]{k.compiles_serving}[/red]" if k.compiles_serving else "0"
        kernels.add_row(
            k.backend,
            k.name,
            str(k.compiles_warmup),
            serving,
            f"{k.compile_seconds:.3f}",
            str(k.disk_cache_hits),
            str(k.autotune_runs),
            _ts(k.last_compile_ts),
            (k.last_key or "-")[:80],
        )
    console.print(kernels)

    if status.recent_serving_compiles:
        recent = Table(title="Recent serving-phase compiles")
        for col in ("time", "rank", "backend", "kernel", "duration", "request", "id", "why", "parent"):
            recent.add_column(col, overflow="fold")
        for c in status.recent_serving_compiles:
            recent.add_row(
                _ts(c.ts),
                str(c.rank),
                c.backend,
                c.kernel or "-",
                _secs(c.duration_s) + (" (load)" if c.cache_hit else ""),
                "-" if c.request_id is None else str(c.request_id),
                c.compile_id or "-",
                (c.reason or c.key or "-")[:120],
                c.parent or "-",
            )
        console.print(recent)
    if status.recompile_reasons:
        reasons = Table(title="Recompiles by reason")
        for col in ("backend", "function", "phase", "reason class", "count", "seconds", "ranks", "latest reason"):
            reasons.add_column(col, overflow="fold")
        for rr in status.recompile_reasons:
            reasons.add_row(
                rr.backend,
                rr.kernel,
                rr.phase.value,
                rr.reason_class,
                str(rr.count),
                f"{rr.seconds:.3f}",
                ",".join(str(x) for x in rr.ranks),
                (rr.last_reason or "-")[:120],
            )
        console.print(reasons)
    t = status.totals
    console.print(
        f"totals: {t.ranks_ready}/{t.ranks} ranks ready, {t.kernels} kernels, {t.compiles} compiles "
        f"({t.compiles_warmup} warmup, {t.compiles_serving} serving), {t.compile_seconds:.3f}s compiling, "
        f"{t.hook_errors} hook errors, {t.dropped_events} dropped events"
    )


def render_coverage(report: CoverageReport, console: Console, *, verbose: bool = False) -> None:
    """Print one table row per kernel (and, with ``verbose``, per argument) with rich."""
    from rich.table import Table

    table = Table(title="Specialization coverage (covered by startup/warmup compiles)")
    for col in ("kernel", "covered", "ratio", "warmup keys", "serving keys", "uncovered (first 6)"):
        table.add_column(col, justify="right" if col in ("covered", "ratio", "warmup keys", "serving keys") else "left")
    for k in report.kernels:
        unc = ", ".join(k.uncovered[:6]) + (f" +{len(k.uncovered) - 6}" if len(k.uncovered) > 6 else "")
        table.add_row(
            k.kernel, f"{k.covered}/{k.total}", f"{k.ratio:.0%}", str(k.warmup_keys), str(k.serving_keys), unc
        )
    console.print(table)
    missing = [(k, m) for k in report.kernels for m in k.missing]
    if missing:
        t = Table(title="Expected keys not compiled before serving (what --require-complete fails on)")
        for col in ("kernel", "source", "why it would compile"):
            t.add_column(col, overflow="fold")
        for k, m in missing:
            t.add_row(k.kernel, m.source, m.reason)
        console.print(t)
    else:
        console.print("complete: every expected key was compiled before serving")
    if not verbose:
        return
    for k in report.kernels:
        t = Table(title=f"{k.kernel} ({'flags from kernel' if k.flags_known else 'flags inferred from keys'})")
        for col in ("argument", "kind", "covered", "uncovered", "met only in serving"):
            t.add_column(col)
        for a in k.arguments:
            t.add_row(a.name, a.kind, " ".join(a.covered), " ".join(a.uncovered), " ".join(a.serving_only))
        console.print(t)
