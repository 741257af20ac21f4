"""Coverage counts a key warm only on the ranks that compiled it before serving: each rank is its own
process, with its own caches, so another rank's warmup covers nothing on it (real compiles,
compile-only driver, two workers sharing one journal)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import EventKind, Phase
from jitwatch.core.identity import WorkerIdentity
from jitwatch.store.journal import Journal
from jitwatch.testing import JournalBuilder, fresh_kernel_cache, monitored
from jitwatch.views.coverage import coverage_for_journal, coverage_from_events
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf


def _copy(block: int) -> None:
    kf.scale_copy.warmup(torch.zeros(1024), torch.empty(1024), 1000, BLOCK=block, grid=(1,))


def _rank(journal: Path, rank: int, warm: list[int], serve: list[int]) -> None:
    with monitored(journal_dir=journal, rank=rank) as h:
        fresh_kernel_cache(kf.scale_copy)
        with h.monitor.warmup():
            for block in warm:
                _copy(block)
        for block in serve:
            _copy(block)
        h.monitor.flush()


def _coverage(journal: Path) -> tuple[int, dict[str, object]]:
    out = CliRunner().invoke(app, ["coverage", "--journal-dir", str(journal), "--json", "--require-complete"])
    return out.exit_code, json.loads(out.stdout)


@pytest.mark.parametrize("rank1_warms", [[], [128]], ids=["rank1-warms-nothing", "rank1-warms-another-key"])
def test_a_key_warmed_on_one_rank_and_compiled_in_serving_on_another_is_missing(
    tmp_path: Path, rank1_warms: list[int]
) -> None:
    """Rank 0 warms BLOCK=256; rank 1's warmup does not (nothing, or BLOCK=128), and rank 1 compiles
    BLOCK=256 in serving. Coverage said 1/1 (100%), 'complete', and --require-complete passed
    (exit 0) while `jitwatch why` showed rank 1's serving compile: the key counted as warm for every
    rank."""
    journal = tmp_path / "j"
    _rank(journal, 0, warm=[256], serve=[])
    _rank(journal, 1, warm=rank1_warms, serve=[256])
    code, report = _coverage(journal)
    assert code == 1, report
    (k,) = [k for k in report["kernels"] if k["kernel"] == "scale_copy"]  # type: ignore[union-attr]
    assert (k["covered"], k["total"]) == (len(rank1_warms), len(rank1_warms) + 1), k
    (missing,) = k["missing"]
    expect = "on rank 1: " + (
        "never warmed (no compile of this kernel before serving)" if not rank1_warms else "BLOCK: constexpr 128 → 256"
    )
    assert missing["reason"].startswith(expect), missing["reason"]
    assert "rank 0 compiled this key before serving (each rank compiles its own)" in missing["reason"]
    assert missing["fixes"], missing


def test_a_key_every_serving_rank_warmed_is_covered(tmp_path: Path) -> None:
    """The same key warmed on both ranks, served on rank 1: covered, complete (exit 0)."""
    journal = tmp_path / "j"
    _rank(journal, 0, warm=[256], serve=[])
    _rank(journal, 1, warm=[256], serve=[256])  # in the in-memory cache: no serving compile
    code, report = _coverage(journal)
    assert code == 0, report
    with Journal(journal, readonly=True) as j:
        assert coverage_for_journal(j).complete


def test_other_backends_count_a_key_warm_per_rank(tmp_path: Path) -> None:
    """A torch.compile graph key warmed on rank 0 and compiled in serving on rank 1 is missing
    (coverage by exact key): it read 1/1 and complete too."""
    b = JournalBuilder(tmp_path / "j")
    for rank in (0, 1):
        b.worker(rank=rank, backends=("torch_compile",))
    b.compile("f", backend="torch_compile", phase=Phase.WARMUP, key="0/0", rank=0, ts=b.t0 + 1)
    b.compile(
        "f",
        backend="torch_compile",
        phase=Phase.SERVING,
        key="0/0",
        rank=1,
        ts=b.t0 + 5,
        attrs={"reason": "never warmed (no compile of this function before serving)", "reason_kind": "never_warmed"},
    )
    code, report = _coverage(tmp_path / "j")
    assert code == 1, report
    (k,) = report["kernels"]  # type: ignore[misc]
    assert (k["covered"], k["total"], k["warmup_keys"], k["serving_keys"]) == (0, 1, 1, 1), k


def _life(journal: Path, rank: int, pid: int, host: str, warm: list[int], serve: list[int]) -> None:
    """One worker process of ``rank`` (its pid and host as a restarted or another host's worker has
    them), real compiles into the shared journal."""
    with monitored(journal_dir=journal, identity=WorkerIdentity(rank=rank, pid=pid, host=host)) as h:
        fresh_kernel_cache(kf.scale_copy)
        with h.monitor.warmup():
            for block in warm:
                _copy(block)
        for block in serve:
            _copy(block)
        h.monitor.flush()


@pytest.mark.parametrize(
    ("lives", "expect"),
    [
        (
            [(1, 1001, "node-a", [256], []), (1, 1002, "node-a", [], [256])],
            "on rank 1 (pid 1002): never warmed (no compile of this kernel before serving); rank 1 (pid 1001)",
        ),
        (
            [(0, 2001, "node-a", [256], []), (0, 2002, "node-b", [], [256])],
            "on rank 0 (pid 2002 on node-b): never warmed (no compile of this kernel before serving); rank 0 (pid"
            " 2001 on node-a)",
        ),
    ],
    ids=["restarted-without-warmup", "same-rank-on-two-hosts"],
)
def test_an_earlier_worker_or_another_hosts_warmup_of_the_rank_covers_nothing(
    tmp_path: Path, lives: list[tuple[int, int, str, list[int], list[int]]], expect: str
) -> None:
    """Rank 1's worker warms BLOCK=256 and is restarted (new pid); the new worker skips warmup and
    compiles BLOCK=256 in serving (its caches started empty; the worker's own warning said 'never
    warmed'). Or rank 0 on two hosts sharing a journal directory, one of which warmed. Coverage
    said 1/1, complete, exit 0: a key counted warm for every process of the rank id."""
    journal = tmp_path / "j"
    for life in lives:
        _life(journal, *life)
    code, report = _coverage(journal)
    assert code == 1, report
    (k,) = report["kernels"]  # type: ignore[misc]
    assert (k["covered"], k["total"]) == (0, 1), k
    (missing,) = k["missing"]
    assert missing["reason"].startswith(expect), missing["reason"]


def test_a_restarted_worker_that_warms_what_its_predecessor_compiled_in_serving_is_covered(tmp_path: Path) -> None:
    """The fix applied: rank 1's worker compiled BLOCK=256 in serving; the restarted worker (new pid)
    compiles it in warmup: covered (what rank 1 runs now), for Triton and by exact key alike."""
    journal = tmp_path / "j"
    _life(journal, 1, 3001, "node-a", [], [256])
    _life(journal, 1, 3002, "node-a", [256], [])
    code, report = _coverage(journal)
    assert code == 0, report
    b = JournalBuilder(tmp_path / "k")
    b.worker(rank=1, pid=101, backends=("torch_compile",))
    b.compile("f", backend="torch_compile", phase=Phase.SERVING, key="0/0", rank=1, pid=101, ts=b.t0 + 1)
    b.worker(rank=1, pid=102, ts=b.t0 + 5, backends=("torch_compile",))
    b.compile("f", backend="torch_compile", phase=Phase.WARMUP, key="0/0", rank=1, pid=102, ts=b.t0 + 10)
    code, report = _coverage(tmp_path / "k")
    assert code == 0, report
    # the other way round (warmed, restarted, compiled in serving) is missing by exact key too
    b = JournalBuilder(tmp_path / "m")
    b.worker(rank=1, pid=101, backends=("torch_compile",))
    b.compile("f", backend="torch_compile", phase=Phase.WARMUP, key="0/0", rank=1, pid=101, ts=b.t0 + 1)
    b.worker(rank=1, pid=102, ts=b.t0 + 5, backends=("torch_compile",))
    b.compile("f", backend="torch_compile", phase=Phase.SERVING, key="0/0", rank=1, pid=102, ts=b.t0 + 10)
    code, report = _coverage(tmp_path / "m")
    assert code == 1, report


def test_a_crash_looping_rank_is_linear_and_named_in_a_bounded_line(tmp_path: Path) -> None:
    """10,000 workers of rank 0 warmed a key (one real compile, cloned: pids and times differ) and
    10,000 later ones compiled it in serving without warming it (a crash loop). Each serving
    process is judged in O(1) (the newest warm time per rank, not a scan of every warm process) and
    the reason names at most 8 processes each side: checked by pid against every warm process,
    this took 90 s on a 20,000-event read and named 10,000 pids in one line."""
    journal = tmp_path / "j"
    _life(journal, 0, 1, "node-a", [256], [])
    with Journal(journal, readonly=True) as j:
        (real,) = j.events(kind=EventKind.COMPILE)
    events = [
        real.model_copy(update={"id": None, "pid": pid0 + i, "ts": real.ts + t0 + i * 1e-3, "phase": phase})
        for phase, pid0, t0 in ((Phase.WARMUP, 10_000, 0), (Phase.SERVING, 30_000, 100))
        for i in range(10_000)
    ]
    started = time.monotonic()
    (k,) = coverage_from_events(events).kernels
    assert time.monotonic() - started < 30
    (missing,) = k.missing
    assert (k.covered, k.total) == (0, 1)
    assert missing.reason.startswith("on rank 0 (pid 30000), rank 0 (pid 30001), "), missing.reason
    assert missing.reason.count("pid ") == 16 and missing.reason.count(", …") == 2, missing.reason
