"""The journal: a durable, cross-process event store in one SQLite file (WAL mode).

Worker processes (one per GPU rank, possibly in other containers sharing the directory) append
events; the sidecar reads them. Design:

* ``events`` is the event log, bounded by retention (count and age, see :class:`Journal`).
* ``workers``, ``kernel_stats``, ``compile_hist`` and ``counters`` are aggregates updated in the
  *same transaction* as the events they summarise. Metrics are built from the aggregates, so
  counters stay exact and monotonic after old events are retired, and the sidecar never scans
  the log to answer ``/metrics``.
* Writes use ``BEGIN IMMEDIATE`` with a busy timeout, so concurrent writers serialize instead of
  failing; a killed writer loses only its uncommitted transaction (SQLite's rollback journal /
  WAL guarantees), never committed events.
* The file and directory are created owner-only (0600 / 0700); SQLite gives the ``-wal`` and
  ``-shm`` files the database file's mode. Symlinks, FIFOs and files or directories of another
  user are refused before SQLite opens anything (:mod:`jitwatch.store.safety`).
* Everything stored passes through :func:`~jitwatch.redact.redact` (kernel, key, attrs, and the
  worker rows' attrs: backends and in-flight compiles) and is made strict JSON (no NaN/inf),
  whoever produced the event. Nothing read back is ever evaluated: attrs are parsed with
  ``json.loads`` only.
* Corruption (``SQLITE_CORRUPT``/``SQLITE_NOTADB``, failed ``quick_check``) is told apart from
  storage faults (full, read-only, locked): only the former moves the file aside
  (:func:`open_or_recover`).

SQLite (stdlib ``sqlite3``) is used as-is; nothing here is a home-made storage engine.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder as json_encoder
import math
import os
import sqlite3
import threading
import time
import zlib
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jitwatch.backends.base import RECOMPILE_REASON_CLASSES
from jitwatch.config import DEFAULT_MAX_KERNELS, DEFAULT_RETENTION_EVENTS, DEFAULT_RETENTION_SECONDS
from jitwatch.core.events import BYTES_LIKE, Event, EventKind, Phase, as_member
from jitwatch.errors import JournalCorruptError, JournalVersionError
from jitwatch.redact import may_need_redaction, redact, redaction_precheck
from jitwatch.store import migrations, readsafe, safety, specs
from jitwatch.text import logger

log = logger(__name__)

_skipped_lock = threading.Lock()
_skipped_total = 0


def skipped_rows_total() -> int:
    """Rows every :class:`Journal` of this process skipped as making no sense (each
    ``Journal.skipped_rows`` summed, closed journals included): monotonic for the process, the
    ``jitwatch_journal_skipped_rows_total`` counter. A row is counted at each read that skips it."""
    return _skipped_total


JOURNAL_FILE = "journal.db"
WAL_SIZE_LIMIT = 4 * 1024 * 1024
"""``PRAGMA journal_size_limit`` of writer connections, bytes: after a checkpoint lets the WAL
restart, SQLite truncates the file to this size (otherwise it keeps its largest size for ever)."""
MAX_WORKER_ROWS = 1024
"""Most rows kept in ``workers`` by :meth:`Journal.prune_workers` (a crash-looping worker adds one
per restart; 100,000 rows made ``/readyz`` take 1.4 s)."""
OTHER_KERNEL = "_other"
"""Label value that kernels past the cardinality cap are folded into."""

# Compile-duration histogram buckets, seconds: 1 ms … 60 s. Alert thresholds in
# dashboards/prometheus/rules.yml must sit on one of these edges (checked by a test).
COMPILE_DURATION_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


STOPPED_TS_ATTR = "stopped_ts"
"""Key of a worker row's ``attrs`` holding the Unix time of its clean stop (:meth:`Journal.mark_stopped`)."""
EXIT_EXCEPTION_ATTR = "exit_exception"
"""Key of a worker row's ``attrs`` naming the type of the unhandled exception its process exited on
(:meth:`Journal.mark_exited`), e.g. ``MemoryError`` or ``torch.OutOfMemoryError``; never its message."""
EXITED_TS_ATTR = "exited_ts"
"""Key of a worker row's ``attrs`` holding the Unix time its exit on an unhandled exception was recorded."""
EXCEPTION_NAME_MAX = 200
"""Longest exception type name kept (characters; a longer one is cut)."""


@dataclass(frozen=True)
class WorkerRow:
    """One worker process as the journal knows it (latest state)."""

    host: str
    pid: int
    rank: int
    state: Phase
    mode: str | None
    started_ts: float
    last_ts: float
    warmup_start_ts: float | None
    warmup_end_ts: float | None
    warmup_duration_s: float | None
    warmup_compiles: int | None
    warmup_compile_seconds: float | None
    first_request_s: float | None
    first_request_ts: float | None
    attrs: dict[str, Any]

    @property
    def stopped_ts(self) -> float | None:
        """Unix time (seconds) this worker recorded a clean stop (:meth:`Journal.mark_stopped`:
        ``jitwatch.uninstall()`` or its exit), else ``None`` (serving, or killed without a word).
        Kept in ``attrs`` (``stopped_ts``): ``state`` keeps the last phase, so readers that
        predate it see the row as before."""
        return readsafe.timestamp(self.attrs.get(STOPPED_TS_ATTR))

    @property
    def exit_exception(self) -> str | None:
        """The type of the unhandled exception this worker's process exited on, as it recorded at
        its exit (:meth:`Journal.mark_exited`: ``MemoryError``, ``KeyboardInterrupt``), else
        ``None`` (serving, stopped cleanly, or killed without a word). Never the message."""
        value = self.attrs.get(EXIT_EXCEPTION_ATTR)
        if not isinstance(value, str) or not value:
            return None
        return value[:EXCEPTION_NAME_MAX]


@dataclass(frozen=True)
class StatRow:
    """Aggregate of one (backend, kernel, phase, rank, kind): how many, how long, how many loads.

    ``kind`` is an :class:`~jitwatch.core.events.EventKind` value (``compile``, ``autotune``,
    ``graph_capture``); ``label`` is the kernel's metric label (``_other`` past the cap);
    ``seconds`` the summed durations; ``cache_hits`` the loads from the compiler's cache.
    """

    backend: str
    kernel: str
    label: str
    phase: Phase
    rank: int
    kind: str
    count: int
    seconds: float
    cache_hits: int
    last_key: str | None
    last_ts: float | None


LEGACY_BACKEND = "triton"
"""Backend of every aggregate a jitwatch 0.1 worker wrote (``kernel_stats``, ``compile_hist``,
the ``hook_errors`` counter): 0.1 watched Triton only."""

STAT_KINDS = (EventKind.COMPILE, EventKind.AUTOTUNE, EventKind.GRAPH_CAPTURE)

FIRST_COMPILE_CLASS = "first compile"
"""``attrs.reason_class`` of a compile that is not a recompile (not counted in ``recompile_stats``)."""


def reason_class_label(value: Any) -> str | None:
    """The ``reason_class`` label of a compile event's ``attrs.reason_class``: ``None`` when absent
    or a first compile; a value outside :data:`~jitwatch.core.events.RECOMPILE_REASON_CLASSES` (a
    third-party backend putting free text there) becomes ``other``, so the label stays bounded."""
    if not isinstance(value, str) or not value or value == FIRST_COMPILE_CLASS:
        return None
    return value if value in RECOMPILE_REASON_CLASSES else "other"


@dataclass(frozen=True)
class RecompileRow:
    """Aggregate of one (backend, kernel, reason class, phase, rank): recompiles and their seconds;
    ``label`` is the kernel's metric label (``_other`` past the cap); ``last_reason`` the newest
    verbatim reason (redacted)."""

    backend: str
    kernel: str
    label: str
    reason_class: str
    phase: Phase
    rank: int
    count: int
    seconds: float
    last_reason: str | None
    last_ts: float | None


"""Event kinds aggregated into :class:`StatRow` rows."""


MAX_INFLIGHT = 64
"""In-flight compiles kept per worker row (oldest first)."""

REQUESTS_COUNTER = "requests"
"""Marked serving requests (``counters`` table; the request histogram's count)."""
REQUEST_BUCKET_PREFIX = "request_compile_b"
"""``request_compile_b<i>``: requests whose compile seconds fell in bucket ``i`` of
:data:`COMPILE_DURATION_BUCKETS` (not cumulative; ``i = len(buckets)`` is +Inf)."""
REQUEST_SECONDS_COUNTER = "request_compile_seconds"
REQUESTS_DELAYED_COUNTER = "requests_delayed"
"""Per backend (``requests_delayed:triton``): requests that waited on ≥ 1 compile of it."""
ABANDONED_COUNTER = "abandoned_compiles"
"""Per backend (``abandoned_compiles:triton``): ``compile_abandoned`` events (compiles that began
and never ended: the compiler raised)."""


def counter_name(base: str, backend: str) -> str:
    """Name of a per-backend counter in the ``counters`` table: ``"hook_errors:torch_compile"``."""
    return f"{base}:{backend}"


def split_counter(name: str) -> tuple[str, str | None]:
    """``"hook_errors:triton"`` → ``("hook_errors", "triton")``; a 0.1 name (``"hook_errors"``)
    → ``("hook_errors", None)``."""
    base, sep, backend = name.partition(":")
    return base, (backend if sep else None)


def request_histogram_of(counters: dict[tuple[int, str], float]) -> dict[int, tuple[list[int], float]]:
    """:meth:`Journal.request_histogram` from a :meth:`Journal.counters` result."""
    n = len(COMPILE_DURATION_BUCKETS) + 1
    out: dict[int, tuple[list[int], float]] = {}
    for (rank, name), value in counters.items():
        if name.startswith(REQUEST_BUCKET_PREFIX):
            i = int(name[len(REQUEST_BUCKET_PREFIX) :]) if name[len(REQUEST_BUCKET_PREFIX) :].isdigit() else -1
            if 0 <= i < n:
                counts, total = out.setdefault(rank, ([0] * n, 0.0))
                counts[i] += int(value)
        elif name == REQUEST_SECONDS_COUNTER:
            counts, total = out.setdefault(rank, ([0] * n, 0.0))
            out[rank] = (counts, total + value)
    return out


def backend_counter_of(counters: dict[tuple[int, str], float], base: str) -> dict[tuple[str, int], float]:
    """:meth:`Journal.backend_counter` from a :meth:`Journal.counters` result."""
    out: dict[tuple[str, int], float] = {}
    for (rank, name), value in counters.items():
        b, backend = split_counter(name)
        if b == base:
            key = (LEGACY_BACKEND if backend is None else backend, rank)
            out[key] = out.get(key, 0.0) + value
    return out


_TOUCHED_KEYS = (
    "SELECT DISTINCT backend AS b, COALESCE(NULLIF(kernel, ''), '<unknown>') AS k, phase AS p, rank AS r"
    " FROM events NOT INDEXED WHERE id > ? AND kind IN ('compile', 'autotune', 'graph_capture')"
)
"""The aggregate keys (backend, kernel as stored in the aggregates, phase, rank) that compile-like
events newer than a rowid touched (see :meth:`Journal.stats` ``after_id``). ``NOT INDEXED``: a
rowid range, never a scan of a covering index over the whole log."""


def bucket_index(seconds: float) -> int:
    """Index of the first bucket whose upper edge is ≥ ``seconds`` (len(buckets) = +Inf, NaN too)."""
    if seconds != seconds:  # NaN: no edge is >= it
        return len(COMPILE_DURATION_BUCKETS)
    return bisect_left(COMPILE_DURATION_BUCKETS, seconds)


