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
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field

from jitwatch.errors import ConfigError


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
    COMPILE_ABANDONED = "compile_abandoned"
    """A compile that began and never ended: its frame left the compiling thread's stack without
    an end (the compiler raised — Triton's ``CompilationError``, a ptxas error in an autotune
    config — or a hook chained after jitwatch's raised). Dropped from the in-flight compiles by
    the writer thread; ``start_ts`` is when it began, ``duration_s`` ``None`` (its end was not
    seen); ``attrs``: ``cause``, ``request_id``. Counted per backend (``abandoned_compiles``)."""
    HOOK_ERROR = "hook_error"
    """An exception caught inside a jitwatch hook (counted, never raised)."""
    DROPPED = "dropped"
    """Events that could not be journaled (queue full, storage fault); ``attrs.count``."""


_E = TypeVar("_E", Phase, EventKind)


def as_member(cls: type[_E], value: Any, param: str) -> _E:
    """``value`` (a member of ``cls`` or its string value: ``"serving"``, ``"compile"``) as a member
    of :class:`Phase` / :class:`EventKind` ``cls``; the argument named ``param`` of a query.

    Raises:
        jitwatch.errors.ConfigError: anything else (a ``ValueError``); the message names the
            accepted values.
    """
    try:
        return cls(value)
    except (ValueError, TypeError):
        accepted = ", ".join(repr(m.value) for m in cls)
        article = "an" if cls.__name__[0] in "AEIOU" else "a"
        what = "bytes, " if isinstance(value, BYTES_LIKE) else ""  # b"compile": decode it first
        raise ConfigError(
            f"{param}={value!r} is {what}not {article} {cls.__name__} or its value; expected one of {accepted}"
        ) from None


BYTES_LIKE = (bytes, bytearray, memoryview)
"""Values a ``kind``/``phase`` filter takes as one (refused) value, never as an iterable of
kinds: iterating ``b"compile"`` yields integers, which would name ``99`` in the error."""


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


_FIELDS_BUILT = frozenset("kind ts start_ts duration_s rank pid host phase backend kernel key cache_hit attrs".split())
"""The fields :func:`built_event` sets (every field but ``id``): what pydantic records as set."""
_setattr = object.__setattr__
_new = object.__new__
_NONE_OR_FLOAT = (type(None), float)
_NONE_OR_STR = (type(None), str)
_NONE_OR_BOOL = (type(None), bool)


def _built(
    kind: EventKind,
    ts: float,
    start_ts: float | None,
    duration_s: float | None,
    rank: int,
    pid: int,
    host: str,
    phase: Phase,
    backend: str,
    kernel: str | None,
    key: str | None,
    cache_hit: bool | None,
    attrs: dict[str, Any],
) -> Event:
    # What ``BaseModel.model_construct`` does (pydantic 2.x), for this model's fields only: its
    # generic loop over the fields costs more than validating (8.4 vs 6.1 µs here); this is ~2 µs.
    ev = _new(Event)
    _setattr(
        ev,
        "__dict__",
        {
            "id": None,
            "kind": kind,
            "ts": ts,
            "start_ts": start_ts,
            "duration_s": duration_s,
            "rank": rank,
            "pid": pid,
            "host": host,
            "phase": phase,
            "backend": backend,
            "kernel": kernel,
            "key": key,
            "cache_hit": cache_hit,
            "attrs": attrs,
        },
    )
    _setattr(ev, "__pydantic_fields_set__", set(_FIELDS_BUILT))
    _setattr(ev, "__pydantic_extra__", None)
    _setattr(ev, "__pydantic_private__", None)
    return ev


def _construct_matches() -> bool:
    """Whether :func:`_built` makes the same object as validation with this pydantic (checked
    once, at import: a pydantic that keeps other per-instance state makes :func:`built_event`
    validate every event instead)."""
    fields: dict[str, Any] = {
        "kind": EventKind.COMPILE,
        "ts": 2.0,
        "start_ts": 1.0,
        "duration_s": 1.0,
        "rank": 0,
        "pid": 1,
        "host": "h",
        "phase": Phase.SERVING,
        "backend": "b",
        "kernel": "k",
        "key": None,
        "cache_hit": None,
        "attrs": {"a": 1},
    }
    try:
        made, validated = _built(**fields), Event(**fields)
        return bool(made.__getstate__() == validated.__getstate__() and made == validated)
    except Exception:  # noqa: BLE001 - a pydantic whose internals differ: validate instead
        return False


