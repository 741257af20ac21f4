"""Request stall accounting: the compile seconds each marked request spent waiting.

Every request marked with :meth:`jitwatch.Monitor.request` (the vLLM plugin marks every engine
step) that *started in the serving phase* is one observation of
``jitwatch_request_compile_seconds{rank}``: the summed duration of the compiles that ran inside
it (on its thread/context: they carry its ``request_id``). A request that waited on at least one
compile is also counted in ``jitwatch_requests_delayed_total{backend,rank}`` once per backend it
waited on, and journaled as one ``request_stall`` event (latency, compile seconds by backend, the
compiles themselves) — the worst recent ones are listed in ``/jit``.

Costs: a compile inside a request appends one tuple to that request's list (compiling thread,
< 1 µs); a request that compiled nothing costs one dictionary ``pop`` of a missing key and one
counter increment at its end. Requests that compiled nothing are not journaled one by one: their
count goes out as one ``requests`` event at most every :data:`REQUESTS_FLUSH_S` seconds (and at
:meth:`~jitwatch.Monitor.flush`), so the histogram's zero bucket lags by at most that while
requests keep arriving.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from jitwatch.core.events import Event, EventKind, Phase

REQUESTS_FLUSH_S = 5.0
"""Most seconds between two ``requests`` records while requests keep arriving."""
MAX_COMPILES_LISTED = 20
"""Compiles listed per ``request_stall`` event (all are summed)."""


class RequestStalls:
    """Per-request compile time of one monitor (thread-safe)."""

    def __init__(self) -> None:
        self.open: dict[int, list[tuple[str, str, float]]] = {}
        """request_id → compiles inside it so far: (backend, name, seconds). Only requests that
        compiled appear (``setdefault`` on the first compile)."""
        self._lock = threading.Lock()
        self._undelayed = 0
        self._last_flush = time.monotonic()
        self.delayed_total = 0
        self.requests_total = 0

    def compiled(self, request_id: int, backend: str, name: str, seconds: float) -> None:
        """A compile of ``seconds`` ran inside request ``request_id`` (compiling thread)."""
        self.open.setdefault(request_id, []).append((backend, name, seconds))

    def finish(
        self,
        request_id: int,
        *,
        serving: bool,
        name: str | None,
        start_wall: float,
        latency_s: float,
        rank: int,
        ident_attrs: Callable[[], dict[str, Any]],
    ) -> list[Event]:
        """The request ended: the events to journal now (usually none)."""
        compiles = self.open.pop(request_id, None)
        if not serving:
            return []
        if not compiles:  # the fast path: nothing compiled inside this request
            with self._lock:
                self._undelayed += 1
                self.requests_total += 1
                due = time.monotonic() - self._last_flush >= REQUESTS_FLUSH_S
            return self.pending(rank, ident_attrs()) if due else []
        by_backend: dict[str, float] = {}
        for backend, _, seconds in compiles:
            by_backend[backend] = by_backend.get(backend, 0.0) + seconds
        with self._lock:
            self.delayed_total += 1
            self.requests_total += 1
        total = sum(by_backend.values())
        attrs: dict[str, Any] = {
            **ident_attrs(),
            "request_id": request_id,
            "latency_s": latency_s,
            "compiles": len(compiles),
            "compile_seconds_by_backend": by_backend,
            "compiled": [{"backend": b, "kernel": k, "duration_s": s} for b, k, s in compiles[:MAX_COMPILES_LISTED]],
        }
        if name:
            attrs["request"] = name
        return [
            Event(
                kind=EventKind.REQUEST_STALL,
                ts=start_wall + latency_s,
                start_ts=start_wall,
                duration_s=total,
                rank=rank,
                phase=Phase.SERVING,
                attrs=attrs,
            )
        ]

    def pending(self, rank: int, ident_attrs: dict[str, Any]) -> list[Event]:
        """A ``requests`` event for the requests that compiled nothing since the last one."""
        with self._lock:
            n, self._undelayed = self._undelayed, 0
            self._last_flush = time.monotonic()
        if not n:
            return []
        return [Event.now(EventKind.REQUESTS, rank=rank, phase=Phase.SERVING, attrs={**ident_attrs, "count": n})]


__all__ = ["MAX_COMPILES_LISTED", "REQUESTS_FLUSH_S", "RequestStalls"]
