"""Where the journal's CPU per compile event goes, in ``bench_cost_floor.py``'s ``fleet_per_rank``
layout (one connection per rank, batches of 256).

Three measures, each per event and summarised as the median over ``--rounds`` fresh journals:

* **Python parts**: the writer thread's CPU (``time.thread_time``) inside ``Journal._lean_run``
  (the per-event Python loop), ``Journal._resolve`` (specialization and kernel-label lookups, new
  records compressed and inserted) and ``_insert_rows`` (every multi-row ``INSERT``: event rows,
  aggregates, records), and the whole ``Journal.write``. The wrappers add a few calls per batch,
  not per event.
* **SQL statements** (a separate round per journal, every run): each connection's ``execute``
  wrapped, its CPU summed by statement, its rows' stepping included (sqlite3's ``execute`` steps a
  ``SELECT`` to its first row only; ``fetchall`` and iteration step the rest), by the SQL's first
  words: the event rows' ``INSERT``, the ``compile_stats`` upsert, ``COMMIT``, the
  specialization-digest and kernel-label lookups, ….
  The wrapper adds ~1 µs per statement, so its ``write_us`` is not comparable with the others'.
* **One connection** (the control): the same batches, in the same order, written by one journal
  connection. What the per-rank layout pays beyond it is what several connections to one file
  cost: each connection's page cache is dropped when another commits (SQLite WAL), and each
  connection finds the specializations and kernel labels another one stored by their digest or
  name (a SHA-256 per event and a ``SELECT … IN`` per batch) where one connection knows its own.

Nothing is asserted.

Run: ``python benchmarks/bench_journal_split.py --rounds 5 --out split.json`` (seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import _common
from _common import scratch_dir, write_result
from bench_cost_floor import BATCH, _journal_events, _template_event


def _plan(journals: list[Any], events: int, ranks: int, kernels: int) -> list[tuple[Any, list[Any]]]:
    """``bench_cost_floor.bench_journal``'s ``fleet_per_rank`` write order: batch ``b`` of every rank,
    the rank that writes first rotating; rank ``r``'s batches go to ``journals[r % len(journals)]``."""
    template = _template_event()
    per_rank = events // ranks
    evs = [_journal_events(template, per_rank, 1, kernels, lambda i, r=r: r, lambda i: i) for r in range(ranks)]
    plan = []
    for b, k in enumerate(range(0, per_rank, BATCH)):
        for r in [(b + i) % ranks for i in range(ranks)]:
            plan.append((journals[r % len(journals)], evs[r][k : k + BATCH]))
    return plan


def _write_all(journals: list[Any], plan: list[tuple[Any, list[Any]]]) -> float:
    """Writer-thread CPU seconds of writing ``plan`` (the journals closed after)."""
    journals[0].write([])
    c0 = time.thread_time()
    for journal, batch in plan:
        journal.write(batch)
    total = time.thread_time() - c0
    for journal in journals:
        journal.close()
    return total


def _round(events: int, ranks: int, kernels: int) -> dict[str, float]:
    from jitwatch.store import journal as J

    spent: defaultdict[str, float] = defaultdict(float)
    originals = {"_lean_run": J.Journal._lean_run, "_resolve": J.Journal._resolve}
    insert_rows = J._insert_rows

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.thread_time() - t0

        return wrapper

    for name, fn in originals.items():
        setattr(J.Journal, name, timed(name, fn))
    J._insert_rows = timed("_insert_rows", insert_rows)
    try:
        d = scratch_dir("jw-split-") / "journal"
        journals = [J.Journal(d) for _ in range(ranks)]
        total = _write_all(journals, _plan(journals, events, ranks, kernels))
    finally:
        for name, fn in originals.items():
            setattr(J.Journal, name, fn)
        J._insert_rows = insert_rows
    n = events // ranks * ranks
    return {"write_us": total / n * 1e6, **{f"{k}_us": v / n * 1e6 for k, v in spent.items()}}


def _statement(sql: str) -> str:
    """A statement's name in the split: its first words, up to ``VALUES``/``(``/``WHERE``."""
    head = " ".join(sql.split()[:4])
    for cut in (" VALUES", "(", " WHERE"):
        head = head.split(cut)[0]
    return head


