"""The DeepGEMM backend's cache watcher: what it costs the host when nothing compiles.

Measured (CPU time of the watcher's own thread, ``pthread_getcpuclockid``, so other load on the
machine does not count, though it does slow the thread down):

* per wake, idle, with an empty ``cache/`` and with ``--entries`` entries (the directory is not
  listed while its mtime is unchanged), against a bare ``threading.Event.wait(0.1)`` loop in the
  same run (the floor any 0.1 s poller pays);
* one scan after the directory changed, with ``--entries`` entries (a listing and a set
  difference), median of 20;
* the watcher's memory for those entries (the set of names of the current listing);
* :func:`template_spec` on DeepGEMM's real ``kernel.cu`` and on a 64 KiB hostile one (21,000
  ``&a<`` after ``__instantiate_kernel``), against the backtracking pattern of the first version.

Run: ``python benchmarks/bench_deepgemm_watcher.py --out results/cpu/deepgemm_watcher.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result

from jitwatch.backends.deepgemm.backend import CacheWatcher, DeepGemmBackend, template_spec

KERNEL_CU = """static void __instantiate_kernel() {
    auto ptr = reinterpret_cast<void*>(&sm90_bf16_gemm_impl<
        cute::UMMA::Major::K, cute::UMMA::Major::K, 0, 4096, 7168, 1, 64, 64, 64, 128, 128, 128, 13,
        128, 128, 1, false, 132, GemmType::Normal, false, cutlass::bfloat16_t
    >);
};
"""
OLD_PATTERN = re.compile(r"&\s*[A-Za-z_][A-Za-z0-9_:]*\s*<(.*)>\s*\)\s*;", re.S)  # the first version's


def thread_cpu_per_wake(thread: threading.Thread, seconds: float, poll_s: float) -> float:
    """Microseconds of ``thread``'s CPU time per ``poll_s`` wake over ``seconds``."""
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    time.sleep(0.2)
    c0 = time.clock_gettime(clock)
    time.sleep(seconds)
    c1 = time.clock_gettime(clock)
    return (c1 - c0) / (seconds / poll_s) * 1e6


def bare_wait(seconds: float) -> float:
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.1):
            pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        return thread_cpu_per_wake(t, seconds, 0.1)
    finally:
        stop.set()
        t.join()


def watcher_idle(root: Path, seconds: float) -> tuple[float, CacheWatcher]:
    w = CacheWatcher(DeepGemmBackend(), root)
    w.start()
    assert w._thread is not None and w.listed.wait(30)  # its first listing is not an idle wake
    try:
        return thread_cpu_per_wake(w._thread, seconds, w.poll_s), w
    finally:
        w.stop()


def timed(fn: Any, n: int) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--entries", type=int, default=5000)
    args = ap.parse_args()
    res: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        empty, full = Path(tmp, "empty"), Path(tmp, "full")
        (empty / "cache").mkdir(parents=True)
        (full / "cache").mkdir(parents=True)
        for i in range(args.entries):
            (full / "cache" / f"kernel.sm90_bf16_gemm.{i:032x}").mkdir()
        res["bare_wait_us_per_wake"] = round(bare_wait(args.seconds), 1)
        res["idle_empty_us_per_wake"] = round(watcher_idle(empty, args.seconds)[0], 1)
        us, w = watcher_idle(full, args.seconds)
        res["idle_entries_us_per_wake"] = round(us, 1)
        res["entries"] = args.entries
        res["seen_bytes"] = sys.getsizeof(w._seen) + sum(sys.getsizeof(n) for n in w._seen)

        def changed() -> None:
            w._cache_mtime = None
            w.scan(time.time())

        res["scan_after_change_ms"] = round(timed(changed, 20) * 1e3, 3)
    hostile = ("static void __instantiate_kernel() {" + "&a<" * 30000)[: 64 * 1024]
    res["template_spec_real_us"] = round(timed(lambda: template_spec(KERNEL_CU), 200) * 1e6, 2)
    res["template_spec_hostile_64k_ms"] = round(timed(lambda: template_spec(hostile), 5) * 1e3, 3)
    res["old_pattern_hostile_64k_s"] = round(timed(lambda: OLD_PATTERN.search(hostile), 1), 3)
    res["loadavg_after"] = os.getloadavg()
    doc = write_result(args.out, "deepgemm_watcher", res)
    print({k: v for k, v in doc.items() if k != "machine"})


if __name__ == "__main__":
    main()
