"""Memory the sidecar's live in-memory aggregates (``jitwatch.views.live``) keep between requests.

The live copy holds one entry per journal aggregate row — (backend, kernel name, phase, rank,
kind) — plus its per-series indexes and formatted lines, for as long as the sidecar runs. The
kernel-label cap (``JITWATCH_MAX_KERNELS``) bounds the *series*, not the rows: kernel names past
the cap keep their own aggregate rows (``/jit`` lists kernels by name). So the copy grows with the
distinct kernel names times ranks the journal has seen, as the journal's own aggregate tables do.

Method: a real journal (``Journal.write``) with ``--kernels`` kernel names times ``--ranks`` ranks, one
serving compile each; then ``tracemalloc`` measures what one ``LiveJournal``'s first ``/metrics``
render and ``/jit`` status leave allocated (``current``) and their peak.

Run: ``python benchmarks/bench_live_memory.py --kernels 2500 --ranks 8 --out results/live_memory.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result

from jitwatch.core.events import EventKind, Phase
from jitwatch.store.journal import Journal
from jitwatch.testing import make_event
from jitwatch.views.live import LiveJournal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=2500)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--out")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        t0 = time.time() - 100
        n = args.kernels * args.ranks
        events = [
            make_event(
                EventKind.COMPILE,
                t0 + i * 1e-4,
                rank=i % args.ranks,
                pid=1,
                host="h",
                phase=Phase.SERVING,
                kernel=f"triton_poi_fused_{i // args.ranks}",
                key="k",
                start_ts=t0,
                duration_s=0.1,
            )
            for i in range(n)
        ]
        with Journal(directory) as j:
            for i in range(0, n, 5000):
                j.write(events[i : i + 5000])
            rows = len(j.stats())
        live = LiveJournal(directory)
        tracemalloc.start()
        body, _ = live.render()
        live.status(stale_after=60)
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        live.close()
    doc = write_result(
        args.out,
        "live_memory",
        {
            "kernels": args.kernels,
            "ranks": args.ranks,
            "aggregate_rows": rows,
            "kept_bytes": current,
            "peak_bytes": peak,
            "kept_bytes_per_row": round(current / rows),
            "metrics_body_bytes": len(body),
        },
    )
    print(
        f"{rows} aggregate rows: live copy keeps {current / 2**20:.1f} MiB "
        f"({current / rows:.0f} B/row), peak {peak / 2**20:.1f} MiB; /metrics body {len(body)} B"
    )
    del doc


if __name__ == "__main__":
    main()
