"""Where the journal's CPU per compile event goes, in ``bench_cost_floor.py``'s ``fleet_per_rank``
layout (one connection per rank, batches of 256): the writer thread's CPU (``time.thread_time``)
inside ``Journal._lean_run`` (the per-event Python loop), ``Journal._resolve`` (specialization and
kernel-label lookups, new records compressed and inserted) and ``_insert_rows`` (every multi-row
``INSERT``: event rows, aggregates, records), per event, and the whole ``Journal.write``. The
wrappers add a few calls per batch, not per event. Nothing is asserted.

Run: ``python benchmarks/bench_journal_split.py --rounds 5 --out split.json`` (seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Any

import _common
from _common import scratch_dir, write_result
from bench_cost_floor import BATCH, _journal_events, _template_event


def _round(events: int, ranks: int, kernels: int) -> dict[str, float]:
    from jitwatch.store import journal as J

    spent: Counter[str] = Counter()
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
        template = _template_event()
        d = scratch_dir("jw-split-") / "journal"
        writers = [J.Journal(d) for _ in range(ranks)]
        writers[0].write([])
        per_rank = events // ranks
        evs = [_journal_events(template, per_rank, 1, kernels, lambda i, r=r: r, lambda i: i) for r in range(ranks)]
        plan = []
        for b, k in enumerate(range(0, per_rank, BATCH)):
            for r in [(b + i) % ranks for i in range(ranks)]:
                plan.append((writers[r], evs[r][k : k + BATCH]))
        c0 = time.thread_time()
        for journal, batch in plan:
            journal.write(batch)
        total = time.thread_time() - c0
        for journal in writers:
            journal.close()
    finally:
        for name, fn in originals.items():
            setattr(J.Journal, name, fn)
        J._insert_rows = insert_rows
    n = per_rank * ranks
    return {"write_us": total / n * 1e6, **{f"{k}_us": v / n * 1e6 for k, v in spent.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="result JSON path")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=500)
    args = ap.parse_args()
    rounds = [_round(args.events, args.ranks, args.kernels) for _ in range(args.rounds)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print("fleet_per_rank, µs per event (median of rounds):", {k: round(v, 2) for k, v in med.items()})
    write_result(args.out, "journal_split", {"rounds": rounds, "median": med})


_ = _common
if __name__ == "__main__":
    main()
