"""Triton kernels that jitwatch ships for its warmup, demo and tests.

* :mod:`jitwatch.kernels.slot_mapping` — vLLM-style slot mapping (the kernel behind the
  "recompiles per request size" bug), its torch reference and a launcher that compiles on CPU.
* :mod:`jitwatch.kernels.kv_blocks` — zeroing freed KV-cache blocks: a kernel that engine
  warmups typically never reach, used by the demo to show one serving-phase compile.

Importing these modules imports Triton (and the launchers import torch).
"""
