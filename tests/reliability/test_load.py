"""Load: a load generator in a second process drives ``/jit`` and ``/metrics`` on 127.0.0.1
while worker processes write, for 60 s (``slow``; a 4 s version runs by default).

Pass criteria: zero errors (every answer a 200), every writer's events all journaled, and the
sidecar's memory flat (RSS sampled every second; the last third of the run may not sit more than
16 MiB above the second third). The 60 s run starts from a journal of 25,000 compile events, past
the sidecar's 20,000-event coverage window, so it measures the steady state rather than the
warm-up of that window. p50/p99 latency and RSS are recorded, not asserted (no timing asserts
on a shared 2-core machine).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from jitwatch.core.events import Event, EventKind
from jitwatch.store.journal import Journal

from .conftest import HERE, PY, rss_kib, run_writer


def prefill(d: Path, n: int) -> None:
    """``n`` compile events written directly, so the run starts in steady state: the sidecar's
    per-request work is bounded by windows (``/jit`` coverage reads the newest 20,000 compile
    events), and memory can only be judged flat once the journal is past them."""
    with Journal(d) as j:
        for start in range(0, n, 1000):
            j.write(
                [
                    Event.now(EventKind.COMPILE, rank=9, kernel=f"pre_{i % 200}", key=f"pre-{i}", duration_s=0.01)
                    for i in range(start, min(n, start + 1000))
                ]
            )


def run_load(  # type: ignore[no-untyped-def]
    tmp_path: Path, sidecar_factory, seconds: float, threads: int, writers: int, prefilled: int = 0
) -> dict[str, object]:
    d = tmp_path / "j"
    if prefilled:
        prefill(d, prefilled)
    sc = sidecar_factory(d)
    assert sc.proc is not None
    per_writer_chunks = max(1, int(seconds))  # one chunk of 200 events per second per writer
    procs = [run_writer(d, str(w), str(200 * per_writer_chunks), "200", "1.0") for w in range(writers)]
    rss: list[int] = [rss_kib(sc.proc.pid)]
    gen = subprocess.Popen(
        [PY, str(HERE / "_loadgen.py"), sc.url, str(seconds), str(threads)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while gen.poll() is None:
        time.sleep(1.0)
        rss.append(rss_kib(sc.proc.pid))
    out, err = gen.communicate()
    assert gen.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    for p in procs:
        _wout, werr = p.communicate(timeout=seconds + 120)
        assert p.returncode == 0, werr[-2000:]
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] > 0
    third = max(1, len(rss) // 3)
    middle = sum(rss[third : 2 * third]) / max(1, len(rss[third : 2 * third]))
    last = sum(rss[2 * third :]) / max(1, len(rss[2 * third :]))
    if prefilled:
        assert last - middle < 16 * 1024, rss
    return {
        **{k: v for k, v in result.items() if k != "error_samples"},
        "threads": threads,
        "writers": writers,
        "events_prefilled": prefilled,
        "events_written": writers * 200 * per_writer_chunks,
        "rss_kib_middle_third_mean": round(middle),
        "rss_kib_last_third_mean": round(last),
        "rss_kib_start": rss[0],
        "rss_kib_end": rss[-1],
        "rss_kib_max": max(rss),
    }


@pytest.mark.slow
def test_load_short(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    print(json.dumps(run_load(tmp_path, sidecar_factory, seconds=4, threads=2, writers=1)))


@pytest.mark.slow
def test_load_60s(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    print(
        "FIGURES load",
        json.dumps(run_load(tmp_path, sidecar_factory, seconds=60, threads=4, writers=2, prefilled=25_000)),
    )


@pytest.mark.slow
def test_load_30s_no_writers(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    """The normal serving state: a large journal that is not changing (compiles are rare after
    warmup), so the sidecar's caches hold."""
    fig = run_load(tmp_path, sidecar_factory, seconds=30, threads=4, writers=0, prefilled=25_000)
    print("FIGURES load-idle", json.dumps(fig))
