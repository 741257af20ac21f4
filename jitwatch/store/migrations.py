"""Journal schema revisions: a forward-only, transactional migration path.

The journal records which schema it holds in its ``meta`` table:

* ``revision`` — the newest migration applied (absent in journals of jitwatch 0.1: revision 1);
* ``min_reader`` / ``min_writer`` — the oldest *revision* of jitwatch code that may read / write
  the file correctly. A migration that only adds tables or columns keeps ``min_writer`` low, so an
  older worker keeps writing during a rolling upgrade;
* ``written_by`` — the jitwatch version that last migrated it (for error messages);
* ``schema_version`` — the one key jitwatch 0.1 reads. 0.1 treats any value but ``"1"`` as a
  corrupt file and moves the journal aside, so it stays ``"1"`` for as long as 0.1 workers can
  write the file correctly (``min_writer == 1``); a change that 0.1 cannot write through must
  raise it, and 0.1 then moves the file aside (nothing else can stop 0.1 from doing so).

Opening (:func:`prepare`):

* a writer upgrades an older file in place, in one ``BEGIN IMMEDIATE`` transaction (all steps or
  none; concurrent openers wait on SQLite's lock and then find it done);
* a file of a *newer* revision is used as it is when this code's revision is at least its
  ``min_writer`` (``min_reader`` for a reader), and otherwise refused with
  :class:`~jitwatch.errors.JournalVersionError` naming both revisions and versions. It is never
  moved aside, never rewritten;
* a reader never migrates: it reads an older file as it is (the journal reads each revision's
  tables that exist).

History:

1. jitwatch 0.1: ``events``, ``workers``, ``kernels``, ``kernel_stats`` (per kernel, phase, rank:
   compiles and autotune runs, Triton only), ``compile_hist``, ``counters``.
2. jitwatch 0.2 (backends): ``compile_stats`` (per backend, kernel, phase, rank and kind) and
   ``duration_hist`` (per backend, rank, phase). Additive: 0.1 workers still write ``kernel_stats``
   and ``compile_hist``, which 0.2 readers add in as backend ``triton`` — nothing is copied, so
   a 0.1 sidecar's counters never go backwards either. ``min_writer`` 1, ``min_reader`` 2 (a 0.1
   reader sees only the 0.1 workers' aggregates; upgrade sidecars first).
3. jitwatch 0.2 (recompile reasons): ``recompile_stats`` (per backend, kernel, reason class, phase
   and rank: count, seconds, the latest verbatim reason). Written for every compile event whose
   ``attrs.reason_class`` is set and is not ``first compile`` (torch.compile's Dynamo
   recompiles), so ``jitwatch_recompiles_total`` survives retention like every aggregate.
   Additive: ``min_writer`` stays 1 (older workers simply do not fill it), ``min_reader`` 2 (a
   revision-2 reader ignores the table).
4. jitwatch 0.3 (cost): ``specializations`` (one row per distinct specialization: the key,
   ``module``, ``signature``, ``constexprs``, ``options``, ``specialization_data`` and
   ``source_hash`` of a compile, as zlib with a preset dictionary, see
   :mod:`jitwatch.store.specs`) and ``events.spec_id`` referencing it; a compile event then keeps
   only what differs per compile. Additive for writers (a 0.2 or 0.1 worker keeps writing whole
   events, ``spec_id`` NULL, which every reader reads as before): ``min_writer`` 1. ``min_reader``
   4: an older sidecar would show the new compact events without their key and signature, so it is
   refused with a clear error instead (upgrade sidecars first). Drops ``events_backend`` (a
   handful of values: never selective, ~25 bytes and an index update per event).
5. jitwatch 0.3 (cost): drops ``events_kernel``. Of the event log's indexes, ``events_ts`` serves
   retention (``DELETE … WHERE id <= ? OR ts < ?``, also 0.1's), ``events_phase_kind`` the serving
   compiles every ``/jit`` reads; ``events_kernel`` served only per-kernel reads (``jitwatch why``
   baselines, ``/jit/events?kernel=``), which now scan the log newest first and stop at their
   limit, and cost every compile event a random-order index insert (~1.5 µs and ~26 bytes on the
   2-core VM, ``docs/benchmarks.md`` section 9). Nothing else changes: ``min_reader`` 4,
   ``min_writer`` 1. An older writer's schema script (0.1 to revision 4) creates the index again
   when it opens the file (``CREATE INDEX IF NOT EXISTS``); a revision-5 writer drops it again when
   it opens one (both at process start only), so a finished rollout ends without it.
6. jitwatch 0.3 (cost): ``events_phase_kind`` (every event's phase and kind) replaced by
   ``events_serving``, a partial index on ``kind`` of the serving-phase events only. Its readers
   are the serving-phase reads (``/jit``'s serving compiles, coverage, ``jitwatch why`` baselines,
   ``/jit/events?phase=serving``); a filter on another phase scans the log newest first to its
   limit (2.5-11 ms at 100,000 events on the 2-core VM); warmup and startup compiles,
   nearly every event, no longer pay an index insert (~0.7 µs per event on the 2-core VM,
   ``docs/benchmarks.md`` section 9). SQLite uses a partial index for a query whose ``WHERE``
   implies the index's: this code names the phase as a literal (``phase = 'serving'``); a
   revision-4 or 5 reader binds it as a parameter, which SQLite 3.40 also plans with the bound
   value (so through the index; an SQLite that does not scans the log: the same answer, slower on a
   long log). An older writer's schema script creates ``events_phase_kind`` again (as for
   ``events_kernel``) and a revision-6 writer drops it again. ``min_reader`` 4, ``min_writer`` 1.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from jitwatch._version import __version__
from jitwatch.errors import JournalVersionError

LEGACY_SCHEMA_VERSION = "1"
"""``meta.schema_version``: what jitwatch 0.1 checks (see the module docstring)."""

BASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL, start_ts REAL, duration_s REAL,
    kind TEXT NOT NULL, rank INTEGER NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,
    phase TEXT NOT NULL, backend TEXT NOT NULL, kernel TEXT, key TEXT, cache_hit INTEGER,
    attrs TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
CREATE INDEX IF NOT EXISTS events_kernel ON events(kernel);
CREATE INDEX IF NOT EXISTS events_phase_kind ON events(phase, kind);
CREATE TABLE IF NOT EXISTS workers (
    host TEXT NOT NULL, pid INTEGER NOT NULL, rank INTEGER NOT NULL,
    state TEXT NOT NULL, mode TEXT, started_ts REAL NOT NULL, last_ts REAL NOT NULL,
    warmup_start_ts REAL, warmup_end_ts REAL, warmup_duration_s REAL, warmup_compiles INTEGER,
    warmup_compile_seconds REAL, first_request_s REAL, first_request_ts REAL,
    attrs TEXT NOT NULL,
    PRIMARY KEY (host, pid, rank)
);
CREATE TABLE IF NOT EXISTS kernels (
    name TEXT PRIMARY KEY, label TEXT NOT NULL, first_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kernel_stats (
    rank INTEGER NOT NULL, kernel TEXT NOT NULL, phase TEXT NOT NULL,
    compiles INTEGER NOT NULL DEFAULT 0, compile_seconds REAL NOT NULL DEFAULT 0,
    cache_hits INTEGER NOT NULL DEFAULT 0,
    autotune_runs INTEGER NOT NULL DEFAULT 0, autotune_seconds REAL NOT NULL DEFAULT 0,
    last_key TEXT, last_ts REAL,
    PRIMARY KEY (rank, kernel, phase)
);
CREATE TABLE IF NOT EXISTS compile_hist (
    rank INTEGER NOT NULL, phase TEXT NOT NULL, bucket INTEGER NOT NULL,
    count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (rank, phase, bucket)
);
CREATE TABLE IF NOT EXISTS counters (
    rank INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (rank, name)
);
"""
"""Revision 1, exactly as jitwatch 0.1 created it (``CREATE … IF NOT EXISTS``: idempotent)."""