class _TimedConnection:
    """A ``sqlite3.Connection`` whose ``execute`` (and its cursors' ``execute``) add their CPU to
    ``spent`` by statement, the rows' stepping included (``fetchone``/``fetchall``/``fetchmany``,
    iteration: sqlite3's ``execute`` steps a ``SELECT`` to its first row only); everything else is
    passed through."""

    def __init__(self, conn: Any, spent: defaultdict[str, float]) -> None:
        self._conn, self._spent = conn, spent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        t0 = time.thread_time()
        try:
            return _TimedCursor(self._conn.execute(sql, *args), self._spent, _statement(sql))
        finally:
            self._spent[_statement(sql)] += time.thread_time() - t0

    def cursor(self) -> Any:
        return _TimedCursor(self._conn.cursor(), self._spent)


class _TimedCursor:
    """A ``sqlite3.Cursor`` whose ``execute`` and row reads add their CPU to ``spent``, the reads
    under the statement last executed."""

    def __init__(self, cur: Any, spent: defaultdict[str, float], statement: str = "") -> None:
        object.__setattr__(self, "_cur", cur)
        object.__setattr__(self, "_spent", spent)
        object.__setattr__(self, "_statement", statement)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._cur, name, value)

    def execute(self, sql: str, *args: Any) -> Any:
        t0 = time.thread_time()
        object.__setattr__(self, "_statement", _statement(sql))
        try:
            self._cur.execute(sql, *args)
            return self
        finally:
            self._spent[self._statement] += time.thread_time() - t0

    def _read(self, read: Any, *args: Any) -> Any:
        t0 = time.thread_time()
        try:
            return read(*args)
        finally:
            self._spent[self._statement] += time.thread_time() - t0

    def fetchone(self) -> Any:
        return self._read(self._cur.fetchone)

    def fetchall(self) -> Any:
        return self._read(self._cur.fetchall)

    def fetchmany(self, *args: Any) -> Any:
        return self._read(self._cur.fetchmany, *args)

    def __iter__(self) -> Any:  # the journal reads rows so (``rows += cur.execute(...)``): all at once, in C
        return iter(self.fetchall())


def _sql_round(events: int, ranks: int, kernels: int) -> dict[str, float]:
    from jitwatch.store.journal import Journal

    spent: defaultdict[str, float] = defaultdict(float)
    d = scratch_dir("jw-split-sql-") / "journal"
    journals = [Journal(d) for _ in range(ranks)]
    for journal in journals:
        journal._conn = _TimedConnection(journal._conn, spent)  # type: ignore[assignment]
    total = _write_all(journals, _plan(journals, events, ranks, kernels))
    n = events // ranks * ranks
    return {"write_us": total / n * 1e6, **{k: v / n * 1e6 for k, v in spent.items()}}


def _one_connection_round(events: int, ranks: int, kernels: int) -> dict[str, float]:
    from jitwatch.store.journal import Journal

    d = scratch_dir("jw-split-one-") / "journal"
    journals = [Journal(d)]
    total = _write_all(journals, _plan(journals, events, ranks, kernels))
    return {"write_us": total / (events // ranks * ranks) * 1e6}


def _median(rounds: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rounds for k in r}, key=lambda k: -statistics.median(r.get(k, 0.0) for r in rounds))
    return {k: statistics.median(r.get(k, 0.0) for r in rounds) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="result JSON path")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=500)
    args = ap.parse_args()
    shape = (args.events, args.ranks, args.kernels)
    rounds, sql, one = [], [], []
    for _ in range(args.rounds):  # interleaved: a burst on a shared host hits all three alike
        rounds.append(_round(*shape))
        one.append(_one_connection_round(*shape))
        sql.append(_sql_round(*shape))
    med, one_med, sql_med = _median(rounds), _median(one), _median(sql)
    print("fleet_per_rank, µs per event (median of rounds):", {k: round(v, 2) for k, v in med.items()})
    print("  the same batches through one connection:", round(one_med["write_us"], 2))
    print("  by SQL statement (timed connection):", {k: round(v, 2) for k, v in sql_med.items()})
    write_result(
        args.out,
        "journal_split",
        {
            "rounds": rounds,
            "median": med,
            "one_connection": {"rounds": one, "median": one_med},
            "sql": {"rounds": sql, "median": sql_med},
        },
    )


_ = (_common, Path)
if __name__ == "__main__":
    main()
