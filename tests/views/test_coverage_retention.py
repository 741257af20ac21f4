"""Coverage after retention retired the warmup's compiles: the aggregates still count them, the event
log no longer holds them (real compiles, compile-only driver, a real journal pruned by retention)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from typer.testing import CliRunner

from jitwatch.cli import app
from jitwatch.core.events import EventKind, Phase
from jitwatch.core.identity import WorkerIdentity
from jitwatch.store.journal import Journal
from jitwatch.testing import fresh_kernel_cache, monitored
from tests._paths import TRITON_TESTS

sys.path.insert(0, str(TRITON_TESTS))
import kernels_fieldcases as kf


def test_a_serving_compile_keeps_its_reason_after_retention_retired_the_warmup(tmp_path: Path) -> None:
    """Warmup compiles scale_copy (BLOCK 256 and 64, aligned); serving compiles it for an offset
    view. Once retention retired the two warmup compiles, coverage read the serving key as 'never
    warmed (no compile of this kernel before serving)' with the never-warmed fix, while `jitwatch
    why` (the reason journaled when it compiled) said 'dst_ptr: *fp32 aligned16 → unaligned'. Now
    the kernel says how many compiles before serving are gone (warmup_pruned, and a note) and the
    missing key has the journaled reason and fix."""
    journal = tmp_path / "j"
    src, dst = torch.zeros(1024), torch.empty(1024)
    with monitored(journal_dir=journal) as h:
        fresh_kernel_cache(kf.scale_copy)
        with h.monitor.warmup():
            kf.scale_copy.warmup(src, dst, 1000, BLOCK=256, grid=(1,))
            kf.scale_copy.warmup(src, dst, 1000, BLOCK=64, grid=(1,))
        kf.scale_copy.warmup(src, dst[1:], 1000, BLOCK=256, grid=(1,))
        h.monitor.flush()
    with Journal(journal, retention_seconds=100) as j:
        (served,) = [e for e in j.events(kind=EventKind.COMPILE) if e.phase is Phase.SERVING]
        j.prune(now=served.ts + 100 - 1e-3)  # retires everything older than the serving compile
        assert not [e for e in j.events(kind=EventKind.COMPILE) if e.phase is not Phase.SERVING]
    journaled = served.attrs["reason"]
    assert journaled == "dst_ptr: *fp32 aligned16 → unaligned", journaled

    out = CliRunner().invoke(app, ["coverage", "--journal-dir", str(journal), "--json"])
    (k,) = json.loads(out.stdout)["kernels"]
    assert k["warmup_pruned"] == 2, k
    (m,) = k["missing"]
    assert m["reason"].startswith(journaled + " (as diagnosed when it compiled: 2 compiles before serving pruned)"), m
    assert m["reason_kind"] == "argument" and "do_not_specialize_on_alignment" in m["fixes"][0], m
    text = CliRunner().invoke(app, ["coverage", "--journal-dir", str(journal)], env={"COLUMNS": "200"}).stdout
    assert "never warmed" not in text, text
    assert "(compiles before serving no longer in the events read (retention, or past the newest read):" in text


def test_the_kept_reason_is_the_one_of_a_process_that_missed_the_key(tmp_path: Path) -> None:
    """Rank 2 warms BLOCK=128; rank 1's first worker compiles BLOCK=256 in serving ('never
    warmed'), its restarted worker warms BLOCK=256 (covered for rank 1); rank 2 then compiles
    BLOCK=256 in serving ('BLOCK: constexpr 128 → 256'). Retention retires rank 2's warmup. The
    missing key kept the oldest serving compile's reason, rank 1's 'never warmed', whose process
    the key is warm for; now rank 2's own, as `jitwatch why` gives it."""
    journal = tmp_path / "j"
    src, dst = torch.zeros(1024), torch.empty(1024)

    def life(rank: int, pid: int, warm: list[int], serve: list[int]) -> None:
        with monitored(journal_dir=journal, identity=WorkerIdentity(rank=rank, pid=pid)) as h:
            fresh_kernel_cache(kf.scale_copy)
            with h.monitor.warmup():
                for block in warm:
                    kf.scale_copy.warmup(src, dst, 1000, BLOCK=block, grid=(1,))
            for block in serve:
                kf.scale_copy.warmup(src, dst, 1000, BLOCK=block, grid=(1,))
            h.monitor.flush()

    life(2, 201, [128], [])  # retired below
    life(1, 101, [], [256])  # 'never warmed'; rank 1's next worker warms it: covered for rank 1
    life(1, 102, [256], [])
    life(2, 201, [128], [256])  # 'BLOCK: constexpr 128 → 256'
    with Journal(journal, retention_seconds=100) as j:
        (first,) = [e for e in j.events(kind=EventKind.COMPILE) if e.rank == 1 and e.phase is Phase.SERVING]
        j.prune(now=first.ts + 100 - 1e-3)  # retires rank 2's first warmup compile only
        assert len([e for e in j.events(kind=EventKind.COMPILE) if e.phase is not Phase.SERVING]) == 2
    out = CliRunner().invoke(app, ["coverage", "--journal-dir", str(journal), "--json"])
    (k,) = json.loads(out.stdout)["kernels"]
    assert k["warmup_pruned"] == 1, k
    (m,) = k["missing"]
    assert m["reason"].startswith("BLOCK: constexpr 128 → 256 (as diagnosed when it compiled"), m["reason"]
