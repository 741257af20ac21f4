"""``jitwatch why``: the reason of each serving compile, read from the journal (backend-neutral).

A worker writes the reason into each serving compile's ``attrs`` on its journal writer's thread
(:class:`jitwatch.core.diagnosis.Diagnoser`). For an event written without one (a journal from
jitwatch ≤ 0.2, or a worker whose events were built elsewhere), the reason is computed here the
same way: the compiles of that worker process (``host``, ``pid``) before serving are the baseline,
and the backend's own ``explain`` (found through the registry) diffs the keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field, computed_field

from jitwatch.backends.explain import Explainer, ExplainFn, runnable_fixes
from jitwatch.config import DEFAULT_STALE_SECONDS
from jitwatch.core.diagnosis import Diagnoser, explainers_of
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.redact import redact
from jitwatch.store.journal import Journal

BASELINE_EVENTS = 20_000
"""Compile events read to rebuild reasons for events journaled without one."""


class ReasonChange(BaseModel):
    """One argument or launch option that differs from the nearest key compiled before serving."""

    name: str = Field(description="Argument (n_cols) or launch option (num_warps).")
    kind: str = Field(description="argument / option.")
    before: str = Field(description="Its class in the nearest earlier key, e.g. 'i32 %16'.")
    after: str = Field(description="Its class in this compile's key, e.g. '==1'.")
    fix: str = ""
    warmed_elsewhere: bool = Field(default=False, description="The new class was warmed in another key.")


class CompileReason(BaseModel):
    """Why one serving-phase compile happened."""

    backend: str
    kernel: str | None
    rank: int
    pid: int
    host: str
    ts: float = Field(description="Unix time the compile ended, seconds.")
    duration_s: float | None = Field(default=None, description="Compile wall time, seconds.")
    request_id: int | None = None
    key: str | None = None
    cache_hit: bool | None = Field(
        default=None,
        description="Loaded from the compiler's persistent cache (Triton: its disk cache) instead of compiled;"
        " None when the backend does not say.",
    )
    module: str | None = Field(
        default=None, description="Python module that defines the kernel (Triton: its module name), when known."
    )
    location: str | None = Field(
        default=None,
        description="Source file:line of the compiled function (torch.compile), the home directory as ~.",
    )
    reason: str = Field(description="One line: 'n_cols: i32 %16 → ==1', 'never warmed (…)', …")
    reason_kind: str = Field(description="argument / option / never_warmed / new_combination / compiler / unknown.")
    changes: list[ReasonChange] = Field(default_factory=list)
    fixes: list[str] = Field(default_factory=list, description="What removes this compile, one line each.")

    @computed_field(description="``ts`` as ISO-8601 in UTC, milliseconds: '2026-12-03T01:07:56.123+00:00'.")
    def time(self) -> str:
        return datetime.fromtimestamp(self.ts, UTC).isoformat(timespec="milliseconds")


class InflightCompile(BaseModel):
    """A compile that had begun and not ended when its worker's journal writer last looked (at
    most ``INFLIGHT_INTERVAL_S`` ago while it runs): its age grows while it runs — or hangs."""

    backend: str
    kernel: str
    start_ts: float = Field(description="Unix time the compile began, seconds.")
    age_s: float = Field(description="Seconds since it began, at the time of this answer.")
    phase: str = Field(description="Phase when it began.")
    request_id: int | None = None


def inflight_of(
    attrs: Mapping[str, Any],
    now: float,
    *,
    last_seen: float | None = None,
    stale_after: float = DEFAULT_STALE_SECONDS,
    exited: bool = False,
) -> list[InflightCompile]:
    """The in-flight compiles a worker row's ``attrs`` holds (written by
    :meth:`jitwatch.store.journal.Journal.set_inflight`), oldest first, aged at ``now``.

    None when the worker row was last refreshed (``last_seen`` or the list's own ``inflight_ts``,
    Unix seconds) more than ``stale_after`` seconds ago: its writer refreshes it every second
    while a compile runs, whatever the heartbeat setting, so a silent row
    is a dead (``kill -9``) or frozen process whose list is no longer current; ageing it forever
    would fire the collective-deadline alert for a process that is gone. The rank shows as stale
    instead (``/readyz``, ``stale_ranks``), or as exited where the sidecar saw its process gone
    (``exited_ranks``). None either with ``exited`` (the worker's process was seen gone: its
    compiles ended with it, at once rather than after the window)."""
    if exited:
        return []
    refreshed = [t for t in (last_seen, attrs.get("inflight_ts")) if isinstance(t, int | float) and t == t]
    if refreshed and stale_after > 0 and now - max(refreshed) > stale_after:
        return []
    items = attrs.get("inflight")
    out: list[InflightCompile] = []
    for i in items if isinstance(items, list) else []:
        if not isinstance(i, dict) or not isinstance(i.get("start_ts"), int | float):
            continue
        rid = i.get("request_id")
        out.append(
            InflightCompile(
                backend=str(i.get("backend") or ""),
                kernel=str(i.get("kernel") or ""),
                start_ts=float(i["start_ts"]),
                age_s=max(0.0, now - float(i["start_ts"])),
                phase=str(i.get("phase") or ""),
                request_id=rid if isinstance(rid, int) and not isinstance(rid, bool) else None,
            )
        )
    return sorted(out, key=lambda c: c.start_ts)


def registry_explainers() -> dict[str, Explainer]:
    """The :class:`~jitwatch.backends.explain.Explainer` (``explain``, ``by_exact_key``) of every
    known backend that has one (built-in and entry points)."""
    from jitwatch.backends import create

    try:
        return explainers_of(create(None))
    except Exception:  # noqa: BLE001 - a broken third-party backend must not stop the reader
        return {}


def _reasoned(events: list[Event], explainers: Mapping[str, Explainer | ExplainFn]) -> dict[int, Event]:
    """Serving compiles of ``events`` with reasons computed per worker process, by id."""
    out: dict[int, Event] = {}
    by_worker: dict[tuple[str, int], list[Event]] = {}
    for e in events:
        by_worker.setdefault((e.host, e.pid), []).append(e)
    for evs in by_worker.values():
        diag = Diagnoser(explainers)
        for e in sorted(evs, key=lambda x: (x.start_ts if x.start_ts is not None else x.ts, x.id or 0)):
            if e.phase is Phase.SERVING and "reason_kind" not in e.attrs:
                e = e.model_copy(deep=True)
                diag.observe(e)
                if e.id is not None:
                    out[e.id] = e
            else:
                diag.observe(e)
    return out


def _as_reason(e: Event, journal_dir: str | os.PathLike[str] | None = None, command: str = "jitwatch") -> CompileReason:
    a: dict[str, Any] = e.attrs
    rid = a.get("request_id")
    changes = a.get("reason_changes") if isinstance(a.get("reason_changes"), list) else []
    module, location = a.get("module"), a.get("location")
    return CompileReason(
        backend=e.backend or "triton",
        kernel=e.kernel,
        rank=e.rank,
        pid=e.pid,
        host=e.host,
        ts=e.ts,
        duration_s=e.duration_s,
        request_id=rid if isinstance(rid, int) and not isinstance(rid, bool) else None,
        key=e.key,
        cache_hit=e.cache_hit,
        module=module if isinstance(module, str) and module else None,
        # the journal stores it redacted; again here for a journal written by other means
        location=redact(location) if isinstance(location, str) and location else None,
        reason=str(a.get("reason") or "not explained"),
        reason_kind=str(a.get("reason_kind") or "unknown"),
        changes=[ReasonChange.model_validate(c) for c in changes or [] if isinstance(c, dict)],
        fixes=runnable_fixes(a.get("fixes"), journal_dir, command),
    )


def serving_reasons(
    journal: Journal,
    *,
    kernel: str | None = None,
    backend: str | None = None,
    rank: int | None = None,
    limit: int = 50,
    explainers: Mapping[str, Explainer | ExplainFn] | None = None,
    command: str = "jitwatch",
) -> list[CompileReason]:
    """The newest ``limit`` serving compiles (newest first) with their reasons. Their fixes name
    ``journal.directory`` in their manifest commands
    (:func:`~jitwatch.backends.explain.runnable_fix`: the export of this journal, and one absolute
    manifest; the journal keeps them as written), run as ``command`` (the CLI passes
    :func:`~jitwatch.backends.explain.local_jitwatch`). Read-only; raises ``sqlite3.Error`` only."""
    serving = journal.events(
        kind=EventKind.COMPILE, phase=Phase.SERVING, kernel=kernel, backend=backend, rank=rank, limit=limit
    )
    if any("reason_kind" not in e.attrs for e in serving):
        every = journal.events(kind=EventKind.COMPILE, kernel=kernel, backend=backend, rank=rank, limit=BASELINE_EVENTS)
        fixed = _reasoned(every, registry_explainers() if explainers is None else explainers)
        serving = [fixed.get(e.id or -1, e) if "reason_kind" not in e.attrs else e for e in serving]
    return [_as_reason(e, journal.directory, command) for e in serving]


__all__ = [
    "BASELINE_EVENTS",
    "CompileReason",
    "InflightCompile",
    "ReasonChange",
    "inflight_of",
    "registry_explainers",
    "serving_reasons",
]