@dataclass(frozen=True)
class Migration:
    """One step: the SQL that takes revision ``revision - 1`` to ``revision``."""

    revision: int
    description: str
    sql: str
    min_reader: int
    min_writer: int


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        revision=2,
        description="per-backend aggregates: compile_stats and duration_hist",
        sql="""
CREATE TABLE IF NOT EXISTS compile_stats (
    backend TEXT NOT NULL, kernel TEXT NOT NULL, phase TEXT NOT NULL, rank INTEGER NOT NULL,
    kind TEXT NOT NULL,
    count INTEGER NOT NULL DEFAULT 0, seconds REAL NOT NULL DEFAULT 0,
    cache_hits INTEGER NOT NULL DEFAULT 0, last_key TEXT, last_ts REAL,
    PRIMARY KEY (backend, kernel, phase, rank, kind)
);
CREATE TABLE IF NOT EXISTS duration_hist (
    backend TEXT NOT NULL, rank INTEGER NOT NULL, phase TEXT NOT NULL, bucket INTEGER NOT NULL,
    count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (backend, rank, phase, bucket)
);
CREATE INDEX IF NOT EXISTS events_backend ON events(backend);
""",
        min_reader=2,
        min_writer=1,
    ),
    Migration(
        revision=3,
        description="recompile reasons: recompile_stats",
        sql="""
CREATE TABLE IF NOT EXISTS recompile_stats (
    backend TEXT NOT NULL, kernel TEXT NOT NULL, reason_class TEXT NOT NULL, phase TEXT NOT NULL,
    rank INTEGER NOT NULL,
    count INTEGER NOT NULL DEFAULT 0, seconds REAL NOT NULL DEFAULT 0,
    last_reason TEXT, last_ts REAL,
    PRIMARY KEY (backend, kernel, reason_class, phase, rank)
);
""",
        min_reader=2,
        min_writer=1,
    ),
    Migration(
        revision=4,
        description="specializations stored once: specializations table, events.spec_id",
        sql="""
CREATE TABLE IF NOT EXISTS specializations (
    id INTEGER PRIMARY KEY,
    digest BLOB NOT NULL UNIQUE,
    data BLOB NOT NULL
);
ALTER TABLE events ADD COLUMN spec_id INTEGER;
DROP INDEX IF EXISTS events_backend;
""",
        min_reader=4,
        min_writer=1,
    ),
    Migration(
        revision=5,
        description="events_kernel dropped: per-kernel reads scan the log, every write is cheaper",
        sql="""
DROP INDEX IF EXISTS events_kernel;
""",
        min_reader=4,
        min_writer=1,
    ),
    Migration(
        revision=6,
        description="events_phase_kind replaced by events_serving, a partial index of serving events",
        sql="""
DROP INDEX IF EXISTS events_phase_kind;
CREATE INDEX IF NOT EXISTS events_serving ON events(kind) WHERE phase = 'serving';
""",
        min_reader=4,
        min_writer=1,
    ),
)

