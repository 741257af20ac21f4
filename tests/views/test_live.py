"""``/metrics`` and ``/jit`` from the live in-memory aggregates (jitwatch.views.live): after every
kind of change a reader must follow — writes by other processes, retention (seen and unseen
events), a replaced journal, a migration, a second sidecar, a restart — the body is byte-identical
to a full build by prometheus_client (render_uncached) in both exposition formats, and the
incremental path (not a rebuild) is what answered."""

from __future__ import annotations

import random
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from jitwatch.core.events import EventKind, Phase
from jitwatch.store.journal import JOURNAL_FILE, Journal
from jitwatch.testing import JournalBuilder, make_event
from jitwatch.views.live import LiveJournal
from jitwatch.views.metrics import render_uncached
from jitwatch.views.status import JitStatus, build_status

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
FORMATS = (None, OPENMETRICS, "text/plain; version=1.0.0; escaping=underscores")


def compiles(body: bytes, kernel: str) -> float:
    """The kernel's compiles, every phase: its compile seconds (jitwatch_compile_seconds_total, one
    series per kernel) over JournalBuilder.compile's default 0.1 s each."""
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("jitwatch_compile_seconds_total{") and f'kernel="{kernel}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return float(round(total / 0.1))


def assert_identical(live: LiveJournal, directory: Path) -> None:
    for accept in FORMATS:
        got = live.render(accept)
        want = render_uncached(directory, accept)
        assert got[1] == want[1]
        assert got[0].decode() == want[0].decode(), accept


def assert_status_identical(live: LiveJournal, directory: Path, backend: str | None = None) -> None:
    now = 1_700_000_100.0
    doc = live.status(stale_after=60, backend=backend, now=now)
    assert doc is not None
    with Journal(directory, readonly=True) as j:
        want = build_status(j, stale_after=60, backend=backend, now=now)
    assert doc.model_dump() == want.model_dump()


def random_batch(rng: random.Random, b: JournalBuilder, n: int, t: float) -> list:
    """Compile-like events over a few kernels (some folded into _other), ranks, phases and kinds;
    durations with many significant digits so float summation order would show."""
    kernels = ["add", "mul", 'we"ird\\name\nx', "k_ü", "other_a", "other_b", "other_c"]
    events = []
    for i in range(n):
        kind = rng.choice([EventKind.COMPILE] * 6 + [EventKind.AUTOTUNE, EventKind.GRAPH_CAPTURE])
        attrs = {}
        if kind is EventKind.COMPILE and rng.random() < 0.2:
            attrs = {"reason_class": rng.choice(["size mismatch", "dtype mismatch"]), "reason": f"r{i}"}
        if kind is EventKind.COMPILE and rng.random() < 0.2:
            attrs["cache"] = "remote"
        dur = rng.lognormvariate(-2, 1)
        events.append(
            make_event(
                kind,
                t + i * 0.001,
                rank=rng.randrange(3),
                pid=100,
                host=b.host,
                phase=rng.choice([Phase.WARMUP, Phase.SERVING, Phase.STARTUP]),
                backend=rng.choice(["triton", "triton", "torch_compile"]),
                kernel=rng.choice(kernels),
                key=f"k{rng.randrange(5)}",
                start_ts=t - dur,
                duration_s=dur,
                cache_hit=rng.random() < 0.3,
                attrs=attrs,
            )
        )
    return events


def test_incremental_updates_are_byte_identical_to_a_full_build(tmp_path: Path) -> None:
    rng = random.Random(15)
    b = JournalBuilder(tmp_path)
    for rank in range(3):
        b.worker(rank=rank, pid=100)
    b.compile('we"ird\\name\nx')  # named first: its label is escaped in every per-kernel family
    with Journal(tmp_path, max_kernels=4) as j:  # the last kernels share kernel="_other"
        j.write(random_batch(rng, b, 200, b.t0))
    live = LiveJournal(tmp_path)
    assert_identical(live, tmp_path)
    assert live.rebuilds == 1
    for step in range(6):
        with Journal(tmp_path, max_kernels=4) as j:  # another connection commits
            j.write(random_batch(rng, b, rng.randrange(1, 40), b.t0 + 10 + step))
            j.write([make_event(EventKind.HOOK_ERROR, b.t0 + 20 + step, rank=step % 3, host=b.host)])
        assert_identical(live, tmp_path)
    assert live.rebuilds == 1 and live.refreshes == 6  # every change read incrementally
    body = live.render()[0].decode()
    assert 'kernel="_other"' in body
    assert 'kernel="we\\"ird\\\\name\\nx"' in body


