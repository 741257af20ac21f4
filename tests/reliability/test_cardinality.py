"""Cardinality and memory bounds: 10k distinct kernel names, 100k events.

* The label cap (``max_kernels``, ``JITWATCH_MAX_KERNELS``, default 500) holds: the first 500
  kernel names keep their own ``kernel`` label, every later one is folded into
  ``kernel="_other"``, first-come and permanent, so counters stay exact and monotonic.
* Retention retires the oldest events (count limit, checked every 1000 writes, and age limit);
  the aggregates, and so the metrics, do not move when events are retired.
* The sidecar's memory stays bounded: its RSS after many scrapes of the large journal is
  recorded and must not keep growing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jitwatch.config import DEFAULT_MAX_KERNELS
from jitwatch.core.events import Event, EventKind, Phase
from jitwatch.store.journal import OTHER_KERNEL, Journal

from .conftest import rss_kib


def fill(d: Path, *, kernels: int, events: int, retention: int) -> float:
    t0 = time.monotonic()
    with Journal(d, retention_events=retention) as j:
        batch: list[Event] = []
        for i in range(events):
            batch.append(
                Event.now(
                    EventKind.COMPILE,
                    phase=Phase.SERVING,
                    kernel=f"kernel_{i % kernels:05d}",
                    key=f"key-{i}",
                    duration_s=2.0**-8,
                )
            )
            if len(batch) == 1000:
                j.write(batch)
                batch = []
        if batch:
            j.write(batch)
        j.prune()
    return time.monotonic() - t0


def compiles_by_label(text: str) -> dict[str, float]:
    """Compiles per kernel label, from the per-kernel compile seconds (every compile of ``fill`` takes
    exactly 2**-8 s, so the float sums are exact)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "jitwatch_compile_seconds_total":
                out[s.labels["kernel"]] = out.get(s.labels["kernel"], 0.0) + s.value / 2.0**-8
    return out


def run_bounds(tmp_path: Path, sidecar_factory, kernels: int, events: int, retention: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    d = tmp_path / "j"
    write_s = fill(d, kernels=kernels, events=events, retention=retention)
    with Journal(d, readonly=True) as j:
        named, folded = j.kernel_label_counts()
        kept = j.count_events()
        retired = j.counters().get((-1, "retired_events"), 0.0)
        stats = [s for s in j.stats() if s.kind == "compile"]
    assert named == min(kernels, DEFAULT_MAX_KERNELS)
    assert folded == max(0, kernels - DEFAULT_MAX_KERNELS)
    assert kept <= retention
    assert kept + retired == events
    assert sum(s.count for s in stats) == events  # aggregates untouched by retention
    labels = {s.label for s in stats}
    assert len(labels) == min(kernels, DEFAULT_MAX_KERNELS) + (kernels > DEFAULT_MAX_KERNELS)
    assert all(s.label == OTHER_KERNEL for s in stats if s.kernel >= f"kernel_{DEFAULT_MAX_KERNELS:05d}")

    sc = sidecar_factory(d)
    assert sc.proc is not None
    with httpx.Client(base_url=sc.url, timeout=60) as c:
        first = c.get("/metrics")
        assert first.status_code == 200
        by_label = compiles_by_label(first.text)
        assert len(by_label) <= DEFAULT_MAX_KERNELS + 1
        assert sum(by_label.values()) == events
        per_kernel = events // kernels
        assert by_label[OTHER_KERNEL] == per_kernel * (kernels - DEFAULT_MAX_KERNELS)
        series = sum(1 for line in first.text.splitlines() if line and not line.startswith("#"))
        for _ in range(3):  # warm up allocator pools
            c.get("/metrics")
            c.get("/jit")
        rss_before = rss_kib(sc.proc.pid)
        for _ in range(10):
            assert c.get("/metrics").status_code == 200
            assert c.get("/jit").status_code == 200
            assert c.get("/jit/events", params={"limit": 1000}).status_code == 200
        rss_after = rss_kib(sc.proc.pid)
    assert rss_after - rss_before < 32 * 1024, (rss_before, rss_after)  # no growth per scrape
    assert rss_after < 512 * 1024
    db_bytes = sum(p.stat().st_size for p in d.iterdir())
    return {
        "kernels": kernels,
        "events": events,
        "retention": retention,
        "kept": kept,
        "retired": int(retired),
        "named_labels": named,
        "folded": folded,
        "metric_series": series,
        "sidecar_rss_kib": [rss_before, rss_after],
        "journal_bytes": db_bytes,
        "write_s": round(write_s, 1),
    }


def test_label_cap_and_retention_small(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    fig = run_bounds(tmp_path, sidecar_factory, kernels=1000, events=10_000, retention=3_000)
    print(json.dumps(fig))


@pytest.mark.slow
def test_label_cap_and_retention_10k_kernels_100k_events(tmp_path: Path, sidecar_factory) -> None:  # type: ignore[no-untyped-def]
    fig = run_bounds(tmp_path, sidecar_factory, kernels=10_000, events=100_000, retention=20_000)
    print("FIGURES cardinality", json.dumps(fig))


def test_retention_by_age(tmp_path: Path) -> None:
    d = tmp_path / "j"
    now = time.time()
    with Journal(d, retention_seconds=3600) as j:
        j.write([Event(kind=EventKind.COMPILE, ts=now - 7200 + i, kernel="old") for i in range(50)])
        j.write([Event(kind=EventKind.COMPILE, ts=now - 60 + i, kernel="new") for i in range(50)])
        assert j.prune(now=now) == 50
        assert {e.kernel for e in j.events(limit=1000)} == {"new"}
        assert sum(s.count for s in j.stats() if s.kind == "compile") == 100
        assert j.counters()[(-1, "retired_events")] == 50
