"""In-flight compiles: journaled by the writer thread while they run (not only after they end), so
``/jit`` and ``/metrics`` show a running — or hung — compile's age; the collective deadline's
defaults."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from jitwatch.backends.base import BackendStatus, Capture, CompileSink
from jitwatch.config import ConfigError, Settings, collective_deadline
from jitwatch.core.identity import WorkerIdentity
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.views.metrics import render
from jitwatch.views.status import build_status
from jitwatch.worker import create_monitor
from tests.reliability.conftest import Sidecar


class GateBackend:
    """A backend whose compile runs until the test opens a gate."""

    name = "gate"
    label = "gate kernel"

    def __init__(self) -> None:
        self.sink: CompileSink | None = None
        self.gate = threading.Event()

    def available(self) -> bool:
        return True

    def version(self) -> str | None:
        return "1"

    def install(self, sink: CompileSink) -> BackendStatus:
        self.sink = sink
        return BackendStatus(self.name, "active", "1", ())

    def uninstall(self) -> None:
        pass

    def compile(self, name: str) -> None:
        assert self.sink is not None
        token = self.sink.begin(self.name, name)
        self.gate.wait(30)
        self.sink.finish(token, Capture(self.name, name, key="k"))


def gauge(text: str, name: str, rank: str) -> float:
    for f in parse_text(text):
        for s in f.samples:
            if s.name == name and s.labels.get("rank") == rank:
                return float(s.value)
    raise KeyError(name)


def wait(check, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail("timed out")


def test_running_compile_is_visible_with_its_age_then_gone(tmp_path: Path) -> None:
    backend = GateBackend()
    settings = Settings(journal_dir=tmp_path, heartbeat_seconds=10.0, collective_deadline_s=120.0)
    mon = create_monitor(settings, identity=WorkerIdentity(rank=1), backends=[backend], tracer_provider=False)
    mon.install()
    mon.activate()
    t = threading.Thread(target=lambda: (mon.request("r").__enter__(), backend.compile("slow_kernel")))
    t.start()

    def running() -> object:
        with Journal(tmp_path, readonly=True) as j:
            (r,) = build_status(j).ranks
        return r if r.inflight and r.inflight[0].age_s >= 1.2 else None

    rank = wait(running)
    (c,) = rank.inflight
    assert (c.backend, c.kernel, c.phase, c.request_id) == ("gate", "slow_kernel", "serving", 1)
    assert rank.oldest_inflight_age_s == c.age_s and rank.collective_deadline_s == 120.0
    text = render(tmp_path)[0].decode()
    assert gauge(text, "jitwatch_inflight_compiles", "1") == 1
    assert gauge(text, "jitwatch_inflight_compile_age_seconds", "1") >= 1.2
    assert gauge(text, "jitwatch_collective_deadline_seconds", "1") == 120
    time.sleep(1.5)  # the age keeps growing while the compile runs (a hang shows)
    assert gauge(render(tmp_path)[0].decode(), "jitwatch_inflight_compile_age_seconds", "1") >= 2.7

    backend.gate.set()
    t.join(10)

    def done() -> bool:
        return gauge(render(tmp_path)[0].decode(), "jitwatch_inflight_compiles", "1") == 0

    wait(done)
    assert gauge(render(tmp_path)[0].decode(), "jitwatch_inflight_compile_age_seconds", "1") == 0
    mon.uninstall()


def _inflight_row(directory: Path) -> dict[str, Any] | None:
    """The worker row's attrs when it lists a compile in flight, else ``None``."""
    try:
        with Journal(directory, readonly=True) as j:
            workers = j.workers()
    except FileNotFoundError:
        return None
    return workers[0].attrs if workers and workers[0].attrs.get("inflight") else None


def test_a_hung_compile_is_rejournaled_once_per_second(tmp_path: Path) -> None:
    """A compile that hangs is journaled when it starts and then refreshed every
    ``INFLIGHT_INTERVAL_S`` (1 s), not at every 0.1 s wake-up of the writer: its ``start_ts`` is
    the same in every snapshot, so the writer does not take a refresh for a change. Counted with
    a real journal: a trigger on the worker row (each ``set_inflight`` is one transaction with
    one ``UPDATE`` of it; the heartbeat, the only other writer of the row, is 60 s here)."""
    backend = GateBackend()
    settings = Settings(journal_dir=tmp_path, heartbeat_seconds=60.0)
    mon = create_monitor(settings, identity=WorkerIdentity(rank=0), backends=[backend], tracer_provider=False)
    mon.install()
    mon.activate()
    t = threading.Thread(target=backend.compile, args=("hung_kernel",))
    t.start()
    try:
        first = wait(lambda: _inflight_row(tmp_path))
        with sqlite3.connect(tmp_path / JOURNAL_FILE, timeout=10) as con:
            con.execute("CREATE TABLE test_row_updates(ts REAL)")
            con.execute(
                "CREATE TRIGGER test_count_row_updates AFTER UPDATE ON workers"
                " BEGIN INSERT INTO test_row_updates VALUES (julianday('now')); END"
            )
        con.close()
        time.sleep(3.0)
        with sqlite3.connect(tmp_path / JOURNAL_FILE, timeout=10) as con:
            (updates,) = con.execute("SELECT COUNT(*) FROM test_row_updates").fetchone()
        con.close()
        last = _inflight_row(tmp_path)
    finally:
        backend.gate.set()
        t.join(10)
        mon.uninstall()
    assert last is not None and last["inflight_ts"] > first["inflight_ts"]  # still refreshed
    # 3 expected; 24 before the fix. Wide bounds: a loaded CI machine can delay a wake-up or two.
    assert 1 <= updates <= 6, f"{updates} transactions in 3 s for one hung compile"
    assert [i["start_ts"] for i in last["inflight"]] == [i["start_ts"] for i in first["inflight"]]


