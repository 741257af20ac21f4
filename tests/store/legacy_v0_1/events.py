"""The records jitwatch writes: one :class:`Event` per compile, autotune run or phase change.

Events are what the data passes through in order: hooks → :class:`Event` → journal →
metrics/status → sidecar. They are plain pydantic models so the sidecar can serve them as they
are and the OpenAPI schema stays exact.
"""

from __future__ import annotations

import os
import socket
import time
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field


class Phase(str, Enum):
    """The worker's lifecycle phase when something happened.

    ``startup`` until :meth:`jitwatch.Monitor.warmup` begins, ``warmup`` until it completes,
    ``serving`` afterwards. A compile in ``serving`` is what jitwatch exists to catch.
    """

    STARTUP = "startup"
    WARMUP = "warmup"
    SERVING = "serving"


class EventKind(str, Enum):
    """What an :class:`Event` records."""

    WORKER_START = "worker_start"
    """A monitor was installed in a worker process (identity and mode in ``attrs``)."""
    COMPILE = "compile"
    """One Triton compile: ``jit_cache_hook`` → ``jit_post_compile_hook``, or a listener-only compile."""
    AUTOTUNE = "autotune"
    """One ``@triton.autotune`` cache miss that benchmarked configs."""
    WARMUP_START = "warmup_start"
    WARMUP_COMPLETE = "warmup_complete"
    FIRST_REQUEST = "first_request"
    """The first request after warmup completed; ``duration_s`` is its latency."""
    HOOK_ERROR = "hook_error"
    """An exception caught inside a jitwatch hook (counted, never raised)."""
    DROPPED = "dropped"
    """Events that could not be journaled (queue full, storage fault); ``attrs.count``."""


class Event(BaseModel):
    """One journal record.

    Times are Unix seconds (float, wall clock); durations are seconds. ``key`` is Triton's
    in-memory specialization key, redacted of home paths. ``attrs`` holds kind-specific detail:
    for ``compile``, ``signature`` (parameter → Triton type), ``constexprs`` (parameter → value),
    ``stages`` (stage → seconds, from ``knobs.compilation.listener``), ``options`` (num_warps,
    num_stages, …), ``module``, ``is_warmup_call`` and, during a marked request, ``request_id``.
    """

    id: int | None = Field(default=None, description="Journal row id, assigned on write.")
    kind: EventKind
    ts: float = Field(description="Unix time the event ended, seconds.")
    start_ts: float | None = Field(default=None, description="Unix time it began, seconds.")
    duration_s: float | None = Field(default=None, description="Duration, seconds.")
    rank: int = 0
    pid: int = Field(default_factory=os.getpid)
    host: str = Field(default_factory=socket.gethostname)
    phase: Phase = Phase.STARTUP
    backend: str = "triton"
    kernel: str | None = None
    key: str | None = None
    cache_hit: bool | None = Field(default=None, description="Triton disk-cache hit.")
    attrs: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def now(cls, kind: EventKind, **fields: Any) -> Event:
        """An event stamped with the current wall-clock time."""
        return cls(kind=kind, ts=time.time(), **fields)