DROPPED_BASE_INDEXES: dict[str, int] = {"events_kernel": 5, "events_phase_kind": 6}
"""Indexes :data:`BASE_SCHEMA` creates that a later revision drops (name → that revision): not
created again for a journal already at that revision, and dropped again when an older writer
recreated one (see revision 5 above)."""

REVISION = MIGRATIONS[-1].revision
"""The schema revision this jitwatch writes."""


@dataclass(frozen=True)
class SchemaInfo:
    """What a journal's ``meta`` table says about its schema."""

    revision: int
    min_reader: int
    min_writer: int
    written_by: str | None
    legacy_version: str | None


def read_info(conn: sqlite3.Connection) -> SchemaInfo | None:
    """The journal's schema info, or ``None`` when it has no ``meta`` table or no version at all
    (a database that is not a jitwatch journal, or an empty file)."""
    try:
        rows = dict(conn.execute("SELECT k, v FROM meta").fetchall())
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    legacy = rows.get("schema_version")
    if legacy is None and "revision" not in rows:
        return None

    def num(key: str, default: int) -> int:
        try:
            return int(rows[key])
        except (KeyError, TypeError, ValueError):
            return default

    revision = num("revision", 1)
    return SchemaInfo(
        revision=revision,
        min_reader=num("min_reader", revision),
        min_writer=num("min_writer", revision),
        written_by=rows.get("written_by") or ("0.1" if "revision" not in rows else None),
        legacy_version=legacy,
    )


