"""A worker run for test_manifest's re-export test, in a process of its own (kernels compile
once per process): warmup replays ``JITWATCH_MANIFEST`` (if set), then serving zeroes KV blocks of
the dtype ``argv[2]`` in the journal ``argv[1]`` (compile-only Triton)."""

import sys

import torch

from jitwatch.config import Settings
from jitwatch.kernels.kv_blocks import zero_kv_blocks
from jitwatch.testing import monitored
from jitwatch.warmup.replay import replay_from_env

with monitored(journal_dir=sys.argv[1]) as h:
    with h.monitor.warmup():
        replay_from_env(h.monitor, settings=Settings.from_env())
    zero_kv_blocks(torch.ones(8, 1024, dtype=getattr(torch, sys.argv[2])), torch.tensor([1, 2], dtype=torch.int32))
    assert h.monitor.flush()