def test_inflight_compiles_are_journaled_with_the_heartbeat_off(tmp_path: Path) -> None:
    """``JITWATCH_HEARTBEAT_SECONDS=0`` turns the liveness heartbeat off, not the journaling of
    compiles in flight: a running compile shows in the real sidecar's ``/jit`` and ``/metrics``
    with its age, and is gone once it ends."""
    backend = GateBackend()
    d = tmp_path / "journal"
    settings = Settings(journal_dir=d, heartbeat_seconds=0.0)
    mon = create_monitor(settings, identity=WorkerIdentity(rank=2), backends=[backend], tracer_provider=False)
    mon.install()
    mon.activate()
    t = threading.Thread(target=backend.compile, args=("slow_kernel",))
    t.start()
    sc = Sidecar(d).start()
    try:

        def running() -> Any:
            (rank,) = httpx.get(sc.url + "/jit", timeout=10).json()["ranks"]
            return rank if rank["inflight"] and rank["inflight"][0]["age_s"] >= 1.2 else None

        rank = wait(running)
        assert [(c["backend"], c["kernel"]) for c in rank["inflight"]] == [("gate", "slow_kernel")]
        text = httpx.get(sc.url + "/metrics", timeout=10).text
        assert gauge(text, "jitwatch_inflight_compiles", "2") == 1
        assert gauge(text, "jitwatch_inflight_compile_age_seconds", "2") >= 1.2
        backend.gate.set()
        t.join(10)
        wait(lambda: gauge(httpx.get(sc.url + "/metrics", timeout=10).text, "jitwatch_inflight_compiles", "2") == 0)
    finally:
        sc.stop()
        backend.gate.set()
        t.join(10)
        mon.uninstall()


def test_a_hung_compile_follows_a_deleted_journal_with_the_heartbeat_off(tmp_path: Path) -> None:
    """The journal is deleted (an operator clears the directory) while a compile hangs and the
    worker writes nothing else, heartbeat off: the writer's next in-flight update notices it, opens
    a fresh journal and registers the worker again, so readers see the rank and its hung compile
    within seconds — not at the next retention pass (60 s), writing into the deleted file meanwhile."""
    backend = GateBackend()
    d = tmp_path / "journal"
    settings = Settings(journal_dir=d, heartbeat_seconds=0.0)
    mon = create_monitor(settings, identity=WorkerIdentity(rank=3), backends=[backend], tracer_provider=False)
    mon.install()
    mon.activate()
    t = threading.Thread(target=backend.compile, args=("hung_kernel",))
    t.start()
    try:

        def listed() -> bool:
            try:
                with Journal(d, readonly=True) as j:
                    (rank,) = build_status(j).ranks
            except (FileNotFoundError, sqlite3.Error, ValueError):
                return False
            return [c.kernel for c in rank.inflight] == ["hung_kernel"]

        wait(listed)
        time.sleep(1.5)  # past the first retention pass (at the writer's first wake-up)
        for f in d.iterdir():
            f.unlink()
        wait(listed, timeout=5.0)  # INFLIGHT_INTERVAL_S is 1 s
    finally:
        backend.gate.set()
        t.join(10)
        mon.uninstall()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (600.0, "default")),
        ({"VLLM_HOST_IP": "x"}, (300.0, "default (vLLM)")),
        ({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "480"}, (480.0, "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")),
        (
            {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "480", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "120"},
            (120.0, "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"),
        ),
        (
            {"JITWATCH_COLLECTIVE_DEADLINE_S": "42", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1"},
            (42.0, "JITWATCH_COLLECTIVE_DEADLINE_S"),
        ),
    ],
)
def test_collective_deadline_defaults(env: dict[str, str], expected: tuple[float, str]) -> None:
    assert collective_deadline(env) == expected
    assert (Settings.from_env(env).collective_deadline_s, Settings.from_env(env).collective_deadline_source) == expected


def test_collective_deadline_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="JITWATCH_COLLECTIVE_DEADLINE_S"):
        collective_deadline({"JITWATCH_COLLECTIVE_DEADLINE_S": "0"})