_CONSTRUCT = _construct_matches()


def built_event(
    kind: EventKind,
    ts: float,
    start_ts: float | None,
    duration_s: float | None,
    rank: int,
    pid: int,
    host: str,
    phase: Phase,
    backend: str,
    kernel: str | None,
    key: str | None,
    cache_hit: bool | None,
    attrs: dict[str, Any],
) -> Event:
    """An :class:`Event` from fields jitwatch built itself (a compile event on the journal
    writer's thread), without pydantic's validation when every field already has exactly its
    declared type — ``float`` times, ``int`` rank and pid, the enums, ``str`` names, a ``dict``
    with ``str`` keys as ``attrs`` (taken as it is: the caller hands it over) — which the checks
    here establish in ~1 µs; the result equals ``Event(...)`` of the same fields field for field
    (``tests/core/test_built_event.py``). Anything else is validated as ``Event(...)`` is, and
    raises :class:`pydantic.ValidationError` the same way. Events built from outside input
    (the journal, HTTP) are always validated: they do not come through here."""
    if (
        _CONSTRUCT
        and ts.__class__ is float
        and start_ts.__class__ in _NONE_OR_FLOAT
        and duration_s.__class__ in _NONE_OR_FLOAT
        and rank.__class__ is int
        and pid.__class__ is int
        and host.__class__ is str
        and kind.__class__ is EventKind
        and phase.__class__ is Phase
        and backend.__class__ is str
        and kernel.__class__ in _NONE_OR_STR
        and key.__class__ in _NONE_OR_STR
        and cache_hit.__class__ in _NONE_OR_BOOL
        and attrs.__class__ is dict
        and _str_keys(attrs)
    ):
        return _built(kind, ts, start_ts, duration_s, rank, pid, host, phase, backend, kernel, key, cache_hit, attrs)
    return Event(
        kind=kind,
        ts=ts,
        start_ts=start_ts,
        duration_s=duration_s,
        rank=rank,
        pid=pid,
        host=host,
        phase=phase,
        backend=backend,
        kernel=kernel,
        key=key,
        cache_hit=cache_hit,
        attrs=attrs,
    )


def _str_keys(attrs: dict[str, Any]) -> bool:
    """Every key of ``attrs`` is exactly a ``str`` (what validating ``dict[str, Any]`` keeps as is)."""
    for k in attrs:
        if k.__class__ is not str:
            return False
    return True


class DeferredEvent(Protocol):
    """An event whose fields the journal writer builds on its own thread (:meth:`to_event`).

    ``to_event`` may raise: the writer then drops that one event, counts it (``dropped``) and
    writes the rest of its batch.
    """

    def to_event(self) -> Event: ...


class EventLane:
    """A sink's buffer, appended to by the monitor without a call into the sink: the compiling
    thread's cheapest hand-over (issue 15; ``docs/architecture.md``, "The compiling thread").

    Offered by :class:`jitwatch.store.writer.JournalWriter` as its ``lane`` attribute. The monitor
    (:meth:`jitwatch.core.monitor.Monitor.end`) reads ``n = len(buf)``; below ``room`` it appends
    (``deque.append``, atomic under the GIL) and calls ``wake()`` when ``n >= high``; otherwise
    it calls ``overflow()``, which counts the event as dropped and returns ``False``. The sink
    sets ``room`` to 0 when it closes, or in a forked child, so every later event is counted as
    dropped; it never replaces ``buf`` except together with ``room = 0``.

    Attributes:
        buf: the sink's ``collections.deque`` of queued items.
        room: items the buffer may hold (the sink's queue size; 0 once closed).
        high: the length before an append at which the sink wants to be woken.
        wake: wakes the sink's thread (never raises, never blocks).
        overflow: counts one dropped event; returns ``False`` (never raises).
    """

    __slots__ = ("buf", "high", "overflow", "room", "wake")

    def __init__(self, buf: Any, room: int, high: int, wake: Callable[[], None], overflow: Callable[[], bool]) -> None:
        self.buf = buf
        self.room = room
        self.high = high
        self.wake = wake
        self.overflow = overflow
