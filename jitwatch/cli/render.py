"""Terminal rendering for the CLI (rich tables): ``jitwatch status`` and ``jitwatch coverage``.

Views (:mod:`jitwatch.views`) build pydantic documents; this module only prints them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jitwatch.cli.text import plain, utc_time
from jitwatch.core.events import Phase
from jitwatch.tables import Grid, cell, clip
from jitwatch.text import plural
from jitwatch.views.coverage import CoverageReport
from jitwatch.views.status import JitStatus

if TYPE_CHECKING:
    from rich.console import Console


NARROW = 120
"""Below this console width the tables leave out secondary columns (``--json`` has everything)."""

STATUS_TIGHT = 100
"""Below this console width ``jitwatch status`` also leaves out the Kernels table's ``last compile``,
the serving compiles' ``time`` and the recompiles' ``seconds``, so that the backend column (it tells
a Triton kernel from a torch.compile graph of one name) leaves room for the kernel and ``why``; the
serving compiles keep ``rank`` (under tensor parallelism, which rank compiled is the first
question); a dim line below the tables names what was left out."""

TIGHT_LEFT_OUT = {
    "Kernels": "the Kernels' last compile",
    "Recent serving-phase compiles": "the serving compiles' time",
    "Recompiles by reason": "the recompiles' seconds",
}
"""What :data:`STATUS_TIGHT` leaves out of each table, as the dim line names it (only the tables
printed with rows)."""

COVERAGE_DETAIL = 150
"""Below this console width ``jitwatch coverage``'s kernel table leaves out its class detail
(``arg classes (detail)``), so that the backend, kernel and ``met only in serving`` columns keep
their width (at 130 columns the seven of them folded kernel names and classes mid-word)."""


def _ts(ts: float | None) -> str:
    return "-" if ts is None else utc_time(ts)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def render_status(status: JitStatus, console: Console, url: str | None = None) -> None:
    """Print ``status`` as rich tables (what ``jitwatch status`` shows), under a header of two
    lines: readiness (with why not) and the workers' mode; the journal directory the sidecar at
    ``url`` reads (:attr:`JitStatus.journal_dir`, when it names it) and, if it cannot be read, why.
    The Kernels, serving-compile and recompile tables name each row's backend at every width (one
    name can be a Triton kernel and a torch.compile graph); below :data:`NARROW` and
    :data:`STATUS_TIGHT` columns other columns are left out, each time with a dim line saying so.
    """
    from rich.markup import escape

    narrow = console.width < NARROW
    tight = console.width < STATUS_TIGHT
    reason = escape(plain(status.not_ready_reason))
    headline = "[green]READY[/green]" if status.ready else f"[yellow]NOT READY[/yellow]: {reason}"
    console.print(f"status: {headline}; mode {escape(plain(status.mode or '- (no worker)'))}")
    where = escape(plain(status.journal_dir)) if status.journal_dir else "(not named by this sidecar)"
    by = f", read by the sidecar at {escape(plain(url))}" if url else ""
    line = f"journal: {where}{by}"
    if not status.journal_up:  # why, unless the status line just said it
        error = status.journal_error or "no journal"
        line += "; [red]unavailable[/red]" + ("" if error == status.not_ready_reason else f": {escape(plain(error))}")
    console.print(line)

    grids: list[Grid] = []
    ranks = Grid(
        "Ranks",
        [
            "#rank",
            "state",
            "*host",
            "*#pid",
            "*#tp/pp/dp",
            "#warmup",
            "#warmup compiles",
            "#serving compiles",
            "#first req",
        ],
        narrow,
    )
    for r in status.ranks:
        tpd = "/".join("-" if v is None else str(v) for v in (r.tp_rank, r.pp_rank, r.dp_rank))
        state = cell(r.state.value if isinstance(r.state, Phase) else r.state)
        state.stylize("green" if r.ready else "red" if r.state == "exited" else "yellow")
        if r.stopped_ts is not None:
            state.append(f" ({_ts(r.stopped_ts)})")
        if r.exit_exception is not None:
            state.append(f" ({r.exit_exception})")
        if r.stale:
            state.append(" stale", style="red")
        if r.stale or r.state == "exited":  # exited: its recorded exit, or (killed) its last heartbeat
            state.append(f" (last seen {_ts(r.last_seen_ts)})")
        row: list[object] = [
            str(r.rank),
            state,
            cell(r.host),
            str(r.pid),
            tpd,
            _secs(r.warmup_duration_s),
            "-" if r.warmup_compiles is None else str(r.warmup_compiles),
            str(r.serving_compiles),
            _secs(r.first_request_latency_s),
        ]
        ranks.add(*row)
    console.print(ranks.fit(console.width))
    grids.append(ranks)

    kernels = Grid(
        "Kernels",
        [
            "=backend",
            "@kernel",
            "#warmup",
            "#serving",
            "#compile s (all phases)",  # startup + warmup + serving: KernelStatus.compile_seconds
            "*#disk hits",
            "*#autotune",
            "~last compile",
            "*last key",
        ],
        narrow,
        tight,
    )
    for k in status.kernels:
        serving = cell(k.compiles_serving)
        if k.compiles_serving:
            serving.stylize("red")
        row = [
            cell(k.backend),
            cell(k.name),
            str(k.compiles_warmup),
            serving,
            f"{k.compile_seconds:.3f}",
            str(k.disk_cache_hits),
            str(k.autotune_runs),
            _ts(k.last_compile_ts),
            cell(clip(k.last_key or "-", 80)),
        ]
        kernels.add(*row)
    console.print(kernels.fit(console.width))
    grids.append(kernels)

    if status.recent_serving_compiles:
        recent = Grid(
            "Recent serving-phase compiles",
            ["~time", "#rank", "=backend", "@kernel", "duration", "#request", "*id", "why", "*parent"],
            narrow,
            tight,
        )
        for c in status.recent_serving_compiles:
            row = [
                _ts(c.ts),
                str(c.rank),
                cell(c.backend),
                cell(c.kernel or "-"),
                _secs(c.duration_s) + (" (load)" if c.cache_hit else ""),
                cell("-" if c.request_id is None else c.request_id),
                cell(c.compile_id or "-"),
                cell(clip(c.reason or c.key or "-", 120)),
                cell(c.parent or "-"),
            ]
            recent.add(*row)
        console.print(recent.fit(console.width))
        grids.append(recent)
    if status.recompile_reasons:
        reasons = Grid(
            "Recompiles by reason",
            ["=backend", "@function", "*phase", "reason class", "#count", "~#seconds", "*ranks", "latest reason"],
            narrow,
            tight,
        )
        for rr in status.recompile_reasons:
            reasons.add(
                cell(rr.backend),
                cell(rr.kernel),
                rr.phase.value,
                cell(rr.reason_class),
                str(rr.count),
                f"{rr.seconds:.3f}",
                ",".join(str(x) for x in rr.ranks),
                cell(clip(rr.last_reason or "-", 120)),
            )
        console.print(reasons.fit(console.width))
        grids.append(reasons)
    if any(g.narrow_out and g.rows for g in grids):  # a note only under a table with rows
        console.print(f"(narrow terminal: some columns left out; {NARROW}+ columns or --json show all)", style="dim")
    tight_out = [TIGHT_LEFT_OUT[g.title] for g in grids if g.tight_out and g.rows]
    if tight_out:
        console.print(f"({', '.join(tight_out)} left out below {STATUS_TIGHT} columns)", style="dim")
    t = status.totals
    console.print(
        f"totals: {t.ranks_ready}/{t.ranks} ranks ready, {plural(t.kernels, 'kernel')}, "
        f"{plural(t.compiles, 'compile')} "
        f"({t.compiles_startup} startup, {t.compiles_warmup} warmup, {t.compiles_serving} serving), "
        f"{t.compile_seconds:.3f}s compiling, "
        f"{plural(t.hook_errors, 'hook error')}, {plural(t.dropped_events, 'dropped event')}"
    )


def render_coverage(report: CoverageReport, console: Console, *, verbose: bool = False) -> None:
    """Print one table row per kernel, its backend first (at every width), then the expected keys
    missing, or ``complete: ...`` with how many keys of how many kernels were checked, then the
    expected keys recorded for another source of their kernel (``other_source``), if any; with
    ``verbose``, a table of each kernel's arguments titled ``<backend> <kernel>``. A report with
    nothing to check (:attr:`CoverageReport.nothing_to_check`) is one line, ``nothing to check:
    <reason>``: no table, never ``complete``."""
    from rich.markup import escape

    if report.nothing_to_check:
        reason = report.nothing_to_check_reason or "no kernel in the report"
        console.print(cell(f"nothing to check: {reason}"), soft_wrap=True)  # unwrapped: its path can be copied
        return
    narrow = console.width < NARROW
    table = Grid(
        "Specialization coverage (keys compiled before serving / keys needed)",
        [
            "=backend",
            "@kernel",
            "#keys",
            "#coverage",
            "#serving keys",
            "*#arg classes (detail)",
            "met only in serving (first 6)",
        ],
        console.width < COVERAGE_DETAIL,
    )
    for k in report.kernels:
        met = [f"{a.name}:{c}" for a in k.arguments for c in a.serving_only]
        more = f" +{len(met) - 6}" if len(met) > 6 else ""
        row: list[object] = [
            cell(k.backend),
            cell(k.kernel),
            f"{k.covered}/{k.total}",
            f"{k.ratio:.0%}",
            str(k.serving_keys),
            f"{k.classes_covered}/{k.classes_total}" if k.classes_total else "",
            cell(", ".join(met[:6]) + more),
        ]
        table.add(*row)
    detail = any(k.classes_total for k in report.kernels)
    grid = table.fit(console.width)
    if console.width >= COVERAGE_DETAIL and detail:
        grid.caption_justify = "left"
        grid.caption = (
            "arg classes: per-argument classes Triton can tell apart that warmup used; most are never"
            " passed by a given server, so a low share is not a failure (-v lists them)"
        )
    console.print(grid)
    if console.width < COVERAGE_DETAIL and detail:
        shown = "listed per argument below" if verbose else "-v or --json show them"
        console.print(f"(arg classes (detail) left out below {COVERAGE_DETAIL} columns; {shown})", style="dim")
    pruned = [k for k in report.kernels if k.warmup_pruned]
    if pruned:  # the aggregates count compiles before serving the event log no longer holds
        shown = ", ".join(f"{k.kernel} {k.warmup_pruned}" for k in pruned[:5]) + (", …" if len(pruned) > 5 else "")
        console.print(
            cell(
                "(compiles before serving no longer in the events read (retention, or past the newest read):"
                f" {shown}; keys counts only the compiles left; a serving compile's reason is the one journaled"
                " when it compiled, where the journal has it)"
            ),
            style="dim",
        )
    missing = [(k, m) for k in report.kernels for m in k.missing]
    if missing:
        t = Grid(
            "Expected keys not compiled before serving (what --require-complete fails on)",
            ["=backend", "@kernel", "source", "why it would compile"],
            narrow,
        )
        for k, m in missing:
            t.add(cell(k.backend), cell(k.kernel), cell(m.source), cell(m.reason))
        console.print(t.fit(console.width))
    else:
        keys = plural(sum(k.total for k in report.kernels), "key")
        console.print(
            f"complete: every expected key was compiled before serving ({keys} of"
            f" {plural(len(report.kernels), 'kernel')})"
        )
    stale = [(k, m) for k in report.kernels for m in k.other_source]
    if stale:  # expected keys that cannot occur with the source compiled now: listed, not compared
        t = Grid(
            "Expected keys recorded for another source of their kernel: they cannot occur as recorded (re-record them)",
            ["=backend", "@kernel", "source", "what changed"],
            narrow,
        )
        for k, m in stale:
            t.add(cell(k.backend), cell(k.kernel), cell(m.source), cell(m.reason))
        console.print(t.fit(console.width))
    if not verbose:
        return
    for k in report.kernels:  # titled by backend and kernel: one name can be a kernel of two backends
        if not k.arguments:  # torch.compile, the DSL backends: no classes, covered by exact key
            console.print(cell(f"{k.backend} {k.kernel}: no argument classes (covered by exact key)"))
            continue
        flags = "flags from kernel" if k.flags_known else "flags inferred from keys"
        title = f"{plain(k.backend)} {plain(k.kernel)} ({flags})"
        t = Grid(escape(title), ["@argument", "kind", "warmed", "not warmed", "met only in serving"], narrow)
        for a in k.arguments:
            cells = [a.name, a.kind, " ".join(a.covered), " ".join(a.uncovered), " ".join(a.serving_only)]
            t.add(*(cell(v) for v in cells))
        console.print(t.fit(console.width))
