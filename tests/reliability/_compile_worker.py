"""Child worker process with a real Monitor and real Triton compiles (compile-only driver).

Usage: ``python _compile_worker.py <journal_dir> <tag> [--wait]``

Installs :class:`jitwatch.core.monitor.Monitor` on ``journal_dir``, compiles ``scale`` during warmup
with the constexpr ``TAG=<tag>`` (the specialization key then contains ``tag``, e.g. a home
path), prints ``phase1 <json>``; with ``--wait`` reads one line from stdin before compiling a
second specialization in the serving phase (a post-warmup compile); prints ``done <json>``
with the writer's ``written``/``dropped``/``fault`` and exits 0 — a storage fault must never
reach the host.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from jitwatch.backends.triton.compile_only import activate
from jitwatch.config import Settings
from jitwatch.store.writer import JournalWriter
from jitwatch.worker import create_monitor


@triton.jit
def scale(x_ptr, n, TAG: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    off = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + off, mask=off < n)
    tl.store(x_ptr + off, x * 2, mask=off < n)


def stats(mon: Any) -> str:
    w = mon.sink
    assert isinstance(w, JournalWriter)
    return json.dumps({"written": w.written_total, "dropped": w.dropped_total, "fault": w.fault})


def main() -> None:
    directory, tag = Path(sys.argv[1]), sys.argv[2]
    wait = "--wait" in sys.argv
    activate()
    mon = create_monitor(Settings(journal_dir=directory), mode="warn", tracer_provider=False).install()
    x = torch.empty(64)
    with mon.warmup():
        scale.warmup(x, 64, TAG=tag, BLOCK=16, grid=(1,))
    mon.flush(30)
    print("phase1", stats(mon), flush=True)
    if wait:
        sys.stdin.readline()
    with mon.request():
        scale.warmup(x, 64, TAG=tag, BLOCK=32, grid=(1,))
    mon.flush(30)
    mon.uninstall()
    print("done", stats(mon), flush=True)


if __name__ == "__main__":
    main()