_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_CORRUPT_MESSAGES = ("malformed", "not a database", "file is encrypted")


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` says the database *file* is damaged (``SQLITE_CORRUPT``/``SQLITE_NOTADB``).

    Storage faults (``SQLITE_FULL``, ``SQLITE_READONLY``, ``SQLITE_CANTOPEN``, ``SQLITE_IOERR``,
    ``SQLITE_BUSY``) are *not* corruption: moving a healthy journal aside because the disk is
    full or another writer holds the lock would lose every event in it. Uses
    ``sqlite3.Error.sqlite_errorcode`` (Python 3.11+), else the message text.
    """
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc).lower()
    return any(m in text for m in _CORRUPT_MESSAGES)


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _text(value: str) -> str:
    """``value`` redacted, with lone surrogates (not encodable as UTF-8, so not storable) replaced by ``?``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return redact(value)


def _clean(value: Any) -> Any:
    """``value`` made storable, structurally: every string (dict keys too) redacted and UTF-8-safe
    (:func:`_text`), NaN/±inf floats as their string names, tuples as lists, anything else as its
    ``str``. Redaction works on *values*, never on JSON text, so no value can break the encoding
    of another (a backslash before a quote stays escaped)."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {_text(_safe_str(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return _text(_safe_str(value))


def _safe_str(value: Any) -> str:
    """``str(value)``, or ``<unprintable TYPE>`` when the object's ``__str__`` raises: a host
    object in an event's attrs must cost that value, never the event or its batch."""
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - any __str__ failure of a foreign object
        return f"<unprintable {type(value).__name__}>"


def _sanitize(ev: Event) -> tuple[Event, str]:
    """What is stored for ``ev``: its strings (kernel, key, host, backend, attrs, structurally)
    redacted and UTF-8-safe (:func:`_clean`), non-finite times and durations dropped, and
    ``attrs`` as strict JSON. Raises (``RecursionError``, ``ValueError``) only for an event that
    cannot be stored at all; :meth:`Journal.write` then drops that event alone."""
    update: dict[str, Any] = {}
    attrs, attrs_json = _stored_json(ev.attrs)
    if attrs is not ev.attrs and attrs != ev.attrs:
        update["attrs"] = attrs
    for name in ("kernel", "key", "host", "backend"):
        value = getattr(ev, name)
        if isinstance(value, str):
            clean = _text(value)
            if clean != value:
                update[name] = clean
    if not math.isfinite(ev.ts):
        update["ts"] = time.time()
    for name in ("start_ts", "duration_s"):
        value = getattr(ev, name)
        if value is not None and _finite(value) is None:
            update[name] = None
    if ev.duration_s is not None and ev.duration_s < 0:  # timed across a wall-clock step back
        update["duration_s"] = 0.0
    return (ev.model_copy(update=update) if update else ev), attrs_json


MAX_KEY_CHARS = 16_384
"""Longest specialization key stored; a longer one is cut and ends with a ``…[+N chars]`` marker."""
MAX_NAME_CHARS = 16_384
"""Longest kernel, host or backend name stored (same marker)."""
MAX_ATTRS_CHARS = 65_536
"""Approximate size (characters of strings and keys) above which an event's ``attrs`` are shrunk:
values larger than :data:`MAX_ATTR_VALUE_CHARS` become ``"…[truncated]"`` and ``_truncated`` is set."""
MAX_ATTR_VALUE_CHARS = 4096


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…[+{len(text) - limit} chars]"


def _size(value: Any, budget: int) -> int:
    """Approximate stored size of ``value`` (string lengths + a little per item), counting stops
    once past ``budget`` (so a huge value costs no more than ``budget`` to measure)."""
    stack, total = [value], 0
    while stack and total <= budget:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v) + 2
        elif isinstance(v, dict):
            total += 2
            for k, x in v.items():
                total += len(_safe_str(k)) + 3
                stack.append(x)
        elif isinstance(v, (list, tuple)):
            total += 2
            stack.extend(v)
        else:
            total += 8
    return total


def capped(ev: Event) -> Event:
    """``ev`` with its row size bounded: key cut at :data:`MAX_KEY_CHARS`, names at
    :data:`MAX_NAME_CHARS` (with a ``…[+N chars]`` marker), and ``attrs`` larger than
    :data:`MAX_ATTRS_CHARS` shrunk (large values replaced, ``_truncated: true``). A 1 MB key would
    otherwise be copied into every ``/jit`` and ``/jit/events`` answer (23 s for ``/jit``)."""
    update: dict[str, Any] = {}
    if isinstance(ev.key, str) and len(ev.key) > MAX_KEY_CHARS:
        update["key"] = _cut(ev.key, MAX_KEY_CHARS)
    for name in ("kernel", "host", "backend"):
        value = getattr(ev, name)
        if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
            update[name] = _cut(value, MAX_NAME_CHARS)
    if ev.attrs and _size(ev.attrs, MAX_ATTRS_CHARS) > MAX_ATTRS_CHARS:
        attrs: dict[str, Any] = {}
        total = 0
        for k, v in ev.attrs.items():
            n = _size(v, MAX_ATTR_VALUE_CHARS)
            if n > MAX_ATTR_VALUE_CHARS or total + n > MAX_ATTRS_CHARS:
                attrs[_safe_str(k)[:MAX_NAME_CHARS]] = "…[truncated]"
            else:
                attrs[k] = v
                total += n
        attrs["_truncated"] = True
        update["attrs"] = attrs
    return ev.model_copy(update=update) if update else ev


def sanitized(ev: Event) -> Event:
    """``ev`` as the journal stores it (strings redacted and UTF-8-safe, non-finite times dropped,
    ``attrs`` the values its stored JSON text reads back as): what off-host exporters send
    (:mod:`jitwatch.export`). Raises like :meth:`Journal.write` for an event that cannot be stored
    at all.

    Attrs stored as they are (plain JSON) are read back from their text: the journal's encoder
    (orjson) writes some values that are not plain JSON types without refusing them (an ``Enum``
    member as its value, a ``UUID`` as its ``str``: :func:`_make_compact_encoder`), and an exporter
    must send those values, not its own rendering of the objects. ~2 µs per event (``json.loads``)."""
    out, text = _sanitize(ev)
    if out.attrs is ev.attrs:  # stored as they are: the caller's objects, written by orjson
        try:
            out = out.model_copy(update={"attrs": json.loads(text)})
        except ValueError:  # an orjson.Fragment's bytes that are not JSON: the objects, as before
            pass
    return out


_EVENT_ERRORS = (
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
    sqlite3.IntegrityError,
    sqlite3.DataError,
    sqlite3.InterfaceError,
    sqlite3.ProgrammingError,
)
"""What one event's own values can raise while it is stored (unstorable text or numbers, an int
beyond SQLite's 64 bits): that event is dropped alone. Storage faults (``OperationalError``) and
corruption still fail the whole batch, which the writer retries or counts."""


def _own_fault(exc: BaseException) -> bool:
    """Whether ``exc``, raised while one event was prepared or inserted, is that event's own
    problem (dropped alone): anything but a storage fault (``sqlite3.OperationalError``: full,
    locked, read-only) or corruption, which fail the batch. Besides :data:`_EVENT_ERRORS` this
    covers whatever a foreign object in ``attrs`` raises (a ``__str__`` that fails, say)."""
    if isinstance(exc, sqlite3.OperationalError):
        return False
    return not (isinstance(exc, sqlite3.DatabaseError) and is_corruption(exc))


def _make_stdlib_encoder() -> Callable[[Any], str]:
    """``value -> str``: compact strict JSON
    (``separators=(",", ":")``, ``ensure_ascii=False``, ``allow_nan=False``), the same text as
    ``json.dumps`` with those options. Uses the stdlib's C encoder (``json.encoder.c_make_encoder``,
    CPython's ``_json``) built once, without the per-call ``JSONEncoder`` set-up and
    circular-reference bookkeeping (~2 µs of a ~4 µs encode of a compile's attrs); a circular value
    raises ``RecursionError`` instead of ``ValueError``. Falls back to a prebuilt
    ``json.JSONEncoder(...).encode`` where that private constructor is missing or differs (checked
    against ``json.dumps`` on a sample at import)."""
    fallback = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    try:
        c_make_encoder = getattr(json_encoder, "c_make_encoder", None)
        encode_basestring = json_encoder.encode_basestring
        if c_make_encoder is None:
            return fallback

        def refuse(o: Any) -> Any:
            raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

        make = c_make_encoder(None, refuse, encode_basestring, None, ":", ",", False, False, False)

        def encode(value: Any) -> str:
            return "".join(make(value, 0))

        sample = {"a": [1, 2.5, None, True, 'é"\n'], "b": {"c": 1e300, "d": -0.0}, "e": ()}
        if encode(sample) != json.dumps(sample, ensure_ascii=False, separators=(",", ":")):
            return fallback
        encode(float("nan"))  # must refuse, as allow_nan=False does
    except ValueError:
        return encode
    except Exception:  # noqa: BLE001 - any other shape of the private constructor: use the public one
        return fallback
    return fallback


_stdlib_json = _make_stdlib_encoder()
"""The stdlib's compact strict JSON (:func:`_make_stdlib_encoder`): :func:`_compact_json`'s
fallback, and the whole encoder where orjson cannot be imported."""


def _make_compact_encoder() -> Callable[[Any], str]:
    """``value -> str``: compact strict JSON of ``value``, the one encoder of everything the journal
    stores as JSON text (an event's attrs, a specialization record, a worker row's attrs).

    orjson first (~0.5 µs against the stdlib's ~3-4 µs for a compile's attrs); where orjson refuses
    the value, or its text could mean something else than the stdlib's, the stdlib encoder
    (:data:`_stdlib_json`), whose text or error is then the one jitwatch stored before orjson: a
    value it refuses (``TypeError``/``ValueError``/``RecursionError``) is taken structurally by
    :func:`_clean`, as before. Raises what :data:`_stdlib_json` raises. In detail:

    * orjson is called with ``OPT_PASSTHROUGH_DATACLASS | OPT_PASSTHROUGH_DATETIME |
      OPT_PASSTHROUGH_SUBCLASS`` and no ``default``, so it refuses (``TypeError``) what the stdlib
      refuses or writes otherwise: dataclasses, ``datetime``/``date``/``time``, subclasses of
      ``str``/``int``/``float``/``list``/``tuple``/``dict`` (numpy scalars, ``OrderedDict``, named
      tuples), non-``str`` dict keys, ints beyond 64 bits, lone surrogates, nesting past 254 levels.
    * orjson writes NaN and ±inf as ``null``: any ``null`` in its text (``None`` values too, or the
      four letters inside a string) sends the value to the stdlib encoder, which refuses a
      non-finite float (``allow_nan=False``) as before. (jitwatch's monitor leaves top-level ``None``
      values out of a compile's attrs, so that second encode is rare.)
    * Strings are escaped exactly as the stdlib escapes them (every code point, checked by
      ``tests/store/test_journal_json.py``), so redaction's checks on the text see what they saw;
      floats are written in orjson's shortest form (``1e-05`` as ``0.00001``, ``1e-06`` as
      ``1e-6``): the same ``float`` when parsed with ``json.loads``. A specialization record found
      by its text (one that is not Triton's, and a Triton one whose compile takes the careful path:
      attrs to redact or not UTF-8, past :data:`_REST_BUDGET`/:data:`_SPEC_BUDGET`) that holds such
      a float and that an older jitwatch stored is stored again, once, beside it (same values); a
      Triton record on the fast path is found by its identity, as before.
    * Accepted, not refused (orjson has no option for them, and a walk over the value to find them
      cost ~6 % of the journal's CPU per event, over half of what orjson saves): an ``enum.Enum``
      member is written as its ``value`` — for a ``str``/``int``/``float`` mix-in (``IntEnum``,
      ``StrEnum``) the stdlib's text, but a plain ``Enum``/``Flag`` member, which the stdlib refuses
      and :func:`_clean` stored as ``str(member)`` (``"Color.RED"``), is now stored as its value
      (``1``) when nothing else sends the attrs to the careful path, and so is a mix-in member
      whose ``_value_`` is not its data (``int.__new__(cls, 1)`` with ``_value_ = "fp16"``: was
      ``1``, now ``"fp16"``); an ``uuid.UUID`` as its ``str``,
      the text :func:`_clean` stored; an ``orjson.Fragment`` as its bytes, unchecked (only code that
      uses orjson makes one).

    Without orjson (not installed) this is :data:`_stdlib_json` itself."""
    try:
        import orjson
    except ImportError:  # a declared dependency; without it the stdlib encoder does all (same values)
        return _stdlib_json
    dumps, stdlib_json = orjson.dumps, _stdlib_json
    option = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS

    def encode(value: Any) -> str:
        try:
            data = dumps(value, None, option)
        except TypeError:  # orjson.JSONEncodeError: the stdlib's text, or its error
            return stdlib_json(value)
        text: str = data.decode()  # orjson's output is valid UTF-8
        # NaN/inf are null in orjson's text: the stdlib refuses them. (~0.1 µs on a compile's attrs;
        # `b"null" in data` costs ~0.3 µs, the buffer protocol's set-up on bytes.)
        return stdlib_json(value) if "null" in text else text

    return encode


_compact_json = _make_compact_encoder()


def _utf8_safe(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _plain_json(value: Any) -> str | None:
    """Compact strict JSON of ``value`` when it is plain JSON, valid UTF-8 and holds no
    redactable substring (so it is stored as it is); ``None`` otherwise (the caller takes the
    careful path: :func:`capped`, :func:`_store_json`)."""
    try:
        text: str = _compact_json(value)
    except (ValueError, TypeError, RecursionError):
        return None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return None if may_need_redaction(text) else text


def _stored_json(value: Any) -> tuple[Any, str]:
    """``(value as stored, its compact strict JSON)``: ``value`` itself when it is plain JSON, valid
    UTF-8 and holds no redactable substring (:func:`_plain_json`); otherwise structurally cleaned
    first (:func:`_clean`)."""
    text = _plain_json(value)
    if text is not None:
        return value, text
    clean = _clean(value)
    return clean, _compact_json(clean)


def _store_json(value: Any) -> str:
    """Compact strict JSON of ``value`` as stored (:func:`_stored_json`)."""
    return _stored_json(value)[1]


def _on_readonly_fs_without_wal(path: Path) -> bool:
    try:
        readonly_fs = bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    return readonly_fs and not Path(f"{path}-wal").exists()


def _same(ev: Event) -> Event:
    return ev


def _row_to_event(row: sqlite3.Row) -> Event:
    """The event of an ``events`` row. Raises ``ValueError`` (or pydantic's ``ValidationError``,
    a ``ValueError``) for a row that makes no sense: unknown kind or phase, a time or rank that is
    not a number; optional numbers that make no sense (negative or non-finite durations) read as
    ``None`` and unparsable attrs as ``{}`` (see :mod:`jitwatch.store.readsafe`)."""
    fields = dict(row)
    spec_data = fields.pop("spec_data", None)
    fields.pop("spec_id", None)
    kind, phase, ts = readsafe.kind(fields["kind"]), readsafe.phase(fields["phase"]), readsafe.timestamp(fields["ts"])
    if kind is None or phase is None or ts is None or readsafe.rank(fields["rank"]) is None:
        raise ValueError("unusable events row")
    fields["ts"] = ts
    fields["start_ts"] = readsafe.timestamp(fields.get("start_ts"))
    fields["duration_s"] = readsafe.seconds(fields.get("duration_s"))
    for name in ("kernel", "key", "backend", "host"):
        if name in fields and fields[name] is not None and not isinstance(fields[name], str):
            fields[name] = str(fields[name])
    raw_attrs = fields["attrs"]
    stored = len(raw_attrs) if isinstance(raw_attrs, str | bytes) else 0  # stored text, characters
    attrs = readsafe.json_object(raw_attrs)
    if spec_data is not None:
        try:
            spec, size = specs.decode_sized(spec_data)
        except (ValueError, KeyError, IndexError, zlib.error):
            attrs["spec_unreadable"] = True  # a damaged record costs that detail, not the event
        else:
            stored += size
            fields["key"] = spec.pop("key", None)
            attrs = {**spec, **attrs}
    names = (fields.get(n) for n in ("key", "kernel", "host", "backend"))
    oversized = stored > MAX_ATTRS_CHARS or any(isinstance(v, str) and len(v) > MAX_NAME_CHARS for v in names)
    # The write-time caps again, for a row edited in the file: checked on the stored sizes (cheap),
    # applied only to a row over them, so ordinary reads pay nothing (/jit reads 20k events).
    return (capped if oversized else _same)(
        Event(
            **{
                **fields,
                "kind": kind,
                "phase": phase,
                "cache_hit": None if row["cache_hit"] is None else bool(row["cache_hit"]),
                "attrs": attrs,
            }
        )
    )


_SPEC_CACHE_MAX = 4096
"""Specializations whose row id a writer remembers (per connection, oldest out): one entry each,
under Triton's identity (key, ``specialization_data``, source hash, module) or else the record's
text; with ~2.5 KB of strings per Triton entry, at most ~10 MB. Also the bound of the redacted-name
cache."""
_DIGEST_MAX = 16384
"""Specialization records whose identity digest a writer keeps up to its row-id watermark (see
:meth:`Journal._stored_digests`): ~120 bytes each, at most ~2 MB per connection."""
_SPEC_GC_MIN_RETIRED = 1000
"""Fewest events retired journal-wide (by any writer) between two sweeps of unreferenced
specializations; the threshold is half the retention count when that is larger (see
:meth:`Journal.prune`)."""
_SPEC_SWEPT_AT = "spec_swept_retired"
"""``meta`` key: the journal's ``retired_events`` count at the last sweep of unreferenced
specializations (absent: none yet), from which the next one falls due."""
_PLAIN_BUDGET = MAX_ATTRS_CHARS // 8
"""Compact JSON characters of an event's attrs (the rest and its specialization record together)
under which :func:`capped` cannot change them (:func:`_size` counts at most 8 per JSON character:
8 per number, literal or empty container, a string's or key's length plus its quotes)."""
_SPEC_BUDGET = 6144
"""Compact JSON characters a Triton specialization record may have to be stored under its identity
(:func:`jitwatch.store.specs.identity_digest`) by the fast path; the event's other attrs then get
the rest of :data:`_PLAIN_BUDGET` (:data:`_REST_BUDGET`), so a record another writer stored under
an identity is within the bound whatever this event's own part is, without encoding it here.
A longer one takes the careful path (stored under the digest of its text, as before)."""
_REST_BUDGET = _PLAIN_BUDGET - _SPEC_BUDGET
_DEFERRED = -1
"""What :meth:`Journal._spec_fast` returns for a specialization looked up after the pass over the
batch (one ``SELECT … IN`` for all of them)."""
_IN_CHUNK = 256
"""Values per ``IN (…)`` list of the batch lookups (specializations, kernel labels)."""
_VALUE: dict[Any, str] = {**{k: k.value for k in EventKind}, **{p: p.value for p in Phase}}
"""Enum member → its ``.value`` (one dict lookup instead of the enum's descriptor)."""
_PHASE_LITERAL: dict[Phase, str] = {p: p.value for p in Phase if p.value.isidentifier()}
"""A phase's value as it may appear in SQL text (identifiers only: no quote can reach a query)."""
_EVENT_COLUMNS = (
    "ts, start_ts, duration_s, kind, rank, pid, host, phase, backend, kernel, key, cache_hit, attrs, spec_id"
)


_MULTI_ROW_CHUNKS = (64, 32, 16, 8, 4, 2, 1)
"""Rows per multi-row ``INSERT … VALUES (…),(…)`` statement (:func:`_insert_rows`): a batch is cut
into chunks of these sizes, largest first, so a connection prepares at most seven statements per
table (the ``sqlite3`` module caches them). At 64 rows of 14 columns a statement binds 896
parameters, far under SQLite's limit (32,766 since 3.32)."""


@lru_cache(maxsize=64)
def _multi_row_sql(head: str, width: int, rows: int, tail: str, one: str = "") -> str:
    """``head VALUES (?,…),(?,…)… tail`` for ``rows`` rows of ``width`` columns (``one``: the row's
    own ``(…)`` instead, when not all plain ``?``)."""
    one = one or "(" + ",".join("?" * width) + ")"
    return f"{head} VALUES {','.join([one] * rows)}{tail}"


def _run_row(width: int) -> str:
    """An event row of a batch's run of compile-like events (``width`` 14, or 13 without
    ``spec_id``): the key column (the 11th) as ``NULLIF(?, 0)``, so a row whose key is in its
    specialization record binds :data:`_KEY_IN_RECORD` for it instead of ``None`` (the ``sqlite3``
    module binds ``None`` and ``bytes`` only after an adaptation lookup that raises and clears an
    ``AttributeError``, ~0.5 µs per value; an ``int`` needs none). Keys there are ``str`` or ``None``
    (redacted text), never ``0``: the stored values are the same."""
    return "(" + ",".join(["?"] * 10 + ["NULLIF(?,0)"] + ["?"] * (width - 11)) + ")"


_KEY_IN_RECORD = 0
"""The key column's parameter of a run's event row whose key is in its specialization record
(stored ``NULL``, see :func:`_run_row`)."""


def _insert_rows(
    conn: sqlite3.Connection, head: str, width: int, rows: Sequence[Sequence[Any]], tail: str = "", one: str = ""
) -> int:
    """Insert (or upsert, with an ``ON CONFLICT`` ``tail``) ``rows`` with multi-row ``VALUES``
    statements (:data:`_MULTI_ROW_CHUNKS`) instead of one ``executemany`` step per row: one
    statement execution, one ``sqlite_sequence`` update (``AUTOINCREMENT``) and one Python call per
    chunk (~7 → ~4 µs per event row and ~4.7 → ~3.3 µs per aggregate row on the 2-core VM,
    ``docs/benchmarks.md`` section 9). Returns the last inserted rowid (``0`` without rows). Rows
    go in order, so a later row's upsert sees an earlier one's; raises what the statements raise,
    rows of earlier chunks staying written (callers wrap it in a savepoint). ``one``: see
    :func:`_multi_row_sql`."""
    n, i, last = len(rows), 0, 0
    flat = chain.from_iterable
    for size in _MULTI_ROW_CHUNKS:
        while n - i >= size:
            sql = _multi_row_sql(head, width, size, tail, one)
            last = conn.execute(sql, list(flat(rows[i : i + size]))).lastrowid or last
            i += size
    return int(last)


@lru_cache(maxsize=32)
def _in_sql(head: str, size: int) -> str:
    return f"{head} IN ({','.join('?' * size)})"


def _select_in(conn: sqlite3.Connection, head: str, values: list[Any]) -> list[Any]:
    """Rows of ``head IN (values)`` (``head``: ``SELECT … WHERE column``), :data:`_IN_CHUNK` values
    per statement, each list padded to a power of two with its last value (an ``IN`` list is a set:
    the rows are the same), so a connection prepares at most nine such statements per ``head`` and
    the ``sqlite3`` module's statement cache (128 per connection) keeps them; a list of every length
    up to 256 would re-prepare a ~260-parameter statement whenever its length is new."""
    cur = _tuple_cursor(conn)
    rows: list[Any] = []
    for k in range(0, len(values), _IN_CHUNK):
        chunk = values[k : k + _IN_CHUNK]
        size = 1 << (len(chunk) - 1).bit_length()
        if size > len(chunk):
            chunk += [chunk[-1]] * (size - len(chunk))
        rows += cur.execute(_in_sql(head, size), chunk)  # read in C: no generator step per row
    return rows


def _spec_ident(key: str, data: str, source_hash: Any, module: Any, cache_key: Any) -> tuple[Any, ...] | None:
    """What a connection remembers a Triton specialization's row id under (raw values, before
    redaction): ``(key, data, source hash, module)``, or with Triton's cache hash
    ``(key, cache key, source hash, module, len(data))`` — the same fields as its identity
    (:func:`jitwatch.store.specs.identity_digest`), so one entry never stands for two records.
    ``None`` for a ``cache_key`` that is not of the form of Triton's hash
    (:func:`jitwatch.store.specs.is_cache_hash`): it does not stand for the data, and the data's
    identity does not cover it, so only the record's text identifies that record. ``None`` too for
    a source hash or module that is not a string (a foreign caller's): a list cannot be a dict key,
    and ``1`` would stand for ``True``."""
    if not ((source_hash is None or isinstance(source_hash, str)) and (module is None or isinstance(module, str))):
        return None
    if cache_key is None:
        return (key, data, source_hash, module)
    if specs.is_cache_hash(cache_key):
        return (key, cache_key, source_hash, module, len(data))
    return None


def _tuple_cursor(conn: sqlite3.Connection) -> sqlite3.Cursor:
    """A cursor of ``conn`` whose rows are plain tuples (a journal's connection makes
    ``sqlite3.Row`` objects, ~0.1 µs more per row, for its readers)."""
    cur = conn.cursor()
    cur.row_factory = None
    return cur


_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)
"""Whether this SQLite has ``INSERT … RETURNING`` (3.35, 2021)."""


def _insert_specs(conn: sqlite3.Connection, records: list[tuple[bytes, str]]) -> dict[bytes, int]:
    """Insert specialization records (``(digest, JSON text)``, each compressed with
    :func:`specs.compress`); digest → row id. With ``INSERT … RETURNING`` (SQLite ≥ 3.35) in
    multi-row statements (:data:`_MULTI_ROW_CHUNKS`); one statement per record before that."""
    if not _RETURNING:
        return {digest: _insert_spec(conn, digest, text) for digest, text in records}
    # bytearray: bound as the same BLOB as bytes, without the sqlite3 module's adaptation lookup
    # (~1 µs per bytes parameter: it raises and clears an AttributeError)
    rows = [(bytearray(digest), bytearray(specs.compress(text))) for digest, text in records]
    out: dict[bytes, int] = {}
    n, i = len(rows), 0
    cur = _tuple_cursor(conn)
    for size in _MULTI_ROW_CHUNKS:
        while n - i >= size:
            sql = _multi_row_sql("INSERT INTO specializations(digest, data)", 2, size, " RETURNING digest, id")
            out.update(cur.execute(sql, list(chain.from_iterable(rows[i : i + size]))))  # (bytes, int) rows
            i += size
    return out


def _insert_spec(conn: sqlite3.Connection, digest: bytes, text: str) -> int:
    """Insert a specialization record (``text`` compressed, :func:`specs.compress`) under ``digest``;
    its row id."""
    cur = conn.execute("INSERT INTO specializations(digest, data) VALUES (?,?)", (digest, specs.compress(text)))
    return int(cur.lastrowid or 0)


_FIELD_NAMES = (
    "kind",
    "attrs",
    "key",
    "kernel",
    "host",
    "backend",
    "cache_hit",
    "ts",
    "duration_s",
    "start_ts",
    "phase",
    "rank",
    "pid",
)
_EVENT_FIELDS = itemgetter(*_FIELD_NAMES)
"""The event fields :meth:`Journal._lean_run` reads, in one call on an :class:`Event`'s ``__dict__``
(pydantic keeps a model's fields there): ~0.2 µs instead of ~0.55 µs for thirteen attribute reads, each
of which goes through the slot of pydantic's ``__getattr__`` (``slot_tp_getattr_hook``)."""
_EVENT_ATTRS = attrgetter(*_FIELD_NAMES)
"""The same by attribute, for an object that is not exactly an :class:`Event`."""


_WAITING = 5
"""Where a :class:`_Pending` ``specs`` entry's (row index, event) pairs start."""


class _Pending:
    """What the fast path queued over a run of compile events (see :meth:`Journal._resolve`):
    ``kernels`` (new name → its first event's time), ``specs`` (identity digest → one flat list:
    the event's attrs or its spec fields, from which the record is split only if it is new; the
    redacted identity's four fields (key, ``specialization_data``, source hash, module); then row
    index, event, row index, event, … from :data:`_WAITING` on — one list per specialization, no
    tuple per event),
    ``by_fast`` (identity tuple → digest) and ``rows``, the run being built (a queued row's index is
    its length when queued)."""

    __slots__ = ("by_fast", "kernels", "rows", "specs")

    def __init__(self, rows: list[Any] | None = None) -> None:
        self.rows: list[Any] = [] if rows is None else rows
        self.kernels: dict[str, float] = {}
        self.specs: dict[bytes, list[Any]] = {}
        self.by_fast: dict[tuple[Any, ...], bytes] = {}

    def clear(self) -> None:
        self.kernels.clear()
        self.specs.clear()
        self.by_fast.clear()


_DIGEST_SQL = {
    "meta": "SELECT count(*), group_concat(k || '=' || v, ';') FROM meta",
    "workers": "SELECT count(*), max(rowid), total(pid), total(rank), group_concat(state), total(started_ts),"
    " total(last_ts), total(warmup_end_ts), total(first_request_ts), total(length(attrs)) FROM workers",
    "counters": "SELECT count(*), max(rowid), total(rank), total(value), total(length(name)) FROM counters",
    "compile_hist": "SELECT count(*), max(rowid), total(bucket), total(count) FROM compile_hist",
    "duration_hist": "SELECT count(*), max(rowid), total(bucket), total(count) FROM duration_hist",
    "kernels": "SELECT count(*), max(rowid) FROM kernels",  # labels never change once assigned
}
"""What :meth:`Journal.small_tables_digest` reads of each small table: aggregates computed by
SQLite over every row (no row crosses into Python)."""


class Journal:
    """One connection to the journal in ``directory`` (``journal.db`` inside it).

    Args:
        directory: created (mode 0700) if missing; a writer makes it owner-only and refuses one
            owned by another user (:func:`jitwatch.store.safety.prepare_writer_dir`).
        retention_events: most rows kept in the event log; older rows are retired.
        retention_seconds: oldest event age kept, seconds.
        max_kernels: distinct kernel names given their own metric label; later ones share
            ``kernel="_other"`` (the mapping is first-come and never changes, so counters stay
            monotonic).
        readonly: open for reading only (the sidecar); never creates or repairs the file.
        busy_timeout_s: how long a write waits for another writer's lock.

    Raises:
        JournalCorruptError: the file is not a usable database (``SQLITE_CORRUPT``/``NOTADB``,
            or not a jitwatch journal); ``readonly=False`` callers use :func:`open_or_recover`
            instead, which moves it aside and starts a fresh one.
        JournalVersionError: the journal's schema is newer than this jitwatch may read (or, for
            a writer, write): see :mod:`jitwatch.store.migrations`. The file is left alone.
        sqlite3.OperationalError: a storage fault (full disk, read-only filesystem, lock
            timeout); the file is left alone.
        FileNotFoundError: ``readonly=True`` and there is no journal yet.
        JournalUnsafeError: a symlink, FIFO or another user's file or directory is in the way
            (a ``PermissionError``; see :mod:`jitwatch.store.safety`).
        OSError: the directory cannot be created.

    A ``Journal`` is not thread-safe; give each thread its own.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        retention_events: int = DEFAULT_RETENTION_EVENTS,
        retention_seconds: int = DEFAULT_RETENTION_SECONDS,
        max_kernels: int = DEFAULT_MAX_KERNELS,
        readonly: bool = False,
        busy_timeout_s: float = 10.0,
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL_FILE
        self.retention_events = retention_events
        self.retention_seconds = retention_seconds
        self.max_kernels = max_kernels
        self.readonly = readonly
        self.immutable = False
        """Read-only and opened ``immutable=1`` (WAL file on a read-only filesystem): it never sees
        later writes, so it must not be kept open to follow the journal."""
        self._writes_since_prune = 0
        self._warned_bad_event = False
        self._cap_reached = False
        self._labels: dict[str, str] = {}  # kernel name → label (immutable once assigned)
        self._named_kernels = 0  # kernels with their own label up to rowid _kernels_top (committed)
        self._kernels_top = 0
        self._spec_ids: OrderedDict[Any, int | tuple[int, int]] = OrderedDict()
        """Specialization identity (text or tuple) → (row id, JSON length), or the row id alone (an
        ``int``: one tuple fewer per cached specialization) for a record found or stored under its
        identity by the fast path, which stands for (row id, 0) (within :data:`_SPEC_BUDGET`)."""
        self._spec_generation: str | None = None
        self._digest_ids: dict[bytes, int] = {}
        """Identity digest → row id of every specialization record with ``id <= _digest_top``, while
        ``_digests_complete`` (see :meth:`_stored_digests`)."""
        self._digest_top = 0
        self._digests_complete = True
        self._redacted: dict[str, str] = {}  # kernel names and keys → redacted (bounded)
        self._parsed_workers: dict[tuple[Any, ...], WorkerRow] = {}  # raw row → parsed, last workers() read
        self._lean = True
        """Whether :meth:`write` takes :meth:`_lean_run` for compile events (tests compare it with
        the general path by turning it off)."""
        self.skipped_rows = 0
        """Rows read back that made no sense (unknown phase, text or inf in a number column…) and
        were skipped: see :mod:`jitwatch.store.readsafe`."""
        if readonly:
            safety.check_reader_files(self.path)
            if not self.path.exists():
                raise FileNotFoundError(f"no journal at {self.path}")
            self._conn = self._connect_readonly(immutable=False, timeout=busy_timeout_s)
        else:
            safety.prepare_writer_dir(self.directory)
            safety.check_writer_files(self.path)
            safety.create_owner_only(self.path)
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
        try:
            self.schema = self._prepare(busy_timeout_s)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if is_corruption(exc):
                raise JournalCorruptError(f"{self.path}: {exc}") from exc
            if not (readonly and _on_readonly_fs_without_wal(self.path)):
                raise  # a storage fault (full, read-only, locked): the file itself may be fine
            # A WAL database on a read-only filesystem (or a read-only mount of a shared volume,
            # as a sidecar container often has) with no -wal/-shm cannot be opened with mode=ro:
            # SQLite would have to create the -shm. No -wal means no writer is connected (a WAL
            # writer keeps it while open), so a short immutable read is safe; a writer starting
            # during it can at worst make this one read fail (sqlite3.Error, a 503), never write.
            self._conn = self._connect_readonly(immutable=True, timeout=busy_timeout_s)
            try:
                self.schema = self._prepare(busy_timeout_s)
            except sqlite3.DatabaseError as exc2:
                self._conn.close()
                if is_corruption(exc2):
                    raise JournalCorruptError(f"{self.path}: {exc2}") from exc2
                raise
        except (JournalVersionError, JournalCorruptError, FileNotFoundError):
            self._conn.close()
            raise
        self._tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self.file_id = safety.file_identity(self.path)
        """``(st_dev, st_ino)`` of the file this connection opened (see :meth:`replaced`)."""
        if not readonly:
            self._conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")

    def _connect_readonly(self, *, immutable: bool, timeout: float) -> sqlite3.Connection:
        # The path's bytes, percent-encoded: a directory name that is not UTF-8 (jw-\xff) too.
        uri = f"file:{quote(os.fsencode(self.path))}?mode=ro" + ("&immutable=1" if immutable else "")
        self.immutable = immutable
        # check_same_thread=False: a long-lived reader (the sidecar's live aggregates) is used from
        # whichever server thread holds its owner's lock; a Journal is still not thread-safe itself.
        return sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)

    def _prepare(self, busy_timeout_s: float) -> migrations.SchemaInfo:
        """Pragmas, then (writable) create or upgrade the schema (:func:`migrations.prepare`) or
        (read-only) check that this code may read it. Raises :class:`JournalCorruptError` for a
        database that is not a jitwatch journal, :class:`JournalVersionError` for a newer one
        this code may not use."""
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        if not self.readonly:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            return migrations.prepare(self._conn, self.path)
        info = migrations.read_info(self._conn)
        if info is None:
            if self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
                # An empty database: a worker created the file and has not committed the schema
                # yet (one transaction, migrations.prepare). Not corrupt; not a journal yet either.
                raise FileNotFoundError(
                    f"{self.path}: empty database, not a jitwatch journal yet (a worker may be creating it)"
                )
            raise JournalCorruptError(f"{self.path}: not a jitwatch journal (no schema version)")
        migrations.check_readable(self.path, info)
        return info

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        else:
            self._conn.execute("COMMIT")

    # ------------------------------------------------------------------ writing
    def write(self, events: Sequence[Event]) -> list[int]:
        """Append ``events`` and update the aggregates in one transaction; returns the ids of those written.

        An event whose own values cannot be stored (see :data:`_EVENT_ERRORS`) is dropped alone,
        counted in the ``dropped_events`` counter (its rank's), logged once; the others are written.

        One ``executemany`` for the event rows; the per-(backend, kernel, phase, rank, kind)
        aggregates and the duration histogram are folded in memory over the batch and written
        once per distinct key; kernel labels and specialization ids are cached per connection.
        A compile's specialization fields (:data:`jitwatch.store.specs.SPEC_FIELDS` and the key)
        are stored once per distinct specialization (schema revision 3).

        Raises ``sqlite3.Error`` (including ``OperationalError`` for a full disk or a read-only
        file) with nothing written. The journal writer thread catches and counts those.
        """
        if self.readonly:
            raise PermissionError("journal opened read-only")
        if not events:
            with self._transaction():
                pass
            return []
        new_specs: list[Any] = []
        new_labels: list[str] = []
        kernels_seen = (self._named_kernels, self._kernels_top, self._cap_reached)
        try:
            with self._transaction() as conn:
                ids = self._write_batch(conn, events, new_specs, new_labels)
        except BaseException:
            if new_specs:  # rolled back: those rows do not exist
                self._forget_digests()
            for text in new_specs:
                self._spec_ids.pop(text, None)
            for name in new_labels:
                self._labels.pop(name, None)
            self._named_kernels, self._kernels_top, self._cap_reached = kernels_seen
            raise
        self._writes_since_prune += len(events)
        if self._writes_since_prune >= 1000:
            # The events are committed: a failing prune (lock timeout, full disk) must not make
            # the caller think they were not (it would retry them and duplicate, or count them
            # as dropped). It is retried after the next write.
            try:
                self.prune()
            except sqlite3.Error as exc:
                log.debug("jitwatch journal prune failed, will retry: %s", exc)
        return ids

    def _write_batch(
        self, conn: sqlite3.Connection, events: Sequence[Event], new_specs: list[Any], new_labels: list[str]
    ) -> list[int]:
        dedup = "specializations" in self._tables
        if dedup:
            row = conn.execute("SELECT v FROM meta WHERE k='spec_generation'").fetchone()
            generation = row[0] if row is not None else None
            if generation != self._spec_generation:  # another connection swept specializations
                self._spec_ids.clear()
                self._forget_digests()
                self._spec_generation = generation
        insert_head = f"INSERT INTO events({_EVENT_COLUMNS if dedup else _EVENT_COLUMNS.rsplit(',', 1)[0]})"
        insert = _multi_row_sql(insert_head, 14 if dedup else 13, 1, "")
        run_one = _run_row(14 if dedup else 13)  # the run's rows: key NULLIF(?, 0)
        run_insert = _multi_row_sql(insert_head, 14 if dedup else 13, 1, "", run_one)
        ids: list[int] = []
        bad: dict[int, int] = {}
        stats: dict[tuple[str, str, str, int, str], list[Any]] = {}
        hist: dict[tuple[str, int, str, int], int] = {}
        run: list[tuple[list[Any], tuple[Any, ...]]] = []  # consecutive compile-like events

        recompiles: dict[tuple[str, str, str, str, int], list[Any]] = {}

        remote: dict[tuple[str, int, int], int] = {}  # (backend, rank, hit) -> remote-cache lookups

        def fold(pairs: Iterable[tuple[Any, tuple[Any, ...]]]) -> None:
            """Add events' (row, (aggregate key, seconds, cache hit, key, time, reason class, reason,
            remote hit)) to the batch's aggregates (one loop: no call per event)."""
            get, hist_get = stats.get, hist.get
            buckets, n_buckets = COMPILE_DURATION_BUCKETS, len(COMPILE_DURATION_BUCKETS)
            for _, (sk, seconds, hit, key, ts, reason_class, reason, remote_hit) in pairs:
                if remote_hit is not None:
                    rck = (sk[0], sk[3], remote_hit)
                    remote[rck] = remote.get(rck, 0) + 1
                if reason_class is not None:
                    rk = (sk[0], sk[1], reason_class, sk[2], sk[3])
                    racc = recompiles.get(rk)
                    if racc is None:
                        racc = recompiles[rk] = [0, 0.0, None, None]
                    racc[0] += 1
                    racc[1] += seconds
                    if reason is not None:
                        racc[2] = reason
                    racc[3] = ts
                acc = get(sk)
                if acc is None:
                    acc = stats[sk] = [0, 0.0, 0, None, None]
                acc[0] += 1
                acc[1] += seconds
                acc[2] += hit
                if key is not None:
                    acc[3] = key
                acc[4] = ts
                if sk[4] == "compile":  # bucket_index, inline
                    hk = (sk[0], sk[3], sk[2], bisect_left(buckets, seconds) if seconds == seconds else n_buckets)
                    hist[hk] = hist_get(hk, 0) + 1

        pending = _Pending(run)

        def flush_run() -> None:
            if pending.kernels or pending.specs:
                self._resolve(conn, pending, run, dedup, new_specs, new_labels, bad)
                pending.clear()
            if not run:
                return
            rows = [r for r, _ in run] if dedup else [r[:-1] for r, _ in run]
            conn.execute("SAVEPOINT jitwatch_batch")
            try:
                last = _insert_rows(conn, insert_head, len(rows[0]), rows, "", run_one)
            except _EVENT_ERRORS:
                conn.execute("ROLLBACK TO jitwatch_batch")
                conn.execute("RELEASE jitwatch_batch")
                for r, (_, f) in zip(rows, run, strict=True):  # one at a time: only the bad one goes
                    conn.execute("SAVEPOINT jitwatch_event")
                    try:
                        ids.append(int(conn.execute(run_insert, r).lastrowid or 0))
                    except _EVENT_ERRORS as exc:
                        conn.execute("ROLLBACK TO jitwatch_event")
                        self._count_bad(bad, f[0][3], exc)
                    else:
                        fold(((r, f),))
                    conn.execute("RELEASE jitwatch_event")
            else:
                conn.execute("RELEASE jitwatch_batch")
                ids.extend(range(last - len(rows) + 1, last + 1))  # one transaction: consecutive ids
                fold(run)
            run.clear()

        lean = dedup and self._lean
        i, n = 0, len(events)
        while i < n:
            ev = events[i]
            if ev.kind in STAT_KINDS and lean:
                i = self._lean_run(conn, events, i, pending, new_specs, new_labels, bad)
                continue
            i += 1
            if ev.kind not in STAT_KINDS:
                flush_run()
                # One event that cannot be stored (its own values) is dropped alone and counted,
                # inside a savepoint so none of its rows or side effects stay half-written.
                conn.execute("SAVEPOINT jitwatch_event")
                try:
                    clean, attrs_json = _sanitize(capped(ev))
                    cur = conn.execute(insert, self._event_row(clean, attrs_json, None)[: 14 if dedup else 13])
                    self._apply(conn, clean, attrs_json)
                    ids.append(int(cur.lastrowid or 0))
                except Exception as exc:  # an event's own fault unless _own_fault says not
                    if not _own_fault(exc):
                        raise
                    conn.execute("ROLLBACK TO jitwatch_event")
                    self._count_bad(bad, ev.rank, exc)
                conn.execute("RELEASE jitwatch_event")
                continue
            try:
                run.append(self._stat_row(conn, ev, dedup, new_specs, new_labels, defer=pending))
            except Exception as exc:  # an event's own fault unless _own_fault says not
                if not _own_fault(exc):
                    raise
                self._count_bad(bad, ev.rank, exc)
        flush_run()
        if stats:
            _insert_rows(
                conn,
                "INSERT INTO compile_stats(backend, kernel, phase, rank, kind, count, seconds, cache_hits,"
                " last_key, last_ts)",
                10,
                [(*k, *v) for k, v in stats.items()],
                " ON CONFLICT(backend, kernel, phase, rank, kind) DO UPDATE SET count=count+excluded.count,"
                " seconds=seconds+excluded.seconds, cache_hits=cache_hits+excluded.cache_hits,"
                " last_key=COALESCE(excluded.last_key, last_key), last_ts=excluded.last_ts",
            )
        for (backend, rank, hit), n in remote.items():
            name = "remote_cache_hits" if hit else "remote_cache_misses"
            self._add_counter(conn, rank, counter_name(name, backend), float(n))
        if hist:
            _insert_rows(
                conn,
                "INSERT INTO duration_hist(backend, rank, phase, bucket, count)",
                5,
                [(*k, n) for k, n in hist.items()],
                " ON CONFLICT(backend, rank, phase, bucket) DO UPDATE SET count=count+excluded.count",
            )
        if recompiles and "recompile_stats" in self._tables:
            _insert_rows(
                conn,
                "INSERT INTO recompile_stats(backend, kernel, reason_class, phase, rank, count, seconds,"
                " last_reason, last_ts)",
                9,
                [(*k, *v) for k, v in recompiles.items()],
                " ON CONFLICT(backend, kernel, reason_class, phase, rank) DO UPDATE SET count=count+excluded.count,"
                " seconds=seconds+excluded.seconds,"
                " last_reason=COALESCE(excluded.last_reason, last_reason), last_ts=excluded.last_ts",
            )
        for rank, n in bad.items():
            self._add_counter(conn, rank, "dropped_events", float(n))
        return ids

    def _count_bad(self, bad: dict[int, int], rank: Any, exc: BaseException) -> None:
        rank = rank if isinstance(rank, int) and 0 <= rank <= 2**31 - 1 else 0
        bad[rank] = bad.get(rank, 0) + 1
        if not self._warned_bad_event:
            self._warned_bad_event = True
            log.warning(
                "jitwatch journal: dropped an event that cannot be stored: %s: %s", type(exc).__name__, str(exc)[:200]
            )

    def _stat_row(
        self,
        conn: sqlite3.Connection,
        ev: Event,
        dedup: bool,
        new_specs: list[Any],
        new_labels: list[str],
        careful: bool = False,
        defer: _Pending | None = None,
    ) -> tuple[list[Any], tuple[Any, ...]]:
        """(event row, fold) of one compile-like event: strings redacted and UTF-8-safe (cached per
        distinct value), non-finite times dropped, the specialization stored once.

        The fast path (``careful=False``) takes an event whose names are within their caps and
        whose attrs are plain JSON with nothing to redact; its size check is a bound on the JSON
        text (:func:`_size` is at most 8 times the compact JSON's length, so attrs whose JSON is under
        ``MAX_ATTRS_CHARS / 8`` need no walk; a specialization's length is remembered with its id).
        Anything else is taken again carefully: :func:`capped`, then :func:`_store_json`.

        ``defer`` (the batch path): a Triton specialization this connection has not seen yet and a
        kernel name it has no label for are looked up once for the whole run of events
        (:meth:`_resolve`); the row's ``spec_id`` is then :data:`_DEFERRED` until then."""
        whole = True  # the record holds every spec field the event carried (capped cut none)
        if careful:
            attrs_in = ev.attrs
            ev = capped(ev)
            whole = ev.attrs is attrs_in
        elif (
            (ev.key is not None and len(ev.key) > MAX_KEY_CHARS)
            or (ev.kernel is not None and len(ev.kernel) > MAX_NAME_CHARS)
            or len(ev.host) > MAX_NAME_CHARS
            or len(ev.backend) > MAX_NAME_CHARS
        ):
            return self._stat_row(conn, ev, dedup, new_specs, new_labels, careful=True)
        seen, text = self._redacted.get, self._cached_text
        kernel, key, host, backend = ev.kernel, ev.key, ev.host, ev.backend
        kernel = None if kernel is None else (seen(kernel) or text(kernel))
        key = None if key is None else (seen(key) or text(key))
        host, backend = seen(host) or text(host), seen(backend) or text(backend)
        rest, spec = specs.split(ev.attrs, key) if dedup else (ev.attrs, None)
        if careful:
            rest_json = _store_json(rest)
            budget = None
        else:
            plain = _plain_json(rest)
            if plain is None or len(plain) > _PLAIN_BUDGET:
                return self._stat_row(conn, ev, dedup, new_specs, new_labels, careful=True)
            rest_json, budget = plain, _PLAIN_BUDGET - len(plain)
        isfinite = math.isfinite
        ts = ev.ts if isfinite(ev.ts) else time.time()
        duration = ev.duration_s
        if duration is not None and not duration >= 0.0:
            # NaN/inf: unknown; negative: 0. Triton times a compile by time.time() deltas
            # (CompileTimes), so a wall-clock step back during one gives a negative duration, which
            # made the aggregate's seconds negative: readers skipped the whole row, its count too.
            duration = None if not isfinite(duration) else 0.0
        start_ts = ev.start_ts
        if start_ts is not None and not isfinite(start_ts):
            start_ts = None
        phase = _VALUE[ev.phase]
        kind = _VALUE[ev.kind]
        name = kernel or "<unknown>"
        if name not in self._labels:
            if defer is None:
                self._kernel_labels(conn, {name: ts}, new_labels)
            elif name not in defer.kernels:
                defer.kernels[name] = ts
        cache_hit = ev.cache_hit
        hit_column = None if cache_hit is None else int(cache_hit)  # before the deferred lookup: may raise
        reason_class = reason = remote = None
        if kind == "compile":
            attrs = ev.attrs
            if "reason_class" in attrs:
                reason_class = reason_class_label(attrs["reason_class"])
                raw = attrs.get("reason") if reason_class is not None else None
                reason = _text(str(raw))[:2000] if raw is not None else None
            # a lookup in a shared remote compile cache (attrs.cache == "remote"): hit 1, miss 0
            if cache_hit is not None and attrs.get("cache") == "remote":
                remote = 1 if cache_hit else 0
        # Last, after everything that can raise: a deferred lookup names this row by its index.
        spec_id = None
        if spec is not None:
            if budget is None:
                spec_id = self._spec_for(conn, spec, new_specs, None, by_identity=whole)
            else:
                spec_id = self._spec_fast(conn, spec, new_specs, budget, ev, defer)
                if spec_id is None:  # over the fast path's bound, or not plain JSON
                    return self._stat_row(conn, ev, dedup, new_specs, new_labels, careful=True)
        row = [
            ts,
            start_ts,
            duration,
            kind,
            ev.rank,
            ev.pid,
            host,
            phase,
            backend,
            kernel,
            _KEY_IN_RECORD if spec_id is not None else key,  # stored NULL: in the specialization record
            hit_column,
            rest_json,
            spec_id,
        ]
        fold = ((backend, name, phase, ev.rank, kind), duration or 0.0, 1 if cache_hit else 0, key, ts)
        return row, (*fold, reason_class, reason, remote)

    def _lean_run(
        self,
        conn: sqlite3.Connection,
        events: Sequence[Event],
        i: int,
        pending: _Pending,
        new_specs: list[Any],
        new_labels: list[str],
        bad: dict[int, int],
    ) -> int:
        """Queue the compile-like events from ``events[i]`` on (up to the first other kind, whose
        index is returned) into ``pending.rows``, exactly as :meth:`_stat_row` with ``defer=pending``
        would, in one loop without a call per step for the common shape: a Triton compile
        (``specialization_data`` and ``key`` strings, names within their caps, attrs without a
        recompile reason whose other part is plain JSON within :data:`_REST_BUDGET`) whose
        specialization this connection knows or is queued for (its record built only when new to
        the batch). Every check comes before any side effect on ``pending``; an event that fails
        one is handed whole to :meth:`_stat_row` (which may take the careful path or drop it,
        counted). ``tests/store/test_journal_lean.py`` checks that both paths store identical
        tables."""
        run = pending.rows
        labels, queued_kernels = self._labels, pending.kernels
        by_fast, queued_specs = pending.by_fast, pending.specs
        seen, text, known_spec = self._redacted.get, self._cached_text, self._spec_ids.get
        isfinite, value_of = math.isfinite, _VALUE
        # may_need_redaction(t) is `not (slash_only and "/" not in t) and needle(t) is not None`
        slash_only, needle = redaction_precheck()
        compact_json = _compact_json
        compile_kind, stat_kinds = EventKind.COMPILE, STAT_KINDS
        sha256, identity_head, cached_head = hashlib.sha256, specs.IDENTITY_HEAD, specs.CACHED_HEAD
        cache_hash = specs.CACHE_HASH_MATCH
        event_type, fields_of, attrs_of = Event, _EVENT_FIELDS, _EVENT_ATTRS
        n = len(events)
        while i < n:
            ev = events[i]
            try:  # the fields at once from the model's __dict__ (pydantic keeps them there)
                kind, attrs, key, kernel, host, backend, cache_hit, ts, duration, start_ts, phase_member, rank, pid = (
                    fields_of(ev.__dict__) if type(ev) is event_type else attrs_of(ev)
                )
            except (KeyError, AttributeError):
                kind, attrs = ev.kind, None
            if kind not in stat_kinds:
                break
            i += 1
            data = attrs.get("specialization_data") if type(attrs) is dict else None
            if (
                kind is not compile_kind
                or type(data) is not str
                or type(key) is not str
                or type(kernel) is not str
                or type(host) is not str
                or type(backend) is not str
                or len(key) > MAX_KEY_CHARS
                or len(kernel) > MAX_NAME_CHARS
                or len(host) > MAX_NAME_CHARS
                or len(backend) > MAX_NAME_CHARS
                or "reason_class" in attrs
                or not (cache_hit is None or type(cache_hit) is bool)
            ):
                self._general_row(conn, ev, pending, new_specs, new_labels, bad)
                continue
            clean = seen(kernel)
            if clean is None:  # first seen by this connection: usually nothing to redact, kept out of the cache
                clean = (
                    kernel
                    if kernel.isascii() and ((slash_only and "/" not in kernel) or needle(kernel) is None)
                    else text(kernel)
                )
            kernel = clean
            clean_key = seen(key)
            if clean_key is None:  # a new key: usually nothing to redact, kept out of the cache
                clean_key = (
                    key if key.isascii() and ((slash_only and "/" not in key) or needle(key) is None) else text(key)
                )
            key = clean_key
            host = seen(host) or text(host)
            backend = seen(backend) or text(backend)
            rest = attrs.copy()
            pop = rest.pop  # specs.SPEC_FIELDS, unrolled
            module = pop("module", None)
            pop("signature", None)
            pop("constexprs", None)
            pop("options", None)
            pop("specialization_data", None)
            source_hash = pop("source_hash", None)
            cache_key = pop("cache_key", None)
            pop("declared_constexprs", None)
            try:
                rest_json: str | None = compact_json(rest)
            except (ValueError, TypeError, RecursionError):
                rest_json = None
            if (
                rest_json is None
                or len(rest_json) > _REST_BUDGET
                or not (rest_json.isascii() or _utf8_safe(rest_json))
                or not ((slash_only and "/" not in rest_json) or needle(rest_json) is None)
                or not (source_hash is None or type(source_hash) is str)
                or not (module is None or type(module) is str)
                or not (cache_key is None or (type(cache_key) is str and cache_hash(cache_key) is not None))
            ):
                self._general_row(conn, ev, pending, new_specs, new_labels, bad)
                continue
            # _spec_ident, inline: with Triton's cache hash, the data's length stands for the data
            if cache_key is None:
                fast: tuple[Any, ...] = (key, data, source_hash, module)
            else:
                fast = (key, cache_key, source_hash, module, len(data))
            known = known_spec(fast)
            if known is None:
                spec_id = _DEFERRED
            elif isinstance(known, int):  # stored under its identity: within _SPEC_BUDGET
                spec_id = known
            elif known[1] > _SPEC_BUDGET:
                self._general_row(conn, ev, pending, new_specs, new_labels, bad)
                continue
            else:
                spec_id = known[0]
            if not isfinite(ts):
                ts = time.time()
            if duration is not None and not duration >= 0.0:  # NaN/inf: unknown; negative: 0 (_stat_row)
                duration = None if not isfinite(duration) else 0.0
            if start_ts is not None and not isfinite(start_ts):
                start_ts = None
            phase = value_of[phase_member]
            name = kernel or "<unknown>"
            # Side effects from here on: nothing below raises for the types checked above.
            if name not in labels and name not in queued_kernels:
                queued_kernels[name] = ts
            if spec_id == _DEFERRED:
                digest = by_fast.get(fast)
                if digest is None:
                    if source_hash is not None:
                        source_hash = seen(source_hash) or text(source_hash)
                    if module is not None:
                        module = seen(module) or text(module)
                    # specs.identity_digest, inline (tests/store/test_journal_lean.py: same bytes)
                    if cache_key is not None:  # the data is redacted only if stored (_resolve_specs)
                        digest = sha256(
                            (
                                cached_head
                                % (
                                    len(key),
                                    len(data),
                                    "-" if source_hash is None else len(source_hash),
                                    "-" if module is None else len(module),
                                    len(cache_key),
                                    key,
                                    source_hash or "",
                                    module or "",
                                    cache_key,
                                )
                            ).encode()
                        ).digest()[:16]
                    else:
                        if not (data.isascii() and ((slash_only and "/" not in data) or needle(data) is None)):
                            data = _text(data)
                        h = sha256(
                            (
                                identity_head
                                % (
                                    len(key),
                                    len(data),
                                    "-" if source_hash is None else len(source_hash),
                                    "-" if module is None else len(module),
                                    key,
                                    source_hash or "",
                                    module or "",
                                )
                            ).encode()
                        )
                        h.update(data.encode())
                        digest = h.digest()[:16]
                    by_fast[fast] = digest
                    queued = queued_specs.get(digest)
                    if queued is None:  # its record is built only if no writer stored it yet
                        queued_specs[digest] = [attrs, key, data, source_hash, module, len(run), ev]
                    else:  # another raw identity redacted to the same one
                        queued += (len(run), ev)
                else:
                    queued_specs[digest] += (len(run), ev)
            hit = 1 if cache_hit else 0
            remote = None
            if cache_hit is not None and attrs.get("cache") == "remote":
                remote = hit
            run.append(
                (
                    [
                        ts,
                        start_ts,
                        duration,
                        "compile",
                        rank,
                        pid,
                        host,
                        phase,
                        backend,
                        kernel,
                        _KEY_IN_RECORD,  # stored NULL (_run_row)
                        None if cache_hit is None else hit,
                        rest_json,
                        spec_id,
                    ],
                    (
                        (backend, name, phase, rank, "compile"),
                        duration or 0.0,
                        hit,
                        key,
                        ts,
                        None,
                        None,
                        remote,
                    ),
                )
            )
        return i

    def _general_row(
        self,
        conn: sqlite3.Connection,
        ev: Event,
        pending: _Pending,
        new_specs: list[Any],
        new_labels: list[str],
        bad: dict[int, int],
    ) -> None:
        """One compile-like event through :meth:`_stat_row` (``defer=pending``), dropped alone and
        counted when its own values cannot be stored."""
        try:
            pending.rows.append(self._stat_row(conn, ev, True, new_specs, new_labels, defer=pending))
        except Exception as exc:  # an event's own fault unless _own_fault says not
            if not _own_fault(exc):
                raise
            self._count_bad(bad, ev.rank, exc)

    def _spec_for(
        self,
        conn: sqlite3.Connection,
        spec: dict[str, Any],
        new_specs: list[Any],
        budget: int | None,
        by_identity: bool = True,
    ) -> int | None:
        """Row id for ``spec`` (see :func:`jitwatch.store.specs.split`). A Triton compile's
        ``specialization_data`` is Triton's own full serialization of the specialization
        (signature, constants, attributes, options, key), so with the kernel's source hash and key
        it identifies the record without serializing it again; other captures are identified by
        their canonical JSON.

        ``budget`` (characters; ``None``: careful path, no bound) is what the fast path allows the
        record's JSON: ``None`` is returned, nothing stored, when it is longer or not plain JSON.

        ``by_identity=False``: the record of an event whose attrs :func:`capped` cut (some of its
        fields read ``…[truncated]`` while those that identify it may not): found and remembered by
        its text only, never under the specialization's identity, which would give that cut record
        to the next whole compile of it on this connection."""
        data, key = spec.get("specialization_data"), spec.get("key")
        fast: Any = None
        if by_identity and isinstance(data, str) and isinstance(key, str):
            fast = _spec_ident(key, data, spec.get("source_hash"), spec.get("module"), spec.get("cache_key"))
        if fast is not None:
            known = self._spec_ids.get(fast)
            if isinstance(known, int):  # (row id, 0): stored under its identity
                return known if budget is None or budget >= 0 else None
            if known is not None:
                return known[0] if budget is None or known[1] <= budget else None
        if budget is None:
            text = _store_json(spec)
        else:
            plain = _plain_json(spec)
            if plain is None or len(plain) > budget:
                return None
            text = plain
        spec_id = self._spec_id(conn, text, new_specs, remember=fast is None)
        if fast is not None:
            self._remember(fast, (spec_id, len(text)))
            new_specs.append(fast)
        return spec_id

    def _spec_fast(
        self,
        conn: sqlite3.Connection,
        spec: dict[str, Any],
        new_specs: list[Any],
        budget: int,
        ev: Event,
        defer: _Pending | None,
    ) -> int | None:
        """The fast path's row id for ``spec``: a Triton specialization (``key`` and
        ``specialization_data`` strings) by its identity — this connection's cache, else
        (``defer``) :data:`_DEFERRED` with the lookup queued for :meth:`_resolve`, else looked up
        now; any other capture by its text (:meth:`_spec_for`). ``None``: take the careful path
        (not plain JSON, or past :data:`_SPEC_BUDGET` / :data:`_REST_BUDGET`)."""
        data, key = spec.get("specialization_data"), spec.get("key")
        source_hash, module, cache_key = spec.get("source_hash"), spec.get("module"), spec.get("cache_key")
        if not (isinstance(data, str) and isinstance(key, str)):
            return self._spec_for(conn, spec, new_specs, budget)
        fast = _spec_ident(key, data, source_hash, module, cache_key)
        if fast is None:  # a source hash, module or cache key this connection cannot identify by: by its text
            return self._spec_for(conn, spec, new_specs, budget)
        if _PLAIN_BUDGET - budget > _REST_BUDGET:
            return None
        known = self._spec_ids.get(fast)
        if isinstance(known, int):  # (row id, 0): stored under its identity
            return known
        if known is not None:
            return known[0] if known[1] <= _SPEC_BUDGET else None
        if defer is not None:
            queued = defer.by_fast.get(fast)
            if queued is None:
                text, seen = _text, self._cached_text
                redacted = (
                    key,
                    text(data),
                    None if source_hash is None else seen(source_hash),
                    None if module is None else seen(module),
                )
                queued = defer.by_fast[fast] = (
                    specs.identity_digest(*redacted)
                    if cache_key is None  # with it, the raw data's length (as _lean_run has it)
                    else specs.identity_digest(key, data, redacted[2], redacted[3], cache_key)
                )
                if queued not in defer.specs:  # another raw identity may redact to the same one
                    defer.specs[queued] = [spec, *redacted]
            defer.specs[queued] += (len(defer.rows), ev)
            return _DEFERRED
        pending = _Pending()
        self._spec_fast(conn, spec, new_specs, budget, ev, pending)
        return self._resolve_specs(conn, pending, new_specs).get(pending.by_fast[fast])

    def _resolve(
        self,
        conn: sqlite3.Connection,
        pending: _Pending,
        run: list[tuple[list[Any], tuple[Any, ...]]],
        dedup: bool,
        new_specs: list[Any],
        new_labels: list[str],
        bad: dict[int, int],
    ) -> None:
        """Complete a run of fast-path rows (``run``, in order; ``pending.rows`` its length when each
        was queued): kernels rows for the new names (:meth:`_kernel_labels`), specialization ids
        for the queued identities (:meth:`_resolve_specs`) filled in, and each event whose record
        turned out not to fit the fast path taken again carefully (or dropped alone, counted)."""
        if pending.kernels:
            self._kernel_labels(conn, pending.kernels, new_labels)
        if not pending.specs:
            return
        stored = self._resolve_specs(conn, pending, new_specs)
        drop: list[int] = []
        for digest, queued in pending.specs.items():
            spec_id = stored.get(digest)
            if spec_id is not None:
                for i in queued[_WAITING::2]:
                    run[i][0][13] = spec_id  # the row's list, filled in place
                continue
            for k in range(_WAITING, len(queued), 2):
                i, ev = queued[k], queued[k + 1]
                try:
                    run[i] = self._stat_row(conn, ev, dedup, new_specs, new_labels, careful=True)
                except Exception as exc:  # an event's own fault unless _own_fault says not
                    if not _own_fault(exc):
                        raise
                    self._count_bad(bad, ev.rank, exc)
                    drop.append(i)
        for i in sorted(drop, reverse=True):
            del run[i]

    def _resolve_specs(self, conn: sqlite3.Connection, pending: _Pending, new_specs: list[Any]) -> dict[bytes, int]:
        """Row ids of the queued Triton specializations (identity digest → id), each also remembered
        under every raw identity queued for it: those any writer stored already by one ``SELECT …
        WHERE digest IN (…)`` per :data:`_IN_CHUNK` (``digest`` is a unique ``BLOB``, ``id`` the
        rowid: plain ``bytes`` and ``int``), the others stored now (compact JSON of the redacted
        fields, compressed); one whose record is not plain JSON or is past :data:`_SPEC_BUDGET` gets
        no id (its events take the careful path)."""
        stored = self._stored_digests(conn, pending.specs)
        new: list[tuple[bytes, str]] = []
        for digest, queued in pending.specs.items():
            if digest not in stored:
                source, key, data, source_hash, module = queued[:_WAITING]
                record = specs.split(source, key)[1] or {}  # key first, then SPEC_FIELDS
                # identified by Triton's cache hash, the data was not redacted yet (found stored: never)
                if not data.isascii() or may_need_redaction(data):
                    data = _text(data)
                record["specialization_data"] = data
                if source_hash is not None:
                    record["source_hash"] = source_hash
                if module is not None:
                    record["module"] = module
                text = _plain_json(record)
                if text is not None and len(text) <= _SPEC_BUDGET:
                    new.append((digest, text))
        if new:
            inserted = _insert_specs(conn, new)
            stored.update(inserted)
            if self._digests_complete:
                self._digest_ids.update(inserted)
                ids = sorted(inserted.values())
                if ids and ids[0] == self._digest_top + 1 and ids[-1] == self._digest_top + len(ids):
                    self._digest_top = ids[-1]  # else the next scan reads them (and any other) back
        spec_ids, get, by_fast = self._spec_ids, stored.get, pending.by_fast
        if len(spec_ids) + len(by_fast) <= _SPEC_CACHE_MAX and len(stored) >= len(pending.specs):
            # every queued identity has its row (the common case) and there is room: no eviction
            spec_ids.update([(fast, stored[digest]) for fast, digest in by_fast.items()])
            new_specs.extend(by_fast)
            return stored
        for fast, digest in by_fast.items():  # every raw identity queued under that digest
            spec_id = get(digest)
            if spec_id is not None:  # remembered (within _SPEC_BUDGET: stored under an identity)
                if len(spec_ids) >= _SPEC_CACHE_MAX:
                    spec_ids.popitem(last=False)  # as _remember does
                spec_ids[fast] = spec_id  # the row id alone: stored under its identity
                new_specs.append(fast)
        return stored

    def _stored_digests(self, conn: sqlite3.Connection, digests: Iterable[bytes]) -> dict[bytes, int]:
        """Row ids of those of ``digests`` (identity digests) whose specialization is stored, inside
        the batch's write transaction (no other writer can add one meanwhile).

        The connection keeps every record's digest up to a row-id watermark: the records other
        writers added since are read with one range scan of the rowid table (``id > watermark``, in
        order: sequential pages), so a digest it does not hold is not stored, with no lookup. That
        replaces one ``SELECT … WHERE digest IN (…)`` probe of the digest index per queued
        specialization, which every rank's writer paid for each specialization another rank stored
        (~1.4 µs per probe on the 2-core VM, ``docs/benchmarks.md`` section 9). Bounded: past
        :data:`_DIGEST_MAX` records the connection drops the map and looks digests up with ``IN``
        again (as before), until a sweep of unreferenced records (``spec_generation``) lets it start
        over. A sweep may free the highest ids for reuse, so it also resets the watermark."""
        if self._digests_complete:
            known = self._digest_ids
            room = _DIGEST_MAX - len(known)  # below 0 once this connection's own records passed it
            rows = (
                _tuple_cursor(conn)
                .execute(
                    "SELECT digest, id FROM specializations WHERE id > ? ORDER BY id LIMIT ?",
                    (self._digest_top, max(room, 0) + 1),
                )
                .fetchall()
            )
            if len(rows) <= room:
                if rows:
                    known.update(rows)
                    self._digest_top = rows[-1][1]
                get = known.get
                return {d: i for d in digests if (i := get(d)) is not None}
            known.clear()  # too many to keep: look them up as before
            self._digests_complete = False
        return dict(
            _select_in(conn, "SELECT digest, id FROM specializations WHERE digest", list(map(bytearray, digests)))
        )

    def _forget_digests(self) -> None:
        """Start :meth:`_stored_digests`' map over: after a sweep (ids may be reused) or a rolled-back
        batch (its records' ids do not exist)."""
        self._digest_ids.clear()
        self._digest_top = 0
        self._digests_complete = True

    def _kernel_labels(self, conn: sqlite3.Connection, names: dict[str, float], new_labels: list[str]) -> None:
        """The ``kernels`` label of each name (first-seen order; name → its event's time), recorded in
        ``_labels`` and appended to ``new_labels``: known ones read with one ``SELECT … IN`` per
        :data:`_IN_CHUNK`; a new name gets its own label while fewer than ``max_kernels`` are named,
        else :data:`OTHER_KERNEL` — the named count read once (rows are never deleted, so it is the
        count up to a rowid watermark plus what other writers added since), the new rows inserted
        together."""
        todo = list(names)
        for name, label in _select_in(conn, "SELECT name, label FROM kernels WHERE name", todo):
            self._labels[name] = str(label)
            new_labels.append(name)
        new = [n for n in todo if n not in self._labels]
        if not new:
            return
        if self._cap_reached:  # the named count never shrinks: no need to count again
            named = self.max_kernels
        else:
            added, top = conn.execute(
                "SELECT COUNT(*), MAX(rowid) FROM kernels WHERE rowid > ? AND label != ?",
                (self._kernels_top, OTHER_KERNEL),
            ).fetchone()
            if top is not None:
                self._named_kernels += int(added)
                self._kernels_top = int(top)
            named = self._named_kernels  # ours are counted again from the watermark next time
        rows = []
        for name in new:
            if named < self.max_kernels:
                label, named = name, named + 1
            else:
                label = OTHER_KERNEL
            self._labels[name] = label
            new_labels.append(name)
            rows.append((name, label, names[name]))
        self._cap_reached = named >= self.max_kernels
        _insert_rows(conn, "INSERT INTO kernels(name, label, first_seen)", 3, rows)

    def _cached_text(self, text: str) -> str:
        """:func:`_text` (redacted, UTF-8-safe) of a kernel name, key, host or backend, remembered
        (they repeat; bounded)."""
        out = self._redacted.get(text)
        if out is not None:
            return out
        out = _text(text)
        if len(self._redacted) >= _SPEC_CACHE_MAX:
            self._redacted.clear()
        self._redacted[text] = out
        return out

    def _remember(self, ident: Any, known: tuple[int, int]) -> None:
        """Remember ``ident``'s specialization ``(row id, JSON length)`` (bounded, oldest out)."""
        if len(self._spec_ids) >= _SPEC_CACHE_MAX:
            self._spec_ids.popitem(last=False)  # O(1); a dict's next(iter()) rescans removed slots
        self._spec_ids[ident] = known

    def _spec_id(self, conn: sqlite3.Connection, text: str, new_specs: list[Any], remember: bool = True) -> int:
        """Row id of the specialization whose canonical JSON is ``text``; inserted if new. With
        ``remember=False`` the caller caches it under its own identity (the text would only hold
        cache room and memory twice)."""
        known = self._spec_ids.get(text)
        if known is not None:
            return known if isinstance(known, int) else known[0]  # text keys hold tuples
        digest = specs.digest(text)  # compressed only when new (other ranks' writers find it stored)
        row = conn.execute("SELECT id FROM specializations WHERE digest=?", (digest,)).fetchone()
        if row is not None:
            spec_id = int(row[0])
        else:
            spec_id = _insert_spec(conn, digest, text)
            new_specs.append(text)
        if remember:
            self._remember(text, (spec_id, len(text)))
        return spec_id

    @staticmethod
    def _event_row(ev: Event, attrs_json: str, spec_id: int | None) -> tuple[Any, ...]:
        return (
            ev.ts,
            ev.start_ts,
            ev.duration_s,
            ev.kind.value,
            ev.rank,
            ev.pid,
            ev.host,
            ev.phase.value,
            ev.backend,
            ev.kernel,
            ev.key,
            None if ev.cache_hit is None else int(ev.cache_hit),
            attrs_json,
            spec_id,
        )

    def _apply(self, conn: sqlite3.Connection, ev: Event, attrs_json: str) -> None:
        """The worker-row and counter side effects of one non-compile event (in batch order)."""
        kind = ev.kind
        if kind is EventKind.WORKER_START:
            conn.execute(
                "INSERT OR REPLACE INTO workers(host, pid, rank, state, mode, started_ts, last_ts,"
                " attrs) VALUES (?,?,?,?,?,?,?,?)",
                (
                    ev.host,
                    ev.pid,
                    ev.rank,
                    ev.phase.value,
                    ev.attrs.get("mode"),
                    ev.ts,
                    ev.ts,
                    attrs_json,
                ),
            )
        elif kind is EventKind.WARMUP_START:
            self._ensure_worker(conn, ev)
            conn.execute(
                "UPDATE workers SET state='warmup', warmup_start_ts=?, last_ts=? WHERE host=? AND pid=? AND rank=?",
                (ev.ts, ev.ts, ev.host, ev.pid, ev.rank),
            )
        elif kind is EventKind.WARMUP_COMPLETE:
            self._ensure_worker(conn, ev)
            conn.execute(
                "UPDATE workers SET state='serving', warmup_start_ts=COALESCE(warmup_start_ts, ?),"
                " warmup_end_ts=?, warmup_duration_s=?, warmup_compiles=?,"
                " warmup_compile_seconds=?, last_ts=? WHERE host=? AND pid=? AND rank=?",
                (
                    ev.start_ts,
                    ev.ts,
                    ev.duration_s,
                    ev.attrs.get("kernels_compiled"),
                    ev.attrs.get("compile_seconds"),
                    ev.ts,
                    ev.host,
                    ev.pid,
                    ev.rank,
                ),
            )
        elif kind is EventKind.FIRST_REQUEST:
            self._ensure_worker(conn, ev)
            conn.execute(
                "UPDATE workers SET first_request_s=?, first_request_ts=?, last_ts=? WHERE host=? AND pid=? AND rank=?",
                (ev.duration_s, ev.ts, ev.ts, ev.host, ev.pid, ev.rank),
            )
        elif kind is EventKind.BACKEND_READY:
            self._ensure_worker(conn, ev)
            row = conn.execute(
                "SELECT attrs FROM workers WHERE host=? AND pid=? AND rank=?", (ev.host, ev.pid, ev.rank)
            ).fetchone()
            attrs = json.loads(row[0]) if row is not None else {}
            if not isinstance(attrs, dict):
                attrs = {}
            known = attrs.get("backends")
            backends: dict[str, Any] = known if isinstance(known, dict) else {}
            backends[ev.backend] = {k: v for k, v in ev.attrs.items() if k in ("state", "version", "hooks", "degraded")}
            attrs["backends"] = backends
            if ev.backend == LEGACY_BACKEND:  # the 0.1 fields /jit still shows
                attrs["triton_version"] = ev.attrs.get("version")
                attrs["hooks"] = ev.attrs.get("hooks")
                attrs["degraded"] = ev.attrs.get("degraded")
            conn.execute(
                "UPDATE workers SET attrs=?, last_ts=MAX(last_ts, ?) WHERE host=? AND pid=? AND rank=?",
                (_store_json(attrs), ev.ts, ev.host, ev.pid, ev.rank),
            )
        elif kind is EventKind.REQUEST_STALL:
            seconds = ev.duration_s or 0.0
            self._add_counter(conn, ev.rank, REQUESTS_COUNTER, 1)
            self._add_counter(conn, ev.rank, f"{REQUEST_BUCKET_PREFIX}{bucket_index(seconds)}", 1)
            self._add_counter(conn, ev.rank, REQUEST_SECONDS_COUNTER, seconds)
            by_backend = ev.attrs.get("compile_seconds_by_backend")
            for backend in by_backend if isinstance(by_backend, dict) else {"": None}:
                self._add_counter(conn, ev.rank, counter_name(REQUESTS_DELAYED_COUNTER, str(backend)), 1)
        elif kind is EventKind.REQUESTS:
            n = float(ev.attrs.get("count", 0) or 0)
            if n > 0:
                self._add_counter(conn, ev.rank, REQUESTS_COUNTER, n)
                self._add_counter(conn, ev.rank, f"{REQUEST_BUCKET_PREFIX}0", n)
        elif kind is EventKind.HOOK_ERROR:
            self._add_counter(conn, ev.rank, counter_name("hook_errors", ev.backend), 1)
        elif kind is EventKind.COMPILE_ABANDONED:
            self._add_counter(conn, ev.rank, counter_name(ABANDONED_COUNTER, ev.backend), 1)
        elif kind is EventKind.DROPPED:
            exporter = ev.attrs.get("exporter")
            name = counter_name("export_dropped", exporter) if isinstance(exporter, str) else "dropped_events"
            self._add_counter(conn, ev.rank, name, float(ev.attrs.get("count", 1)))

    def set_inflight(self, host: str, pid: int, rank: int, items: list[dict[str, Any]], ts: float) -> bool:
        """Record the compiles in flight in worker ``(host, pid, rank)`` at ``ts`` (Unix seconds)
        in its row's ``attrs`` (``inflight``: list, ``inflight_ts``) and advance ``last_ts``.
        ``False`` when the worker row does not exist yet. Raises ``sqlite3.Error`` like :meth:`write`.

        The row's attrs are stored as events' attrs are (:func:`_store_json`): every string
        redacted (a kernel named ``fn at /home/alice/model.py`` is stored as ``fn at ~/model.py``)
        and UTF-8-safe, NaN/±inf as their names."""
        inflight = [{k: v for k, v in i.items() if v is not None} for i in items[:MAX_INFLIGHT]]
        return self._update_worker_attrs(host, pid, rank, ts, {"inflight": inflight, "inflight_ts": float(ts)})

    def mark_stopped(self, host: str, pid: int, rank: int, ts: float) -> bool:
        """Record that worker ``(host, pid, rank)`` stopped cleanly at ``ts`` (Unix seconds): its
        row's ``attrs`` gain ``stopped_ts`` and ``exit: "clean"`` and ``last_ts`` advances. The
        ``state`` column keeps its phase, so a reader that predates the record sees the row as
        before (stale once its heartbeat window passes). A worker that registers again under the
        same ``(host, pid, rank)`` replaces the row, and so the record. No event row.

        Returns ``False`` when there is no such worker row (nothing is written). Raises
        ``PermissionError`` on a read-only journal and ``sqlite3.Error`` like :meth:`write`.
        """
        # nothing runs in a stopped worker: its compiles in flight go (None removes a key)
        return self._update_worker_attrs(
            host, pid, rank, ts, {STOPPED_TS_ATTR: float(ts), "exit": "clean", "inflight": None}
        )

    def mark_exited(self, host: str, pid: int, rank: int, ts: float, exception: str) -> bool:
        """Record that worker ``(host, pid, rank)``'s process is exiting at ``ts`` (Unix seconds) on
        an unhandled exception of type ``exception`` (a name such as ``MemoryError``, cut to
        :data:`EXCEPTION_NAME_MAX` characters; never the message, which may hold user data): its
        row's ``attrs`` gain ``exited_ts``, ``exit: "exception"`` and ``exit_exception``, and
        ``last_ts`` advances. Not a clean stop: no ``stopped_ts``, so readers read the rank
        ``exited`` (:func:`jitwatch.views.status.exited_ranks`) and a reader that predates the
        record sees it turn stale after its heartbeat window, as after a ``kill -9``. A worker that
        registers again under the same ``(host, pid, rank)`` replaces the row, and so the record.

        Returns ``False`` when there is no such worker row (nothing is written). Raises
        ``ValueError`` for an empty ``exception``, ``PermissionError`` on a read-only journal and
        ``sqlite3.Error`` like :meth:`write`.
        """
        name = str(exception).strip()[:EXCEPTION_NAME_MAX]
        if not name:
            raise ValueError("mark_exited needs the exception's type name")
        changes: dict[str, Any] = {
            EXITED_TS_ATTR: float(ts),
            "exit": "exception",
            EXIT_EXCEPTION_ATTR: name,
            "inflight": None,
        }
        return self._update_worker_attrs(host, pid, rank, ts, changes)

    def _update_worker_attrs(self, host: str, pid: int, rank: int, ts: float, changes: dict[str, Any]) -> bool:
        """Merge ``changes`` into worker ``(host, pid, rank)``'s row ``attrs`` (a ``None`` value
        removes its key; attrs that are not a JSON object read as ``{}``), stored as events' attrs
        are (:func:`_store_json`), and advance ``last_ts`` to ``ts``, in one transaction. ``False``
        when the row does not exist (nothing written). Raises ``PermissionError`` on a read-only
        journal and ``sqlite3.Error`` like :meth:`write`."""
        if self.readonly:
            raise PermissionError("journal opened read-only")
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT attrs FROM workers WHERE host=? AND pid=? AND rank=?", (host, pid, rank)
            ).fetchone()
            if row is None:
                return False
            attrs = readsafe.json_object(row[0])
            for key, value in changes.items():
                if value is None:
                    attrs.pop(key, None)
                else:
                    attrs[key] = value
            conn.execute(
                "UPDATE workers SET attrs=?, last_ts=MAX(last_ts, ?) WHERE host=? AND pid=? AND rank=?",
                (_store_json(attrs), float(ts), host, pid, rank),
            )
        return True

    def heartbeat(self, host: str, pid: int, rank: int, ts: float) -> bool:
        """Liveness: advance the worker row ``(host, pid, rank)``'s ``last_ts`` to ``ts`` (Unix
        seconds; never moves it back). One ``UPDATE``, no event row (the event log is untouched).

        Returns ``False`` when there is no such worker row yet (nothing is written).
        Raises ``sqlite3.Error`` like :meth:`write` (the journal writer thread catches it).
        """
        if self.readonly:
            raise PermissionError("journal opened read-only")
        cur = self._conn.execute(
            "UPDATE workers SET last_ts=MAX(last_ts, ?) WHERE host=? AND pid=? AND rank=?",
            (float(ts), host, pid, rank),
        )
        return cur.rowcount > 0

    @staticmethod
    def _ensure_worker(conn: sqlite3.Connection, ev: Event) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO workers(host, pid, rank, state, started_ts, last_ts, attrs)"
            " VALUES (?,?,?,?,?,?,'{}')",
            (ev.host, ev.pid, ev.rank, Phase.STARTUP.value, ev.ts, ev.ts),
        )

    @staticmethod
    def _add_counter(conn: sqlite3.Connection, rank: int, name: str, value: float) -> None:
        conn.execute(
            "INSERT INTO counters(rank, name, value) VALUES (?,?,?)"
            " ON CONFLICT(rank, name) DO UPDATE SET value=value+excluded.value",
            (rank, name, value),
        )

    def prune(self, now: float | None = None, *, force_gc: bool = False) -> int:
        """Retire events past the retention limits; returns how many were removed.

        Aggregates are untouched, so metrics do not move. The count is added to the
        ``retired_events`` counter (rank -1, journal-wide). Once half the retention count (at least
        :data:`_SPEC_GC_MIN_RETIRED`) was retired since the last sweep — by any writer, counted
        from that counter and ``meta.spec_swept_retired``, so several ranks sharing the passes and
        restarted workers add up — or with ``force_gc``, it also deletes the specializations no
        event references any more. The sweep reads every event row (~40 ms at 100,000 events on
        the 2-core VM), so it runs about twice per turnover of the log (~1 µs per event), and the
        records of at most that many retired events (plus one pass's) wait for it.
        """
        now = time.time() if now is None else now
        with self._transaction() as conn:
            max_id = conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]
            removed = conn.execute(
                "DELETE FROM events WHERE id <= ? OR ts < ?",
                (max_id - self.retention_events, now - self.retention_seconds),
            ).rowcount
            if removed:
                self._add_counter(conn, -1, "retired_events", removed)
            if "specializations" in self._tables and (removed or force_gc):
                # due by the events retired journal-wide (every writer's passes, across restarts)
                # since the last sweep: counted per connection, N ranks sharing the passes swept
                # N times less often, and a worker restarting sooner never swept
                retired, at = conn.execute(
                    "SELECT (SELECT value FROM counters WHERE rank = -1 AND name = 'retired_events'),"
                    f" (SELECT v FROM meta WHERE k = '{_SPEC_SWEPT_AT}')"
                ).fetchone()
                retired = readsafe.count(retired) or 0
                # a plain count, else none yet: '²' passes isdigit but not int(), and past 4,300
                # digits int() raises (a ValueError here stopped every prune and failed the write)
                ok = isinstance(at, str) and at.isascii() and at.isdigit() and len(at) <= 19
                at = int(at) if ok else 0
                due = force_gc or not 0 <= retired - at < max(_SPEC_GC_MIN_RETIRED, self.retention_events // 2)
            else:
                due = False
            if due:
                conn.execute(
                    "INSERT INTO meta(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                    (_SPEC_SWEPT_AT, str(retired)),
                )
                swept = conn.execute(
                    "DELETE FROM specializations WHERE id NOT IN"
                    " (SELECT DISTINCT spec_id FROM events WHERE spec_id IS NOT NULL)"
                ).rowcount
                if swept:  # writers holding ids in their caches drop them (see _write_batch)
                    conn.execute(
                        "INSERT INTO meta(k, v) VALUES ('spec_generation', '1') ON CONFLICT(k) DO UPDATE"
                        " SET v = CAST(CAST(v AS INTEGER) + 1 AS TEXT)"
                    )
        self._writes_since_prune = 0
        return int(removed)

    # ------------------------------------------------------------------ maintenance
    def replaced(self) -> bool:
        """Whether ``journal.db`` was deleted or replaced (another inode) since this connection
        opened it: writes would then go to a file nobody reads. One ``lstat``."""
        return safety.file_identity(self.path) != self.file_id

    def prune_workers(self, now: float | None = None) -> int:
        """Delete worker rows last seen longer ago than ``retention_seconds``, and all but the
        :data:`MAX_WORKER_ROWS` most recently seen; the newest-started row of each rank is always
        kept (``/readyz`` judges it). Returns how many were deleted."""
        now = time.time() if now is None else now
        keep_latest = "SELECT rowid FROM (SELECT rowid, MAX(started_ts) FROM workers GROUP BY rank)"
        with self._transaction() as conn:
            removed = conn.execute(
                f"DELETE FROM workers WHERE rowid NOT IN ({keep_latest}) AND (last_ts < ? OR rowid NOT IN"
                " (SELECT rowid FROM workers ORDER BY last_ts DESC LIMIT ?))",
                (now - self.retention_seconds, MAX_WORKER_ROWS),
            ).rowcount
        return int(removed)

    def maintain(self, now: float | None = None) -> tuple[int, int]:
        """Retention on time, whatever the write count: :meth:`prune` (events), :meth:`prune_workers`,
        then a ``PASSIVE`` WAL checkpoint (never waits for readers) so that, with
        ``journal_size_limit`` (:data:`WAL_SIZE_LIMIT`), the WAL is truncated when it next restarts.
        Returns ``(events retired, worker rows deleted)``. Raises ``sqlite3.Error`` like :meth:`write`."""
        events = self.prune(now)
        workers = self.prune_workers(now)
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return events, workers

    # ------------------------------------------------------------------ reading
    def events(
        self,
        *,
        kind: EventKind | str | Iterable[EventKind | str] | None = None,
        phase: Phase | str | None = None,
        kernel: str | None = None,
        rank: int | None = None,
        since: float | None = None,
        limit: int = 100,
        newest_first: bool = True,
        backend: str | None = None,
    ) -> list[Event]:
        """Events matching every filter given, at most ``limit`` (default 100), newest first unless
        ``newest_first=False``.

        Args:
            kind: an :class:`EventKind`, its value (``"compile"``), or an iterable of either (any
                of them matches); ``None``: every kind.
            phase: a :class:`Phase` or its value (``"serving"``); ``None``: every phase.
            kernel, rank, backend: exact matches. ``backend`` ``"triton"`` also matches compiles a
                jitwatch 0.1 worker wrote (all Triton).
            since: Unix seconds, exclusive.

        Raises:
            jitwatch.errors.ConfigError: ``kind`` or ``phase`` is not one of the values it names
                (a ``ValueError``).
        """
        where: list[str] = []
        args: list[Any] = []
        phase_member = None if phase is None else as_member(Phase, phase, "phase")
        if kind is not None or phase_member is Phase.SERVING:
            # every kind when none is asked for a serving read: events_serving (revision 6) is an
            # index on kind, which SQLite takes for `kind IN (…)`, not for phase alone (it scanned
            # the whole log newest first for `/jit/events?phase=serving&kernel=…`: ~6 ms against
            # ~1 ms at 100,000 events); an event of a kind this code does not know is skipped anyway
            kinds = list(EventKind) if kind is None else event_kinds(kind)
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            args.extend(k.value for k in kinds)
        if phase_member is not None:
            # a literal (one of Phase's fixed values, never the caller's text): SQLite uses the
            # partial index events_serving (revision 6) only when the query names its phase
            where.append(f"phase = '{_PHASE_LITERAL[phase_member]}'")
        if kernel is not None:
            where.append("kernel = ?")
            args.append(kernel)
        if rank is not None:
            where.append("rank = ?")
            args.append(rank)
        if backend is not None:
            where.append("backend = ?")
            args.append(backend)
        if since is not None:
            where.append("ts > ?")
            args.append(since)
        if "specializations" in self._tables:
            sql = (
                "SELECT events.*, specializations.data AS spec_data FROM events"
                " LEFT JOIN specializations ON specializations.id = events.spec_id"
            )
        else:
            sql = "SELECT * FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY events.id {'DESC' if newest_first else 'ASC'} LIMIT ?"
        args.append(limit)
        out: list[Event] = []
        for r in self._conn.execute(sql, args):
            try:
                out.append(_row_to_event(r))
            except (ValueError, TypeError, KeyError) as exc:
                self._skip_row("events", exc)
        return out

    def count_events(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    def writers(self) -> dict[tuple[str, Any, Any], tuple[int, dict[str, Any] | None]]:
        """Every process that wrote to this journal, by ``(host, pid, rank)`` as stored: how many of
        its events are kept, and its worker row's ``attrs`` (``None``: it has no worker row; attrs
        that are not a JSON object read as ``{}``). Read raw: no row is skipped, whatever it holds
        (:meth:`workers` skips rows that make no sense)."""
        out: dict[tuple[str, Any, Any], tuple[int, dict[str, Any] | None]] = {}
        for host, pid, rank, count in self._conn.execute(
            "SELECT host, pid, rank, COUNT(*) FROM events GROUP BY 1, 2, 3"
        ):
            out[(str(host), pid, rank)] = (int(count), None)
        for host, pid, rank, attrs in self._conn.execute("SELECT host, pid, rank, attrs FROM workers"):
            key = (str(host), pid, rank)
            out[key] = (out.get(key, (0, None))[0], readsafe.json_object(attrs))
        return out

    def count_events_after(self, after_id: int) -> int:
        """Events kept with ``id > after_id`` (a rowid range: cheap)."""
        sql = "SELECT COUNT(*) FROM events NOT INDEXED WHERE id > ?"
        return int(self._conn.execute(sql, (after_id,)).fetchone()[0])

    def event_watermark(self) -> int:
        """The largest event id ever assigned (``AUTOINCREMENT``'s ``sqlite_sequence``; 0 before the
        first event). Ids are never reused and, since writers serialize on ``BEGIN IMMEDIATE`` and
        a batch's ids are consecutive, every event up to it is committed (or retired) once a read
        sees it: the watermark of an incremental reader (:mod:`jitwatch.views.live`)."""
        row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        if row is not None and isinstance(row[0], int):
            return int(row[0])
        return int(self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0])

    def new_event_kinds(self, after_id: int) -> set[tuple[str, str]]:
        """``{(kind, phase)}`` of the events with ``id > after_id``."""
        sql = "SELECT DISTINCT kind, phase FROM events NOT INDEXED WHERE id > ?"  # not a covering-index scan
        return {(str(r[0]), str(r[1])) for r in self._conn.execute(sql, (after_id,))}

    def tables_changed(self) -> bool:
        """Whether the journal's tables differ from those this connection found when it opened the
        file (a migration since: the table-dependent reads — ``compile_stats``, ``recompile_stats``,
        ``duration_hist``, ``specializations`` — follow the table set read at open, so a
        long-lived reader must open the file again). One ``sqlite_master`` read."""
        now = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return now != self._tables

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: changes whenever another connection commits (SQLite ≥
        3.8.8), so a long-lived reader can tell that nothing changed with one pragma."""
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def schema_cookie(self) -> int:
        """``PRAGMA schema_version``: changes with every schema change (a migration)."""
        return int(self._conn.execute("PRAGMA schema_version").fetchone()[0])

    @contextmanager
    def snapshot(self) -> Iterator[Journal]:
        """One read transaction: every read inside sees the same committed state (WAL snapshot).
        Read-only journals only; keep it short (it holds back checkpoints while open)."""
        if not self.readonly:
            raise PermissionError("snapshot() is for read-only journals")
        self._conn.execute("BEGIN")
        try:
            yield self
        finally:
            self._conn.execute("COMMIT")

    def small_tables_digest(self) -> int:
        """A digest of what a reader re-reads whole at every refresh: per small table (``meta``,
        ``workers``, ``counters``, ``compile_hist``, ``duration_hist``, ``kernels``) its row
        count, newest row id and sums of its columns (a worker's state, times, pid and attrs
        length among them; of the kernel labels only count and id), computed by SQLite
        (:data:`_DIGEST_SQL`), with ``PRAGMA schema_version`` and the event watermark
        (:meth:`event_watermark`). Python's ``hash`` of those values: comparable within one
        process only. Equal contents give equal digests; a heartbeat, an event, a state change or
        a retention pass changes it. Every page of those tables is read, so a damaged one raises.
        Reads the connection's current snapshot (call inside :meth:`snapshot` to pair it with
        other reads). About 0.13 ms for 64 ranks. Raises ``sqlite3.Error`` like any read."""
        cur = self._conn.cursor()
        cur.row_factory = None
        parts: list[Any] = [cur.execute("PRAGMA schema_version").fetchone(), self.event_watermark()]
        for table, sql in _DIGEST_SQL.items():
            if table in self._tables:
                parts.append(cur.execute(sql).fetchone())
        return hash(tuple(parts))

    def verify_pages(self) -> tuple[int, int]:
        """Re-read from the file what a long-lived reader's page cache may hide, and return
        ``(data_version, digest)``: :meth:`data_version` and :meth:`small_tables_digest`, read in
        one read transaction.

        SQLite tells a connection about other connections' *commits* (``PRAGMA data_version``, WAL
        index); it keeps its page cache while it sees none, so pages changed in the file by anything
        else (overwritten in place, ``cp`` of a backup over the same inode) stay invisible to it,
        while a new connection would read them. This drops the connection's page cache first
        (``PRAGMA shrink_memory``: ``sqlite3_db_release_memory``), so the reads that follow fetch
        page 1 (which SQLite checks on every read transaction: magic string, page size, schema
        cookie) and the small tables from the file again. A digest that changed while
        ``data_version`` did not means the file changed without a commit.

        Not seen, by this or any SQLite reader: damage to a page whose newest copy is still in the
        ``-wal`` file (readers take that copy; a checkpoint writes it over the damage), and damage to
        pages not read here (the event log, the per-kernel aggregates) until a read needs them.
        Read-only journals only (:meth:`snapshot`); cost: the small tables' size (0.14 ms for 64
        ranks and 686 histogram rows on the 2-core VM). Raises ``sqlite3.DatabaseError`` when the file is damaged (see
        :func:`is_corruption`), other ``sqlite3.Error`` for storage faults."""
        self._conn.execute("PRAGMA shrink_memory")
        with self.snapshot():
            digest = self.small_tables_digest()
            version = self.data_version()
        return version, digest

    def _skip_row(self, table: str, why: object) -> None:
        """Count (``skipped_rows``, :func:`skipped_rows_total`) and log once per connection a row
        that makes no sense."""
        global _skipped_total
        self.skipped_rows += 1
        with _skipped_lock:
            _skipped_total += 1
        if self.skipped_rows == 1:
            log.warning("jitwatch: skipped a %s row of %s that makes no sense (%s)", table, self.path, why)

    def workers(self) -> list[WorkerRow]:
        """Every worker row, oldest start first; rows with an unknown state, a non-numeric time or
        an out-of-range rank are skipped (:mod:`jitwatch.store.readsafe`). A row read unchanged
        since the previous call on this connection is not parsed again (the same
        :class:`WorkerRow`: treat its ``attrs`` as read-only)."""
        rows = self._conn.execute("SELECT * FROM workers ORDER BY started_ts, pid")
        out: list[WorkerRow] = []
        parsed, self._parsed_workers = self._parsed_workers, {}
        for r in rows:
            raw = tuple(r)
            known = parsed.get(raw)
            if known is not None:  # the same row as last time (a heartbeat changes one row's last_ts)
                self._parsed_workers[raw] = known
                out.append(known)
                continue
            f = dict(r)
            state, rank = readsafe.phase(f["state"]), readsafe.rank(f["rank"])
            started, last = readsafe.timestamp(f["started_ts"]), readsafe.timestamp(f["last_ts"])
            if state is None or rank is None or started is None or last is None or not isinstance(f["pid"], int):
                self._skip_row("workers", "state, rank, pid or time")
                continue
            for name in ("warmup_start_ts", "warmup_end_ts", "first_request_ts"):
                f[name] = readsafe.timestamp(f.get(name))
            for name in ("warmup_duration_s", "warmup_compile_seconds", "first_request_s"):
                f[name] = readsafe.seconds(f.get(name))
            f["warmup_compiles"] = readsafe.count(f.get("warmup_compiles"))
            f["mode"] = readsafe.text(f.get("mode"))
            f["host"] = str(f["host"])
            row = WorkerRow(
                **{
                    **f,
                    "state": state,
                    "rank": rank,
                    "started_ts": started,
                    "last_ts": last,
                    "attrs": readsafe.json_object(f["attrs"]),
                }
            )
            self._parsed_workers[raw] = row
            out.append(row)
        return out

    def latest_workers(self) -> dict[int, WorkerRow]:
        """The most recently started worker for each rank (a restarted worker replaces the old)."""
        latest: dict[int, WorkerRow] = {}
        for w in self.workers():
            latest[w.rank] = w
        return latest

    def stats(self, after_id: int | None = None) -> list[StatRow]:
        """Every (backend, kernel, phase, rank, kind) aggregate, sorted by backend, kernel, rank,
        phase, kind; rows a jitwatch 0.1 worker wrote (``kernel_stats``) come in as backend
        ``triton`` and are summed with the same key's revision-2 row.

        ``after_id``: only the aggregates of the (backend, kernel, phase, rank) keys that events
        with ``id > after_id`` touched (every kind of those keys, each complete: its current
        totals, not a delta). An incremental reader (:mod:`jitwatch.views.live`) replaces its
        copies of exactly these keys; events of those keys already retired are not seen here
        (see :meth:`count_events_after`)."""
        labels = self._labels_of(after_id)
        acc: dict[tuple[str, str, str, int, str], list[Any]] = {}

        def add(
            backend: str, kernel: str, phase: str, rank: int, kind: str, n: Any, s: Any, hits: Any, key: Any, ts: Any
        ) -> None:
            # seconds below 0 (a journal written before durations were clamped at 0, with a compile
            # timed across a wall-clock step back) read as 0: the row's count stands
            n, s, hits, ts = (
                readsafe.count(n),
                readsafe.seconds(s, negative=0.0),
                readsafe.count(hits) or 0,
                readsafe.timestamp(ts),
            )
            if n is None or s is None or readsafe.phase(phase) is None or readsafe.rank(rank) is None:
                self._skip_row("compile_stats", "count, seconds, phase or rank")
                return
            if not n:
                return
            backend, kernel, kind, key = str(backend), str(kernel), str(kind), readsafe.text(key)
            row = acc.setdefault((backend, kernel, phase, rank, kind), [0, 0.0, 0, None, None])
            row[0] += n
            row[1] += s
            row[2] += hits
            if ts is not None and (row[4] is None or ts >= row[4]):
                row[3] = key if key is not None else row[3]
                row[4] = ts

        touched = _TOUCHED_KEYS if after_id is not None else ""
        args: tuple[Any, ...] = () if after_id is None else (after_id,)
        if "compile_stats" in self._tables:
            sql = (
                f"SELECT cs.* FROM ({touched}) t JOIN compile_stats cs ON cs.backend = t.b AND cs.kernel = t.k"
                " AND cs.phase = t.p AND cs.rank = t.r"
                if touched
                else "SELECT * FROM compile_stats"
            )
            for r in self._conn.execute(sql, args):
                add(
                    r["backend"],
                    r["kernel"],
                    r["phase"],
                    r["rank"],
                    r["kind"],
                    r["count"],
                    r["seconds"],
                    r["cache_hits"],
                    r["last_key"],
                    r["last_ts"],
                )
        legacy = (
            f"SELECT ks.* FROM ({touched}) t JOIN kernel_stats ks ON ks.kernel = t.k AND ks.phase = t.p"
            f" AND ks.rank = t.r WHERE t.b = '{LEGACY_BACKEND}'"
            if touched
            else "SELECT * FROM kernel_stats"
        )
        for r in self._conn.execute(legacy, args):  # jitwatch 0.1 workers
            compile_ts = r["last_ts"] if r["compiles"] else None
            add(
                LEGACY_BACKEND,
                r["kernel"],
                r["phase"],
                r["rank"],
                EventKind.COMPILE.value,
                r["compiles"],
                r["compile_seconds"],
                r["cache_hits"],
                r["last_key"],
                compile_ts,
            )
            add(
                LEGACY_BACKEND,
                r["kernel"],
                r["phase"],
                r["rank"],
                EventKind.AUTOTUNE.value,
                r["autotune_runs"],
                r["autotune_seconds"],
                0,
                None,
                r["last_ts"],
            )
        out = [
            StatRow(
                backend=b,
                kernel=k,
                label=labels.get(k, k),
                phase=Phase(ph),
                rank=rank,
                kind=kind,
                count=int(v[0]),
                seconds=float(v[1]),
                cache_hits=int(v[2]),
                last_key=v[3],
                last_ts=v[4],
            )
            for (b, k, ph, rank, kind), v in acc.items()
        ]
        out.sort(key=lambda s: (s.backend, s.kernel, s.rank, s.phase.value, s.kind))
        return out

    def _labels_of(self, after_id: int | None) -> dict[str, str]:
        """Kernel name → metric label: every kernel, or those events after ``after_id`` touched."""
        if after_id is None:
            return {r[0]: r[1] for r in self._conn.execute("SELECT name, label FROM kernels")}
        sql = f"SELECT name, label FROM kernels WHERE name IN (SELECT k FROM ({_TOUCHED_KEYS}))"
        return {r[0]: r[1] for r in self._conn.execute(sql, (after_id,))}

    def recompile_stats(self, after_id: int | None = None) -> list[RecompileRow]:
        """Every (backend, kernel, reason class, phase, rank) recompile aggregate (schema revision
        3; empty for an older journal), sorted by backend, kernel, rank, phase, reason class.
        ``after_id``: only the keys events with ``id > after_id`` touched, as in :meth:`stats`."""
        if "recompile_stats" not in self._tables:
            return []
        labels = self._labels_of(after_id)
        out: list[RecompileRow] = []
        sql = (
            f"SELECT rs.* FROM ({_TOUCHED_KEYS}) t JOIN recompile_stats rs ON rs.backend = t.b AND rs.kernel = t.k"
            " AND rs.phase = t.p AND rs.rank = t.r"
            if after_id is not None
            else "SELECT * FROM recompile_stats"
        )
        for r in self._conn.execute(sql, () if after_id is None else (after_id,)):
            phase, rank = readsafe.phase(r["phase"]), readsafe.rank(r["rank"])
            n, secs = readsafe.count(r["count"]), readsafe.seconds(r["seconds"])
            if phase is None or rank is None or n is None or secs is None:
                self._skip_row("recompile_stats", "count, seconds, phase or rank")
                continue
            out.append(
                RecompileRow(
                    backend=str(r["backend"]),
                    kernel=str(r["kernel"]),
                    label=labels.get(r["kernel"], str(r["kernel"])),
                    reason_class=str(r["reason_class"]),
                    phase=phase,
                    rank=rank,
                    count=n,
                    seconds=secs,
                    last_reason=readsafe.text(r["last_reason"]),
                    last_ts=readsafe.timestamp(r["last_ts"]),
                )
            )
        out.sort(key=lambda s: (s.backend, s.kernel, s.rank, s.phase.value, s.reason_class))
        return out

    def histogram(self) -> dict[tuple[str, int, Phase], list[int]]:
        """Compile durations per (backend, rank, phase): non-cumulative counts per bucket, the
        last one being +Inf. jitwatch 0.1's ``compile_hist`` rows count as backend ``triton``."""
        out: dict[tuple[str, int, Phase], list[int]] = {}
        n = len(COMPILE_DURATION_BUCKETS)
        rows: list[tuple[str, int, str, int, int]] = [
            (LEGACY_BACKEND, r[0], r[1], r[2], r[3])
            for r in self._conn.execute("SELECT rank, phase, bucket, count FROM compile_hist")
        ]
        if "duration_hist" in self._tables:
            sql = "SELECT backend, rank, phase, bucket, count FROM duration_hist"
            rows += [(r[0], r[1], r[2], r[3], r[4]) for r in self._conn.execute(sql)]
        for backend, rank, phase, bucket, count in rows:
            ph, rk, b, c = readsafe.phase(phase), readsafe.rank(rank), readsafe.count(bucket), readsafe.count(count)
            if ph is None or rk is None or b is None or c is None:
                self._skip_row("duration_hist", "phase, rank, bucket or count")
                continue
            counts = out.setdefault((str(backend), rk, ph), [0] * (n + 1))
            counts[min(b, n)] += c
        return out

    def counters(self) -> dict[tuple[int, str], float]:
        """Every counter: ``{(rank, name): value}`` (per-backend ones named ``base:backend``)."""
        out: dict[tuple[int, str], float] = {}
        for r in self._conn.execute("SELECT rank, name, value FROM counters"):
            rank, value = readsafe.rank(r[0], allow_journal_wide=True), readsafe.seconds(r[2])
            if rank is None or value is None or not isinstance(r[1], str):
                self._skip_row("counters", "rank or value")
                continue
            out[(rank, r[1])] = value
        return out

    def request_histogram(self) -> dict[int, tuple[list[int], float]]:
        """Per rank: (non-cumulative counts per bucket of :data:`COMPILE_DURATION_BUCKETS` + the
        +Inf bucket, summed seconds) of compile seconds inside each marked serving request."""
        return request_histogram_of(self.counters())

    def backend_counter(self, base: str) -> dict[tuple[str, int], float]:
        """A per-backend counter such as ``hook_errors``: ``{(backend, rank): value}``; the 0.1
        name without a backend counts as ``triton``."""
        return backend_counter_of(self.counters(), base)

    def kernel_label_counts(self) -> tuple[int, int]:
        """(kernels with their own label, kernels folded into ``_other``)."""
        named = self._conn.execute("SELECT COUNT(*) FROM kernels WHERE label != ?", (OTHER_KERNEL,)).fetchone()[0]
        folded = self._conn.execute("SELECT COUNT(*) FROM kernels WHERE label = ?", (OTHER_KERNEL,)).fetchone()[0]
        return int(named), int(folded)

    def integrity_ok(self) -> bool:
        """``PRAGMA quick_check`` passes.

        ``False`` when the check reports damage or SQLite says the file is corrupt
        (``SQLITE_CORRUPT``/``SQLITE_NOTADB``). Any other ``sqlite3.Error`` (locked, I/O, full disk)
        is raised: it says nothing about the file's integrity.
        """
        try:
            return bool(self._conn.execute("PRAGMA quick_check").fetchone()[0] == "ok")
        except sqlite3.DatabaseError as exc:
            if is_corruption(exc):
                return False
            raise


def event_kinds(kind: Any) -> list[EventKind]:
    """The ``kind`` filter of :meth:`Journal.events` as a list of :class:`EventKind`: one kind (a
    member or its value; an :class:`EventKind` is a ``str``) or an iterable of them (empty: none
    matches). Bytes are one value, refused as given.

    Raises:
        jitwatch.errors.ConfigError: a value that is not an :class:`EventKind` or its value.
    """
    if isinstance(kind, (str, *BYTES_LIKE)):  # one value: b"compile" is refused as itself, not as 99
        return [as_member(EventKind, kind, "kind")]
    try:
        items = list(kind)
    except TypeError:
        items = [kind]  # not iterable: refused below, named as given
    return [as_member(EventKind, k, "kind") for k in items]


def open_or_recover(directory: str | os.PathLike[str], **kwargs: Any) -> Journal:
    """Open the journal for writing; a corrupt file is moved aside and a fresh one started.

    Corrupt means SQLite reports ``SQLITE_CORRUPT``/``SQLITE_NOTADB`` or ``PRAGMA quick_check``
    fails (see :func:`is_corruption`). The damaged file is renamed
    ``journal.db.corrupt-<unix time>-<pid>[-<n>]`` (with its ``-wal``/``-shm``) and an error is logged; the
    worker keeps running. Storage faults are *not* treated as corruption and leave the file
    where it is: they raise ``OSError``/``sqlite3.Error`` (unwritable or missing-and-uncreatable
    directory, full disk, lock timeout), which :class:`~jitwatch.store.writer.JournalWriter` counts.
    """
    try:
        journal = Journal(directory, **kwargs)
        try:
            healthy = journal.integrity_ok()
        except BaseException:
            journal.close()
            raise
        if healthy:
            return journal
        journal.close()
        reason = "quick_check failed"
    except JournalCorruptError as exc:
        reason = str(exc)
    path = Path(directory) / JOURNAL_FILE
    stamp = f"{int(time.time())}-{os.getpid()}"
    n = 0
    while any(Path(f"{path}.corrupt-{stamp}{sfx}").exists() for sfx in ("", "-wal", "-shm")):
        n += 1  # never overwrite an earlier damaged file kept for inspection
        stamp = f"{int(time.time())}-{os.getpid()}-{n}"
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(path) + suffix)
        if src.exists():
            src.rename(Path(f"{path}.corrupt-{stamp}{suffix}"))
    log.error("jitwatch journal %s was corrupt (%s); moved aside, starting a fresh one", path, reason)
    return Journal(directory, **kwargs)