def test_retention_replacement_migration_restart_and_two_sidecars(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add", phase=Phase.SERVING)
    live, other = LiveJournal(tmp_path), LiveJournal(tmp_path)  # two sidecars on one journal
    assert compiles(live.render()[0], "add") == compiles(other.render()[0], "add") == 1.0
    for i in range(3):
        b.compile("add", phase=Phase.SERVING, ts=b.t0 + 1 + i)
        assert_identical(live, tmp_path)
    assert_identical(other, tmp_path)
    assert compiles(other.render()[0], "add") == 4.0
    # retention of events this reader has seen: counters do not move, no rebuild
    with Journal(tmp_path, retention_events=1) as j:
        assert j.prune() > 0
    assert_identical(live, tmp_path)
    assert live.rebuilds == 1 and b"jitwatch_journal_events 0.0" in live.render()[0]  # all older than retention
    # events written and retired before this reader saw them: their keys are unknown, so rebuild
    b.compile("mul", phase=Phase.WARMUP, ts=b.t0 + 9)
    b.compile("mul", phase=Phase.WARMUP, ts=b.t0 + 10)
    with Journal(tmp_path, retention_events=0) as j:
        assert j.prune() > 0
    assert_identical(live, tmp_path)
    assert live.rebuilds == 2 and compiles(live.render()[0], "mul") == 2.0
    # a migration (any schema change) rebuilds
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS later_revision (x INTEGER)")
    assert_identical(live, tmp_path)
    assert_status_identical(live, tmp_path)
    assert live.rebuilds == 3
    # a restarted sidecar starts from the journal
    assert LiveJournal(tmp_path).render() == live.render() == render_uncached(tmp_path)
    # the journal moved aside and a fresh one started in its place (as after corruption)
    for suffix in ("", "-wal", "-shm"):
        src = tmp_path / f"{JOURNAL_FILE}{suffix}"
        if src.exists():
            shutil.move(str(src), str(tmp_path / f"aside{suffix}"))
    fresh = JournalBuilder(tmp_path)
    fresh.worker(rank=0)
    fresh.compile("div", phase=Phase.WARMUP)
    body = live.render()[0]
    assert compiles(body, "add") == 0.0 and compiles(body, "div") == 1.0
    assert_identical(live, tmp_path)
    assert_status_identical(live, tmp_path)  # nothing of the old journal's kept for /jit either


def test_unchanged_journal_costs_no_query(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add")
    live = LiveJournal(tmp_path)
    first = live.render()
    assert live.render() == first and live.rebuilds == 1 and live.refreshes == 0
    with Journal(tmp_path) as j:  # a heartbeat changes the worker row only (no event row)
        assert j.heartbeat(b.host, 100, 0, b.t0 + 50)
    assert_identical(live, tmp_path)
    assert b'jitwatch_worker_last_seen_timestamp_seconds{rank="0"} 1.70000005e+09' in live.render()[0]


def test_other_expositions_and_bad_accept_go_through_prometheus_client(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add", phase=Phase.SERVING)
    live = LiveJournal(tmp_path)
    for accept in (
        "application/openmetrics-text; version=2.0.0",
        "text/plain; version=1.0.0; escaping=dots",
        "application/openmetrics-text; version=abc",
        "garbage;;;",
    ):
        assert live.render(accept) == render_uncached(tmp_path, accept), accept


def test_missing_journal_then_created(tmp_path: Path) -> None:
    live = LiveJournal(tmp_path)
    assert b"jitwatch_journal_up 0" in live.render()[0]
    JournalBuilder(tmp_path).compile("add")
    assert b"jitwatch_journal_up 1" in live.render()[0]
    assert_identical(live, tmp_path)


def test_concurrent_scrapes_refresh_once(tmp_path: Path) -> None:
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add")
    live = LiveJournal(tmp_path)
    bodies: list[bytes] = []
    threads = [threading.Thread(target=lambda: bodies.append(live.render()[0])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(bodies)) == 1 and live.rebuilds == 1 and live.refreshes == 0


@pytest.mark.parametrize("backend", [None, "triton", "torch_compile"])
def test_jit_status_from_memory_equals_the_journal_build(tmp_path: Path, backend: str | None) -> None:
    rng = random.Random(7)
    b = JournalBuilder(tmp_path)
    for rank in range(3):
        b.worker(rank=rank, heartbeat_s=5.0)
    b.write(*random_batch(rng, b, 120, b.t0))
    live = LiveJournal(tmp_path)
    now = b.t0 + 100
    for step in range(3):
        doc = live.status(stale_after=60, backend=backend, now=now)
        assert doc is not None
        with Journal(tmp_path, readonly=True) as j:
            want = build_status(j, stale_after=60, backend=backend, now=now)
        assert doc.model_dump() == want.model_dump()
        b.write(*random_batch(rng, b, 15, b.t0 + 200 + step))
        now += 100  # staleness is judged at answer time: ranks go stale without any write
    assert live.rebuilds == 1


def test_a_0_1_worker_writing_legacy_aggregates_is_followed(tmp_path: Path) -> None:
    """A jitwatch 0.1 worker (the frozen 0.1 storage code) writes ``kernel_stats`` into the same
    journal as a current one: the live copy re-reads the legacy rows of the keys its events touched
    (summed with the current rows of the same key) and stays byte-identical to a full build."""
    from tests.store.legacy_v0_1 import events as old_events
    from tests.store.legacy_v0_1 import journal as old_journal

    K, P = old_events.EventKind, old_events.Phase

    def old_write(i: int) -> None:
        with old_journal.Journal(tmp_path) as j:
            j.write(
                [
                    old_events.Event(
                        kind=K.COMPILE,
                        ts=b.t0 + 10 + i,
                        rank=1,
                        pid=7,
                        host="old",
                        phase=P.SERVING,
                        kernel="add",
                        key=f"k{i}",
                        duration_s=0.123456789 * (i + 1),
                    ),
                    old_events.Event(
                        kind=K.AUTOTUNE, ts=b.t0 + 10 + i, rank=1, pid=7, host="old", kernel="mm", duration_s=1.5
                    ),
                ]
            )

    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add", phase=Phase.SERVING, rank=1)  # the key the 0.1 worker also writes
    old_write(0)  # 0.1 opens the file and (re)creates its index: a schema change
    live = LiveJournal(tmp_path)
    assert_identical(live, tmp_path)
    for i in range(1, 4):
        old_write(i)
        assert_identical(live, tmp_path)
        assert_status_identical(live, tmp_path)
    assert live.rebuilds == 1 and live.refreshes >= 3  # the legacy rows were read incrementally
    body = live.render()[0].decode()
    assert 'jitwatch_serving_compiles_total{backend="triton",kernel="add",rank="1"} 5.0' in body
    b.compile("add", phase=Phase.SERVING, rank=1, ts=b.t0 + 30)  # a current writer drops that index again
    assert_identical(live, tmp_path)
    assert_status_identical(live, tmp_path)


def test_a_migration_adding_tables_while_the_sidecar_runs_is_followed(tmp_path: Path) -> None:
    """A journal only a 0.1 worker wrote (revision 1: no compile_stats, duration_hist,
    recompile_stats, specializations) is upgraded in place by a current worker while the sidecar
    runs: the live copy opens the file again and reads the new tables (a Journal reads its table
    set once, at open), so the new worker's compiles are not missing from /metrics and /jit."""
    from tests.store.legacy_v0_1 import events as old_events
    from tests.store.legacy_v0_1 import journal as old_journal

    K, P = old_events.EventKind, old_events.Phase
    with old_journal.Journal(tmp_path) as j:
        j.write(
            [
                old_events.Event(
                    kind=K.COMPILE,
                    ts=1_700_000_000.0,
                    rank=0,
                    pid=7,
                    host="old",
                    phase=P.SERVING,
                    kernel="add",
                    key="k0",
                    duration_s=0.5,
                )
            ]
        )
    live = LiveJournal(tmp_path)
    assert_identical(live, tmp_path)
    b = JournalBuilder(tmp_path)  # a current writer migrates the file to the newest revision
    b.worker(rank=0)
    b.compile("mul", phase=Phase.SERVING, attrs={"reason_class": "size mismatch", "reason": "x"})
    assert_identical(live, tmp_path)
    assert_status_identical(live, tmp_path)
    body = live.render()[0].decode()
    assert 'jitwatch_serving_compiles_total{backend="triton",kernel="mul",rank="0"} 1.0' in body
    assert "jitwatch_recompiles_total{" in body
    b.compile("mul", phase=Phase.SERVING, ts=b.t0 + 5)  # and incrementally after that
    assert_identical(live, tmp_path)
    assert live.rebuilds == 2


def test_listener_only_compiles_in_the_live_copy_incrementally_and_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real listener-only compiles (direct ``triton.compile``, compile-only driver): run 1 compiles
    one in serving, never warmed; the live copy's ``/jit`` (kernels row, coverage entry) and
    ``/metrics`` (ratio 0) equal the builds from the journal. Run 2 (another worker, same journal)
    compiles the same cache hash in warmup: followed incrementally (no rebuild), the key is then
    covered (ratio 1, nothing missing) while the serving compile stays counted; a restarted
    live copy answers the same. (Coverage is recomputed at once here: COVERAGE_REFRESH_S 0.)"""
    import time

    import jitwatch.views.status as status_mod
    from tests.views.listener_only_kernels import journal_of

    monkeypatch.setattr(status_mod, "COVERAGE_REFRESH_S", 0.0)
    jdir = tmp_path / "j"
    now = 4_000_000_000.0

    def settled(live: LiveJournal, want_missing: int) -> tuple[bytes, JitStatus]:
        """The live answers once the background coverage refresh has caught up with the journal."""
        deadline = time.monotonic() + 30
        while True:
            doc = live.status(stale_after=60, now=now)
            body = live.render()[0]
            assert doc is not None
            cov = [k for k in doc.coverage if k.kernel == "add_one"]
            if (cov and len(cov[0].missing) == want_missing) or time.monotonic() > deadline:
                return body, doc
            time.sleep(0.05)

    def check(live: LiveJournal, *, serving: int, warmup: int, missing: list[str], ratio: float) -> None:
        body, doc = settled(live, len(missing))
        assert body == render_uncached(jdir)[0]
        with Journal(jdir, readonly=True) as j:
            assert doc.model_dump() == build_status(j, stale_after=60, now=now).model_dump()
        (row,) = [r for r in doc.kernels if r.name == "add_one"]
        (cov,) = [k for k in doc.coverage if k.kernel == "add_one"]
        assert (row.compiles_serving, row.compiles_warmup) == (serving, warmup)
        assert [m.key for m in cov.missing] == missing and cov.ratio == ratio
        line = f'jitwatch_specialization_coverage_ratio{{backend="triton",kernel="add_one"}} {ratio}'
        assert line in body.decode()

    (key,) = journal_of(tmp_path, serve=[64]).values()
    live = LiveJournal(jdir)
    check(live, serving=1, warmup=0, missing=[key], ratio=0.0)
    assert journal_of(tmp_path, warm=[64]) == {64: key}  # the same code path warmed: the same hash
    check(live, serving=1, warmup=1, missing=[], ratio=1.0)
    assert live.rebuilds == 1 and live.refreshes >= 1
    restarted = LiveJournal(jdir)
    check(restarted, serving=1, warmup=1, missing=[], ratio=1.0)
    assert restarted.render()[0] == live.render()[0]


def test_a_coverage_failure_costs_only_the_coverage_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: coverage_for_journal raising (e.g. a key it cannot parse) leaves /jit
    without coverage and /metrics without the coverage family, in memory and from the journal
    alike (status.guarded_coverage), and never takes either answer down; sqlite3.Error is not
    swallowed there (the caller answers jitwatch_journal_up 0 / falls back)."""
    import jitwatch.views.status as status_mod

    b = JournalBuilder(tmp_path)
    b.compile("add")

    def broken(journal: Journal) -> None:
        raise ValueError("unparsable key")

    monkeypatch.setattr(status_mod, "_coverage_cache", {})
    monkeypatch.setattr(status_mod, "coverage_for_journal", broken)
    live = LiveJournal(tmp_path)
    body, _ = live.render()
    assert b"jitwatch_journal_up 1.0" in body
    assert b"jitwatch_specialization_coverage_ratio{" not in body
    assert_identical(live, tmp_path)
    doc = live.status(stale_after=60, now=1_700_000_100.0)
    assert doc is not None and doc.coverage == []
    assert_status_identical(live, tmp_path)

    def failing(journal: Journal) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(status_mod, "coverage_for_journal", failing)
    with Journal(tmp_path, readonly=True) as j, pytest.raises(sqlite3.Error):
        status_mod.guarded_coverage(j)


def test_a_newer_revision_this_code_may_not_read_is_refused_like_a_full_build(tmp_path: Path) -> None:
    """A newer jitwatch migrates the journal while the sidecar runs to a revision this code may not
    read (``min_reader`` above its revision), adding only a column: the live copy opens the file
    again and refuses it as a fresh open does (``jitwatch_journal_up 0``), not keep answering from
    a connection whose revision check was made before the migration."""
    b = JournalBuilder(tmp_path)
    b.worker(rank=0)
    b.compile("add")
    live = LiveJournal(tmp_path)
    assert_identical(live, tmp_path)
    with sqlite3.connect(tmp_path / JOURNAL_FILE) as conn:
        conn.execute("ALTER TABLE events ADD COLUMN later_revision INTEGER")
        conn.execute("UPDATE meta SET v = '99' WHERE k IN ('revision', 'min_reader')")
    want = render_uncached(tmp_path)[0]
    assert b"jitwatch_journal_up 0" in want
    assert live.render()[0] == want
    assert live.status(stale_after=60) is None  # /jit: the caller's own path reports the refusal


def test_an_unexpected_failure_inside_a_refresh_discards_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh that raises something other than a journal error after changing the in-memory
    copy (here: right after folding the new rows) must not leave that copy to be reused: the
    next answer is a full rebuild, byte-identical to a build from the journal."""
    from jitwatch.views.live import LiveAggregates

    rng = random.Random(7)
    b = JournalBuilder(tmp_path)
    b.worker(rank=0, pid=100)
    with Journal(tmp_path) as j:
        j.write(random_batch(rng, b, 50, b.t0))
    live = LiveJournal(tmp_path)
    assert_identical(live, tmp_path)
    original = LiveAggregates.update

    def update_then_fail(self: LiveAggregates, *args: object, **kwargs: object) -> object:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        raise RuntimeError("injected after the copy changed")

    monkeypatch.setattr(LiveAggregates, "update", update_then_fail)
    with Journal(tmp_path) as j:
        j.write(random_batch(rng, b, 20, b.t0 + 10))
    with pytest.raises(RuntimeError):
        live.render()
    monkeypatch.setattr(LiveAggregates, "update", original)
    assert_identical(live, tmp_path)
    assert live.rebuilds == 2


SLEEPER = (
    "import json; from jitwatch.core.process import process_marker; "
    "print(json.dumps(process_marker()), flush=True); input()"
)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc only")
def test_an_exited_worker_turns_its_worker_info_exited_with_no_journal_change(tmp_path: Path) -> None:
    """Real worker processes (their own markers) serving in a real journal; each SIGKILLed in turn.
    Nothing is written to the journal, yet the next scrape has ``jitwatch_worker_info{state="exited"}``
    for the killed rank (the live path formats that family again when the exited ranks change, not
    only when the aggregates do), byte-identical to a full build in every format."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", SLEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        for _ in range(2)
    ]
    try:
        events = []
        for rank, proc in enumerate(procs):
            assert proc.stdout is not None
            marker = json.loads(proc.stdout.readline())
            attrs = {"mode": "warn", "heartbeat_s": 10.0, "process": marker}
            events += [
                make_event(EventKind.WORKER_START, 1_700_000_000.0, rank=rank, pid=proc.pid, attrs=attrs),
                make_event(EventKind.WARMUP_COMPLETE, 1_700_000_001.0, rank=rank, pid=proc.pid, phase=Phase.SERVING),
            ]
        now = time.time()
        with Journal(tmp_path) as j:
            j.write(events)
            for rank, proc in enumerate(procs):  # each rank compiling, its list refreshed now
                # started "in an hour": its age reads 0 at every render, so renders agree byte for byte
                item = {"backend": "triton", "kernel": "k", "start_ts": now + 3600, "phase": "serving"}
                assert j.set_inflight("node-a", proc.pid, rank, [item], now)

        def inflight(body: bytes) -> list[float]:
            return [
                float(line.rsplit(" ", 1)[1])
                for line in body.decode().splitlines()
                if line.startswith("jitwatch_inflight_compiles{")
            ]

        def states(body: bytes) -> list[str]:
            return [
                line.split('state="', 1)[1].split('"', 1)[0]
                for line in body.decode().splitlines()
                if line.startswith("jitwatch_worker_info{")
            ]

        live = LiveJournal(tmp_path)
        assert states(live.render()[0]) == ["serving", "serving"]
        assert inflight(live.render()[0]) == [1.0, 1.0]
        assert_identical(live, tmp_path)
        versions = live._agg.version if live._agg is not None else None
        for killed in range(2):
            procs[killed].kill()
            procs[killed].wait(10)
            want = ["exited"] * (killed + 1) + ["serving"] * (1 - killed)
            body = live.render()[0]
            assert states(body) == want
            # a dead process's compile is not in flight any more: at once, not after the window
            assert inflight(body) == [0.0] * (killed + 1) + [1.0] * (1 - killed)
            doc = live.status(stale_after=60)
            assert doc is not None and [len(r.inflight) for r in doc.ranks] == [0] * (killed + 1) + [1] * (1 - killed)
            assert_identical(live, tmp_path)
        assert live._agg is not None and live._agg.version == versions  # no journal change was read
        doc = live.status(stale_after=60)
        assert doc is not None and [r.state for r in doc.ranks] == ["exited", "exited"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
