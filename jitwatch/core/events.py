"""The records jitwatch writes: one :class:`Event` per compile, autotune run or phase change.

Events are what the data passes through in order: backend capture → core (:class:`Event`) →
journal → metrics/status → sidecar. They are plain pydantic models so the sidecar can serve them
as they are and the OpenAPI schema stays exact. The core hands the journal writer either an
:class:`Event` or a :class:`DeferredEvent`, whose :meth:`~DeferredEvent.to_event` the writer
calls on its own thread (so the compiling thread does not build the model).
"""

from __future__ import annotations

import os
import socket
import time
from enum import Enum
from typing import Any, Protocol

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
    """One compile of any backend (``backend`` says which); ``cache_hit`` true for a load from the
    compiler's persistent cache. Triton: ``jit_cache_hook`` → ``jit_post_compile_hook``, or a
    listener-only compile."""
    AUTOTUNE = "autotune"
    """One autotune sweep that benchmarked configs (Triton: an ``@triton.autotune`` cache miss)."""
    GRAPH_CAPTURE = "graph_capture"
    """One CUDA-graph recording (torch.compile ``reduce-overhead``)."""
    BACKEND_READY = "backend_ready"
    """A backend that waited for its library installed its hooks (``attrs``: its status)."""
    WARMUP_START = "warmup_start"
    WARMUP_COMPLETE = "warmup_complete"
    FIRST_REQUEST = "first_request"
    """The first request after warmup completed; ``duration_s`` is its latency."""
    REQUEST_STALL = "request_stall"
    """A marked serving request that waited on compiles: ``duration_s`` is the compile seconds inside
    it; ``attrs``: ``latency_s``, ``compiles``, ``compile_seconds_by_backend``, ``compiled`` (list)."""
    REQUESTS = "requests"
    """``attrs.count`` marked serving requests that waited on no compile (batched, see
    :mod:`jitwatch.core.stalls`)."""
    HOOK_ERROR = "hook_error"
    """An exception caught inside a jitwatch hook (counted, never raised)."""
    DROPPED = "dropped"
    """Events that could not be journaled (queue full, storage fault); ``attrs.count``."""


class Event(BaseModel):
    """One journal record.

    Times are Unix seconds (float, wall clock); durations are seconds. ``backend`` names the JIT
    backend of compile-like events (``""`` for phase and bookkeeping events); ``kernel`` is what
    compiled (kernel, graph or function name); ``key`` the specialization key in the backend's
    own words, redacted of home paths. ``attrs`` holds kind-specific detail: for a Triton
    ``compile``, ``signature`` (parameter → Triton type), ``constexprs`` (parameter → value),
    ``stages`` (stage → seconds, from ``knobs.compilation.listener``), ``options`` (num_warps,
    num_stages, …), ``module``, ``is_warmup_call``; for every backend, during a marked request,
    ``request_id`` (and ``request``, its name); the worker's TP/PP/DP ranks and labels.
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
    backend: str = Field(default="", description="JIT backend of a compile-like event ('' for others).")
    kernel: str | None = None
    key: str | None = None
    cache_hit: bool | None = Field(
        default=None, description="Loaded from the compiler's persistent cache (Triton: its disk cache)."
    )
    attrs: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def now(cls, kind: EventKind, **fields: Any) -> Event:
        """An event stamped with the current wall-clock time."""
        return cls(kind=kind, ts=time.time(), **fields)


class DeferredEvent(Protocol):
    """An event whose fields the journal writer builds on its own thread (:meth:`to_event`).

    ``to_event`` may raise: the writer then drops that one event, counts it (``dropped``) and
    writes the rest of its batch.
    """

    def to_event(self) -> Event: ...
