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