def _refusal(path: Path, info: SchemaInfo, what: str, needed: int) -> JournalVersionError:
    by = f" (written by jitwatch {info.written_by})" if info.written_by else ""
    return JournalVersionError(
        f"journal {path} has schema revision {info.revision}{by}, which needs schema revision {needed} "
        f"or newer to {what} it; this jitwatch {__version__} has revision {REVISION}: upgrade jitwatch "
        "here, or point JITWATCH_DIR at another directory (the journal is left as it is)"
    )


def check_readable(path: Path, info: SchemaInfo) -> None:
    """Raise :class:`JournalVersionError` when this code may not read a journal of ``info``."""
    if info.revision > REVISION and info.min_reader > REVISION:
        raise _refusal(path, info, "read", info.min_reader)


def prepare(conn: sqlite3.Connection, path: Path) -> SchemaInfo:
    """Create or upgrade the journal behind ``conn`` (a writable connection in autocommit mode)
    to :data:`REVISION`, in one ``BEGIN IMMEDIATE`` transaction; returns the resulting info.

    Raises:
        JournalVersionError: the journal is of a newer revision this code may not write.
        sqlite3.Error: a storage fault or corruption (nothing changed).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        existing = read_info(conn)
        for statement in _statements(BASE_SCHEMA):
            if existing is not None and _drops(statement, existing.revision):
                continue
            conn.execute(statement)
        conn.execute(
            "INSERT OR IGNORE INTO meta(k, v) VALUES ('schema_version', ?)",
            (LEGACY_SCHEMA_VERSION,),
        )
        info = read_info(conn)
        assert info is not None  # the row was just ensured
        if info.revision > REVISION:
            if info.min_writer > REVISION:
                raise _refusal(path, info, "write", info.min_writer)
        else:
            pending = [m for m in MIGRATIONS if m.revision > info.revision]
            for m in pending:
                for statement in _statements(m.sql):
                    conn.execute(statement)
            for name, revision in DROPPED_BASE_INDEXES.items():
                if info.revision >= revision:  # an older writer created it again
                    conn.execute(f"DROP INDEX IF EXISTS {name}")
            if pending or "revision" not in _meta_keys(conn):
                meta = {
                    "revision": str(REVISION),
                    "min_reader": str(max(m.min_reader for m in MIGRATIONS)),
                    "min_writer": str(max(m.min_writer for m in MIGRATIONS)),
                    "written_by": __version__,
                }
                conn.executemany("INSERT OR REPLACE INTO meta(k, v) VALUES (?, ?)", list(meta.items()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    result = read_info(conn)
    assert result is not None
    return result


def _drops(statement: str, revision: int) -> bool:
    """Whether ``statement`` (of :data:`BASE_SCHEMA`) creates an index that a journal at
    ``revision`` no longer has (:data:`DROPPED_BASE_INDEXES`)."""
    return any(
        revision >= dropped_at and statement.startswith(f"CREATE INDEX IF NOT EXISTS {name} ")
        for name, dropped_at in DROPPED_BASE_INDEXES.items()
    )


def _meta_keys(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT k FROM meta")}


def _statements(script: str) -> list[str]:
    """Split a DDL script into statements (none of ours has a ``;`` inside a literal)."""
    return [s.strip() for s in script.split(";") if s.strip()]


__all__ = [
    "BASE_SCHEMA",
    "DROPPED_BASE_INDEXES",
    "LEGACY_SCHEMA_VERSION",
    "MIGRATIONS",
    "REVISION",
    "Migration",
    "SchemaInfo",
    "check_readable",
    "prepare",
    "read_info",
]
