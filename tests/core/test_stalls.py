"""Request stall accounting (:mod:`jitwatch.core.stalls`): the compile seconds inside each marked
serving request, through a real journal writer, into ``/metrics`` and ``/jit``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.backends.base import BackendStatus, Capture, CompileSink
from jitwatch.config import Settings
from jitwatch.core.events import EventKind
from jitwatch.core.identity import WorkerIdentity
from jitwatch.core.monitor import Monitor
from jitwatch.store.journal import Journal
from jitwatch.store.writer import JournalWriter
from jitwatch.testing import read_events
from jitwatch.views.metrics import render
from jitwatch.views.status import build_status


class SleepyBackend:
    """A backend whose compiles take real wall time (``time.sleep``)."""

    name = "sleepy"
    label = "sleepy kernel"

    def __init__(self) -> None:
        self.sink: CompileSink | None = None

    def available(self) -> bool:
        return True

    def version(self) -> str | None:
        return "1"

    def install(self, sink: CompileSink) -> BackendStatus:
        self.sink = sink
        return BackendStatus(self.name, "active", "1", ())

    def uninstall(self) -> None:
        pass

    def compile(self, name: str, seconds: float) -> None:
        assert self.sink is not None
        token = self.sink.begin(self.name, name)
        time.sleep(seconds)
        self.sink.finish(token, Capture(self.name, name, key=f"{name}:{seconds}"))


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse_text(text) for s in f.samples}


def test_request_compile_seconds_histogram_and_delayed_counter(tmp_path: Path) -> None:
    backend = SleepyBackend()
    writer = JournalWriter(tmp_path, heartbeat_s=0)
    mon = Monitor(
        Settings(journal_dir=tmp_path),
        sink=writer,
        identity=WorkerIdentity(rank=1),
        backends=[backend],
        tracer_provider=False,
    ).install()
    with mon.request("before-serving"):  # not a serving request: not observed
        backend.compile("w", 0.01)
    mon.activate()
    for i in range(5):
        with mon.request(f"req-{i}"):
            if i == 2:
                backend.compile("a", 0.2)
                backend.compile("b", 0.1)
            if i == 4:
                backend.compile("c", 0.03)
    mon.flush()
    text = render(tmp_path)[0].decode()
    got = samples(text)
    rank = (("rank", "1"),)
    assert got[("jitwatch_request_compile_seconds_count", rank)] == 5
    assert got[("jitwatch_requests_delayed_total", (("backend", "sleepy"), ("rank", "1")))] == 2
    stalls = read_events(tmp_path, EventKind.REQUEST_STALL)
    # The histogram holds exactly the per-request compile seconds the stall events carry (3
    # requests compiled nothing); buckets are checked against those measured values, not against
    # the sleeps, so a loaded machine that stretches a 30 ms compile past 50 ms cannot fail it.
    observed = [0.0, 0.0, 0.0] + [e.duration_s or 0.0 for e in stalls]
    buckets = {dict(k[1])["le"]: v for k, v in got.items() if k[0] == "jitwatch_request_compile_seconds_bucket"}
    assert len(buckets) > 5 and buckets["+Inf"] == 5
    for le, count in buckets.items():
        assert count == sum(v <= float(le) for v in observed), le
    assert got[("jitwatch_request_compile_seconds_sum", rank)] == pytest.approx(sum(observed), rel=1e-6, abs=1e-9)
    assert 0.33 <= sum(observed)  # the sleeps are a floor on what was measured

    assert [(e.attrs["request"], e.attrs["compiles"]) for e in stalls] == [("req-2", 2), ("req-4", 1)]
    assert [c["kernel"] for c in stalls[0].attrs["compiled"]] == ["a", "b"]
    assert stalls[0].attrs["latency_s"] >= stalls[0].duration_s >= 0.3
    with Journal(tmp_path, readonly=True) as j:
        worst = build_status(j).worst_requests
    assert [(w.request, [c["kernel"] for c in w.compiled]) for w in worst] == [("req-2", ["a", "b"]), ("req-4", ["c"])]
    mon.uninstall()


def test_requests_without_compiles_are_batched_not_journaled_one_by_one(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, heartbeat_s=0)
    mon = Monitor(Settings(journal_dir=tmp_path), sink=writer, backends=[], tracer_provider=False).install()
    mon.activate()
    for _ in range(1000):
        with mon.request():
            pass
    mon.flush()
    counts: list[Any] = [e.attrs["count"] for e in read_events(tmp_path, EventKind.REQUESTS)]
    assert sum(counts) == 1000 and len(counts) <= 2  # one batch (plus one if 5 s passed)
    assert read_events(tmp_path, EventKind.REQUEST_STALL) == []
    got = samples(render(tmp_path)[0].decode())
    assert got[("jitwatch_request_compile_seconds_count", (("rank", "0"),))] == 1000
    assert got[("jitwatch_request_compile_seconds_sum", (("rank", "0"),))] == 0
    mon.uninstall()
