"""One of several processes that need the same FlashInfer JIT module at once (run by the flashinfer
tests): ``python fi_race_worker.py`` with ``JITWATCH_DIR`` (its own) and ``FLASHINFER_WORKSPACE_BASE``
(shared). FlashInfer builds the module in one of them, under its file lock; the others wait, then
load it. Prints one JSON line: this process's flashinfer records."""

from __future__ import annotations

import json
import os

import jitwatch
from jitwatch.core.events import EventKind
from jitwatch.testing import read_events

mon = jitwatch.install(tracer_provider=False)

from flashinfer.jit.activation import gen_act_and_mul_module  # noqa: E402

gen_act_and_mul_module("silu").build_and_load()
mon.flush()
records = [
    {"name": e.kernel, "cache_hit": e.cache_hit, "duration_s": e.duration_s, "attrs": e.attrs}
    for e in read_events(os.environ["JITWATCH_DIR"], EventKind.COMPILE)
    if e.backend == "flashinfer"
]
print(json.dumps({"records": records, "hook_errors": mon.hook_errors}))
