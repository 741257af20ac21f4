"""Load generator process: drives the sidecar's ``/jit`` and ``/metrics`` over 127.0.0.1.

Usage: ``python _loadgen.py <base_url> <seconds> <threads>``

Each thread holds one keep-alive ``httpx.Client`` and alternates ``GET /jit`` and
``GET /metrics`` as fast as answers come back (closed loop). Prints one JSON line: requests,
errors (non-200 or transport errors, with the first few messages), p50/p90/p99/max latency in
milliseconds, requests per second.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import httpx


def main() -> None:
    base, seconds, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def worker() -> None:
        mine: list[float] = []
        errs: list[str] = []
        paths = ("/jit", "/metrics")
        i = 0
        with httpx.Client(base_url=base, timeout=30) as client:
            while time.monotonic() < stop_at:
                path = paths[i % 2]
                i += 1
                t0 = time.perf_counter()
                try:
                    r = client.get(path)
                    r.read()
                    if r.status_code != 200:
                        errs.append(f"{path} {r.status_code} {r.text[:200]}")
                except httpx.HTTPError as exc:
                    errs.append(f"{path} {type(exc).__name__}: {exc}")
                mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)
            errors.extend(errs)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    lat.sort()

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else 0.0

    print(
        json.dumps(
            {
                "requests": len(lat),
                "errors": len(errors),
                "error_samples": errors[:5],
                "p50_ms": pct(0.50),
                "p90_ms": pct(0.90),
                "p99_ms": pct(0.99),
                "max_ms": round(lat[-1] * 1000, 1) if lat else 0.0,
                "rps": round(len(lat) / elapsed, 1),
                "seconds": round(elapsed, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
