"""Two versions of ``jitwatch/store/journal.py`` side by side in one process, batch by batch.

``bench_cost_floor.py --sections journal --before DIR`` runs each tree in its own processes, a round
at a time; on a shared 2-vCPU VM one round often runs 10-15 µs per event slower than the next (another
tenant's burst), which hides a 5 % change. Here both versions write the same batches in one process:
for every batch of the layout (see ``bench_cost_floor.bench_journal``), the current tree's ``Journal``
and the other file's write it to their own journal directories, the one that goes first alternating,
each batch's writer-thread CPU (``time.thread_time``) taken per event. The result is the median of
the per-batch ratios (after / before): a burst hits both halves of a pair about equally.

Only ``journal.py`` differs between the two: the other file is loaded as a module of its own and
uses the current tree's ``jitwatch`` for everything else (events, ``redact``, ``specs``,
migrations), so this compares a change confined to that file (``--before`` naming the current file
itself is the A/A check: ratios near 1.0).

Usage::

    PYTHONPATH=$PWD python benchmarks/bench_journal_paired.py --before /tmp/before/jitwatch/store/journal.py \\
        --cases fleet_per_rank,fleet --reps 6 --out result.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import scratch_dir
from benchmarks.bench_cost_floor import BATCH, _journal_events, _template_event

CASES = ("fleet", "fleet_per_rank", "fleet_per_rank_home", "all_distinct")


def _load(path: str) -> ModuleType:
    """``path`` (a ``journal.py``) as a module of its own, named ``journal_before``."""
    spec = importlib.util.spec_from_file_location("journal_before", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["journal_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _plan(case: str, events: int, ranks: int, kernels: int) -> tuple[int, list[tuple[int, list[Any]]]]:
    """(writers, [(writer index, batch)]) in write order, as ``bench_cost_floor.bench_journal``."""
    template = _template_event()
    if case.endswith("_home"):
        attrs = dict(template.attrs)
        attrs["specialization_data"] = attrs["specialization_data"].replace("/opt/venv", f"{Path.home()}/venv")
        template = template.model_copy(update={"attrs": attrs})
    if case.startswith("fleet_per_rank"):
        per_rank = events // ranks
        evs = [_journal_events(template, per_rank, 1, kernels, lambda i, r=r: r, lambda i: i) for r in range(ranks)]
        order = []
        for b, k in enumerate(range(0, per_rank, BATCH)):
            for r in [(b + i) % ranks for i in range(ranks)]:
                order.append((r, evs[r][k : k + BATCH]))
        return ranks, order
    per = ranks if case == "fleet" else 1
    flat = _journal_events(template, events, per, kernels, lambda i, n=per: i % n, lambda i, n=per: i // n)
    return 1, [(0, flat[k : k + BATCH]) for k in range(0, events, BATCH)]


def run_case(
    case: str, after: ModuleType, before: ModuleType, reps: int, events: int, ranks: int, root: Path
) -> dict[str, Any]:
    """Per-batch CPU per event of both versions over ``reps`` fresh journals (under ``root``, each
    removed after its rep), and their ratios."""
    t_after: list[float] = []
    t_before: list[float] = []
    ratios: list[float] = []
    for rep in range(reps):
        writers, order = _plan(case, events, ranks, 500)
        dirs = {name: root / f"{case}-{rep}-{name}" for name in ("after", "before")}
        js = {
            "after": [after.Journal(dirs["after"]) for _ in range(writers)],
            "before": [before.Journal(dirs["before"]) for _ in range(writers)],
        }
        try:
            for name in js:
                js[name][0].write([])
            for n, (w, batch) in enumerate(order):
                took = {}
                for name in ("after", "before") if (n + rep) % 2 == 0 else ("before", "after"):
                    c0 = time.thread_time()
                    js[name][w].write(batch)
                    took[name] = (time.thread_time() - c0) / len(batch) * 1e6
                t_after.append(took["after"])
                t_before.append(took["before"])
                ratios.append(took["after"] / took["before"])
        finally:
            for name in js:
                for j in js[name]:
                    j.close()
                shutil.rmtree(dirs[name], ignore_errors=True)
    deciles = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else ratios * 9
    return {
        "batches": len(ratios),
        "after_us_median": statistics.median(t_after),
        "before_us_median": statistics.median(t_before),
        "ratio_median": statistics.median(ratios),
        "ratio_p10": deciles[0],
        "ratio_p90": deciles[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the other journal.py (e.g. from `git archive main jitwatch`)")
    ap.add_argument("--cases", default="fleet_per_rank,fleet,all_distinct", help=f"comma-separated, of {CASES}")
    ap.add_argument("--reps", type=int, default=6, help="fresh journals per case (each the whole layout)")
    ap.add_argument("--events", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--out", help="result JSON path")
    args = ap.parse_args()
    import jitwatch.store.journal as after

    before = _load(args.before)
    root = scratch_dir("jw-paired-")
    result: dict[str, Any] = {
        "after": after.__file__,
        "before": os.path.abspath(args.before),
        "batch": BATCH,
        "python": sys.version.split()[0],
        "loadavg_start": os.getloadavg(),
    }
    for case in args.cases.split(","):
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r} (one of {CASES})")
        r = result[case] = run_case(case, after, before, args.reps, args.events, args.ranks, root)
        print(
            f"{case}: after {r['after_us_median']:.1f} us, before {r['before_us_median']:.1f} us per event "
            f"(medians of {r['batches']} batches); after/before per batch: median {r['ratio_median']:.3f} "
            f"(p10 {r['ratio_p10']:.3f}, p90 {r['ratio_p90']:.3f})",
            flush=True,
        )
    result["loadavg_end"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
