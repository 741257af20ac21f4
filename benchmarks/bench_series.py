"""Benchmark 5b: how many series ``/metrics`` exposes for a fleet-sized journal, per family.

Builds (or reuses, ``--journal``) the journal of :func:`bench_sidecar.build_journal` (default 100 000
compile events over 500 kernel names and 8 ranks, 5 % of them in phase ``serving``), renders one
scrape with :func:`jitwatch.views.metrics.render_uncached` and counts its samples per family with
prometheus_client's own text parser (``prometheus_client.parser.text_string_to_metric_families``):
a histogram's ``_bucket``/``_sum``/``_count`` samples are counted under the histogram family.

Run: ``python benchmarks/bench_series.py --out results/series.json`` (the 100k-event journal takes a
few minutes to build; pass ``--journal DIR`` to reuse one, e.g. the one bench_sidecar.py built).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import scratch_dir, write_result
from bench_sidecar import build_journal

from jitwatch.store.journal import JOURNAL_FILE


def series_by_family(journal_dir: Path) -> tuple[Counter[str], int]:
    """``(samples per family, body bytes)`` of one text-format scrape of ``journal_dir``."""
    from prometheus_client.parser import text_string_to_metric_families

    from jitwatch.views.metrics import render_uncached

    body, _ = render_uncached(journal_dir)
    out: Counter[str] = Counter()
    for fam in text_string_to_metric_families(body.decode()):
        name = fam.name + ("_total" if fam.type == "counter" else "") + ("_info" if fam.type == "info" else "")
        out[name] += len(fam.samples)
    return out, len(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--kernels", type=int, default=500)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--journal", help="reuse this journal directory (built there when it does not exist yet)")
    args = ap.parse_args()
    result: dict[str, Any] = {"events": args.events, "kernels": args.kernels, "ranks": args.ranks}
    jdir = Path(args.journal) if args.journal else scratch_dir("jw-bench-series-") / "journal"
    if not (jdir / JOURNAL_FILE).exists():
        result["journal"] = build_journal(jdir, args.events, args.kernels, args.ranks)
        print(f"journal: {result['journal']}")
    counts, body_bytes = series_by_family(jdir)
    result["series"] = dict(sorted(counts.items()))
    result["series_total"] = sum(counts.values())
    result["body_bytes"] = body_bytes
    write_result(args.out, "series", result)
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{n:7,d}  {name}")
    print(f"{result['series_total']:7,d}  total ({body_bytes:,d} bytes of text exposition)")


if __name__ == "__main__":
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    main()
