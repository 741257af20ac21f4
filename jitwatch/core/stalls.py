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


class _StallEvent:
    """A ``request_stall`` event built on the journal writer's thread (:meth:`to_event`), so the
    request's own thread only appends a reference."""

    __slots__ = ("compiles", "ident_attrs", "latency_s", "name", "rank", "request_id", "start_wall")

    def __init__(
        self,
        request_id: int,
        name: str | None,
        start_wall: float,
        latency_s: float,
        rank: int,
        compiles: list[tuple[str, str, float]],
        ident_attrs: Callable[[], dict[str, Any]],
    ) -> None:
        self.request_id, self.name, self.start_wall, self.latency_s = request_id, name, start_wall, latency_s
        self.rank, self.compiles, self.ident_attrs = rank, compiles, ident_attrs

    def to_event(self) -> Event:
        by_backend: dict[str, float] = {}
        for backend, _, seconds in self.compiles:
            by_backend[backend] = by_backend.get(backend, 0.0) + seconds
        attrs: dict[str, Any] = {
            **self.ident_attrs(),
            "request_id": self.request_id,
            "latency_s": self.latency_s,
            "compiles": len(self.compiles),
            "compile_seconds_by_backend": by_backend,
            "compiled": [
                {"backend": b, "kernel": k, "duration_s": s} for b, k, s in self.compiles[:MAX_COMPILES_LISTED]
            ],
        }
        if self.name:
            attrs["request"] = self.name
        return Event(
            kind=EventKind.REQUEST_STALL,
            ts=self.start_wall + self.latency_s,
            start_ts=self.start_wall,
            duration_s=sum(by_backend.values()),
            rank=self.rank,
            phase=Phase.SERVING,
            attrs=attrs,
        )


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
    ) -> list[Event | _StallEvent]:
        """The request ended: the events to journal now (usually none; a stall is built later,
        on the writer's thread)."""
        compiles = self.open.pop(request_id, None)
        if not serving:
            return []
        if not compiles:  # the fast path: nothing compiled inside this request
            with self._lock:
                self._undelayed += 1
                self.requests_total += 1
                due = time.monotonic() - self._last_flush >= REQUESTS_FLUSH_S
            return list(self.pending(rank, ident_attrs())) if due else []
        with self._lock:
            self.delayed_total += 1
            self.requests_total += 1
        return [_StallEvent(request_id, name, start_wall, latency_s, rank, compiles, ident_attrs)]

    def pending(self, rank: int, ident_attrs: dict[str, Any]) -> list[Event]:
        """A ``requests`` event for the requests that compiled nothing since the last one."""
        with self._lock:
            n, self._undelayed = self._undelayed, 0
            self._last_flush = time.monotonic()
        if not n:
            return []
        return [Event.now(EventKind.REQUESTS, rank=rank, phase=Phase.SERVING, attrs={**ident_attrs, "count": n})]


__all__ = ["MAX_COMPILES_LISTED", "REQUESTS_FLUSH_S", "RequestStalls"]
